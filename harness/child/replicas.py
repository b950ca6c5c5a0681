"""Backend replicas as Ray actors, served by the tensor SUT's worker threads.

LoadGen stays in the child, one test per process; the backend does not. With
`distribute.replicas: N` the child starts (or joins) a Ray cluster and places N actors,
each holding one backend loaded with the run's options (`load` and the warm-up once per
actor, `describe()` per actor). The tensor SUT then runs `N x in_flight` worker threads;
worker `w` sends its batches to replica `w % N` and blocks in `ray.get`, which releases
the GIL, so completion to LoadGen, the records and every timestamp stay in this process
on the records' clock. A call's service time (dispatch -> complete) therefore includes
the round trip to the actor; benchmarks/bench_ray.py measures it. Each replica builds the
run's dataset itself (its fingerprint checked) and loads what LoadGen loads, so a call
carries sample indices and the replica gathers the batch: data lives with the system
under test, as in MLPerf's network division, and no tensor crosses Ray on the timed path.

A replica that dies (its process killed, its node lost) fails the calls it had in flight:
those samples are completed to LoadGen and recorded as errors with the reason. Its
workers then stop; the run goes on with the other replicas (`on_loss:
continue`) or ends as incomplete (`stop`, and always once no replica is left: LoadGen
would wait forever for the queued samples).

Where the replicas ran (node, address, process, GPUs) and the cluster's facts (Ray's
version, its nodes and their resources) are returned by `cluster()` for cluster.json.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from typing import Any

from backends.base import BackendDescription, LoadContext, TensorSpec
from harness.child import ray_cluster
from harness.child.direct_channel import ChannelClient, ChannelLost, ChannelServer
from harness.child.ray_cluster import START_TIMEOUT_S
from harness.config.run_config import Distribute, RunConfig
from harness.data.datasets import HeldElsewhere
from harness.errors import ConfigError, RunError


class ReplicaLost(Exception):
    """A replica's actor died: the calls it had in flight fail with this reason."""


class SampleIndices(tuple):
    """What the tensor SUT's `dataset.batch(indices)` gives a replica's worker: the indices
    themselves. The replica holds the dataset and gathers the batch where it runs, so a
    call carries a few integers, not the batch's tensors (128 KB for 64 samples of 512
    floats, which Ray moves through its object store)."""


class ReplicaActor:
    """One backend instance inside a Ray actor (wrapped with `ray.remote` at start), with
    its own copy of the run's dataset."""

    def __init__(self, backend: str, options: dict[str, Any]) -> None:
        from harness.config import registry

        cls = registry.get(backend)
        self.backend = cls(cls.Options(**options))
        self.dataset: Any = None
        # The backend runs one call at a time, whichever way the call came (Ray's own
        # thread, or a direct channel's thread per connection: direct_channel).
        self._lock = threading.Lock()
        self._channel: ChannelServer | None = None

    def build_dataset(self, spec: str, seed: int) -> str:
        """The run's dataset, built here from the same spec and seed; its fingerprint."""
        from harness.data.datasets import build_tensor_dataset

        self.dataset = build_tensor_dataset(spec, self.backend.inputs(), seed)
        return self.dataset.fingerprint()

    def load_samples(self, indices: list[int]) -> None:
        with self._lock:
            self.dataset.load(indices)

    def unload_samples(self, indices: list[int]) -> None:
        with self._lock:
            self.dataset.unload(indices)

    def _predict_indices(self, indices: list[int]) -> Any:
        return self.backend.predict(self.dataset.batch(list(indices)))

    def predict_indices(self, indices: list[int]) -> Any:
        with self._lock:
            return self._predict_indices(indices)

    def open_channel(self, key: bytes) -> tuple[str, int]:
        """Listen for the driver's workers on this node's address (direct_channel)."""
        self._channel = ChannelServer(ray_cluster.where()["address"], key, self._predict_indices, self._lock)
        return self._channel.address

    def load(self, ctx: LoadContext) -> float:
        t0 = time.perf_counter()
        self.backend.load(ctx)
        return time.perf_counter() - t0

    def inputs(self) -> list[TensorSpec]:
        return self.backend.inputs()

    def batches_freely(self) -> bool:
        return self.backend.batches_freely()

    def predict(self, batch: dict[str, Any]) -> Any:
        return self.backend.predict(batch)

    def warmup(self, batch: dict[str, Any]) -> None:
        self.backend.predict(batch)
        self.backend.warmup(batch)

    def describe(self) -> BackendDescription:
        return self.backend.describe()

    def where(self) -> dict[str, Any]:
        return ray_cluster.where()

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        with self._lock:
            self.backend.close()


