"""What a distributed run ran on, in a form two runs can be compared by: `harness rerun` of a
run with replicas or client shards asks for an equivalent cluster, and refuses with the
difference rather than producing figures that compare one cluster with another.

Equivalent means: the same transport, as many nodes with the same resources (CPUs and
GPUs each, in any order), the replicas or shards spread over as many of them, and Ray's
same minor version where Ray was used. Machines of another model with the same counts
pass: system.json and `harness compare` speak of those."""

from __future__ import annotations

from typing import Any


def shape(cluster: dict[str, Any] | None) -> dict[str, Any] | None:
    """The comparable part of cluster.json; None for a run in one process."""
    if not cluster:
        return None
    members = cluster.get("replicas") or cluster.get("shards") or []
    version = cluster.get("ray_version")
    return {
        "kind": "replicas" if cluster.get("replicas") else "client shards",
        "transport": cluster.get("transport") or "ray",
        "nodes": sorted(_resources(n.get("resources") or {}) for n in cluster.get("nodes") or []),
        "nodes_used": len({m.get("node_id") or m.get("hostname") for m in members}),
        "ray": ".".join(str(version).split(".")[:2]) if version else None,
    }


def difference(expected: dict[str, Any], actual: dict[str, Any] | None) -> list[str]:
    """What differs, in words; empty when the clusters are equivalent."""
    if actual is None:
        return [f"the original ran its {expected['kind']} on a cluster; this run has none"]
    out = []
    for key, what in (("kind", "scale-out"), ("transport", "transport"), ("ray", "Ray version")):
        if expected.get(key) != actual.get(key):
            out.append(f"{what} {actual.get(key)} (the original: {expected.get(key)})")
    if expected["nodes"] != actual["nodes"]:
        out.append(f"nodes {_nodes(actual['nodes'])} (the original: {_nodes(expected['nodes'])})")
    if expected["nodes_used"] != actual["nodes_used"]:
        out.append(f"{actual['kind']} on {actual['nodes_used']} node(s) (the original: {expected['nodes_used']})")
    return out


def _resources(r: dict[str, Any]) -> list[float]:
    return [float(r.get("CPU", 0)), float(r.get("GPU", 0))]


def describe(expected: dict[str, Any]) -> str:
    """A shape in words: "nodes 1 x 1 CPU 0 GPU, 3 x 2 CPU 1 GPU; replicas on 3 node(s)"."""
    return f"nodes {_nodes(expected['nodes'])}; {expected['kind']} on {expected['nodes_used']} node(s)"


def _nodes(nodes: list[list[float]]) -> str:
    counts: dict[tuple[float, ...], int] = {}
    for n in nodes:
        counts[tuple(n)] = counts.get(tuple(n), 0) + 1
    return ", ".join(f"{k} x {c:g} CPU {g:g} GPU" for (c, g), k in sorted(counts.items())) or "none"
