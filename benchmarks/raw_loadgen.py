"""Raw LoadGen with a null SUT: the ceiling the harness is compared against.

Usage: python benchmarks/raw_loadgen.py SCENARIO VALUE OUTDIR [inline|queue]
(VALUE: target_qps for Server, expected_qps for Offline, the service time in ms for
SingleStream, which the inline callback waits the way the synthetic backend does: sleep,
then spin the last 0.3 ms). Prints one JSON line.
One LoadGen test per process, like the harness. BENCH_COALESCE=1 sets LoadGen's
server_coalesce_queries (BENCH_MIN_DURATION_S, BENCH_MIN_QUERY_COUNT, BENCH_TARGET_LATENCY_MS:
the test's length, its least query count and the Server latency bound).

inline (default): the issue callback completes every sample itself.
queue: the least a SUT whose issue callback only enqueues can do: a deque and one thread
that pops a query and completes it. It shows what that design costs before any harness
code runs (the GIL hand-off between LoadGen's thread and the worker).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import deque


def main() -> None:
    import mlperf_loadgen as lg

    scenario, value, outdir = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    sut_kind = sys.argv[4] if len(sys.argv) > 4 else "inline"
    os.makedirs(outdir, exist_ok=True)
    response = lg.QuerySampleResponse
    complete = lg.QuerySamplesComplete
    queue: deque = deque()
    cv = threading.Condition()
    state = {"sleeping": 0, "stop": False}

    def finish(samples: list) -> None:
        complete([response(s.id, 0, 0) for s in samples])

    service_ns = int(value * 1e6)

    def serve_and_finish(samples: list) -> None:
        end = time.perf_counter_ns() + service_ns
        time.sleep(max(0, service_ns - 300_000) / 1e9)
        while time.perf_counter_ns() < end:
            pass
        complete([response(s.id, 0, 0) for s in samples])

    def issue_queued(samples: list) -> None:
        queue.append(samples)
        if state["sleeping"]:
            with cv:
                cv.notify()

    def worker() -> None:
        while True:
            if queue:
                finish(queue.popleft())
                continue
            with cv:
                state["sleeping"] += 1
                while not queue and not state["stop"]:
                    cv.wait()
                state["sleeping"] -= 1
                if state["stop"] and not queue:
                    return

    thread = threading.Thread(target=worker, daemon=True)
    if sut_kind == "queue":
        thread.start()
    if scenario == "SingleStream":
        on_issue = serve_and_finish
    else:
        on_issue = issue_queued if sut_kind == "queue" else finish
    sut = lg.ConstructSUT(on_issue, lambda: None)
    qsl = lg.ConstructQSL(1024, 1024, lambda s: None, lambda s: None)
    ts = lg.TestSettings()
    ts.scenario = getattr(lg.TestScenario, scenario)
    ts.mode = lg.TestMode.PerformanceOnly
    ts.min_duration_ms = int(float(os.environ.get("BENCH_MIN_DURATION_S", "2")) * 1000)
    ts.min_query_count = int(os.environ.get("BENCH_MIN_QUERY_COUNT", "1000"))
    if scenario == "Server":
        ts.server_target_qps = value
        ts.server_target_latency_ns = int(float(os.environ.get("BENCH_TARGET_LATENCY_MS", "10")) * 1e6)
        ts.server_coalesce_queries = os.environ.get("BENCH_COALESCE") == "1"
    elif scenario == "SingleStream":
        ts.single_stream_expected_latency_ns = service_ns
        ts.min_query_count = 100
    else:
        ts.offline_expected_qps = value
    log = lg.LogSettings()
    log.log_output.outdir = outdir
    log.enable_trace = False
    t0 = time.perf_counter()
    lg.StartTestWithLogSettings(sut, qsl, ts, log)
    if sut_kind == "queue":
        with cv:
            state["stop"] = True
            cv.notify_all()
        thread.join()
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
        "p50_ms": (values.get("result_50.00_percentile_latency_ns") or 0) / 1e6,
        "p99_ms": (values.get("result_99.00_percentile_latency_ns") or 0) / 1e6,
        "wall_s": time.perf_counter() - t0,
    }))


if __name__ == "__main__":
    main()
