"""What a refresh of the exporter found: values by metric name and label values. No Dagster imports."""

from __future__ import annotations

from collections import defaultdict

from matos_dagster.core.metrics.catalog import BY_NAME

Labels = tuple[str, ...]


class Samples:
    """Per metric of the catalog, a value per label set (a summary's value: (count, sum))."""

    def __init__(self) -> None:
        self.values: dict[str, dict[Labels, object]] = defaultdict(dict)

    def set(self, name: str, labels: Labels, value) -> None:
        metric = BY_NAME[name]  # a name the catalog lacks is a programming error: fail loudly
        assert len(labels) == len(metric.labels), (name, labels)
        self.values[name][tuple(str(x) for x in labels)] = value

    def update(self, other: "Samples") -> None:
        for name, by_labels in other.values.items():
            self.values[name].update(by_labels)
