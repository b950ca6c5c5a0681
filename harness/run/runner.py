"""The parent side of a run: results folder, child process, summary.

    RunConfig -> results/<timestamp>-<name>/ (run.yaml, system.json, manifest.json)
              -> `python -m harness.child DIR` (one LoadGen test)
              -> summary.json, built from the folder alone

If the child crashes or is killed, the folder is still completed: summary.json says
"incomplete" with the reason, and holds every record written so far. So it is when the
parent is stopped (Ctrl-C, SIGTERM, SIGHUP): see `_StopOnSignal`.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from harness import __version__
from harness.config import registry
from harness.config.loadgen_settings import check_conf_file, coalescing_default
from harness.config.run_config import RAY_MISSING, RunConfig, validate_backend_options
from harness.data.hashing import sha256_file
from harness.data.spec import parse_dataset_spec
from harness.errors import BY_NAME, ConfigError, HarnessError, OutputError, RunError
from harness.results import folder
from harness.results.records import recover as recover_records
from harness.results.summary import write_summary
from harness.run.sizing import resize, size_offline
from harness.run.sysinfo import describe_system
from harness.run.telemetry import Sampler, check_endpoints


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    summary: dict[str, Any]
    # The signal that stopped the run ("SIGTERM"), so a caller running several (repeats, the
    # demo) can stop too instead of starting the next; None when nothing stopped it.
    stopped_by: str | None = None


def resolve(config: RunConfig) -> RunConfig:
    """Checks that need no model load, and paths made absolute so run.yaml re-runs anywhere here."""
    backend_cls = registry.get(config.backend)
    validate_backend_options(config, backend_cls.Options)
    if config.concurrency and backend_cls.kind == "tensor" and (config.max_batch or 1) > 1:
        raise ConfigError(f"concurrency {config.concurrency} keeps that many single requests in flight; "
                          f"max_batch {config.max_batch} would batch them: drop max_batch")
    if (config.arrivals or config.dataset.startswith("trace:")) and backend_cls.kind == "tensor":
        raise ConfigError(f"arrivals and traces are dispatched by the event-loop SUT; backend {config.backend!r} is a "
                          "tensor backend: use an HTTP or generative backend (http, pytorch-llm)")
    if config.distribute.enabled or config.distribute.shards:
        _check_distribute(config, backend_cls.kind)
    updates: dict[str, Any] = {}
    for key in ("model", "mlperf_conf", "user_conf"):
        value = getattr(config, key)
        if value and Path(value).exists():
            updates[key] = str(Path(value).resolve())
        elif value and key != "model":
            raise OutputError(f"{key}: file {value} does not exist")
        if value and key != "model":
            check_conf_file(key, Path(value))
    coalesce = coalescing_default(config.model_copy(update=updates))
    if coalesce != config.server_coalesce_queries:
        updates["server_coalesce_queries"] = coalesce  # recorded in run.yaml as the value used
    dataset = parse_dataset_spec(config.dataset)
    if dataset.path is not None:
        # Written out explicitly with an absolute path (npy:/abs/dir, jsonl:/abs/p.jsonl).
        updates["dataset"] = str(dataset.with_path(dataset.path.resolve()))
    return config.model_copy(update=updates) if updates else config


def _check_distribute(config: RunConfig, kind: str) -> None:
    """Replicas need a tensor backend, client shards an event-loop one, and Ray its extra;
    all said before any folder is made."""
    spec = config.distribute
    if spec.enabled and kind != "tensor":
        raise ConfigError(f"distribute.replicas serves tensor backends (onnxruntime, pytorch, synthetic); backend "
                          f"{config.backend!r} runs on an event loop: send its requests from client shards "
                          "(distribute.client_processes) or scale it behind an HTTP server")
    if spec.shards and kind != "async":
        raise ConfigError(f"distribute.client_processes/client_nodes shard the client of an HTTP backend; backend "
                          f"{config.backend!r} computes in this process: scale it with distribute.replicas"
                          + (" (tensor backends)" if kind == "tensor" else " or behind an HTTP server"))
    if spec.needs_ray and importlib.util.find_spec("ray") is None:
        raise ConfigError(RAY_MISSING)


def new_results_dir(root: Path, label: str) -> Path:
    """A new, unique `root/<timestamp>-<label>` folder; clear errors when root is unusable."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create output dir {root}: {e.strerror}; pass --output-dir DIR") from e
    if not os.access(root, os.W_OK):
        raise OutputError(f"output dir {root} is not writable; pass --output-dir DIR")
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = root / f"{stamp}-{label}"
    path, n = base, 1
    while True:
        try:
            path.mkdir()
            return path
        except FileExistsError:
            n += 1
            path = base.with_name(f"{base.name}-{n}")


def _manifest(config: RunConfig, run_dir: Path) -> dict[str, Any]:
    files: dict[str, str] = {folder.RUN_CONFIG: sha256_file(run_dir / folder.RUN_CONFIG)}
    for key in ("model", "mlperf_conf", "user_conf"):
        value = getattr(config, key)
        if value and Path(value).is_file():
            files[key] = sha256_file(Path(value))
    return {
        "harness_version": __version__,
        "started_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv,
        "sha256": files,
    }


