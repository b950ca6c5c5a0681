"""An OpenAI chat server on 127.0.0.1 for structured outputs, whose every k-th answer breaks
its schema on purpose: the test knows exactly which answers are valid.

Answer n (counted from 1 over timed requests; a warm-up request, whose prompt starts with
"Warm-up request", is answered validly and not counted) is `{"name": "person n", "age": n}`,
valid under PERSON. When n is a multiple of k it is broken instead, the three ways a
structured answer goes wrong in turn: prose around the JSON (not JSON), the object cut
mid-value with finish_reason "length" (max_tokens reached), and the age as a string (JSON
that fails the schema). Streamed (SSE, one event a word) or whole, as the request asks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

#: the schema the answers follow: bounded, as a grammar-constrained server needs it
PERSON: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}

#: how the k-th answers break, in turn, and the words of the harness's detail for each
BREAKS = ("not_json", "cut_short", "wrong_type")
DETAIL = {"not_json": "not JSON", "cut_short": "ends mid-value", "wrong_type": "$.age: '"}


@dataclass
class StructuredTruth:
    """What the server did: each timed request's body as sent, and each answer's text and
    how it broke ("" when valid), in the order they were answered."""

    k: int
    bodies: list[dict[str, Any]] = field(default_factory=list)
    answers: list[tuple[str, str]] = field(default_factory=list)

    def answer(self) -> tuple[str, str, str]:
        """The next timed answer: (text, finish_reason, how it broke or "")."""
        n = len(self.answers) + 1
        valid = json.dumps({"name": f"person {n}", "age": n})
        broke = BREAKS[(n // self.k - 1) % len(BREAKS)] if n % self.k == 0 else ""
        text, finish = {
            "": (valid, "stop"),
            "not_json": (f"Sure! Here is the person: {valid}", "stop"),
            "cut_short": (valid[: len(valid) // 2], "length"),
            "wrong_type": (json.dumps({"name": f"person {n}", "age": str(n)}), "stop"),
        }[broke]
        self.answers.append((text, broke))
        return text, finish, broke


def structured_app(truth: StructuredTruth, model: str = "structured-model") -> web.Application:
    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": model, "object": "model"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body["messages"][-1]["content"].startswith("Warm-up request"):
            text, finish = json.dumps({"name": "warm-up", "age": 0}), "stop"
        else:
            truth.bodies.append(body)
            text, finish, _ = truth.answer()
        usage = {"prompt_tokens": 8, "completion_tokens": len(text.split()), "total_tokens": 8 + len(text.split())}
        if not body.get("stream"):
            return web.json_response({
                "id": "x", "object": "chat.completion", "model": model, "usage": usage,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            })
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        words = text.split(" ")
        for i, word in enumerate(words):
            piece = word if i == 0 else " " + word
            event = {"choices": [{"index": 0, "delta": {"content": piece},
                                  "finish_reason": finish if i == len(words) - 1 else None}]}
            await resp.write(f"data: {json.dumps(event)}\n\n".encode())
        if (body.get("stream_options") or {}).get("include_usage"):
            await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    return app
