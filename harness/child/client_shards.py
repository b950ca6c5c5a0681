"""Client shards, the driver's side: LoadGen in this process, the requests sent from N others.

`distribute.client_processes` (and `client_nodes`) start N shards (harness.child.shard),
each with its own event loop, backend instance and connection pool. LoadGen's issue
callback only appends the query to a queue and wakes the forwarder thread, which hands
`(query id, dataset index, issue time)` triples to the shards, least loaded first, one
message per shard per wake-up. Each shard sends back, per loop iteration, its first
tokens, completions, record rows and token rows; the shard's receiver thread here turns
them into one `FirstTokenComplete` and one `QuerySamplesComplete` call and hands the rows
to the record writer. The records, LoadGen's log and every timestamp stay on this
process's clock: shards on this host share it, others subtract their measured offset
(harness.child.clock_sync).

LoadGen's latency therefore includes the hop to the shard and back; the harness's
queue time (issue -> dispatch) includes the way there. Both hops are measured, per message,
and kept in child.json beside the clock estimates, so the report can say what sharding
cost. A shard's in-flight limit is its share of `max_in_flight`/`concurrency`; the
forwarder keeps up to twice that outstanding at a shard (the rest waits here, where any
shard can take it).

A shard that dies fails what it had outstanding: those samples are completed to LoadGen
and recorded as `ShardLost` with the reason, and the backlog goes to the others
(`on_loss: continue`), or the run ends as incomplete (`stop`, and always once no shard
is left).
"""

from __future__ import annotations

import platform
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from harness.child import clock_sync
from harness.child.issue_queue import IssueQueue
from harness.child.shard import share, shard_options
from harness.child.shard_links import ProcessLink, RayLink, ShardLost
from harness.child.stream_sut import lag_summary
from harness.config.host import usable_cores
from harness.config.run_config import RunConfig
from harness.data.datasets import HeldElsewhere
from harness.errors import ConfigError, RunError
from harness.results.stats import distribution

_now = time.perf_counter_ns
#: a shard holds up to this many times its in-flight limit (the rest of the backlog waits here)
PREFETCH = 2


