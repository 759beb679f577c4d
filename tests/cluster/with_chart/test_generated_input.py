"""Generated bad input sent to the real API server, with the chart's webhook and components
running: ComputeDomain specs of both versions, channel template names, the opaque configs of
claims written by hand, ComputeDomainClique objects, and the reserved annotations and the pod
label ``computedomains.io/domain``.

Each example (tests/support/badinput.py: valid objects with one field made wrong, and the
field recorded) is accepted and works, or is refused with that field named. Admission is
checked by server-side dry runs; the few objects the components must act on are created for
real and removed: claims (the controller names what is wrong in an Event) and cliques (the
controller, the kubelet plugins and the IMEX agents of their clique read them). Throughout, no
chart pod restarts, the webhook and the controller still answer, and a ComputeDomain formed
before stays Ready with the same member and slot.

Each test prints one line: examples, accepted (and of those, not working), refused naming the
field, refused without naming it, errors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import uuid
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from computedomains import waiting
from computedomains.api import constants, resources
from tests.support import badinput, clusters, domains, kube
from tests.support.badinput import Entry, Example, Outcome

pytestmark = pytest.mark.cluster

BYSTANDER_NODE = "gb200-r0-n02"
"""The node of the domain formed before the examples, which must not notice them."""
SPARE_NODE = "gb200-r0-n04"
"""A node of the same clique that the hand-written clique objects name (no domain runs there)."""
MARK = "compute-domains.test/generated"
"""Label on the clique objects written here, to remove them all afterwards."""
REQUEST_TIMEOUT = 30

V1, V2 = constants.VERSION, constants.VERSION_V1BETA2
DOMAINS = {v: resources.Resource(constants.GROUP, v, constants.COMPUTE_DOMAIN_PLURAL, True)
           for v in (V1, V2)}  # fmt: skip

# Examples per input. Dry runs take a few milliseconds; the real creates are the few the
# components must react to.
V1BETA2_SPECS = 500
V1BETA1_SPECS = 400
TEMPLATE_NAMES = 300
CLAIMS_CREATED = 40
CLAIMS_ADMITTED = 300
CLIQUES_CREATED = 30
CLIQUES_ADMITTED = 300
PODS_ADMITTED = 250


def _settings(budget: int) -> settings:
    return settings(
        max_examples=budget,
        deadline=None,
        derandomize=True,
        database=None,
        # A failing example is reported as it was found: shrinking would resend hundreds.
        phases=(Phase.explicit, Phase.generate),
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def run(
    label: str,
    strategy: st.SearchStrategy[Example],
    budget: int,
    check: Callable[[Example], None],
    *,
    regressions: tuple[Example, ...] = (),
) -> None:
    """``check`` the ``regressions`` (failing examples found once, fixed since), then
    ``budget`` generated examples; ``label`` seeds the generation, so each run has its own."""
    for example in regressions:
        check(example)

    @seed(zlib.crc32(label.encode()))
    @_settings(budget)
    @given(strategy)
    def each(example: Example) -> None:
        check(example)

    each()


@dataclasses.dataclass(frozen=True)
class Answer:
    """The API server's answer: HTTP status (0: none) and body (a Status when refused)."""

    status: int
    body: dict[str, Any]


def post(api: client.ApiClient, path: str, body: dict[str, Any], *, dry_run: bool = True) -> Answer:
    """POST ``body`` as JSON, as any client may write it (strict field validation, as kubectl
    asks for): the generated client would first coerce it into its own models."""
    query = [("fieldValidation", "Strict")] + ([("dryRun", "All")] if dry_run else [])
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    try:
        request = api.param_serialize(
            "POST", path, query_params=query, header_params=headers, body=body,
            auth_settings=["BearerToken"],
        )  # fmt: skip
        response = api.call_api(*request, _request_timeout=REQUEST_TIMEOUT)
        data = response.read()  # type: ignore[no-untyped-call]
    except (ApiException, urllib3.exceptions.HTTPError) as exc:
        return Answer(0, {"message": f"no answer: {exc}"})
    try:
        decoded = json.loads(data)
    except ValueError:
        decoded = None
    if not isinstance(decoded, dict):
        decoded = {"message": bytes(data).decode(errors="replace")[:2000]}
    return Answer(int(response.status), decoded)


