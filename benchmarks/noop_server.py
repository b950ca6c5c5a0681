"""A minimal OpenAI-compatible server for measuring HTTP *clients*, on 127.0.0.1.

Raw asyncio protocol, HTTP/1.1 keep-alive, SSE over chunked transfer encoding: it costs
a few tens of microseconds a request, so on its own core it out-runs any Python client
and the client is what gets measured. Two modes:

    no-op    answer at once: `--tokens N` content events, usage, [DONE] in one write;
             POST /v1/embeddings: one vector of `--dimension` floats per input, usage
             counting the inputs' words
    GET /metrics answers a Prometheus counter of the requests, for telemetry's scrapes.

    delays   --ttft-ms / --tpot-ms: headers at once, token i at ttft + i x tpot after the
             request arrived, on absolute deadlines, so the truth does not drift with
             the number of tokens; the loop polls the last 1.5 ms before each deadline,
             so a token leaves within tens of microseconds of it (--coarse: it does
             not, and costs CPU per event only)

    --skim   read `stream` and `max_tokens` by searching the body, not parsing it: for
             ~1 MB image bodies (benchmarks/bench_media.py), which would cost the server
             more than the client

    python benchmarks/noop_server.py --port 8000 [--ttft-ms 200 --tpot-ms 20 --tokens 100] [--skim]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from prometheus_client import CollectorRegistry, Counter, generate_latest

MODEL = "noop"
REGISTRY = CollectorRegistry()
REQUESTS = Counter("noop_requests", "requests answered", registry=REGISTRY)
#: delays mode: how late each first token and each later token left, against its deadline
#: (seconds), so a client benchmark can tell the server's own lateness from the client's
LATE: dict[str, list[float]] = {"first_token": [], "token": [], "loop": []}
LAG_PERIOD_S = 0.05  # the server loop's own lag: a timer this often, and how late it fires


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(obj: Any) -> bytes:
    return _chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


class Handler(asyncio.Protocol):
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        # a bytearray: a 1 MB body arrives in ~16 reads, and bytes += would copy it each time
        self.buf = bytearray()
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                k, _, v = line.partition(":")
                if k.strip().lower() == "content-length":
                    length = int(v.strip())
            if len(self.buf) < end + 4 + length:
                return
            body = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
            self.handle(head.split(" ", 2)[1], body)

    def handle(self, path: str, body: bytes) -> None:
        if path == "/stats":  # delays mode: the lateness since the last /stats, in ms; then reset
            payload = json.dumps({k: _late_ms(v) for k, v in LATE.items()}).encode()
            for v in LATE.values():
                v.clear()
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload))
            return
        if path == "/metrics":  # what a scrape reads (bench_http's telemetry rounds)
            payload = generate_latest(REGISTRY)
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload))
            return
        REQUESTS.inc()
        if path.endswith("/models"):
            payload = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload))
            return
        req = (_skim(body) if self.args.skim else json.loads(body)) if body else {}
        if path.endswith("/embeddings"):  # one fixed vector per input, at once
            texts = req.get("input") or []
            texts = [texts] if isinstance(texts, str) else texts
            data = ",".join(f'{{"object":"embedding","index":{i},"embedding":{self.args.vector}}}' for i in range(len(texts)))
            words = sum(len(t.split()) for t in texts)
            payload = (f'{{"object":"list","model":"{MODEL}","data":[{data}],'
                       f'"usage":{{"prompt_tokens":{words},"total_tokens":{words}}}}}').encode()
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload))
            return
        chat = path.endswith("/chat/completions")
        n = int(req.get("max_tokens") or self.args.tokens)
        if not req.get("stream"):
            text = " ".join(["tok"] * n)
            answer = {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
            payload = json.dumps(
                {"choices": [{"index": 0, "finish_reason": "length", **answer}], "usage": {"prompt_tokens": 1, "completion_tokens": n}}
            ).encode()
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload))
            return
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        middle, last = _tokens(chat)
        tail = _event({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": n}}) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        a = self.args
        if not a.ttft_ms and not a.tpot_ms:
            self.transport.write(middle * (n - 1) + last + tail)
            return
        # One timer per stream at a time, each token due at an absolute time: rendering
        # or scheduling all tokens up front would delay the next request's headers.
        loop = asyncio.get_running_loop()
        t0 = loop.time()

        def send(i: int) -> None:
            if self.transport.is_closing():
                return
            late = loop.time() - t0 - (a.ttft_ms + i * a.tpot_ms) / 1e3
            LATE["first_token" if i == 0 else "token"].append(late)
            if i == n - 1:
                self.transport.write(last + tail)
                return
            self.transport.write(middle)
            _at(loop, t0 + (a.ttft_ms + (i + 1) * a.tpot_ms) / 1e3, send, i + 1)

        _at(loop, t0 + a.ttft_ms / 1e3, send, 0)


# epoll waits whole milliseconds, rounded up, so a plain loop.call_at fires 0-1 ms late
# (0.5 ms on average: +0.25 % on a 200 ms TTFT, in the truth itself). A timer set this far
# ahead of the deadline lands before it; the loop then polls (other connections are still
# served) until the deadline. It costs CPU on the server's own core, not the client's.
_EARLY_S = 0.0015


#: --coarse: no polling, plain timers (0-1 ms late, +0.25 % on average on a 200 ms TTFT):
#: the server then costs CPU per event only, so on a 2-core machine the client gets the rest
COARSE = False


def _at(loop: asyncio.AbstractEventLoop, when: float, fn: Any, *args: Any) -> None:
    if COARSE:
        loop.call_at(when, fn, *args)
    elif when - loop.time() > _EARLY_S:
        loop.call_at(when - _EARLY_S, _poll, loop, when, fn, args)
    else:
        _poll(loop, when, fn, args)


def _poll(loop: asyncio.AbstractEventLoop, when: float, fn: Any, args: tuple) -> None:
    if loop.time() >= when:
        fn(*args)
    else:
        loop.call_soon(_poll, loop, when, fn, args)


def _skim(body: bytes) -> dict[str, Any]:
    """--skim: the two fields the answer needs, found by search rather than parsing the
    body: a 1 MB JSON body (an image) costs the server ~5 ms to parse, which would make it,
    not the client under test, the bottleneck."""
    at = body.rfind(b'"max_tokens"')
    digits = body[at + 12 : at + 32].lstrip(b": ") if at >= 0 else b""
    n = int(digits[: len(digits) - len(digits.lstrip(b"0123456789"))] or 0) if at >= 0 else 0
    return {"max_tokens": n or None, "stream": b'"stream": true' in body[-512:] or b'"stream":true' in body[-512:]}


def _late_ms(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"count": 0}
    v = sorted(values)
    return {"count": len(v), "p50": v[len(v) // 2] * 1e3, "p99": v[min(len(v) - 1, int(len(v) * 0.99))] * 1e3,
            "mean": sum(v) / len(v) * 1e3}


def _tokens(chat: bool) -> tuple[bytes, bytes]:
    """The SSE event of a token and of the last token (with its finish_reason)."""
    out = []
    for finish in (None, "length"):
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
        if chat:
            choice["delta"] = {"content": "tok "}
        else:
            choice["text"] = "tok "
        out.append(_event({"choices": [choice]}))
    return out[0], out[1]


def _probe(loop: asyncio.AbstractEventLoop, due: float) -> None:
    LATE["loop"].append(max(0.0, loop.time() - due))
    loop.call_at(due + LAG_PERIOD_S, _probe, loop, due + LAG_PERIOD_S)


async def serve(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    loop.call_at(loop.time() + LAG_PERIOD_S, _probe, loop, loop.time() + LAG_PERIOD_S)
    server = await loop.create_server(lambda: Handler(args), "127.0.0.1", args.port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--tokens", type=int, default=4, help="content events when the request sets no max_tokens")
    p.add_argument("--ttft-ms", type=float, default=0.0)
    p.add_argument("--tpot-ms", type=float, default=0.0)
    p.add_argument("--coarse", action="store_true", help="plain timers, no polling before each deadline")
    p.add_argument("--dimension", type=int, default=384, help="floats in each /v1/embeddings vector")
    p.add_argument("--skim", action="store_true", help="read stream and max_tokens by search, not by parsing "
                   "the body (large bodies: images)")
    args = p.parse_args()
    # the one vector every embeddings input gets, as JSON text made once (floats of ~9 digits)
    args.vector = json.dumps([round(((i * 7919) % 1000) / 997 - 0.5, 7) for i in range(args.dimension)])
    global COARSE
    COARSE = args.coarse
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
