"""The HTTP backend's wire formats, apart from its transport and options: OpenAI SSE events
to Chunks, KServe v2 tensors, and templated JSON bodies and answers (backends.http).

Each is pure: bytes or JSON in, Chunks, dicts or arrays out, failures as RequestFailed
with the reason the summary groups by.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

import numpy as np

from backends.base import Chunk, TensorSpec
from harness.errors import DatasetError, RequestFailed

# KServe v2 datatypes <-> numpy dtype names
_V2_TO_NP = {
    "FP32": "float32", "FP16": "float16", "FP64": "float64", "INT64": "int64", "INT32": "int32",
    "INT16": "int16", "INT8": "int8", "UINT8": "uint8", "BOOL": "bool",
}  # fmt: skip
_NP_TO_V2 = {v: k for k, v in _V2_TO_NP.items()}

_EXCERPT = 200


def _squash(text: str) -> str:
    return " ".join(text.split())[:_EXCERPT]


_json_decode = json.JSONDecoder().decode


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


class _SseParser:
    """OpenAI server-sent events -> Chunks, fed the bytes of each network read."""

    def __init__(self, chat: bool, count: Callable[[str], int] | None, excerpt: Callable[[str], str] = _squash,
                 ids: bool = False) -> None:
        self.chat = chat
        self.count = count
        #: read each event's `token_ids` (accuracy mode asked for them): off, the lookup and
        #: its checks cost ~150 ns an event (~3 % of parsing one here), so only when asked
        self.ids = ids
        self.excerpt = excerpt  # a failure's detail: the backend's redacts before it cuts
        self.buf = b""
        self.finished = self.done = False
        self.content = 0

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
                c = choices[0]
                text = ((c.get("delta") or {}).get("content") if self.chat else c.get("text")) or ""
                self.finished = self.finished or c.get("finish_reason") is not None
                # vLLM's return_token_ids: the ids this event generated (accuracy mode asks for them)
                ids = c.get("token_ids") if self.ids else None
                if ids is not None and ids.__class__ is not list:
                    raise RequestFailed("malformed_sse", self.excerpt(f"token_ids is not a list: {payload.decode()}"))
                if text:
                    # The SUT takes chunks as typed (base.Chunk): a wrong type is this stream's failure.
                    if text.__class__ is not str:
                        raise RequestFailed("malformed_sse", self.excerpt(f"content is a {type(text).__name__}: {payload.decode()}"))
                    self.content += 1
                    n = self.count(text) if self.count else 1
                    # a keyword argument costs ~40 ns an event: passed only when there are ids
                    out.append(Chunk(text, n) if ids is None else Chunk(text, n, token_ids=ids))
                elif ids:
                    out.append(Chunk(n_tokens=0, token_ids=ids))
            usage = obj.get("usage")
            if usage:
                if usage.__class__ is not dict:
                    raise RequestFailed("malformed_sse", self.excerpt(f"usage is not an object: {payload.decode()}"))
                out.append(Chunk(n_tokens=0, usage=usage))
        self.buf = buf
        return out

    def finish(self) -> None:
        """The stream ended: it must have said so, and carried content."""
        if not (self.done or self.finished):
            raise RequestFailed("truncated_stream", f"the stream ended after {self.content} content events without [DONE]")
        if not self.content:
            raise RequestFailed("empty_output", "the stream carried no content")


def _v2_spec(t: dict[str, Any]) -> TensorSpec:
    shape = tuple(None if d is None or d < 0 else int(d) for d in t.get("shape", []))
    return TensorSpec(t["name"], shape, _V2_TO_NP.get(t.get("datatype", ""), t.get("datatype", "")))


def _v2_tensor(name: str, arr: np.ndarray) -> dict[str, Any]:
    dt = _NP_TO_V2.get(arr.dtype.name)
    if dt is None:
        raise DatasetError(f"input {name!r}: dtype {arr.dtype} has no KServe v2 datatype")
    return {"name": name, "shape": [1, *arr.shape], "datatype": dt, "data": arr.ravel().tolist()}


def _template_values(sample: Any, max_tokens: int | None) -> dict[str, Any]:
    if isinstance(sample, dict):  # tensors
        arrays = {k: v.tolist() for k, v in sample.items()}
        return {"input": next(iter(arrays.values())), "inputs": arrays, "max_tokens": max_tokens}
    return {
        "prompt": sample.text(),
        "messages": list(sample.messages) if sample.messages else [{"role": "user", "content": sample.text()}],
        "max_tokens": sample.max_tokens or max_tokens,
    }


def _fill(node: Any, values: dict[str, Any]) -> Any:
    """Replace "{{key}}" strings by the value (any JSON type); embedded ones by its text."""
    if isinstance(node, dict):
        return {k: _fill(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [_fill(v, values) for v in node]
    if isinstance(node, str) and "{{" in node:
        stripped = node.strip()
        if stripped.startswith("{{") and stripped.endswith("}}") and stripped[2:-2].strip() in values:
            return values[stripped[2:-2].strip()]
        for k, v in values.items():
            node = node.replace("{{" + k + "}}", v if isinstance(v, str) else json.dumps(v))
    return node


def _json_output(obj: Any, path: str) -> Any:
    node = obj
    for part in path.split("."):
        if isinstance(node, list) and part.lstrip("-").isdigit():
            node = node[int(part)]
        elif isinstance(node, dict):
            node = node[part]
        else:
            raise KeyError(path)
    if node is None or node == "" or node == [] or node == {}:
        raise RequestFailed("empty_output", f"{path} is empty")
    if isinstance(node, list) and all(isinstance(x, (int, float)) for x in node):
        return np.asarray(node, dtype=np.float32)
    return node if isinstance(node, str) else json.dumps(node)