def water_fill(n: int, load: list[int], room: list[float]) -> list[int]:
    """How many of `n` new samples each shard gets: the least loaded first, levelling the
    load, none beyond its room. Samples that fit nowhere are left out (sum < n)."""
    give = [0] * len(load)
    while n > 0:
        open_ = [i for i in range(len(load)) if give[i] < room[i]]
        if not open_:
            break
        level = min(load[i] + give[i] for i in open_)
        low = [i for i in open_ if load[i] + give[i] == level]
        above = [load[i] + give[i] for i in open_ if load[i] + give[i] > level]
        step = min([n // len(low), *(a - level for a in above), *(room[i] - give[i] for i in low)])
        if step < 1:  # fewer left than shards at the lowest level: one each, in order
            for i in low[:n]:
                give[i] += 1
            break
        step = int(step)
        for i in low:
            give[i] += step
        n -= step * len(low)
    return give


def _check_bounded(link: Any, ready: dict[str, Any], estimate: clock_sync.ClockEstimate, limit_ms: float) -> None:
    """Refuse a shard on another clock whose offset the round trips bound too loosely: every
    stamp it sends would be off by up to that, unknown, so its figures could not be trusted."""
    if estimate["uncertainty_ns"] <= limit_ms * 1e6:
        return
    raise ConfigError(
        f"client shard {link.index} on {ready.get('hostname') or '?'}: its clock offset is known only to "
        f"±{estimate['uncertainty_ns'] / 1e6:.2f} ms (the shortest of {estimate['exchanges']} round trips took "
        f"{estimate['rtt_min_ns'] / 1e6:.2f} ms), over distribute.max_clock_uncertainty_ms {limit_ms:g}: its "
        "timestamps cannot be put on the driver's clock; run the shards nearer the driver, or raise "
        "distribute.max_clock_uncertainty_ms")


class ShardSet:
    """The shards of one run: started, set up, their clocks measured; closed after the test."""

    def __init__(self, config: RunConfig, options: dict[str, Any], return_outputs: bool, limit: int | None) -> None:
        self.config = config
        self.spec = config.distribute
        self.count = self.spec.shards
        self._options = options
        self._return_outputs = return_outputs
        self.limits = [None if limit is None else share(limit, self.count, i) for i in range(self.count)]
        self.links: list[Any] = []
        self.ready: list[dict[str, Any]] = []
        self.clocks: list[dict[str, Any]] = []
        self._starts: list[clock_sync.ClockEstimate] = []
        self._applied: list[int] = []
        self._same: list[bool] = []
        self.finals: list[dict[str, Any]] = []
        self._ray: Any = None
        self._started_ray = False
        self._pg: Any = None
        self._cluster: dict[str, Any] = {}

    def _each(self, fn: Any) -> list[Any]:
        """fn(link) for every shard at once (a setup or load waits for the slowest only),
        in the links' order; None for a shard lost before or during the call."""
        def one(link: Any) -> Any:
            if link.lost:
                return None
            try:
                return fn(link)
            except ShardLost:
                if link.lost:  # it died meanwhile: the SUT fails what it had
                    return None
                raise

        with ThreadPoolExecutor(max_workers=min(32, max(1, len(self.links)))) as pool:
            return list(pool.map(one, self.links))

    def start(self, fingerprint: str) -> None:
        """Start every shard, set it up (backend, dataset, warm-up), check it built the same
        dataset, measure its clock. Any failure closes them all and is raised."""
        try:
            if self.spec.transport == "ray":
                self.links = self._ray_links()
            else:  # this host is the cluster: its cores, for a rerun's comparison
                self._cluster = {"nodes": [{"hostname": platform.node(), "address": "127.0.0.1",
                                            "resources": {"CPU": float(usable_cores())}}]}
                self.links = [ProcessLink(i) for i in range(self.count)]
            specs = [{"config": self.config.model_dump(mode="json"), "index": i, "limit": self.limits[i],
                      "options": shard_options(self._options, self.count, i), "return_outputs": self._return_outputs}
                     for i in range(self.count)]
            self.ready = self._each(lambda link: link.call("setup", specs[link.index]))
            for link, ready in zip(self.links, self.ready):
                link.where.update({k: ready[k] for k in ("pid", "hostname")})
                if ready["fingerprint"] != fingerprint:
                    raise ConfigError(f"client shard {link.index} built a different dataset (sha256 "
                                      f"{ready['fingerprint'][:12]} against {fingerprint[:12]}): the dataset must "
                                      "read the same on every node")
            here = clock_sync.clock_identity()
            for link, ready in zip(self.links, self.ready):
                estimate = clock_sync.estimate_offset([link.clock_exchange() for _ in range(clock_sync.EXCHANGES)])
                same = ready["clock_id"] == here
                if not same:
                    _check_bounded(link, ready, estimate, self.spec.max_clock_uncertainty_ms)
                applied = 0 if same else estimate["offset_ns"]
                link.call("set_clock", applied)
                self._starts.append(estimate)
                self._applied.append(applied)
                self._same.append(same)
                self.clocks.append(clock_sync.describe(estimate, None, same, applied))
        except BaseException:
            self.close()
            raise

    def _ray_links(self) -> list[RayLink]:
        from harness.child import ray_cluster
        from harness.child.shard import RayShard

        ray = self._ray = ray_cluster.ray_module()
        self._started_ray = ray_cluster.init(ray, self.spec)
        self._cluster = ray_cluster.facts(ray)
        per_node = max(1, self.spec.client_processes)
        remote = ray.remote(max_restarts=0, max_task_retries=0)(RayShard)
        options: list[dict[str, Any]] = [{"num_cpus": 1}] * self.count
        if self.spec.client_nodes:
            from ray.util.placement_group import placement_group
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            nodes = len(self._cluster["nodes"])
            if self.spec.client_nodes > nodes:
                raise ConfigError(f"distribute.client_nodes {self.spec.client_nodes}: the Ray cluster has {nodes} "
                                  f"node{'s' if nodes != 1 else ''}; lower client_nodes")
            # One bundle a node (STRICT_SPREAD), holding that node's client_processes shards.
            self._pg = placement_group([{"CPU": per_node}] * self.spec.client_nodes, strategy="STRICT_SPREAD")
            if not self._pg.wait(timeout_seconds=ray_cluster.START_TIMEOUT_S):
                raise ConfigError(f"Ray could not place {per_node} CPU on each of {self.spec.client_nodes} nodes; "
                                  f"the cluster has {self._cluster['nodes']}")
            options = [{"num_cpus": 1, "scheduling_strategy": PlacementGroupSchedulingStrategy(
                placement_group=self._pg, placement_group_bundle_index=i // per_node)} for i in range(self.count)]
        else:
            ray_cluster.check_room(self._cluster, "client shards", self.count, {"CPU": 1},
                                   "lower distribute.client_processes")
        actors = [remote.options(**options[i]).remote() for i in range(self.count)]
        links = [RayLink(i, a, ray) for i, a in enumerate(actors)]
        for link, where in zip(links, ray.get([a.where.remote() for a in actors], timeout=ray_cluster.START_TIMEOUT_S)):
            link.where.update(where)
        return links

    def load(self, indices: list[int]) -> None:
        self._each(lambda link: link.call("load", indices))

    def unload(self, indices: list[int]) -> None:
        self._each(lambda link: link.call("unload", indices))

    def begin(self) -> None:
        self._each(lambda link: link.call("begin"))

    def finish(self) -> None:
        """After the test: each live shard's clock measured again (the drift), its loop
        drained and its figures kept; then every shard closed."""
        ends = self._each(lambda link: clock_sync.estimate_offset(
            [link.clock_exchange() for _ in range(clock_sync.EXCHANGES)]))
        self.finals = [final or {} for final in self._each(lambda link: link.call("finish"))]
        self.clocks = [clock_sync.describe(start, end, same, applied)
                       for start, end, same, applied in zip(self._starts, ends, self._same, self._applied)]
        self.close()

    def close(self) -> None:
        for link in self.links:
            try:
                link.close()
            except Exception:  # noqa: BLE001 - closing what may already be gone
                pass
        if self._ray is not None:
            if self._pg is not None:
                from ray.util.placement_group import remove_placement_group

                remove_placement_group(self._pg)
            if self._started_ray:
                self._ray.shutdown()
            self._ray = None

    def cluster(self, lost: list[int]) -> dict[str, Any]:
        """cluster.json: where each shard ran and how its clock compares with this process's."""
        return {
            **self._cluster,
            "distribute": self.spec.model_dump(),
            "transport": self.spec.transport,
            "driver_clock_id": clock_sync.clock_identity(),
            "shards": [{"shard": link.index, "limit": self.limits[link.index], **link.where,
                        **({"load_s": r["load_s"], "warmup_s": r["warmup_s"]} if r else {}),
                        "clock": self.clocks[link.index] if link.index < len(self.clocks) else None,
                        "lost": link.index in lost}
                       for link, r in zip(self.links, self.ready or [{}] * len(self.links))],
        }


class ShardedSUT:
    """LoadGen's SUT over client shards (see the module's docstring)."""

    def __init__(self, shards: ShardSet, records: Any, lg: Any, *, tokens: bool, first_token_calls: bool,
                 crash: Any) -> None:
        self.shards = shards
        self._links = shards.links
        self._records = records
        self._lg = lg
        self._response = lg.QuerySampleResponse
        self._tokens = tokens
        self._first_token_calls = first_token_calls
        self._crash = crash
        self._on_loss = shards.spec.on_loss
        n = len(self._links)
        self._queue = IssueQueue()
        self._retry: list[tuple[int, int, int]] = []  # forwarded to a shard found lost: goes to another
        self._wake = threading.Event()
        self._stopping = False
        self._pending: list[dict[int, list[Any]]] = [{} for _ in range(n)]  # qid -> [index, issued, first sent]
        self._caps = [float("inf") if limit is None else PREFETCH * limit for limit in shards.limits]
        self._alive = [True] * n
        self._locks = [threading.Lock() for _ in range(n)]
        self._back_hops: list[list[int]] = [[] for _ in range(n)]
        self._lost_ids = iter(range(1 << 61, 1 << 62))
        self.failed = 0
        for link in self._links:
            link.on_events, link.on_crash, link.on_lost = self._on_events, self._on_crash, self._on_lost
        self._forwarder = threading.Thread(target=self._forward, name="shard forwarder", daemon=True)

    # --- LoadGen side (its thread): only enqueue ----------------------------------------
    def issue(self, query_samples: list[Any]) -> None:
        self._queue.append([query_samples, 0, _now()])
        self._wake.set()

    def flush(self) -> None:
        """LoadGen's flush_queries: nothing is held back."""

    # --- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        self.shards.begin()
        self._forwarder.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        self._forwarder.join()
        self.shards.finish()

    def lost(self) -> list[int]:
        return [i for i, alive in enumerate(self._alive) if not alive]

    def loop_lag_ms(self) -> dict[str, Any] | None:
        """Every shard's lag probe in one distribution (and each second's worst of any)."""
        return lag_summary([pair for final in self.shards.finals for pair in final.get("lags", [])])

    def hops(self) -> dict[str, Any]:
        """Both hops over every shard's messages, µs: what sharding adds to LoadGen's latency."""
        to = np.concatenate([np.asarray(f.get("forward_hops_ns", []), dtype=np.float64) for f in self.shards.finals]
                            or [np.zeros(0)])
        back = np.concatenate([np.asarray(h, dtype=np.float64) for h in self._back_hops] or [np.zeros(0)])
        return {"to_shard": {"messages": len(to), **distribution(to, unit=1e3, percentiles=(50, 99))},
                "back": {"messages": len(back), **distribution(back, unit=1e3, percentiles=(50, 99))}}

    def shard_figures(self) -> list[dict[str, Any]]:
        """child.json's `shards`: each shard's hops (both ways, µs) and loop lag."""
        out = []
        for i, final in enumerate(self.shards.finals):
            out.append({
                "shard": i,
                "lost": not self._alive[i],
                "hop_to_shard_us": distribution(np.asarray(final.get("forward_hops_ns", []), dtype=np.float64),
                                                unit=1e3, percentiles=(50, 99)),
                "hop_back_us": distribution(np.asarray(self._back_hops[i], dtype=np.float64), unit=1e3,
                                            percentiles=(50, 99)),
                "loop_lag_ms": {k: v for k, v in (lag_summary(final.get("lags", [])) or {}).items()
                                if k != "per_second_max"} or None,
            })
        return out

    # --- the forwarder ------------------------------------------------------------------
    def _forward(self) -> None:
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                self._dispatch()
        except BaseException as e:  # noqa: BLE001 - a bug of the harness: the run ends as a crash
            self._crash(e)

    def _dispatch(self) -> None:
        while self._queue or self._retry:
            live = [i for i, alive in enumerate(self._alive) if alive]
            if not live:
                return  # _on_lost ends the run
            load = [len(self._pending[i]) for i in live]
            room = [max(0.0, self._caps[i] - load[j]) for j, i in enumerate(live)]
            total = sum(room)
            if total < 1:
                return  # a completion wakes this thread when a shard has room again
            items, self._retry = self._retry, []
            if total > len(items):
                taken: tuple[list[int], list[int], list[int]] = ([], [], [])
                self._queue.take(int(min(total, 1 << 40)) - len(items), taken)
                items += zip(*taken)
            give = water_fill(len(items), load, room)
            sent, pos = _now(), 0
            for i, n in zip(live, give):
                if n:
                    self._send(i, sent, items[pos:pos + n])
                    pos += n
            self._retry += items[pos:]

    def _send(self, i: int, sent: int, items: list[tuple[int, int, int]]) -> None:
        with self._locks[i]:  # against _on_lost draining this shard's pending
            if not self._alive[i]:
                self._retry += items
                return
            pending = self._pending[i]
            for qid, index, issued in items:
                pending[qid] = [index, issued, False]
            try:
                self._links[i].submit(sent, items)
            except ShardLost:
                pass  # the receiver thread fails them in _on_lost

    # --- the receivers (one thread per shard) -------------------------------------------
    def _on_events(self, link: Any, received: int, msg: tuple) -> None:
        try:
            _, sent, firsts, dones, rows, tokens = msg
            i = link.index
            self._back_hops[i].append(received - sent)
            pending = self._pending[i]
            response = self._response
            keep = []
            if firsts:
                out = []
                for qid, data in firsts:
                    entry = pending.get(qid)
                    if entry is not None:
                        entry[2] = True
                    if data:
                        buf = np.frombuffer(data, dtype=np.uint8)
                        keep.append(buf)
                        out.append(response(qid, buf.ctypes.data, buf.nbytes))
                    else:
                        out.append(response(qid, 0, 0))
                self._lg.FirstTokenComplete(out)
            if dones:
                out = []
                for qid, data, n_tokens in dones:
                    if pending.pop(qid, None) is None:
                        continue  # failed already as lost: completed exactly once
                    ptr = size = 0
                    if data:
                        buf = np.frombuffer(data, dtype=np.uint8)
                        keep.append(buf)
                        ptr, size = buf.ctypes.data, buf.nbytes
                    out.append(response(qid, ptr, size, n_tokens) if self._tokens else response(qid, ptr, size))
                self._lg.QuerySamplesComplete(out)
                if self._queue or self._retry:
                    self._wake.set()  # room at this shard for the backlog
            del keep
            if rows:
                self._records.extend(rows)
            for entry in tokens:
                self._records.add_tokens(entry)
        except BaseException as e:  # noqa: BLE001 - a bug of the harness: the run ends as a crash
            self._crash(e)

    def _on_crash(self, link: Any, msg: tuple) -> None:
        _, name, message, tb = msg
        exc = RunError(f"client shard {link.index} crashed: {name}: {message}")
        exc.add_note(f"the shard's traceback:\n{tb}")
        self._crash(exc)

    def _on_lost(self, link: Any, reason: str) -> None:
        """Fail what the shard had outstanding, then go on without it or end the run."""
        try:
            i = link.index
            with self._locks[i]:
                self._alive[i] = False
                orphans, self._pending[i] = self._pending[i], {}
            if orphans:
                self._fail(i, orphans, f"ShardLost: {reason}")
            if self._on_loss == "stop":
                self._crash(RunError(f"{reason}; distribute.on_loss is stop"))
            elif not any(self._alive):
                self._crash(RunError(f"{reason}; no client shard is left to serve the queued samples"))
            else:
                self._wake.set()  # the backlog goes to the others
        except BaseException as e:  # noqa: BLE001 - a bug of the harness: the run ends as a crash
            self._crash(e)

    def _fail(self, i: int, orphans: dict[int, list[Any]], error: str) -> None:
        now = _now()
        response = self._response
        firsts = [response(qid, 0, 0) for qid, (_, _, first) in orphans.items() if not first] \
            if self._first_token_calls else []
        if firsts:
            self._lg.FirstTokenComplete(firsts)
        # LoadGen needs at least 2 tokens of a sample in token mode (see stream_sut)
        self._lg.QuerySamplesComplete([response(qid, 0, 0, 2) if self._tokens else response(qid, 0, 0) for qid in orphans])
        # dispatch 0: whether the shard had sent it is unknown; the summary reads no queue time from it
        self._records.extend([(qid, index, issued, 0, 0, 0, now, 0, 0, next(self._lost_ids), i, "error", error)
                              for qid, (index, issued, _) in orphans.items()])
        self.failed += len(orphans)


class ShardedFactory:
    """What `build_sharded` hands the child, as `StreamingFactory` does for one loop."""

    def __init__(self, config: RunConfig, shards: ShardSet, tokens: bool) -> None:
        self.config = config
        self.shards = shards
        self._tokens = tokens
        self.warmup_s = max((r["warmup_s"] for r in shards.ready), default=0.0)
        self.response_format = shards.ready[0]["response_format"] if shards.ready else None

    def __call__(self, records: Any, return_outputs: bool, crash: Any = None) -> ShardedSUT:
        import mlperf_loadgen as lg

        from harness.child.stream_setup import first_token_calls

        return ShardedSUT(self.shards, records, lg, tokens=self._tokens, first_token_calls=first_token_calls(self.config),
                          crash=crash)


def build_sharded(config: RunConfig, backend: Any, options: dict[str, Any],
                  return_outputs: bool) -> tuple[HeldElsewhere, ShardedFactory]:
    """(dataset, sut_factory) for an event-loop backend served by client shards. The
    backend loaded here only builds the dataset (its tokenizer) and describes the run;
    every request goes out from a shard."""
    from harness.child.stream_setup import build_source, in_flight_limit

    source = build_source(config, backend)
    shards = ShardSet(config, options, return_outputs, in_flight_limit(config.concurrency, backend.max_in_flight))
    shards.start(source.fingerprint())
    # Each shard prepares its own requests from its own copy: LoadGen's load goes to them.
    return HeldElsewhere(source, shards.load, shards.unload), ShardedFactory(config, shards, backend.produces_tokens)
