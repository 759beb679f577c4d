"""Gauges read at scrape time from their source, so they can never drift from it."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

Samples = Mapping[tuple[str, ...], float]
"""Label values (in the gauge's label order) → value; empty for a gauge absent now."""


class ScrapeGauge(Collector):
    """One gauge whose samples ``read`` returns at each scrape."""

    def __init__(
        self, name: str, documentation: str, read: Callable[[], Samples],
        labels: Sequence[str] = (),
    ) -> None:  # fmt: skip
        self._name = name
        self._documentation = documentation
        self._read = read
        self._labels = list(labels)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The gauge as ``read`` gives it now."""
        family = GaugeMetricFamily(self._name, self._documentation, labels=self._labels)
        for labels, sample in sorted(self._read().items()):
            family.add_metric(list(labels), sample)
        yield family


def value(read: Callable[[], float | None]) -> Callable[[], Samples]:
    """The samples of an unlabelled gauge: ``read``'s value, none while it is None."""

    def samples() -> Samples:
        current = read()
        return {} if current is None else {(): current}

    return samples
