"""Rerank (`POST {url}{path}`, path /v1/rerank by default): one query and its documents in,
a relevance score per document out, in the shape vLLM, llama.cpp's llama-server, Cohere
and Jina share:

    request   {"model"?, "query": str, "documents": [str, ...], "top_n"?: int}
    answer    {"results": [{"index": int, "relevance_score": float, "document"?: ...}],
               "usage"?: {"prompt_tokens", "total_tokens"}}

TEI's bare array of {"index", "score"} is read too. Servers sort the results by score and
may cut them to top_n, so each is mapped back to its document by `index`. The answer
(`Chunk.output`) is the scores in the documents' order, float64, NaN for a document cut
by top_n: what LoadGen's accuracy log keeps and harness.results.rerank ranks and scores.

Failures by reason: rerank_index (an index out of range, a duplicate, or not an integer),
rerank_count (results more than the documents, or, without top_n, fewer), rerank_score
(a score that is not a finite number), malformed_json (not JSON, or no results list).
"""

from __future__ import annotations

import json
import math
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator

from backends.base import Chunk, InputKind, OutputKind, RankSample, Sample, Usage
from backends.http.options import BaseHttpOptions
from backends.http.protocol import HttpProtocol
from harness.errors import DatasetError, RequestFailed


class RerankOptions(BaseHttpOptions):
    protocol: Literal["rerank"] = Field("rerank", description="rerank (vLLM, llama.cpp, Cohere, Jina), POST {url}{path} (url: http://host:port); a query and its documents in, a score per document out")
    path: str = Field("/v1/rerank", description="the endpoint's path: /v1/rerank (vLLM, llama.cpp, Jina), /rerank, /v2/rerank (Cohere v2)")
    top_n: int | None = Field(None, ge=1, description="ask for the best top_n results only (None: every document, each checked to come back)")

    @field_validator("path")
    @classmethod
    def _rooted(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"path {v!r} must start with / (e.g. /v1/rerank)")
        return v


class Rerank(HttpProtocol):
    name = "rerank"
    Options = RerankOptions
    options: RerankOptions
    aliases = ("rerank", "reranker", "cohere-rerank", "jina-rerank")
    takes: ClassVar[tuple[InputKind, ...]] = ("rank",)
    gives: ClassVar[OutputKind] = "ranking"

    def endpoint(self, base: str) -> str:
        return base + self.options.path

    def failure_hint(self, status: int, probe: bool = False) -> str:
        if status != 404:
            return ""
        return (f"(no rerank endpoint at {self.options.path}: set the http option path to the server's, "
                "e.g. --set path=/rerank; vLLM and llama.cpp serve /v1/rerank and /rerank, Cohere /v2/rerank)")

    def encode(self, sample: Sample) -> bytes:
        if not isinstance(sample, RankSample):
            raise DatasetError("protocol rerank takes a query and its documents: use a rerank dataset "
                               "(rerank:FILE.jsonl or synthetic-rerank:docs=N)")
        body: dict[str, Any] = {"query": sample.query, "documents": list(sample.documents)}
        if self.model_name:
            body["model"] = self.model_name
        if self.options.top_n is not None:
            body["top_n"] = self.options.top_n
        return json.dumps(body).encode()

    def input_tokens(self, sample: Sample) -> int:
        """The query and the documents, counted once each, when the server reports no usage."""
        if not isinstance(sample, RankSample):
            return 0
        if self.bound.tokenizer is not None:
            return sum(map(self.bound.tokenizer.count, (sample.query, *sample.documents)))
        return sample.target_input_tokens

    def expected(self, sample: Sample) -> int:
        """The count of documents: each result's index must be one of theirs."""
        return len(sample.documents) if isinstance(sample, RankSample) else 0

    def decode_against(self, raw: bytes, expected: Any) -> list[Chunk]:
        obj = self.json_body(raw)
        results = obj.get("results") if isinstance(obj, dict) else obj  # TEI: a bare array
        if not isinstance(results, list):
            raise RequestFailed("malformed_json", self.bound.excerpt(f"no results list in {raw.decode(errors='replace')}"))
        chunks = [Chunk(n_tokens=0, output=self._scores(results, expected))]
        usage = obj.get("usage") if isinstance(obj, dict) else None
        tokens = usage.get("prompt_tokens", usage.get("total_tokens")) if isinstance(usage, dict) else None
        if isinstance(tokens, int) and not isinstance(tokens, bool):
            chunks.append(Chunk(n_tokens=0, usage=Usage(input_tokens=tokens)))
        return chunks

    def _scores(self, results: list[Any], n: int) -> np.ndarray:
        cut = n if self.options.top_n is None else min(n, self.options.top_n)
        if len(results) > n or (self.options.top_n is None and len(results) != n):
            raise RequestFailed("rerank_count", f"{len(results)} results for {n} documents"
                                + ("" if self.options.top_n is None else f" (top_n {self.options.top_n}: at most {cut})"))
        scores = np.full(n, np.nan)
        for r in results:
            index = r.get("index") if isinstance(r, dict) else None
            if index.__class__ is not int or not 0 <= index < n:
                raise RequestFailed("rerank_index", f"index {index!r} is not one of the {n} documents' (0..{n - 1})")
            if not math.isnan(scores[index]):
                raise RequestFailed("rerank_index", f"index {index} comes back twice")
            score = r.get("relevance_score", r.get("score"))
            if score.__class__ not in (int, float) or not math.isfinite(score):
                raise RequestFailed("rerank_score", f"document {index}'s score is {score!r}, not a finite number")
            scores[index] = score
        return scores

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "path": self.options.path, "top_n": self.options.top_n}


PROTOCOL = Rerank
