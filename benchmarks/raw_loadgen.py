"""Raw LoadGen with an inline null SUT: the ceiling the harness is compared against.

Usage: python benchmarks/raw_loadgen.py SCENARIO VALUE OUTDIR
(VALUE: target_qps for Server, expected_qps for Offline). Prints one JSON line.
One LoadGen test per process, like the harness.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    import mlperf_loadgen as lg

    scenario, value, outdir = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    os.makedirs(outdir, exist_ok=True)
    response = lg.QuerySampleResponse
    complete = lg.QuerySamplesComplete

    def issue(samples: list) -> None:
        complete([response(s.id, 0, 0) for s in samples])

    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(1024, 1024, lambda s: None, lambda s: None)
    ts = lg.TestSettings()
    ts.scenario = getattr(lg.TestScenario, scenario)
    ts.mode = lg.TestMode.PerformanceOnly
    ts.min_duration_ms = int(float(os.environ.get("BENCH_MIN_DURATION_S", "2")) * 1000)
    ts.min_query_count = 1000
    if scenario == "Server":
        ts.server_target_qps = value
        ts.server_target_latency_ns = int(float(os.environ.get("BENCH_TARGET_LATENCY_MS", "10")) * 1e6)
    else:
        ts.offline_expected_qps = value
    log = lg.LogSettings()
    log.log_output.outdir = outdir
    log.enable_trace = False
    t0 = time.perf_counter()
    lg.StartTestWithLogSettings(sut, qsl, ts, log)
    lg.DestroyQSL(qsl)
    lg.DestroySUT(sut)
    values = {}
    with open(os.path.join(outdir, "mlperf_log_detail.txt")) as f:
        for line in f:
            if line.startswith(":::MLLOG"):
                e = json.loads(line[9:])
                values[e["key"]] = e["value"]
    print(json.dumps({
        "validity": values.get("result_validity"),
        "throughput": values.get("result_completed_samples_per_sec") or values.get("result_samples_per_second"),
        "p99_ms": (values.get("result_99.00_percentile_latency_ns") or 0) / 1e6,
        "wall_s": time.perf_counter() - t0,
    }))


if __name__ == "__main__":
    main()
