"""The SSE parser on byte streams real servers send: CRLF line ends, multi-line data, comments
and keep-alives, events cut anywhere by the network, and each way a stream can be broken."""

from __future__ import annotations

import json

import pytest

from backends.base import Chunk, Usage
from backends.http.wire import _SseParser, openai_usage
from harness.errors import RequestFailed


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
    return chunks + parser.finish()


@pytest.mark.parametrize("cut", [1, 2, 7, 64, 10_000])
@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
def test_every_split_and_line_ending_gives_the_same_chunks(cut, eol):
    chunks = _parse(STREAM.replace(b"\n", eol), cut)
    assert [c.text for c in chunks if c.text] == ["Hel", "lo", " world"]
    assert [c.n_tokens for c in chunks if c.text] == [1, 1, 1]
    assert [c for c in chunks if not c.text] == [Chunk(n_tokens=0, usage=Usage(output_tokens=3, input_tokens=3))]


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
        (b'data: {"choices": []} {"x": 1}\n\n', "malformed_sse"),  # two values in one event
        (b"data: \"\n\n", "malformed_sse"),  # an unterminated string
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


# --- reasoning, inline <think> spans, tool calls -------------------------------------------


def _reason(text: str, field: str = "reasoning_content") -> dict:
    return {"choices": [{"delta": {field: text}, "finish_reason": None}]}


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_fields_are_chunks_apart_from_the_answer(field):
    stream = _event(_reason("let me", field)) + _event(_reason(" think", field)) + _event(_delta("42", "stop")) + b"data: [DONE]\n\n"
    chunks = _parse(stream, 5)
    assert [(c.text, c.reasoning) for c in chunks] == [("let me", True), (" think", True), ("42", False)]


THINK = ["<think>", " a", " b", "</think>", "The", " answer"]


@pytest.mark.parametrize("cut", [1, 3, 64])
def test_think_tags_split_the_content_wherever_the_network_cuts_it(cut):
    # the same text in events cut anywhere, the tags too: "<thi" + "nk> a"
    text = "".join(THINK)
    for pieces in (THINK, [text[:4], text[4:9], text[9:17], text[17:]], [text]):
        stream = b"".join(_event(_delta(p)) for p in pieces) + _event(_delta("", "stop")) + b"data: [DONE]\n\n"
        parser = _SseParser(True, None, think_tags=True)
        chunks = []
        for i in range(0, len(stream), cut):
            chunks += parser.feed(stream[i : i + cut])
        chunks += parser.finish()
        assert "".join(c.text for c in chunks if c.reasoning) == " a b", pieces
        assert "".join(c.text for c in chunks if not c.reasoning) == "The answer", pieces
        # the tags are reasoning tokens of their own (one each without a tokenizer)
        assert sum(1 for c in chunks if c.reasoning and not c.text) == 2


def test_think_tags_are_text_unless_asked_and_a_half_tag_at_the_end_is_text():
    stream = _event(_delta("<think>x</think>y")) + _event(_delta(" <thi", "stop")) + b"data: [DONE]\n\n"
    assert "".join(c.text for c in _parse(stream, 7)) == "<think>x</think>y <thi"
    parser = _SseParser(True, None, think_tags=True)
    chunks = parser.feed(stream) + parser.finish()
    assert [(c.text, c.reasoning) for c in chunks if c.text] == [("x", True), ("y", False), (" ", False), ("<thi", False)]


def _tool(index: int, name: str | None = None, args: str | None = None, **extra) -> dict:
    fn = {k: v for k, v in (("name", name), ("arguments", args)) if v is not None}
    return {"choices": [{"delta": {"tool_calls": [{"index": index, "function": fn, **extra}]}, "finish_reason": None}]}


def test_tool_calls_are_reassembled_per_index():
    stream = (_event(_tool(0, "get_weather", "", id="call_a")) + _event(_tool(1, "get_time", "{}", id="call_b"))
              + _event(_tool(0, None, '{"city": ')) + _event(_tool(0, None, '"Paris"}'))
              + _event({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}) + b"data: [DONE]\n\n")
    chunks = _parse(stream, 9)
    # one token a piece without a tokenizer: 4 pieces carried a name or arguments
    assert sum(c.n_tokens for c in chunks if not c.tool_calls) == 4
    calls = [c for c in chunks if c.tool_calls][0].tool_calls
    assert calls == [
        {"index": 0, "id": "call_a", "name": "get_weather", "arguments": '{"city": "Paris"}', "tokens": 3, "json": True},
        {"index": 1, "id": "call_b", "name": "get_time", "arguments": "{}", "tokens": 1, "json": True},
    ]


def test_a_tool_call_whose_arguments_are_not_json_fails_after_it_is_handed_on():
    stream = _event(_tool(0, "f", '{"a": ')) + _event({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}) + b"data: [DONE]\n\n"
    parser = _SseParser(True, None)
    parser.feed(stream)
    (last,) = parser.finish()
    assert last.tool_calls[0]["json"] is False and last.tool_calls[0]["arguments"] == '{"a": '
    with pytest.raises(RequestFailed) as e:
        parser.verify()
    assert e.value.reason == "malformed_tool_call" and "tool call 0 (f)" in e.value.detail


@pytest.mark.parametrize(
    "event",
    [
        {"choices": "abc"},  # a string: each level's type is checked, not Python's AttributeError
        {"choices": ["abc"]},
        {"choices": [{"delta": "abc"}]},
        {"choices": [{"delta": ["x"]}]},
        {"choices": [{"delta": {"reasoning_content": 5}}]},
        {"choices": [{"delta": {"reasoning": ["x"]}}]},
        {"choices": [{"delta": {"tool_calls": {"index": 0}}}]},
        {"choices": [{"delta": {"tool_calls": ["x"]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": "0", "function": {"name": "f"}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": "f"}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": 1}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": {"a": 1}}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "id": 7, "function": {}}]}}]},
        [1, 2],
    ],
)
def test_a_field_of_the_wrong_type_is_malformed_sse(event):
    with pytest.raises(RequestFailed) as e:
        _parse(_event(event) + _event(_delta("x", "stop")) + b"data: [DONE]\n\n", 4)
    assert e.value.reason == "malformed_sse"


@pytest.mark.parametrize(("usage", "expected"), [
    ({"prompt_tokens": 3, "completion_tokens": 7}, Usage(output_tokens=7, input_tokens=3)),
    # the details objects, as vLLM and OpenAI send them
    ({"prompt_tokens": 30, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 16, "image_tokens": 9},
      "completion_tokens_details": {"reasoning_tokens": 5}},
     Usage(output_tokens=7, input_tokens=30, cached_tokens=16, reasoning_tokens=5, image_tokens=9)),
    # a whole float is a count; no number, a non-finite one, a bool or a string is none
    ({"prompt_tokens": 3.0, "completion_tokens": float("nan")}, Usage(input_tokens=3)),
    ({"prompt_tokens": True, "completion_tokens": "7"}, Usage()),
    ({"completion_tokens": float("inf"), "prompt_tokens": None}, Usage()),
    # details of the wrong type, or null, say nothing
    ({"completion_tokens": 2, "prompt_tokens_details": None, "completion_tokens_details": [5]}, Usage(output_tokens=2)),
])  # fmt: skip
def test_openai_usage_reads_each_count_or_none(usage, expected):
    assert openai_usage(usage) == expected
