"""Turn benchmark-results/*.json into REPORT.md and PNG plots (the end of ``make bench``).

Every result gets a section: when and where it ran, a table of its figures (nested figures
flattened to dotted names), and the plots the benchmark attached (:class:`report.Plot`),
drawn under ``benchmark-results/plots/``. Usage: ``python -m tests.benchmarks.render [DIR]``.
"""

from __future__ import annotations

import json
import pathlib
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from tests.benchmarks import report


def flatten(figures: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted.name, value)`` of every leaf of nested figures, in their order."""
    for key, value in figures.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from flatten(value, f"{name}.")
        else:
            yield name, value


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return ", ".join(_cell(v) for v in value)
    return str(value).replace("|", "\\|")


def draw(plot: report.Plot, path: pathlib.Path) -> None:
    """Draw ``plot`` into the PNG ``path``."""
    import matplotlib  # noqa: PLC0415 - only `make bench` draws; the suite never imports it

    matplotlib.use("Agg")
    from matplotlib import pyplot  # noqa: PLC0415

    figure, axes = pyplot.subplots(figsize=(8, 4.5), dpi=100)
    count = max(len(plot.series), 1)
    width = 0.8 / count
    positions = list(range(len(plot.labels)))
    for i, (series, values) in enumerate(plot.series.items()):
        if plot.kind == "line":
            axes.plot(plot.labels, values, marker="o", label=series)
            continue
        shifted = [p - 0.4 + width * (i + 0.5) for p in positions]
        if plot.kind == "barh":
            axes.barh(shifted, values, height=width, label=series)
        else:
            axes.bar(shifted, values, width=width, label=series)
    if plot.kind == "barh":
        axes.set_yticks(positions, plot.labels)
        axes.invert_yaxis()  # the first label (the first stage) on top
        axes.set_xlabel(plot.unit)
    elif plot.kind == "bar":
        axes.set_xticks(positions, plot.labels, rotation=20, ha="right")
        axes.set_ylabel(plot.unit)
    else:
        axes.set_ylabel(plot.unit)
        axes.set_xlabel(plot.x_label)
    axes.set_title(plot.title)
    axes.grid(axis="x" if plot.kind == "barh" else "y", alpha=0.3)
    if len(plot.series) > 1:
        axes.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    pyplot.close(figure)


def table(spec: report.Table) -> list[str]:
    """The Markdown lines of one table, a blank line after it."""
    lines = [
        f"**{spec.title}**",
        "",
        "| " + " | ".join(["", *spec.columns]) + " |",
        "|" + "---|" * (len(spec.columns) + 1),
    ]
    for label, cells in spec.rows:
        shown = [f"{c:.3f}" if isinstance(c, float) else _cell(c) for c in cells]
        lines.append("| " + " | ".join([label, *shown]) + " |")
    return [*lines, ""]


def section(document: Mapping[str, Any], plots_dir: pathlib.Path, *, draw_plots: bool) -> str:
    """The Markdown section of one result; its plots are drawn into ``plots_dir``."""
    name = str(document["benchmark"])
    machine = document.get("machine") or {}
    lines = [
        f"## {name}",
        "",
        f"Run {document.get('when', '?')} on {machine.get('cpus', '?')} CPUs, "
        f"Python {machine.get('python', '?')}.",
        "",
    ]
    for spec in document.get("tables") or []:
        lines += table(report.Table(**spec))
    lines += ["| figure | value |", "|---|---|"]
    lines += [f"| {key} | {_cell(value)} |" for key, value in flatten(document["figures"])]
    for spec in document.get("plots") or []:
        plot = report.Plot(**spec)
        path = plots_dir / f"{name}-{plot.name}.png"
        if draw_plots:
            draw(plot, path)
        lines += ["", f"![{plot.title}](plots/{path.name})"]
    return "\n".join(lines) + "\n"


def render(results: pathlib.Path, *, draw_plots: bool = True) -> pathlib.Path:
    """Write ``results/REPORT.md`` (and the plots) from every result JSON there."""
    documents = []
    for path in sorted(results.glob("*.json")):
        document = json.loads(path.read_text())
        if isinstance(document, dict) and "benchmark" in document and "figures" in document:
            documents.append(document)
    parts = [
        "# Benchmark results",
        "",
        "Each figure was measured in the run named in its section; ratios compare with a "
        "baseline measured in the same run (tests/benchmarks). Regenerate with `make bench`.",
        "",
    ]
    parts += [section(d, results / "plots", draw_plots=draw_plots) for d in documents]
    out = results / "REPORT.md"
    out.write_text("\n".join(parts))
    return out


def main(argv: list[str]) -> int:
    """``python -m tests.benchmarks.render [RESULTS_DIR]``."""
    results = pathlib.Path(argv[0]) if argv else report.RESULTS
    if not results.is_dir():
        print(f"no results in {results}: run the benchmarks first (make bench)")
        return 1
    print(f"wrote {render(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
