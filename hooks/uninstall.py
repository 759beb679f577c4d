"""``computedomains hooks uninstall``: leave the cluster clean before Helm deletes the release.

Helm runs it before ``helm uninstall`` (Argo CD: PreDelete). It first makes sure that is what
runs it (:func:`cleanup.uninstalling`: Helm's record of its revision says ``uninstalling``, or
Argo CD marked its Job): a chart rendered with its hooks and applied as plain objects starts
this Job at once, and then it changes nothing. It refuses while ComputeDomains have running
workload pods, unless ``--force``. Then it stops the components that would put back what it
removes (the controller re-adds its finalizer, node-init its condition and label), removes our
finalizer from every ComputeDomain, our labels, condition and taint from every node and the
controller's placement turn, and keeps the CRDs, printing the command that deletes them.
Running it twice is harmless.
"""

from __future__ import annotations

import dataclasses

from computedomains import flaggroups, flags, waiting
from computedomains.api import constants, domainview, placement, resources

from . import cleanup, client, kubeio, ownership
from .report import Report, Severity, Stop

HOOK = "uninstall"
POLL_SECONDS = 1.0
WRITERS = ("controller", "kubelet-plugin", "imex-agent")
"""Components that write what uninstall removes; the webhook keeps running (reads convert)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings(client.ReleaseConnection):
    """The release, ``--force`` and how long to wait for the components to stop."""

    force: bool = flags.switch("--force", help="uninstall even while domains have running pods")
    hook_jobs: tuple[str, ...] = flags.option(
        "--hook-jobs",
        default="",
        type=flags.names,
        help="comma-separated Jobs of the other hooks to delete (Helm never deletes hooks)",
    )
    release_record: str = flags.option(
        "--release-record",
        default="",
        help="the Helm release record (Secret or ConfigMap) of the revision this hook is from",
    )
    job: str = flags.option("--job", default="", help="this hook's own Job (Argo CD marks it)")
    require_owner: bool = flags.switch(
        "--require-owner",
        default=True,
        negatable=True,
        help="with --release-record or --job (the chart passes both): act only when Helm or "
        "Argo CD runs this hook (value uninstall.requireOwner); run by hand, it acts",
    )
    timeout_seconds: float = flags.field(flaggroups.TIMEOUT_SECONDS)


STOP = Stop(
    (kubeio.ApiError, TimeoutError),
    "cleanup stopped",
    "fix the cause and run the uninstall again; every step is safe to repeat",
    exit_code=2,
)


def run(api: kubeio.Api, args: Settings, report: Report) -> int:
    """Refuse, or stop the writers and clean up; 1 on a refusal, 2 when the API refused."""
    # Only the chart names the record and the Job; run by hand, without them, it acts.
    required = args.require_owner and bool(args.release_record or args.job)
    owner = cleanup.uninstalling(
        release=args.release, record=_release_record(api, args),
        argo_tracked=_argo_tracked(api, args), required=required,
    )  # fmt: skip
    report.finding(owner)
    if owner.severity is Severity.WARN:
        return 0
    if owner.severity is Severity.FAIL:
        report.step("refused: nothing was changed")
        return 1
    collection = _domains_path(api)
    domains = [domainview.Domain.peek(o) for o in api.list_items(collection)] if collection else []
    pods = [_pod(p) for p in api.list_items(resources.PODS.path())] if domains else []
    verdict = cleanup.check_live(domains, pods, force=args.force, release=args.release)
    report.finding(verdict)
    if verdict.severity is Severity.FAIL:
        report.step("refused: nothing was changed")
        return 1
    _stop_writers(api, args, report)
    if collection is not None:
        _release_domains(api, collection, domains, report)

    def clean_pass() -> bool:
        changed = [_clean_node(api, n, report) for n in api.list_items(resources.NODES.path())]
        return not any(changed)

    # Until a pass finds nothing: a writer that is still stopping may put a label back.
    waiting.until(
        "a pass over the nodes that finds nothing of ours left",
        clean_pass,
        timeout=args.timeout_seconds,
        interval=POLL_SECONDS,
    )
    # The controller's placement turn: its writer is stopped, so it would only go stale.
    turn = resources.CONFIG_MAPS.path(placement.TURN_CONFIGMAP, namespace=args.namespace)
    if api.delete(turn):
        report.step(f"deleted ConfigMap {placement.TURN_CONFIGMAP}")
    for job in args.hook_jobs:
        # Helm keeps hook Jobs (kept for their logs) after the release is gone; this is the
        # last hook to run, so it takes them along (their pods follow).
        if api.delete(resources.JOBS.path(job, namespace=args.namespace)):
            report.step(f"deleted hook Job {job}")
    report.step(
        "done; the CRDs and every ComputeDomain are kept. To delete them (and every "
        f"ComputeDomain with them): {cleanup.CRD_DELETE_COMMAND}"
    )
    return 0


def _release_domains(
    api: kubeio.Api, collection: str, domains: list[domainview.Domain], report: Report
) -> None:
    """Take our finalizer off every ComputeDomain that has it."""
    for domain in domains:
        kept = cleanup.finalizers_without_ours(domain)
        if kept is None:
            continue
        path = f"{_namespaced(collection, domain.namespace)}/{domain.name}"
        try:
            api.merge_patch(path, {"metadata": {"finalizers": kept or None}})
        except kubeio.NotFound:
            # Deleted since the listing (its namespace going, say): nothing left to release.
            report.step(f"ComputeDomain {domain.namespace}/{domain.name}: already gone")
            continue
        report.step(
            f"ComputeDomain {domain.namespace}/{domain.name}: removed finalizer "
            f"{constants.FINALIZER}"
        )


def _release_record(api: kubeio.Api, args: Settings) -> cleanup.ReleaseRecord | None:
    """Helm's record of this hook's revision (storage driver secret or configmap), if any."""
    if not args.release_record:
        return None
    for resource in (resources.SECRETS, resources.CONFIG_MAPS):
        obj = api.get_or_none(resource.path(args.release_record, namespace=args.namespace))
        if obj is not None:
            return cleanup.ReleaseRecord(args.release_record, kubeio.labels(obj))
    return None


def _argo_tracked(api: kubeio.Api, args: Settings) -> bool:
    """Whether Argo CD applied this hook's Job (it marks every object it applies)."""
    if not args.job:
        return False
    job = api.get_or_none(resources.JOBS.path(args.job, namespace=args.namespace))
    if job is None:
        return False
    marks = {**kubeio.labels(job), **kubeio.annotations_of(job)}
    return any(key in marks for key in cleanup.ARGO_TRACKING)


