"""The rerank protocol against an in-test server whose relevance is known: every document
carries the score the server gives it (tests/support/rerank_server.py), so each ranking is
the one planted here, and NDCG@k and MRR are computed here by the textbook formula, apart
from the harness's scorer. No rerank server runs on this machine (llama-cpp-python has no
rerank route; vLLM and llama-server need a cross-encoder model).

Checked: each server shape decodes to the planted scores in the documents' order; each
broken answer is a failure counted by its reason; a 404 names the path tried and the
option to change; one LoadGen run (Offline, accuracy mode) gives documents/s against the
server's own count of documents and its own stamps, and the ranking's scores exactly.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from rich.console import Console

from backends.base import LoadContext, RankSample
from backends.http import HttpBackend, HttpOptions
from harness.config.run_config import RunConfig
from harness.errors import RequestFailed
from harness.results.loadgen_log import read_accuracy_log
from harness.results.records import read_records
from harness.run import runner
from tests.support.http_servers import ServerThread
from tests.support.rerank_server import RerankLog, planted, rerank_app
from tests.support.report_runs import SCHEMA

SCORES = [0.25, 0.875, 0.5, -1.5]


def _docs() -> tuple[str, ...]:
    return tuple(f"document {i} {planted(s)}" for i, s in enumerate(SCORES))


def _send(url: str, sample: RankSample, **options) -> list:
    backend = HttpBackend(HttpOptions(protocol="rerank", url=url, **options))
    backend.load(LoadContext(None, 1, "Offline"))

    async def go() -> list:
        try:
            return [c async for c in backend.stream(backend.prepare(sample))]
        finally:
            await backend.aclose()

    return asyncio.run(go())


@pytest.mark.parallel
@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank", "/v2/rerank"])
def test_each_server_shape_decodes_to_the_planted_scores_in_the_documents_order(path):
    with ServerThread(rerank_app()) as srv:
        chunks = _send(srv.url, RankSample("which document?", _docs()), path=path)
        (scores,) = [c.output for c in chunks if c.output is not None]
        assert scores.dtype == np.float64 and scores.tolist() == SCORES  # the server sent them sorted
        usage = [c.usage.input_tokens for c in chunks if c.usage is not None]
        assert usage == ([] if path == "/v2/rerank" else [2 + 4 * 3])  # Cohere bills search units, not tokens
        cut = _send(srv.url, RankSample("which document?", _docs()), path=path, top_n=2)
        (scores,) = [c.output for c in cut if c.output is not None]
        assert scores[[1, 2]].tolist() == [0.875, 0.5] and np.isnan(scores[[0, 3]]).all()  # the rest left out


@pytest.mark.parallel
def test_a_bare_array_of_index_and_score_is_read_too():
    """TEI's answer: [{"index", "score"}], sorted by score."""
    backend = HttpBackend(HttpOptions(protocol="rerank", url="http://127.0.0.1:9"))
    (chunk,) = backend._protocol.decode_against(b'[{"index": 1, "score": 0.75}, {"index": 0, "score": 0.5}]', 2)
    assert chunk.output.tolist() == [0.5, 0.75]


@pytest.mark.parallel
@pytest.mark.parametrize("fault, reason, detail", [
    ("dup_index", "rerank_index", "index 1 comes back twice"),
    ("index_range", "rerank_index", "index 4 is not one of the 4 documents' (0..3)"),
    ("count", "rerank_count", "3 results for 4 documents"),
    ("nan_score", "rerank_score", "document 1's score is nan, not a finite number"),
    ("string_score", "rerank_score", "document 1's score is '0.875', not a finite number"),
    ("not_json", "malformed_json", '{"results": [{"index": 0, "relevance_sc'),
])
def test_a_broken_answer_fails_its_request_with_its_reason(fault, reason, detail):
    with ServerThread(rerank_app()) as srv:
        with pytest.raises(RequestFailed) as e:
            _send(srv.url, RankSample(f"q fault={fault}", _docs()))
    assert (e.value.reason, e.value.detail) == (reason, detail)


