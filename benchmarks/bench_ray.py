"""What backend replicas on Ray cost, against plain processes doing the same work. One run,
figures side by side.

1. Per call: a batch through a replica actor, named by its sample indices (the call each
   of the tensor SUT's workers makes: the replica holds the data) over the replica's
   direct channel (replica_calls: direct, the default) and as a Ray task (replica_calls:
   ray), and, for comparison, a Ray task carrying its tensors, against the same
   `session.run` in this process; 1,000 calls each, interleaved in blocks of 100.
2. Throughput: N replicas of a CPU-bound model (MLPs 512-H-H-10 on ONNX Runtime, one
   intra-op thread each, batch B) served by the harness (LoadGen Offline,
   distribute.replicas=N, two calls in flight a replica, over direct channels and as Ray
   tasks) against N plain processes, each
   running `session.run` on the same batch in a loop, all at once; beside them the harness
   in one process with N single-threaded workers (its own per-sample cost, no Ray). The
   sides alternate round by round; ratios are medians of the rounds' own ratios, their
   range beside them. Goal: the replicas reach >= 90 % of the plain processes. On a
   machine with as many cores as replicas, the driver (LoadGen, the harness) takes its CPU
   from the replicas; the wider model shows how much of the gap that is.
3. Where it goes, before the harness's rounds: the same model in N Ray actors with no
   harness, the loop inside each, one call a batch through Ray's core API, and through
   Ray Compiled Graphs, beside N plain processes.

    python benchmarks/bench_ray.py [--replicas 2] [--batch 256] [--hidden 1024 4096] [--seconds 6] [--rounds 5]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_core import heavy_mlp, plain_ort_loop  # noqa: E402

from harness.child import ray_cluster  # noqa: E402
from harness.config.run_config import Distribute, RunConfig  # noqa: E402
from harness.run import runner  # noqa: E402


def plain_processes(model: Path, n: int, batch: int, seconds: float) -> float:
    """Samples a second of n processes running the plain loop at once (spawned, so each is
    a fresh interpreter as a Ray worker is)."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(n) as pool:
        return sum(pool.starmap(plain_ort_loop, [(model, batch, 1, seconds)] * n))


def harness_run(model: Path, n: int, batch: int, seconds: float, hint: float, out: Path, calls: str | None) -> float:
    """The harness's Offline throughput with n replicas on Ray, called `calls` (direct or
    ray), or (calls None) in one process with n single-threaded workers: the same
    per-sample work in the driver, no Ray."""
    scale: dict = ({"distribute": {"replicas": n, "in_flight": 2, "replica_calls": calls}} if calls
                   else {"workers": n, "backend_options": {"intra_op_threads": 1}})
    config = RunConfig(name="bench-ray", backend="onnxruntime", model=str(model), scenario="Offline", max_batch=batch,
                       offline_expected_qps=hint, min_duration_s=seconds, **scale)
    s = runner.run(config, out).summary
    if s["validity"]["result"] != "VALID" or s["harness"]["success_rate"] != 1.0:
        print(f"  note: a run was {s['validity']['result']}, success {s['harness']['success_rate']}")
    return s["loadgen"]["throughput_per_s"]