def _namespaced(collection: str, namespace: str) -> str:
    """The namespaced collection of ``collection`` (``/apis/<gv>/<plural>``) in ``namespace``."""
    root, plural = collection.rsplit("/", 1)
    return f"{root}/namespaces/{namespace}/{plural}"


def _domains_path(api: kubeio.Api) -> str | None:
    # The group's preferred (storage) version: reading it needs no conversion webhook.
    group = api.get_or_none(f"/apis/{constants.GROUP}")
    if group is None:
        return None
    version = (group.get("preferredVersion") or {}).get("groupVersion") or constants.API_VERSION
    return f"/apis/{version}/{constants.COMPUTE_DOMAIN_PLURAL}"


def _pod(obj: kubeio.Obj) -> cleanup.Pod:
    claims = (obj.get("spec") or {}).get("resourceClaims") or []
    return cleanup.Pod(
        namespace=str(obj["metadata"]["namespace"]),
        name=kubeio.name(obj),
        phase=str((obj.get("status") or {}).get("phase", "")),
        templates=tuple(
            str(c["resourceClaimTemplateName"])
            for c in claims
            if c.get("resourceClaimTemplateName")
        ),
    )


def _stop_writers(api: kubeio.Api, args: Settings, report: Report) -> None:
    selector = (
        f"{ownership.NAME_LABEL}={ownership.CHART_NAME},{ownership.INSTANCE_LABEL}={args.release},"
        f"{constants.COMPONENT_LABEL} in ({','.join(WRITERS)})"
    )
    for kind, resource in (
        ("DaemonSet", resources.DAEMON_SETS),
        ("Deployment", resources.DEPLOYMENTS),
    ):
        for obj in api.list_items(resource.path(namespace=args.namespace), label_selector=selector):
            path = resource.path(kubeio.name(obj), namespace=args.namespace)
            if api.delete(path, propagation="Foreground"):
                report.step(f"stopping {kind} {kubeio.name(obj)}")
    pods_path = resources.PODS.path(namespace=args.namespace)
    try:
        waiting.until(
            "the controller, kubelet plugin and IMEX agent pods to be gone",
            lambda: next(api.list_items(pods_path, label_selector=selector), None) is None,
            timeout=args.timeout_seconds,
            interval=POLL_SECONDS,
        )
    except waiting.WaitTimeout as exc:
        try:
            left = list(api.list_items(pods_path, label_selector=selector))
        except kubeio.ApiError:
            raise exc from None
        if left:
            raise waiting.WaitTimeout(
                f"{exc}; still there: {cleanup.remaining_pods(left)}"
            ) from None
    report.step("the controller, kubelet plugin and IMEX agent pods are gone")


CONFLICT_RETRIES = 5
"""Re-reads of a node whose taints changed under the patch (kwok, node-init write nodes too)."""


def _clean_node(api: kubeio.Api, node: kubeio.Obj, report: Report) -> bool:
    """Remove what is ours from ``node``; whether there was anything."""
    path = resources.NODES.path(kubeio.name(node))
    for _ in range(CONFLICT_RETRIES):
        try:
            return _patch_node(api, node, report)
        except kubeio.Conflict:
            node = api.get(path)
    return _patch_node(api, node, report)


def _patch_node(api: kubeio.Api, node: kubeio.Obj, report: Report) -> bool:
    state = cleanup.NodeState(
        name=kubeio.name(node),
        labels=kubeio.labels(node),
        has_condition=kubeio.condition(node, constants.FABRIC_CONDITION) is not None,
        taints=tuple((node.get("spec") or {}).get("taints") or ()),
    )
    todo = cleanup.node_cleanup(state)
    if todo.empty:
        return False
    path = resources.NODES.path(state.name)
    if todo.labels or todo.taints is not None:
        patch: kubeio.Obj = {"metadata": {}}
        if todo.labels:
            patch["metadata"]["labels"] = dict.fromkeys(todo.labels)
        if todo.taints is not None:
            # Taints have no merge key: the list is replaced, so the write is guarded by the
            # resourceVersion it was computed from (a conflict re-reads the node).
            patch["metadata"]["resourceVersion"] = node["metadata"]["resourceVersion"]
            patch["spec"] = {"taints": todo.taints}
        api.strategic_patch(path, patch)
    if todo.condition:
        body = {
            "status": {"conditions": [{"type": constants.FABRIC_CONDITION, "$patch": "delete"}]}
        }
        api.strategic_patch(resources.NODES.path(state.name, subresource="status"), body)
    report.step(f"node {state.name}: removed {todo.describe()}")
    return True
