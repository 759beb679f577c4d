"""Flags declared once, on config fields: argparse and the config are both made from them."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import pathlib
from collections.abc import Iterator

import pytest

from computedomains import cli, flaggroups, flags
from computedomains.controller.config import ControllerConfig
from computedomains.hooks.migrate import Settings as MigrateSettings
from computedomains.imexagent.config import AgentConfig
from computedomains.kubeletplugin.config import PluginConfig
from computedomains.nodeinit.settings import Settings as NodeInitSettings
from computedomains.webhook.config import WebhookConfig

PREFIX = flags.ENV_PREFIX

AGENT = ["--node-name=n1", "--pod-name=p", "--pod-ip=127.0.0.9"]
WEBHOOK = ["--service-name=svc", "--tls-secret=tls"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Inner:
    count: int = flags.option("--count", default="3", type=flags.at_least_one, help="how many")


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Outer:
    name: str = flags.option("--name", required=True, help="a name")
    inner: _Inner = flags.group(_Inner, count="5")
    quiet: bool = flags.switch("--quiet", default=False, help="say less")
    not_a_flag: float = 1.5


def test_a_config_is_made_from_its_fields_flags_with_typed_defaults() -> None:
    parsed = flags.parse(_Outer, ["--name=x"])
    assert parsed == _Outer(name="x", inner=_Inner(count=5), quiet=False)
    assert _Outer.__dataclass_fields__["inner"].default == _Inner(count=5)
    assert flags.parse(_Outer, ["--name=x", "--count=2", "--quiet"]).inner.count == 2


def test_the_variable_beats_the_default_and_the_command_line_beats_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COMPUTE_DOMAINS_NAME", "from-env")
    monkeypatch.setenv("COMPUTE_DOMAINS_COUNT", "7")
    monkeypatch.setenv("COMPUTE_DOMAINS_QUIET", "yes")
    from_env = flags.parse(_Outer, [])
    assert (from_env.name, from_env.inner.count, from_env.quiet) == ("from-env", 7, True)
    assert flags.parse(_Outer, ["--name=cli", "--count=1"]).inner.count == 1


def test_a_variable_without_the_prefix_sets_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stray ``QUIET=yes`` (or ``FORCE``, ``NAMESPACE``) in a shell turns on nothing."""
    monkeypatch.setenv("NAME", "stray")
    monkeypatch.setenv("QUIET", "yes")
    parsed = flags.parse(_Outer, ["--name=x"])
    assert (parsed.name, parsed.quiet) == ("x", False)
    assert flags.env_name("--driver-root") == "COMPUTE_DOMAINS_DRIVER_ROOT"


def test_the_kubeconfig_flag_reads_kubeconfig_as_kubectl_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "config"))
    parser = argparse.ArgumentParser()
    flags.register(parser, flaggroups.KUBECONFIG)
    assert parser.parse_args([]).kubeconfig == tmp_path / "config"


@pytest.mark.parametrize(
    ("argv", "env", "error"),
    [
        ([], {}, "the following arguments are required: --name"),
        (["--name=x", "--count=0"], {}, "argument --count: must be at least 1, got 0"),
        (["--name=x"], {f"{PREFIX}COUNT": "0"}, "argument --count: must be at least 1, got 0"),
        (["--name=x"], {f"{PREFIX}QUIET": "maybe"}, "QUIET='maybe': expected true or false"),
    ],
)
def test_a_bad_or_missing_value_is_named_by_its_flag(
    argv: list[str],
    env: dict[str, str],
    error: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit):
        flags.parse(_Outer, argv)
    assert error in capsys.readouterr().err


def test_help_names_each_flags_variable_and_default() -> None:
    parser = argparse.ArgumentParser()
    flags.add_to(parser, _Outer)
    text = " ".join(parser.format_help().split())
    assert "a name (env COMPUTE_DOMAINS_NAME; default required)" in text
    assert "how many (env COMPUTE_DOMAINS_COUNT; default 5)" in text
    assert "say less (env COMPUTE_DOMAINS_QUIET; default off)" in text


def test_one_flag_declared_twice_differently_is_refused() -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Clash:
        a: _Inner = flags.group(_Inner)
        b: _Inner = flags.group(_Inner, count="9")

    with pytest.raises(TypeError, match="--count is declared twice, differently"):
        flags.add_to(argparse.ArgumentParser(), Clash)


def test_a_shared_flag_is_one_value_for_both_readers(tmp_path: pathlib.Path) -> None:
    argv = ["--node-name=n1", f"--proc-root={tmp_path}", "--fabric-recheck-interval=5"]
    config = flags.parse(PluginConfig, argv)
    assert config.proc_root == config.discovery.proc_root == tmp_path
    moved = dataclasses.replace(config, proc_root=tmp_path / "elsewhere")
    assert moved.fabric_recheck is not None
    assert moved.fabric_recheck.discovery.proc_root == tmp_path / "elsewhere"