@pytest.mark.parallel
def test_a_server_without_the_endpoint_names_the_path_tried_and_the_option():
    with ServerThread(rerank_app()) as srv:
        with pytest.raises(RequestFailed) as e:
            _send(srv.url, RankSample("q", _docs()), path="/v3/rerank")
    assert e.value.reason == "http_404"
    assert "no rerank endpoint at /v3/rerank" in e.value.detail and "--set path=/rerank" in e.value.detail
    assert "\n" not in e.value.detail


# --- one LoadGen run: documents/s and the ranking's score against the server's truth ------


def _textbook_ndcg(ranked: list[int], rel: list[float], k: int) -> float | None:
    dcg = sum(rel[d] / math.log2(rank + 1) for rank, d in enumerate(ranked[:k], start=1))
    idcg = sum(r / math.log2(rank + 1) for rank, r in enumerate(sorted(rel, reverse=True)[:k], start=1))
    return dcg / idcg if idcg > 0 else None


def _textbook_rr(ranked: list[int], rel: list[float]) -> float:
    for rank, d in enumerate(ranked, start=1):
        if rel[d] > 0:
            return 1.0 / rank
    return 0.0


def _labelled_set(path: Path, n: int = 24, k: int = 5) -> list[dict]:
    """Queries of 3 to 12 documents, each with a distinct planted score and a graded label
    (0-3) drawn apart from it, so the ranking is imperfect; query 5 has no relevant document."""
    rng = random.Random(45)
    rows = []
    for q in range(n):
        m = rng.randint(3, 12)
        scores = rng.sample(range(1000), m)
        rel = [0] * m if q == 5 else [rng.choice([0, 0, 1, 2, 3]) for _ in range(m)]
        if q != 5 and not any(rel):
            rel[rng.randrange(m)] = 1
        docs = [f"query {q} document {d} {planted(s / 1000)}" for d, s in enumerate(scores)]
        rows.append({"query": f"query {q}", "documents": docs, "relevance": rel, "_scores": [s / 1000 for s in scores]})
    path.write_text("".join(json.dumps({k2: v for k2, v in r.items() if k2 != "_scores"}) + "\n" for r in rows))
    return rows


