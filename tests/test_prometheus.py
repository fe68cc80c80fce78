"""The one Prometheus renderer (pyiceberg_crypto._prometheus): families as the exposition format
wants them, label values escaped, histograms cumulative with the slow tail in ``+Inf``."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from pyiceberg_crypto._prometheus import counter, gauge, histogram, render


def test_counters_gauges_and_histograms_parse_back():
    text = render([
        counter("demo_calls_total", "Calls.", {("wrap",): 3, ("unwrap",): 1}, ("operation",)),
        gauge("demo_up", "Up.", {(): True}),
        histogram("demo_seconds", "Time.", "operation", {"wrap": ((0.001, 0.01), (2, 1, 4), 60.5)}),
    ])
    families = {f.name: f for f in text_string_to_metric_families(text)}
    calls = {s.labels["operation"]: s.value for s in families["demo_calls"].samples if s.name == "demo_calls_total"}
    assert calls == {"wrap": 3.0, "unwrap": 1.0}
    assert [s.value for s in families["demo_up"].samples] == [1.0]
    buckets = {s.labels["le"]: s.value for s in families["demo_seconds"].samples if s.name == "demo_seconds_bucket"}
    assert buckets == {"0.001": 2.0, "0.01": 3.0, "+Inf": 7.0}  # cumulative; 4 slower than every bound
    count = [s.value for s in families["demo_seconds"].samples if s.name == "demo_seconds_count"]
    assert count == [7.0] and "demo_seconds_sum{operation=\"wrap\"} 60.5" in text


def test_label_values_are_escaped():
    text = render([gauge("demo_table_ok", "OK.", {('a"b\\c\nd',): 0}, ("table",))])
    assert 'demo_table_ok{table="a\\"b\\\\c\\nd"} 0.0' in text
    [family] = text_string_to_metric_families(text)
    assert family.samples[0].labels["table"] == 'a"b\\c\nd'


def test_an_empty_family_keeps_its_help_and_type():
    text = render([counter("demo_refused_total", "Refused.", {}, ("reason",))])
    assert "# HELP demo_refused_total Refused.\n# TYPE demo_refused_total counter\n" in text