def test_an_empty_variable_does_not_satisfy_a_required_flag(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COMPUTE_DOMAINS_NODE_NAME", "")
    with pytest.raises(SystemExit):
        flags.parse(NodeInitSettings, [])
    assert "the following arguments are required: --node-name" in capsys.readouterr().err


def test_a_combination_the_config_refuses_ends_the_program_with_its_reason() -> None:
    with pytest.raises(SystemExit, match="renew deadline"):
        flags.parse(ControllerConfig, ["--lease-duration=5", "--renew-deadline=10"])
    with pytest.raises(SystemExit, match="certificate settings: the CA's renew-before"):
        flags.parse(WebhookConfig, [*WEBHOOK, "--ca-validity=10d", "--ca-renew-before=20d"])


@pytest.mark.parametrize(
    ("argv", "refused"),
    [
        # A replica serves a rotated Secret up to one resync later: the grace must cover that
        # and a round's margin (60 s).
        (["--rotation-grace=75s", "--resync-interval=15"], True),
        (["--rotation-grace=76s", "--resync-interval=15"], False),
        (["--rotation-grace=5m", "--resync-interval=300"], True),
        (["--rotation-grace=10m", "--resync-interval=300"], False),
        ([], False),  # the defaults: 5m and 15 s
        # cert-manager rotates the Secret itself: no rotation steps, no grace to check.
        (["--cert-manager", "--rotation-grace=5m", "--resync-interval=300"], False),
    ],
)
def test_the_rotation_grace_must_outlast_a_resync(argv: list[str], refused: bool) -> None:
    if not refused:
        flags.parse(WebhookConfig, [*WEBHOOK, *argv])
        return
    with pytest.raises(SystemExit) as refusal:
        flags.parse(WebhookConfig, [*WEBHOOK, *argv])
    message = str(refusal.value)
    assert message.startswith("computedomains: --rotation-grace and --resync-interval: ")
    assert "must exceed the resync interval" in message and "by more than 60s" in message


def test_each_component_has_its_request_budget_default() -> None:
    assert flags.parse(ControllerConfig, []).api_budget == flaggroups.ApiBudget(50, 100)
    assert flags.parse(AgentConfig, AGENT).api_budget == flaggroups.ApiBudget(20, 40)
    budget = flags.parse(PluginConfig, ["--node-name=n", "--kube-api-qps=0"]).api_budget
    assert budget == flaggroups.ApiBudget(0, 40)


def test_derived_values() -> None:
    agent = flags.parse(AgentConfig, ["--node-name=n1", "--pod-name=p", "--pod-ip=::0001"])
    assert agent.pod_ip == "::1"
    webhook = flags.parse(WebhookConfig, [*WEBHOOK, "--extra-names=a, b,,", "--cert-validity=3d"])
    assert webhook.extra_names == ("a", "b")
    assert webhook.validity.cert == datetime.timedelta(days=3)
    assert flags.parse(ControllerConfig, []).pod_name  # the host name when not given
    assert flags.parse(PluginConfig, ["--node-name=n"]).fabric_recheck is None


NOT_FLAGS = {NodeInitSettings: ["poll_interval"], MigrateSettings: ["interval"]}
"""Settings that are deliberately no flag."""


@pytest.mark.parametrize(
    "config",
    [ControllerConfig, AgentConfig, PluginConfig, WebhookConfig, NodeInitSettings, MigrateSettings],
)
def test_every_setting_but_the_named_ones_is_declared_by_its_flag(config: type) -> None:
    def undeclared(cls: type) -> list[str]:
        out = []
        for item in dataclasses.fields(cls):
            if dataclasses.is_dataclass(item.default):
                out += undeclared(type(item.default))
            elif not item.metadata:
                out.append(item.name)
        return out

    assert undeclared(config) == NOT_FLAGS.get(config, [])


def test_the_cli_table_names_the_config_classes() -> None:
    assert {c.config for c in cli.COMPONENTS} == {
        ControllerConfig,
        AgentConfig,
        PluginConfig,
        WebhookConfig,
    }


def test_the_migrate_hook_adopts_only_when_asked() -> None:
    assert flags.parse(MigrateSettings, []).adopt is None
    asked = flags.parse(MigrateSettings, ["--adopt", "--adopt-timeout=30", "--crds=a, b"])
    assert asked.adopt is not None and asked.adopt.timeout == 30
    assert asked.crds == ("a", "b") and asked.fail_on_invalid


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every (sub)command's parser of ``parser``, by its program name."""
    yield parser.prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _subparsers(child)


def _flag_clashes(root: argparse.ArgumentParser) -> tuple[list[str], set[str]]:
    """Flags declared twice: their type, choices or help (its default aside) differ between two
    commands of ``root``; and every flag seen."""
    seen: dict[str, tuple[object, object, object, str]] = {}
    clashes = []
    for prog, parser in _subparsers(root):
        for action in parser._actions:
            for name in (o for o in action.option_strings if o.startswith("--")):
                said = (action.help or "").split(" (env ")[0]
                kind = (action.type, tuple(action.choices or ()) or None, said)
                first = seen.setdefault(name, (*kind, prog))
                if first[:3] != kind:
                    clashes.append(f"{name}: {first[3]} {first[:3]} vs {prog} {kind}")
    return clashes, set(seen)


def test_each_flag_name_is_declared_once_across_every_command() -> None:
    """Components, node-init, fabric and the hooks: a flag two commands take is one flag (its
    type, choices and help; a program may give it its own default)."""
    clashes, seen = _flag_clashes(cli.build_parser())
    assert not clashes, "\n".join(clashes)
    assert {"--driver-root", "--binding-conditions", "--gpu-node-selector", "--adopt"} <= seen


def test_a_flag_declared_again_with_another_type_is_a_clash() -> None:
    root = argparse.ArgumentParser(prog="x")
    commands = root.add_subparsers()
    commands.add_parser("a").add_argument("--driver-root", type=flags.path)
    commands.add_parser("b").add_argument("--driver-root", type=str)
    commands.add_parser("c").add_argument("--mode", choices=("x", "y"))
    commands.add_parser("d").add_argument("--mode", choices=("x",))
    commands.add_parser("e").add_argument("--adopt", action="store_true", help="one thing")
    commands.add_parser("f").add_argument("--adopt", action="store_true", help="another")
    clashes, _ = _flag_clashes(root)
    assert [c.split(":")[0] for c in clashes] == ["--driver-root", "--mode", "--adopt"]
