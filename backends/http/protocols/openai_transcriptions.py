"""OpenAI audio transcriptions (`POST {url}/audio/transcriptions`): vLLM, OpenAI, whisper.cpp's
and speaches' servers. Audio files in, as multipart/form-data (file, model, language,
response_format); the transcript out, whole or streamed as SSE (`stream=true`), where each
delta is tokens, so a streamed transcript has a time to first token. It gives a
"transcript" (backends.base.OutputKind): timed as tokens, and logged in accuracy mode as
MLPerf's whisper reference logs one, with no tokenizer needed.

The multipart body is encoded once per sample when the QSL loads (urllib3's encoder, with
one boundary per backend so that every body matches the one Content-Type header): the timed
path posts ready bytes. Two stream forms are read: vLLM's (`choices[0].delta.content`, then
a `usage` event and `[DONE]`) and OpenAI's (`transcript.text.delta` events, then
`transcript.text.done` with the usage). Usage, in any of its forms (`output_tokens` or
`completion_tokens`; `{"type": "duration", "seconds": S}`; verbose_json's `duration`),
becomes backends.base.Usage.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal

from pydantic import Field

from backends.base import AudioSample, Chunk, InputKind, OutputKind, Sample, Usage
from backends.http.options import BaseHttpOptions
from backends.http.protocol import HttpProtocol, ServerInfo, StreamParser
from harness.errors import DatasetError, RequestFailed

#: the file part's media type by the sample's format (servers sniff the bytes anyway)
_MEDIA = {"wav": "audio/wav", "flac": "audio/flac", "mp3": "audio/mpeg", "ogg": "audio/ogg", "webm": "audio/webm",
          "m4a": "audio/mp4"}


class OpenAITranscriptionsOptions(BaseHttpOptions):
    protocol: Literal["openai-transcriptions"] = Field("openai-transcriptions", description="OpenAI audio transcriptions, POST {url}/audio/transcriptions (url: http://host:port/v1); audio files in (multipart/form-data), the transcript out")
    language: str | None = Field("en", description="the `language` field (ISO-639-1); None: the server detects it")
    response_format: Literal["json", "verbose_json", "text"] = Field("json", description="the `response_format` field")
    stream: bool = Field(False, description="ask for the transcript as SSE deltas (`stream=true`): a time to first token")
    temperature: float | None = Field(None, ge=0, description="the `temperature` field (None: the server's default)")
    extra_fields: dict[str, str] = Field(default_factory=dict, description="further form fields sent with every request (e.g. prompt)")


class OpenAITranscriptions(HttpProtocol):
    name = "openai-transcriptions"
    Options = OpenAITranscriptionsOptions
    options: OpenAITranscriptionsOptions
    aliases = ("transcriptions", "whisper", "asr")
    url_form = "http://host:port/v1"
    takes: ClassVar[tuple[InputKind, ...]] = ("audio",)
    gives: ClassVar[OutputKind] = "transcript"

    def __init__(self, options: OpenAITranscriptionsOptions) -> None:
        super().__init__(options)
        from urllib3.filepost import choose_boundary

        self.boundary = choose_boundary()
        # every body of this backend has this boundary, so one header serves them all
        self.content_type = f"multipart/form-data; boundary={self.boundary}"  # type: ignore[misc]

    @property
    def takes_sessions(self) -> bool:
        return False

    def endpoint(self, base: str) -> str:
        return f"{base}/audio/transcriptions"

    def metadata_url(self, base: str) -> str | None:
        return f"{base}/models"

    def read_metadata(self, meta: Any) -> ServerInfo:
        ids = [m.get("id") for m in meta.get("data", []) if isinstance(m, dict)] if isinstance(meta, dict) else []
        if self.model_name is None and ids:
            self.model_name = ids[0]
        return ServerInfo(server={"models": ids, "model": self.model_name})

    def failure_hint(self, status: int, probe: bool = False) -> str:
        if status == 415 and not probe:
            return "(the server refuses multipart/form-data: is url a transcription server's /v1?)"
        if status == 404 and not self.bound.base.rstrip("/").endswith("/v1"):
            return f"(OpenAI servers serve under /v1: try url={self.bound.base}/v1)"
        return ""

    # --- a sample -> its multipart body, when the QSL loads -----------------------------
    def encode(self, sample: Sample) -> bytes:
        from urllib3.filepost import encode_multipart_formdata

        if not isinstance(sample, AudioSample):
            raise DatasetError(f"protocol {self.name} takes audio files: use an audio dataset "
                               "(JSONL rows with `audio`, librispeech:DIR, synthetic-speech, mlperf:whisper:MANIFEST)")
        o = self.options
        fields: list[tuple[str, Any]] = [("file", (sample.filename, sample.data, _MEDIA.get(sample.format, "application/octet-stream")))]
        if self.model_name:
            fields.append(("model", self.model_name))
        if o.language:
            fields.append(("language", o.language))
        fields.append(("response_format", o.response_format))
        if o.temperature is not None:
            fields.append(("temperature", str(o.temperature)))
        if o.stream:
            fields += [("stream", "true"), ("stream_include_usage", "true")]  # the second: vLLM's usage event
        fields += list(o.extra_fields.items())
        body, _ = encode_multipart_formdata(fields, boundary=self.boundary)
        return body

    def input_tokens(self, sample: Sample) -> int:
        return 0  # audio: only the server can say (its usage)

    @property
    def input_token_method(self) -> str:
        return "the server's usage only (audio has no local count)"

    # --- the answer -> Chunks ------------------------------------------------------------
    def _count(self, text: str) -> int:
        return self.bound.tokenizer.count(text) if self.bound.tokenizer is not None else 1

    def stream_parser(self) -> StreamParser | None:
        return _TranscriptStream(self) if self.options.stream else None

    def decode(self, raw: bytes) -> list[Chunk]:
        if self.options.response_format == "text":
            text = raw.decode(errors="replace").strip()
            usage = None
        else:
            obj = self.json_body(raw)
            text = obj.get("text") if isinstance(obj, dict) else None
            if text is not None and not isinstance(text, str):
                raise RequestFailed("malformed_json", self.bound.excerpt(f"text is a {type(text).__name__}: {json.dumps(obj)}"))
            usage = _usage(obj, self.bound.excerpt)
        if not text:
            raise RequestFailed("empty_output", "the transcript has no text")
        if self.bound.redact_text is not None:
            text = self.bound.redact_text(text)
        return [Chunk(text, self._count(text)), *([Chunk(n_tokens=0, usage=usage)] if usage is not None else [])]

    def describe(self) -> dict[str, Any]:
        o = self.options
        return {**super().describe(), "stream": o.stream, "language": o.language, "response_format": o.response_format}


def _usage(obj: Any, excerpt: Any) -> Usage | None:
    """Any of the servers' usage forms (and verbose_json's `duration`) as a Usage."""
    if not isinstance(obj, dict):
        return None
    usage = obj.get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise RequestFailed("malformed_json", excerpt(f"usage is not an object: {json.dumps(obj)}"))
    u = usage or {}

    def number(d: dict[str, Any], *keys: str) -> float | None:
        v = next((d[k] for k in keys if isinstance(d.get(k), (int, float)) and not isinstance(d.get(k), bool)), None)
        return float(v) if v is not None else None

    out, inp = number(u, "output_tokens", "completion_tokens"), number(u, "input_tokens", "prompt_tokens")
    seconds = number(u, "seconds") if u.get("type") == "duration" else number(obj, "duration")
    if out is None and inp is None and seconds is None:
        return None
    return Usage(output_tokens=int(out) if out is not None else None, input_tokens=int(inp) if inp is not None else None,
                 audio_seconds=seconds)


class _TranscriptStream:
    """A streamed transcript's SSE events -> Chunks: vLLM's chat-like `choices[0].delta.content`
    events ended by `[DONE]`, or OpenAI's `transcript.text.delta` events ended by
    `transcript.text.done`. Each delta is content (its arrival timed as a token)."""

    def __init__(self, protocol: OpenAITranscriptions) -> None:
        self.protocol = protocol
        self.excerpt = protocol.bound.excerpt
        self.buf = b""
        self.done = False
        self.content = 0

    def _bad(self, what: str, payload: bytes) -> RequestFailed:
        return RequestFailed("malformed_sse", self.excerpt(f"{what}: {payload.decode(errors='replace')}"))

    def feed(self, data: bytes) -> list[Chunk]:
        buf = (self.buf + data).replace(b"\r\n", b"\n")
        out: list[Chunk] = []
        while (end := buf.find(b"\n\n")) >= 0:
            event, buf = buf[:end], buf[end + 2:]
            payload = b"".join(line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:"))
            if not payload:
                continue
            if payload == b"[DONE]":
                self.done = True
                continue
            try:
                obj = json.loads(payload)
            except ValueError as e:
                raise self._bad("not JSON", payload) from e
            if not isinstance(obj, dict):
                raise self._bad("not an object", payload)
            if "error" in obj:
                raise RequestFailed("server_error", self.excerpt(json.dumps(obj["error"])))
            kind = obj.get("type")
            if kind == "transcript.text.done":
                self.done = True
                text = ""
            elif kind is not None:
                text = obj.get("delta") or ""
            else:
                choices = obj.get("choices") or []
                if not isinstance(choices, list) or (choices and not isinstance(choices[0], dict)):
                    raise self._bad("choices is not a list of objects", payload)
                delta = (choices[0].get("delta") or {}) if choices else {}
                if not isinstance(delta, dict):
                    raise self._bad("delta is not an object", payload)
                text = delta.get("content") or ""
                self.done = self.done or bool(choices and choices[0].get("finish_reason"))
            if not isinstance(text, str):
                raise self._bad(f"the delta is a {type(text).__name__}", payload)
            if text:
                self.content += 1
                out.append(Chunk(text, self.protocol._count(text)))
            try:
                usage = _usage(obj if kind is None or "usage" in obj else {}, self.excerpt)
            except RequestFailed as e:
                raise self._bad("usage is not an object", payload) from e
            if usage is not None:
                out.append(Chunk(n_tokens=0, usage=usage))
        self.buf = buf
        return out

    def finish(self) -> list[Chunk]:
        if not self.done:
            raise RequestFailed("truncated_stream", f"the stream ended after {self.content} deltas without [DONE] or transcript.text.done")
        if not self.content:
            raise RequestFailed("empty_output", "the stream carried no transcript")
        return []

    def verify(self) -> None:
        """Nothing is checked after the chunks went on."""


PROTOCOL = OpenAITranscriptions
