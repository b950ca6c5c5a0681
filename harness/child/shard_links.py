"""The driver's end of a client shard (harness.child.shard): how it is started and talked to.

Both transports offer the same few verbs, so `harness.child.client_shards` does not know
which one it drives:

    call(method, *args)   a ShardCore method, in order; its exception re-raised here
    clock_exchange()      (t0, t1, t2): driver, shard, driver clocks (harness.child.clock_sync)
    submit(sent_ns, items) forward samples; no answer
    on_events / on_crash / on_lost   set by the SUT; run on this link's receiver thread

`ProcessLink`: `python -m harness.child.shard FD` on this host, over a socket pair (one
write per message; a shard whose driver dies reads EOF and exits). `RayLink`: a
`RayShard` actor anywhere in a Ray cluster; its events are pulled in batches, one
round trip per batch. benchmarks/bench_shards.py measures both.
"""

from __future__ import annotations

import itertools
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from harness.errors import BY_NAME, HarnessError

_now = time.perf_counter_ns
#: how long a shard may take to set up (load its backend, send its warm-up) or to finish
CALL_TIMEOUT_S = 300.0


class ShardLost(Exception):
    """The shard's process or actor ended: what it had in flight fails with this reason."""


class ShardFailed(Exception):
    """A call failed inside the shard with an exception that is not the harness's own."""


def remote_error(index: int, method: str, info: tuple[str, str, str]) -> Exception:
    """The shard's exception as its own type when it is the harness's (a ConfigError at
    setup stays a ConfigError: one line, exit 2), with the shard's traceback attached."""
    name, message, tb = info
    cls = BY_NAME.get(name)
    err: Exception = cls(message) if cls is not None else ShardFailed(f"client shard {index}: {method}: {name}: {message}")
    err.child_traceback = tb  # type: ignore[attr-defined]
    return err


class _Handlers:
    """What a link calls from its receiver thread; the SUT sets them before the test."""

    on_events: Callable[[Any, int, tuple], None] | None = None
    on_crash: Callable[[Any, tuple], None] | None = None
    on_lost: Callable[[Any, str], None] | None = None


class ProcessLink(_Handlers):
    def __init__(self, index: int) -> None:
        from multiprocessing.connection import Connection

        self.index = index
        ours, theirs = socket.socketpair()
        # Its own session: a Ctrl-C at the terminal reaches the test process, which stops the
        # run; the shard ends when its socket closes (or, on Linux, when this process dies).
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.child.shard", str(theirs.fileno())],
                                     pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, start_new_session=True)
        theirs.close()
        self._conn = Connection(ours.detach())
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._waiting: dict[int, tuple[threading.Event, list[Any]]] = {}
        self._closing = False
        self.lost: str | None = None
        self.where: dict[str, Any] = {"transport": "process", "pid": self.proc.pid}
        self._reader = threading.Thread(target=self._read, name=f"shard {index} receiver", daemon=True)
        self._reader.start()

    def _send(self, msg: Any) -> None:
        try:
            with self._lock:
                self._conn.send(msg)
        except OSError as e:
            raise ShardLost(self.lost or f"client shard {self.index}: {e}") from None

    def _ask(self, method: str, args: tuple, timeout: float) -> tuple[bool, Any, int, int]:
        cid = next(self._ids)
        box: list[Any] = []
        done = threading.Event()
        self._waiting[cid] = (done, box)
        sent = _now()
        self._send(("call", cid, method, args))
        if self.lost is not None and not done.is_set():  # the receiver ended before it saw this call
            self._waiting.pop(cid, None)
            raise ShardLost(self.lost)
        if not done.wait(timeout):
            raise ShardLost(f"client shard {self.index} did not answer {method} in {timeout:g} s")
        ok, value, received = box
        return ok, value, sent, received

    def call(self, method: str, *args: Any, timeout: float = CALL_TIMEOUT_S) -> Any:
        if method == "finish":
            self._closing = True  # the shard exits after answering: its EOF is no loss
        ok, value, _, _ = self._ask(method, args, timeout)
        if not ok:
            if value[0] == ShardLost.__name__:
                raise ShardLost(value[1])
            raise remote_error(self.index, method, value)
        return value

    def clock_exchange(self) -> tuple[int, int, int]:
        ok, value, sent, received = self._ask("clock", (), 10.0)
        if not ok:
            raise ShardLost(value[1])
        return sent, value, received

    def submit(self, sent_ns: int, items: list[tuple[int, int, int]]) -> None:
        self._send(("submit", sent_ns, items))

    def _read(self) -> None:
        conn = self._conn
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                break
            received = _now()
            kind = msg[0]
            if kind == "events":
                if self.on_events is not None:
                    self.on_events(self, received, msg)
            elif kind == "reply":
                done, box = self._waiting.pop(msg[1])
                box[:] = [msg[2], msg[3], received]
                done.set()
            elif kind == "crash" and self.on_crash is not None:
                self.on_crash(self, msg)
        if self._closing:
            return
        self.lost = self._ended()
        for done, box in list(self._waiting.values()):
            box[:] = [False, (ShardLost.__name__, self.lost, ""), 0]
            done.set()
        self._waiting.clear()
        if self.on_lost is not None:
            self.on_lost(self, self.lost)

    def _ended(self) -> str:
        """Why the shard's socket closed: its exit code or signal, once it has exited."""
        try:
            code = self.proc.wait(5)
        except subprocess.TimeoutExpired:
            code = None
        how = ("closed its socket" if code is None
               else f"killed by {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals()
               else f"exited with {code}")
        return f"client shard {self.index} (pid {self.proc.pid} on {self.where.get('hostname', 'this host')}) ended: {how}"

    def close(self) -> None:
        """After `finish` (or a loss): the process gone, the socket closed."""
        self._closing = True
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._conn.close()
        self._reader.join(5)


