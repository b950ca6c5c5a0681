"""The http backend: the transport every protocol shares. Load (settings, credentials,
the server's metadata), prepare (a sample -> its request, by the protocol) and the
request path (send, retry, stream), which asks the protocol object
(backends.http.protocol) and never branches on a protocol's name.

The request path stays in one method on purpose: splitting it would put a call between
the socket read and the chunk on the per-token hot path. The failure kinds it raises are
listed in backends/http/__init__.py.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlencode, urlsplit, urlunsplit

from backends.base import (
    AudioSample,
    BackendDescription,
    BackendOptions,
    Chunk,
    InputKind,
    LoadContext,
    OutputKind,
    PromptSample,
    ResponseFormat,
    Sample,
    StreamingBackend,
    TensorSpec,
)
from backends.content import media_parts
from backends.http.options import BaseHttpOptions
from backends.http.protocol import Bound, HttpProtocol, Transport, TransportSettings
from backends.http.registry import get as protocol_class
from backends.http.registry import options_class, protocols
from backends.http.tokenizer import Tokenizer
from backends.http.wire import _check_calls, _Redactor
from harness.errors import (
    BackendError,
    ClientError,
    ConfigError,
    ConnectError,
    Disconnected,
    PayloadError,
    RequestFailed,
)


class HttpOptions(BaseHttpOptions):
    """The backend's options: a discriminated union of the protocols' options, keyed by
    `protocol`. `HttpOptions(**options)` returns an instance of the named protocol's own
    options class (backends.http.registry.options_class), so that an option of another
    protocol is one line naming both, e.g. "json_input is not an option of protocol
    openai-chat (it is json's)". Its own fields are those every protocol shares.

    Resolved by the registry rather than written as `Annotated[A | B, Field(discriminator=
    "protocol")]`: the harness takes a backend's `Options` as a class (called with the
    options, its `model_fields` listed, checked as a StreamingOptions subclass), and the
    union's members are only known at run time (third-party protocols are entry points)."""

    variant_key: ClassVar[str] = "protocol"

    def __new__(cls, *args: Any, **data: Any) -> Any:
        if cls is HttpOptions:  # not an instance of cls: Python calls no __init__ on it
            return options_class(data)(**data)
        return super().__new__(cls)

    @classmethod
    def variants(cls) -> Mapping[str, type[BackendOptions]]:
        return {name: p.Options for name, p in protocols().items()}


@dataclass(frozen=True)
class PreparedRequest:
    """A sample turned into its request, once, before the timed test."""

    body: bytes
    input_tokens: int  # counted locally (tokenizer) or the generator's target; 0 unknown
    headers: bytes = b""  # this request's own header lines (a session's affinity header)
    expected: Any = None  # what the answer is checked against (HttpProtocol.expected)
    #: a request with images or videos: their counts and bytes (before base64), kept with the
    #: request's size and upload time in tokens.jsonl's `metrics`; None: a text request
    media: dict[str, int] | None = None
    audio_seconds: float | None = None  # an audio sample's length (tokens.jsonl, RTFx)


