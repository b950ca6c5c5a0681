"""The http backend's class and options: load (settings, credentials, the server's
metadata), prepare (sample -> request body) and the request path (send, retry, stream).

Over 400 lines on purpose: the options and the request path of four protocols belong to
one class, and splitting the request path would put a call between the socket read and
the chunk on the per-token hot path. The failure kinds it raises are listed in
backends/http/__init__.py.
"""


from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlencode, urlsplit, urlunsplit

import numpy as np
from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from backends.base import (
    BackendDescription,
    Chunk,
    LoadContext,
    ResponseFormat,
    StreamingBackend,
    StreamingOptions,
    TensorSpec,
)
from backends.http.client import HttpClient
from backends.http.credentials import EnvNames, Headers, Url
from backends.http.wire import (
    _V2_TO_NP,
    _check_calls,
    _fill,
    _json_output,
    _Redactor,
    _SseParser,
    _template_values,
    _ToolCalls,
    _v2_spec,
    _v2_tensor,
)
from harness.errors import (
    BackendError,
    ClientError,
    ConfigError,
    ConnectError,
    DatasetError,
    Disconnected,
    PayloadError,
    RequestFailed,
)

Protocol = Literal["kserve-v2", "json", "openai-completions", "openai-chat"]
PROTOCOLS: tuple[str, ...] = Protocol.__args__

class HttpOptions(StreamingOptions):
    protocol: Protocol = Field(description=f"wire protocol of the server: {', '.join(PROTOCOLS)}")
    url: Url = Field(description="base URL: http://host:port for kserve-v2, .../v1 for OpenAI, the endpoint for json")
    model_name: str | None = Field(None, description="model name sent to (or served by) the server")
    stream: bool = Field(True, description="OpenAI protocols: stream the answer as SSE")
    max_tokens: int | None = Field(None, ge=1, description="OpenAI: max_tokens when the sample has none")
    temperature: float | None = Field(None, ge=0, description="OpenAI: sampling temperature (None: server default)")
    ignore_eos: bool = Field(False, description="OpenAI: ask the server to generate max_tokens (vLLM, TGI, llama.cpp)")
    include_usage: bool = Field(True, description="OpenAI streaming: ask for usage via stream_options")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="fields merged into every request body")
    request_template: str | None = Field(None, description="json: a JSON file; \"{{prompt}}\"-style strings are filled in")
    response_path: str | None = Field(None, description="json: dotted path of the answer, e.g. outputs.0.data")
    json_input: Literal["prompt", "tensor"] = Field("prompt", description="json: fill the template from prompts or tensors")
    prompt_from: Literal["text", "ids"] = Field(
        "text", description="openai-completions: send each prompt's text, or its dataset's token ids "
        "(MLPerf's tok_input, as `prompt`: a list of ints, which vLLM and llama.cpp's server take)"
    )
    output_name: str | None = Field(None, description="kserve-v2: the output to return (default: the first)")
    max_in_flight: int | None = Field(None, ge=1, description="most requests open at once (None: as LoadGen issues)")
    connections: int = Field(0, ge=0, description="connection pool size (0: one per open request)")
    connect_timeout_s: float = Field(10.0, gt=0)
    read_timeout_s: float = Field(60.0, gt=0, description="longest silence between two reads")
    total_timeout_s: float = Field(600.0, gt=0, description="longest whole request")
    retries: int = Field(0, ge=0, description="retries of a request that failed before any content (0: off)")
    retry_statuses: list[int] = Field(default_factory=lambda: [429, 502, 503, 504])
    api_key_env: str | None = Field(None, description="name of the environment variable holding the API key")
    verify_tls: bool = Field(True, description="verify the server's TLS certificate")
    headers: Headers = Field(default_factory=dict, description="extra request headers (no credentials: see headers_env)")
    headers_env: EnvNames = Field(
        default_factory=dict, description="headers whose values come from environment variables: {Header-Name: ENV_VAR}"
    )
    query_env: EnvNames = Field(
        default_factory=dict, description="URL query parameters whose values come from environment variables: {name: ENV_VAR}"
    )
    tokenizer: str | None = Field(
        None, description="local token counting: 'whitespace' or a .gguf file (needs llama-cpp-python); "
        "a .gguf also turns answers into token ids in accuracy mode when the server sends none"
    )
    server_token_ids: bool = Field(
        True, description="OpenAI, accuracy mode: ask the server for the generated token ids "
        "(\"return_token_ids\": true, vLLM) and log those; false: the tokenizer's ids of the text"
    )
    warmup_requests: int = Field(1, ge=0, description="requests sent at once before the timed test (opens as many pooled connections)")
    check_server: bool = Field(True, description="query the server's model metadata at load")
    reasoning_parser: Literal["fields", "think_tags"] = Field(
        "fields", description="OpenAI streams: where the reasoning comes from; 'fields': the delta's "
        "reasoning_content or reasoning (vLLM, DeepSeek); 'think_tags': also <think>...</think> spans "
        "inside the content, for servers that inline them (off by default: a literal <think> may be an answer)"
    )

    @model_validator(mode="before")
    @classmethod
    def _protocol_given(cls, data: Any) -> Any:
        # pydantic's bare "Field required" would not say what to write
        if isinstance(data, dict) and "protocol" not in data:
            error = PydanticCustomError("missing", "Field required: set protocol to one of {names}", {"names": ", ".join(PROTOCOLS)})
            raise ValidationError.from_exception_data(cls.__name__, [InitErrorDetails(type=error, loc=("protocol",), input=data)])
        return data

    @model_validator(mode="after")
    def _protocol_needs(self) -> HttpOptions:
        taken = {k.lower() for k in self.headers} & {k.lower() for k in self.headers_env}
        if self.api_key_env and "authorization" in {k.lower() for k in self.headers_env}:
            taken.add("authorization (api_key_env sends it)")
        if taken:
            raise ValueError(f"headers_env: {', '.join(sorted(taken))} given twice")
        if self.protocol == "json" and not (self.request_template and self.response_path):
            raise ValueError("protocol json needs request_template (a JSON file) and response_path")
        if self.protocol == "kserve-v2" and not self.model_name:
            raise ValueError("protocol kserve-v2 needs model_name")
        if self.prompt_from == "ids" and self.protocol != "openai-completions":
            raise ValueError(f"prompt_from=ids needs protocol openai-completions (its `prompt` takes a list of token ids; "
                             f"{self.protocol} takes none): set protocol=openai-completions or prompt_from=text")
        return self


