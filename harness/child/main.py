"""The child process: exactly one LoadGen test, on the config saved in a results folder.

LoadGen keeps process-global state (one conf load, one test per process), so the parent
(`harness.run.runner`) starts `python -m harness.child RUN_DIR` for each test. The child
writes the LoadGen logs, `records.parquet` and `child.json` into RUN_DIR; on a harness error it
writes `error.json` and exits 2, so the parent can report one clear line.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import resource
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Iterator, NoReturn

from backends.base import LoadContext
from harness.child.lifeline import Lifeline, end_children
from harness.child.record_writer import RecordWriter
from harness.config import registry
from harness.config.host import usable_cores
from harness.config.loadgen_settings import build_test_settings, merged_conf_text
from harness.config.run_config import SERVER_AUTO_BATCH, RunConfig, validate_backend_options
from harness.errors import EXIT_INTERNAL, BackendError, ConfigError, HarnessError, OutputError
from harness.results import folder
from harness.results.loadgen_log import loadgen_scenario


def resolve_workers(config: RunConfig, host_cores_backend: bool) -> tuple[int, int]:
    """(workers, threads per backend call) such that workers x threads <= cores."""
    cores = usable_cores()
    if config.workers or config.concurrency:
        workers = config.workers or config.concurrency  # a closed loop of N: N calls at once
    elif config.scenario == "Offline" and host_cores_backend:
        # Throughput: one single-threaded worker per core overlaps one worker's Python
        # (batching, completion) with another's inference; measured 1.1x a plain 2-thread
        # ORT loop where one 2-thread worker reached 0.8x (benchmarks/bench_core.py).
        workers = cores
    else:
        # Latency: one worker whose backend call may use every core.
        workers = 1
    return workers, max(1, cores // workers)


def resolve_max_batch(config: RunConfig, batches_freely: bool) -> int:
    """The run's max_batch, or its default once the backend is loaded (see SERVER_AUTO_BATCH)."""
    if config.max_batch is not None:
        return config.max_batch
    if loadgen_scenario(config.scenario) == "Server" and batches_freely:
        return SERVER_AUTO_BATCH
    return 1


