"""Prompt caching: the expected reusable share of a shared-prefix dataset against what a
server with a real prefix cache reports (usage.prompt_tokens_details.cached_tokens), and
TTFT split by cache hit and miss."""

from __future__ import annotations

import asyncio
import json
import time

from aiohttp import web

from harness.data.prompts import build_prompt_dataset
from harness.results.records import read_records
from tests.support.http_servers import ServerThread

MS_PER_UNCACHED_TOKEN = 2.0  # prefill cost of each prompt token not in the cache


def caching_app() -> web.Application:
    """An OpenAI completions server that caches prompts word by word (a word is a token here):
    a request reuses its longest common prefix with any earlier prompt, and its first token
    waits MS_PER_UNCACHED_TOKEN for every other prompt token."""
    seen: list[list[str]] = []

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "cache-model", "object": "model"}]})

    async def complete(request: web.Request) -> web.Response:
        t0 = time.perf_counter()
        body = await request.json()
        words = body["prompt"].split()
        cached = 0
        for old in seen:
            common = 0
            for a, b in zip(old, words, strict=False):
                if a != b:
                    break
                common += 1
            cached = max(cached, common)
        seen.append(words)
        await asyncio.sleep(max(0.0, (len(words) - cached) * MS_PER_UNCACHED_TOKEN / 1e3 - (time.perf_counter() - t0)))
        usage = {"prompt_tokens": len(words), "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": cached}}
        return web.json_response({"choices": [{"text": "a b", "index": 0, "finish_reason": "length"}], "usage": usage})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", complete)
    return app


def test_expected_and_observed_prompt_cache_reuse(run_harness):
    spec = "synthetic:isl=40,osl=2,n=12,prefix_groups=3,prefix_len=30"
    with ServerThread(caching_app()) as srv:
        run_dir, s = run_harness(
            backend="http", scenario="SingleStream", dataset=spec,
            backend_options={"protocol": "openai-completions", "url": f"{srv.url}/v1", "stream": False,
                             "max_in_flight": 1, "warmup_requests": 0},
            min_duration_s=0.1, min_query_count=12, use_token_latencies=True,
        )  # fmt: skip
    rec = read_records(run_dir).columns
    order = rec["dispatch_ns"].argsort()  # SingleStream: the server saw them in this order
    indices = [int(rec["sample_index"][i]) for i in order]
    pc = s["tokens"]["prompt_cache"]
    # expected: every request after the first of its group reuses its 30-token prefix
    firsts = len({i % 3 for i in indices})
    assert pc["expected_reusable_fraction"] == (len(indices) - firsts) * 30 / (len(indices) * 40)
    # observed: what the server's cache reused, replayed here over the same prompts in the same order
    prompts = build_prompt_dataset(spec, 0).prompts
    words = [prompts[i].prompt.split() for i in indices]
    cached = []
    for k, w in enumerate(words):
        best = 0
        for old in words[:k]:
            common = next((j for j, (a, b) in enumerate(zip(old, w, strict=False)) if a != b), min(len(old), len(w)))
            best = max(best, common)
        cached.append(best)
    assert s["tokens"]["cached_input_tokens"] == sum(cached)
    assert pc["observed_cached_fraction"] == sum(cached) / (40 * len(indices))
    assert pc["observed_cached_fraction"] >= pc["expected_reusable_fraction"]  # shared suffix words add a little
    split = pc["ttft_ms_by_cache"]
    assert split["basis"].startswith("server")
    assert split["hit_requests"] == sum(c > 0 for c in cached) and split["miss_requests"] == sum(c == 0 for c in cached)
    # a miss prefills 40 tokens (80 ms), a hit at most 10 (20 ms)
    assert split["miss"]["p50"] >= 80 and split["hit"]["p50"] < 80
    dataset = s["dataset"]["prefix"]
    assert dataset["groups"] == 3 and dataset["expected_reusable_fraction"] == 9 * 30 / (12 * 40)
    assert json.loads((run_dir / "tokens.jsonl").read_text().splitlines()[0])["cached_tokens"] is not None


def test_timed_requests_that_repeat_a_prompt_are_counted(run_harness):
    """#16 item 17: LoadGen samples with replacement; 24 requests over 6 prompts repeat 18."""
    from harness.results.records import read_records

    with ServerThread(caching_app()) as srv:
        run_dir, s = run_harness(
            backend="http", scenario="Offline", dataset="synthetic:isl=8,osl=2,n=6",
            backend_options={"protocol": "openai-completions", "url": f"{srv.url}/v1", "stream": False},
            min_duration_s=0, min_query_count=24,
        )  # fmt: skip
    rep = s["tokens"]["repeated_prompts"]
    indices = read_records(run_dir).columns["sample_index"]
    assert rep["requests"] == 24 and rep["distinct_prompts"] == len(set(indices.tolist())) <= 6
    assert rep["repeats"] == 24 - rep["distinct_prompts"] >= 18