def run(config: RunConfig, output_root: Path, audit_config: str | None = None,
        expect_cluster: dict[str, Any] | None = None, failed_root: Path | None = None) -> RunOutcome:
    """One test in a child process. `audit_config`: the text of a LoadGen compliance
    audit.config (TEST01/TEST04), written into the folder before the child starts.
    `expect_cluster`: a rerun's original cluster shape (harness.results.cluster); the child
    refuses, before the test, a cluster that is not equivalent. `failed_root`: where an
    attempt that never started is set aside (default `output_root`), for a pilot run in a
    temporary folder whose failure is the run's. A run the harness sized that still ran
    out before min_duration is run once more, sized from its own figure (sizing.resize)."""
    config = resolve(config)
    # a pilot is a run; one that cannot start keeps its attempt where this run's would be
    config, sizing = size_offline(config, registry.get(config.backend).kind, partial(run, failed_root=output_root))
    outcome = _run_once(config, sizing, output_root, audit_config, expect_cluster, failed_root)
    again = resize(config, sizing, outcome.summary) if outcome.stopped_by is None else None
    if again is None:
        return outcome
    # The hint was the harness's and too small: the try was a pilot after all, and goes as
    # pilots go; the manifest of the run that follows keeps its figures (sizing.first_try).
    shutil.rmtree(outcome.run_dir, ignore_errors=True)
    return _run_once(*again, output_root, audit_config, expect_cluster, failed_root)


def _run_once(config: RunConfig, sizing: dict[str, Any] | None, output_root: Path, audit_config: str | None,
              expect_cluster: dict[str, Any] | None, failed_root: Path | None) -> RunOutcome:
    """The test of a resolved, sized config in a new folder (`run`'s arguments)."""
    # Before the folder: an endpoint that does not answer costs the user no run.
    telemetry_notes = check_endpoints(config.telemetry) if config.telemetry.enabled else []
    for note in telemetry_notes:
        print(f"warning: {note}", file=sys.stderr)
    stopper = _StopOnSignal()
    with stopper.installed():  # from the folder's creation, so no signal leaves it without a summary
        run_dir = new_results_dir(output_root, f"{config.name}-{config.scenario}")
        if audit_config is not None:
            folder.write_text(run_dir / folder.AUDIT_CONFIG, audit_config)
        if expect_cluster is not None:
            folder.write_text(run_dir / folder.EXPECTED_CLUSTER, json.dumps(expect_cluster, indent=2))
        folder.write_text(run_dir / folder.RUN_CONFIG, config.to_yaml())
        folder.write_text(run_dir / folder.SYSTEM, json.dumps(describe_system(), indent=2))
        manifest = _manifest(config, run_dir)
        if sizing is not None:
            manifest["sizing"] = sizing
        folder.write_text(run_dir / folder.MANIFEST, json.dumps(manifest, indent=2))

        status: dict[str, Any] = {"started_utc": manifest["started_utc"], "status": "complete"}
        rc = None  # stays None when a signal came before the child could start: it never does
        if stopper.signal_name is None:
            # stdin: a pipe the child reads to EOF, its portable sign that this process is gone.
            proc = subprocess.Popen([sys.executable, "-m", "harness.child", str(run_dir)], stdin=subprocess.PIPE)
            sampler = Sampler(run_dir, config.telemetry, proc.pid, telemetry_notes) if config.telemetry.enabled else None
            if sampler is not None and sampler.gpu_error:
                print(f"warning: telemetry gpu: {sampler.gpu_error}; the run has no GPU figures", file=sys.stderr)
            try:
                stopper.watch(proc)
                rc = proc.wait()
            finally:
                if sampler is not None:
                    sampler.stop()
                stopper.done()
                if proc.stdin is not None:
                    proc.stdin.close()
        stopped_by = stopper.signal_name if rc != 0 else None  # rc 0: the test ended before the stop reached it
        if stopped_by is not None:
            status.update(status="incomplete", reason=f"stopped by {stopped_by}")
        status, summary, error = _finish(run_dir, rc, status, manifest)
    if error and error.get("harness_error") and not summary["harness"].get("samples"):
        # A configuration or model problem found before the test started: one clear line,
        # raised as the type the child raised, so library callers can catch ModelError.
        # The folder moves under .failed/, which `results/*` globs skip: it holds no run.
        kept = _set_aside(run_dir, failed_root or output_root)
        err: HarnessError = BY_NAME.get(error.get("type", ""), HarnessError)(
            f"{error['message']} (the attempt's files: {kept})"
        )
        err.child_traceback = error.get("traceback")  # type: ignore[attr-defined]
        err.set_aside = kept  # type: ignore[attr-defined]
        raise err
    if status["status"] != "complete" and error and not error.get("harness_error"):
        # A bug of the harness (or the backend's runtime) in the child: a crash, not failed samples.
        err = RunError(f"{status['reason']} (traceback in {run_dir / folder.ERROR}; --debug prints it)")
        err.child_traceback = error.get("traceback")  # type: ignore[attr-defined]
        raise err
    return RunOutcome(run_dir, summary, stopped_by)