class Progress:
    """A one-line live status on a terminal: elapsed vs min duration, queries vs min query
    count, and the rate. LoadGen stops once both minimums are met, so a slow run past its
    duration says it is still waiting for queries, and how many."""

    def __init__(self, min_duration_s: float | None, min_query_count: int | None = None) -> None:
        self.enabled = sys.stderr.isatty()
        self.min_duration_s = min_duration_s
        self.min_query_count = min_query_count
        self.start = time.monotonic()
        self._last = (self.start, 0)

    def __call__(self, written: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        t0, n0 = self._last
        rate = (written - n0) / (now - t0) if now > t0 else 0.0
        self._last = (now, written)
        line = self.line(now - self.start, written, rate, self.min_duration_s, self.min_query_count)
        sys.stderr.write(f"\r{line} ")
        sys.stderr.flush()

    @staticmethod
    def rate(per_s: float) -> str:
        """A rate to 3 significant figures (0.148, 12.3, 456), whole numbers from 1,000 up:
        a slow LLM run's 0.148/s must not read 0/s."""
        if per_s >= 1000:
            return f"{per_s:,.0f}"
        if per_s <= 0:
            return "0"
        return f"{per_s:.{max(0, 2 - math.floor(math.log10(per_s)))}f}"

    @staticmethod
    def line(elapsed: float, written: int, rate: float, min_duration: float | None, min_query_count: int | None) -> str:
        """The status line, a pure function of its figures (tested without a terminal)."""
        time_part = f"  {elapsed:6.1f} s"
        duration_met = not min_duration or elapsed >= min_duration
        if min_duration:
            left = min_duration - elapsed
            time_part += f" / {min_duration:g} s min" + (f" ({left:,.0f} s left)" if left > 0 else " met")
        if not min_query_count:
            count_part = f"{written:>9,d} samples done"
        else:
            count_part = f"{written:,d} / {min_query_count:,d} queries"
            left_q = min_query_count - written
            if left_q <= 0:
                count_part += " met"
            elif duration_met:
                count_part += ": waiting for min_query_count"
                if rate > 0:
                    count_part += f", ~{Progress.duration(left_q / rate)}"
        return f"{time_part} | {count_part} | {Progress.rate(rate):>7}/s"

    @staticmethod
    def duration(seconds: float) -> str:
        """A remaining time in its largest sensible unit."""
        if seconds < 120:
            return f"{seconds:.0f} s"
        if seconds < 7200:
            return f"{seconds / 60:.0f} min"
        return f"{seconds / 3600:.1f} h"

    def finish(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def write_references(run_dir: Path, source: Any, backend: Any) -> None:
    """A text-scored dataset's references into the folder (as labels.npy for tensors), with
    its file's sha256 and the tokenizer (path, sha256) that decodes the logged ids: the
    folder alone is then enough to score the run again (harness.results.text_accuracy)."""
    references = source.references() if hasattr(source, "references") else None
    # only token answers are kept as text and ids (a json protocol's answers are not)
    if references is None or not getattr(backend, "produces_tokens", False):
        return
    from harness.results.scoring.detokenize import tokenizer_sha256

    described = source.describe()
    tokenizer = getattr(backend, "tokenizer_path", None)
    doc = {
        "dataset": {k: described.get(k) for k in ("kind", "path", "set", "sha256")},
        "tokenizer": {"path": tokenizer, "sha256": tokenizer_sha256(Path(tokenizer))} if tokenizer else None,
        # what an accuracy log's entries hold: a transcript's labels (MLPerf's whisper form,
        # harness.child.stream_sut) or a model's token ids
        "accuracy_log": "transcript-labels" if backend.output_kind == "transcript" else "token-ids",
        "rows": references,
    }
    folder.write_text(run_dir / folder.REFERENCES, json.dumps(doc))


def run_test(run_dir: Path, lifeline: Lifeline | None = None) -> dict[str, Any]:
    import mlperf_loadgen as lg

    config = RunConfig(**(folder.read_run_config(run_dir) or {}))
    backend_cls = registry.get(config.backend)
    options = validate_backend_options(config, backend_cls.Options)
    if config.issue_inline and backend_cls.kind != "tensor":
        raise ConfigError(f"issue_inline serves tensor backends only; backend {config.backend!r} runs on an event loop")
    pool = None
    if config.distribute.enabled:  # backend replicas as Ray actors (harness.child.replicas)
        from harness.child.replicas import ReplicaPool

        pool = ReplicaPool(config, options)
        workers, threads = pool.workers, pool.threads
        backend: Any = pool  # answers load, inputs, predict, warmup, describe and close as a backend does
    else:
        workers, threads = resolve_workers(config, backend_cls.scales_with_host_cores(options))
        backend = backend_cls(options)
    # LoadGen logs outputs in accuracy mode, when sampling is asked for, and in compliance
    # audits (audit.config may turn sampling on); otherwise copying outputs is wasted work.
    return_outputs = (
        config.mode in ("AccuracyOnly", "SubmissionRun")
        or bool(config.accuracy_log_probability)
        or bool(config.accuracy_log_sampling_target)
        or (run_dir / folder.AUDIT_CONFIG).exists()
    )
    t0 = time.perf_counter()
    # Unset, max_batch is 1 at load: a backend that takes more by default batches freely,
    # so it sizes nothing by it, and only the loaded backend can say that (ORT: its inputs).
    with _placing(run_dir, pool is not None):
        backend.load(LoadContext(config.model, config.max_batch or 1, config.scenario, config.seed, threads,
                                 log_outputs=return_outputs))
    load_s = time.perf_counter() - t0
    # Asked now, not at the end: the backend is closed by then. Only worker threads batch.
    freely = backend_cls.kind == "tensor" and backend.batches_freely()
    max_batch = resolve_max_batch(config, freely)
    shards = None
    if backend_cls.kind != "tensor" and config.distribute.shards:
        from harness.child.client_shards import build_sharded  # requests sent from N client processes

        with _placing(run_dir, True):
            dataset, sut_factory = build_sharded(config, backend, options.model_dump(), return_outputs)
        shards = sut_factory.shards
    elif backend_cls.kind != "tensor":
        from harness.child.stream_setup import build_streaming  # the async (HTTP) and generative path

        dataset, sut_factory = build_streaming(config, backend, workers, return_outputs)
    else:
        from harness.data.datasets import build_tensor_dataset

        dataset = build_tensor_dataset(config.dataset, backend.inputs(), config.seed)
        if pool is not None:  # each replica holds the data; a call names its samples by index
            dataset = pool.hold(dataset)
        sut_factory = None

    if getattr(dataset, "labels", None) is not None:
        import numpy as np

        np.save(run_dir / folder.LABELS, np.asarray(dataset.labels))
    write_references(run_dir, getattr(dataset, "source", None), backend)
    ranking = getattr(getattr(dataset, "source", None), "ranking_truth", None)
    if ranking is not None:  # a rerank dataset: what documents/s and the ranking's score read
        folder.write_text(run_dir / folder.RANKING, json.dumps(ranking()))

    t0 = time.perf_counter()
    response_format = None
    if backend_cls.kind == "tensor":
        sample = dataset.materialize(0)
        batch = {k: v[None] for k, v in sample.items()}
        try:
            first = backend.predict(batch)[0]
            backend.warmup(batch)  # last, so a backend may reset its state after warming up
        except HarnessError:
            raise
        except Exception as e:  # the backend's failure before the test: one line, not a crash
            raise BackendError(f"the warm-up call failed before the test started: {type(e).__name__}: {e}") from e
        response_format = {"dtype": str(first.dtype), "shape": list(first.shape[1:])}
    else:
        # Tensor answers over the event loop (KServe v2) are scored like local ones.
        response_format = getattr(sut_factory, "response_format", None)
    # streaming: the warm-up requests ran in build_streaming, timed there
    warmup_s = time.perf_counter() - t0 if sut_factory is None else sut_factory.warmup_s

    # A sample is a query in SingleStream and Server only, so only there do written samples count towards it.
    counted = loadgen_scenario(config.scenario) in ("SingleStream", "Server")
    progress = Progress(config.min_duration_s, config.min_query_count if counted else None)
    records = RecordWriter(run_dir, on_flush=progress)
    if lifeline is not None:
        lifeline.keep(records)  # a stop signal flushes what was recorded before the process ends
    inline = False
    if sut_factory is None:
        from harness.child.tensor_sut import TensorSUT

        # Only ever with one worker: config refuses issue_inline with workers > 1, and only
        # Offline defaults to more than one.
        inline = config.issue_inline
        if inline is None:  # the hand-off to a worker buys nothing with one query in flight
            inline = config.scenario == "SingleStream" and workers == 1 and pool is None

        sut = TensorSUT(
            backend,
            dataset,
            records,
            lg.QuerySamplesComplete,
            lg.QuerySampleResponse,
            workers=workers,
            max_batch=max_batch,
            batch_timeout_ms=config.batch_timeout_ms,
            return_outputs=return_outputs,
            coalesce_us=config.completion_coalesce_us,
            inline=inline,
            crash=lambda exc: crash(run_dir, records, exc),
            replicas=pool,
        )
    else:
        sut = sut_factory(records, return_outputs, crash=lambda exc: crash(run_dir, records, exc))

    conf_text = merged_conf_text(config)
    conf_path = None
    if conf_text is not None:
        conf_path = run_dir / "loaded.conf"
        conf_path.write_text(conf_text)
    settings = build_test_settings(lg, config, conf_path)
    if getattr(sut, "sessions", None) is not None:  # each turn issued once: harness.child.sessions
        from harness.child.sessions import session_settings

        session_settings(settings, dataset)
    rows = getattr(getattr(dataset, "source", None), "arrival_s", None)
    if rows is not None:  # a trace replays each row once, at its time: the query is its rows
        settings.min_query_count = settings.max_query_count = len(rows)
        settings.min_duration_ms = 0
    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = str(run_dir)
    log_settings.log_output.copy_summary_to_stdout = False
    log_settings.enable_trace = config.enable_trace

    perf_count = min(len(dataset), config.performance_sample_count or len(dataset))
    loaded_at = [0]

    def load(indices: list[int]) -> None:
        dataset.load(indices)
        loaded_at[0] = time.perf_counter_ns()

    qsl = lg.ConstructQSL(len(dataset), perf_count, load, dataset.unload)
    lg_sut = lg.ConstructSUT(sut.issue, sut.flush)
    # A full garbage collection walks every object the imports and the model made: ~20 ms
    # holding the GIL here, a stall of LoadGen's thread whenever one fell inside the test.
    # Frozen objects are never walked again; what the test itself allocates still is.
    gc.collect()
    gc.freeze()
    sut.start()
    # The harness's threads by OS id, so host telemetry can name the one that was busy;
    # the main thread is the one LoadGen issues from (its own threads are unnamed here).
    named_threads = {str(t.native_id): ("LoadGen issue (main)" if t is threading.main_thread() else t.name)
                     for t in threading.enumerate() if t.native_id is not None}
    if shards is not None:  # each shard's event loop, by its kernel thread id (host telemetry samples shards too)
        for ready in shards.ready:
            named_threads.update(ready.get("threads", {}))
    # Before the test too: a run that crashes or is killed still says where its replicas
    # or client shards ran.
    placed = pool.cluster() if pool is not None else shards.cluster([]) if shards is not None else None
    if placed is not None:
        folder.write_text(run_dir / folder.CLUSTER, json.dumps(placed, indent=2))
    _check_cluster(run_dir, placed)
    t0 = time.perf_counter()
    try:
        lg.StartTestWithLogSettings(lg_sut, qsl, settings, log_settings, str(run_dir / folder.AUDIT_CONFIG))
    finally:
        test_s = time.perf_counter() - t0
        sut.stop()
        records.close()
        progress.finish()
        lg.DestroySUT(lg_sut)
        lg.DestroyQSL(qsl)
        if pool is not None:  # the replicas lost during the test too
            folder.write_text(run_dir / folder.CLUSTER, json.dumps(pool.cluster(), indent=2))
        if shards is not None:  # the shards lost, and each shard's clock measured again
            folder.write_text(run_dir / folder.CLUSTER, json.dumps(shards.cluster(sut.lost()), indent=2))
        backend.close()
    return {
        "status": "complete",
        "load_s": load_s,
        "warmup_s": warmup_s,
        "test_s": test_s,
        "workers": workers,
        "threads_per_worker": threads,
        "issue_inline": inline,
        "max_batch": max_batch,
        "batches_freely": freely,
        "records_written": records.written,
        "threads": named_threads,
        # the event loop's lateness (HTTP and generative backends): is the client keeping up?
        "loop_lag_ms": sut.loop_lag_ms() if backend_cls.kind != "tensor" else None,
        # client shards: each one's hops to it and back and its own loop's lag
        "shards": sut.shard_figures() if shards is not None else None,
        "shard_hops_us": sut.hops() if shards is not None else None,
        # The child's high-water memory (LoadGen, backend, records), for the scale benchmark
        # and for users sizing a long run; ru_maxrss is in KiB on Linux.
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "qsl_loaded_ns": loaded_at[0],
        "response_format": response_format,
        "backend": {**backend.describe(), **({"client_shards": [f.get("describe") for f in shards.finals]}
                                             if shards is not None else {})},
        "dataset": {**dataset.describe(), "sha256": dataset.fingerprint(), "performance_sample_count": perf_count},
    }


@contextlib.contextmanager
def _placing(run_dir: Path, distributed: bool) -> Iterator[None]:
    """A rerun whose cluster cannot even place the run (fewer GPUs or nodes than the
    original's): the refusal says first that the rerun needs the original's cluster."""
    try:
        yield
    except ConfigError as e:
        expected = folder.read_json(run_dir, folder.EXPECTED_CLUSTER) if distributed else None
        if not expected or not str(e).startswith(("distribute", "Ray could not place")):
            raise
        from harness.results.cluster import describe

        raise ConfigError(f"harness rerun needs a cluster equivalent to the original's ({describe(expected)}); "
                          f"this one cannot place the run: {e}") from e


def _check_cluster(run_dir: Path, placed: dict[str, Any] | None) -> None:
    """A rerun of a distributed run: refuse, before the test, a cluster that is not
    equivalent to the original's (harness.results.cluster)."""
    expected = folder.read_json(run_dir, folder.EXPECTED_CLUSTER)
    if not expected:
        return
    from harness.results.cluster import difference, shape

    diff = difference(expected, shape(placed))
    if diff:
        raise ConfigError("harness rerun needs a cluster equivalent to the original's; this one differs: "
                          + "; ".join(diff) + " (run it there, or pass --any-cluster)")


def write_error(run_dir: Path, exc: BaseException) -> bool:
    """error.json: the type and traceback cross the process boundary, so the parent
    re-raises a HarnessError as its own type and --debug prints this traceback, not the
    parent's. True when the error is a HarnessError (bad input, not a bug)."""
    ours = isinstance(exc, HarnessError)
    message = str(exc) if ours else f"{type(exc).__name__}: {exc}"
    try:
        folder.write_text(run_dir / folder.ERROR, json.dumps({
            "type": type(exc).__name__,
            "message": message,
            "harness_error": ours,
            "exit_code": exc.exit_code if ours else EXIT_INTERNAL,
            "traceback": "".join(traceback.format_exception(exc)),
        }))
    except OutputError as e:
        # The parent then has only the exit code. A full disk it will meet itself, and say
        # so in its one line; anything else is said here.
        if "no space left on device" not in message:
            sys.stderr.write(f"error: {message} ({e})\n")
    return ours


def crash(run_dir: Path, records: RecordWriter, exc: BaseException) -> NoReturn:
    """A bug in the harness's own code during the test ends the run now, as a crash.

    It must not become failed samples (that hides the bug as "100 % failed"), and LoadGen
    has no abort: it would wait forever for the samples the failing thread was serving. So
    the process keeps what it recorded and exits; the parent marks the folder incomplete
    and re-raises with this traceback."""
    try:
        write_error(run_dir, exc)
        records.close()
    finally:
        end_children()  # a local Ray's daemons, client shards: none outlives the run
        os._exit(1)


def main(argv: list[str]) -> int:
    run_dir = Path(argv[0])
    lifeline = Lifeline.start()
    try:
        info = run_test(run_dir, lifeline)
    except BaseException as e:  # noqa: BLE001 - report anything, with its traceback, to the parent
        return 2 if write_error(run_dir, e) else 1
    (run_dir / folder.CHILD).write_text(json.dumps(info, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