# -- what must not notice -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Bystander:
    """A ComputeDomain formed before the examples, and the chart's pods as they were then."""

    namespace: str
    name: str
    uid: str
    nodes: frozenset[str]
    slots: dict[str, Any]
    """Index of each daemon in the domain's clique objects, by node."""
    restarts: dict[str, int]
    """Restarts of each chart pod Running then, by name."""


def _chart_pods(api: client.ApiClient, chart: str) -> dict[str, tuple[str, int]]:
    """(phase, container restarts) of each pod of the release, by name."""
    pods: dict[str, tuple[str, int]] = {}
    for pod in client.CoreV1Api(api).list_namespaced_pod(chart).items:
        restarts = [int(c.restart_count or 0) for c in pod.status.container_statuses or []]
        pods[str(pod.metadata.name)] = (str(pod.status.phase), sum(restarts))
    return pods


def _slots(api: client.ApiClient, chart: str, uid: str) -> dict[str, Any]:
    return {
        str(d.get("nodeName")): d.get("index")
        for clique in domains.cliques(api, chart, uid)
        for d in clique.get("daemons") or []
    }


@pytest.fixture(scope="module")
def bystander(chart: str, cluster: clusters.TestCluster) -> Iterator[Bystander]:
    """A ComputeDomain with a pod on :data:`BYSTANDER_NODE`, Ready; deleted with its namespace."""
    api = cluster.api()
    core = client.CoreV1Api(api)
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": namespace,
                                        "labels": {"compute-domains.test": "true"}}})  # fmt: skip
    try:
        kube.wait_for_default_service_account(api, namespace)
        domain = domains.create_domain(api, namespace)
        pods = domains.workers(api, namespace, domain, [BYSTANDER_NODE])
        ready = domains.wait_ready(api, namespace, domain, pods)
        uid = str(ready["metadata"]["uid"])
        yield Bystander(
            namespace=namespace,
            name=str(ready["metadata"]["name"]),
            uid=uid,
            nodes=frozenset(n["name"] for n in ready["status"]["nodes"]),
            slots=_slots(api, chart, uid),
            restarts={
                n: r for n, (phase, r) in _chart_pods(api, chart).items() if phase == "Running"
            },
        )
    finally:
        core.delete_namespace(namespace)


def _disturbances(
    api: client.ApiClient, chart: str, bystander: Bystander, namespace: str
) -> list[str]:
    """What the examples changed of what ran before them (nothing, if all is well)."""
    found = []
    now = _chart_pods(api, chart)
    for name, restarts in sorted(bystander.restarts.items()):
        phase, count = now.get(name, ("gone", restarts))
        if (phase, count) != ("Running", restarts):
            found.append(
                f"chart pod {name}: {phase} with {count} restarts (was Running, {restarts})"
            )
    current = domains.get_domain(api, bystander.namespace, bystander.name)
    status = current.get("status") or {}
    nodes = frozenset(n.get("name") for n in status.get("nodes") or [])
    if status.get("status") != "Ready" or nodes != bystander.nodes:
        found.append(f"ComputeDomain {bystander.name}: {status.get('status')} with {sorted(nodes)}")
    slots = _slots(api, chart, bystander.uid)
    if slots != bystander.slots:
        found.append(f"ComputeDomain {bystander.name}: slots {slots}, were {bystander.slots}")
    try:  # both still answer: the webhook admits a domain, the controller makes its template
        domains.wait_admitted(api, namespace, timeout=30)
        domains.create_domain(api, namespace)
    except (ApiException, waiting.WaitTimeout) as exc:
        found.append(f"the webhook or the controller stopped answering: {exc}")
    return found


def finish(
    api: client.ApiClient,
    chart: str,
    bystander: Bystander,
    namespace: str,
    tally: badinput.Tally,
    budget: int,
) -> None:
    """Print the counts; fail on any failure, any disturbance, or too few examples."""
    print(tally.summary())
    disturbed = _disturbances(api, chart, bystander, namespace)
    assert not tally.failures and not disturbed, "\n".join([tally.report(), *disturbed])
    assert tally.examples >= budget, tally.summary()


# -- ComputeDomains -------------------------------------------------------------------------


