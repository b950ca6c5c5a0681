"""An in-test rerank server whose relevance is known: each document carries its score as a
tag (`[score=0.731]`), which the server reads back, so every ranking it gives is the one
the test planted. It answers in the shapes real servers do, by path:

    /v1/rerank   vLLM: results sorted by score, each with its `document`, and `usage`
    /rerank      llama.cpp's llama-server: results sorted by score, `usage`, no document
    /v2/rerank   Cohere: results sorted by score, usage in `meta.billed_units`

and cuts the results to `top_n` when asked. A query holding `fault=KIND` breaks its answer
on purpose: dup_index, index_range, count (one result short), nan_score, string_score,
not_json. Each request's arrival and send (perf_counter_ns: CLOCK_MONOTONIC, the clock of a
harness child's records too) and its count of documents go to `RerankLog`.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

_SCORE = re.compile(r"\[score=([-0-9.eE+]+)\]")
_FAULT = re.compile(r"fault=(\w+)")


def planted(score: float) -> str:
    """The tag that gives a document `score` on this server."""
    return f"[score={score!r}]"


def score_of(document: str) -> float:
    m = _SCORE.search(document)
    return float(m.group(1)) if m else 0.0


@dataclass
class Served:
    arrival_ns: int
    send_ns: int
    query: str
    documents: int
    prompt_tokens: int


@dataclass
class RerankLog:
    served: list[Served] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _answer(body: dict[str, Any], shape: str) -> tuple[dict[str, Any] | str, int]:
    query, documents = body["query"], body["documents"]
    scores = [score_of(d) for d in documents]
    order = sorted(range(len(documents)), key=lambda i: (-scores[i], i))
    top_n = body.get("top_n")
    if top_n:
        order = order[:top_n]
    results: list[dict[str, Any]] = []
    for i in order:
        r: dict[str, Any] = {"index": i, "relevance_score": scores[i]}
        if shape == "vllm":
            r["document"] = {"text": documents[i], "multi_modal": None}
        results.append(r)
    tokens = len(query.split()) + sum(len(d.split()) for d in documents)
    fault = _FAULT.search(query)
    kind = fault.group(1) if fault else None
    if kind == "not_json":
        return '{"results": [{"index": 0, "relevance_sc', tokens
    if kind == "dup_index":
        results[-1]["index"] = results[0]["index"]
    elif kind == "index_range":
        results[-1]["index"] = len(documents)
    elif kind == "count":
        results.pop()
    elif kind == "nan_score":
        results[0]["relevance_score"] = float("nan")  # json.dumps writes NaN, which is not JSON's
    elif kind == "string_score":
        results[0]["relevance_score"] = str(results[0]["relevance_score"])
    if shape == "cohere":
        return {"id": "r1", "results": results, "meta": {"api_version": {"version": "2"},
                                                         "billed_units": {"search_units": 1}}}, tokens
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    if shape == "vllm":
        return {"id": "rerank-1", "model": body.get("model", "reranker"), "usage": usage, "results": results}, tokens
    return {"model": body.get("model", "reranker"), "object": "list", "usage": usage, "results": results}, tokens


def rerank_app(log: RerankLog | None = None) -> web.Application:
    log = log if log is not None else RerankLog()

    def route(shape: str) -> Any:
        async def handler(request: web.Request) -> web.Response:
            arrival = time.perf_counter_ns()
            body = await request.json()
            answer, tokens = _answer(body, shape)
            text = answer if isinstance(answer, str) else json.dumps(answer)
            response = web.Response(text=text, content_type="application/json")
            with log.lock:
                log.served.append(Served(arrival, time.perf_counter_ns(), body["query"], len(body["documents"]), tokens))
            return response

        return handler

    app = web.Application()
    app.router.add_post("/v1/rerank", route("vllm"))
    app.router.add_post("/rerank", route("llama.cpp"))
    app.router.add_post("/v2/rerank", route("cohere"))
    return app
