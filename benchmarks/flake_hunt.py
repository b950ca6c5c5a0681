"""Run timing-sensitive test files again and again, alone and beside one busy core, and count
what fails: the flake hunt of docs/testing.md.

    python benchmarks/flake_hunt.py --runs 20 tests/child/test_scenarios.py tests/backends/test_http_truth.py
    python benchmarks/flake_hunt.py --runs 5 --markdown          # the default list, a table for docs/testing.md
    python benchmarks/flake_hunt.py --runs 20 "tests/run/test_telemetry.py::test_a tests/run/test_telemetry.py::test_b"

An entry may be several test ids separated by spaces: one pytest run, one row of the table.

Quiet and busy runs alternate round by round (this machine is shared and bursty: a burst
then hits both sides alike). "Busy" is one process spinning on the CPU for the whole run,
as `stress-ng --cpu 1` would, started before pytest and killed after it. "Idle" is what
`make test` puts beside the timing tests: two such processes at idle priority, as
tests/support/suite_passes.py starts its parallel pass (SCHED_IDLE, their own session's
autogroup at nice 19). "Suite" is what `make test` really runs beside them: the tests
marked `parallel` themselves, two at a time at idle priority (tests/support/suite_passes.py's
own command), started again whenever they finish, so every timing file meets the whole
parallel pass's mix of imports, servers and disk, not a loop that only spins. Each
failure's test id and its assertion (pytest's "E " lines) go to --log (JSON lines), so a
failure is a finding with its message, not a count.

    python benchmarks/flake_hunt.py --runs 10 --conditions suite --markdown   # issue 44's hunt
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support.suite_passes import PARALLEL, background  # noqa: E402  (how make test runs its parallel pass)
#: the serial pass's files whose assertions are on time (docs/testing.md, "Timing assertions,
#: audited"): injected service times, LoadGen's figures, real servers' speed, queueing theory.
#: vLLM's file is left out of the default rounds (about 6 min a run on these CPUs); name it.
DEFAULT_FILES = (
    "tests/child/test_scenarios.py",
    "tests/child/test_server_defaults.py",
    "tests/child/test_sut_coalescing.py",
    "tests/child/test_warmup_timing.py",
    "tests/child/test_schedule.py",
    "tests/child/test_session_hold.py",
    "tests/backends/test_http_truth.py",
    "tests/backends/test_http_sessions.py",
    "tests/backends/test_http_llamacpp.py",
    "tests/distribute/test_client_shards.py",
    "tests/distribute/test_replicas.py",
    "tests/distribute/test_direct_channel.py",
    "tests/run/test_capacity.py",
    "tests/run/test_concurrency.py",
    "tests/run/test_schedule_replay.py",
    "tests/run/test_telemetry.py",
    "tests/real_servers/test_calibrate.py",
)
_FAILED = re.compile(r"^(FAILED|ERROR) (\S+)(?: - (.*))?$", re.M)


def spin(idle: bool = False) -> subprocess.Popen:
    """One core kept busy: a Python loop that never sleeps (at idle priority: `make test`'s
    parallel pass beside the timing tests)."""
    loop = [sys.executable, "-c", "while True: pass"]
    return subprocess.Popen(loop, start_new_session=True, preexec_fn=background) if idle else subprocess.Popen(loop)


class ParallelPass:
    """`make test`'s parallel pass, kept running beside a timing file: started as
    suite_passes.main starts it, and started again each time it ends. Its own verdicts are
    not the hunt's: its output goes to a file, and how many passes ran is counted."""

    def __init__(self, env: dict[str, str], workdir: Path) -> None:
        self._env, self._workdir = env, workdir
        self.passes = 0
        self._proc: subprocess.Popen | None = None

    def poll(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                self.passes += 1
            with (self._workdir / "parallel.log").open("w") as log:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *PARALLEL,
                     "--basetemp", str(self._workdir / "tmp")],
                    cwd=ROOT, env=self._env, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True, preexec_fn=background)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        self._proc = None