def _reserved_annotation(api_version: str, annotation: str, value: str) -> Example:
    base = {"apiVersion": api_version, "kind": constants.COMPUTE_DOMAIN_KIND,
            "metadata": {"name": "gen"},
            "spec": {"channel": {"resourceClaimTemplate": {"name": "gen-channel"}}}}  # fmt: skip
    at = ("metadata", "annotations", Entry(annotation))
    also = ("metadata.annotations", annotation)
    return badinput.change(base, at, "annotation", value, also=also)


def _placement_annotation(value: str) -> Example:
    return _reserved_annotation(constants.API_VERSION, constants.PLACEMENT_ANNOTATION, value)


V1BETA2_REGRESSIONS = (
    # Found here: a v1beta2 domain whose num-nodes annotation v1beta1 cannot read (past an
    # int64) was stored, and every v1beta1 read of it then failed. Admission refuses it now.
    _reserved_annotation(constants.API_VERSION_V1BETA2, constants.NUM_NODES_ANNOTATION, "9" * 19),
)


V1BETA1_REGRESSIONS = (
    # Found here: the conversion webhook failed on these (a ValueError and a RecursionError
    # in json.loads) instead of naming the annotation, as it now does. The API server reports
    # a conversion that fails on the way to storage as a 500, so admission has to refuse them
    # for a 4xx that names the field.
    _placement_annotation("9" * 10_300),
    _placement_annotation("[" * 100_000),
)


@pytest.mark.parametrize(
    ("version", "budget", "regressions"),
    [(V2, V1BETA2_SPECS, V1BETA2_REGRESSIONS), (V1, V1BETA1_SPECS, V1BETA1_REGRESSIONS)],
    ids=["v1beta2", "v1beta1"],
)
def test_compute_domain_specs_are_accepted_and_readable_or_refused_naming_the_field(
    chart: str,
    api: client.ApiClient,
    namespace: str,
    bystander: Bystander,
    version: str,
    budget: int,
    regressions: tuple[Example, ...],
) -> None:
    """Specs and the reserved annotations (num-nodes, placement), at either version: a v1beta1
    write goes through the conversion webhook to the stored v1beta2 and back. What is accepted
    reads with the model and converts to the other version."""
    tally = badinput.Tally(f"ComputeDomain {version}")
    path = DOMAINS[version].path(namespace=namespace)

    def check(example: Example) -> None:
        answer = post(api, path, example.body)
        if tally.record(example, answer.status, answer.body) is Outcome.ACCEPTED:
            why = badinput.domain_works(answer.body)
            if why is not None:
                tally.fail(example, why)

    strategy = badinput.compute_domains(f"{constants.GROUP}/{version}")
    run(f"domains-{version}", strategy, budget, check, regressions=regressions)
    finish(api, chart, bystander, namespace, tally, budget)


def test_a_reserved_annotation_patched_in_unreadable_is_refused_naming_it(
    api: client.ApiClient, namespace: str
) -> None:
    """Admission sees annotation changes too, not only spec changes: a merge patch that makes
    a live domain's num-nodes annotation unreadable at v1beta1 is refused, and the domain still
    reads at both versions."""
    domain = domains.create_domain(api, namespace)
    name = domain["metadata"]["name"]
    custom = client.CustomObjectsApi(api)
    patch = {"metadata": {"annotations": {constants.NUM_NODES_ANNOTATION: "x"}}}
    with pytest.raises(ApiException) as refused:
        custom.patch_namespaced_custom_object(
            constants.GROUP, V2, namespace, constants.COMPUTE_DOMAIN_PLURAL, name, patch
        )
    assert refused.value.status in (400, 403, 422), refused.value.body
    assert f"metadata.annotations[{constants.NUM_NODES_ANNOTATION}]" in str(refused.value.body)
    for version in (V1, V2):
        custom.get_namespaced_custom_object(
            constants.GROUP, version, namespace, constants.COMPUTE_DOMAIN_PLURAL, name
        )


def _wait_cached(api: client.ApiClient, namespace: str, domain: dict[str, Any]) -> None:
    """Until the webhook has ``domain`` in its cache: a dry run naming its template is refused."""
    probe = badinput.put(
        domain, ("metadata",), {"name": f"probe-{uuid.uuid4().hex[:6]}"}
    )  # same spec, another name
    probe.pop("status", None)
    path = DOMAINS[V2].path(namespace=namespace)
    waiting.until(
        f"the webhook to cache ComputeDomain {domain['metadata']['name']}",
        lambda: post(api, path, probe).status == 403,
        timeout=30,
    )


