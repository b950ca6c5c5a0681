"""The backend contract: the few methods a runtime must offer to be benchmarked.

A backend only knows *how* to run a model. It never sleeps, paces, queues or times:
LoadGen decides when, and the SUT adapters own threads, batching, timing and failure
accounting. A new backend is one module with one class, registered in the
`harness.backends` entry-point group, that subclasses one of:

    Backend                    what every backend has (name, options, load, describe, close)
    ├── TensorBackend          kind "tensor": `predict(batch)`, served by worker threads
    │                          (harness.child.tensor_sut)
    └── StreamingBackend       kind "async" or "generative": `stream(sample)` yields `Chunk`s,
                               served by one event loop (harness.child.stream_sut)

A tensor backend written as `class X(Backend)` is still a tensor backend: `Backend` keeps
the tensor hooks it always had. The registry (harness.config.registry) checks each class
against this contract when its entry point is loaded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar, Literal, TypedDict, get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

#: "tensor": `predict`, worker threads; "async": `stream`, e.g. a server over the network;
#: "generative": `stream` of generated tokens, from prompts (the default of its hooks).
BackendKind = Literal["tensor", "async", "generative"]
StreamingKind = Literal["async", "generative"]
KINDS: tuple[str, ...] = get_args(BackendKind)
STREAMING_KINDS: tuple[str, ...] = get_args(StreamingKind)
#: how a streaming backend counts tokens when the server reports no usage
TokenSource = Literal["chunks", "tokenizer", "model"]
#: what a streaming backend takes, per sample: a prompt (text or token ids), a chat (a
#: prompt's messages, or a session's turns built at dispatch), tensors, audio, or a
#: query with the documents to rank against it (RankSample)
InputKind = Literal["prompt", "chat", "tensor", "audio", "rank"]
#: what it gives back: a stream of tokens, a tensor, a vector (an embedding), one text, a
#: ranking (a relevance score per document, in the documents' order), or a transcript (a
#: stream of tokens that spells speech as text: timed as tokens, but logged in accuracy mode
#: as MLPerf's whisper reference logs a transcript, not as a model's token ids)
OutputKind = Literal["tokens", "tensor", "vector", "text", "ranking", "transcript"]


class BackendOptions(BaseModel):
    """Base for each backend's options; unknown keys are errors, never ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    #: the option whose value picks one of `variants()`; "" when there are none
    variant_key: ClassVar[str] = ""

    @classmethod
    def variants(cls) -> Mapping[str, type[BackendOptions]]:
        """The option sets `variant_key` picks between (the http backend's `protocol`: each
        protocol's own options), by its value; each holds these options and its own.
        Empty (the default): every option is in `model_fields`."""
        return {}


class StreamingOptions(BackendOptions):
    """Base for a streaming backend's options: what the event-loop SUT itself reads."""

    warmup_requests: int = Field(1, ge=0, description="requests sent at once before the timed test")


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output. A `None` dimension is dynamic (the batch dim is first)."""

    name: str
    shape: tuple[int | None, ...]
    dtype: str  # numpy dtype name, e.g. "float32"

    def sample_shape(self) -> tuple[int, ...]:
        """Shape of one sample: the batch dimension dropped, other dynamic dims set to 1."""
        return tuple(1 if d is None else d for d in self.shape[1:])


@dataclass(frozen=True)
class LoadContext:
    """What a backend needs to load: the model reference and the run's resolved settings."""

    model: str | None
    max_batch: int
    scenario: str
    seed: int = 0
    #: threads each backend call may use so that workers x threads <= cores
    threads: int = 1
    #: the run logs each answer to LoadGen (accuracy mode): a generative backend that can ask
    #: its server for the generated token ids does so (they are logged, as MLPerf logs them)
    log_outputs: bool = False


@dataclass(frozen=True)
class PromptSample:
    """A prompt as a backend receives it: its text or chat messages, and/or its token ids.

    The harness's datasets hand their rows (harness.data.prompt_set.Prompt, a subclass
    that adds what scoring reads) to `StreamingBackend.prepare`; a session's turn, built
    at dispatch, comes as one of these with the turns before it in `messages`.
    """

    prompt: str | None = None
    #: chat messages ({"role", "content"} and, in a session, a turn's tool calls); a content
    #: is a string or a tuple of typed parts (backends.content: text, image, video)
    messages: tuple[dict[str, Any], ...] | None = None
    #: the answer's length to ask for; None: the backend's default
    max_tokens: int | None = None
    _: KW_ONLY
    #: the generator's input length (synthetic: tokens when a tokenizer counted them,
    #: words otherwise; 0 when unknown): the prompt's length when nothing counts it
    target_input_tokens: int = 0
    #: the prompt's token ids in the model's tokenizer (MLPerf's `tok_input`); None: none given
    input_ids: tuple[int, ...] | None = None
    #: the JSON Schema its answer must follow (structured outputs): a backend asks its server
    #: for it, and the answer is checked against it; None: no schema of its own
    response_schema: Mapping[str, Any] | None = None

    def text(self) -> str:
        """The whole input as one text, for local token counting (a message's media parts,
        backends.content, are left out: the server counts those)."""
        if self.prompt is not None:
            return self.prompt
        from backends.content import content_text

        return "\n".join(content_text(m.get("content")) for m in self.messages or ())

    def chat(self) -> list[dict[str, Any]]:
        """The messages a chat API is sent: the sample's, or its prompt as one user turn."""
        return list(self.messages) if self.messages else [{"role": "user", "content": self.prompt}]


