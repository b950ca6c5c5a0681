"""The report's rerank section: requests/s beside documents/s, latency per request and per
document, and the ranking's score named by its metric (summary.json's `rerank`,
harness.results.rerank)."""

from __future__ import annotations

from typing import Any

from harness.report.figures import Table, ms, num, rate


def rerank_table(section: dict[str, Any]) -> Table:
    rows = [["requests/s", rate(section.get("requests_per_s"))],
            ["documents/s", rate(section.get("documents_per_s"))],
            ["documents per request", num(section.get("documents_per_request"), 1)]]
    for key, name in (("latency_ms", "latency per request"), ("latency_per_document_ms", "latency per document")):
        dist = section.get(key) or {}
        if dist.get("p50") is not None:
            rows.append([f"{name} p50/p99 (ms)", f"{ms(dist['p50'])} / {ms(dist['p99'])}"])
    if section.get("value") is not None:
        metric = section["metric"].upper()
        rows.append([f"{metric} ({section['scored_queries']:,} queries)", f"{section['value']:.4f}"])
        other = ("mrr", "MRR") if section["metric"].startswith("ndcg") else ("ndcg_at_k", f"NDCG@{section['k']}")
        if section.get(other[0]) is not None:
            rows.append([other[1], f"{section[other[0]]:.4f}"])
    return ["figure", "harness"], rows


def rerank_notes(section: dict[str, Any]) -> list[str]:
    notes = []
    if n := section.get("unscorable_queries"):
        notes.append(f"{n} {'query has' if n == 1 else 'queries have'} no relevant document: left out of NDCG")
    if n := section.get("failed_queries"):
        notes.append(f"{n} failed {'request scores' if n == 1 else 'requests score'} 0")
    if section.get("note"):
        notes.append(section["note"])
    elif section.get("rankings"):
        notes.append(f"rankings kept in {section['rankings']}")
    return notes
