"""Real HTTP servers on 127.0.0.1 for the HTTP backend's tests, each in its own thread.

`OpenAIServer` is the ground truth: an OpenAI-compatible server whose timing is injected
(queue before headers, time to first token, time per token, tokens per SSE event) and
scheduled against absolute deadlines, so 100 tokens at 20 ms end at 200 + 99 x 20 ms and
not later by the sum of 100 sleep overshoots. A prompt containing `@<behaviour>` makes
that request fail in one precise way (see `BEHAVIOURS`), so a test knows, per sample,
which failure the harness must report.

`KServeServer` serves the harness's embedded ONNX model behind the Open Inference
Protocol (KServe v2) with ONNX Runtime, for an accuracy round trip.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Callable
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from aiohttp import web

from harness.results.stats import NS_PER_MS, weighted_distribution
from harness.results.token_metrics import itl_samples

#: prompt keyword -> the harness's failure reason for that request ("" = success)
BEHAVIOURS = {
    "@ok": "",
    "@http_503": "http_503",
    "@hang": "timeout",
    "@no_headers": "timeout",
    "@malformed_sse": "malformed_sse",
    "@empty": "empty_output",
    "@truncated": "truncated_stream",
    "@server_error": "server_error",
    "@disconnect": "disconnected",
}


@dataclass(frozen=True)
class Timing:
    queue_ms: float = 0.0  # before response headers
    ttft_ms: float = 0.0  # headers -> first token
    tpot_ms: float = 0.0  # between tokens
    tokens: int = 8  # when the request asks for no max_tokens
    tokens_per_chunk: int = 1
    usage: bool = True  # send usage when stream_options.include_usage asks for it
    usage_extra: int = 0  # added to usage.completion_tokens: a server/client mismatch
    # added to ttft_ms per prompt word (= usage.prompt_tokens): a prefill whose time grows
    # with the input, so TTFT = queue_ms + ttft_ms + ttft_ms_per_prompt_token x prompt tokens
    ttft_ms_per_prompt_token: float = 0.0
    # added to tpot_ms per request open at the server when this one arrives (itself
    # included): decode that slows as the batch grows, so in a closed loop of N requests
    # TPOT = tpot_ms + tpot_ms_per_in_flight x N
    tpot_ms_per_in_flight: float = 0.0
    # a reasoning model: `reasoning_tokens` reasoning events before the answer, the first
    # at ttft_ms and then one a tpot_ms; the answer's first token comes `reasoning_ms` after
    # the first reasoning token (so TTFO = queue_ms + ttft_ms + reasoning_ms), its next ones
    # a tpot_ms apart. `reasoning_style`: "reasoning_content" or "reasoning" (the chat
    # delta's field, vLLM's old and new name), or "think" (inline in the content: a
    # "<think>" event, the reasoning events, a "</think>" event; the tags are tokens of the
    # reasoning span, so usage's reasoning_tokens is reasoning_tokens + 2)
    reasoning_tokens: int = 0
    reasoning_ms: float = 0.0
    reasoning_style: str = "reasoning_content"
    # added to usage.completion_tokens_details.reasoning_tokens: a server/client mismatch
    reasoning_usage_extra: int = 0


class ServerThread:
    """An aiohttp app served on 127.0.0.1 (a free port) by a loop in a daemon thread.

    With `receive_log`, the server appends the perf_counter_ns at which the first bytes of
    each request (a segment starting with an HTTP method) reached it: stamped in the
    connection's `data_received`, the first Python the server runs for a request, before
    aiohttp parses it. perf_counter_ns is CLOCK_MONOTONIC, one clock for every process on
    the machine, so the stamps compare with a harness child's records directly. `loop`: the
    loop to serve on (a precise one, harness.child.schedule.precise_loop, for a lateness probe
    that is not rounded up to whole milliseconds)."""

    def __init__(self, app: web.Application, receive_log: list[int] | None = None,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.app = app
        self.loop = loop or asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.port = 0
        self.receive_log = receive_log
        self._raw: asyncio.AbstractServer | None = None

    def __enter__(self) -> ServerThread:
        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    async def _start(self) -> int:
        self._runner = web.AppRunner(self.app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        if self.receive_log is not None:
            return await self._start_stamped(self.receive_log)
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        return site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _start_stamped(self, log: list[int]) -> int:
        server = self._runner.server
        assert server is not None
        methods = (b"POST ", b"GET ")

        from aiohttp.web_protocol import RequestHandler

        class Stamped(RequestHandler):  # slotted: the override is a subclass, not an attribute
            def data_received(self, data: bytes) -> None:
                if data.startswith(methods):  # a request's first segment: its headers lead it
                    log.append(time.perf_counter_ns())
                super().data_received(data)

        def protocol() -> Any:
            return Stamped(server, loop=self.loop, **server._kwargs)

        self._raw = await self.loop.create_server(protocol, "127.0.0.1", 0)
        return self._raw.sockets[0].getsockname()[1]

    def __exit__(self, *exc: Any) -> None:
        if self._raw is not None:
            self._raw.close()
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


# --- OpenAI-compatible ground truth ----------------------------------------------------


def server_side(arrivals: list[tuple[int, list[int]]], samples: int) -> dict[str, float]:
    """What the truth server really did, p50 in ms, for the timed requests (the warm-up's
    came first): its own TTFT (arrival to first write), TPOT and E2E. On a busy machine its
    one thread is late to its sleeps, and the client is right to see that; the client's
    error is its difference from these, not from the injected figures."""
    timed = sorted(arrivals)[len(arrivals) - samples:]
    return {"ttft": float(np.median([w[0] - a for a, w in timed])) / 1e6,
            "e2e": float(np.median([w[-1] - a for a, w in timed])) / 1e6,
            "tpot": float(np.median([(w[-1] - w[0]) / (len(w) - 1) for _, w in timed])) / 1e6}


def server_itl(arrivals: list[tuple[int, list[int]]], samples: int, tokens: int, tokens_per_chunk: int = 1) -> dict:
    """The truth server's own inter-token latency, ms, over the timed requests: its write
    stamps spread per token exactly as the harness spreads the chunks it read
    (harness.results.token_metrics.itl_samples), so the two distributions compare term for
    term and differ only by when the client read what the server wrote."""
    timed = sorted(arrivals)[len(arrivals) - samples:]
    entries = [{"t": w, "k": [tokens_per_chunk] * len(w), "n": tokens} for _, w in timed]
    return weighted_distribution(*itl_samples(entries), unit=NS_PER_MS)


def after_headers(arrivals: list[tuple[int, list[int]]], headers: dict[int, int], samples: int) -> float:
    """The truth server's own time from its response headers to its first token, p50 ms, over
    the timed requests: what the client's first token after the headers must match, whether
    or not the server woke late for either."""
    timed = sorted(arrivals)[len(arrivals) - samples:]
    return float(np.median([w[0] - headers[a] for a, w in timed])) / 1e6


class TruthMetrics:
    """The truth server's /metrics, in vLLM's series names (a subset), from prometheus_client:
    what it did, exactly. Each request's queue, prefill and decode phases are the injected
    times, so the scraped histograms hold the truth; `fail_scrapes` answers those scrape
    numbers (1-based) with a 503, a gap the harness must record."""

    def __init__(self, fail_scrapes: tuple[int, ...] = ()) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        #: requests open at the server and, of them, in their queue phase: the two gauges read them
        self.open = self.queued = 0
        Gauge("vllm:num_requests_running", "requests past their queue phase", registry=r).set_function(
            lambda: self.open - self.queued)
        Gauge("vllm:num_requests_waiting", "requests in their queue phase", registry=r).set_function(lambda: self.queued)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "prompt tokens (words)", registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "tokens sent", registry=r)
        self.success = Counter("vllm:request_success", "requests finished", ["finished_reason"], registry=r)
        buckets = (0.001, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28)
        self.queue = Histogram("vllm:request_queue_time_seconds", "queue phase", buckets=buckets, registry=r)
        self.prefill = Histogram("vllm:request_prefill_time_seconds", "headers to first token", buckets=buckets, registry=r)
        self.decode = Histogram("vllm:request_decode_time_seconds", "first to last token", buckets=buckets, registry=r)
        self.fail_scrapes = fail_scrapes
        self.scrapes = 0

    async def handle(self, _: web.Request) -> web.Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        self.scrapes += 1
        if self.scrapes in self.fail_scrapes:
            return web.Response(status=503, text="metrics unavailable")
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


class TurnServed(NamedTuple):
    """One session turn as the server served it, on perf_counter_ns. The first token's write
    is stamped on both sides: its bytes left between the two, so a client that read them
    before `first_write_began_ns` is impossible, and one behind `first_write_ns` is late by
    at most its difference (the server's thread may lose the GIL after the send)."""

    arrival_ns: int
    first_write_began_ns: int
    first_write_ns: int
    cached_words: int
    prompt_words: int


class SessionTruth:
    """The truth server's sessions mode: multi-turn chats, checked and cached.

    A chat request names its session in `header`; its turn k is its number of user messages
    less one. Turn k must carry turns 0..k-1 exactly as this server saw and answered them:
    the same user messages and, after each, this server's answer text. Every request that
    does not is counted in `mismatches` (with what differed in `mismatch_notes`). Answers
    are unique per session and turn ("<session>.<turn>.<i>" one word a token), so a carried
    answer cannot match by chance.

    The prefix-cache model: the prompt is every message's words in order; its cached part is
    the longest prefix shared with any earlier request's prompt followed by its answer (what a
    server's KV cache holds after serving it), less `cache_block`'s remainder (caches hold
    whole blocks). TTFT is then ttft_ms + ttft_ms_per_prompt_token x (prompt words - cached),
    and usage.prompt_tokens_details.cached_tokens reports the cached words.

    `drop_history`: a gateway in front of the server keeps only each request's last message
    (a proxy that drops context): the server then sees no history, and counts it.

    Tool calls: a turn whose index is in `tool_turns`, or whose user message holds
    "@tool_call", is answered with one tool call (TOOL_CALL, its id unique to the turn) and
    no text. A later turn must carry that answer with exactly the call ids sent, followed
    (before the next user message) by one non-empty `tool` message per call whose
    `tool_call_id` names it; anything else counts as a mismatch."""

    def __init__(self, header: str = "X-Session-ID", cache_block: int = 1, drop_history: bool = False,
                 tool_turns: tuple[int, ...] = ()) -> None:
        self.header = header
        self.cache_block = cache_block
        self.drop_history = drop_history
        self.tool_turns = tool_turns
        #: (session, turn) -> the tool call ids its answer sent
        self.tool_ids: dict[tuple[str, int], list[str]] = {}
        self.mismatches = 0
        self.mismatch_notes: list[str] = []
        #: (session, turn) -> (user message, answer text), as received and answered
        self.turns: dict[tuple[str, int], tuple[str, str]] = {}
        #: (session, turn) -> what the server did for it (`TurnServed`)
        self.served: dict[tuple[str, int], TurnServed] = {}
        self._held: list[tuple[str, ...]] = []  # each served request's prompt + answer words
        #: (session, turn) -> the messages the request carried, as received
        self.received: dict[tuple[str, int], list[dict[str, Any]]] = {}

    def check(self, request_headers: Any, messages: list[dict[str, Any]]) -> tuple[str, int, list[dict[str, Any]]] | None:
        """(session, turn, messages as the server sees them), counting a wrong history; None
        for a request without the session header (a warm-up: no session's turn)."""
        if self.drop_history:
            messages = messages[-1:]
        sid = request_headers.get(self.header, "")
        if not sid:
            return None
        users = [m for m in messages if m.get("role") == "user"]
        answers = [m for m in messages if m.get("role") == "assistant"]
        k = len(users) - 1
        wrong = []
        results: list[list[dict[str, Any]]] = []  # the tool messages after each answer, before the next user's
        open_answer = False
        for m in messages:
            role = m.get("role")
            if role == "assistant":
                results.append([])
            elif role == "tool":
                if open_answer:
                    results[-1].append(m)
                else:
                    wrong.append("a tool message that follows no answer")
            open_answer = role in ("assistant", "tool")
        if len(answers) != k:
            wrong.append(f"turn {k} carries {len(answers)} answers")
        for j in range(k):
            had = self.turns.get((sid, j))
            if had is None:
                wrong.append(f"turn {j} was never answered")
                continue
            if users[j].get("content") != had[0]:
                wrong.append(f"user message {j} differs")
            if j < len(answers) and answers[j].get("content") != had[1]:
                wrong.append(f"answer {j} differs")
            if j < len(answers):
                sent = self.tool_ids.get((sid, j), [])
                carried = [c.get("id") for c in answers[j].get("tool_calls") or []]
                if carried != sent:
                    wrong.append(f"answer {j} carries tool calls {carried}, {sent} were sent")
                answered = [t.get("tool_call_id") for t in results[j]]
                if answered != sent:
                    wrong.append(f"answer {j} is followed by tool results for {answered}, its calls were {sent}")
                if any(not isinstance(t.get("content"), str) or not t["content"] for t in results[j]):
                    wrong.append(f"a tool result after answer {j} is empty")
        if (sid, k) in self.turns:
            wrong.append(f"turn {k} sent twice")
        self.received[(sid, k)] = messages
        if wrong:
            self.mismatches += 1
            self.mismatch_notes.append(f"{sid} turn {k}: {'; '.join(wrong)}")
        return sid, k, messages

    def cached(self, words: tuple[str, ...]) -> int:
        best = 0
        for held in self._held:
            n = 0
            for a, b in zip(words, held, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        best = min(best, len(words) - 1)  # the last prompt token is always computed (as vLLM does)
        return max(0, best - best % self.cache_block)

    def answered(self, sid: str, k: int, user: str, words: tuple[str, ...], answer: str) -> None:
        self.turns[(sid, k)] = (user, answer)
        self._held.append(words + tuple(answer.split()))


#: the tool call a chat prompt containing "@tool_call" gets instead of an answer: its name,
#: then its arguments in pieces (one event each), as OpenAI-compatible servers stream them
TOOL_CALL = ("get_weather", ['{"city": ', '"Paris", ', '"unit": ', '"C"}'])
#: "@tool_bad_args": a call whose arguments, joined, are not JSON (a model that lost its way)
TOOL_CALL_BAD = ("get_weather", ['{"city": ', '"Paris"'])


def reasoning_pieces(timing: Timing) -> list[str]:
    """The reasoning events the truth server sends, in order (tags included for "think")."""
    words = [f" r{i}" for i in range(timing.reasoning_tokens)]
    if timing.reasoning_style == "think" and words:
        return ["<think>", *words, "</think>"]
    return words


def answer_pieces(answer: str) -> list[str]:
    """An answer cut as a server streams it: each word with the spaces before it, so the
    pieces join back to the answer exactly."""
    return re.findall(r"\s*\S+|\s+$", answer) or [answer]


def openai_app(timing: Timing, model: str = "truth-model", api_key: str | None = None,
               received: list[str] | None = None, written: list[list[int]] | None = None,
               metrics: TruthMetrics | None = None,
               arrivals: list[tuple[int, list[int]]] | None = None,
               headers: dict[int, int] | None = None,
               answers: dict[str, str] | None = None,
               token_ids: Callable[[str], list[int]] | None = None,
               sent_ids: dict[str, list[int]] | None = None,
               truncate_above: int | None = None, truncate_words: int = 3,
               truncated: list[str] | None = None, lead_ids: list[int] | None = None,
               sessions: SessionTruth | None = None,
               cut: Callable[[str], list[str]] = answer_pieces) -> web.Application:
    """With `api_key`, requests without that bearer token get a 401 that echoes what they
    sent, as careless servers do: the harness must keep the key out of its records anyway.
    With `received`, each request's prompt (a chat's last message; a list of token ids as
    sent) is appended, in order.
    With `written`, each streamed request appends the perf_counter_ns after each of its token
    chunks was written: what the server really did, when a busy machine made its pacing late.
    With `metrics`, GET /metrics serves what the server did (streamed successes only).
    With `arrivals`, each streamed request appends (the perf_counter_ns its handler began,
    its chunks' write stamps as in `written`): the server's own TTFT, the first write minus
    the arrival, is what it really did on a machine that made it late. With `headers`, each
    streamed request maps that arrival stamp to the perf_counter_ns after its response headers
    were written (with a chat's role event, which flushes them): the server's own time from
    headers to first token, when it woke late for either.

    With `answers` (prompt -> answer text; a chat's last message is its prompt), a prompt
    found there is answered with that text, one word a chunk (`answer_pieces`, or `cut`:
    how the answer is cut into chunks), whatever max_tokens says: a test knows which
    answers are right. With `token_ids` (the server's
    tokenizer) a request asking for `return_token_ids` (vLLM's field) gets each piece's ids
    in `choices[0].token_ids`, and `sent_ids` (prompt -> ids) keeps what was sent. With
    `truncate_above`, an answer given while more than that many requests are open at the
    server keeps only its first `truncate_words` words: a server that degrades under load; `truncated` gets the prompt of each answer cut.
    A chat prompt containing "@tool_call" is answered with the tool call TOOL_CALL instead of
    text (its name's event, then one event a piece of its arguments, finish_reason
    "tool_calls"); "@tool_bad_args" with TOOL_CALL_BAD, whose arguments are not JSON. With
    `timing.reasoning_tokens`, reasoning events come first (Timing says how and when), and
    usage counts them in completion_tokens_details.reasoning_tokens.
    With `lead_ids`, a streamed answer of `answers` that sends ids begins with an event of
    those ids and no text: vLLM sends a token's ids before its text while a UTF-8 character
    is incomplete; the ids are the answer's first.
    With `sessions` (`SessionTruth`), chat requests are session turns: their history is
    checked, TTFT follows its prefix-cache model, and each answer is unique to its turn."""

    @web.middleware
    async def auth(request: web.Request, handler: Any) -> web.StreamResponse:
        sent = request.headers.get("Authorization", "")
        if api_key is not None and sent != f"Bearer {api_key}":
            return web.json_response({"error": {"message": f"invalid credentials {sent!r}"}}, status=401)
        return await handler(request)

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": model, "object": "model", "owned_by": "tests"}]})

    open_requests = [0]  # one loop serves them all: a plain counter needs no lock

    async def complete(request: web.Request) -> web.StreamResponse:
        open_requests[0] += 1
        if metrics is not None:
            metrics.open += 1
        try:
            return await _complete(request, open_requests[0])
        finally:
            open_requests[0] -= 1
            if metrics is not None:
                metrics.open -= 1

    async def _complete(request: web.Request, in_flight: int) -> web.StreamResponse:
        t0 = time.perf_counter()
        arrived = time.perf_counter_ns()
        body = await request.json()
        chat = request.path.endswith("/chat/completions")
        prompt = body["messages"][-1]["content"] if chat else body["prompt"]
        turn: tuple[str, int] | None = None
        cached = 0
        if sessions is not None and chat:
            seen = sessions.check(request.headers, body["messages"])
            if seen is not None:
                sid, k, messages = seen
                turn = (sid, k)
                words = tuple(w for m in messages for w in str(m.get("content") or "").split())
                cached = sessions.cached(words)
        if received is not None:
            received.append(prompt)
        # a completions prompt of token ids (vLLM, llama.cpp): one word an id, so that
        # usage.prompt_tokens is the number of ids
        text = prompt if isinstance(prompt, str) else " ".join(str(i) for i in prompt)
        behaviour = next((b for b in BEHAVIOURS if b in text), "@ok")
        n = int(body.get("max_tokens") or timing.tokens)
        pieces: list[str] | None = None
        if answers is not None and text in answers:
            pieces = cut(answers[text])
            if truncate_above is not None and in_flight > truncate_above:
                pieces = pieces[:truncate_words]
                if truncated is not None:
                    truncated.append(text)
            n = len(pieces)
        want_ids = bool(body.get("return_token_ids")) and token_ids is not None
        piece_ids = [token_ids(p) for p in pieces] if want_ids and pieces is not None else None
        if piece_ids is not None and sent_ids is not None:
            sent_ids[text] = [*(lead_ids or ()), *(i for ids in piece_ids for i in ids)]
        include_usage = bool((body.get("stream_options") or {}).get("include_usage")) and timing.usage
        prompt_words = len(words) if turn is not None else len(text.split())
        if turn is not None:
            n = int(body.get("max_tokens") or timing.tokens)
            pieces = [f"{'' if i == 0 else ' '}{turn[0]}.{turn[1]}.{i}" for i in range(n)]
        thoughts = reasoning_pieces(timing)
        tool = (TOOL_CALL if "@tool_call" in text else TOOL_CALL_BAD if "@tool_bad_args" in text else None) if chat else None
        if turn is not None and sessions is not None and turn[1] in sessions.tool_turns:
            tool = TOOL_CALL
        call_id = "call_0" if turn is None else f"call_{turn[0]}_{turn[1]}"  # a session's: unique to its turn
        if tool is not None:
            n = 1 + len(tool[1])  # the name's event, then one a piece of the arguments
        # the answer's first token: after the reasoning when there is any
        answer_ms = timing.reasoning_ms if thoughts else 0.0

        def usage_of(n_answer: int) -> dict[str, Any]:
            out: dict[str, Any] = {"prompt_tokens": prompt_words,
                                   "completion_tokens": n_answer + len(thoughts) + timing.usage_extra}
            if thoughts:
                out["completion_tokens_details"] = {"reasoning_tokens": len(thoughts) + timing.reasoning_usage_extra}
            if turn is not None:
                out["prompt_tokens_details"] = {"cached_tokens": cached}
            return out
        ttft_ms = timing.ttft_ms + timing.ttft_ms_per_prompt_token * (prompt_words - cached)
        tpot_ms = timing.tpot_ms + timing.tpot_ms_per_in_flight * in_flight

        async def until(ms: float) -> None:
            delay = t0 + ms / 1e3 - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)

        if metrics is not None:
            metrics.queued += 1
        try:
            await until(timing.queue_ms)
        finally:
            if metrics is not None:
                metrics.queued -= 1
        if metrics is not None:
            metrics.queue.observe(timing.queue_ms / 1e3)
        if behaviour == "@no_headers":
            await asyncio.sleep(3600)
        if behaviour == "@http_503":
            return web.json_response({"error": {"message": "overloaded"}}, status=503)
        if behaviour == "@disconnect":
            request.transport.close()  # type: ignore[union-attr]
            return web.Response()
        if not body.get("stream"):
            await until(timing.queue_ms + ttft_ms + (n - 1) * tpot_ms)
            content = "" if behaviour == "@empty" else "".join(pieces) if pieces is not None else " ".join(f"t{i}" for i in range(n))
            answer = {"message": {"role": "assistant", "content": content}} if chat else {"text": content}
            if want_ids and token_ids is not None:  # every answer's, the warm-up's too
                answer["token_ids"] = [i for ids in piece_ids for i in ids] if piece_ids is not None else token_ids(content)
            usage = {"prompt_tokens": len(text.split()), "completion_tokens": n + timing.usage_extra}
            return web.json_response({"choices": [{**answer, "index": 0, "finish_reason": "length"}], "usage": usage})

        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        def event(piece: str | None, finish: str | None = None, ids: list[int] | None = None) -> bytes:
            if chat:
                choice: dict[str, Any] = {"index": 0, "delta": {"content": piece} if piece is not None else {}}
            else:
                choice = {"index": 0, "text": piece or ""}
            choice["finish_reason"] = finish
            if ids is not None:
                choice["token_ids"] = ids
            return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"

        if chat:
            await resp.write(b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant"}}]}).encode() + b"\n\n")
        if headers is not None:
            headers[arrived] = time.perf_counter_ns()
        if behaviour == "@empty":
            await resp.write(event(None, "stop") + b"data: [DONE]\n\n")
            return resp
        if behaviour == "@server_error":
            await resp.write(b'data: {"error": {"message": "model crashed"}}\n\n')
            return resp
        k = timing.tokens_per_chunk
        sent = 0
        stamps: list[int] = []
        if written is not None:
            written.append(stamps)
        if arrivals is not None:
            arrivals.append((arrived, stamps))
        if lead_ids is not None and piece_ids is not None:
            await resp.write(event("", None, list(lead_ids)))
        began: list[int] = []  # the stamp before the first stamped write

        async def stamped(data: bytes) -> None:
            if not stamps:
                began.append(time.perf_counter_ns())
            await resp.write(data)
            stamps.append(time.perf_counter_ns())

        for i, thought in enumerate(thoughts):
            await until(timing.queue_ms + ttft_ms + i * tpot_ms)
            if timing.reasoning_style == "think":
                await stamped(event(thought))
            else:
                delta = {timing.reasoning_style: thought}
                await stamped(b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}).encode()
                              + b"\n\n")
        if tool is not None:
            name, pieces_of_args = tool
            calls = [{"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}]
            calls += [{"index": 0, "function": {"arguments": a}} for a in pieces_of_args]
            for j, call in enumerate(calls):
                await until(timing.queue_ms + ttft_ms + answer_ms + j * tpot_ms)
                finish = "tool_calls" if j == len(calls) - 1 else None
                await stamped(b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [call]},
                                                                   "finish_reason": finish}]}).encode() + b"\n\n")
            sent = n
            pieces = []  # a tool call's answer has no text: the history carries it empty
            if turn is not None and sessions is not None:
                sessions.tool_ids[turn] = [call_id]
        while sent < n:
            take = min(k, n - sent)
            # chunk j carries tokens sent..sent+take-1 and leaves when its last one is due
            await until(timing.queue_ms + ttft_ms + answer_ms + (sent + take - 1) * tpot_ms)
            last = sent + take == n
            if pieces is not None:
                ids = [i for p in piece_ids[sent:sent + take] for i in p] if piece_ids is not None else None
                await stamped(event("".join(pieces[sent:sent + take]), "stop" if last else None, ids))
            else:
                piece = " ".join(f"t{i}" for i in range(sent, sent + take)) + " "
                ids = token_ids(piece) if want_ids and token_ids is not None else None
                await stamped(event(piece, "length" if last else None, ids))
            sent += take
            if sent >= 2 and behaviour == "@malformed_sse":
                await resp.write(b"data: {not json\n\n")
                return resp
            if sent >= 2 and behaviour == "@truncated":
                return resp  # ends the body without finish_reason or [DONE]
            if behaviour == "@hang":
                await asyncio.sleep(3600)
        if turn is not None and sessions is not None:
            sessions.answered(turn[0], turn[1], prompt, words, "".join(pieces or ()))
            sessions.served[turn] = TurnServed(arrived, began[0] if began else 0, stamps[0] if stamps else 0, cached,
                                               prompt_words)
        if include_usage:
            usage = usage_of(n)
            await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        if metrics is not None:
            metrics.prompt_tokens.inc(len(text.split()))
            metrics.generation_tokens.inc(n)
            metrics.success.labels(finished_reason="length").inc()
            metrics.prefill.observe(ttft_ms / 1e3)
            metrics.decode.observe((n - 1) * tpot_ms / 1e3)
        return resp

    app = web.Application(middlewares=[auth])
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", complete)
    app.router.add_post("/v1/completions", complete)
    if metrics is not None:
        app.router.add_get("/metrics", metrics.handle)
    return app


