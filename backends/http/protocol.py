"""What an HTTP wire protocol is: the one class each module of backends/http/protocols
defines (its `PROTOCOL`), which the http backend's transport asks instead of branching
on a protocol's name.

A protocol holds, for one kind of server:
    Options          its own options (a subclass of BaseHttpOptions whose `protocol` is its name)
    takes, gives     what it takes and gives, as data (backends.base.InputKind, OutputKind)
    content_type     the type of the request bodies `encode` makes
    endpoint         the path requests go to, and `metadata_url`, the probe read at load
    encode           a sample -> the request's body, before the timed test
    group            several samples' bodies -> one request's (a protocol that batches inputs)
    stream_parser    the answer's body, read by read, -> Chunks (None: read whole, `decode`)
    decode           a whole answer's body -> Chunks (`decode_against`: checked against
                     what `expected` found in its sample, e.g. a count of documents)
    transport        what carries its requests: the HTTP/1.1 client, unless it speaks another
                     wire (gRPC) and brings its own (a `Transport`)

The transport (backends.http.backend) owns sending, retries, timeouts and redaction;
the event-loop SUT owns timing. One instance is made per backend, from its options, and
`bind` gives it what the backend set up at load (tokenizer, redaction, the run's mode).
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from backends.base import (
    Chunk,
    InputKind,
    OutputKind,
    PromptSample,
    ResponseFormat,
    Sample,
    TensorSpec,
)
from backends.http.wire import _squash
from harness.errors import ConfigError, RequestFailed

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping

    from backends.http.options import BaseHttpOptions
    from backends.http.tokenizer import Tokenizer


def read_json_option(option: str, path: Path) -> Any:
    """A JSON file an option names (a request template, a schema), read at load: what is
    wrong with it is one line naming the option and the file."""
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise ConfigError(f"{option}: cannot read {path}: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise ConfigError(f"{option} {path}: not valid JSON ({e.msg} at line {e.lineno})") from e


class StreamParser(Protocol):
    """A streamed answer's body -> Chunks, fed each network read. The transport calls
    `feed` per read and `finish` at the end, hands on their chunks, then `verify` (a
    failure found there still leaves what was handed on recorded)."""

    def feed(self, data: bytes) -> list[Chunk]: ...

    def finish(self) -> list[Chunk]: ...

    def verify(self) -> None: ...


class Answer(Protocol):
    """One answer as a transport gives it: its status and headers, then its body
    (backends.http.client.Response is one)."""

    status: int
    headers: Mapping[str, str]

    def iter_any(self) -> AsyncIterator[bytes]: ...

    async def read(self) -> bytes: ...

    async def text(self, errors: str = "strict") -> str: ...

    def release(self) -> None: ...


class Transport(Protocol):
    """What carries a protocol's requests, made on the SUT's event loop and used only
    there: by default the keep-alive HTTP/1.1 client (backends.http.client.HttpClient). A
    protocol on another wire brings its own (HttpProtocol.transport); the backend's retry
    loop, timeouts and failure reasons work over either. A request that fails raises what
    the HTTP client raises (ConnectError, Disconnected, asyncio.TimeoutError, PayloadError:
    connect, disconnected, timeout, truncated_stream), or RequestFailed with the wire's own
    reason, which is not retried."""

    #: requests sent again on a fresh connection after a stale one closed (describe())
    resent: int

    async def request(self, method: str, path: str, body: bytes = b"", headers: bytes = b"") -> Answer: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class TransportSettings:
    """The options a transport is made from, as the backend resolved them."""

    url: str
    limit: int  # most connections (0: no limit)
    headers: dict[str, str]
    connect_timeout: float
    read_timeout: float
    total_timeout: float
    verify_tls: bool


@dataclass(frozen=True)
class Bound:
    """What the backend set up at load and gives its protocol."""

    #: the server's base URL, without query (the `url` option, its trailing / cut)
    base: str
    #: the local tokenizer (the `tokenizer` option); None: none
    tokenizer: Tokenizer | None = None
    #: a failure's detail: secrets redacted, then cut to an excerpt
    excerpt: Callable[[str], str] = _squash
    #: masks secrets in a whole answer's text; None: no secret to hide
    redact_text: Callable[[str], str] | None = None
    #: the run logs each answer to LoadGen (accuracy mode)
    log_outputs: bool = False


@dataclass(frozen=True)
class ServerInfo:
    """What a server's metadata said: describe()'s `server`, and the model's signature."""

    server: dict[str, Any] = field(default_factory=dict)
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[TensorSpec] = field(default_factory=list)


