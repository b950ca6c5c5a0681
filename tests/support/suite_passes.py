"""`make test`'s two passes at once: every test not marked `parallel` alone, in the
foreground, and the `parallel` tests two at a time beside it at idle priority.

    python -m tests.support.suite_passes PYTEST_ARGS...

A test that times anything needs the machine to itself, and most of the suite's time is
such tests waiting: on the AVX2 CPU the serial pass kept the 2 cores busy a third of its
25 min. The `parallel` tests (their verdicts do not depend on speed) take only what is left:
- each of their processes is SCHED_IDLE, so the kernel runs it only when no other task of
  its group wants a core, and a waking timing test preempts it at once;
- they run in their own session with its autogroup at nice 19 (where the kernel groups
  tasks by session, `/proc/sys/kernel/sched_autogroup_enabled`), so beside a test's own
  sessions (Ray, client shards) they weigh 15 against 1,024, not as much as it.
At worst (a host that places the two vCPUs on one core's two threads) they are the one busy
core the timing files were shown to pass beside (docs/testing.md, "The flake hunt").

The parallel pass writes to a log printed after the serial pass; its exit code and the
serial pass's decide this one's: 0 when both passed, else the serial pass's failing code,
then the parallel pass's. Stopped
(Ctrl-C, SIGTERM), it stops the parallel pass's session too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

PARALLEL = ["-m", "parallel", "-n", "2", "--dist", "loadfile"]
SERIAL = ["-m", "not parallel"]
NO_TESTS = 5  # pytest's exit code when a pass selects nothing


def background() -> None:
    """In the parallel pass's process before it runs pytest (inherited by its workers and
    their children): idle scheduling, and its session's autogroup at the lowest weight."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    with contextlib.suppress(OSError):  # no autogroup in this kernel: SCHED_IDLE alone decides
        Path("/proc/self/autogroup").write_text("19")


def main(args: list[str]) -> int:
    pytest = [sys.executable, "-m", "pytest", *args]
    with tempfile.TemporaryDirectory(prefix="harness-parallel-pass-") as work:
        log_path = Path(work) / "parallel.log"
        with log_path.open("w") as log:
            parallel = subprocess.Popen([*pytest, *PARALLEL, "--basetemp", str(Path(work) / "tmp")], stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=background)

        def stop(signum: int, _frame: object) -> None:
            os.killpg(parallel.pid, signal.SIGTERM)
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        serial_rc = subprocess.call([*pytest, *SERIAL])
        print("\n--- the tests marked `parallel`, two at a time at idle priority beside the pass above", flush=True)
        parallel_rc = parallel.wait()
        sys.stdout.write(log_path.read_text())
        print(f"--- serial pass: exit {serial_rc}; parallel pass: exit {parallel_rc}", flush=True)
    # 5: pytest found no test of its pass in the paths it was given (a run over part of tests/)
    return next((rc for rc in (serial_rc, parallel_rc) if rc not in (0, NO_TESTS)), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
