"""An OpenAI chat server on 127.0.0.1 that looks at every image it is sent: the truth for
the image tests (tests/backends/test_http_images.py).

Each `image_url` part that is a data URL is base64-decoded and decoded whole with Pillow;
each `video_url` part's bytes are hashed. The answer names every media part it found, in
order, as `m<message>.p<part> image WxH FORMAT sha256=<hex>` (or `video N bytes
sha256=<hex>`), one word a token, so a test can check, per sample, that the exact bytes
arrived, at the stated size, in the stated part. Usage counts the text's words plus
`image_tokens(w, h)` per image, and gives the split (prompt_tokens_details.image_tokens)
when `split` is set. An image over `max_pixels` is refused with a 400 and a sentence, as a
vision server refuses an image too large for its model; an image Pillow cannot decode is
refused the same way. Each request's body length and answer are logged in `log`.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from PIL import Image

PATCH = 32  # pixels per image token along each side, as a ViT with 32-pixel patches counts


def image_tokens(width: int, height: int) -> int:
    return -(-width // PATCH) * -(-height // PATCH)


@dataclass
class ImageServerLog:
    #: per request: the body's length in bytes and the answer's text
    requests: list[tuple[int, str]] = field(default_factory=list)


class Refused(Exception):
    pass


def _look(messages: list[dict[str, Any]], max_pixels: int | None) -> tuple[list[str], int, int]:
    """(answer words, text tokens, image tokens) of one request's messages."""
    words: list[str] = []
    text_tokens = image_total = 0
    for i, m in enumerate(messages):
        content = m.get("content")
        if isinstance(content, str):
            text_tokens += len(content.split())
            continue
        for k, part in enumerate(content):
            kind = part["type"]
            if kind == "text":
                text_tokens += len(part["text"].split())
                continue
            url = part[kind]["url"]
            head, _, payload = url.partition(",")
            data = base64.b64decode(payload)
            digest = hashlib.sha256(data).hexdigest()
            if kind == "video_url":
                words.append(f"m{i}.p{k} video {len(data)} bytes sha256={digest}")
                continue
            try:
                with Image.open(io.BytesIO(data)) as img:
                    img.load()
                    w, h, fmt = img.width, img.height, img.format
            except Exception as e:  # noqa: BLE001 - any decoding failure is the client's bad image
                raise Refused(f"message {i} part {k}: cannot decode the image ({e})") from e
            if max_pixels is not None and w * h > max_pixels:
                raise Refused(f"message {i} part {k}: image is {w}x{h}, over this model's {max_pixels} pixels")
            image_total += image_tokens(w, h)
            words.append(f"m{i}.p{k} image {w}x{h} {fmt} sha256={digest}")
    return words, text_tokens, image_total


def image_app(log: ImageServerLog, split: bool = True, max_pixels: int | None = None,
              model: str = "vision-truth") -> web.Application:
    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": model, "object": "model"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw)
        try:
            words, text_tokens, image_total = _look(body["messages"], max_pixels)
        except Refused as e:
            log.requests.append((len(raw), ""))
            return web.json_response({"error": {"message": str(e), "type": "invalid_request_error"}}, status=400)
        answer = " ; ".join(words) or "no media"
        log.requests.append((len(raw), answer))
        pieces = answer.split(" ")
        usage: dict[str, Any] = {"prompt_tokens": text_tokens + image_total, "completion_tokens": len(pieces),
                                 "total_tokens": text_tokens + image_total + len(pieces)}
        if split:
            usage["prompt_tokens_details"] = {"image_tokens": image_total, "cached_tokens": 0}
        if not body.get("stream"):
            return web.json_response({"choices": [{"index": 0, "finish_reason": "stop",
                                                   "message": {"role": "assistant", "content": answer}}], "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for n, piece in enumerate(pieces):
            text = piece if n == 0 else " " + piece
            finish = "stop" if n == len(pieces) - 1 else None
            event = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
            await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        if (body.get("stream_options") or {}).get("include_usage"):
            await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    return app


def parse_answer(text: str) -> list[dict[str, Any]]:
    """The answer's media, in order: {where, kind, width, height, format, bytes, sha256}."""
    out = []
    for item in text.split(" ; "):
        where, kind, *rest = item.split(" ")
        entry: dict[str, Any] = {"where": where, "kind": kind, "sha256": rest[-1].removeprefix("sha256=")}
        if kind == "image":
            w, h = rest[0].split("x")
            entry.update(width=int(w), height=int(h), format=rest[1].lower())
        else:
            entry["bytes"] = int(rest[0])
        out.append(entry)
    return out