@dataclass(frozen=True)
class RankSample:
    """A rerank request's input: one query and the documents to score against it. The
    datasets' rows (harness.data.rerank) add the relevance labels that scoring reads."""

    query: str
    documents: tuple[str, ...]
    _: KW_ONLY
    #: the generator's input length (query and documents, in words or the tokenizer's tokens)
    target_input_tokens: int = 0


@dataclass(frozen=True)
class AudioSample:
    """An audio clip as a backend receives it: its file's bytes, read once when the dataset
    loads (harness.data.audio), so that no file is read in the timed path."""

    #: the file as it is on disk (WAV, FLAC, ...), sent as it is
    data: bytes
    #: its format, lower case: "wav", "flac", "mp3", "ogg"
    format: str
    #: its length, read from the file's header (the RTFx numerator)
    seconds: float
    #: the file's name, as the request names it
    filename: str
    #: what is said in it, when the dataset knows (word error rate's truth)
    reference: str | None = None


#: one sample of a tensor dataset: input name -> array, without the batch dimension
TensorSample = Mapping[str, np.ndarray]
#: what `StreamingBackend.prepare` receives
Sample = PromptSample | TensorSample | RankSample | AudioSample


@dataclass(slots=True)
class Usage:
    """What the server says one request used, each figure None where it said nothing.

    A backend turns its server's own form (OpenAI's `usage` object, a header, a field of a
    whole answer) into this; the SUT reads the fields, never the server's keys, and never
    writes them. (Not frozen: a frozen dataclass sets each field through object.__setattr__,
    which tripled the cost of the one Usage a streamed request makes.)"""

    #: tokens generated (OpenAI completion_tokens): outranks the chunks' count
    output_tokens: int | None = None
    #: prompt tokens (prompt_tokens): outranks the client's count
    input_tokens: int | None = None
    #: prompt tokens served from the server's prefix cache (prompt_tokens_details.cached_tokens)
    cached_tokens: int | None = None
    #: generated tokens the model reasoned with (completion_tokens_details.reasoning_tokens)
    reasoning_tokens: int | None = None
    #: prompt tokens the server says were the images' (prompt_tokens_details.image_tokens),
    #: None where it gives no split (its prompt tokens are then the server's total)
    image_tokens: int | None = None
    #: seconds of audio the request carried
    audio_seconds: float | None = None
    #: vectors the answer carried (embeddings)
    vectors: int | None = None


@dataclass(slots=True)
class Chunk:
    """One piece of a stream: `n_tokens` tokens of `text` (may be several), and/or an event.

    A chunk with text or `n_tokens > 0` is content (its arrival is timed as a token). The
    keyword fields are events the SUT stamps or keeps; `None` is "not this event". One is
    made per generated token, so this stays a plain slotted dataclass.
    """

    text: str = ""
    n_tokens: int = 1
    _: KW_ONLY
    #: the response's headers arrived (its status code): stamped as the request's first byte
    headers: int | None = None
    #: an attempt failed before any content and is being retried (its reason): counted
    retry: str | None = None
    #: what the server says the request used: its output tokens outrank the chunks' count
    usage: Usage | None = None
    #: a whole answer (a tensor, a JSON value), returned to LoadGen as the sample's output
    output: Any = None
    #: figures the backend measured itself (e.g. kv_cache_bytes), kept in tokens.jsonl
    metrics: dict[str, Any] | None = None
    #: the generated token ids this chunk carries, when the backend knows them (its model's,
    #: or the server's `token_ids`): logged to LoadGen in accuracy mode. May come without text.
    token_ids: Sequence[int] | None = None
    #: the chunk's text and tokens are the model's reasoning, not its answer: counted apart,
    #: kept apart (tokens.jsonl `reasoning`), never scored; the first answer token is the
    #: first content chunk without it
    reasoning: bool = False
    #: the request's tool calls, reassembled (each index, id, name, arguments string,
    #: tokens, and `json`: whether the arguments parse), sent once at the end of the stream
    tool_calls: list[dict[str, Any]] | None = None