def test_template_names_are_accepted_and_usable_or_refused_naming_the_field(
    chart: str, api: client.ApiClient, namespace: str, bystander: Bystander
) -> None:
    """Channel template names: valid ones (the controller can then make the template), near
    misses of DNS-1123, huge and unicode ones, and another domain's (the webhook refuses it).
    The API server decides as the model does."""
    taken = domains.create_domain(api, namespace)
    _wait_cached(api, namespace, taken)
    taken_name = taken["spec"]["channel"]["resourceClaimTemplate"]["name"]
    tally = badinput.Tally("ComputeDomain template names")
    path = DOMAINS[V2].path(namespace=namespace)
    templates = resources.RESOURCE_CLAIM_TEMPLATES.path(namespace=namespace)

    def check(example: Example) -> None:
        name = example.body["spec"]["channel"]["resourceClaimTemplate"]["name"]
        answer = post(api, path, example.body)
        accepted = tally.record(example, answer.status, answer.body) is Outcome.ACCEPTED
        if accepted != (badinput.is_object_name(name) and name != taken_name):
            tally.fail(example, f"the API server answered {answer.status}, the model disagrees")
        if accepted:
            template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                        "metadata": {"name": name}, "spec": {"spec": {}}}  # fmt: skip
            made = post(api, templates, template)
            if made.status != 201:
                tally.fail(example, f"its template cannot be made: {made.body.get('message')}")

    run("template-names", badinput.template_names(taken_name), TEMPLATE_NAMES, check)
    finish(api, chart, bystander, namespace, tally, TEMPLATE_NAMES)


# -- claims written by hand -----------------------------------------------------------------


def _told(
    api: client.ApiClient, namespace: str, made: dict[str, tuple[Example, Any]]
) -> list[tuple[str, Example, str]]:
    """(claim, example, why) of each claim made whose Event is missing or names nothing."""
    events = client.CoreV1Api(api).list_namespaced_event(namespace).items
    said = {(e.involved_object.name, e.reason): str(e.message) for e in events}
    missing = []
    for name, (example, problem) in sorted(made.items()):
        if problem is None:
            continue
        message = said.get((name, problem.reason))
        field = badinput.model_field(example.body["spec"]["devices"]["config"][0]["opaque"]
                                     ["parameters"])  # fmt: skip
        if message is None:
            missing.append((name, example, f"no {problem.reason} Event"))
        elif field and field not in message:
            missing.append((name, example, f"its Event names no {field!r}: {message}"))
    return missing


def test_opaque_configs_of_claims_written_by_hand_are_named_when_wrong(
    chart: str, api: client.ApiClient, namespace: str, bystander: Bystander
) -> None:
    """Channel claims written by hand whose ComputeDomainChannelConfig or DaemonConfig is
    generated. The API server keeps opaque parameters as they are (it refuses only what is no
    object, or over 10 KiB); of the claims made for real, the controller tells each one it can
    say something about (an invalid config naming the field, a domain not in the namespace)
    in a Warning Event, as claimcheck.check says."""
    tally = badinput.Tally("ResourceClaim opaque configs")
    path = resources.RESOURCE_CLAIMS.path(namespace=namespace)
    strategy = badinput.channel_claims((bystander.uid,))
    made: dict[str, tuple[Example, Any]] = {}
    names = (f"gen-{n}" for n in itertools.count())

    def create(example: Example) -> None:
        body = badinput.put(example.body, ("metadata", "name"), next(names))
        answer = post(api, path, body, dry_run=False)
        if tally.record(example, answer.status, answer.body) is Outcome.ACCEPTED:
            name = body["metadata"]["name"]
            made[name] = (example, badinput.claim_problem(body, namespace))

    def admit(example: Example) -> None:
        answer = post(api, path, example.body)
        tally.record(example, answer.status, answer.body)

    try:
        run("claims-created", strategy, CLAIMS_CREATED, create)
        run("claims-admitted", strategy, CLAIMS_ADMITTED, admit)  # meanwhile, events come
        with contextlib.suppress(waiting.WaitTimeout):  # each claim not told fails below
            waiting.until(
                f"an Event on each of the {len(made)} claims the controller can tell something",
                lambda: not _told(api, namespace, made),
                timeout=60,
                interval=0.5,
            )
        for name, example, why in _told(api, namespace, made):
            tally.fail(example, f"claim {name}: {why}")
        told = sum(1 for _, problem in made.values() if problem is not None)
        print(f"{len(made)} claims made, {told} told what is wrong with them")
    finally:
        client.ResourceV1Api(api).delete_collection_namespaced_resource_claim(namespace)
    finish(api, chart, bystander, namespace, tally, CLAIMS_CREATED + CLAIMS_ADMITTED)


