"""OpenAI embeddings (`POST {url}/embeddings`): vLLM, llama.cpp's servers, TEI's OpenAI
route, Ollama. Texts in, `batch` of them a request; one vector per text out.

A LoadGen sample is one text: the event-loop SUT groups up to `batch` samples queued at
once into one request (StreamingBackend.max_inputs_per_request), and each sample gets its
own vector. A request's body is `{"model", "input": [texts], ...}`; `encode` makes one
text's body, and `group` joins several of them without parsing them again.

Each answer is checked: every vector has the dimension asked for (`dimensions`) or, when
none was, the first answer's; every value is finite; `data` holds one vector per input,
by `index`. A failed check fails the request with its reason:

    vector_dimension  a vector whose length differs from the dimension asked for, or the first answer's
    vector_shape      an embedding that is not a flat list of numbers (one list per token:
                      the server pools none)
    vector_nan        a NaN or infinite value
    malformed_json    not JSON, or no `data` list of `{"index", "embedding"}` objects
(the count of vectors against the inputs is the SUT's `output_count`).
"""

from __future__ import annotations

import base64
import json
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from backends.base import Chunk, InputKind, OutputKind, PromptSample, ResponseFormat, Sample, TensorSpec, Usage
from backends.http.openai import OpenAIProtocol
from backends.http.options import BaseHttpOptions
from backends.http.protocol import HttpProtocol
from harness.errors import DatasetError, RequestFailed

#: OpenAI's limit on inputs per request
MAX_BATCH = 2048


class OpenAIEmbeddingsOptions(BaseHttpOptions):
    protocol: Literal["openai-embeddings"] = Field("openai-embeddings", description="OpenAI embeddings, POST {url}/embeddings (url: http://host:port/v1); texts in (batch a request), one vector each out")
    batch: int = Field(
        1, ge=1, le=MAX_BATCH, description="most inputs a request carries: up to this many queued samples go in one "
        f"request, never waiting for more ({MAX_BATCH}: OpenAI's limit)"
    )
    dimensions: int | None = Field(
        None, ge=1, description="the vector length to ask for (OpenAI's `dimensions`) and to check each answer "
        "against; None: not sent, each answer checked against the first"
    )
    encoding_format: Literal["float", "base64"] | None = Field(
        None, description="the vectors' encoding to ask for (base64: little-endian float32); None: not sent (float)"
    )
    extra_body: dict[str, Any] = Field(default_factory=dict, description="fields merged into every request body")


