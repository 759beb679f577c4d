"""The benchmark report: every result's figures as a table, and its plots drawn."""

from __future__ import annotations

import dataclasses
import json
import pathlib

from tests.benchmarks import render, report


def test_render_writes_a_table_of_every_figure_and_draws_the_plots(tmp_path: pathlib.Path) -> None:
    plot = report.Plot(
        name="stages", title="Stages", labels=["a", "b"], series={"p50": [0.1, 0.4]},
        unit="s", kind="barh",
    )  # fmt: skip
    side_by_side = report.Table(
        title="All Ready (s)", columns=["p50", "p99", "target"],
        rows=[("plain DRA claim", [1.3, 2.2, ""]), ("ComputeDomain", [5.87291, 7.4, "≤ 3.0"])],
    )  # fmt: skip
    document = {
        "benchmark": "formation",
        "when": "2026-12-01T10:00:00Z",
        "machine": {"cpus": 2, "python": "3.11"},
        "figures": {"total_s": {"p50": 1.5, "n": 20}, "conflicts": 0},
        "plots": [plot.__dict__],
        "tables": [dataclasses.asdict(side_by_side)],
    }
    (tmp_path / "formation.json").write_text(json.dumps(document))
    (tmp_path / "notes.json").write_text("[1, 2]")  # not a result: left out

    written = render.render(tmp_path)

    text = written.read_text()
    assert "## formation" in text
    assert "| total_s.p50 | 1.5 |" in text and "| conflicts | 0 |" in text
    assert "![Stages](plots/formation-stages.png)" in text
    png = tmp_path / "plots" / "formation-stages.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert text.count("## ") == 1
    # The table comes first, its cells to the millisecond, then every figure.
    assert "**All Ready (s)**\n\n|  | p50 | p99 | target |\n|---|---|---|---|\n" in text
    assert "| plain DRA claim | 1.300 | 2.200 |  |" in text
    assert "| ComputeDomain | 5.873 | 7.400 | ≤ 3.0 |" in text
    assert text.index("All Ready") < text.index("| figure | value |")


def test_flatten_names_nested_figures_by_their_path() -> None:
    assert list(render.flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3})) == [
        ("a.b", 1), ("a.c.d", 2), ("e", 3),
    ]  # fmt: skip