def write_prompts(path: Path, behaviours: list[str], max_tokens: int | None = None) -> Path:
    """One prompt per behaviour keyword, as a JSONL prompt file."""
    with open(path, "w") as f:
        for i, b in enumerate(behaviours):
            row: dict[str, Any] = {"prompt": f"request {i} {b}"}
            if max_tokens:
                row["max_tokens"] = max_tokens
            f.write(json.dumps(row) + "\n")
    return path


# --- KServe v2 over ONNX Runtime ---------------------------------------------------------

_ORT_TO_V2 = {"tensor(float)": "FP32", "tensor(int64)": "INT64", "tensor(double)": "FP64"}


def kserve_app(model_path: Path, name: str = "digits") -> web.Application:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    session = ort.InferenceSession(str(model_path), sess_options=so, providers=["CPUExecutionProvider"])

    def spec(node: Any) -> dict[str, Any]:
        return {
            "name": node.name,
            "datatype": _ORT_TO_V2[node.type],
            "shape": [d if isinstance(d, int) else -1 for d in node.shape],
        }

    async def metadata(_: web.Request) -> web.Response:
        return web.json_response(
            {
                "name": name,
                "versions": ["1"],
                "platform": "onnxruntime_onnx",
                "inputs": [spec(i) for i in session.get_inputs()],
                "outputs": [spec(o) for o in session.get_outputs()],
            }
        )

    async def infer(request: web.Request) -> web.Response:
        body = await request.json()
        feeds = {
            t["name"]: np.asarray(t["data"], dtype=np.float32 if t["datatype"] == "FP32" else np.int64).reshape(t["shape"])
            for t in body["inputs"]
        }
        outs = session.run(None, feeds)
        return web.json_response(
            {
                "model_name": name,
                "model_version": "1",
                "outputs": [
                    {"name": o.name, "datatype": "FP32", "shape": list(v.shape), "data": v.ravel().tolist()}
                    for o, v in zip(session.get_outputs(), outs, strict=True)
                ],
            }
        )

    app = web.Application()
    app.router.add_get(f"/v2/models/{name}", metadata)
    app.router.add_post(f"/v2/models/{name}/infer", infer)
    return app
