"""The wire formats the HTTP protocols share, apart from the transport: redaction of
secrets, and the OpenAI API's server-sent events, tool calls and usage (both OpenAI
protocols, backends.http.openai). A protocol's own format lives in its module
(backends/http/protocols).

Each is pure: bytes or JSON in, Chunks or dicts out, failures as RequestFailed with the
reason the summary groups by.
"""

from __future__ import annotations

import base64
import json
import json.scanner
import math
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

from backends.base import Chunk, Usage
from harness.errors import RequestFailed

_EXCERPT = 200


def _squash(text: str) -> str:
    return " ".join(text.split())[:_EXCERPT]


_scan_json = json.scanner.make_scanner(json.JSONDecoder())


def _json_decode(text: str) -> Any:
    """One SSE payload (already stripped) as JSON: json's own C scanner called directly,
    without JSONDecoder.decode's two Python frames and whitespace regex around it (~270 ns
    of ~1.6 us an event here). The same values and the same JSONDecodeError (a ValueError)."""
    try:
        obj, end = _scan_json(text, 0)
    except StopIteration as e:
        raise json.JSONDecodeError("Expecting value", text, e.value) from None
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return obj


class _Redactor:
    """Replaces secrets in a text by `***`, by value: each secret as it is, URL-encoded,
    JSON-escaped and base64-encoded (at each of the three alignments it can have inside a
    longer base64 text). Called on whole texts before any cut, so no prefix survives."""

    def __init__(self, secrets: Iterable[str]) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if not secret:
                continue
            forms.add(secret)
            derived = {quote(secret, safe=""), quote(secret), json.dumps(secret)[1:-1], secret.replace("/", "\\/")}
            derived.update(_b64_forms(secret.encode()))
            forms.update(f for f in derived if len(f) >= 8)  # a short form would mangle any text
        self.forms = sorted(forms, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for form in self.forms:
            if form in text:
                text = text.replace(form, "***")
        return text

    def excerpt(self, text: str) -> str:
        return _squash(self(text))


def _b64_forms(raw: bytes) -> list[str]:
    """The characters of base64(... + raw + ...) that depend on `raw` alone, per alignment."""
    out = []
    for k in range(3):
        enc = base64.b64encode(b"\0" * k + raw).decode().rstrip("=")
        start = -(-k * 8 // 6)  # the first character holding no byte of the padding
        end = len(enc) - (1 if (k + len(raw)) * 8 % 6 else 0)  # the last may hold what follows
        out.append(enc[start:end])
    return out


#: the inline reasoning span's tags (DeepSeek-R1, Qwen3 served without a reasoning parser)
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


class _ThinkSplitter:
    """Content text -> (is_reasoning, piece) pairs, for servers that inline the reasoning in
    `<think>...</think>`. The tags may be cut across events: a tail that could begin a tag
    is held back until the next event says. A tag alone is a piece with text "" (its
    tokens count as reasoning, as a reasoning model's tokenizer has the tag as a token)."""

    def __init__(self) -> None:
        self.inside = False
        self.held = ""

    def split(self, text: str) -> list[tuple[bool, str | None]]:
        """Pieces in order; a piece of None is a tag."""
        text = self.held + text
        self.held = ""
        out: list[tuple[bool, str | None]] = []
        while text:
            tag = THINK_CLOSE if self.inside else THINK_OPEN
            at = text.find(tag)
            if at >= 0:
                if at:
                    out.append((self.inside, text[:at]))
                out.append((True, None))
                self.inside = not self.inside
                text = text[at + len(tag):]
                continue
            keep = next((k for k in range(min(len(tag) - 1, len(text)), 0, -1) if tag.startswith(text[-k:])), 0)
            if keep:
                self.held, text = text[-keep:], text[:-keep]
            if text:
                out.append((self.inside, text))
            break
        return out

    def flush(self) -> list[tuple[bool, str | None]]:
        """The stream ended: a held tail was text after all."""
        held, self.held = self.held, ""
        return [(self.inside, held)] if held else []


class _ToolCalls:
    """`delta.tool_calls[i]` pieces reassembled per call, by `index` (OpenAI streams a
    call's name first, then its arguments in pieces, each delta naming its index)."""

    def __init__(self) -> None:
        self.calls: dict[int, dict[str, Any]] = {}

    def add(self, pieces: Any, count: Callable[[str], int] | None, bad: Callable[[str], RequestFailed]) -> int:
        """Adds one delta's pieces; returns their tokens (the tokenizer's count of the name
        and arguments pieces, else one per call piece, as content counts one per event)."""
        if pieces.__class__ is not list:
            raise bad(f"tool_calls is a {type(pieces).__name__}, not a list")
        tokens = 0
        for position, piece in enumerate(pieces):
            if piece.__class__ is not dict:
                raise bad(f"tool_calls[{position}] is a {type(piece).__name__}, not an object")
            index = piece.get("index", position)
            fn = piece.get("function") or {}
            if index.__class__ is not int or fn.__class__ is not dict:
                raise bad(f"tool_calls[{position}]: index is not an int or function is not an object")
            name, args, call_id = fn.get("name"), fn.get("arguments"), piece.get("id")
            for field, value in (("name", name), ("arguments", args), ("id", call_id)):
                if value is not None and value.__class__ is not str:
                    raise bad(f"tool_calls[{position}].{field} is a {type(value).__name__}, not a string")
            call = self.calls.setdefault(index, {"index": index, "id": None, "name": "", "arguments": "", "tokens": 0})
            if call_id:
                call["id"] = call_id
            call["name"] += name or ""
            call["arguments"] += args or ""
            n = (count(name or "") + count(args or "")) if count else int(bool(name or args))
            call["tokens"] += n
            tokens += n
        return tokens

    def assembled(self) -> list[dict[str, Any]]:
        """The calls by index, each with `json`: whether its arguments parse as JSON."""
        out = []
        for index in sorted(self.calls):
            call = dict(self.calls[index])
            try:
                json.loads(call["arguments"])
                call["json"] = True
            except ValueError:
                call["json"] = False
            out.append(call)
        return out


def _check_calls(calls: list[dict[str, Any]], excerpt: Callable[[str], str]) -> None:
    """A tool call whose arguments are not JSON fails its request: a caller could not run it."""
    for call in calls:
        if not call["json"]:
            raise RequestFailed("malformed_tool_call", excerpt(
                f"tool call {call['index']} ({call['name'] or 'no name'}): arguments are not JSON: {call['arguments']!r}"))


class _SseParser:
    """OpenAI server-sent events -> Chunks, fed the bytes of each network read.

    Reasoning (a chat delta's `reasoning_content`, vLLM's and DeepSeek's field, or
    `reasoning`, newer vLLM's; with `think_tags`, `<think>...</think>` spans inside the
    content) comes as chunks marked `reasoning`; tool-call pieces as chunks of tokens
    without text, reassembled per call and sent once, at the end, as a `tool_calls` chunk.
    Any field of the wrong type fails the stream as malformed_sse, never as the Python
    exception it would raise further on."""

    def __init__(self, chat: bool, count: Callable[[str], int] | None, excerpt: Callable[[str], str] = _squash,
                 ids: bool = False, think_tags: bool = False) -> None:
        self.chat = chat
        self.count = count
        #: read each event's `token_ids` (accuracy mode asked for them): off, the lookup and
        #: its checks cost ~150 ns an event (~3 % of parsing one here), so only when asked
        self.ids = ids
        self.excerpt = excerpt  # a failure's detail: the backend's redacts before it cuts
        self.buf = b""
        self.finished = self.done = False
        self.content = 0
        self.think = _ThinkSplitter() if think_tags else None
        self.tools: _ToolCalls | None = None

    def _bad(self, what: str, payload: bytes) -> RequestFailed:
        return RequestFailed("malformed_sse", self.excerpt(f"{what}: {payload.decode(errors='replace')}"))

    def feed(self, data: bytes) -> list[Chunk]:
        buf = self.buf + data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        out: list[Chunk] = []
        while True:
            end = buf.find(b"\n\n")
            if end < 0:
                break
            event, buf = buf[:end], buf[end + 2 :]
            if event.startswith(b"data:") and b"\n" not in event:
                payload = event[5:].strip()  # the usual one-line event
            else:
                payload = b"".join(line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:"))
            if not payload:
                continue  # comments and keep-alives
            if payload == b"[DONE]":
                self.done = True
                continue
            try:
                obj = _json_decode(payload.decode())  # SSE is UTF-8: skips json.loads' encoding sniffing
                choices = obj.get("choices") or []
            except (ValueError, AttributeError) as e:
                raise RequestFailed("malformed_sse", self.excerpt(payload.decode(errors="replace"))) from e
            if "error" in obj:
                raise RequestFailed("server_error", self.excerpt(json.dumps(obj["error"])))
            if choices:
                # each level's type checked before it is read: a string `choices` would
                # otherwise fail as Python's AttributeError, not as this stream's malformed_sse
                if choices.__class__ is not list:
                    raise self._bad("choices is not a list", payload)
                c = choices[0]
                if c.__class__ is not dict:
                    raise self._bad("choices[0] is not an object", payload)
                reasoning = tools = None
                if self.chat:
                    d = c.get("delta") or {}
                    if d.__class__ is not dict:
                        raise self._bad("delta is not an object", payload)
                    text = d.get("content") or ""
                    reasoning = d.get("reasoning_content") or d.get("reasoning")
                    tools = d.get("tool_calls")
                else:
                    text = c.get("text") or ""
                self.finished = self.finished or c.get("finish_reason") is not None
                # vLLM's return_token_ids: the ids this event generated (accuracy mode asks for them)
                ids = c.get("token_ids") if self.ids else None
                if ids is not None and ids.__class__ is not list:
                    raise self._bad("token_ids is not a list", payload)
                if reasoning:
                    if reasoning.__class__ is not str:
                        raise self._bad(f"reasoning_content is a {type(reasoning).__name__}", payload)
                    self.content += 1
                    out.append(Chunk(reasoning, self.count(reasoning) if self.count else 1, reasoning=True))
                if tools is not None:
                    if self.tools is None:
                        self.tools = _ToolCalls()
                    n = self.tools.add(tools, self.count, lambda what: self._bad(what, payload))
                    if n:
                        self.content += 1
                        out.append(Chunk(n_tokens=n))
                if text:
                    # The SUT takes chunks as typed (base.Chunk): a wrong type is this stream's failure.
                    if text.__class__ is not str:
                        raise self._bad(f"content is a {type(text).__name__}", payload)
                    self.content += 1
                    if self.think is not None:
                        out += self._pieces(self.think.split(text), ids)
                    else:
                        n = self.count(text) if self.count else 1
                        # a keyword argument costs ~40 ns an event: passed only when there are ids
                        out.append(Chunk(text, n) if ids is None else Chunk(text, n, token_ids=ids))
                elif ids:
                    out.append(Chunk(n_tokens=0, token_ids=ids))
            usage = obj.get("usage")
            if usage:
                if usage.__class__ is not dict:
                    raise self._bad("usage is not an object", payload)
                out.append(Chunk(n_tokens=0, usage=openai_usage(usage)))
        self.buf = buf
        return out

    def _pieces(self, pieces: list[tuple[bool, str | None]], ids: list[int] | None = None) -> list[Chunk]:
        """Chunks of a think-tags split: each piece counted on its own (a tag as one token
        without a tokenizer); the event's ids ride on its first chunk."""
        out = []
        for reasoning, piece in pieces:
            if piece is None:
                n = self.count(THINK_OPEN) if self.count else 1
                out.append(Chunk("", n, reasoning=True))
            else:
                out.append(Chunk(piece, self.count(piece) if self.count else 1, reasoning=reasoning))
        if ids:  # a tag tail held back leaves no chunk: the ids still go on
            if out:
                out[0].token_ids = ids
            else:
                out.append(Chunk(n_tokens=0, token_ids=ids))
        return out

    def finish(self) -> list[Chunk]:
        """The stream ended: it must have said so, and carried content. Returns its last
        chunks: a held-back think-tags tail, and the reassembled tool calls."""
        if not (self.done or self.finished):
            raise RequestFailed("truncated_stream", f"the stream ended after {self.content} content events without [DONE]")
        if not self.content:
            raise RequestFailed("empty_output", "the stream carried no content")
        out = self._pieces(self.think.flush()) if self.think is not None else []
        if self.tools is not None and self.tools.calls:
            out.append(Chunk(n_tokens=0, tool_calls=self.tools.assembled()))
        return out

    def verify(self) -> None:
        """After the tool calls were handed on (kept in tokens.jsonl): one whose arguments
        are not JSON fails the request, as a caller could not run it."""
        if self.tools is not None:
            _check_calls(self.tools.assembled(), self.excerpt)


def _count(v: Any) -> int | None:
    """A count the server sent; None where it sent none, or no number (a bool is no count)."""
    if v.__class__ is int:
        return v
    return int(v) if v.__class__ is float and math.isfinite(v) else None


def openai_usage(usage: dict[str, Any]) -> Usage:
    """OpenAI's `usage` object as the contract's Usage (a field of the wrong type: None).
    Once a streamed request, on the loop: a whole int is taken as it is, and the details
    objects are read only when sent."""
    get = usage.get
    out, into = get("completion_tokens"), get("prompt_tokens")
    details, out_details = get("prompt_tokens_details"), get("completion_tokens_details")
    cached = image = reasoning = None
    if details.__class__ is dict:
        cached, image = _count(details.get("cached_tokens")), _count(details.get("image_tokens"))
    if out_details.__class__ is dict:
        reasoning = _count(out_details.get("reasoning_tokens"))
    return Usage(output_tokens=out if out.__class__ is int else _count(out),
                 input_tokens=into if into.__class__ is int else _count(into),
                 cached_tokens=cached, reasoning_tokens=reasoning, image_tokens=image)
