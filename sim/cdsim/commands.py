"""``cdsim``, the simulated cluster's command: up, down, status, demo, chaos, tools and image.

Each subcommand parses, builds, runs and shuts down; the logic lives in the modules it calls.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import secrets
import signal
import subprocess
import sys
import threading
import time
import types
from typing import Any

from cdsim import cluster, controlplane, processes, tools, topology
from cdsim.image import cache as image_cache
from cdsim.image import errors as image_errors
from cdsim.image import source as image_source
from computedomains import waiting
from computedomains.kube import client as kube_client
from computedomains.kube import nodes as kube_nodes


def build_parser() -> argparse.ArgumentParser:
    """The ``cdsim`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="cdsim",
        description="A local cluster of simulated GB200 nodes for compute-domains (tests, demo).",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    sim_sub = subparsers

    up = sim_sub.add_parser("up", help="start a simulated cluster and keep it running")
    _add_name(up)
    up.add_argument("--racks", type=int, default=2, help="NVL72 racks (default 2)")
    up.add_argument("--nodes-per-rack", type=int, default=18, help="nodes per rack (default 18)")
    up.add_argument("--gpus-per-node", type=int, default=4, help="GPUs per node (default 4)")
    up.add_argument(
        "--non-fabric-nodes",
        type=int,
        default=0,
        help="extra GPU nodes without NVLink fabric (default 0)",
    )
    up.add_argument(
        "--node-profile",
        action="append",
        default=[],
        metavar="NODE=PROFILE",
        help="fabric profile of one node: " + ", ".join(p.value for p in topology.FabricProfile),
    )
    _add_runtime(up)
    up.add_argument("--show-nodes", action="store_true", help="list every node in the summary")
    up.add_argument(
        "--background",
        action="store_true",
        help="return once the cluster is ready; stop it with `cdsim down`",
    )
    up.set_defaults(func=_up)

    down = sim_sub.add_parser("down", help="stop a cluster started in the background")
    _add_name(down)
    down.set_defaults(func=_down)

    status = sim_sub.add_parser("status", help="report a running cluster")
    _add_name(status)
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=_status)

    kubelet = sim_sub.add_parser(
        "kubelet",
        help="the simulated kubelet (started by `cdsim up`): runs chart pods, calls DRA plugins",
    )
    kubelet.add_argument("--kubeconfig", type=pathlib.Path, required=True)
    kubelet.add_argument(
        "--cluster-dir", type=pathlib.Path, required=True, help="holds nodes/<node>/ and logs/"
    )
    kubelet.add_argument(
        "--images-dir",
        type=pathlib.Path,
        help="run chart pods from their images under runc, pulled into this cache",
    )
    kubelet.add_argument(
        "--registry", default="", help="the cluster's registry (host:port, plain HTTP)"
    )
    kubelet.set_defaults(func=_kubelet)

    demo = subparsers.add_parser(
        "demo", help="simulated cluster + chart + examples/: watch a ComputeDomain form"
    )
    demo.add_argument("--until-ready", action="store_true", help="exit 0 once the domain is Ready")
    demo.add_argument("--racks", type=int, default=2, help="NVL72 racks (default 2)")
    demo.add_argument(
        "--nodes-per-rack", type=int, default=18, help="nodes per rack (default 18, a full NVL72)"
    )
    demo.add_argument("--examples", type=pathlib.Path, default=pathlib.Path("examples"))
    demo.add_argument("--chart", type=pathlib.Path, default=pathlib.Path("chart"))
    demo.add_argument(
        "--values",
        type=pathlib.Path,
        action="append",
        help="values files, in order (default: values/gb200-nvl72.yaml, then the simulation's "
        "overlay values/sim.yaml)",
    )
    demo.add_argument("--timeout", type=float, default=600, help="seconds to wait for Ready")
    _add_runtime(demo)
    demo.set_defaults(func=_demo)

    _add_chaos_parser(subparsers)

    tool = subparsers.add_parser(
        "tools", help="build or locate the test tools (Go-built, and the fake NVML library)"
    )
    tool_sub = tool.add_subparsers(dest="tools_command", required=True)
    build = tool_sub.add_parser("build", help="build every missing tool into the cache")
    build.add_argument("names", nargs="*", help="only these tools (default: all)")
    build.set_defaults(func=_tools_build)
    path = tool_sub.add_parser("path", help="print a tool binary's path (building it if missing)")
    path.add_argument("name", help="kubernetes, etcd, kwok, helm3, helm4 or fakenvml")
    path.add_argument("--binary", help="binary of a multi-binary tool (kube-apiserver, ...)")
    path.set_defaults(func=_tools_path)

    _add_image_parsers(subparsers)
    return parser


def _add_chaos_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chaos = subparsers.add_parser(
        "chaos",
        help="simulated cluster + chart, then a seeded run of workload churn and injected "
        "faults, checking invariants (docs/operations.md)",
    )
    chaos.add_argument(
        "--seed", type=int, help="the run's seed (default: a random one, printed): replays a run"
    )
    chaos.add_argument(
        "--duration",
        default="30m",
        help="how long faults are injected: 30m, 150s, 1h (default 30m)",
    )
    chaos.add_argument("--report", type=pathlib.Path, help="also write the report here (JSON)")
    chaos.add_argument("--racks", type=int, default=2, help="NVL72 racks (default 2)")
    chaos.add_argument("--chart", type=pathlib.Path, default=pathlib.Path("chart"))
    chaos.add_argument(
        "--values",
        type=pathlib.Path,
        action="append",
        help="values files, in order (default: as cdsim demo)",
    )
    chaos.set_defaults(func=_chaos)


def _add_image_parsers(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    image = subparsers.add_parser(
        "image", help="build or locate the product image (amd64 + arm64, no Docker)"
    )
    image_sub = image.add_subparsers(dest="image_command", required=True)
    image_build = image_sub.add_parser(
        "build", help="build the image of a revision into the cache (reused when present)"
    )
    image_path = image_sub.add_parser(
        "path", help="print the oci-archive's path (building the image if missing)"
    )
    for sub in (image_build, image_path):
        sub.add_argument(
            "--rev",
            help="git revision to build (default: HEAD, or the working tree with its version "
            "marked .dirty when the product's files differ from HEAD)",
        )
    image_build.add_argument(
        "--out", type=pathlib.Path, help="build into this new folder instead of the cache"
    )
    image_build.set_defaults(func=_image_build)
    shown = image_path.add_mutually_exclusive_group()
    shown.add_argument("--layout", action="store_true", help="print the OCI layout folder instead")
    shown.add_argument(
        "--version",
        action="store_true",
        help="print the build's version instead (the image tag and the chart's version)",
    )
    image_path.set_defaults(func=_image_path)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``cdsim`` (``python -m cdsim``)."""
    args = build_parser().parse_args(argv)
    return int(args.func(args))


def _add_name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default="default", help="cluster name (default: default)")


def _add_runtime(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runtime",
        choices=controlplane.RUNTIMES,
        help="how the simulated kubelet runs pods: runc (containers from their image, the "
        "default) or process (the chart's, as processes of this checkout); default: "
        f"${controlplane.RUNTIME_ENV}, else {controlplane.DEFAULT_RUNTIME}",
    )


def _topology(args: argparse.Namespace) -> topology.Topology:
    overrides = {}
    for item in args.node_profile:
        node, sep, profile = item.partition("=")
        if not sep:
            raise SystemExit(f"--node-profile wants NODE=PROFILE, got {item!r}")
        try:
            overrides[node] = topology.NodeOverride(profile=topology.FabricProfile(profile))
        except ValueError:
            raise SystemExit(
                f"--node-profile {item!r}: unknown profile {profile!r}; choose one of "
                + ", ".join(p.value for p in topology.FabricProfile)
            ) from None
    try:
        return topology.Topology(
            racks=args.racks,
            nodes_per_rack=args.nodes_per_rack,
            gpus_per_node=args.gpus_per_node,
            non_fabric_nodes=args.non_fabric_nodes,
            overrides=overrides,
        )
    except ValueError as exc:
        raise SystemExit(f"invalid topology: {exc}") from None


def _up(args: argparse.Namespace) -> int:
    spec = _topology(args)
    if args.background:
        return _up_background(args)
    stop = threading.Event()

    def on_signal(signum: int, frame: types.FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    sim = cluster.SimCluster(name=args.name, topology_spec=spec, runtime=args.runtime)
    try:
        state = sim.start()
        print(render_summary(sim, state), flush=True)
        if args.show_nodes:
            print(render_nodes(sim.nodes, sim.ready_node_names()), flush=True)
        if sys.stdin.isatty():
            print("Press Ctrl-C to stop.", flush=True)
        stop.wait()
    except KeyboardInterrupt:
        pass
    except (cluster.ClusterError, tools.ToolError, waiting.WaitTimeout) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        sim.stop()
    print(f"Simulated cluster {args.name!r} stopped.", flush=True)
    return 0


def _up_background(args: argparse.Namespace) -> int:
    argv = [a for a in sys.argv[1:] if a != "--background"]
    log = cluster.state_dir() / f"{args.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "cdsim", *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def ready() -> cluster.ClusterState | None:
        if child.poll() is not None:
            raise cluster.ClusterError(
                f"`sim up` exited with {child.returncode}; log {log}:\n{processes.log_tail(log)}"
            )
        path = cluster.state_file(args.name)
        if path.exists():
            state = cluster.ClusterState.read(path)
            return state if state.supervisor_pid == child.pid else None
        return None

    try:
        state = waiting.until(f"cluster {args.name!r} to be ready", ready, timeout=900)
    except (cluster.ClusterError, waiting.WaitTimeout) as exc:
        print(f"error: {exc}", file=sys.stderr)
        processes.stop_pids([child.pid])
        return 1
    print(
        f"Simulated cluster {args.name!r} is up in the background (pid {child.pid}, "
        f"ready in {state.ready_seconds:.1f}s)"
    )
    print(f"  kubeconfig  {state.kubeconfig}")
    print(f"  registry    {state.registry} (plain HTTP)")
    print(f"  log         {log}")
    print(f"Stop it with: cdsim down --name {args.name}")
    return 0


def _running(name: str) -> tuple[pathlib.Path, cluster.ClusterState] | None:
    """The state file of the simulated cluster ``name`` and what it says; None (said) if none."""
    path = cluster.state_file(name)
    if not path.exists():
        print(f"No simulated cluster named {name!r} is running.")
        return None
    return path, cluster.ClusterState.read(path)


def _down(args: argparse.Namespace) -> int:
    running = _running(args.name)
    if running is None:
        return 0
    path, state = running
    pids = [state.supervisor_pid, *state.children.values()]
    print(f"Stopping simulated cluster {args.name!r} (supervisor pid {state.supervisor_pid})...")
    processes.stop_pids([state.supervisor_pid], grace=30)
    leftovers = processes.stop_pids(list(state.children.values()), grace=5)
    if leftovers:
        print(f"  killed leftover processes {leftovers}")
    still = [p for p in pids if processes.pid_alive(p)]
    if still:
        print(f"error: processes {still} are still running", file=sys.stderr)
        return 1
    cluster.remove_leftovers(pathlib.Path(state.directory), print)
    path.unlink(missing_ok=True)
    print(f"Simulated cluster {args.name!r} stopped.")
    return 0


def _status(args: argparse.Namespace) -> int:
    running = _running(args.name)
    if running is None:
        return 1
    state = running[1]
    alive = {name: processes.pid_alive(pid) for name, pid in state.children.items()}
    report: dict[str, Any] = {
        "name": state.name,
        "server": state.server,
        "kubeconfig": state.kubeconfig,
        "registry": state.registry,
        "supervisor": {
            "pid": state.supervisor_pid,
            "running": processes.pid_alive(state.supervisor_pid),
        },
        "processes": {n: {"pid": state.children[n], "running": ok} for n, ok in alive.items()},
        "uptime_seconds": round(time.time() - state.started_at),
    }
    try:
        api = kube_client.Client.from_kubeconfig(pathlib.Path(state.kubeconfig))
        ready, total = kube_nodes.ready_names(api, timeout=5)
        report["nodes"] = {"total": total, "ready": len(ready)}
    except Exception as exc:  # noqa: BLE001 - status reports whatever went wrong
        report["nodes"] = {"error": str(exc)}
    healthy = (
        all(alive.values()) and report["supervisor"]["running"] and "error" not in report["nodes"]
    )
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"Simulated cluster {state.name!r}: {'running' if healthy else 'DEGRADED'}")
        print(f"  API server  {state.server}")
        print(f"  kubeconfig  {state.kubeconfig}")
        print(f"  registry    {state.registry} (plain HTTP)")
        nodes = report["nodes"]
        print(
            "  nodes       "
            + (
                f"{nodes['ready']}/{nodes['total']} Ready"
                if "ready" in nodes
                else f"unreachable: {nodes['error']}"
            )
        )
        for name, info in report["processes"].items():
            print(f"  {name:<24} pid {info['pid']:<8} {'running' if info['running'] else 'EXITED'}")
    return 0 if healthy else 1


def render_summary(sim: cluster.SimCluster, state: cluster.ClusterState) -> str:
    """One screen describing a freshly started cluster."""
    lines = [
        f"Simulated cluster {sim.name!r} is up: control plane healthy in "
        f"{state.control_plane_seconds:.1f}s, all nodes Ready in {state.ready_seconds:.1f}s",
        f"  API server   {state.server}",
        f"  kubeconfig   {state.kubeconfig}",
        f"  registry     {state.registry} (OCI, plain HTTP: images and the chart)",
        f"  nodes        {state.nodes} Ready",
    ]
    racks: dict[int | None, list[topology.SimNode]] = {}
    for node in sim.nodes:
        racks.setdefault(node.rack, []).append(node)
    for rack, members in racks.items():
        first = members[0]
        label = f"rack {rack}" if rack is not None else "no fabric"
        fabric = first.gpus[0].fabric
        lines.append(
            f"    {label:<10} {len(members):>2} x {first.gpus[0].name} ({len(first.gpus)} GPUs)"
            f"  {first.ip} ..  cluster UUID {fabric.cluster_uuid}, clique {fabric.clique_id}"
        )
    assert sim.directory is not None
    lines += [
        f"  host trees   {sim.directory / 'nodes'}/<node>/",
        f"  logs         {sim.directory / 'logs'}/",
        f"Try:  KUBECONFIG={state.kubeconfig} kubectl get nodes -L compute-domains.sim/rack",
    ]
    return "\n".join(lines)


def render_nodes(sim_nodes: list[topology.SimNode], ready: set[str]) -> str:
    """A table of the simulated nodes: addresses, GPUs, fabric and readiness."""
    header = ("NODE", "READY", "INTERNAL-IP", "POD-CIDR", "GPUS", "FABRIC", "CLIQUE")
    rows = [header]
    for node in sim_nodes:
        fabric = node.gpus[0].fabric
        rows.append(
            (
                node.name,
                "Ready" if node.name in ready else "NotReady",
                node.ip,
                node.pod_cidr,
                str(len(node.gpus)),
                f"{fabric.state} ({node.profile.value})",
                node.clique or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def _kubelet(args: argparse.Namespace) -> int:
    # Imported here: gRPC and the kubelet's modules would slow down every other subcommand.
    from cdsim.kubelet import main  # noqa: PLC0415

    return main.run(
        kubeconfig_path=args.kubeconfig,
        cluster_dir=args.cluster_dir,
        registry=args.registry,
        images_dir=args.images_dir,
    )


def _demo(args: argparse.Namespace) -> int:
    from cdsim import demo  # noqa: PLC0415 - only this command needs it

    run = demo.Demo(
        examples=args.examples,
        chart=args.chart,
        values=tuple(args.values or demo.DEFAULT_VALUES),
        racks=args.racks,
        nodes_per_rack=args.nodes_per_rack,
        runtime=args.runtime,
        out=lambda line: print(line, flush=True),
        interactive=sys.stdout.isatty(),
    )
    return run.run(until_ready=args.until_ready, timeout=args.timeout)


def _chaos(args: argparse.Namespace) -> int:
    # Imported here: only this command needs the chaos run (and the kubelet's modules it uses).
    from cdsim import demo  # noqa: PLC0415
    from cdsim.chaos import run, schedule  # noqa: PLC0415

    try:
        duration = schedule.parse_duration(args.duration)
    except ValueError as exc:
        raise SystemExit(f"--duration: {exc}") from None
    if duration < schedule.MIN_DURATION:
        raise SystemExit(f"--duration: at least {schedule.MIN_DURATION:g}s")
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    return run.on_a_cluster_of_its_own(
        config=run.Config(seed=seed, duration=duration),
        chart=args.chart,
        values=tuple(args.values or demo.DEFAULT_VALUES),
        racks=args.racks,
        report_file=args.report,
        out=lambda line: print(line, flush=True),
    )


def _tools_build(args: argparse.Namespace) -> int:
    box = tools.ToolBox.from_env()
    started = time.monotonic()
    try:
        paths = box.ensure_all(args.names or None)
    except tools.ToolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for label, path in paths.items():
        print(f"{label:<24} {path}")
    print(f"tools ready in {time.monotonic() - started:.0f}s")
    return 0


def _tools_path(args: argparse.Namespace) -> int:
    try:
        print(tools.ToolBox.from_env().path(args.name, args.binary))
    except tools.ToolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _image_cache() -> image_cache.ImageCache:
    repo = pathlib.Path(
        image_source.git(pathlib.Path.cwd(), "rev-parse", "--show-toplevel").strip()
    )
    return image_cache.ImageCache.from_env(repo)


def _image_build(args: argparse.Namespace) -> int:
    started = time.monotonic()
    try:
        box = _image_cache()
        if args.out is not None:
            build = box.build(image_source.resolve(box.repo, args.rev), out=args.out)
            reused = False
        else:
            build, reused = box.ensure(args.rev)
    except image_errors.ImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(build.describe())
    how = "reused from the cache" if reused else "built"
    print(f"image {how} in {time.monotonic() - started:.0f}s")
    return 0


def _image_path(args: argparse.Namespace) -> int:
    try:
        build, _ = _image_cache().ensure(args.rev)
    except image_errors.ImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(build.version if args.version else build.layout if args.layout else build.archive)
    return 0
