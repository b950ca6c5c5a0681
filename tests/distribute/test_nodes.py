"""Replicas and client shards across several Ray nodes on this host (tests/support/ray_nodes.py:
a head and 3 workers, each its own raylet, node id and loopback address, each worker with
1 logical GPU: Ray's GPU count standing for a GPU machine's, so `gpus_per_replica` places
one replica a node as it would there). The harness joins them by `distribute.address`.

They spread over the nodes and say where each ran (cluster.json, summary.json); a request
no node can hold is refused in one line; a node lost mid-run fails only its replica's
calls, with Ray's reason, and the others finish the run."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import numpy as np
import pytest

import ray  # noqa: F401 - the ray extra, which make test installs: these fail rather than skip without it

from harness.config.run_config import RunConfig
from harness.errors import ConfigError
from harness.results.records import read_records
from harness.run import runner
from tests.support.http_servers import ServerThread, Timing, openai_app
from tests.support.ray_nodes import HEAD_IP, RayNodes

TOKEN_RUN = dict(use_token_latencies=True, ttft_latency_ms=5000, tpot_latency_ms=1000)


def _replicas(nodes: RayNodes, **kw: Any) -> RunConfig:
    base: dict[str, Any] = dict(backend="synthetic", backend_options={"service_time_ms": 2}, max_batch=4,
                                min_duration_s=1.0)
    distribute = {"address": nodes.address, "replicas": 3, "gpus_per_replica": 1, **kw.pop("distribute", {})}
    return RunConfig(**{**base, **kw, "distribute": distribute})


def _cluster(run_dir) -> dict[str, Any]:
    return json.loads((run_dir / "cluster.json").read_text())


def test_replicas_spread_one_a_node_by_their_gpus_and_say_where(nodes, tmp_path):
    out = runner.run(_replicas(nodes, scenario="Offline", offline_expected_qps=3000), tmp_path)
    s, cluster = out.summary, _cluster(out.run_dir)
    assert s["status"] == "complete" and s["harness"]["success_rate"] == 1.0
    # cluster.json: every node, its own id, address and resources
    by_id = {n["node_id"]: n for n in cluster["nodes"]}
    assert len(by_id) == 4
    assert sorted(n["address"] for n in cluster["nodes"]) == [HEAD_IP] + [nodes.worker_ip(i) for i in range(3)]
    assert sorted(n["resources"].get("GPU", 0) for n in cluster["nodes"]) == [0, 1, 1, 1]
    # each replica on its own worker node, holding that node's one GPU
    placed = [r["node_id"] for r in cluster["replicas"]]
    assert len(set(placed)) == 3 and all(by_id[n]["resources"]["GPU"] == 1 for n in placed)
    assert all(r["address"] == by_id[r["node_id"]]["address"] and r["gpu_ids"] == ["0"] for r in cluster["replicas"])
    # summary.json names each replica's node, and every one served
    assert [r["node_id"] for r in s["replicas"]] == placed
    assert all(r["samples"] > 0 for r in s["replicas"])
    assert sum(r["samples"] for r in s["replicas"]) == s["harness"]["samples"]


def test_client_shards_spread_one_a_node_and_say_where(nodes, tmp_path):
    t = Timing(ttft_ms=20, tpot_ms=5, tokens=8)
    with ServerThread(openai_app(t)) as srv:
        out = runner.run(RunConfig(
            backend="http", scenario="Offline", dataset="synthetic:isl=8,osl=8,n=24",
            backend_options={"protocol": "openai-chat", "url": srv.url + "/v1", "max_in_flight": 12},
            min_duration_s=0.1, min_query_count=24, offline_expected_qps=1,
            distribute={"address": nodes.address, "client_nodes": 3}, **TOKEN_RUN), tmp_path)
    s, cluster = out.summary, _cluster(out.run_dir)
    assert s["status"] == "complete" and s["harness"]["success_rate"] == 1.0
    assert cluster["transport"] == "ray" and len(cluster["nodes"]) == 4
    placed = [sh["node_id"] for sh in cluster["shards"]]
    addresses = {n["node_id"]: n["address"] for n in cluster["nodes"]}
    assert len(set(placed)) == 3  # STRICT_SPREAD: one node apiece
    assert all(sh["address"] == addresses[sh["node_id"]] for sh in cluster["shards"])
    shards = s["client_shards"]["shards"]
    assert [sh["node_id"] for sh in shards] == placed and all(sh["samples"] > 0 for sh in shards)
    # one host, one boot: the nodes share the driver's clock, so no offset is applied
    assert all(sh["clock"]["same_clock"] and sh["clock"]["applied_offset_ns"] == 0 for sh in cluster["shards"])


@pytest.mark.parametrize("distribute,line", [
    ({"replicas": 1, "gpus_per_replica": 2},  # 3 GPUs in all, but 1 a node
     "distribute: each of the 1 replicas needs 1 CPU and 2 GPU on one node, but no node of the Ray cluster's 4 "
     "has that (the most on one node: 2 CPU, 1 GPU); lower distribute.replicas"),
    ({"replicas": 64, "gpus_per_replica": 0},  # more than the cluster in all, as on one node
     "distribute: 64 replicas x 1 CPU = 64 CPU, but the Ray cluster has 7; lower distribute.replicas"),
], ids=["more-than-one-node-has", "more-than-the-cluster-has"])
def test_a_request_no_node_can_hold_is_one_line_before_the_test(nodes, tmp_path, distribute, line):
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as refused:
        runner.run(_replicas(nodes, scenario="Offline", distribute=distribute), tmp_path)
    assert str(refused.value).startswith(line) and "\n" not in str(refused.value)
    assert time.monotonic() - t0 < 60  # refused, not waited for (Ray would wait forever)
    assert not list(tmp_path.glob("*/mlperf_log_summary.txt"))  # no test ran


@pytest.mark.parametrize("whole", [True, False], ids=["machine", "raylet"])
def test_a_node_lost_mid_run_fails_only_its_replicas_calls(nodes, tmp_path, whole):
    """SIGKILL one worker node 1.5 s into the timed test: the whole node (raylet, workers,
    agents), or its raylet alone (its replica's process then answers for a few seconds
    more). Its replica's calls fail with Ray's account of the node's death; the replicas
    on the nodes that lived serve the rest, with every record kept."""
    config = _replicas(nodes, scenario="Server", target_qps=100, min_duration_s=4, min_query_count=300,
                       min_success_rate=0)
    killed: list[tuple[Any, int]] = []

    def kill() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for path in tmp_path.glob("*/cluster.json"):
                try:
                    node_id = json.loads(path.read_text())["replicas"][1]["node_id"]
                except (ValueError, KeyError, IndexError):
                    continue
                time.sleep(1.5)
                node = nodes.node_of(node_id)
                killed.append((node, nodes.kill(node, whole)))
                return
            time.sleep(0.05)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    try:
        out = runner.run(config, tmp_path)
        thread.join()
    finally:
        thread.join(timeout=5)
        for node, _ in killed:
            nodes.replace(node)
    assert killed
    s, cluster = out.summary, _cluster(out.run_dir)
    assert s["status"] == "complete"  # on_loss: continue
    assert s["harness"]["samples"] == s["loadgen"]["query_count"]  # every sample completed exactly once
    lost = [r for r in s["replicas"] if r["lost"]]
    assert [r["replica"] for r in lost] == [1] and cluster["lost"] == [1]
    # The whole node: its replica's in-flight calls fail, no more. The raylet alone: its
    # replica's process answers until it notices (~3 s), so the kill may cost no call;
    # the replica is marked lost all the same, when Ray refuses LoadGen's unload.
    assert (1 if whole else 0) <= lost[0]["failed"] <= 2 * 4
    assert s["harness"]["failures_by_reason"] == ({"ReplicaLost": lost[0]["failed"]} if lost[0]["failed"] else {})
    lived = [r for r in s["replicas"] if not r["lost"]]
    assert all(r["failed"] == 0 for r in lived)
    if whole:
        assert all(r["samples"] > lost[0]["samples"] for r in lived)
    rec = read_records(out.run_dir).columns
    errors = {str(e) for e, st in zip(rec["error"], rec["status"]) if st != "ok"}
    where = cluster["replicas"][1]
    # Ray's reason, and its final word: the node died (not "unavailable", its word until it knows)
    assert all(e.startswith(f"ReplicaLost: replica 1 (pid {where['pid']} on {where['address']}) died: The actor "
                            "died because its node has died.") for e in errors), errors
    # no record lost from the nodes that lived: each of their samples is in the records, ok
    worker = np.asarray(rec["worker"])
    ok = np.asarray(rec["status"]) == "ok"
    for r, replica in zip(s["replicas"], cluster["replicas"]):
        mine = np.isin(worker, replica["workers"])
        assert int(mine.sum()) == r["samples"]
        if not r["lost"]:
            assert ok[mine].all()
    assert len(worker) == s["loadgen"]["query_count"]


def test_a_run_without_an_address_starts_its_own_ray_beside_a_running_cluster(nodes, tmp_path):
    """`ray.init()` with no address joins the last cluster started on this host (the one
    `ray start` or this fixture recorded in /tmp/ray/ray_current_cluster). A run without
    distribute.address promises a private local Ray: it must start one, not join the
    cluster that happens to run here."""
    import ray

    assert ray._private.utils.read_ray_address() == nodes.cluster.gcs_address  # the trap is set
    config = RunConfig(backend="synthetic", backend_options={"service_time_ms": 2}, max_batch=4, min_duration_s=0.5,
                       scenario="Offline", offline_expected_qps=1000, distribute={"replicas": 2})
    out = runner.run(config, tmp_path)
    cluster = _cluster(out.run_dir)
    assert out.summary["status"] == "complete" and out.summary["harness"]["success_rate"] == 1.0
    theirs = {nodes.cluster.head_node.node_id, *(w.node_id for w in nodes.workers)}
    assert len(cluster["nodes"]) == 1 and cluster["nodes"][0]["node_id"] not in theirs, cluster["nodes"]


def test_rerun_of_a_three_node_run_on_two_nodes_is_refused_naming_the_difference(nodes, tmp_path):
    """A run of 3 replicas, one a worker node; then one worker leaves the cluster (removed,
    as a scaled-down cluster would be) and `harness rerun` is asked to repeat the run there.
    It names what differs from the original cluster and runs nothing."""
    import subprocess
    import sys

    first = runner.run(_replicas(nodes, scenario="Offline", offline_expected_qps=3000), tmp_path / "a")
    assert first.summary["status"] == "complete"
    leaving = nodes.workers[2]
    nodes.cluster.remove_node(leaving, allow_graceful=True)
    nodes.workers.remove(leaving)
    try:
        ray.init(address=nodes.address, log_to_driver=False)
        try:  # until GCS has marked the node dead: the rerun must see the 2-worker cluster
            deadline = time.monotonic() + 30
            while sum(n["Alive"] for n in ray.nodes()) != 3 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert sum(n["Alive"] for n in ray.nodes()) == 3
        finally:
            ray.shutdown()
        refused = subprocess.run([sys.executable, "-m", "harness", "rerun", str(first.run_dir), "--output-dir",
                                  str(tmp_path / "b")], capture_output=True, text=True, timeout=300)
    finally:
        nodes.add_worker(2)
        nodes.cluster.wait_for_nodes()
    assert refused.returncode == 2, refused.stdout + refused.stderr
    # a cluster that cannot even place the original's 3 replicas: refused by placement,
    # saying first what the rerun needs
    assert refused.stderr.strip().splitlines()[-1].startswith(
        "error: harness rerun needs a cluster equivalent to the original's (nodes 1 x 1 CPU 0 GPU, 3 x 2 CPU 1 GPU; "
        "replicas on 3 node(s)); this one cannot place the run: distribute: 3 replicas x 1 GPU = 3 GPU, but the Ray "
        "cluster has 2;"), refused.stderr
    assert not list((tmp_path / "b").glob("2*"))  # nothing ran
