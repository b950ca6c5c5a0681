"""`harness run` with no arguments: the embedded model, Offline + SingleStream + accuracy."""

from __future__ import annotations

import tempfile
from pathlib import Path

from harness.config.run_config import RunConfig
from harness.data.embedded import default_model
from harness.run import runner

MIN_DURATION_S = 3.0
PILOT_S = 0.5
PILOT_HINT_QPS = 100_000


def pilot_offline_rate(config: RunConfig) -> float:
    """Samples/s of a short Offline pilot of the same config, harness overhead included.

    LoadGen sizes the Offline query from `offline_expected_qps`: a hint below the real rate
    makes the run too short (INVALID), one far above it makes it needlessly long. A plain
    ORT loop overstates the rate for a model this small, so the pilot runs the real path.
    """
    pilot = config.model_copy(
        update={"min_duration_s": PILOT_S, "offline_expected_qps": PILOT_HINT_QPS, "name": "pilot"}
    )
    with tempfile.TemporaryDirectory(prefix="harness-pilot-") as tmp:
        summary = runner.run(pilot, Path(tmp)).summary
    return float(summary["loadgen"]["throughput_per_s"] or PILOT_HINT_QPS)


def demo_configs() -> list[RunConfig]:
    model = default_model()
    common = dict(backend="onnxruntime", model=str(model), dataset="digits", name="demo", min_duration_s=MIN_DURATION_S)
    offline = RunConfig(**common, scenario="Offline", max_batch=64)
    # 20 % above the pilot: the query then lasts a little over min_duration.
    hint = round(pilot_offline_rate(offline) * 1.2, -2)
    return [
        offline.model_copy(update={"offline_expected_qps": hint}),
        RunConfig(**common, scenario="SingleStream", single_stream_expected_latency_ms=0.05, min_query_count=1000),
        RunConfig(**common, scenario="Offline", mode="AccuracyOnly", max_batch=64),
    ]