def test_one_offline_run_gives_documents_per_s_against_the_servers_count_and_the_exact_scores(tmp_path: Path):
    k = 5
    data = tmp_path / "rerank.jsonl"
    rows = _labelled_set(data, k=k)
    log = RerankLog()
    with ServerThread(rerank_app(log)) as srv:
        outcome = runner.run(RunConfig(backend="http", scenario="Offline", mode="AccuracyOnly",
                                       dataset=f"rerank:{data},metric=ndcg,k={k}", min_duration_s=0,
                                       backend_options={"protocol": "rerank", "url": srv.url}), tmp_path / "results")
    s, run_dir = outcome.summary, outcome.run_dir
    assert s["status"] == "complete" and s["harness"]["failed"] == 0 and s["harness"]["samples"] == len(rows)
    rr = s["rerank"]

    # documents/s: the server's own count of documents served in the test, over the harness's span
    rec = read_records(run_dir).columns
    first_issue = int(rec["issue_ns"].min())
    timed = [r for r in log.served if r.arrival_ns >= first_issue]  # the warm-up came before the test
    assert len(timed) == len(rows) and len(log.served) == len(rows) + 1
    served_docs = sum(r.documents for r in timed)
    assert rr["documents"] == served_docs == sum(len(r["documents"]) for r in rows)
    assert rr["documents_per_s"] == served_docs / s["harness"]["duration_s"]
    assert rr["requests_per_s"] == s["harness"]["throughput_per_s"]
    # each request's server stamps sit inside the harness's: dispatch <= arrival <= send <= complete
    by_query = {r.query: r for r in timed}
    client_edge = []
    for idx, dispatch, complete, issue in zip(rec["sample_index"], rec["dispatch_ns"], rec["complete_ns"], rec["issue_ns"]):
        served = by_query[rows[int(idx)]["query"]]
        assert dispatch <= served.arrival_ns <= served.send_ns <= complete
        client_edge.append((served.arrival_ns - issue, complete - served.send_ns))
    server_span = max(r.send_ns for r in timed) - min(r.arrival_ns for r in timed)
    harness_span = s["harness"]["duration_s"] * 1e9
    server_rate = served_docs / (server_span / 1e9)
    # the harness's span holds the server's busy span, plus at most the client's own time at
    # its two edges (the slowest request's issue-to-arrival and send-to-complete, measured here)
    assert server_span <= harness_span <= server_span + max(a for a, _ in client_edge) + max(b for _, b in client_edge)
    assert rr["documents_per_s"] <= server_rate
    # the server's usage is each request's input tokens
    assert sorted(int(t) for t in rec["input_tokens"]) == sorted(r.prompt_tokens for r in timed)

    # the rankings kept: each logged answer is exactly the planted scores, in the documents' order
    logged = {int(e["qsl_idx"]): np.frombuffer(bytes.fromhex(e["data"]), np.float64) for e in read_accuracy_log(run_dir)}
    assert {i: v.tolist() for i, v in logged.items()} == {i: r["_scores"] for i, r in enumerate(rows)}

    # NDCG@k and MRR by the textbook, from the planted scores and labels
    ndcg, rrs = [], []
    for r in rows:
        ranked = sorted(range(len(r["_scores"])), key=lambda d: -r["_scores"][d])
        value = _textbook_ndcg(ranked, r["relevance"], k)
        if value is not None:
            ndcg.append(value)
        rrs.append(_textbook_rr(ranked, r["relevance"]))
    want_ndcg, want_mrr = sum(ndcg) / len(ndcg), sum(rrs) / len(rrs)
    assert rr["metric"] == f"ndcg@{k}" and rr["k"] == k
    assert rr["scored_queries"] == len(rows) and rr["unscorable_queries"] == 1 and rr["failed_queries"] == 0
    # equal to the last bit: both sum each query's gains in rank order and the queries in order
    assert rr["ndcg_at_k"] == want_ndcg and rr["value"] == rr["ndcg_at_k"]
    assert rr["mrr"] == want_mrr
    assert 0 < want_ndcg < 1 and 0 < want_mrr < 1  # an imperfect ranking: the score is not trivially 1

    errors = [f"{list(e.path)}: {e.message}" for e in jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).iter_errors(s)]
    assert errors == []
    (tmp_path / "figures.json").write_text(json.dumps({"documents_per_s": rr["documents_per_s"], "server_rate": server_rate,
                                                       "ndcg": rr["ndcg_at_k"], "want_ndcg": want_ndcg, "mrr": rr["mrr"],
                                                       "want_mrr": want_mrr, "documents": served_docs}))
    print("figures:", (tmp_path / "figures.json").read_text())

    # the report's rerank section, at 80 columns, names its metric
    from harness.report.terminal import render

    console = Console(width=80, record=True, color_system=None)
    render(s, console, str(run_dir))
    text = console.export_text()
    assert all(len(line.rstrip()) <= 80 for line in text.splitlines())
    assert "documents/s" in text and f"NDCG@{k} ({len(rows)} queries)" in text and "MRR" in text


def test_broken_answers_under_loadgen_are_counted_by_reason_and_score_zero(tmp_path: Path):
    faults = ["dup_index", "index_range", "count", "nan_score", "string_score", "not_json"]
    data = tmp_path / "faults.jsonl"
    # the first row is healthy: the warm-up request is sample 0, and a failed warm-up stops the run
    good = {"query": "healthy", "documents": ["a [score=0.5]", "b [score=0.25]"], "relevance": [1, 0]}
    lines = [good] + [{"query": f"q fault={f}", "documents": ["a [score=0.5]", "b [score=0.25]"], "relevance": [1, 0]}
                      for f in faults]
    data.write_text("".join(json.dumps(r) + "\n" for r in lines))
    with ServerThread(rerank_app()) as srv:
        s = runner.run(RunConfig(backend="http", scenario="Offline", mode="AccuracyOnly", dataset=f"rerank:{data},metric=mrr",
                                 min_duration_s=0, min_success_rate=0,
                                 backend_options={"protocol": "rerank", "url": srv.url}), tmp_path / "results").summary
    assert s["harness"]["failures_by_reason"] == {"rerank_index": 2, "rerank_count": 1, "rerank_score": 2, "malformed_json": 1}
    rr = s["rerank"]
    assert rr["failed_queries"] == 6 and rr["metric"] == "mrr" and rr["value"] == 1 / 7
    assert rr["documents"] == 2  # only the successful request's
