"""How fast does the harness send ~1 MB image bodies? Its requests/s beside a minimal
aiohttp client's, on the same server, interleaved round by round.

The server is benchmarks/noop_server.py with --skim (it finds `stream` and `max_tokens`
by search: parsing 1 MB of JSON would make it the bottleneck), on the last core; the
clients take the first. Both send the same bodies: chat requests with one synthetic noise
PNG each (512x512, ~790 kB, ~1.05 MB as base64 JSON), built once by the harness's own
dataset and protocol before anything is timed. Each round runs both clients, in
alternating order, for the same number of requests with the same concurrency; the
median and the spread (min-max) over rounds are printed, with the harness's upload time
per body (summary.json's media section).

    python benchmarks/bench_media.py [--rounds 5] [--requests 400] [--concurrency 16] [--image-size 512]
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

from bench_http import noop_server  # noqa: E402

from backends.base import LoadContext  # noqa: E402
from backends.http import HttpBackend, HttpOptions  # noqa: E402
from harness.config.run_config import RunConfig  # noqa: E402
from harness.data.prompts import build_prompt_dataset  # noqa: E402
from harness.run import runner  # noqa: E402

N_IMAGES = 32  # distinct bodies, sent in turn


def _spec(size: int) -> str:
    return f"synthetic-images:n={N_IMAGES},image_size={size},content=noise,osl=4,seed=1"


def bodies(url: str, size: int) -> list[bytes]:
    """The exact bodies the harness sends for the dataset: its own protocol's encoding."""
    backend = HttpBackend(HttpOptions(protocol="openai-chat", url=url + "/v1", check_server=False))
    backend.load(LoadContext(model=None, max_batch=1, scenario="Offline"))
    return [backend.prepare(p).body for p in build_prompt_dataset(_spec(size), 0).prompts]


async def _minimal(url: str, payloads: list[bytes], requests: int, concurrency: int) -> float:
    """A `vllm bench serve`-style client: one loop, one pooled session, N workers."""
    import aiohttp

    headers = {"Content-Type": "application/json"}
    sent = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        async def one(body: bytes) -> None:
            async with session.post(url + "/v1/chat/completions", data=body, headers=headers) as r:
                async for _ in r.content:
                    pass

        await asyncio.gather(*(one(payloads[i]) for i in range(concurrency)))  # connections open, untimed
        t0 = time.perf_counter()

        async def worker() -> None:
            nonlocal sent
            while sent < requests:
                body = payloads[sent % len(payloads)]
                sent += 1
                await one(body)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return requests / (time.perf_counter() - t0)


def run_harness(url: str, size: int, requests: int, concurrency: int, out: Path) -> dict[str, Any]:
    config = RunConfig(
        name="bench-media", backend="http", scenario="Offline", dataset=_spec(size),
        backend_options={"protocol": "openai-chat", "url": url + "/v1", "max_in_flight": concurrency,
                         "warmup_requests": concurrency},
        min_duration_s=0.1, min_query_count=requests, offline_expected_qps=1, use_token_latencies=True,
    )  # fmt: skip
    return runner.run(config, out).summary


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):8.1f}/s  ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--requests", type=int, default=400, help="requests per client per round")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--image-size", type=int, default=512)
    a = p.parse_args()
    cores = os.cpu_count() or 1
    server_core = cores - 1 if cores > 1 else None
    if server_core is not None:
        os.sched_setaffinity(0, set(range(cores - 1)))  # the clients (and the harness's child) off the server's core
    with noop_server(server_core, "--skim") as url, tempfile.TemporaryDirectory() as tmp:
        payloads = bodies(url, a.image_size)
        mean = statistics.mean(len(b) for b in payloads)
        print(f"bodies: {len(payloads)} distinct, {mean / 1e6:.2f} MB each on average; "
              f"{a.requests} requests a round at {a.concurrency} in flight")
        harness: list[float] = []
        minimal: list[float] = []
        uploads: list[float] = []
        for r in range(a.rounds):
            order = ("harness", "minimal") if r % 2 == 0 else ("minimal", "harness")
            for side in order:
                if side == "harness":
                    s = run_harness(url, a.image_size, a.requests, a.concurrency, Path(tmp) / f"r{r}")
                    harness.append(s["harness"]["throughput_per_s"])
                    uploads.append(s["media"]["upload_ms"]["p50"])
                else:
                    minimal.append(asyncio.run(_minimal(url, payloads, a.requests, a.concurrency)))
            print(f"round {r + 1}: harness {harness[-1]:8.1f}/s   minimal aiohttp {minimal[-1]:8.1f}/s   "
                  f"ratio {harness[-1] / minimal[-1]:.2f}   upload p50 {uploads[-1]:.3f} ms")
        ratios = [h / m for h, m in zip(harness, minimal, strict=True)]
        print(f"harness          {_spread(harness)}")
        print(f"minimal aiohttp  {_spread(minimal)}")
        print(f"ratio (per round) median {statistics.median(ratios):.2f}  ({min(ratios):.2f}-{max(ratios):.2f}); "
              f"harness upload p50 {statistics.median(uploads):.3f} ms a body")


if __name__ == "__main__":
    main()
