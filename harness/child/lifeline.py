"""The child's lifeline: it ends this process, keeping the records, on a stop signal or when
the parent dies (harness.run.runner stops a run through it; docs/architecture.md, "Stopping
a run")."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import stat
import sys
import threading
from typing import Any, NoReturn

from harness.child.record_writer import RecordWriter

STOP_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class Lifeline:
    """Ends this process, keeping its records, on a stop signal or when the parent dies.

    LoadGen runs the whole test inside one C++ call on the main thread with the GIL
    released, and has no abort. Python runs its signal handlers (KeyboardInterrupt
    included) on the main thread only, between bytecodes, so none runs during the test:
    a SIGINT sent to the child used to change nothing (the test ran its full
    min_duration_s and exited 0; the parent's 10 s SIGKILL ended it). So the signal is
    taken off Python's wakeup fd, which the C-level handler writes at once, by a thread
    here; it flushes the records into records.parquet and exits 128 + the signal's number,
    as a shell reports a death by that signal. The test ends the way a crash ends it
    (`crash`), minus error.json: a stop is not a bug. The parent writes the summary.

    Parent death, two ways. `prctl(PR_SET_PDEATHSIG, SIGTERM)` (Linux) turns the parent's
    death, SIGKILL included, into a SIGTERM here at once, even when the parent's end of
    the pipe below leaked into a process it forked. The portable way (macOS, BSD) and the
    cover for the parent dying before prctl ran: the parent hands the child a pipe as
    stdin and never writes to it; read() returns EOF when the last writer is gone. Polling
    getppid() would also work, but wakes the process during the test; both of these sleep
    in the kernel. PDEATHSIG fires when the *thread* that forked exits, and the parent's
    forking thread waits for the child, so it cannot end first.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: RecordWriter | None = None
        self._wake: tuple[socket.socket, socket.socket] | None = None  # held so the fds stay open

    @classmethod
    def start(cls) -> Lifeline:
        """Call on the main thread (signal handlers can only be set there), first thing."""
        lifeline = cls()
        wake_r, wake_w = socket.socketpair()  # a socket, so set_wakeup_fd also takes it on Windows
        wake_w.setblocking(False)
        for sig in STOP_SIGNALS:
            signal.signal(sig, _ignore)  # a Python handler, so the C handler writes the wakeup fd
        signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        lifeline._wake = (wake_r, wake_w)
        threading.Thread(target=lifeline._on_signal, args=(wake_r,), name="lifeline-signals", daemon=True).start()
        die_with_parent()
        if _stdin_is_pipe():
            threading.Thread(target=lifeline._on_parent_gone, name="lifeline-parent", daemon=True).start()
        return lifeline

    def keep(self, records: RecordWriter) -> None:
        self._records = records

    def stop(self, signum: int) -> NoReturn:
        with self._lock:  # a second signal while stopping waits here; the process ends first
            try:
                if self._records is not None:
                    self._records.close()
            finally:
                end_children()
                os._exit(128 + signum)

    def _on_signal(self, wake: socket.socket) -> None:
        while True:
            data = wake.recv(64)
            stops = [b for b in data if b in STOP_SIGNALS]
            if stops:
                self.stop(stops[0])

    def _on_parent_gone(self) -> None:
        try:
            while os.read(0, 4096):
                pass  # the parent writes nothing; a stray byte is not a hang-up
        except OSError:
            pass
        self.stop(getattr(signal, "SIGHUP", signal.SIGTERM))


def _ignore(signum: int, frame: Any) -> None:
    """The work is done by Lifeline's thread; by the time this runs the process is ending."""


def end_children() -> None:
    """Kill every process this one started, before it ends with os._exit: a local Ray's
    daemons (its dashboard and runtime-env agents outlived the test process by minutes when
    it was stopped), client shards. A cluster the run joined is not its child: untouched."""
    try:
        import psutil

        children = psutil.Process().children(recursive=True)
    except Exception:  # noqa: BLE001 - no psutil, or /proc unreadable: nothing more to do
        return
    for child in children:
        try:
            child.kill()
        except Exception:  # noqa: BLE001 - gone already
            pass


def die_with_parent() -> None:
    """SIGTERM to this process when its parent dies (Linux; elsewhere a no-op)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # no prctl (a libc without it): the stdin pipe still notices the parent's end


def _stdin_is_pipe() -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(0).st_mode)
    except OSError:
        return False