class ResponseFormat(TypedDict):
    """dtype and shape of one sample's answer, so that accuracy can be scored from LoadGen's log."""

    dtype: str
    shape: list[int]


class KvCacheShape(TypedDict):
    """A model's KV-cache geometry (harness.results.kv_cache.KvShape's fields)."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype: str


class KvCacheDescription(TypedDict, total=False):
    shape: KvCacheShape


class BackendDescription(TypedDict, total=False):
    """What `describe()` returns: the keys the harness reads, each where it is read.

    Any other key is free (engine versions, devices, settings really in effect): the
    whole dict goes into child.json and summary.json and is compared by `harness compare`.
    """

    backend: str  # the registered name
    engine: str  # the runtime; the MLPerf submission's framework (analysis.submission)
    engine_version: str  # beside it
    precision: str | list[str]  # the submission's data types (fp32 when absent)
    compile_s: float | None  # compile time inside load(): the report's setup line
    kv_cache: KvCacheDescription  # the summary's KV-cache estimate (results.token_metrics)


Batch = Mapping[str, np.ndarray]  # input name -> array with the batch dimension first
Outputs = Sequence[np.ndarray]  # one array per model output, batch dimension first


class Backend:
    """Base class of all backends.

    Class attributes tell the registry what the backend needs before it is imported:
    `requires` lists importable module names, `install_hint` is the command that
    provides them, `Options` validates the backend's own settings, `kind` picks the SUT.
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type[BackendOptions]] = BackendOptions
    requires: ClassVar[tuple[str, ...]] = ()
    install_hint: ClassVar[str] = ""
    #: which SUT serves the backend: "tensor" the worker threads, the others the event loop
    kind: ClassVar[BackendKind] = "tensor"

    @classmethod
    def scales_with_host_cores(cls, options: BackendOptions) -> bool:
        """True when `predict` computes on this machine's CPU cores and releases the GIL,
        so that Offline runs best as one single-threaded worker per core. False (the
        default) keeps one worker per device: right for GPUs, servers and emulators."""
        return False

    def __init__(self, options: BackendOptions) -> None:
        self.options = options

    def load(self, ctx: LoadContext) -> None:
        """Load the model once, before LoadGen starts. Raise `harness.errors` on bad input."""

    def inputs(self) -> list[TensorSpec]:
        """The model's input signature, used to build synthetic samples."""
        return []

    # The tensor hooks live here, not only on TensorBackend, so that a tensor backend
    # written as `class X(Backend)` keeps working.
    def warmup(self, batch: Batch) -> None:
        """Run outside the timed test; the default runs one prediction."""
        self.predict(batch)

    def predict(self, batch: Batch) -> Outputs:
        """Run one batch. May release the GIL. Exceptions fail the batch's samples."""
        raise TypeError(f"backend {self.name!r} does not implement predict()")

    def batches_freely(self) -> bool:
        """After load: True when a call of any batch size costs no setup that a batch of one
        does not (no padding to a fixed shape, no recompiling), so that a Server worker may
        serve whatever is queued in one call by default. False (the default): one sample a
        call unless the run sets max_batch."""
        return False

    def describe(self) -> BackendDescription:
        """Engine, versions, device, precision and the settings really in effect."""
        return {"backend": self.name}

    def close(self) -> None:
        """Free resources; called once after the test."""


class TensorBackend(Backend):
    """A backend served by worker threads: implements `predict` (and may override `warmup`)."""

    kind: ClassVar[Literal["tensor"]] = "tensor"


