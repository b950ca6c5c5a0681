"""summary.json's `replicas`: what each backend replica served (distribute.replicas).

The records name the worker thread of each call; cluster.json says which replica each
worker sent its calls to and where that replica ran. Latency is end to end (issue to
complete), the harness's figure, so the replicas' rows add up to the run's."""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.results.records import Records
from harness.results.stats import NS_PER_MS, distribution


def replica_summary(rec: Records | None, cluster: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """One entry per replica: samples, failures, latency; None for a run without replicas."""
    if not cluster or not cluster.get("replicas"):
        return None
    if rec is None or not len(rec):  # a run that crashed before its first record
        worker, ok, latency = np.zeros(0, dtype=np.int32), np.zeros(0, dtype=bool), np.zeros(0)
    else:
        c = rec.columns
        worker, ok, latency = np.asarray(c["worker"]), rec.ok(), np.asarray(c["complete_ns"] - c["issue_ns"])
    lost = set(cluster.get("lost") or [])
    out = []
    for replica in cluster["replicas"]:
        rows = np.isin(worker, replica.get("workers") or [])
        served = rows & ok
        lat = distribution(latency[served], NS_PER_MS, (50, 99))
        out.append({
            "replica": replica["replica"],
            "address": replica.get("address"),
            "pid": replica.get("pid"),
            "gpu_ids": replica.get("gpu_ids"),
            "samples": int(rows.sum()),
            "failed": int((rows & ~ok).sum()),
            "latency_ms": {k: lat[k] for k in ("p50", "p99", "mean")},
            "lost": replica["replica"] in lost,
        })
    return out
