"""What the OpenAI protocols share: the two that generate (backends/http/protocols/
openai_chat.py and openai_completions.py) their options, the request body, and the answer,
streamed as server-sent events (backends.http.wire._SseParser) or whole; embeddings takes
the /models probe from here too.

Reasoning: a chat answer's `reasoning_content` (or `reasoning`) is counted and kept apart
from the answer (Chunk.reasoning); with `reasoning_parser: think_tags`, so are
`<think>...</think>` spans inside the content. Tool calls are reassembled per index.

Structured outputs: a prompt's own JSON Schema (PromptSample.response_schema), else the
`json_schema` option's, goes out in the form `schema_form` names (backends.http.structured);
the answers are checked against it by the harness (`answer_schema`: the option's, or one
that `extra_body` asks for as written, e.g. response_format json_object).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from backends.base import Chunk, OutputKind, PromptSample, Sample
from backends.http.options import BaseHttpOptions
from backends.http.protocol import Bound, HttpProtocol, ServerInfo, StreamParser, read_json_option
from backends.http.structured import SchemaForm, request_fields, schema_in
from backends.http.wire import _SseParser, _ToolCalls, openai_usage
from harness.errors import DatasetError, RequestFailed


class OpenAIOptions(BaseHttpOptions):
    stream: bool = Field(True, description="stream the answer as SSE")
    max_tokens: int | None = Field(None, ge=1, description="max_tokens when the sample has none")
    temperature: float | None = Field(None, ge=0, description="sampling temperature (None: server default)")
    ignore_eos: bool = Field(False, description="ask the server to generate max_tokens (vLLM, TGI, llama.cpp)")
    include_usage: bool = Field(True, description="streaming: ask for usage via stream_options")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="fields merged into every request body")
    server_token_ids: bool = Field(
        True, description="accuracy mode: ask the server for the generated token ids "
        "(\"return_token_ids\": true, vLLM) and log those; false: the tokenizer's ids of the text"
    )
    reasoning_parser: Literal["fields", "think_tags"] = Field(
        "fields", description="streams: where the reasoning comes from; 'fields': the delta's "
        "reasoning_content or reasoning (vLLM, DeepSeek); 'think_tags': also <think>...</think> spans "
        "inside the content, for servers that inline them (off by default: a literal <think> may be an answer)"
    )
    json_schema: str | None = Field(
        None, description="structured outputs: a JSON Schema file every request asks the answer to follow "
        "(a prompt's own `schema` outranks it); each answer is checked against it (failed: schema_invalid)"
    )
    schema_form: SchemaForm = Field(
        "openai", description="how a schema is sent: 'openai' response_format json_schema; 'llama-cpp' "
        "response_format json_object + schema (llama-cpp-python's server); 'vllm' structured_outputs.json; "
        "'vllm-guided' guided_json (older vLLM: 0.32 ignores it)"
    )


class OpenAIProtocol(HttpProtocol):
    """An OpenAI-compatible server's completions or chat completions endpoint."""

    Options: ClassVar[type[OpenAIOptions]] = OpenAIOptions
    options: OpenAIOptions
    url_form = "http://host:port/v1"
    gives: ClassVar[OutputKind] = "tokens"
    #: the endpoint's path under the base URL
    path: ClassVar[str] = ""
    #: chat's answer is a message (`delta`), completions' a `text`
    chat: ClassVar[bool] = False

    def __init__(self, options: OpenAIOptions) -> None:
        super().__init__(options)
        self.ask_ids = False
        #: the `json_schema` option's schema, read at bind
        self.schema: Any = None

    def bind(self, bound: Bound) -> None:
        super().bind(bound)
        # MLPerf logs token ids: in accuracy mode, ask the server for the ones it generated
        self.ask_ids = bound.log_outputs and self.options.server_token_ids
        if self.options.json_schema:
            self.schema = read_json_option("json_schema", Path(self.options.json_schema))

    @property
    def answer_schema(self) -> Mapping[str, Any] | None:
        return self.schema if self.schema is not None else schema_in(self.options.extra_body)

    def endpoint(self, base: str) -> str:
        return base + self.path

    def metadata_url(self, base: str) -> str | None:
        return f"{base}/models"

    def read_metadata(self, meta: Any) -> ServerInfo:
        models = [m for m in meta.get("data", []) if isinstance(m, dict)]
        ids = [m.get("id") for m in models]
        if self.model_name is None and models:
            self.model_name = models[0].get("id")
        chosen = next((m for m in models if m.get("id") == self.model_name), None)
        return ServerInfo(server={"models": ids, "model": chosen})

    def failure_hint(self, status: int, probe: bool = False) -> str:
        if not probe and self.ask_ids and status in (400, 422):  # a server that refuses vLLM's field
            return ("(accuracy mode asks for return_token_ids; with a server that refuses it, "
                    "set server_token_ids=false and tokenizer=PATH.gguf or FOLDER)")
        base = self.bound.base
        if status != 404 or base.rstrip("/").endswith("/v1"):
            return ""
        # an OpenAI server serves under /v1: a 404 from a base URL without it is most likely that
        return f"(OpenAI servers serve under /v1: try url={base}/v1)"

    def put_input(self, body: dict[str, Any], sample: PromptSample) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def encode(self, sample: Sample) -> bytes:
        if not isinstance(sample, PromptSample):
            raise DatasetError(f"protocol {self.name} takes prompts, not tensors: use a prompt dataset")
        o = self.options
        body: dict[str, Any] = {}
        if self.model_name:
            body["model"] = self.model_name
        self.put_input(body, sample)
        max_tokens = sample.max_tokens or o.max_tokens
        if max_tokens:
            body["max_tokens"] = max_tokens
        if o.temperature is not None:
            body["temperature"] = o.temperature
        if o.ignore_eos:
            body["ignore_eos"] = True
        body["stream"] = o.stream
        if o.stream and o.include_usage:
            body["stream_options"] = {"include_usage": True}
        if self.ask_ids:
            body["return_token_ids"] = True
        schema = sample.response_schema if sample.response_schema is not None else self.schema
        if schema is not None:
            body.update(request_fields(o.schema_form, schema))
        body.update(o.extra_body)  # as written, last: it may carry a server's own form
        return json.dumps(body).encode()

    def stream_parser(self) -> StreamParser | None:
        if not self.options.stream:
            return None
        tokenizer = self.bound.tokenizer
        return _SseParser(self.chat, tokenizer.count if tokenizer else None, self.bound.excerpt,
                          self.ask_ids, self.options.reasoning_parser == "think_tags")

    def decode(self, raw: bytes) -> list[Chunk]:
        excerpt = self.bound.excerpt
        redact = self.bound.redact_text
        obj = self.json_body(raw)
        try:
            c = obj["choices"][0]
            message = c["message"] if self.chat else {}
            text = (message.get("content") if self.chat else c.get("text")) or ""
            reasoning = message.get("reasoning_content") or message.get("reasoning")
            tools = message.get("tool_calls")
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            raise RequestFailed("malformed_json", excerpt(f"missing {e} in {json.dumps(obj)}")) from e
        count = self.bound.tokenizer.count if self.bound.tokenizer else None
        before: list[Chunk] = []
        if reasoning:
            if not isinstance(reasoning, str):
                raise RequestFailed("malformed_json", excerpt(f"reasoning_content is a {type(reasoning).__name__}: {json.dumps(obj)}"))
            if redact is not None:
                reasoning = redact(reasoning)
            before.append(Chunk(reasoning, count(reasoning) if count else 1, reasoning=True))
        calls: list[dict[str, Any]] = []
        if tools:
            assembled = _ToolCalls()
            n = assembled.add(tools, count, lambda what: RequestFailed("malformed_json", excerpt(f"{what}: {json.dumps(obj)}")))
            calls = assembled.assembled()
            before.append(Chunk(n_tokens=n))
        if not text and calls:  # a tool call is the whole answer
            return [*before, Chunk(n_tokens=0, tool_calls=calls)]
        if not text:
            raise RequestFailed("empty_output", "the answer has no text")
        # The SUT takes chunks as typed (base.Chunk): a wrong type is this answer's failure.
        if not isinstance(text, str):
            raise RequestFailed("malformed_json", excerpt(f"the answer's text is a {type(text).__name__}: {json.dumps(obj)}"))
        if redact is not None:  # the whole answer is one chunk: redacted here, once
            text = redact(text)
        ids = obj["choices"][0].get("token_ids")  # vLLM's return_token_ids
        if ids is not None and not isinstance(ids, list):
            raise RequestFailed("malformed_json", excerpt(f"token_ids is not a list: {json.dumps(obj)}"))
        out = [*before, Chunk(text, count(text) if count else 1, token_ids=ids)]
        if calls:
            out.append(Chunk(n_tokens=0, tool_calls=calls))
        usage = obj.get("usage")
        if usage:
            if not isinstance(usage, dict):
                raise RequestFailed("malformed_json", excerpt(f"usage is not an object: {json.dumps(obj)}"))
            out.append(Chunk(n_tokens=0, usage=openai_usage(usage)))
        return out

    def describe(self) -> dict[str, Any]:
        out = {**super().describe(), "stream": self.options.stream, "reasoning_parser": self.options.reasoning_parser}
        if self.options.json_schema:  # only then: runs without one compare as they always have
            out |= {"json_schema": self.options.json_schema, "schema_form": self.options.schema_form}
        return out
