"""Several Ray nodes on this one host, as Ray's own tests prove multi-node behaviour
(`ray.cluster_utils.Cluster`): a head and worker nodes, each its own raylet with its own
node id, resources and loopback address (127.0.0.2 for the head, 127.0.0.3... for the
workers), joined by the harness through `distribute.address` as it would join a real
cluster.

Each worker node declares `gpus` logical GPUs. Ray's GPU resource is a count Ray
schedules by, not a device it checks, so `distribute.gpus_per_replica` places replicas
one a node here exactly as it would on GPU machines, with no GPU on this host (an actor
sees CUDA_VISIBLE_DEVICES and `ray.get_gpu_ids()`, which the synthetic backend ignores).
Each also carries `{"accel": 1}` and a `node:<ip>` resource, so a test can say which node.

Kept cheap: one or two logical CPUs a node, an 80 MB object store, no dashboard. Node
death is found within ~2 s (Ray's default health check takes ~15 s).
"""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

HEAD_IP = "127.0.0.2"
#: GCS's health check of every raylet: a SIGKILLed node is marked dead after ~4 x 0.5 s
FAST_DEATH = {"health_check_initial_delay_ms": 500, "health_check_period_ms": 500,
              "health_check_timeout_ms": 500, "health_check_failure_threshold": 4}
OBJECT_STORE = 80 * 1024 * 1024


@dataclass
class RayNodes:
    """A running multi-node cluster on this host: `address` is what distribute.address takes."""

    cluster: Any
    workers: list[Any] = field(default_factory=list)
    cpus: int = 2
    gpus: int = 1

    @property
    def address(self) -> str:
        return self.cluster.address

    def worker_ip(self, i: int) -> str:
        return f"127.0.0.{3 + i}"

    def add_worker(self, i: int) -> Any:
        node = self.cluster.add_node(num_cpus=self.cpus, num_gpus=self.gpus, resources={"accel": 1},
                                     object_store_memory=OBJECT_STORE, node_ip_address=self.worker_ip(i),
                                     include_dashboard=False)
        self.workers.append(node)
        return node

    def node_of(self, node_id: str) -> Any:
        for node in self.workers:
            if node.node_id == node_id:
                return node
        raise KeyError(f"no worker node {node_id}")

    def kill(self, node: Any, whole: bool = True) -> list[int]:
        """SIGKILL a worker node, as a machine that vanishes: its raylet, every process
        the raylet started (the workers: the replicas) and the node's agents, at once.
        With `whole` False only the raylet: its workers live on until they notice (~3 s
        here), as a raylet that crashes alone. GCS marks the node dead when its health
        checks fail. Returns the pids killed, the raylet's first."""
        import psutil

        raylet = node.all_processes["raylet"][0].process.pid
        pids = [raylet]
        if whole:
            pids += [c.pid for c in psutil.Process(raylet).children(recursive=True)]
            pids += [info.process.pid for infos in node.all_processes.values() for info in infos
                     if info.process.pid not in pids]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    def replace(self, node: Any) -> None:
        """Remove what is left of `node` and start a fresh worker on its address, so the
        next test finds the cluster's shape again."""
        i = self.workers.index(node)
        self.workers.remove(node)
        self.cluster.remove_node(node, allow_graceful=False)
        fresh = self.add_worker(i)
        self.workers.remove(fresh)
        self.workers.insert(i, fresh)


@contextmanager
def ray_nodes(workers: int = 3, cpus: int = 2, gpus: int = 1) -> Iterator[RayNodes]:
    """A head (1 CPU, no GPU) and `workers` worker nodes; every raylet and Ray process they
    started is killed on the way out, whether the tests passed or not."""
    from ray.cluster_utils import Cluster

    saved = {k: os.environ.get(k) for k in ("RAY_USAGE_STATS_ENABLED", "RAY_AUTH_MODE")}
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ["RAY_AUTH_MODE"] = "disabled"
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "object_store_memory": OBJECT_STORE, "node_ip_address": HEAD_IP, "include_dashboard": False,
        "_system_config": FAST_DEATH})
    nodes = RayNodes(cluster, cpus=cpus, gpus=gpus)
    try:
        for i in range(workers):
            nodes.add_worker(i)
        cluster.wait_for_nodes()
        yield nodes
    finally:
        cluster.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
