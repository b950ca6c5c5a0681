"""The driver's end of a client shard (harness.child.shard): how it is started and talked to.

Both transports offer the same few verbs, so `harness.child.client_shards` does not know
which one it drives:

    call(method, *args)   a ShardCore method, in order; its exception re-raised here
    clock_exchange()      (t0, t1, t2): driver, shard, driver clocks (harness.child.clock_sync)
    submit(sent_ns, items) forward samples; no answer
    on_events / on_crash / on_lost   set by the SUT; run on this link's receiver thread

`ProcessLink`: `python -m harness.child.shard FD` on this host, over a socket pair (one
write per message; a shard whose driver dies reads EOF and exits). `RayLink`: a
`RayShard` actor anywhere in a Ray cluster, the same messages over a TCP connection to
it. benchmarks/bench_shards.py measures both.
"""

from __future__ import annotations

import abc
import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from harness.errors import BY_NAME

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


class _ConnLink(_Handlers, abc.ABC):
    """A shard on the far end of a multiprocessing Connection: calls and submits written to
    it, events and replies read back by one receiver thread."""

    transport = ""

    def __init__(self, index: int, conn: Any) -> None:
        self.index = index
        self._conn = conn
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._waiting: dict[int, tuple[threading.Event, list[Any]]] = {}
        self._closing = False
        self.lost: str | None = None
        self.where: dict[str, Any] = {"transport": self.transport}
        self._reader = threading.Thread(target=self._read, name=f"shard {index} receiver", daemon=True)

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
            self._closing = True  # the shard's end closes after answering: its EOF is no loss
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

    @abc.abstractmethod
    def _ended(self) -> str:
        """Why the shard's end closed (the connection ended without a finish)."""

    @abc.abstractmethod
    def close(self) -> None:
        """After `finish` (or a loss): the shard's end gone, the connection closed."""


class ProcessLink(_ConnLink):
    """`python -m harness.child.shard FD` on this host, over a socket pair."""

    transport = "process"

    def __init__(self, index: int) -> None:
        from multiprocessing.connection import Connection

        ours, theirs = socket.socketpair()
        # Its own session: a Ctrl-C at the terminal reaches the test process, which stops the
        # run; the shard ends when its socket closes (or, on Linux, when this process dies).
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.child.shard", str(theirs.fileno())],
                                     pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, start_new_session=True)
        theirs.close()
        super().__init__(index, Connection(ours.detach()))
        self.where["pid"] = self.proc.pid
        self._reader.start()

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
        """After `finish` (or a loss, or a refusal before the test): the process gone, the socket closed."""
        self._closing = True
        # Our side's end of writing first: the shard ends when its socket reads end-of-file,
        # and one that never got `finish` (a run refused before its test) was otherwise
        # waited on for the whole timeout, 10 s a shard. Its last words can still be read.
        try:
            with socket.socket(fileno=os.dup(self._conn.fileno())) as s:
                s.shutdown(socket.SHUT_WR)
        except OSError:  # already closed
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._conn.close()
        self._reader.join(5)


class RayLink(_ConnLink):
    """A `harness.child.shard.RayShard` actor anywhere in a Ray cluster. Ray places it and
    keeps its lifetime; the messages go over a connection of their own to the actor's node
    (harness.child.direct_channel: a Ray call costs ~0.8 ms each way, the connection
    ~0.08 ms), the same messages as a process shard's."""

    transport = "ray"

    def __init__(self, index: int, actor: Any, ray: Any) -> None:
        import secrets

        from harness.child.direct_channel import connect

        self._actor = actor
        self._ray = ray
        key = secrets.token_bytes(32)
        super().__init__(index, connect(ray.get(actor.open_channel.remote(key), timeout=CALL_TIMEOUT_S), key))
        self._reader.start()

    def _ended(self) -> str:
        """Why the actor's connection closed: Ray's account of its death when it has one."""
        from ray.exceptions import RayActorError

        how = "closed its connection"
        try:
            self._ray.get(self._actor.where.remote(), timeout=10)
        except RayActorError as e:
            how = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        except Exception:  # noqa: BLE001 - Ray cannot say either: the connection's account stands
            pass
        return f"client shard {self.index} (pid {self.where.get('pid')} on {self.where.get('address')}) ended: {how}"

    def close(self) -> None:
        self._closing = True
        self._conn.close()
        self._reader.join(5)
        try:
            self._ray.kill(self._actor)
        except Exception:  # noqa: BLE001 - already gone
            pass
