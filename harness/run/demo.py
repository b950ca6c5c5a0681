"""`harness run` with no arguments: the embedded model, Offline + SingleStream + accuracy."""

from __future__ import annotations

from harness.config.run_config import RunConfig
from harness.data.embedded import default_model

MIN_DURATION_S = 3.0


def demo_configs() -> list[RunConfig]:
    model = default_model()
    common = dict(backend="onnxruntime", model=str(model), dataset="digits", name="demo", min_duration_s=MIN_DURATION_S)
    return [
        # no offline_expected_qps: the runner sizes the query from a pilot (harness.run.sizing)
        RunConfig(**common, scenario="Offline", max_batch=64),
        # LoadGen pre-generates ~2 x min_duration / expected latency queries: 0.05 ms gave 120k,
        # fewer than a machine serving the embedded model at 74k queries/s needs in 3 s (INVALID)
        RunConfig(**common, scenario="SingleStream", single_stream_expected_latency_ms=0.01, min_query_count=1000),
        RunConfig(**common, scenario="Offline", mode="AccuracyOnly", max_batch=64),
    ]
