"""summary.json's `replicas` and `client_shards`: what each backend replica or client shard
served (docs/distribute.md).

The records name the worker of each sample: a tensor SUT's worker thread (cluster.json
says which replica it sent its calls to) or the client shard that sent the request.
Latency is end to end (issue to complete), the harness's figure, so the rows add up to
the run's. A shard's row adds what sharding cost: the hops to it and back (child.json),
its clock against the driver's (cluster.json) and its own loop's lag."""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.results.records import Records
from harness.results.stats import NS_PER_MS, distribution


def replica_summary(rec: Records | None, cluster: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """One entry per replica: samples, failures, latency; None for a run without replicas."""
    if not cluster or not cluster.get("replicas"):
        return None
    worker, ok, latency = _columns(rec)
    lost = set(cluster.get("lost") or [])
    return [{
        "replica": replica["replica"],
        "node_id": replica.get("node_id"),
        "address": replica.get("address"),
        "pid": replica.get("pid"),
        "gpu_ids": replica.get("gpu_ids"),
        **_served(np.isin(worker, replica.get("workers") or []), ok, latency),
        "lost": replica["replica"] in lost,
    } for replica in cluster["replicas"]]


def shard_summary(rec: Records | None, cluster: dict[str, Any] | None,
                  child: dict[str, Any]) -> dict[str, Any] | None:
    """The client shards: how they were reached, and one entry per shard (samples,
    failures, latency, hops, clock, loop lag); None for a run without shards."""
    if not cluster or not cluster.get("shards"):
        return None
    worker, ok, latency = _columns(rec)
    figures = {f["shard"]: f for f in child.get("shards") or []}
    out = []
    for shard in cluster["shards"]:
        i = shard["shard"]
        clock = shard.get("clock") or {}
        start = clock.get("start") or {}
        fig = figures.get(i, {})
        out.append({
            "shard": i,
            "hostname": shard.get("hostname"),
            "node_id": shard.get("node_id"),
            "address": shard.get("address"),
            "pid": shard.get("pid"),
            **_served(worker == i, ok, latency),
            "hop_to_shard_us": _brief(fig.get("hop_to_shard_us")),
            "hop_back_us": _brief(fig.get("hop_back_us")),
            "loop_lag_ms": _brief(fig.get("loop_lag_ms")),
            "clock": {
                "same_clock": clock.get("same_clock"),
                "offset_us": start["offset_ns"] / 1e3 if "offset_ns" in start else None,
                "uncertainty_us": start["uncertainty_ns"] / 1e3 if "uncertainty_ns" in start else None,
                "applied_us": clock["applied_offset_ns"] / 1e3 if clock.get("applied_offset_ns") is not None else None,
                "drift_us": clock["drift_ns"] / 1e3 if clock.get("drift_ns") is not None else None,
            },
            "lost": bool(shard.get("lost")),
        })
    return {"count": len(out), "transport": cluster.get("transport"),
            "hops_us": child.get("shard_hops_us"), "shards": out}


def _columns(rec: Records | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(worker, ok, issue-to-complete ns) of every record."""
    if rec is None or not len(rec):  # a run that crashed before its first record
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=bool), np.zeros(0)
    c = rec.columns
    return np.asarray(c["worker"]), rec.ok(), np.asarray(c["complete_ns"] - c["issue_ns"])


def _served(rows: np.ndarray, ok: np.ndarray, latency: np.ndarray) -> dict[str, Any]:
    lat = distribution(latency[rows & ok], NS_PER_MS, (50, 99))
    return {"samples": int(rows.sum()), "failed": int((rows & ~ok).sum()),
            "latency_ms": {k: lat[k] for k in ("p50", "p99", "mean")}}


def _brief(d: dict[str, Any] | None) -> dict[str, Any] | None:
    return {k: d.get(k) for k in ("p50", "p99", "max")} if d else None
