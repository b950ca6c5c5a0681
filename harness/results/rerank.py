"""summary.json's `rerank` section: a rerank run's documents/s and, where the dataset has
relevance labels, its ranking's score, from the results folder alone.

    documents          documents of the successful requests (ranking.json: each sample's count)
    documents_per_s    those over the harness's duration (the span of its samples), beside
                       requests_per_s (the harness's throughput)
    latency_ms         per request; latency_per_document_ms: each request's over its documents
    ndcg_at_k, mrr     accuracy runs with labels: each answer's scores (mlperf_log_accuracy.json,
                       float64 in the documents' order, NaN for a document the server left out)
                       ranked and scored; `metric` and `value` are the dataset's chosen one

A ranking orders the documents by score, highest first, a tie by the documents' order; a
document left out (top_n) is not ranked. NDCG@k = DCG@k / IDCG@k with DCG@k = sum over the
first k ranks r of rel / log2(r + 1) (linear gain, as trec_eval and BEIR); a query with no
relevant document has no IDCG and is left out of the mean (`unscorable_queries`). MRR is the
mean of 1 / the rank of the first document with a label > 0 (0 when none is ranked). A
failed request's sample scores 0 in both.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from harness.results import folder
from harness.results.loadgen_log import read_accuracy_log
from harness.results.records import Records
from harness.results.stats import NS_PER_MS, distribution


def ranking(scores: np.ndarray) -> list[int]:
    """The documents' indices, best first; those without a score (NaN) left out."""
    keep = np.flatnonzero(~np.isnan(scores))
    order = np.lexsort((keep, -scores[keep]))  # last key first: score descending, then index
    return [int(i) for i in keep[order]]


def ndcg_at(ranked: list[int], relevance: list[float], k: int) -> float | None:
    ideal = sorted(relevance, reverse=True)[:k]
    idcg = sum(rel / math.log2(r + 2) for r, rel in enumerate(ideal))
    if idcg <= 0:
        return None
    return sum(relevance[i] / math.log2(r + 2) for r, i in enumerate(ranked[:k])) / idcg


def reciprocal_rank(ranked: list[int], relevance: list[float]) -> float:
    return next((1 / (r + 1) for r, i in enumerate(ranked) if relevance[i] > 0), 0.0)


def _scores(run_dir: Path, truth: dict[str, Any], dtype: str) -> dict[str, Any]:
    """NDCG@k and MRR of the logged answers, each sample once."""
    relevance, k = truth["relevance"], int(truth.get("k") or 10)
    answers: dict[int, bytes] = {}
    for e in read_accuracy_log(run_dir):
        answers.setdefault(int(e["qsl_idx"]), bytes.fromhex(e["data"]))
    ndcg: list[float] = []
    rr: list[float] = []
    failed = unscorable = 0
    for index, data in sorted(answers.items()):
        rel = relevance[index]
        if not data:  # a failed request: nothing ranked
            failed += 1
            ranked: list[int] = []
        else:
            ranked = ranking(np.frombuffer(data, dtype=dtype).astype(np.float64))
        value = ndcg_at(ranked, rel, k)
        if value is None:
            unscorable += 1
        else:
            ndcg.append(value)
        rr.append(reciprocal_rank(ranked, rel) if any(v > 0 for v in rel) else 0.0)
    # plain means, summed in the samples' order: each figure is reproducible by hand
    out = {"k": k, "ndcg_at_k": sum(ndcg) / len(ndcg) if ndcg else None,
           "mrr": sum(rr) / len(rr) if rr else None, "scored_queries": len(answers),
           "unscorable_queries": unscorable, "failed_queries": failed}
    chosen = truth.get("metric") or "ndcg"
    out["metric"] = f"ndcg@{k}" if chosen == "ndcg" else "mrr"
    out["value"] = out["ndcg_at_k"] if chosen == "ndcg" else out["mrr"]
    return out


def rerank_section(run_dir: Path, rec: Records | None, ours: dict[str, Any], mode: str,
                   child: dict[str, Any]) -> dict[str, Any] | None:
    """The section, or None for a run whose dataset is not a rerank dataset."""
    truth = folder.read_json(run_dir, folder.RANKING)
    if truth is None:
        return None
    out: dict[str, Any] = {"metric": None, "value": None, "documents": 0, "documents_per_s": None,
                           "requests_per_s": ours.get("throughput_per_s"), "documents_per_request": None}
    if rec is not None and len(rec):
        c = rec.columns
        ok = rec.ok()
        docs = np.asarray(truth["documents"], dtype=np.int64)[np.asarray(c["sample_index"])[ok]]
        latency = (c["complete_ns"] - c["issue_ns"])[ok]
        out["documents"] = int(docs.sum())
        duration = ours.get("duration_s")
        out["documents_per_s"] = out["documents"] / duration if duration else None
        out["documents_per_request"] = float(docs.mean()) if len(docs) else None
        out["latency_ms"] = distribution(latency, unit=NS_PER_MS)
        out["latency_per_document_ms"] = distribution(latency / np.maximum(docs, 1), unit=NS_PER_MS)
    fmt = child.get("response_format") or {}
    if truth.get("relevance") is not None and mode in ("AccuracyOnly", "SubmissionRun") and fmt.get("dtype"):
        out.update(_scores(run_dir, truth, fmt["dtype"]))
        out["rankings"] = folder.LOADGEN_ACCURACY
    elif mode in ("AccuracyOnly", "SubmissionRun"):
        out["rankings"] = folder.LOADGEN_ACCURACY  # kept for parity: no labels to score them by
        out["note"] = "the dataset has no relevance labels: the rankings are kept, not scored"
    else:
        out["rankings"] = None
        out["note"] = ("a performance run keeps no rankings: run --mode AccuracyOnly to score them"
                       if truth.get("relevance") is not None else "no relevance labels: the ranking is not scored")
    return out