# -- cliques written by hand ----------------------------------------------------------------


def test_cliques_written_by_hand_leave_the_components_and_other_domains_alone(
    chart: str, api: client.ApiClient, namespace: str, bystander: Bystander
) -> None:
    """ComputeDomainClique objects written by hand, for made-up domains, in the bystander's
    clique, their daemons (and members annotation) naming :data:`SPARE_NODE`, a node of no
    cluster and near misses: accepted or refused naming the field. Those created for real are
    read by the controller and by the plugins and IMEX agents of the clique while the dry runs
    go on; then removed."""
    node = client.CoreV1Api(api).read_node(SPARE_NODE)
    clique_id = (node.metadata.labels or {}).get(constants.CLIQUE_LABEL)
    assert clique_id, f"{SPARE_NODE} has no {constants.CLIQUE_LABEL} label"
    nodes = (SPARE_NODE, "gb200-r1-n99", "no-such-node")
    assert BYSTANDER_NODE not in nodes  # the bystander's membership is not for writing by hand
    strategy = badinput.cliques(clique_id, nodes, {MARK: "true"})
    tally = badinput.Tally("ComputeDomainCliques")
    path = resources.CLIQUES.path(namespace=chart)
    objects = client.CustomObjectsApi(api)

    def create(example: Example) -> None:
        body = badinput.for_domain(example.body, str(uuid.uuid4()))  # no name twice
        answer = post(api, path, body, dry_run=False)
        tally.record(example, answer.status, answer.body)

    def admit(example: Example) -> None:
        answer = post(api, path, badinput.for_domain(example.body, str(uuid.uuid4())))
        tally.record(example, answer.status, answer.body)

    def written() -> list[Any]:
        listing = objects.list_namespaced_custom_object(
            constants.GROUP, V2, chart, constants.CLIQUE_PLURAL, label_selector=f"{MARK}=true"
        )
        return list(listing["items"])

    try:
        run("cliques-created", strategy, CLIQUES_CREATED, create)
        print(f"{len(written())} cliques written by hand")
        run("cliques-admitted", strategy, CLIQUES_ADMITTED, admit)  # meanwhile, they are read
    finally:
        objects.delete_collection_namespaced_custom_object(
            constants.GROUP, V2, chart, constants.CLIQUE_PLURAL, label_selector=f"{MARK}=true"
        )
        waiting.until("the cliques written by hand to be gone", lambda: not written(), timeout=60)
    finish(api, chart, bystander, namespace, tally, CLIQUES_CREATED + CLIQUES_ADMITTED)


# -- the domain label of pods ---------------------------------------------------------------


def test_the_domain_label_written_by_hand_never_survives_admission(
    chart: str, api: client.ApiClient, namespace: str, bystander: Bystander
) -> None:
    """Pods carrying ``computedomains.io/domain`` (or a near miss of its key) written by hand,
    claiming a domain's template, another, a claim by name or nothing: admitted with the
    label exactly when they claim the domain's template, with its UID, or refused naming it."""
    domain = domains.create_domain(api, namespace)
    _wait_cached(api, namespace, domain)
    template = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    uid = str(domain["metadata"]["uid"])
    tally = badinput.Tally("pods with the domain label")
    path = resources.PODS.path(namespace=namespace)

    def check(example: Example) -> None:
        answer = post(api, path, example.body)
        if tally.record(example, answer.status, answer.body) is Outcome.ACCEPTED:
            why = badinput.pod_works(example.body, answer.body, template, uid)
            if why is not None:
                tally.fail(example, why)

    run("pods", badinput.pods(template, uid), PODS_ADMITTED, check)
    finish(api, chart, bystander, namespace, tally, PODS_ADMITTED)
