"""The product image, built without Docker: Debian packages, the locked wheels, the product.

One OCI index holds an amd64 and an arm64 manifest. The root filesystem comes from Debian
bookworm packages that ``mmdebstrap`` resolves and downloads and that :mod:`cdsim.image.debian`
unpacks (no maintainer script runs, so a foreign architecture builds on any host); the Python
dependencies come from ``image/requirements.lock`` (hashes required) through pip's
cross-platform install; the product is the wheel built from the revision. Every byte is
derived from the revision and the mirror's packages, so one revision builds to one digest.

Modules: :mod:`~cdsim.image.arch` (the two platforms), :mod:`~cdsim.image.spec` (user,
entrypoint, labels), :mod:`~cdsim.image.deb` and :mod:`~cdsim.image.debian` (packages),
:mod:`~cdsim.image.wheels` (the lock and pip), :mod:`~cdsim.image.prune`,
:mod:`~cdsim.image.bytecode` (shipped ``.pyc``),
:mod:`~cdsim.image.elf` and :mod:`~cdsim.image.checks` (what may ship), :mod:`~cdsim.image.layer`
and :mod:`~cdsim.image.oci` (the deterministic writer), :mod:`~cdsim.image.source`,
:mod:`~cdsim.image.recipe` and :mod:`~cdsim.image.cache` (a build per revision), and
:mod:`~cdsim.image.runc` (running a root filesystem the way the chart runs a container).
"""