class HttpProtocol:
    """Base of every HTTP protocol; a subclass overrides what its server differs in."""

    #: the value of the `protocol` option
    name: ClassVar[str] = ""
    Options: ClassVar[type[BaseHttpOptions]]
    #: names other tools give servers that speak it (`--backend vllm` is told to use this)
    aliases: ClassVar[tuple[str, ...]] = ()
    #: the form of its `url` option, shown in hints and `harness backends`
    url_form: ClassVar[str] = "http://host:port"
    #: the input kinds it can take (the first is its default) and what it gives back
    takes: ClassVar[tuple[InputKind, ...]] = ("prompt",)
    gives: ClassVar[OutputKind] = "text"
    #: the type of every body `encode` makes
    content_type: ClassVar[str] = "application/json"
    #: modules it needs beyond the backend's own, and the command that installs them
    requires: ClassVar[tuple[str, ...]] = ()
    install_hint: ClassVar[str] = ""

    @classmethod
    def missing(cls) -> tuple[str, ...]:
        """Its `requires` that are not installed here."""
        return tuple(m for m in cls.requires if importlib.util.find_spec(m) is None)

    def __init__(self, options: BaseHttpOptions) -> None:
        self.options = options
        #: the model name sent in requests (or found in the server's metadata)
        self.model_name: str | None = options.model_name
        self.bound = Bound(base="")

    def bind(self, bound: Bound) -> None:
        """Load time: what the backend set up; a protocol reads its own files here."""
        self.bound = bound

    # --- what it takes and gives -------------------------------------------------------
    @property
    def input_kind(self) -> InputKind:
        """What this instance's samples are (an option may choose among `takes`)."""
        return self.takes[0]

    @property
    def output_kind(self) -> OutputKind:
        return self.gives

    @property
    def takes_sessions(self) -> bool:
        """A chat protocol carries a session's turns (backends.base.StreamingBackend.chat_request)."""
        return "chat" in self.takes

    #: each prompt goes out as its dataset's token ids (StreamingBackend.sends_token_ids)
    sends_token_ids: bool = False

    @property
    def max_inputs_per_request(self) -> int | None:
        """Most samples one request carries (StreamingBackend.max_inputs_per_request); None:
        one. A protocol that sets it joins bodies in `group`."""
        return None

    def group(self, bodies: list[bytes]) -> bytes:  # pragma: no cover - interface
        """One body carrying the inputs of `bodies` (each `encode`'s, of one sample), in order."""
        raise NotImplementedError(f"protocol {self.name} sends one sample a request")

    # --- where requests go --------------------------------------------------------------
    def transport(self, settings: TransportSettings) -> Transport:
        """What carries its requests, made on the running loop: the HTTP/1.1 client."""
        from backends.http.client import HttpClient

        s = settings
        return HttpClient(
            s.url, limit=s.limit, headers=s.headers, connect_timeout=s.connect_timeout,
            read_timeout=s.read_timeout, total_timeout=s.total_timeout, verify_tls=s.verify_tls,
        )  # fmt: skip

    def endpoint(self, base: str) -> str:
        """The URL requests are posted to; default: the base URL itself."""
        return base

    def metadata_url(self, base: str) -> str | None:
        """The URL of the metadata probe read at load (`check_server`); None: none."""
        return None

    def read_metadata(self, meta: Any) -> ServerInfo:
        """The probe's JSON answer read; may set `model_name` from it."""
        return ServerInfo()

    def failure_hint(self, status: int, probe: bool = False) -> str:
        """What to change when the server answered `status` >= 400 (to the probe, or to a
        request); "" when nothing is known to help."""
        return ""

    # --- a sample -> its request ------------------------------------------------------
    def encode(self, sample: Sample) -> bytes:  # pragma: no cover - interface
        raise NotImplementedError(f"protocol {self.name} does not encode samples")

    def input_tokens(self, sample: Sample) -> int:
        """The prompt's length when the server reports none: the tokenizer's count of its
        text, else the generator's target; 0 for what is not a prompt."""
        if not isinstance(sample, PromptSample):
            return 0
        if self.bound.tokenizer is not None:
            return self.bound.tokenizer.count(sample.text())
        return sample.target_input_tokens

    @property
    def input_token_method(self) -> str:
        """How `input_tokens` counts, for the summary."""
        if self.bound.tokenizer is None:
            return "the dataset's length (words, or the generator's target)"
        return "tokenizer"

    # --- its answer -> Chunks -----------------------------------------------------------
    def stream_parser(self) -> StreamParser | None:
        """A parser for one streamed answer; None: the answer is read whole (`decode`)."""
        return None

    def decode(self, raw: bytes) -> list[Chunk]:  # pragma: no cover - interface
        raise NotImplementedError(f"protocol {self.name} does not decode answers")

    def expected(self, sample: Sample) -> Any:
        """What an answer to `sample` is checked against (a rerank: its count of documents),
        found when the request is prepared and handed to `decode_against`; None: nothing."""
        return None

    def decode_against(self, raw: bytes, expected: Any) -> list[Chunk]:
        """A whole answer -> Chunks, checked against what `expected` found; default: `decode`."""
        return self.decode(raw)

    def json_body(self, raw: bytes) -> Any:
        """A whole answer's JSON; malformed_json when it is none."""
        try:
            return json.loads(raw)
        except ValueError as e:
            raise RequestFailed("malformed_json", self.bound.excerpt(raw.decode(errors="replace"))) from e

    @property
    def answer_schema(self) -> Any:
        """The JSON Schema its requests ask every answer to follow, after `bind`, for the
        harness to check the answers against (backends.base.StreamingBackend.answer_schema);
        None: none."""
        return None

    def response_format(self, outputs: list[TensorSpec]) -> ResponseFormat | None:
        """dtype/shape of one sample's answer, when the metadata gave it; None: unknown."""
        return None

    def describe(self) -> dict[str, Any]:
        """The protocol's settings in describe(). `stream`, `prompt_from` and
        `reasoning_parser` are in every http run's description, whatever its protocol,
        so that `harness compare` lines up runs of different protocols."""
        return {"stream": False, "prompt_from": "text", "reasoning_parser": "fields"}
