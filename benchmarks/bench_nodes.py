"""Scale-out across nodes: what replicas and client shards cost on a 3-node Ray cluster,
beside the same on one node. One run, figures side by side, sides interleaved round by round.

The cluster is tests/support/ray_nodes.py's: a head and 3 worker nodes on this host, each
its own raylet, node id and loopback address, each worker with one logical GPU that
`gpus_per_replica` places by (one replica a node, as on GPU machines). It is the protocol,
placement and channels of a real cluster, minus the network, and on this host's cores.

1. Throughput. 3 replicas of a CPU-bound model (an MLP 512-H-H-10 on ONNX Runtime, one
   intra-op thread each, batch B) served by the harness (LoadGen Offline, two calls in
   flight a replica, direct channels): one a worker node of the cluster, and all 3 on one
   node (the local Ray a run starts, half a CPU each: this host has 2), against 3 plain
   processes running `session.run` on the same batch in a loop. Ratios are medians of the
   rounds' own ratios, their range beside them.
2. TTFT error. Server at --qps against the no-op server, which injects TTFT 200 ms and
   20 ms a token for 50 tokens: one loop in the driver; 3 client shards, one a worker node
   (`client_nodes: 3`, Ray actors over TCP); 3 shards on one node (`client_processes: 3`,
   socket pairs). The load is one that one loop carries, so every side should be within
   a few tenths of a percent of the truth, and what the nodes add shows.

On 2 cores, 3 replicas or 3 plain processes share 2 cores, and the driver (LoadGen, the
harness) and 4 idle raylets take their share from both: the figures are ratios on this
host, not a cluster's scaling.

    python benchmarks/bench_nodes.py [--rounds 3] [--seconds 6] [--hidden 1024] [--qps 150]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_core import heavy_mlp  # noqa: E402
from bench_http import noop_server  # noqa: E402
from bench_ray import plain_processes  # noqa: E402
from bench_shards import TRUTH  # noqa: E402
from bench_shards import run as shard_run  # noqa: E402

from harness.config.run_config import RunConfig  # noqa: E402
from harness.results import folder  # noqa: E402
from harness.run import runner  # noqa: E402
from tests.support.ray_nodes import RayNodes, ray_nodes  # noqa: E402

REPLICAS = 3


def replicas_run(model: Path, distribute: dict[str, Any], batch: int, seconds: float, hint: float,
                 out: Path) -> tuple[float, list[str]]:
    """The harness's Offline throughput with 3 replicas placed by `distribute`, and the
    node each replica ran on (from cluster.json)."""
    config = RunConfig(name="bench-nodes", backend="onnxruntime", model=str(model), scenario="Offline",
                       max_batch=batch, offline_expected_qps=hint, min_duration_s=seconds,
                       distribute={"replicas": REPLICAS, "in_flight": 2, **distribute})
    outcome = runner.run(config, out)
    s = outcome.summary
    if s["validity"]["result"] != "VALID" or s["harness"]["success_rate"] != 1.0:
        print(f"  note: a run was {s['validity']['result']}, success {s['harness']['success_rate']}")
    cluster = folder.read_json(outcome.run_dir, folder.CLUSTER) or {}
    return s["loadgen"]["throughput_per_s"], [r["address"] for r in cluster.get("replicas", [])]


def throughput(nodes: RayNodes, args: argparse.Namespace, work: Path) -> None:
    model = work / f"mlp{args.hidden}.onnx"
    heavy_mlp(model, args.hidden)
    sides: dict[str, list[float]] = {"plain": [], "3 nodes": [], "1 node": []}
    placed: dict[str, set[str]] = {"3 nodes": set(), "1 node": set()}
    distribute = {"3 nodes": {"address": nodes.address, "gpus_per_replica": 1},
                  "1 node": {"cpus_per_replica": 0.5}}
    for r in range(args.rounds):
        for side in (list(sides) if r % 2 == 0 else list(reversed(sides))):
            if side == "plain":
                sides[side].append(plain_processes(model, REPLICAS, args.batch, args.seconds))
                continue
            hint = 1.5 * (sides["plain"][-1] if sides["plain"] else 100_000)
            rate, where = replicas_run(model, distribute[side], args.batch, args.seconds, hint, work / "runs")
            sides[side].append(rate)
            placed[side].update(where)
        print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in sides.items()), flush=True)
    names = {"plain": f"{REPLICAS} plain processes, session.run loop",
             "3 nodes": f"harness, {REPLICAS} replicas, one a node ({len(placed['3 nodes'])} addresses)",
             "1 node": f"harness, {REPLICAS} replicas on one node ({len(placed['1 node'])} address)"}
    print(f"\n1. throughput, {REPLICAS} x MLP 512-{args.hidden}-{args.hidden}-10, batch {args.batch}, "
          f"{args.rounds} rounds of {args.seconds:g} s; samples/s (LoadGen Offline for the harness)")
    print(f"  {'side':<58}{'median':>9}{'rounds':>18}{'/ plain':>8}{'rounds':>13}")
    for side, values in sides.items():
        ratios = [v / b for v, b in zip(values, sides["plain"])]
        print(f"  {names[side][:57]:<58}{statistics.median(values):>9,.0f}{min(values):>9,.0f}-{max(values):<8,.0f}"
              f"{statistics.median(ratios):>8.3f}{min(ratios):>7.3f}-{max(ratios):.3f}")


def ttft_error(nodes: RayNodes, args: argparse.Namespace, work: Path) -> None:
    sides = {"one loop": {}, "3 shards, one a node": {"address": nodes.address, "client_nodes": 3},
             "3 shards, one node": {"client_processes": 3, "client_transport": "process"}}
    rows: dict[str, dict[str, list[float]]] = {side: {} for side in sides}
    extra = ["--ttft-ms", str(TRUTH["ttft_ms"]), "--tpot-ms", str(TRUTH["tpot_ms"]), "--tokens", str(TRUTH["tokens"]),
             "--coarse"]
    with noop_server(None, *extra) as url:
        for r in range(args.rounds):
            for side in (list(sides) if r % 2 == 0 else list(reversed(sides))):
                s, child = shard_run(url, work / "shards", sides[side], args.qps, args.seconds, TRUTH["tokens"], 64)
                tok = s["tokens"]
                hops = child.get("shard_hops_us") or {}
                shards = (s.get("client_shards") or {}).get("shards") or []
                for key, value in (
                    ("TTFT p50 err %, issue", (tok["ttft_ms"]["p50"] / TRUTH["ttft_ms"] - 1) * 100),
                    ("TTFT p99 err %, issue", (tok["ttft_ms"]["p99"] / TRUTH["ttft_ms"] - 1) * 100),
                    ("TTFT p50 err %, dispatch", (tok["ttft_from_dispatch_ms"]["p50"] / TRUTH["ttft_ms"] - 1) * 100),
                    ("TPOT p50 err %", (tok["tpot_ms"]["p50"] / TRUTH["tpot_ms"] - 1) * 100),
                    ("hop to shard p50 µs", (hops.get("to_shard") or {}).get("p50")),
                    ("hop back p50 µs", (hops.get("back") or {}).get("p50")),
                    ("nodes the shards ran on", len({sh.get("node_id") for sh in shards}) if shards else None),
                    ("success %", s["harness"]["success_rate"] * 100),
                ):
                    if value is not None:
                        rows[side].setdefault(key, []).append(value)
                print(f"  round {r + 1} {side}: TTFT p50 {tok['ttft_ms']['p50']:.2f} ms", flush=True)
    streams = args.qps * (TRUTH["ttft_ms"] + (TRUTH["tokens"] - 1) * TRUTH["tpot_ms"]) / 1e3
    print(f"\n2. TTFT error: Server {args.qps:g}/s, TTFT {TRUTH['ttft_ms']:g} ms + {TRUTH['tokens']} tokens at "
          f"{TRUTH['tpot_ms']:g} ms (~{streams:,.0f} streams open); medians (range) over {args.rounds} rounds")
    print(f"  {'figure':<26}" + "".join(f"{side:>26}" for side in sides))
    for key in rows["3 shards, one a node"]:
        cells = []
        for side in sides:
            v = rows[side].get(key, [])
            fmt = ",.0f" if key.startswith(("hop", "nodes", "success")) else ",.2f"
            cells.append(f"{statistics.median(v):{fmt}} ({min(v):{fmt}}/{max(v):{fmt}})" if v else "—")
        print(f"  {key:<26}" + "".join(f"{c:>26}" for c in cells))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6.0, help="length of each measurement")
    ap.add_argument("--hidden", type=int, default=1024, help="MLP width: 1024 is ~13 µs a sample here")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--qps", type=float, default=150.0, help="Server rate of the TTFT part: one loop carries it")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--throughput-only", action="store_true")
    which.add_argument("--ttft-only", action="store_true")
    args = ap.parse_args()
    print(f"cores: {os.cpu_count()}; a head and 3 worker nodes on this host (127.0.0.2-5)")
    with tempfile.TemporaryDirectory(prefix="bench-nodes-") as tmp, ray_nodes(workers=3) as nodes:
        if not args.ttft_only:
            throughput(nodes, args, Path(tmp))
        if not args.throughput_only:
            ttft_error(nodes, args, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
