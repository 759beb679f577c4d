"""Record benchmark figures: printed as a table and saved as JSON under benchmark-results/.

A benchmark may attach :class:`Table` and :class:`Plot` specs to its figures; ``python -m
tests.benchmarks.render`` (the end of ``make bench``) writes the tables and draws the plots as
PNGs in a Markdown report of every result.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import platform
import statistics
import time
from collections.abc import Sequence
from typing import Any, Literal

RESULTS = pathlib.Path(__file__).resolve().parents[2] / "benchmark-results"


def summarize(samples: list[float]) -> dict[str, float]:
    """Median, min, max and p99 (nearest rank) of a sample list."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * len(ordered) + 0.5) - 1)]
    return {
        "n": len(ordered),
        "p50": statistics.median(ordered),
        "p99": p99,
        "min": ordered[0],
        "max": ordered[-1],
    }


@dataclasses.dataclass(frozen=True)
class Plot:
    """A chart of figures measured in one run: one group of bars (or points) per label."""

    name: str
    """File name stem of the PNG."""
    title: str
    labels: list[str]
    """The categories (bar charts) or x values (line charts)."""
    series: dict[str, list[float]]
    """Series name → one value per label."""
    unit: str
    kind: Literal["bar", "barh", "line"] = "bar"
    x_label: str = ""


@dataclasses.dataclass(frozen=True)
class Table:
    """Figures of one run side by side, for the report's reader (the JSON keeps them all)."""

    title: str
    columns: list[str]
    """Column headings after the first (which names the rows)."""
    rows: list[tuple[str, list[float | str]]]
    """Row label → one cell per column; floats are shown to the millisecond."""


def save(
    name: str,
    figures: dict[str, Any],
    *,
    plots: Sequence[Plot] = (),
    tables: Sequence[Table] = (),
) -> pathlib.Path:
    """Write ``figures`` (with ``plots`` and ``tables``) to ``benchmark-results/<name>.json``;
    print them."""
    RESULTS.mkdir(exist_ok=True)
    document = {
        "benchmark": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpus": len(os.sched_getaffinity(0)),
            "python": platform.python_version(),
        },
        "figures": figures,
        "plots": [dataclasses.asdict(plot) for plot in plots],
        "tables": [dataclasses.asdict(table) for table in tables],
    }
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"\n== {name}\n{json.dumps(figures, indent=2)}\n(saved to {path})")
    return path
