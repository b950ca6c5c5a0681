"""The SSE parser on byte streams real servers send: CRLF line ends, multi-line data, comments
and keep-alives, events cut anywhere by the network, and each way a stream can be broken."""

from __future__ import annotations

import json

import pytest

from backends.base import Chunk
from backends.http import RequestFailed, _SseParser


def _event(obj: object, eol: bytes = b"\n") -> bytes:
    return b"data: " + json.dumps(obj).encode() + eol + eol


def _delta(text: str, finish: str | None = None) -> dict:
    return {"choices": [{"delta": {"content": text}, "finish_reason": finish}]}


STREAM = (
    b": keep-alive comment\n\n"
    + _event(_delta("Hel"))
    + b'data: {"choices": [{"delta":\ndata: {"content": "lo"}, "finish_reason": null}]}\n\n'  # one event, two data lines
    + _event(_delta(" world", "stop"))
    + _event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3}})
    + b"data: [DONE]\n\n"
)


def _parse(stream: bytes, cut: int, chat: bool = True, count=None) -> list:
    parser = _SseParser(chat, count)
    chunks = []
    for i in range(0, len(stream), cut):
        chunks += parser.feed(stream[i : i + cut])
    parser.finish()
    return chunks


@pytest.mark.parametrize("cut", [1, 2, 7, 64, 10_000])
@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
def test_every_split_and_line_ending_gives_the_same_chunks(cut, eol):
    chunks = _parse(STREAM.replace(b"\n", eol), cut)
    assert [c.text for c in chunks if c.text] == ["Hel", "lo", " world"]
    assert [c.n_tokens for c in chunks if c.text] == [1, 1, 1]
    assert [c for c in chunks if not c.text] == [Chunk(n_tokens=0, usage={"prompt_tokens": 3, "completion_tokens": 3})]


def test_completions_protocol_and_a_tokenizer_count():
    stream = b"".join(_event({"choices": [{"text": t, "finish_reason": None}]}) for t in ("a b", "c")) + b"data: [DONE]\n\n"
    chunks = _parse(stream, 5, chat=False, count=lambda text: len(text.split()))
    assert [(c.text, c.n_tokens) for c in chunks] == [("a b", 2), ("c", 1)]


@pytest.mark.parametrize(
    ("stream", "reason"),
    [
        (_event(_delta("x")), "truncated_stream"),  # no [DONE], no finish_reason
        (_event(_delta("", "stop")) + b"data: [DONE]\n\n", "empty_output"),
        (b"data: {not json\n\n", "malformed_sse"),
        (b"data: \xff\xfe\n\n", "malformed_sse"),  # not UTF-8
        (_event({"error": {"message": "overloaded"}}), "server_error"),
        # typed chunks (base.Chunk): a server's wrong types fail the stream, not the harness
        (_event(_delta(5)) + b"data: [DONE]\n\n", "malformed_sse"),
        (_event({"choices": [], "usage": [3, 3]}), "malformed_sse"),
    ],
)
def test_broken_streams_fail_with_their_reason(stream, reason):
    with pytest.raises(RequestFailed) as e:
        _parse(stream, 3)
    assert e.value.reason == reason


def test_finish_reason_ends_a_stream_without_done():
    assert [c.text for c in _parse(_event(_delta("x", "length")), 4)] == ["x"]