class ReplicaClient:
    """What one worker thread calls: a replica's `predict`, in this process.

    A backend exception inside the actor comes back as itself (the records say
    "ValueError: ...", as for a local backend); the actor's death is `ReplicaLost`, and
    `lost` keeps the reason. With a channel (replica_calls: direct) the timed calls,
    sample indices, go over it; a whole batch (the child's first call) still goes by Ray."""

    def __init__(self, replica: int, actor: Any, where: dict[str, Any],
                 channel: tuple[tuple[str, int], bytes] | None = None) -> None:
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        self._get, self._task_error, self._actor_error = ray.get, RayTaskError, RayActorError
        self.replica = replica
        self._actor = actor
        self._where = where
        self.lost: str | None = None
        self._channel = None if channel is None else ChannelClient(*channel, alive=self._check_alive)

    def predict(self, batch: dict[str, Any] | SampleIndices) -> Any:
        try:
            if isinstance(batch, SampleIndices):
                if self._channel is not None:
                    return self._channel.call(list(batch))
                return self._get(self._actor.predict_indices.remote(batch))
            return self._get(self._actor.predict.remote(batch))
        except self._task_error as e:
            raise _backend_error(e) from None
        except self._actor_error as e:
            raise self.mark_lost(e) from None
        except ChannelLost as e:
            # Ray knows why the actor ended; the connection only that it closed.
            raise self.mark_lost(self._death(10.0) or e) from None

    def _death(self, timeout: float) -> Exception | None:
        """Why Ray says the replica's actor is dead; None while it answers."""
        from ray.exceptions import ActorUnavailableError, GetTimeoutError

        # "Unavailable" is Ray's word while it does not yet know: the worker's socket has
        # closed but its node is not yet declared dead. Ask again until Ray says why (its
        # node died, its process was killed), or the time is up.
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._get(self._actor.where.remote(), timeout=max(0.1, deadline - time.monotonic()))
            except ActorUnavailableError as e:
                if time.monotonic() >= deadline:
                    return e
                time.sleep(0.2)
                continue
            except self._actor_error as e:
                return e
            except GetTimeoutError:
                return ChannelLost(f"neither the call nor Ray's ping answered in {timeout:g} s")
            return None

    def _check_alive(self) -> None:
        """Raises ReplicaLost when the replica's actor is dead (a call waiting on its channel)."""
        death = self._death(60.0)
        if death is not None:
            raise self.mark_lost(death)

    def mark_lost(self, e: Exception) -> ReplicaLost:
        """Record why the replica is gone (Ray's reason, with its pid and node) and return the
        error its calls raise: the pool marks a replica lost through here too."""
        self.lost = (f"replica {self.replica} (pid {self._where.get('pid')} on {self._where.get('address')}) "
                     f"died: {ray_reason(e)}")
        return ReplicaLost(self.lost)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()


#: the lines of Ray's ActorDiedError that name the actor rather than say why it died
_ACTOR_FIELDS = re.compile(r"^\t(class_name|actor_id|pid|name|namespace|ip): ")


def ray_reason(e: Exception) -> str:
    """Ray's reason for an actor's death, on one line. Its ActorDiedError opens with "The
    actor died unexpectedly before finishing this task." and the actor's fields; the why
    ("...because its node has died. Node Id: ...", "...worker process has died") follows."""
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    if not lines:
        return type(e).__name__
    why = [line.strip() for line in lines[1:] if not _ACTOR_FIELDS.match(line)]
    return (" ".join(why) if why else lines[0])[:300]


def _backend_error(e: Exception) -> Exception:
    """The backend's own exception that a Ray task raised inside an actor (ModelError,
    ValueError...), so it reads as it would from a local backend."""
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, Exception) else RuntimeError(str(e).splitlines()[0])


