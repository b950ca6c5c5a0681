"""Client shards: what the hop to a shard costs, and whether shards keep a load faithful
that one event loop cannot. One run, figures side by side, sides interleaved round by round.

1. The hop. Server at --hop-qps against the no-op server (4 tokens, answered at once), on
   three sides: one loop in the test process; 2 shards over socket pairs (process); 2
   shards as Ray actors on a local Ray (ray). LoadGen's latency p50/p99 includes both
   hops; the hops themselves come from child.json. This is the "multiprocessing or Ray
   on one host" measurement: the default transport is the cheaper one.
2. Saturation. The no-op server, in its own process, injects TTFT 200 ms and 20 ms a
   token for 50 tokens with plain timers (--coarse: it costs CPU per event only), and
   Server arrivals at --qps keep ~qps x 1.18 s streams open. Sides: one loop; 2 shards.
   Per side: TTFT p50 error (from issue, and from dispatch), ITL and TPOT p50 error, the
   client loops' lag, and the server's own lateness against its deadlines (GET /stats),
   so what is the server's and what is the client's can be told apart, and (host
   telemetry) the client's CPU with its shards and how busy the machine's cores were.
   Goal: 2 shards within 2 % of the truth where one loop is not.

    python benchmarks/bench_shards.py [--qps 900] [--hop-qps 200] [--seconds 5] [--rounds 3] [--hop-only | --skip-hop]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_http import noop_server  # noqa: E402

from harness.config.run_config import RunConfig  # noqa: E402
from harness.results import folder  # noqa: E402
from harness.run import runner  # noqa: E402

TRUTH = {"ttft_ms": 200.0, "tpot_ms": 20.0, "tokens": 50}
SIDES = {"one loop": {}, "2 shards (process)": {"client_processes": 2},
         "2 shards (ray)": {"client_processes": 2, "client_transport": "ray"}}


def run(url: str, out: Path, distribute: dict[str, Any], qps: float, seconds: float, tokens: int,
        warmup: int, host: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    config = RunConfig(
        name="bench-shards", backend="http", scenario="Server", dataset=f"synthetic:isl=8,osl={tokens},n=4096",
        backend_options={"protocol": "openai-chat", "url": url + "/v1", "warmup_requests": warmup},
        target_qps=qps, min_duration_s=seconds, min_query_count=100, use_token_latencies=True,
        ttft_latency_ms=5000, tpot_latency_ms=500, distribute=distribute, telemetry={"host": host},
    )
    outcome = runner.run(config, out)
    return outcome.summary, folder.read_json(outcome.run_dir, folder.CHILD) or {}


def med(values: list[float]) -> str:
    return f"{statistics.median(values):,.3f}" if values else "—"


def spread(values: list[float]) -> str:
    return f"{min(values):,.2f}–{max(values):,.2f}" if len(values) > 1 else ""


def hop_costs(out: Path, qps: float, seconds: float, rounds: int) -> None:
    fig: dict[str, dict[str, list[float]]] = {side: {} for side in SIDES}
    with noop_server(None) as url:
        for r in range(rounds):
            order = list(SIDES) if r % 2 == 0 else list(reversed(SIDES))
            for side in order:
                s, child = run(url, out, SIDES[side], qps, seconds, 4, 16)
                lat = s["loadgen"]["latency_ms"]
                hops = child.get("shard_hops_us") or {}
                for key, value in (("LoadGen p50 ms", lat["p50"]), ("LoadGen p99 ms", lat["p99"]),
                                   ("hop to shard p50 µs", (hops.get("to_shard") or {}).get("p50")),
                                   ("hop back p50 µs", (hops.get("back") or {}).get("p50")),
                                   ("hop back p99 µs", (hops.get("back") or {}).get("p99"))):
                    if value is not None:
                        fig[side].setdefault(key, []).append(value)
    keys = ["LoadGen p50 ms", "LoadGen p99 ms", "hop to shard p50 µs", "hop back p50 µs", "hop back p99 µs"]
    print(f"\n1. the hop: Server {qps:g}/s, no-op server (4 tokens), {rounds} rounds; medians (range)")
    print(f"  {'figure':<22}" + "".join(f"{side:>26}" for side in SIDES))
    for key in keys:
        print(f"  {key:<22}" + "".join(f"{med(fig[side].get(key, [])) + ' (' + spread(fig[side].get(key, [])) + ')':>26}"
                                       if fig[side].get(key) else f"{'—':>26}" for side in SIDES))
    base = statistics.median(fig["one loop"]["LoadGen p50 ms"])
    for side in list(SIDES)[1:]:
        extra = (statistics.median(fig[side]["LoadGen p50 ms"]) - base) * 1e3
        print(f"  {side}: LoadGen's p50 {extra:+,.0f} µs against one loop")


def stats(url: str) -> dict[str, Any]:
    return json.loads(urllib.request.urlopen(url + "/stats", timeout=5).read())


def saturation(out: Path, qps: float, seconds: float, rounds: int) -> None:
    sides = {k: v for k, v in SIDES.items() if k != "2 shards (ray)"}
    rows: dict[str, dict[str, list[float]]] = {side: {} for side in sides}
    extra = ["--ttft-ms", str(TRUTH["ttft_ms"]), "--tpot-ms", str(TRUTH["tpot_ms"]), "--tokens", str(TRUTH["tokens"]),
             "--coarse"]
    with noop_server(None, *extra) as url:
        for r in range(rounds):
            for side in (list(sides) if r % 2 == 0 else list(reversed(sides))):
                stats(url)  # reset the server's lateness
                s, child = run(url, out, sides[side], qps, seconds, TRUTH["tokens"], 64, host=True)
                late = stats(url)
                tok = s["tokens"]
                lag = child.get("loop_lag_ms") or {}
                host = (s.get("telemetry") or {}).get("host") or {}
                busy = [b for b in host.get("machine_core_busy") or [] if b is not None]
                for key, value in (
                    ("TTFT p50 err %, issue", (tok["ttft_ms"]["p50"] / TRUTH["ttft_ms"] - 1) * 100),
                    ("TTFT p50 err %, dispatch", (tok["ttft_from_dispatch_ms"]["p50"] / TRUTH["ttft_ms"] - 1) * 100),
                    ("ITL p50 err %", (tok["itl_ms"]["p50"] / TRUTH["tpot_ms"] - 1) * 100),
                    ("TPOT p50 err %", (tok["tpot_ms"]["p50"] / TRUTH["tpot_ms"] - 1) * 100),
                    ("client loop lag p50 ms", lag.get("p50")),
                    ("client loop lag p99 ms", lag.get("p99")),
                    ("server 1st token late p50 ms", late["first_token"].get("p50")),
                    ("server token late p50 ms", late["token"].get("p50")),
                    ("server loop lag p50 ms", late["loop"].get("p50")),
                    ("server loop lag p99 ms", late["loop"].get("p99")),
                    ("client CPU, cores", host.get("process_cores")),
                    ("machine busy %", 100 * sum(busy) / len(busy) if busy else None),
                    ("success %", s["harness"]["success_rate"] * 100),
                ):
                    if value is not None:
                        rows[side].setdefault(key, []).append(value)
                print(f"  round {r + 1} {side}: TTFT {tok['ttft_ms']['p50']:.1f} ms, ITL {tok['itl_ms']['p50']:.2f} ms, "
                      f"lag p50 {lag.get('p50', float('nan')):.1f} ms", flush=True)
    streams = qps * (TRUTH["ttft_ms"] + (TRUTH["tokens"] - 1) * TRUTH["tpot_ms"]) / 1e3
    print(f"\n2. saturation: Server {qps:g}/s, TTFT {TRUTH['ttft_ms']:g} ms + {TRUTH['tokens']} tokens at "
          f"{TRUTH['tpot_ms']:g} ms (~{streams:,.0f} streams open, ~{streams * 1e3 / TRUTH['tpot_ms']:,.0f} events/s); "
          f"medians (range) over {rounds} rounds")
    print(f"  {'figure':<30}" + "".join(f"{side:>26}" for side in sides))
    for key in rows["one loop"]:
        print(f"  {key:<30}" + "".join(f"{med(rows[side].get(key, [])) + ' (' + spread(rows[side].get(key, [])) + ')':>26}"
                                       for side in sides))

    def within(side: str) -> bool:
        return all(abs(statistics.median(rows[side][k])) <= 2.0
                   for k in ("TTFT p50 err %, issue", "ITL p50 err %", "TPOT p50 err %"))

    one, two = within("one loop"), within("2 shards (process)")
    print(f"  goal: 2 shards within 2 % (TTFT from issue, ITL, TPOT) where one loop is not: "
          f"{'PASS' if two and not one else 'FAIL'} (one loop {'within' if one else 'outside'}, "
          f"2 shards {'within' if two else 'outside'})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qps", type=float, default=900.0, help="saturation rate: one loop must fall behind at it")
    ap.add_argument("--hop-qps", type=float, default=200.0)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--skip-hop", action="store_true", help="only the saturation rounds")
    which.add_argument("--hop-only", action="store_true", help="only the hop rounds")
    args = ap.parse_args()
    print(f"cores: {os.cpu_count()}; server and clients unpinned")
    with tempfile.TemporaryDirectory(prefix="bench-shards-") as tmp:
        if not args.skip_hop:
            hop_costs(Path(tmp), args.hop_qps, args.seconds, args.rounds)
        if not args.hop_only:
            saturation(Path(tmp), args.qps, args.seconds, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
