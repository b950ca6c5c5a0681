"""Rerank datasets: one query and its documents a sample (backends.base.RankSample).

Specs, as given to `--dataset`:
    rerank:PATH[,metric=ndcg,k=10]   one JSON object a line: `query` (text), `documents`
                                     (a list of texts) and optional `relevance` (a graded
                                     label >= 0 per document: every row has them or none).
                                     With labels, accuracy runs score the ranking by
                                     `metric`: ndcg (NDCG@k, linear gain, the default) or
                                     mrr (the reciprocal rank of the first relevant document)
    synthetic-rerank[:n=64,docs=8,doc_len=64,query_len=16,seed=S]
                                     seeded random queries with `docs` documents of
                                     `doc_len` tokens each (words without a tokenizer), no labels

The rows are read once, when the QSL loads; `ranking_truth` is what the results folder
keeps of them (each sample's count of documents, the labels, the metric), so that
harness.results.rerank counts documents and scores rankings from the folder alone.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from backends.base import RankSample
from harness.data.datasets import Dataset
from harness.data.jsonl import json_objects
from harness.data.prompt_set import TokenCounter
from harness.data.spec import parse_dataset_spec
from harness.data.synthetic_prompts import _Words
from harness.errors import DatasetError

METRICS = ("ndcg", "mrr")


@dataclass(frozen=True)
class RankRow(RankSample):
    """A query, its documents and (optionally) each document's graded relevance."""

    relevance: tuple[float, ...] | None = None


class RankDataset(Dataset):
    """Rerank rows held in memory; load/unload keep the QSL's contract."""

    def __init__(self, name: str, rows: list[RankRow], source: dict[str, Any]) -> None:
        self.name = name
        self.rows = rows
        self.source = source
        super().__init__(len(rows))

    def _make(self, index: int) -> RankRow:
        return self.rows[index]

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for row in self.rows:
            h.update(json.dumps(asdict(row), sort_keys=True).encode())
        return h.hexdigest()

    def ranking_truth(self) -> dict[str, Any]:
        """What the results folder keeps (ranking.json): documents per sample, the labels."""
        labelled = self.rows[0].relevance is not None
        return {
            "documents": [len(r.documents) for r in self.rows],
            "relevance": [list(r.relevance or ()) for r in self.rows] if labelled else None,
            "metric": self.source.get("metric"),
            "k": self.source.get("k"),
        }

    def describe(self) -> dict[str, Any]:
        docs = [len(r.documents) for r in self.rows]
        return {**super().describe(), **self.source, "documents": sum(docs),
                "documents_per_query_mean": float(np.mean(docs)),
                "with_relevance": sum(r.relevance is not None for r in self.rows)}


def _row(obj: dict[str, Any], where: str) -> RankRow:
    unknown = set(obj) - {"query", "documents", "relevance", "id"}
    if unknown:
        raise DatasetError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}; a rerank row has query, documents, relevance")
    query, documents, relevance = obj.get("query"), obj.get("documents"), obj.get("relevance")
    if not isinstance(query, str):
        raise DatasetError(f"{where}: `query` must be a string")
    if not isinstance(documents, list) or not documents or not all(isinstance(d, str) for d in documents):
        raise DatasetError(f"{where}: `documents` must be a non-empty list of strings")
    if relevance is not None:
        if not isinstance(relevance, list) or len(relevance) != len(documents) or not all(
            v.__class__ in (int, float) and v >= 0 for v in relevance
        ):
            raise DatasetError(f"{where}: `relevance` must be a label >= 0 for each of the {len(documents)} documents")
        relevance = tuple(float(v) for v in relevance)
    return RankRow(query, tuple(documents), relevance=relevance)


def load_rerank(path: Path, params: dict[str, str], spec: str) -> RankDataset:
    metric = params.get("metric", "ndcg")
    if metric not in METRICS:
        raise DatasetError(f"dataset spec {spec!r}: metric {metric!r} is not one of {', '.join(METRICS)}")
    try:
        k = int(params.get("k", "10"))
    except ValueError:
        k = 0
    if k < 1:
        raise DatasetError(f"dataset spec {spec!r}: k must be an integer >= 1 (the NDCG cut-off)")
    if not path.is_file():
        raise DatasetError(f"rerank file {path} does not exist")
    rows = [_row(obj, where) for where, obj in json_objects(path, lambda _, line: f"{path}:{line}", "query, documents")]
    if not rows:
        raise DatasetError(f"rerank file {path} holds no rows")
    labelled = [r.relevance is not None for r in rows]
    if any(labelled) and not all(labelled):  # a row without labels would silently not count
        raise DatasetError(f"{path}: row {labelled.index(False)} has no `relevance`, while row {labelled.index(True)} "
                           "has: give every row its labels, or none")
    source = {"path": str(path), "metric": metric if all(labelled) else None, "k": k if all(labelled) else None}
    return RankDataset("rerank", rows, source)


def synthetic_rerank(spec: str, params: dict[str, str], seed: int, count: TokenCounter | None) -> RankDataset:
    known = {"n", "docs", "doc_len", "query_len", "seed"}
    if set(params) - known:
        raise DatasetError(f"dataset spec {spec!r}: unknown parameter(s) {', '.join(sorted(set(params) - known))}; "
                           f"synthetic-rerank takes {', '.join(sorted(known))}")
    try:
        n, docs, doc_len, query_len, s = (int(params.get(key, default)) for key, default in
                                          (("n", "64"), ("docs", "8"), ("doc_len", "64"), ("query_len", "16"),
                                           ("seed", str(seed))))
    except ValueError as e:
        raise DatasetError(f"dataset spec {spec!r}: n, docs, doc_len, query_len and seed must be integers") from e
    if min(n, docs, doc_len, query_len) < 1:
        raise DatasetError(f"dataset spec {spec!r}: n, docs, doc_len and query_len must be at least 1")
    words = _Words(count, spec)
    rows = []
    for i in range(n):
        rng = np.random.default_rng([s, i])  # sample i is the same whatever n is
        query, tokens = words.text(rng, query_len)
        documents = []
        for _ in range(docs):
            text, got = words.text(rng, doc_len)
            documents.append(text)
            tokens += got
        rows.append(RankRow(query, tuple(documents), target_input_tokens=tokens))
    source = {"docs": docs, "doc_len": doc_len, "query_len": query_len, "seed": s,
              "lengths_counted_in": "tokenizer" if count else "words", "metric": None, "k": None}
    return RankDataset("synthetic-rerank", rows, source)


def build_rank_dataset(spec: str, seed: int, count_tokens: TokenCounter | None = None) -> RankDataset:
    parsed = parse_dataset_spec(spec)
    if parsed.kind == "rerank" and parsed.path is not None:
        return load_rerank(parsed.path, parsed.params, spec)
    if parsed.kind == "synthetic-rerank":
        return synthetic_rerank(spec, dict(parsed.params), seed, count_tokens)
    raise DatasetError(f"dataset {spec!r} is not a rerank dataset: the rerank protocol takes "
                       "rerank:FILE.jsonl[,metric=ndcg|mrr,k=10] or synthetic-rerank:n=N,docs=D,doc_len=L")
