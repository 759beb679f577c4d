"""Record benchmark figures: printed as a table and saved as JSON under benchmark-results/."""

from __future__ import annotations

import json
import os
import pathlib
import platform
import statistics
import time
from typing import Any

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


def save(name: str, figures: dict[str, Any]) -> pathlib.Path:
    """Write ``figures`` to ``benchmark-results/<name>.json`` and print them."""
    RESULTS.mkdir(exist_ok=True)
    document = {
        "benchmark": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpus": len(os.sched_getaffinity(0)),
            "python": platform.python_version(),
        },
        "figures": figures,
    }
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"\n== {name}\n{json.dumps(figures, indent=2)}\n(saved to {path})")
    return path