FAILED_DIR = ".failed"


def _set_aside(run_dir: Path, output_root: Path) -> Path:
    """Move the folder of a run that never started to OUTPUT/.failed/ (where it cannot be
    mistaken for a run), and return where it is; where the move fails, it stays put."""
    target = output_root / FAILED_DIR / run_dir.name
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(run_dir, target)  # a pilot's folder is on the temporary folder's disk
        return target
    except OSError:
        return run_dir


def _finish(run_dir: Path, rc: int | None, status: dict[str, Any], manifest: dict[str, Any]) -> tuple[dict, dict, dict | None]:
    """records.parquet, summary.json and the manifest's hashes, once the child has ended."""
    unsaved: list[OutputError] = []  # files this process could not write (a full disk)
    try:
        recover_records(run_dir)  # a crashed or killed child leaves its rows in records.partial
    except OutputError as e:  # records.partial keeps them; the summary says so
        unsaved.append(e)
    error = _child_error(run_dir)
    if rc and status["status"] == "complete":
        if rc < 0:
            why = f"the test process was killed by signal {signal.Signals(-rc).name}"
        elif error:
            why = error["message"]
        elif rc - 128 in _STOP_SIGNALS:  # the child's own stop (harness.child.main.Lifeline)
            why = f"the test process was stopped by {signal.Signals(rc - 128).name}"
        else:
            why = f"the test process exited with code {rc}"
        status.update(status="incomplete", reason=why)
    if unsaved:
        status.update(status="incomplete", reason=f"{unsaved[0]}; the records stay in {folder.PARTIAL_RECORDS}")
    try:
        summary = write_summary(run_dir, status)
    except OutputError as e:
        # Nothing more can be written here: one line, the incomplete run's code, the folder as it is.
        unsaved.append(e)
        raise RunError(
            f"the run could not be saved: {'; '.join(map(str, unsaved))}; what was recorded stays in {run_dir}"
            " (harness check calls it incomplete); free space or pass --output-dir DIR"
        ) from e
    # Hash what the run produced, so `harness check` can tell an edited record or summary.
    for produced in (folder.RECORDS, folder.SUMMARY, folder.TELEMETRY, folder.CLUSTER, folder.SCHEDULE):
        if (run_dir / produced).is_file():
            manifest["sha256"][produced] = sha256_file(run_dir / produced)
    try:
        folder.write_text(run_dir / folder.MANIFEST, json.dumps(manifest, indent=2))
    except OutputError as e:
        raise RunError(f"the run's summary.json was written, but {e}; free space or pass --output-dir DIR") from e
    return status, summary, error


_STOP_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)
STOP_GRACE_S = 10.0  # the child flushes its records and exits in well under a second


class _StopOnSignal:
    """SIGINT, SIGTERM and SIGHUP stop the run, not this process.

    The first one sends SIGTERM to the child (which flushes its records and exits) and
    arms a SIGKILL for it after STOP_GRACE_S; a second one kills the child at once.
    SIGTERM, not the SIGINT forwarded before: the child treats both alike once its
    handlers are set, but one that comes while the child is still importing (before them)
    is then a quiet exit, not a KeyboardInterrupt traceback on stderr.

    The handler never raises, so neither a second Ctrl-C nor a SIGTERM from `timeout`
    during the summary's write can cut it: the run ends with summary.json, status
    incomplete, and the reason. Handlers are set only on the main thread (Python allows no
    other) and only while the run makes its folder; the previous ones come back after, so a
    signal that comes once `run` has returned is the caller's again.
    """

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._proc: subprocess.Popen | None = None
        self._kill_timer: threading.Timer | None = None

    @contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # a library caller's worker thread: signals reach its main thread, not here
            return
        previous = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}
        for sig in _STOP_SIGNALS:
            signal.signal(sig, self._on_signal)
        try:
            yield
        finally:
            for sig, handler in previous.items():
                # None: a handler set outside Python, which cannot be put back; the default is closest.
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    # Everything but the kill timer runs on the main thread (handlers included), so no lock.
    def watch(self, proc: subprocess.Popen) -> None:
        self._proc = proc
        if self.signal_name is not None:  # a signal came while the child was being started
            self._stop_child(kill=False)

    def done(self) -> None:
        self._proc = None
        if self._kill_timer is not None:
            self._kill_timer.cancel()

    def _on_signal(self, signum: int, frame: Any) -> None:
        first = self.signal_name is None
        if first:
            self.signal_name = signal.Signals(signum).name
        self._stop_child(kill=not first)

    def _stop_child(self, kill: bool) -> None:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return  # not started yet (`watch` forwards it), or already ended: the summary is next
        if kill:
            proc.kill()
        elif self._kill_timer is None:
            proc.send_signal(signal.SIGTERM)
            self._kill_timer = threading.Timer(STOP_GRACE_S, proc.kill)
            self._kill_timer.daemon = True
            self._kill_timer.start()


def _child_error(run_dir: Path) -> dict[str, Any] | None:
    return folder.read_json(run_dir, folder.ERROR)