@dataclass(frozen=True)
class PreparedRequest:
    """A sample turned into its request, once, before the timed test."""

    body: bytes
    input_tokens: int  # counted locally (tokenizer) or the generator's target; 0 unknown
    headers: bytes = b""  # this request's own header lines (a session's affinity header)


@dataclass(frozen=True)
class _ChatTurn:
    """A session's turn as `prepare` takes it: the messages built at dispatch."""

    messages: tuple[dict[str, Any], ...]
    max_tokens: int | None
    prompt: None = None
    input_ids: None = None
    target_input_tokens: int = 0

    def text(self) -> str:
        return "\n".join(str(m.get("content") or "") for m in self.messages)


def _chat_messages(sample: Any) -> list[dict[str, str]]:
    return list(sample.messages) if sample.messages else [{"role": "user", "content": sample.prompt}]


class _Tokenizer:
    """Counts tokens locally: a chunk's when the server sends no usage, and a prompt's.

    A chat request's prompt is what the server tokenizes after applying the model's chat
    template (SmolLM2's adds a system prompt: 128 words of content were 158 tokens), so a
    .gguf tokenizer counts messages through the template it carries."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self._chat: Any = None
        self._ids: Any = None  # text -> ids: a .gguf only (whitespace has no ids)
        if spec == "whitespace":
            self._count = lambda text: len(text.split())
            return
        path = Path(spec)
        if path.suffix != ".gguf" or not path.is_file():
            raise ConfigError(f"tokenizer {spec!r}: give 'whitespace' or an existing .gguf file")
        try:
            from llama_cpp import Llama
        except ImportError as e:
            raise BackendError("tokenizer from a .gguf file needs llama-cpp-python: pip install llama-cpp-python") from e
        vocab = Llama(model_path=str(path), vocab_only=True, verbose=False)
        self._ids = lambda text: vocab.tokenize(text.encode(), add_bos=False, special=False)
        self._count = lambda text: len(self._ids(text)) if text else 0
        template = (vocab.metadata or {}).get("tokenizer.chat_template")
        if template:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            def special(token: int) -> str:
                return vocab.detokenize([token], special=True).decode(errors="replace")

            formatter = Jinja2ChatFormatter(template=template, eos_token=special(vocab.token_eos()),
                                            bos_token=special(vocab.token_bos()), add_generation_prompt=True)
            # the template writes the special tokens out as text; the server parses them back
            self._chat = lambda messages: len(vocab.tokenize(formatter(messages=messages).prompt.encode(),
                                                             add_bos=False, special=True))

    @property
    def chat_method(self) -> str:
        return "tokenizer, chat template" if self._chat is not None else "tokenizer, message contents only"

    def count(self, text: str) -> int:
        return self._count(text)

    @property
    def makes_ids(self) -> bool:
        """A .gguf turns text into token ids; 'whitespace' only counts words."""
        return self._ids is not None

    def ids(self, text: str) -> list[int]:
        """The token ids of an answer's text, as the server's tokenizer would make them."""
        return list(self._ids(text)) if text else []

    def count_chat(self, messages: list[dict[str, str]]) -> int:
        if self._chat is not None:
            return self._chat(messages)
        return sum(self._count(m.get("content", "")) for m in messages)


class HttpBackend(StreamingBackend):
    name = "http"
    Options = HttpOptions
    options: HttpOptions
    requires = ("httptools",)
    install_hint = "pip install httptools"
    kind = "async"

    def __init__(self, options: HttpOptions) -> None:
        super().__init__(options)
        o = options
        self.max_in_flight = o.max_in_flight
        self.token_source = "tokenizer" if o.tokenizer else "chunks"
        self.sends_token_ids = o.prompt_from == "ids"
        self.retries_total = 0
        self.requests_retried = 0
        self.resent_on_closed_connection = 0
        self._client: HttpClient | None = None
        self._server: dict[str, Any] = {}
        self._inputs: list[TensorSpec] = []
        self._outputs: list[TensorSpec] = []
        self._tokenizer: _Tokenizer | None = None
        self._secret: str | None = None
        self._env_headers: dict[str, str] = {}
        self._redact: _Redactor = _Redactor(())
        #: for the SUT: redacts a request's whole generated text once; None: no secret to hide
        self.redact_text = None
        self._template: Any = None
        self._ask_ids = False
        self.output_ids_source = "server"
        self.tokenizer_hint = (
            "set the http backend's tokenizer to the model's .gguf file (--set tokenizer=PATH.gguf), "
            "or serve with a server that returns token ids (vLLM: return_token_ids)"
        )

    # --- load: settings, credentials and what the server says about itself ---------------
    def load(self, ctx: LoadContext) -> None:
        o = self.options
        if o.api_key_env:
            self._secret = os.environ.get(o.api_key_env)
            if not self._secret:
                raise ConfigError(f"api_key_env: environment variable {o.api_key_env} is not set or empty")
        self._env_headers = {k: _from_env(f"headers_env.{k}", var) for k, var in o.headers_env.items()}
        query = {k: _from_env(f"query_env.{k}", var) for k, var in o.query_env.items()}
        secrets = [self._secret or "", *self._env_headers.values(), *query.values()]
        # Each value, and its words (a cookie's "sid=...; x=...", a "Bearer ..." header) too.
        secrets += [w for v in secrets for w in v.replace(";", " ").replace("=", " ").replace(",", " ").split() if len(w) >= 8]
        self._redact = _Redactor(secrets)
        self.redact_text = self._redact if self._redact.forms else None
        if o.tokenizer:
            self._tokenizer = _Tokenizer(o.tokenizer)
            # prompt datasets then count their lengths in the model's tokens, not words
            self.count_tokens = self._tokenizer.count
            if self._tokenizer.makes_ids:  # accuracy mode: answers without ids become ids
                self.tokenize_output = self._tokenizer.ids
                self.tokenizer_path = str(Path(o.tokenizer).resolve())
        # MLPerf logs token ids: in accuracy mode, ask the server for the ones it generated
        self._ask_ids = ctx.log_outputs and o.server_token_ids and o.protocol.startswith("openai")
        if o.protocol == "json":
            path = Path(o.request_template or "")
            try:
                self._template = json.loads(path.read_text())
            except OSError as e:
                raise ConfigError(f"request_template: cannot read {path}: {e.strerror}") from e
            except json.JSONDecodeError as e:
                raise ConfigError(f"request_template {path}: not valid JSON ({e.msg} at line {e.lineno})") from e
        parts = urlsplit(o.url)  # a query of the URL goes after the endpoint's path, not before it
        base = self._base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        self._endpoint = {
            "kserve-v2": f"{base}/v2/models/{o.model_name}/infer",
            "openai-completions": f"{base}/completions",
            "openai-chat": f"{base}/chat/completions",
            "json": base,
        }[o.protocol]
        # query_env's values: never in the options, nor in describe() (its URL has no query)
        self._query = "&".join(q for q in (parts.query, urlencode(query)) if q)
        self._path = self._with_query(_path(self._endpoint))
        self._model_name = o.model_name
        if o.check_server and o.protocol != "json":
            asyncio.run(self._query_server())

    def _v1_hint(self, status: int) -> str:
        """An OpenAI server serves under /v1; a 404 from a base URL without it is most likely that."""
        if status != 404 or not self.options.protocol.startswith("openai") or self._base.rstrip("/").endswith("/v1"):
            return ""
        return f" (OpenAI servers serve under /v1: try url={_public(self._base)}/v1)"

    def _with_query(self, path: str) -> str:
        return path + ("&" if "?" in path else "?") + self._query if self._query else path

    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", **self.options.headers, **self._env_headers}
        if self._secret:
            h["Authorization"] = f"Bearer {self._secret}"
        return h

    async def _query_server(self) -> None:
        o = self.options
        url = f"{self._base}/v2/models/{o.model_name}" if o.protocol == "kserve-v2" else f"{self._base}/models"
        client = self._client_for(url, limit=1, total_timeout=o.connect_timeout_s + o.read_timeout_s)
        try:
            r = await client.request("GET", self._with_query(_path(url)))
            try:
                text = await r.text(errors="replace")
            finally:
                r.release()
            if r.status >= 400:
                raise BackendError(
                    f"server at {_public(url)} answered {r.status}{self._v1_hint(r.status)}: {self._redact.excerpt(text)}"
                )
            meta = json.loads(text)
        except (ClientError, asyncio.TimeoutError, json.JSONDecodeError) as e:
            raise BackendError(
                f"cannot read model metadata from {_public(url)}: {type(e).__name__}: {self._redact.excerpt(str(e))} "
                "(is the server up? set check_server=false to skip this check)"
            ) from e
        finally:
            await client.close()
        if o.protocol == "kserve-v2":
            self._server = {k: meta.get(k) for k in ("name", "versions", "platform")}
            self._inputs = [_v2_spec(t) for t in meta.get("inputs", [])]
            self._outputs = [_v2_spec(t) for t in meta.get("outputs", [])]
        else:
            models = [m for m in meta.get("data", []) if isinstance(m, dict)]
            ids = [m.get("id") for m in models]
            if o.model_name is None and models:
                self._model_name = models[0].get("id")
            chosen = next((m for m in models if m.get("id") == self._model_name), None)
            self._server = {"models": ids, "model": chosen}

    @property
    def takes_prompts(self) -> bool:
        o = self.options
        return o.protocol.startswith("openai") or (o.protocol == "json" and o.json_input == "prompt")

    @property
    def produces_tokens(self) -> bool:
        return self.options.protocol.startswith("openai")

    def inputs(self) -> list[TensorSpec]:
        return list(self._inputs)

    @property
    def takes_sessions(self) -> bool:
        return self.options.protocol == "openai-chat"

    def chat_request(self, messages: list[dict[str, Any]], max_tokens: int | None, headers: dict[str, str]) -> PreparedRequest:
        """A session's turn, built at dispatch: the body as `prepare` makes it, plus its headers."""
        request = self.prepare(_ChatTurn(tuple(messages), max_tokens))
        lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        return replace(request, headers=lines.encode("latin-1")) if lines else request

    # --- prepare: sample -> request body, before the timed test -----------------------
    def prepare(self, sample: Any) -> PreparedRequest:
        o = self.options
        if o.protocol == "kserve-v2":
            return PreparedRequest(json.dumps({"inputs": [_v2_tensor(k, v) for k, v in sample.items()]}).encode(), 0)
        if o.protocol == "json":
            fill = _template_values(sample, o.max_tokens)
            return PreparedRequest(json.dumps(_fill(self._template, fill)).encode(), self._input_count(sample))
        body: dict[str, Any] = {}
        if self._model_name:
            body["model"] = self._model_name
        if o.protocol == "openai-chat":
            body["messages"] = _chat_messages(sample)
        elif self.sends_token_ids:
            if sample.input_ids is None:  # build_source's check names the row; this is the last guard
                raise DatasetError("prompt_from=ids: a sample has no token ids; use a dataset that carries them "
                                   "(mlperf:SET:PATH) or set prompt_from=text")
            body["prompt"] = list(sample.input_ids)
        else:
            if sample.prompt is None:
                raise DatasetError("protocol openai-completions needs `prompt` samples; this dataset has chat `messages` (use openai-chat)")
            body["prompt"] = sample.prompt
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
        if self._ask_ids:
            body["return_token_ids"] = True
        body.update(o.extra_body)
        return PreparedRequest(json.dumps(body).encode(), self._input_count(sample))

    def _input_count(self, sample: Any) -> int:
        if not hasattr(sample, "text"):
            return 0
        if self.sends_token_ids:  # exact: the ids are the prompt
            return len(sample.input_ids)
        if self._tokenizer is not None:
            if self.options.protocol == "openai-chat":
                return self._tokenizer.count_chat(_chat_messages(sample))
            return self._tokenizer.count(sample.text())
        return sample.target_input_tokens

    @property
    def input_token_method(self) -> str:
        """How a request's input tokens are counted when the server reports no usage."""
        if self.sends_token_ids:
            return "the dataset's token ids"
        if self._tokenizer is None:
            return "the dataset's length (words, or the generator's target)"
        return self._tokenizer.chat_method if self.options.protocol == "openai-chat" else "tokenizer"

    # --- the connection pool lives on the SUT's event loop -------------------------------
    def _client_for(self, url: str, limit: int, total_timeout: float) -> HttpClient:
        o = self.options
        return HttpClient(
            url, limit=limit, headers=self._headers(), connect_timeout=o.connect_timeout_s,
            read_timeout=o.read_timeout_s, total_timeout=total_timeout, verify_tls=o.verify_tls,
        )  # fmt: skip

    async def open(self) -> None:
        """Create the connection pool on the running loop (it belongs to that loop)."""
        o = self.options
        self._client = self._client_for(self._endpoint, o.connections or o.max_in_flight or 0, o.total_timeout_s)

    async def aclose(self) -> None:
        if self._client is not None:
            self.resent_on_closed_connection += self._client.resent
            await self._client.close()
            self._client = None

    async def stream(self, sample: PreparedRequest) -> AsyncIterator[Chunk]:
        if self._client is None:
            await self.open()
        o = self.options
        excerpt = self._redact.excerpt  # every failure's detail: redacted, then cut
        attempt = 0
        while True:
            try:
                resp = await self._client.request("POST", self._path, sample.body, sample.headers)
                status = resp.status
                if status < 300:
                    encoding = resp.headers.get("content-encoding")
                    if encoding is None or encoding.lower() == "identity":
                        break
                    resp.release()  # unread: the connection closes
                    detail = f"{encoding} (the client sends no Accept-Encoding and decodes no compressed body)"
                    failure, retryable = RequestFailed("unsupported_encoding", excerpt(detail)), False
                elif status < 400:
                    resp.release()
                    location = resp.headers.get("location", "(none)")
                    detail = f"{status} to Location {location} (the client follows no redirects: point url there)"
                    failure, retryable = RequestFailed("http_3xx", excerpt(detail)), False
                else:
                    try:
                        text = await resp.text(errors="replace")
                    finally:
                        resp.release()
                    if resp.headers.get("content-encoding", "identity").lower() != "identity":
                        text = f"({resp.headers['content-encoding']}-encoded body not shown)"
                    hint = self._v1_hint(status).strip()
                    if self._ask_ids and status in (400, 422):  # a server that refuses vLLM's field
                        hint = ("(accuracy mode asks for return_token_ids; with a server that refuses it, "
                                "set server_token_ids=false and tokenizer=PATH.gguf)")
                    failure = RequestFailed(f"http_{status}", excerpt(f"{hint} {text}" if hint else text))
                    retryable = status in o.retry_statuses
            except ConnectError as e:
                failure, retryable = RequestFailed("connect", excerpt(str(e))), True
            except Disconnected as e:
                failure, retryable = RequestFailed("disconnected", excerpt(str(e))), True
            except asyncio.TimeoutError as e:
                failure, retryable = RequestFailed("timeout", excerpt(_timeout_text(e, o))), False
            except PayloadError as e:
                failure, retryable = RequestFailed("truncated_stream", excerpt(str(e))), False
            if not retryable or attempt >= o.retries:
                raise failure
            attempt += 1
            self.retries_total += 1
            self.requests_retried += attempt == 1
            yield Chunk(n_tokens=0, retry=failure.reason)
        try:
            yield Chunk(n_tokens=0, headers=resp.status)
            if o.protocol.startswith("openai") and o.stream:
                # Parsed here rather than in a nested async generator: every chunk would
                # otherwise pass two generator layers (measured ~6 % of the loop's time).
                parser = _SseParser(o.protocol == "openai-chat", self._tokenizer.count if self._tokenizer else None, excerpt,
                                    self._ask_ids, o.reasoning_parser == "think_tags")
                async for data in resp.iter_any():
                    for chunk in parser.feed(data):
                        yield chunk
                for chunk in parser.finish():
                    yield chunk
                parser.check_tool_calls()  # after the calls went on: a failed request keeps them
            else:
                raw = await resp.read()
                for chunk in self._whole(raw):
                    yield chunk
                    if chunk.tool_calls:  # after the calls went on, as for a stream
                        _check_calls(chunk.tool_calls, excerpt)
        except asyncio.TimeoutError as e:
            raise RequestFailed("timeout", excerpt(_timeout_text(e, o))) from e
        except PayloadError as e:
            raise RequestFailed("truncated_stream", excerpt(str(e))) from e
        finally:
            resp.release()

    def _whole(self, raw: bytes) -> list[Chunk]:
        o = self.options
        excerpt = self._redact.excerpt
        try:
            obj = json.loads(raw)
        except ValueError as e:
            raise RequestFailed("malformed_json", excerpt(raw.decode(errors="replace"))) from e
        try:
            if o.protocol == "kserve-v2":
                return [Chunk(n_tokens=0, output=self._v2_output(obj))]
            if o.protocol == "json":
                output = _json_output(obj, o.response_path or "")
                if isinstance(output, str) and self.redact_text is not None:
                    output = self.redact_text(output)
                return [Chunk(n_tokens=0, output=output)]
            c = obj["choices"][0]
            message = c["message"] if o.protocol == "openai-chat" else {}
            text = (message.get("content") if o.protocol == "openai-chat" else c.get("text")) or ""
            reasoning = message.get("reasoning_content") or message.get("reasoning")
            tools = message.get("tool_calls")
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            raise RequestFailed("malformed_json", excerpt(f"missing {e} in {json.dumps(obj)}")) from e
        count = self._tokenizer.count if self._tokenizer else None
        before: list[Chunk] = []
        if reasoning:
            if not isinstance(reasoning, str):
                raise RequestFailed("malformed_json", excerpt(f"reasoning_content is a {type(reasoning).__name__}: {json.dumps(obj)}"))
            if self.redact_text is not None:
                reasoning = self.redact_text(reasoning)
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
        if self.redact_text is not None:  # the whole answer is one chunk: redacted here, once
            text = self.redact_text(text)
        ids = obj["choices"][0].get("token_ids")  # vLLM's return_token_ids
        if ids is not None and not isinstance(ids, list):
            raise RequestFailed("malformed_json", excerpt(f"token_ids is not a list: {json.dumps(obj)}"))
        out = [*before, Chunk(text, self._tokenizer.count(text) if self._tokenizer else 1, token_ids=ids)]
        if calls:
            out.append(Chunk(n_tokens=0, tool_calls=calls))
        usage = obj.get("usage")
        if usage:
            if not isinstance(usage, dict):
                raise RequestFailed("malformed_json", excerpt(f"usage is not an object: {json.dumps(obj)}"))
            out.append(Chunk(n_tokens=0, usage=usage))
        return out

    def _v2_output(self, obj: dict[str, Any]) -> np.ndarray:
        outputs = obj["outputs"]
        name = self.options.output_name
        out = next(t for t in outputs if t["name"] == name) if name else outputs[0]
        dtype = _V2_TO_NP.get(out["datatype"])
        if dtype is None:
            raise RequestFailed("malformed_json", self._redact.excerpt(f"unsupported datatype {out['datatype']}"))
        arr = np.asarray(out["data"], dtype=dtype)
        if arr.size == 0:
            raise RequestFailed("empty_output", f"output {out['name']!r} has no data")
        return arr.reshape(out["shape"])[0]  # one sample per request: drop the batch dim

    def response_format(self) -> ResponseFormat | None:
        """dtype/shape of one sample's output, for scoring accuracy from LoadGen's log."""
        if self.options.protocol != "kserve-v2" or not self._outputs:
            return None
        spec = next((s for s in self._outputs if s.name == self.options.output_name), self._outputs[0])
        return {"dtype": spec.dtype, "shape": list(spec.sample_shape())}

    def describe(self) -> BackendDescription:
        o = self.options
        return {
            "backend": self.name,
            "engine": "http",
            "protocol": o.protocol,
            "url": _public(o.url),
            "model_name": self._model_name,
            "server": self._server,
            "stream": o.stream if o.protocol.startswith("openai") else False,
            "prompt_from": o.prompt_from,
            "verify_tls": o.verify_tls,
            "api_key_env": o.api_key_env,
            "api_key_set": self._secret is not None,
            "header_names": sorted([*o.headers, *o.headers_env]),
            "headers_env": dict(o.headers_env),
            "query_env": dict(o.query_env),
            "max_in_flight": o.max_in_flight,
            "connections": o.connections or o.max_in_flight or "unlimited",
            "timeouts_s": {"connect": o.connect_timeout_s, "read": o.read_timeout_s, "total": o.total_timeout_s},
            "retries": o.retries,
            "retries_total": self.retries_total,
            "requests_retried": self.requests_retried,
            "resent_on_closed_connection": self.resent_on_closed_connection,
            "token_count_client": self.token_source,
            "input_token_count_client": self.input_token_method,
            "tokenizer": o.tokenizer,
            "reasoning_parser": o.reasoning_parser,
            "inputs": [s.__dict__ for s in self._inputs],
            "outputs": [s.__dict__ for s in self._outputs],
        }


# --- helpers --------------------------------------------------------------------------


def _public(url: str) -> str:
    """The URL without query or fragment, which may hold tokens."""
    p = urlsplit(url)
    return urlunsplit((p.scheme, p.netloc, p.path, "", ""))


def _path(url: str) -> str:
    """The request target of a URL: its path and query."""
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _from_env(option: str, var: str) -> str:
    value = os.environ.get(var)
    if not value:
        raise ConfigError(f"{option}: environment variable {var} is not set or empty")
    return value


def _timeout_text(e: BaseException, o: HttpOptions) -> str:
    what = str(e) or type(e).__name__
    return f"{what} (connect {o.connect_timeout_s:g} s, read {o.read_timeout_s:g} s, total {o.total_timeout_s:g} s)"