class ReplicaPool:
    """N backend replicas on Ray, presented to the child as one backend (load, inputs,
    warm-up, describe, close) plus one `ReplicaClient` per worker thread."""

    def __init__(self, config: RunConfig, options: Any) -> None:
        self._backend = config.backend
        self._dataset_spec, self._seed = config.dataset, config.seed
        self.spec: Distribute = config.distribute
        self._options = options.model_dump()
        self._actors: list[Any] = []
        self.where: list[dict[str, Any]] = []
        self.load_s: list[float] = []
        self._clients: list[ReplicaClient] = []
        self._started_ray = False
        self._pg: Any = None
        self._cluster: dict[str, Any] = {}

    @property
    def workers(self) -> int:
        return self.spec.replicas * self.spec.in_flight

    @property
    def threads(self) -> int:
        return max(1, int(self.spec.cpus_per_replica))

    # --- the backend's face, as the child uses it ------------------------------------
    def load(self, ctx: LoadContext) -> None:
        ray = ray_cluster.ray_module()
        self._started_ray = ray_cluster.init(ray, self.spec)
        self._cluster = ray_cluster.facts(ray)
        ray_cluster.check_room(self._cluster, "replicas", self.spec.replicas,
                               {"CPU": self.spec.cpus_per_replica, "GPU": self.spec.gpus_per_replica},
                               "lower distribute.replicas or distribute.cpus_per_replica/gpus_per_replica")
        options: dict[str, Any] = {"num_cpus": self.spec.cpus_per_replica, "num_gpus": self.spec.gpus_per_replica}
        if self.spec.placement != "none":
            from ray.util.placement_group import placement_group
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            bundle = {"CPU": self.spec.cpus_per_replica, **({"GPU": self.spec.gpus_per_replica} if self.spec.gpus_per_replica else {})}
            self._pg = placement_group([bundle] * self.spec.replicas, strategy=self.spec.placement)
            if not self._pg.wait(timeout_seconds=START_TIMEOUT_S):
                raise ConfigError(f"Ray could not reserve {self.spec.replicas} x {bundle} as a {self.spec.placement} "
                                  f"placement group in {START_TIMEOUT_S:.0f} s; the cluster has "
                                  f"{self._cluster['resources']}")
        remote = ray.remote(max_restarts=0, max_task_retries=0)(ReplicaActor)
        for i in range(self.spec.replicas):
            extra = dict(options)
            if self._pg is not None:
                extra["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    placement_group=self._pg, placement_group_bundle_index=i)
            self._actors.append(remote.options(**extra).remote(self._backend, self._options))
        replica_ctx = LoadContext(ctx.model, ctx.max_batch, ctx.scenario, ctx.seed, self.threads)
        try:
            self.load_s = ray.get([a.load.remote(replica_ctx) for a in self._actors], timeout=START_TIMEOUT_S)
            self.where = ray.get([a.where.remote() for a in self._actors], timeout=START_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError as e:
            raise ConfigError(f"{self.spec.replicas} replicas were not placed and loaded in {START_TIMEOUT_S:.0f} s; "
                              f"the cluster has {self._cluster['resources']}") from e
        except ray.exceptions.RayTaskError as e:
            raise _backend_error(e) from None  # the backend's own error at load (ModelError...): one line
        # Described now: the child asks after the test, once the replicas are closed.
        described = ray.get([a.describe.remote() for a in self._actors], timeout=START_TIMEOUT_S)
        self._described: dict[str, Any] = {**described[0], "replicas": [{"replica": i, **d} for i, d in enumerate(described)]}
        channels: list[Any] = [None] * self.spec.replicas
        if self.spec.replica_calls == "direct":
            key = secrets.token_bytes(32)
            addresses = ray.get([a.open_channel.remote(key) for a in self._actors], timeout=START_TIMEOUT_S)
            channels = [(address, key) for address in addresses]
        n = self.spec.replicas
        self._clients = [ReplicaClient(w % n, self._actors[w % n], self.where[w % n], channels[w % n])
                         for w in range(self.workers)]

    def inputs(self) -> list[TensorSpec]:
        return ray_cluster.ray_module().get(self._actors[0].inputs.remote())

    def hold(self, dataset: Any) -> ReplicatedDataset:
        """Every replica builds the run's dataset too (checked against `dataset`'s
        fingerprint); the SUT's batches then name samples by index (SampleIndices)."""
        ray = ray_cluster.ray_module()
        prints = ray.get([a.build_dataset.remote(self._dataset_spec, self._seed) for a in self._actors],
                         timeout=START_TIMEOUT_S)
        want = dataset.fingerprint()
        for i, fp in enumerate(prints):
            if fp != want:
                raise ConfigError(f"replica {i} built a different dataset (sha256 {fp[:12]} against {want[:12]}): the "
                                  "dataset must read the same on every node")
        return ReplicatedDataset(dataset, self)

    def load_samples(self, indices: list[int]) -> None:
        self._on_live("load_samples", indices)
        if len(self.lost_replicas()) == self.spec.replicas:
            raise RunError(f"{self._clients[0].lost}; no replica is left to serve the test")

    def unload_samples(self, indices: list[int]) -> None:
        self._on_live("unload_samples", indices)

    def _on_live(self, method: str, indices: list[int]) -> None:
        """LoadGen's load or unload on every replica not known lost. One that Ray reports
        dead is marked lost (its workers stop before their next call) rather than failing
        the run: a node's raylet can die while its replica's process still answers the
        direct channel for a few seconds, so this call may be the first to hear of it
        (the child used to end there, at the unload after the test, and Ray's driver then
        crashed it with SIGSEGV)."""
        ray = ray_cluster.ray_module()
        lost = self.lost_replicas()
        calls = {i: getattr(a, method).remote(indices) for i, a in enumerate(self._actors) if i not in lost}
        for i, ref in calls.items():
            try:
                ray.get(ref, timeout=START_TIMEOUT_S)
            except ray.exceptions.RayActorError as e:
                mine = [c for c in self._clients if c.replica == i]
                reason = mine[0].mark_lost(e).args[0]
                for client in mine:
                    client.lost = reason

    def batches_freely(self) -> bool:
        return all(ray_cluster.ray_module().get([a.batches_freely.remote() for a in self._actors]))

    def predict(self, batch: dict[str, Any]) -> Any:
        return self._clients[0].predict(batch)

    def warmup(self, batch: dict[str, Any]) -> None:
        """Every replica warms up, not just the one that answered the child's first call."""
        ray = ray_cluster.ray_module()
        try:
            ray.get([a.warmup.remote(batch) for a in self._actors], timeout=START_TIMEOUT_S)
        except ray.exceptions.RayTaskError as e:
            raise _backend_error(e) from None

    def describe(self) -> BackendDescription:
        """Replica 0's description, with every replica's under "replicas"."""
        return self._described  # type: ignore[return-value]

    def close(self) -> None:
        if not self._started_ray and not self._actors:
            return
        ray = ray_cluster.ray_module()
        lost = self.lost_replicas()
        for client in self._clients:
            client.close()
        for i, actor in enumerate(self._actors):
            if i in lost:
                continue
            try:
                ray.get(actor.close.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - a replica lost at the end changes no figure
                pass
            ray.kill(actor)
        if self._pg is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self._pg)
        if self._started_ray:
            ray.shutdown()

    # --- the workers' side ------------------------------------------------------------
    def client(self, worker: int) -> ReplicaClient:
        return self._clients[worker]

    def on_lost(self, worker: int) -> None:
        """A worker's replica died: its calls failed; decide whether the run goes on.
        Raises RunError (the run ends as incomplete, records kept) to stop it."""
        client = self._clients[worker]
        for sibling in self._clients:  # its other workers stop before their next call
            if sibling.replica == client.replica:
                sibling.lost = sibling.lost or client.lost
        left = self.spec.replicas - len(self.lost_replicas())
        if self.spec.on_loss == "stop":
            raise RunError(f"{client.lost}; distribute.on_loss is stop")
        if left == 0:
            raise RunError(f"{client.lost}; no replica is left to serve the queued samples")

    def lost_replicas(self) -> list[int]:
        return sorted({c.replica for c in self._clients if c.lost})

    def cluster(self) -> dict[str, Any]:
        """cluster.json: the cluster and where each replica ran."""
        return {
            **self._cluster,
            "distribute": self.spec.model_dump(),
            "replicas": [{"replica": i, "workers": [w for w in range(self.workers) if w % self.spec.replicas == i],
                          "load_s": self.load_s[i] if i < len(self.load_s) else None, **where}
                         for i, where in enumerate(self.where)],
            "lost": self.lost_replicas(),
        }


class ReplicatedDataset(HeldElsewhere):
    """The driver's dataset when replicas serve the run (HeldElsewhere: LoadGen's load and
    unload go to every replica); a batch is its sample indices, gathered by the replica."""

    def __init__(self, source: Any, pool: ReplicaPool) -> None:
        super().__init__(source, pool.load_samples, pool.unload_samples)

    def batch(self, indices: list[int]) -> SampleIndices:
        return SampleIndices(indices)
