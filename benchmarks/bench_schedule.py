"""How many timed sends a second does the harness's arrival schedule keep, and how late?

One run, both sides interleaved round by round against the same no-op OpenAI server
(benchmarks/noop_server.py, its own process, pinned to the last core; clients on the first):

  - the harness: a real LoadGen Offline run, http backend, `arrivals: constant` at RATE/s
    (harness.child.schedule on a precise loop): sends/s from summary.json's
    `schedule.achieved_per_s`, lag p99 from its `lag_ms`
  - a minimal asyncio scheduler: one default loop, `call_at` for each send at the same
    times, the send a streamed chat request with aiohttp; lag = its start - its due time

The target is RATE = 2,000 sends/s with lag p99 <= 1 ms. Each round's figures are printed,
then the median and the spread (min-max) of each side over the rounds.

    python benchmarks/bench_schedule.py [--rate 2000] [--seconds 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_http import _chat_body, _chat_request, noop_server  # noqa: E402

from harness.config.host import usable_cores  # noqa: E402
from harness.config.run_config import RunConfig  # noqa: E402
from harness.results.stats import distribution  # noqa: E402
from harness.run import runner  # noqa: E402

IN_FLIGHT = 256  # never the limit at 2,000/s of ~1 ms requests: lag is the schedule's own


def run_harness(url: str, rate: float, seconds: float, out: Path) -> tuple[float, float, int, float]:
    """(sends/s, lag p99 ms, sends, lag p50 ms) of one harness run."""
    config = RunConfig(
        name="bench-schedule", backend="http", scenario="Offline", dataset="synthetic:isl=1,osl=4,n=4096",
        backend_options={"protocol": "openai-chat", "url": url + "/v1", "max_in_flight": IN_FLIGHT,
                         "warmup_requests": 16},
        arrivals={"kind": "constant", "rate": rate},
        min_duration_s=seconds / 1.1,  # LoadGen's query: 1.1 x rate x min_duration samples
    )
    s = runner.run(config, out).summary["schedule"]
    return s["achieved_per_s"], s["lag_ms"]["p99"], s["requests"], s["lag_ms"]["p50"]


async def _minimal(url: str, rate: float, seconds: float) -> tuple[float, float, int, float]:
    """The least an asyncio client does to keep a constant schedule: a call_at per send."""
    import aiohttp

    body = _chat_body(4)
    n = int(rate * seconds)
    loop = asyncio.get_running_loop()
    lags: list[int] = []
    sent: list[int] = []
    tasks: set[asyncio.Task[Any]] = set()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=IN_FLIGHT)) as session:
        await asyncio.gather(*(_chat_request(session, url, body, time.perf_counter_ns()) for _ in range(16)))
        start_ns = time.perf_counter_ns()
        skew = loop.time() - start_ns / 1e9
        done = loop.create_future()

        def send(due_ns: int) -> None:
            now = time.perf_counter_ns()
            lags.append(now - due_ns)
            sent.append(now)
            task = loop.create_task(_chat_request(session, url, body, now))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            if len(sent) == n:
                done.set_result(None)

        for k in range(1, n + 1):
            due = start_ns + round(k * 1e9 / rate)
            loop.call_at(due / 1e9 + skew, send, due)
        await done
        await asyncio.gather(*list(tasks))
    span = (sent[-1] - sent[0]) / 1e9
    lag = distribution(lags, unit=1e6)
    return (n - 1) / span, float(lag["p99"]), n, float(lag["p50"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=2000.0)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    cores = usable_cores()
    server_core = cores - 1 if cores > 1 else None
    if server_core is not None:  # both clients (the harness's child inherits it) on the first core
        os.sched_setaffinity(0, {0})
    rows: dict[str, list[tuple[float, float, int, float]]] = {"harness": [], "minimal asyncio": []}
    with tempfile.TemporaryDirectory() as tmp, noop_server(server_core) as url:
        for r in range(args.rounds):
            # which side goes first alternates: a burst of the machine's load hits both alike
            order = ("harness", "minimal asyncio") if r % 2 == 0 else ("minimal asyncio", "harness")
            for side in order:
                if side == "harness":
                    fig = run_harness(url, args.rate, args.seconds, Path(tmp) / f"r{r}")
                else:
                    fig = asyncio.run(_minimal(url, args.rate, args.seconds))
                rows[side].append(fig)
                print(f"round {r + 1} {side:16s} {fig[0]:8,.0f} sends/s  lag p50 {fig[3]:6.3f} p99 {fig[1]:7.3f} ms"
                      f"  ({fig[2]:,} sends)", flush=True)
    print(f"\nconstant schedule at {args.rate:,.0f} sends/s, {args.seconds:g} s a round, {args.rounds} rounds "
          f"(target: {args.rate:,.0f} sends/s, lag p99 <= 1 ms)")
    print(f"{'side':16s} {'sends/s median (min-max)':>28s} {'lag p99 ms median (min-max)':>30s}")
    for side, figs in rows.items():
        rate = [f[0] for f in figs]
        lag = [f[1] for f in figs]
        print(f"{side:16s} {statistics.median(rate):>10,.0f} ({min(rate):,.0f}-{max(rate):,.0f})"
              f" {statistics.median(lag):>14.3f} ({min(lag):.3f}-{max(lag):.3f})")
    print(f"load average while it ran: {os.getloadavg()[0]:.2f} (1 min) on {cores} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