def run_file(path: str, condition: str, env: dict[str, str],
             beside: ParallelPass | None = None) -> tuple[float, list[tuple[str, str]]]:
    hogs = [] if condition in ("quiet", "suite") else [spin()] if condition == "busy" else [spin(idle=True), spin(idle=True)]
    try:
        t0 = time.monotonic()
        test = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", *path.split()],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        if beside is None:
            stdout, stderr = test.communicate()
        else:  # keep the parallel pass going for as long as the file runs
            while True:
                beside.poll()
                try:
                    stdout, stderr = test.communicate(timeout=1.0)
                    break
                except subprocess.TimeoutExpired:
                    continue
        took = time.monotonic() - t0
        out = subprocess.CompletedProcess(test.args, test.returncode, stdout, stderr)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    # pytest's short summary drops the message when the test id fills its line: the
    # failure's own "E " lines (the assertion and its values) are kept instead
    said = "\n".join(line for line in out.stdout.splitlines() if line.startswith("E "))[-2000:]
    failures = [(m.group(2), m.group(3) or said) for m in _FAILED.finditer(out.stdout)]
    if out.returncode not in (0, 1) or (out.returncode == 1 and not failures):
        failures.append((path, f"pytest exit {out.returncode}: {out.stdout[-300:]}{out.stderr[-300:]}"))
    return took, failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", default=list(DEFAULT_FILES))
    ap.add_argument("--runs", type=int, default=20, help="runs of each file in each condition")
    ap.add_argument("--conditions", default="quiet,busy", help="quiet, busy, idle, suite (comma-separated)")
    ap.add_argument("--log", type=Path, default=Path("flake_hunt.jsonl"))
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = ap.parse_args()
    conditions = args.conditions.split(",")
    if unknown := set(conditions) - {"quiet", "busy", "idle", "suite"}:
        ap.error(f"--conditions {args.conditions}: {', '.join(sorted(unknown))} is none of quiet, busy, idle, suite")
    env = {**os.environ}
    runs: dict[tuple[str, str], int] = defaultdict(int)
    failed: dict[tuple[str, str], int] = defaultdict(int)
    seconds: dict[tuple[str, str], float] = defaultdict(float)
    workdir = Path(tempfile.mkdtemp(prefix="flake-hunt-parallel-pass-"))
    beside = ParallelPass(env, workdir) if "suite" in conditions else None
    with open(args.log, "a") as log:
        for r in range(args.runs):
            for path in args.files:
                for cond in conditions:
                    if beside is not None and cond != "suite":
                        beside.stop()  # the other conditions run without it
                    took, failures = run_file(path, cond, env, beside if cond == "suite" else None)
                    key = (path, cond)
                    runs[key] += 1
                    seconds[key] += took
                    failed[key] += bool(failures)
                    for test, message in failures:
                        log.write(json.dumps({"round": r, "file": path, "condition": cond, "test": test,
                                              "message": message, "time": time.time()}) + "\n")
                    print(f"round {r + 1}/{args.runs} {cond:5} {path}: {took:.0f} s, "
                          f"{'FAILED ' + ', '.join(t for t, _ in failures) if failures else 'ok'}", flush=True)
    if beside is not None:
        beside.stop()
        print(f"\nthe parallel pass ran beside them: {beside.passes} whole passes, and one cut short at the end")
    shutil.rmtree(workdir, ignore_errors=True)
    print()
    if args.markdown:
        print("| file | " + " | ".join(f"{c}: failed / runs" for c in conditions) + " | s a run |")
        print("|---|" + "---|" * (len(conditions) + 1))
    for path in args.files:
        cells = [f"{failed[(path, c)]} / {runs[(path, c)]}" for c in conditions]
        mean = sum(seconds[(path, c)] for c in conditions) / max(1, sum(runs[(path, c)] for c in conditions))
        print(f"| {path} | " + " | ".join(cells) + f" | {mean:.0f} |" if args.markdown
              else f"{path}: " + ", ".join(f"{c} {cell}" for c, cell in zip(conditions, cells)) + f" ({mean:.0f} s a run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