def per_call(model: Path, batch: int, calls: int) -> dict[str, list[float]]:
    """Round-trip µs of `calls` calls through one replica actor, naming the samples by index
    (the harness's path: the replica holds the data) over its direct channel and as a Ray
    task, and carrying the tensors, and of the same `predict` in this process."""
    import secrets

    import ray

    from backends.base import LoadContext
    from backends.onnxruntime import OnnxRuntimeBackend
    from harness.child.direct_channel import ChannelClient
    from harness.child.replicas import ReplicaActor

    ray_cluster.init(ray, Distribute())  # the local, loopback-only Ray a run starts
    try:
        options = {"intra_op_threads": 1}
        actor = ray.remote(ReplicaActor).remote("onnxruntime", options)
        ctx = LoadContext(str(model), batch, "Offline", 0, 1)
        ray.get(actor.load.remote(ctx))
        ray.get(actor.build_dataset.remote(f"synthetic:n={batch}", 0))
        ray.get(actor.load_samples.remote(list(range(batch))))
        local = OnnxRuntimeBackend(OnnxRuntimeBackend.Options(**options))
        local.load(ctx)
        x = {"x": np.random.default_rng(0).standard_normal((batch, 512)).astype(np.float32)}
        indices = list(range(batch))
        key = secrets.token_bytes(32)
        channel = ChannelClient(ray.get(actor.open_channel.remote(key)), key, alive=lambda: None)
        calls_of = {"direct": lambda: channel.call(indices),
                    "indices": lambda: ray.get(actor.predict_indices.remote(indices)),
                    "tensors": lambda: ray.get(actor.predict.remote(x)), "local": lambda: local.predict(x)}
        for _ in range(20):  # warm every path
            for call in calls_of.values():
                call()
        us: dict[str, list[float]] = {k: [] for k in calls_of}
        for _ in range(calls // 100):
            for key, call in calls_of.items():
                for _ in range(100):
                    t0 = time.perf_counter_ns()
                    call()
                    us[key].append((time.perf_counter_ns() - t0) / 1e3)
        channel.close()
        return us
    finally:
        ray.shutdown()


class LoopActor:
    """The bench's model in a Ray actor, without the harness: a loop inside it, or one call
    per batch (by index), for `where_it_goes`."""

    def __init__(self, model: str, batch: int) -> None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        self.data = np.random.default_rng(0).standard_normal((batch, 512)).astype(np.float32)

    def predict(self, indices: list[int]) -> Any:
        return self.session.run(None, {"x": self.data[indices]})[0]

    def loop(self, seconds: float) -> float:
        n, t0, indices = 0, time.perf_counter(), list(range(len(self.data)))
        while time.perf_counter() - t0 < seconds:
            self.predict(indices)
            n += len(indices)
        return n / (time.perf_counter() - t0)


def where_it_goes(model: Path, n: int, batch: int, seconds: float) -> dict[str, float]:
    """Samples a second of n Ray actors running the model with no harness: the loop inside
    each (Ray's resident processes only), one call a batch through Ray's core API (two in
    flight an actor, as the replicas), and through Ray Compiled Graphs (one call at a time:
    a graph's results are read in order by one thread)."""
    import threading

    import ray
    from ray.dag import InputNode

    ray_cluster.init(ray, Distribute())  # the local, loopback-only Ray a run starts
    try:
        actors = [ray.remote(num_cpus=1)(LoopActor).remote(str(model), batch) for _ in range(n)]
        indices = list(range(batch))
        ray.get([a.predict.remote(indices) for a in actors])
        out = {"inside the actors, no calls": sum(ray.get([a.loop.remote(seconds) for a in actors]))}

        def drive(calls: list[Any]) -> float:
            done, stop = [0], time.perf_counter() + seconds

            def one(call: Any) -> None:
                while time.perf_counter() < stop:
                    call()
                    done[0] += batch

            threads = [threading.Thread(target=one, args=(c,)) for c in calls]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return done[0] / seconds

        out["Ray core calls, 2 in flight an actor"] = drive(
            [lambda a=a: ray.get(a.predict.remote(indices)) for a in actors for _ in range(2)])
        graphs = []
        for a in actors:
            with InputNode() as inp:
                graphs.append(a.predict.bind(inp).experimental_compile())
        for g in graphs:
            ray.get(g.execute(indices))
        out["Ray Compiled Graphs, 1 in flight"] = drive([lambda g=g: ray.get(g.execute(indices)) for g in graphs])
        for g in graphs:
            g.teardown()
        return out
    finally:
        ray.shutdown()


def p(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def throughput(model: Path, label: str, args: argparse.Namespace, work: Path) -> None:
    sides: dict[str, list[float]] = {"plain": [], "direct": [], "ray": [], "one process": []}
    names = {"plain": f"{args.replicas} plain processes, session.run loop",
             "direct": f"harness, {args.replicas} Ray replicas, direct calls",
             "ray": f"harness, {args.replicas} Ray replicas, calls as Ray tasks",
             "one process": f"harness, one process, {args.replicas} workers (no Ray)"}
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for side in order:
            hint = 1.5 * (sides["plain"][-1] if sides["plain"] else 200_000)
            if side == "plain":
                sides[side].append(plain_processes(model, args.replicas, args.batch, args.seconds))
            else:
                sides[side].append(harness_run(model, args.replicas, args.batch, args.seconds, hint, work / "runs",
                                               calls=None if side == "one process" else side))
        print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in sides.items()), flush=True)
    print(f"\nthroughput, {args.replicas} x {label}, batch {args.batch}, samples/s (LoadGen Offline for the harness)")
    print(f"  {'side':<50}{'median':>10}{'rounds':>22}{'/ plain':>9}{'rounds':>14}")
    for side, values in sides.items():
        ratios = [v / b for v, b in zip(values, sides["plain"])]
        print(f"  {names[side]:<50}{statistics.median(values):>10,.0f}{min(values):>12,.0f}-{max(values):<9,.0f}"
              f"{statistics.median(ratios):>9.3f}{min(ratios):>8.3f}-{max(ratios):.3f}")
    ratio = statistics.median([v / b for v, b in zip(sides["direct"], sides["plain"])])
    print(f"  goal: replicas (the default, direct calls) >= 0.90 of the plain processes: "
          f"{'PASS' if ratio >= 0.90 else 'FAIL'} ({ratio:.3f}); the one-process row is the harness's own "
          f"per-sample cost, without Ray")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--hidden", type=int, nargs="+", default=[1024, 4096],
                    help="MLP widths: 1024 is ~13 µs a sample here, 4096 ~16x that")
    ap.add_argument("--seconds", type=float, default=6.0, help="length of each throughput measurement")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"cores: {os.cpu_count()}; replicas {args.replicas}, batch {args.batch}, 1 ORT thread each; "
          f"{args.rounds} rounds of {args.seconds:g} s")
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        work = Path(tmp)
        for hidden in args.hidden:
            model = work / f"mlp{hidden}.onnx"
            heavy_mlp(model, hidden)
            label = f"MLP 512-{hidden}-{hidden}-10"
            print(f"\n{label}: per call, one replica on a local Ray (127.0.0.2), 1,000 calls each side")
            print(f"  {'':>7}{'':>11}{'direct, indices':>25}{'Ray task, indices':>25}{'Ray task, tensors':>18}")
            print(f"  {'batch':>7}{'in-process':>11}{'p50':>9}{'p99':>7}{'adds':>9}{'p50':>9}{'p99':>7}{'adds':>9}"
                  f"{'adds':>18}   (µs)")
            for b in (1, args.batch):
                us = per_call(model, b, 1000)
                base = statistics.median(us["local"])
                row = f"  {b:>7}{base:>11,.1f}"
                for key in ("direct", "indices"):
                    mid = statistics.median(us[key])
                    row += f"{mid:>9,.1f}{p(us[key], 99):>7,.0f}{mid - base:>9,.1f}"
                print(row + f"{statistics.median(us['tensors']) - base:>18,.1f}")
            plain = plain_processes(model, args.replicas, args.batch, args.seconds)
            print(f"\n{label}: where the throughput goes, no harness, batch {args.batch}, one run each (samples/s)")
            print(f"  {f'{args.replicas} plain processes, session.run loop':<56}{plain:>10,.0f}")
            for name, rate in where_it_goes(model, args.replicas, args.batch, args.seconds).items():
                print(f"  {f'{args.replicas} Ray actors, ' + name:<56}{rate:>10,.0f}{rate / plain:>8.3f}")
            throughput(model, label, args, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