class StreamingBackend(Backend):
    """A backend served by the event loop: implements `stream`, one request per sample.

    Every hook has a default; a backend overrides only what it has. The loop is shared by
    all requests, so `stream` must never block it: a blocking runtime runs in its own
    thread and hands results over (as backends.pytorch_llm does).
    """

    kind: ClassVar[StreamingKind] = "async"
    Options: ClassVar[type[BackendOptions]] = StreamingOptions
    options: StreamingOptions

    #: most requests open at once (the SUT queues the rest, timed as queue time); None:
    #: as many as LoadGen issues. An instance may set it in __init__ or load().
    max_in_flight: int | None = None
    #: how `stream` counts the tokens of a chunk, recorded beside the server's own count
    token_source: TokenSource = "chunks"
    #: how a request's input tokens are counted where the server reports none (its usage)
    input_token_method: str = "the dataset's length"
    #: True: each prompt goes out as its dataset's token ids (MLPerf's `tok_input`), not its
    #: text, so a prompt dataset must carry ids for every row (the option `prompt_from`)
    sends_token_ids: bool = False
    #: the model's tokenizer (text -> token count), so that prompt datasets count lengths
    #: in its tokens; None: they count words. A backend that has one defines the method.
    count_tokens: Callable[[str], int] | None = None
    #: masks the backend's secrets (API keys) in a request's whole generated text before the
    #: SUT stores it (tokens.jsonl, LoadGen's accuracy log); a key may span chunks, so only
    #: the joined text can be scanned. None: the backend has no secret to hide.
    redact_text: Callable[[str], str] | None = None
    #: where the ids of `Chunk.token_ids` come from, for the summary: "model" (the backend
    #: generated them) or "server" (the server sent them)
    output_ids_source: str = "model"
    #: the model's tokenizer, text -> token ids, for an answer whose chunks carried no ids:
    #: accuracy mode logs ids, as MLPerf does. None: the backend has none (the run then needs
    #: ids in the chunks, or it stops before the test with the option to set).
    tokenize_output: Callable[[str], list[int]] | None = None
    #: a tokenizer the results folder can decode the logged ids with later (a .gguf file or a
    #: Hugging Face tokenizer folder), recorded with its sha256; None: scoring reads the texts
    tokenizer_path: str | None = None
    #: the option that gives the backend a tokenizer, named in the error when one is missing
    tokenizer_hint: str = "give the backend a tokenizer"
    #: most samples one request may carry (a server that takes a list of inputs, as an
    #: embeddings API does); None: one sample a request. With a number, the SUT groups up to
    #: that many samples already queued (it never waits for more) into one request made by
    #: `group`, and the answer's `Chunk.output` holds one entry per sample, in their order.
    max_inputs_per_request: int | None = None
    #: a JSON Schema the backend asks its server to follow for every prompt without a schema
    #: of its own (PromptSample.response_schema), set at load: each answer is checked against it
    answer_schema: Mapping[str, Any] | None = None

    @property
    def input_kind(self) -> InputKind:
        """What each sample is: "prompt" or "chat" (harness.data.prompts), "tensor" (shaped by
        `inputs()`), "audio". Default: prompts for a generative backend, tensors otherwise."""
        return "prompt" if self.kind == "generative" else "tensor"

    @property
    def output_kind(self) -> OutputKind:
        """What each answer is. Default: tokens for a generative backend, a tensor otherwise."""
        return "tokens" if self.kind == "generative" else "tensor"

    @property
    def takes_prompts(self) -> bool:
        """True: samples are prompts (harness.data.prompts); False: tensors shaped by `inputs()`."""
        return self.input_kind in ("prompt", "chat")

    @property
    def produces_tokens(self) -> bool:
        """True: answers are token streams (a transcript is one), so LoadGen gets token counts
        and tokens.jsonl is kept."""
        return self.output_kind in ("tokens", "transcript")

    @property
    def takes_sessions(self) -> bool:
        """True: `chat_request` builds a chat request at dispatch (multi-turn sessions)."""
        return False

    def chat_request(self, messages: list[dict[str, Any]], max_tokens: int | None, headers: dict[str, str]) -> Any:
        """The request `stream` takes for a chat `messages` list built at dispatch (a session's
        turn, carrying the turns before it), with `headers` added to that request only.
        Only a backend whose `takes_sessions` is true is asked."""
        raise TypeError(f"backend {self.name!r} does not build chat requests")

    def prepare(self, sample: Sample) -> Any:
        """Turn a dataset sample into the request `stream` takes, when the QSL loads it,
        so that the timed path starts from ready bytes. Default: the sample itself. A
        request with an int `input_tokens` gives the prompt's length when no usage does."""
        return sample

    def group(self, requests: list[Any]) -> Any:
        """The one request that carries these prepared `requests` (what `prepare` made of each
        sample), in order; only asked when `max_inputs_per_request` is set."""
        raise TypeError(f"backend {self.name!r} does not group requests")

    def response_format(self) -> ResponseFormat | None:
        """The answer's dtype and shape when the backend knows it (e.g. from server metadata);
        None: the warm-up answer's are used, if it is a tensor."""
        return None

    async def open(self) -> None:
        """Called on the SUT's loop before the warm-up: create what belongs to that loop (pools)."""

    async def stream(self, sample: Any) -> AsyncIterator[Chunk]:  # pragma: no cover - interface
        """Yield the chunks of one request. An exception fails exactly this request: it is
        completed to LoadGen and recorded with `reason` and `detail` (harness.errors.RequestFailed)."""
        raise TypeError(f"backend {self.name!r} does not implement stream()")
        yield Chunk()

    async def aclose(self) -> None:
        """Called on the SUT's loop after the last request: close what `open` made."""
