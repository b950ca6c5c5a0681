"""An OpenAI `/v1/audio/transcriptions` server around a real speech recognizer (PocketSphinx,
whose wheel ships an English model), for the speech tests, and what it is known to answer.

Each request's multipart form is parsed by aiohttp; the WAV file is decoded, resampled to
the model's 16 kHz, and recognized. The server keeps a log per request: the sha256 of the
file bytes it received, the audio seconds it measured from them, the transcript, and its own
processing time (perf_counter_ns from the handler's start to the answer's last byte), so a
test can hold the harness's bytes, audio seconds and RTFx to the server's own figures.

Answers: `response_format` json (`{"text", "usage": {"type": "duration", "seconds"}}`),
verbose_json (`duration`), text; with `stream=true`, SSE in vLLM's form, one word per
`choices[0].delta.content` event, then a usage event (completion_tokens: the words) and
`[DONE]`. `refuse_multipart`: every transcription request gets 415, as a JSON-only server
answers a form.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import threading
import time
import wave
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiohttp import web

MODEL = "pocketsphinx-en-us"
RATE = 16_000


def pcm16k(data: bytes) -> tuple[np.ndarray, float]:
    """A WAV file's samples, mono int16 at 16 kHz (linear interpolation), and its seconds."""
    with wave.open(io.BytesIO(data)) as w:
        rate, channels, width = w.getframerate(), w.getnchannels(), w.getsampwidth()
        raw = w.readframes(w.getnframes())
    if width != 2:
        raise ValueError(f"{width * 8}-bit WAV: this server takes 16-bit PCM")
    pcm = np.frombuffer(raw, dtype=np.int16).reshape(-1, channels).mean(axis=1)
    seconds = len(pcm) / rate
    n = int(len(pcm) * RATE / rate)
    resampled = np.interp(np.arange(n) * rate / RATE, np.arange(len(pcm)), pcm).astype(np.int16)
    return resampled, seconds


class Recognizer:
    """PocketSphinx, one utterance at a time, each by a fresh decoder (0.24 s to make here):
    one decoder kept across utterances adapts to those before (its transcripts of the same six
    files differed with their order), so a server's answer would depend on the load's order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __call__(self, data: bytes) -> tuple[str, float]:
        from pocketsphinx import Decoder

        pcm, seconds = pcm16k(data)
        with self._lock:
            d = Decoder(samprate=RATE, loglevel="FATAL")
            d.start_utt()
            d.process_raw(pcm.tobytes(), full_utt=True)
            d.end_utt()
            hyp = d.hyp()
        return (hyp.hypstr if hyp is not None else ""), seconds


@dataclass
class Heard:
    sha256: str
    seconds: float
    text: str
    processing_ns: int
    fields: dict[str, str] = field(default_factory=dict)


def transcription_app(recognizer: Recognizer, log: list[Heard], refuse_multipart: bool = False) -> web.Application:
    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def transcribe(request: web.Request) -> web.StreamResponse:
        start = time.perf_counter_ns()
        if refuse_multipart or not request.content_type.startswith("multipart/"):
            return web.json_response({"error": {"message": f"unsupported media type {request.content_type}"}}, status=415)
        form = await request.post()
        upload = form.get("file")
        if not isinstance(upload, web.FileField):
            return web.json_response({"error": {"message": "no file part"}}, status=400)
        data = upload.file.read()
        fields = {k: str(v) for k, v in form.items() if k != "file"}
        try:
            text, seconds = await asyncio.get_running_loop().run_in_executor(None, recognizer, data)
        except (wave.Error, EOFError, ValueError) as e:
            return web.json_response({"error": {"message": f"cannot decode the audio: {e}"}}, status=400)
        words = text.split()
        fmt = fields.get("response_format", "json")
        if fields.get("stream") == "true":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i, word in enumerate(words):
                delta = {"content": word if i == 0 else " " + word}
                await resp.write(f"data: {json.dumps({'object': 'transcription.chunk', 'choices': [{'delta': delta}]})}\n\n".encode())
            usage = {"prompt_tokens": 0, "completion_tokens": len(words), "total_tokens": len(words)}
            await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode())
            log.append(Heard(hashlib.sha256(data).hexdigest(), seconds, text, time.perf_counter_ns() - start, fields))
            await resp.write_eof()
            return resp
        if fmt == "text":
            resp = web.Response(text=text)
        elif fmt == "verbose_json":
            resp = web.json_response({"task": "transcribe", "language": "english", "duration": seconds, "text": text})
        else:
            # OpenAI's whisper-1 usage form; the words as output tokens too, so tokens/s exists
            resp = web.json_response({"text": text, "usage": {"type": "duration", "seconds": seconds,
                                                              "output_tokens": len(words)}})
        log.append(Heard(hashlib.sha256(data).hexdigest(), seconds, text, time.perf_counter_ns() - start, fields))
        return resp

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/audio/transcriptions", transcribe)
    return app


def heard_json(log: list[Heard]) -> list[dict[str, Any]]:
    return [{"sha256": h.sha256, "seconds": h.seconds, "text": h.text} for h in log]
