"""An INVALID SingleStream/MultiStream run that ran out of pre-generated queries is explained
with the expected latency LoadGen sized them from, as it was set (LoadGen's effective
target_latency, which the explanation once read, is a Server setting: "0 ms")."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("scenario", "settings"),
    [
        ("SingleStream", {"single_stream_expected_latency_ms": 2}),
        ("MultiStream", {"multi_stream_expected_latency_ms": 2, "multi_stream_samples_per_query": 2, "max_batch": 2}),
    ],
)
def test_a_sut_faster_than_its_hint_is_explained_with_the_hint(run_harness, scenario, settings):
    # 0.2 s / 2 ms = 100 queries pre-generated; at ~0.1 ms each they end long before 0.2 s
    _, s = run_harness(backend="synthetic", scenario=scenario, min_duration_s=0.2, min_query_count=100,
                       backend_options={"service_time_ms": 0.1}, **settings)
    assert s["validity"]["result"] == "INVALID" and s["validity"]["min_duration_met"] is False
    (reason,) = [r for r in s["validity"]["reasons"] if "pre-generated" in r]
    assert "from the expected latency (2 ms)" in reason, reason
    key = next(iter(settings))
    assert any(f.startswith(f"lower {key} to ≈") for f in s["validity"]["fixes"]), s["validity"]["fixes"]
