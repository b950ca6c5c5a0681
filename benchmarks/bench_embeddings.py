"""How fast is the harness's embeddings client? Inputs a second beside a minimal aiohttp client.

A no-op OpenAI server (benchmarks/noop_server.py, its own process, pinned to the last core)
answers POST /v1/embeddings at once, one vector of --dimension floats per input; each
client, pinned to the first core, keeps --concurrency requests of --batch texts open:
    - the harness: LoadGen Offline, http backend, protocol openai-embeddings (each answer
      parsed into float32 vectors and checked: dimension, finite, one per input)
    - a minimal client: aiohttp, one loop, one pooled session, each answer json-decoded
      and its vectors counted, written below
The two alternate round by round on the same server (a shared machine moves a single pair
of runs by far more than the difference sought); each round's inputs/s, the medians and
the spread (min-max) are printed. The harness's figure is its own (summary.json vectors:
inputs over first issue to last completion), LoadGen's beside it.

    python benchmarks/bench_embeddings.py [--rounds 5] [--inputs 20000] [--batch 16] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
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

from bench_http import noop_server  # noqa: E402

from harness.config.run_config import RunConfig  # noqa: E402
from harness.run import runner  # noqa: E402

ISL = 16  # words per text: synthetic:isl=16 without a tokenizer


def texts(n: int) -> list[str]:
    from harness.data.synthetic_prompts import synthetic_prompts

    return [p.prompt for p in synthetic_prompts(f"synthetic:isl={ISL},n={n}", {"isl": str(ISL), "n": str(n)}, 0).prompts]


async def _minimal(url: str, inputs: int, batch: int, concurrency: int, pool: list[str]) -> float:
    """`inputs` texts in requests of `batch`, `concurrency` requests open: inputs a second."""
    import aiohttp

    bodies = [json.dumps({"model": "noop", "input": pool[i:i + batch]}).encode() for i in range(0, len(pool) - batch, batch)]
    left = inputs
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        t0 = time.perf_counter()

        async def worker(w: int) -> None:
            nonlocal left
            k = w
            while left > 0:
                left -= batch
                async with session.post(url + "/v1/embeddings", data=bodies[k % len(bodies)], headers=headers) as r:
                    answer = json.loads(await r.read())
                if len(answer["data"]) != batch:
                    raise RuntimeError(f"{len(answer['data'])} vectors for {batch} inputs")
                k += concurrency

        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        return inputs / (time.perf_counter() - t0)


def run_minimal(url: str, inputs: int, batch: int, concurrency: int, pool: list[str]) -> float:
    return asyncio.run(_minimal(url, inputs, batch, concurrency, pool))


def run_harness(url: str, inputs: int, batch: int, concurrency: int, out: Path) -> dict[str, Any]:
    config = RunConfig(
        name="bench-embeddings", backend="http", scenario="Offline", dataset=f"synthetic:isl={ISL},osl=1,n=4096",
        backend_options={"protocol": "openai-embeddings", "url": url + "/v1", "batch": batch,
                         "max_in_flight": concurrency, "warmup_requests": concurrency},
        min_duration_s=0.1, min_query_count=inputs, offline_expected_qps=1,
    )
    return runner.run(config, out).summary


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):,.0f}, min {min(values):,.0f}, max {max(values):,.0f}"


def main() -> int:
    p = argparse.ArgumentParser(description="embeddings inputs/s: the harness beside a minimal aiohttp client")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds of the two clients")
    p.add_argument("--inputs", type=int, default=20_000, help="inputs each client sends a round")
    p.add_argument("--batch", type=int, default=16, help="inputs a request")
    p.add_argument("--concurrency", type=int, default=16, help="requests open at once")
    p.add_argument("--dimension", type=int, default=384, help="floats a vector (the server's answer)")
    args = p.parse_args()

    cores = sorted(os.sched_getaffinity(0))
    server_core = cores[-1] if len(cores) > 1 else None
    if server_core is not None:
        os.sched_setaffinity(0, {cores[0]})  # both clients (and the harness's child) on core 0
    print(f"cores: {len(cores)}; server on core {server_core}, clients on core {cores[0]}; "
          f"batch {args.batch}, {args.concurrency} requests open, {args.inputs:,} inputs a round, "
          f"{args.dimension} floats a vector, texts of {ISL} words")
    pool = texts(4096)
    harness, minimal, lg = [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-embeddings-") as tmp, \
            noop_server(server_core, "--dimension", str(args.dimension)) as url:
        for r in range(args.rounds):
            # alternate which goes first: a machine that slows down mid-round hurts both alike
            order = ("harness", "minimal") if r % 2 == 0 else ("minimal", "harness")
            for who in order:
                if who == "minimal":
                    minimal.append(run_minimal(url, args.inputs, args.batch, args.concurrency, pool))
                else:
                    s = run_harness(url, args.inputs, args.batch, args.concurrency, Path(tmp))
                    v = s["vectors"]
                    if s["harness"]["failed"] or v["dimension"] != args.dimension:
                        raise SystemExit(f"harness round {r}: {s['harness']['failures_by_reason']}, dimension {v['dimension']}")
                    harness.append(v["inputs_per_s"])
                    lg.append(s["loadgen"]["throughput_per_s"] or 0.0)
            print(f"  round {r + 1}: harness {harness[-1]:>9,.0f} inputs/s (LoadGen {lg[-1]:,.0f}, "
                  f"{v['requests_per_s']:,.0f} req/s, {v['inputs_per_request_mean']:.1f} a request)   "
                  f"minimal {minimal[-1]:>9,.0f} inputs/s")
    ratios = [h / m for h, m in zip(harness, minimal, strict=True)]
    print("\nembeddings inputs/s, no-op server")
    print(f"  harness (http, openai-embeddings)  {spread(harness)}")
    print(f"  minimal aiohttp client             {spread(minimal)}")
    print(f"  harness / minimal, per round       {', '.join(f'{x:.2f}' for x in ratios)} "
          f"(median {statistics.median(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
