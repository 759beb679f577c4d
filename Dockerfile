# The one image every component runs from (controller, kubelet plugin, IMEX agent, node-init,
# hooks). Same install steps as CI: build the wheel, install it; nothing else.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
COPY hooks ./hooks
COPY node-init ./node-init
RUN python -m pip install --no-cache-dir "build>=1.2,<2" \
 && python -m build --wheel --outdir /dist .

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="compute-domains" \
      org.opencontainers.image.description="ComputeDomains for multi-node NVLink Kubernetes clusters" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=wheel /dist/*.whl /tmp/wheels/
RUN python -m pip install --no-cache-dir /tmp/wheels/*.whl \
 && rm -rf /tmp/wheels \
 && useradd --uid 65532 --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin computedomains
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# Non-root by default; the chart sets the user per component and a read-only root filesystem.
USER 65532:65532
ENTRYPOINT ["computedomains"]