class RayLink(_Handlers):
    """A `harness.child.shard.RayShard` actor. Its events wait in the actor until the
    receiver thread pulls them: one round trip brings every message since the last."""

    def __init__(self, index: int, actor: Any, ray: Any) -> None:
        self.index = index
        self._actor = actor
        self._ray = ray
        self._closing = False
        self.lost: str | None = None
        self.where: dict[str, Any] = {"transport": "ray"}
        self._reader: threading.Thread | None = None

    def _wrap(self, e: Exception, method: str) -> Exception:
        from ray.exceptions import RayActorError, RayTaskError

        if isinstance(e, RayTaskError):
            cause = getattr(e, "cause", None)
            if isinstance(cause, HarnessError):
                return cause
            return ShardFailed(f"client shard {self.index}: {method}: {str(e).splitlines()[0]}")
        if isinstance(e, RayActorError):
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            self.lost = self.lost or (f"client shard {self.index} (pid {self.where.get('pid')} on "
                                      f"{self.where.get('address')}) ended: {first[:200]}")
            return ShardLost(self.lost)
        return e

    def call(self, method: str, *args: Any, timeout: float = CALL_TIMEOUT_S) -> Any:
        if method == "finish":
            self._closing = True
        try:
            return self._ray.get(self._actor.call.remote(method, args), timeout=timeout)
        except Exception as e:  # noqa: BLE001 - translated: the backend's, the harness's, a lost actor
            raise self._wrap(e, method) from None

    def clock_exchange(self) -> tuple[int, int, int]:
        sent = _now()
        try:
            value = self._ray.get(self._actor.clock.remote(), timeout=10)
        except Exception as e:  # noqa: BLE001
            raise self._wrap(e, "clock") from None
        return sent, value, _now()

    def submit(self, sent_ns: int, items: list[tuple[int, int, int]]) -> None:
        if self.lost:
            raise ShardLost(self.lost)
        self._actor.submit.remote(sent_ns, items)

    def start_reader(self) -> None:
        self._reader = threading.Thread(target=self._read, name=f"shard {self.index} receiver", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while not self._closing:
            try:
                messages = self._ray.get(self._actor.pull.remote())
            except Exception as e:  # noqa: BLE001 - the actor died (or Ray went away)
                if self._closing:
                    return
                lost = self._wrap(e, "pull")
                if self.on_lost is not None:
                    self.on_lost(self, self.lost or str(lost))
                return
            received = _now()
            for msg in messages:
                if msg[0] == "events" and self.on_events is not None:
                    self.on_events(self, received, msg)
                elif msg[0] == "crash" and self.on_crash is not None:
                    self.on_crash(self, msg)

    def close(self) -> None:
        self._closing = True
        if self._reader is not None:
            self._reader.join(5)
        try:
            self._ray.kill(self._actor)
        except Exception:  # noqa: BLE001 - already gone
            pass
