"""KServe v2 over gRPC beside KServe v2 over HTTP: the harness's two protocols at the same load
on the same server, interleaved round by round, figures side by side with their spread.

The server is MLServer (one process serving both ports: the same model, the same server),
from its venv (--mlserver PATH, default $HARNESS_MLSERVER_PYTHON); with --twins, or when no
MLServer is there, the in-test twins around the embedded ONNX model (tests/support:
kserve_app over aiohttp, KServeGrpcServer over grpc.aio), which are two servers, not one.

Each round runs both protocols, in alternating order (gRPC first in odd rounds), at two loads:
  - closed loop: Offline over the digits set, `--in-flight` requests open: requests/s;
  - open loop: Server at a fixed rate, half the slower closed-loop rate of round 1 (so
    neither server queues): latency p50 and p99.
A figure is the median over rounds, with the rounds' min-max beside it: on a shared machine
one pair of runs can differ by more than the gap between the protocols.

    python benchmarks/bench_grpc.py [--rounds 5] [--seconds 3] [--in-flight 8] [--twins]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.config.run_config import RunConfig  # noqa: E402
from harness.run import runner  # noqa: E402

PROTOCOLS = ("kserve-v2-grpc", "kserve-v2")


@contextlib.contextmanager
def servers(mlserver_python: str | None, work: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """(what serves, {protocol: url})."""
    if mlserver_python:
        from tests.support.mlserver_server import mlserver

        with mlserver(mlserver_python, work) as srv:
            yield "MLServer 1.7.1 (sklearn digits; one server, both ports)", {"kserve-v2-grpc": srv.grpc, "kserve-v2": srv.base}
        return
    from harness.data.embedded import default_model
    from tests.support.grpc_servers import KServeGrpcServer
    from tests.support.http_servers import ServerThread, kserve_app

    model = default_model()
    with KServeGrpcServer(model) as grpc_srv, ServerThread(kserve_app(model)) as http_srv:
        yield "in-test twins (embedded ONNX model; grpc.aio and aiohttp: two servers)", {
            "kserve-v2-grpc": grpc_srv.url, "kserve-v2": http_srv.url}  # fmt: skip


def run(protocol: str, url: str, work: Path, scenario: str, seconds: float, in_flight: int, qps: float = 0) -> dict[str, Any]:
    settings: dict[str, Any] = {"min_duration_s": seconds, "min_query_count": 1}
    if scenario == "Server":
        settings.update(target_qps=qps, target_latency_ms=1000)
    s = runner.run(RunConfig(
        backend="http", scenario=scenario, dataset="digits", **settings,
        backend_options={"protocol": protocol, "url": url, "model_name": "digits", "max_in_flight": in_flight},
    ), work).summary  # fmt: skip
    ours = s["harness"]
    if ours["failed"]:
        raise SystemExit(f"{protocol} {scenario}: {ours['failed']} of {ours['samples']} failed: {ours['failures_by_reason']}")
    return ours


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):>9.2f}  ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    p = argparse.ArgumentParser(description="KServe v2 over gRPC beside KServe v2 over HTTP")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=3.0, help="length of each run")
    p.add_argument("--in-flight", type=int, default=8, help="requests open at once (both loads)")
    p.add_argument("--mlserver", default=os.environ.get("HARNESS_MLSERVER_PYTHON"), help="MLServer venv's python")
    p.add_argument("--twins", action="store_true", help="the in-test ONNX servers, even when MLServer is there")
    args = p.parse_args()
    python = None if args.twins or not args.mlserver or not Path(args.mlserver).exists() else args.mlserver

    figures: dict[str, dict[str, list[float]]] = {pr: {"req/s": [], "p50 ms": [], "p99 ms": []} for pr in PROTOCOLS}
    with tempfile.TemporaryDirectory(prefix="bench-grpc-") as tmp, servers(python, Path(tmp) / "server") as (what, urls):
        work = Path(tmp) / "runs"
        print(f"server: {what}; {os.cpu_count()} cores; {args.rounds} rounds of {args.seconds:g} s a run; "
              f"{args.in_flight} in flight")
        qps = 0.0
        for r in range(args.rounds):
            order = PROTOCOLS if r % 2 == 0 else PROTOCOLS[::-1]
            for protocol in order:
                figures[protocol]["req/s"].append(run(protocol, urls[protocol], work, "Offline", args.seconds,
                                                      args.in_flight)["throughput_per_s"])
            if r == 0:  # the open loop's rate: half the slower protocol's, the same for both, every round
                qps = 0.5 * min(figures[pr]["req/s"][0] for pr in PROTOCOLS)
            for protocol in order:
                lat = run(protocol, urls[protocol], work, "Server", args.seconds, args.in_flight, qps)["latency_ms"]
                figures[protocol]["p50 ms"].append(lat["p50"])
                figures[protocol]["p99 ms"].append(lat["p99"])
            print(f"  round {r + 1}: " + "; ".join(
                f"{pr} {figures[pr]['req/s'][-1]:,.0f} req/s, p50 {figures[pr]['p50 ms'][-1]:.2f} ms" for pr in order))

    print(f"\nmedian over {args.rounds} rounds (min-max); open loop at {qps:,.0f} req/s")
    print(f"  {'figure':<22}" + "".join(f"{pr:>28}" for pr in PROTOCOLS) + f"{'gRPC / HTTP':>14}")
    for key, label in (("req/s", "closed loop, req/s"), ("p50 ms", "open loop, p50 ms"), ("p99 ms", "open loop, p99 ms")):
        g, h = figures["kserve-v2-grpc"][key], figures["kserve-v2"][key]
        overlap = min(max(g), max(h)) >= max(min(g), min(h))
        ratio = statistics.median(g) / statistics.median(h)
        print(f"  {label:<22}{spread(g):>28}{spread(h):>28}{ratio:>13.2f}x" + ("  (within the spread)" if overlap else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