class OpenAIEmbeddings(HttpProtocol):
    name = "openai-embeddings"
    Options = OpenAIEmbeddingsOptions
    options: OpenAIEmbeddingsOptions
    aliases = ("openai-embeddings", "embeddings")
    url_form = "http://host:port/v1"
    takes: ClassVar[tuple[InputKind, ...]] = ("prompt",)
    gives: ClassVar[OutputKind] = "vector"
    # the /models probe and its reading are the OpenAI protocols'
    metadata_url = OpenAIProtocol.metadata_url
    read_metadata = OpenAIProtocol.read_metadata

    def __init__(self, options: OpenAIEmbeddingsOptions) -> None:
        super().__init__(options)
        #: the length every vector must have: the `dimensions` option, else the first answer's
        self.dimension: int | None = options.dimensions
        self._made: tuple[str | None, tuple[bytes, bytes]] | None = None

    @property
    def max_inputs_per_request(self) -> int | None:
        return self.options.batch

    def endpoint(self, base: str) -> str:
        return f"{base}/embeddings"

    def failure_hint(self, status: int, probe: bool = False) -> str:
        if not probe and status == 404:
            return "(the server has no /embeddings route: is it serving an embedding model at this url?)"
        return ""

    # --- samples -> bodies: one text's body is PREFIX + the text's JSON + SUFFIX ----------
    def _ends(self) -> tuple[bytes, bytes]:
        if self._made is not None and self._made[0] == self.model_name:
            return self._made[1]
        o = self.options
        head = {"model": self.model_name} if self.model_name is not None else {}
        tail = {k: v for k, v in (("dimensions", o.dimensions), ("encoding_format", o.encoding_format)) if v is not None}
        tail.update(o.extra_body)
        prefix = json.dumps(head)[:-1] + (", " if head else "") + '"input": ['
        suffix = "]" + ("" if not tail else ", " + json.dumps(tail)[1:-1]) + "}"
        ends = prefix.encode(), suffix.encode()
        self._made = (self.model_name, ends)  # made once: `group` runs at dispatch
        return ends

    def encode(self, sample: Sample) -> bytes:
        if not isinstance(sample, PromptSample):
            raise DatasetError("protocol openai-embeddings takes texts, not tensors: use a prompt dataset")
        if sample.input_ids is not None and sample.prompt is None and not sample.messages:
            raise DatasetError("protocol openai-embeddings sends texts: this dataset carries token ids only")
        prefix, suffix = self._ends()
        return prefix + json.dumps(sample.text()).encode() + suffix

    def group(self, bodies: list[bytes]) -> bytes:
        if len(bodies) == 1:
            return bodies[0]
        prefix, suffix = self._ends()
        cut = slice(len(prefix), -len(suffix))
        return prefix + b", ".join(b[cut] for b in bodies) + suffix

    # --- the answer -> one vector per input -----------------------------------------------
    def decode(self, raw: bytes) -> list[Chunk]:
        obj = self.json_body(raw)
        excerpt = self.bound.excerpt
        try:
            data = sorted(obj["data"], key=lambda d: d["index"])
            vectors = self._vectors([d["embedding"] for d in data])
        except (KeyError, TypeError, AttributeError) as e:
            raise RequestFailed("malformed_json", excerpt(f"no data list of index/embedding objects ({e!r}): "
                                                          f"{raw.decode(errors='replace')}")) from e
        if [d["index"] for d in data] != list(range(len(data))):
            raise RequestFailed("malformed_json", excerpt(f"data's indices are not 0..{len(data) - 1}: "
                                                          f"{[d['index'] for d in data]}"))
        lengths = sorted({len(v) for v in vectors}) if isinstance(vectors, list) else [vectors.shape[1]] * bool(len(vectors))
        want = self.dimension if self.dimension is not None else (lengths[0] if lengths else None)
        wrong = [n for n in lengths if n != want]
        if wrong:
            whose = "asked for" if self.options.dimensions is not None else "of the first answer"
            raise RequestFailed("vector_dimension", f"vectors of length {', '.join(map(str, wrong))}, not the {want} {whose}")
        out = np.asarray(vectors, dtype=np.float32).reshape(len(vectors), want or 0)
        bad = ~np.isfinite(out)
        if bad.any():
            rows = np.flatnonzero(bad.any(axis=1)).tolist()
            raise RequestFailed("vector_nan", f"{int(bad.sum())} values not finite (NaN or inf) in vectors {rows[:8]}")
        self.dimension = want
        usage = obj.get("usage") if isinstance(obj, dict) else None
        tokens = None
        if isinstance(usage, dict):
            tokens = next((usage[k] for k in ("prompt_tokens", "total_tokens") if isinstance(usage.get(k), int)), None)
        return [Chunk(n_tokens=0, usage=Usage(input_tokens=tokens, vectors=len(vectors))), Chunk(n_tokens=0, output=out)]

    def _vectors(self, values: list[Any]) -> np.ndarray | list[np.ndarray]:
        """The answer's vectors: one float32 array when they are lists of numbers of one
        length (one numpy call: the common case, on the request path), else each read alone
        so that a failure names what is wrong."""
        if values and all(v.__class__ is list for v in values):
            try:
                out = np.array(values, dtype=np.float32)
                if out.ndim == 2:
                    return out
            except (ValueError, TypeError):
                pass
        return [self._vector(v) for v in values]

    def _vector(self, value: Any) -> np.ndarray:
        if isinstance(value, str):  # encoding_format base64: little-endian float32
            try:
                return np.frombuffer(base64.b64decode(value, validate=True), dtype="<f4")
            except ValueError as e:
                raise RequestFailed("malformed_json", f"an embedding string that is not base64 float32: {e}") from e
        try:
            vector = np.asarray(value, dtype=np.float64) if isinstance(value, list) else None
        except (ValueError, TypeError):
            vector = None
        if vector is None or vector.ndim != 1:
            per_token = vector is not None and vector.ndim == 2
            raise RequestFailed("vector_shape", (
                f"an embedding of {len(value)} vectors (one per token): the server pools none; "
                "llama.cpp: --kv_overrides llama.pooling_type=int:1") if per_token else
                f"an embedding that is not a list of numbers: {self.bound.excerpt(json.dumps(value)[:200])}")
        return vector

    def response_format(self, outputs: list[TensorSpec]) -> ResponseFormat | None:
        """One sample's answer: its vector, float32, as logged to LoadGen in accuracy mode."""
        return {"dtype": "float32", "shape": [self.dimension]} if self.dimension is not None else None

    def describe(self) -> dict[str, Any]:
        o = self.options
        return {**super().describe(), "batch": o.batch, "dimensions": o.dimensions, "dimension": self.dimension,
                "encoding_format": o.encoding_format}


PROTOCOL = OpenAIEmbeddings
