"""Prometheus text, the one way the package writes it: ``prometheus_client``'s families and its
exposition (text format 0.0.4), for ``kms serve --metrics`` (both faces) and the audit's textfile::

    from pyiceberg_crypto._prometheus import counter, gauge, histogram, render

    text = render([
        counter("pyiceberg_crypto_kms_calls_total", "KMS calls finished.", {("wrap",): 3}, ("operation",)),
        gauge("pyiceberg_crypto_kms_up", "1 while the listener accepts connections.", {(): 1}),
        histogram("pyiceberg_crypto_kms_call_duration_seconds", "Time per call.", "operation",
                  {"wrap": ([0.001, 0.01], [2, 1, 0], 0.004)}),
    ])

Label values are escaped by the library; only fixed label sets and counts are ever rendered (no
paths, no key material).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

__all__ = ["CONTENT_TYPE", "LATENCY_BUCKETS", "counter", "gauge", "histogram", "render"]

#: The HTTP Content-Type of the text format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Upper bounds (seconds) of every KMS latency histogram's buckets (Prometheus ``le``), +Inf implied:
#: from an in-memory KMS (tens of microseconds) to a cloud KMS on a bad day.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def counter(name: str, help_text: str, samples: Mapping[tuple[str, ...], float],
            labels: Sequence[str] = ()) -> Metric:
    """A counter family (``name`` ends in ``_total``): one sample per tuple of label values."""
    return _filled(CounterMetricFamily(name, help_text, labels=list(labels)), samples)


def gauge(name: str, help_text: str, samples: Mapping[tuple[str, ...], float],
          labels: Sequence[str] = ()) -> Metric:
    """A gauge family: one sample per tuple of label values (booleans are 1 and 0)."""
    return _filled(GaugeMetricFamily(name, help_text, labels=list(labels)), samples)


def _filled(family, samples: Mapping[tuple[str, ...], float]) -> Metric:
    for values, value in samples.items():
        family.add_metric(list(values), float(value))
    return family


def histogram(name: str, help_text: str, label: str,
              series: Mapping[str, tuple[Sequence[float], Sequence[int], float]]) -> Metric:
    """A histogram family with one label: per label value, (upper bounds, counts per bucket with one
    past the last bound, not cumulative, sum of the observations)."""
    family = HistogramMetricFamily(name, help_text, labels=[label])
    for value, (bounds, counts, total) in series.items():
        cumulative, buckets = 0, []
        for bound, count in zip(bounds, counts):
            cumulative += count
            buckets.append((f"{bound:g}", float(cumulative)))
        buckets.append(("+Inf", float(sum(counts))))
        family.add_metric([value], buckets, float(total))
    return family


class _Families:
    def __init__(self, families: list[Metric]):
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return iter(self.families)


def render(families: Iterable[Metric]) -> str:
    """The families in Prometheus text format (0.0.4), in the order given."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(list(families)))
    return generate_latest(registry).decode("utf-8")