class HttpBackend(StreamingBackend):
    name = "http"
    Options = HttpOptions
    options: BaseHttpOptions  # the protocol's own options class
    requires = ("httptools",)
    install_hint = "pip install httptools"
    kind = "async"

    def __init__(self, options: BaseHttpOptions) -> None:
        super().__init__(options)
        o = options
        cls = protocol_class(o.protocol)
        missing = cls.missing()
        if missing:
            hint = cls.install_hint or f"pip install {' '.join(missing)}"
            raise BackendError(f"protocol {o.protocol} needs {', '.join(missing)}, which is not installed: {hint}")
        #: the protocol the options name (their class is that protocol's Options)
        self._protocol: HttpProtocol = cls(o)
        self.max_in_flight = o.max_in_flight
        self.token_source = "tokenizer" if o.tokenizer else "chunks"
        self.sends_token_ids = self._protocol.sends_token_ids
        self.max_inputs_per_request = self._protocol.max_inputs_per_request
        self.retries_total = 0
        self.requests_retried = 0
        self.resent_on_closed_connection = 0
        self._client: Transport | None = None
        self._server: dict[str, Any] = {}
        self._inputs: list[TensorSpec] = []
        self._outputs: list[TensorSpec] = []
        self._tokenizer: Tokenizer | None = None
        self._secret: str | None = None
        self._env_headers: dict[str, str] = {}
        self._redact: _Redactor = _Redactor(())
        #: for the SUT: redacts a request's whole generated text once; None: no secret to hide
        self.redact_text = None
        self.output_ids_source = "server"
        self.tokenizer_hint = (
            "set the http backend's tokenizer to the model's .gguf file or tokenizer folder "
            "(--set tokenizer=PATH.gguf or tokenizer=FOLDER, the folder with tokenizer.json), "
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
            self._tokenizer = Tokenizer(o.tokenizer)
            # prompt datasets then count their lengths in the model's tokens, not words
            self.count_tokens = self._tokenizer.count
            if self._tokenizer.makes_ids:  # accuracy mode: answers without ids become ids
                self.tokenize_output = self._tokenizer.ids
                self.tokenizer_path = str(Path(o.tokenizer).resolve())
        parts = urlsplit(o.url)  # a query of the URL goes after the endpoint's path, not before it
        base = self._base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        self._protocol.bind(Bound(base, self._tokenizer, self._redact.excerpt, self.redact_text, ctx.log_outputs))
        self.answer_schema = self._protocol.answer_schema
        self._endpoint = self._protocol.endpoint(base)
        # query_env's values: never in the options, nor in describe() (its URL has no query)
        self._query = "&".join(q for q in (parts.query, urlencode(query)) if q)
        self._path = self._with_query(_path(self._endpoint))
        probe = self._protocol.metadata_url(base)
        if o.check_server and probe is not None:
            asyncio.run(self._query_server(probe))

    def _with_query(self, path: str) -> str:
        return path + ("&" if "?" in path else "?") + self._query if self._query else path

    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": self._protocol.content_type, **self.options.headers, **self._env_headers}
        if self._secret:
            h["Authorization"] = f"Bearer {self._secret}"
        return h

    async def _query_server(self, url: str) -> None:
        o = self.options
        client = self._client_for(url, limit=1, total_timeout=o.connect_timeout_s + o.read_timeout_s)
        try:
            r = await client.request("GET", self._with_query(_path(url)))
            try:
                text = await r.text(errors="replace")
            finally:
                r.release()
            if r.status >= 400:
                hint = self._protocol.failure_hint(r.status, probe=True)
                raise BackendError(
                    f"server at {_public(url)} answered {r.status}{' ' + hint if hint else ''}: {self._redact.excerpt(text)}"
                )
            meta = json.loads(text)
        except RequestFailed as e:  # a transport's own answer (a gRPC status)
            raise BackendError(f"server at {_public(url)} answered {e.reason}: {self._redact.excerpt(e.detail)}") from e
        except (ClientError, asyncio.TimeoutError, json.JSONDecodeError) as e:
            raise BackendError(
                f"cannot read model metadata from {_public(url)}: {type(e).__name__}: {self._redact.excerpt(str(e))} "
                "(is the server up? set check_server=false to skip this check)"
            ) from e
        finally:
            await client.close()
        info = self._protocol.read_metadata(meta)
        self._server, self._inputs, self._outputs = info.server, info.inputs, info.outputs

    # --- what the protocol takes and gives, for the SUT -----------------------------------
    @property
    def input_kind(self) -> InputKind:
        return self._protocol.input_kind

    @property
    def output_kind(self) -> OutputKind:
        return self._protocol.output_kind

    def inputs(self) -> list[TensorSpec]:
        return list(self._inputs)

    @property
    def takes_sessions(self) -> bool:
        return self._protocol.takes_sessions

    def chat_request(self, messages: list[dict[str, Any]], max_tokens: int | None, headers: dict[str, str]) -> PreparedRequest:
        """A session's turn, built at dispatch: the body as `prepare` makes it, plus its headers."""
        request = self.prepare(PromptSample(messages=tuple(messages), max_tokens=max_tokens))
        lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        return replace(request, headers=lines.encode("latin-1")) if lines else request

    # --- prepare: sample -> request body, before the timed test -----------------------
    def prepare(self, sample: Sample) -> PreparedRequest:
        p = self._protocol
        body = p.encode(sample)
        parts = media_parts(sample.messages) if isinstance(sample, PromptSample) else ()
        media = {"images": sum(x.kind == "image" for x in parts), "videos": sum(x.kind == "video" for x in parts),
                 "media_bytes": sum(x.nbytes for x in parts)} if parts else None
        seconds = sample.seconds if isinstance(sample, AudioSample) else None
        return PreparedRequest(body, p.input_tokens(sample), expected=p.expected(sample), media=media,
                               audio_seconds=seconds)

    def group(self, requests: list[PreparedRequest]) -> PreparedRequest:
        """Several samples' requests as one, joined by the protocol (max_inputs_per_request)."""
        return PreparedRequest(self._protocol.group([r.body for r in requests]), sum(r.input_tokens for r in requests))

    @property
    def input_token_method(self) -> str:
        """How a request's input tokens are counted when the server reports no usage."""
        return self._protocol.input_token_method

    # --- the connection pool lives on the SUT's event loop -------------------------------
    def _client_for(self, url: str, limit: int, total_timeout: float) -> Transport:
        o = self.options
        return self._protocol.transport(TransportSettings(
            url, limit=limit, headers=self._headers(), connect_timeout=o.connect_timeout_s,
            read_timeout=o.read_timeout_s, total_timeout=total_timeout, verify_tls=o.verify_tls,
        ))  # fmt: skip

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
                    hint = self._protocol.failure_hint(status)
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
            except RequestFailed as e:  # a transport's own reason (a gRPC status): not retried
                failure, retryable = RequestFailed(e.reason, excerpt(e.detail)), False
            if not retryable or attempt >= o.retries:
                raise failure
            attempt += 1
            self.retries_total += 1
            self.requests_retried += attempt == 1
            yield Chunk(n_tokens=0, retry=failure.reason)
        try:
            if sample.media is None:
                yield Chunk(n_tokens=0, headers=resp.status)
            else:  # what the request carried, and how long its body took to leave (client.Response):
                # from its first byte's write, and from the request call (a connection's wait included)
                sent = resp.sent_ns
                yield Chunk(n_tokens=0, headers=resp.status, metrics={
                    **sample.media, "request_bytes": len(sample.body),
                    "upload_ms": (sent - resp.write_ns) / 1e6 if sent else None,
                    "call_to_sent_ms": (sent - resp.begin_ns) / 1e6 if sent else None})
            parser = self._protocol.stream_parser()
            if parser is not None:
                # Parsed here rather than in a nested async generator: every chunk would
                # otherwise pass two generator layers (measured ~6 % of the loop's time).
                next_piece = resp.next_piece
                while (data := await next_piece()) is not None:
                    for chunk in parser.feed(data):
                        yield chunk
                for chunk in parser.finish():
                    yield chunk
                parser.verify()  # after the chunks went on: a failed request keeps them (tool calls)
            else:
                raw = await resp.read()
                for chunk in self._protocol.decode_against(raw, sample.expected):
                    yield chunk
                    if chunk.tool_calls:  # after the calls went on, as for a stream
                        _check_calls(chunk.tool_calls, excerpt)
        except asyncio.TimeoutError as e:
            raise RequestFailed("timeout", excerpt(_timeout_text(e, o))) from e
        except PayloadError as e:
            raise RequestFailed("truncated_stream", excerpt(str(e))) from e
        finally:
            resp.release()

    def response_format(self) -> ResponseFormat | None:
        """dtype/shape of one sample's output, for scoring accuracy from LoadGen's log."""
        return self._protocol.response_format(self._outputs)

    def describe(self) -> BackendDescription:
        o = self.options
        settings = self._protocol.describe()
        # the keys in the order runs have always had them; a protocol's further keys follow
        return {
            "backend": self.name,
            "engine": "http",
            "protocol": o.protocol,
            "url": _public(o.url),
            "model_name": self._protocol.model_name,
            "server": self._server,
            "stream": settings.pop("stream"),
            "prompt_from": settings.pop("prompt_from"),
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
            "reasoning_parser": settings.pop("reasoning_parser"),
            "inputs": [s.__dict__ for s in self._inputs],
            "outputs": [s.__dict__ for s in self._outputs],
            **settings,
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


def _timeout_text(e: BaseException, o: BaseHttpOptions) -> str:
    what = str(e) or type(e).__name__
    return f"{what} (connect {o.connect_timeout_s:g} s, read {o.read_timeout_s:g} s, total {o.total_timeout_s:g} s)"


