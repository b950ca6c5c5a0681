"""A client shard: its own process (or Ray actor), event loop, backend instance and
connection pool, serving the samples that the process holding LoadGen forwards to it.

One asyncio loop saturates one core: thousands of concurrent streams at tens of tokens a
second are hundreds of thousands of events a second, and a loop that falls behind stamps
every chunk late (docs/telemetry.md, "client saturated"). LoadGen must stay one test in
one process, so the driver (harness.child.client_shards) keeps LoadGen, the records and
the timeline, and forwards `(query id, dataset index, issue time)` to N shards. Each
shard runs the same `StreamingSUT` as the single loop, with an outlet that sends each loop
iteration's first tokens, completions, records and token rows back as one message.

A shard builds the run's dataset itself from the same spec and seed (the driver checks the
fingerprint), so a forwarded sample is three integers, never a prompt. Its clock is the
driver's on one host; elsewhere the driver measures the offset (harness.child.clock_sync)
and the shard subtracts it from every time it stamps.

Transports (harness.child.shard_links): `python -m harness.child.shard FD` talks over a
socket pair; a `RayShard` actor serves the same messages over a TCP connection.
"""

from __future__ import annotations

import os
import platform
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from backends.base import LoadContext
from harness.child.clock_sync import clock_identity
from harness.config import registry
from harness.config.run_config import RunConfig

#: a test's stand-in for a shard on another host: "SHARD:NS" adds NS to that shard's clock,
#: "SHARD:NS:PPM" also makes it run PPM parts per million fast (a drifting oscillator), and
#: "SHARD:NS:PPM:US" answers each clock exchange US microseconds late (a long round trip)
SKEW_ENV = "HARNESS_TEST_SHARD_CLOCK_SKEW"

#: the options of a streaming backend that are per client, so a shard takes its share
#: (pools and warm-up connections): N shards with 1/N each open what one loop would
SPLIT_OPTIONS = ("max_in_flight", "connections", "warmup_requests")


def share(total: int, shards: int, index: int) -> int:
    """Shard `index`'s part of `total` split over `shards`: the first ones take the remainder."""
    return total // shards + (1 if index < total % shards else 0)


def shard_options(options: dict[str, Any], shards: int, index: int) -> dict[str, Any]:
    """The backend's options for shard `index`: per-client limits split (at least 1 each)."""
    out = dict(options)
    for key in SPLIT_OPTIONS:
        value = out.get(key)
        if isinstance(value, int) and value > 0:
            out[key] = max(1, share(value, shards, index))
    return out


def injected_skew(index: int) -> tuple[int, float]:
    """The clock skew (ns) and drift (ppm) a test asked this shard to pretend (SKEW_ENV),
    else (0, 0)."""
    parts = _injected(index)
    if len(parts) >= 2:
        return int(parts[1]), float(parts[2]) if len(parts) > 2 else 0.0
    return 0, 0.0


def injected_slow_exchange(index: int) -> float:
    """Seconds this shard holds each clock exchange (SKEW_ENV's fourth field), else 0."""
    parts = _injected(index)
    return float(parts[3]) / 1e6 if len(parts) >= 4 else 0.0


def _injected(index: int) -> list[str]:
    """SKEW_ENV's fields when they name this shard, else none."""
    parts = os.environ.get(SKEW_ENV, "").split(":")
    return parts if parts[0].strip() == str(index) else []


class ShardOutlet:
    """The shard's end of the SUT: first tokens, completions, record rows and token rows of
    one loop iteration, sent to the driver as one `("events", sent_ns, ...)` message."""

    def __init__(self, send: Callable[[Any], None], loop: Any, clock: Callable[[], int], return_outputs: bool) -> None:
        self._send = send
        self._loop = loop
        self._clock = clock
        self._return_outputs = return_outputs
        self._firsts: list[tuple[int, bytes | None]] = []
        self._done: list[tuple[int, bytes | None, int]] = []
        self._rows: list[tuple] = []
        self._tokens: list[dict[str, Any]] = []
        self._pending = False

    # --- the outlet (harness.child.stream_sut.LoadGenOutlet's methods) -------------------
    def first(self, qid: int, text: str | np.ndarray) -> None:
        """`text`: the first chunk's text, or (accuracy mode) its token ids, int32."""
        data = None
        if self._return_outputs and len(text):
            data = text.encode() if isinstance(text, str) else np.ascontiguousarray(text).tobytes()
        self._firsts.append((qid, data))
        self._schedule()

    def complete(self, qid: int, data: Any, n_tokens: int) -> None:
        if data is not None:
            data = data.encode() if isinstance(data, str) else np.ascontiguousarray(data).tobytes()
        self._done.append((qid, data, n_tokens))
        self._schedule()

    def unserved(self, qid: int, first_sent: bool, first_token_calls: bool) -> None:
        if first_token_calls and not first_sent:
            self._firsts.append((qid, None))
        self._done.append((qid, None, 2))
        self._schedule()

    # --- the records (harness.child.record_writer.RecordWriter's methods) ---------------
    def add(self, row: tuple) -> None:
        self._rows.append(row)
        self._schedule()

    def add_tokens(self, entry: dict[str, Any]) -> None:
        self._tokens.append(entry)
        self._schedule()

    def close(self) -> None:
        self.flush()

    def _schedule(self) -> None:
        if not self._pending:
            self._pending = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        self._pending = False
        if not (self._firsts or self._done or self._rows or self._tokens):
            return
        msg = ("events", self._clock(), self._firsts, self._done, self._rows, self._tokens)
        self._firsts, self._done, self._rows, self._tokens = [], [], [], []
        self._send(msg)


class ShardCore:
    """One shard's state and the calls the driver makes on it, whatever the transport.

    Calls in order: `setup` (backend loaded, dataset built, warm-up sent), `clock` (many
    times) and `set_clock`, `load`/`unload` (LoadGen's QSL), `begin`, then `submit` for
    every forwarded batch, then `finish` (the loop drained, its figures returned)."""

    def __init__(self, send: Callable[[Any], None]) -> None:
        self._send = send
        self._skew = 0
        self._drift_ppm = 0.0
        self._drift_from = 0
        self._offset = 0
        self._factory: Any = None
        self._sut: Any = None
        self._hops: list[int] = []
        self._return_outputs = False
        self._index = 0
        self._limit: int | None = None

    def raw_clock(self) -> int:
        """This shard's own clock, uncorrected (what a clock exchange reads)."""
        now = time.perf_counter_ns()
        if self._drift_ppm:
            return now + self._skew + int((now - self._drift_from) * self._drift_ppm * 1e-6)
        return now + self._skew

    def _clock(self) -> Callable[[], int]:
        """The clock every record stamp uses: the driver's, as near as the offset is known."""
        shift = self._skew - self._offset
        if self._drift_ppm:
            offset = self._offset
            return lambda: self.raw_clock() - offset
        if not shift:
            return time.perf_counter_ns
        return lambda: time.perf_counter_ns() + shift

    def setup(self, spec: dict[str, Any]) -> dict[str, Any]:
        from harness.child.stream_setup import build_streaming

        config = RunConfig(**spec["config"])
        self._index = spec["index"]
        self._limit = spec["limit"]
        self._return_outputs = spec["return_outputs"]
        self._skew, self._drift_ppm = injected_skew(self._index)
        self._drift_from = time.perf_counter_ns()
        cls = registry.get(config.backend)
        backend = cls(cls.Options(**spec["options"]))
        t0 = time.perf_counter()
        backend.load(LoadContext(config.model, config.max_batch or 1, config.scenario, config.seed, 1,
                                 log_outputs=self._return_outputs))
        load_s = time.perf_counter() - t0
        dataset, self._factory = build_streaming(config, backend, 1, self._return_outputs)
        # Named by OS id for host telemetry: this shard's loop and the thread reading the driver.
        threads = {str(t.native_id): (f"{t.name} (shard {self._index})" if t is not threading.main_thread()
                                      else f"shard {self._index} inbox")
                   for t in threading.enumerate() if t.native_id is not None}
        return {
            "threads": threads,
            "pid": os.getpid(),
            "hostname": platform.node(),
            "python": platform.python_version(),
            "clock_id": clock_identity() + (f":skewed {self._skew} {self._drift_ppm:g}ppm"
                                             if self._skew or self._drift_ppm else ""),
            "fingerprint": dataset.fingerprint(),
            "load_s": load_s,
            "warmup_s": self._factory.warmup_s,
            "response_format": self._factory.response_format,
            "describe": backend.describe(),
        }

    def set_clock(self, offset_ns: int) -> None:
        self._offset = offset_ns

    def load(self, indices: list[int]) -> None:
        self._factory.dataset.load(indices)

    def unload(self, indices: list[int]) -> None:
        self._factory.dataset.unload(indices)

    def begin(self) -> None:
        """The SUT, on the corrected clock, and its lag probe: just before the test."""
        factory = self._factory
        clock = self._clock()
        outlet = ShardOutlet(self._send, factory.runner.loop, clock, self._return_outputs)
        self._sut = factory.sut(outlet, outlet, self._return_outputs, crash=self._crashed,
                                max_in_flight=self._limit, clock=clock, worker=self._index)
        self._sut.start()

    def submit(self, sent_ns: int, items: list[tuple[int, int, int]]) -> None:
        """Samples forwarded by the driver (on the transport's thread): onto the loop."""
        sut = self._sut
        self._hops.append(sut._now() - sent_ns)
        sut._loop.call_soon_threadsafe(sut.put_items, items)

    def finish(self) -> dict[str, Any]:
        """After the test: the loop drained and closed; the shard's own figures."""
        sut = self._sut
        if sut is None:
            return {}
        sut.stop()
        sut.backend.close()
        # The loop's clock (time.monotonic) moved onto the driver's timeline, as the records are.
        shift = (self._skew - self._offset) / 1e9
        return {"lags": [(t + shift, lag) for t, lag in sut.lags], "forward_hops_ns": self._hops, "failed": sut.failed,
                "describe": sut.backend.describe()}

    def _crashed(self, exc: BaseException) -> None:
        """A bug of the harness's own code in this shard: the driver ends the run as a crash."""
        self._send(("crash", type(exc).__name__, str(exc), "".join(traceback.format_exception(exc))))


class RayShard:
    """A shard as a Ray actor (wrapped with `ray.remote` by the driver): Ray places it and
    keeps its lifetime; the driver's messages come over a TCP connection to it, served by
    `serve` as a process shard's are (shard_links.RayLink)."""

    def open_channel(self, key: bytes) -> tuple[str, int]:
        """Listen on this node's address for the driver's one connection (HMAC on `key`)."""
        from harness.child import ray_cluster
        from harness.child.direct_channel import accept, listen

        listener = listen(ray_cluster.where()["address"], key)

        def accept_and_serve() -> None:
            try:
                conn = accept(listener)
            finally:
                listener.close()  # one driver, one connection
            try:
                serve(conn)
            finally:
                conn.close()

        threading.Thread(target=accept_and_serve, name="shard channel", daemon=True).start()
        return listener.address

    def where(self) -> dict[str, Any]:
        from harness.child import ray_cluster

        return ray_cluster.where()


def serve(conn: Any) -> None:
    """The process transport's shard: read the driver's messages until it closes the socket.

    Calls run on this thread in order; a clock exchange is answered at once from here,
    never from the loop, so its round trip holds no loop latency. Sends come from this
    thread and the loop's, under one lock."""
    lock = threading.Lock()

    def send(msg: Any) -> None:
        with lock:
            conn.send(msg)

    core = ShardCore(send)
    slow_s = 0.0  # a test's long round trip, known once setup has told this shard its index
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the driver is gone, or closed us: nothing to wait for
            return
        if msg[0] == "submit":
            core.submit(msg[1], msg[2])
            continue
        _, cid, method, args = msg
        if method == "clock":
            if slow_s:
                time.sleep(slow_s / 2)
            now = core.raw_clock()
            if slow_s:
                time.sleep(slow_s / 2)
            send(("reply", cid, True, now))
            continue
        try:
            value = getattr(core, method)(*args)
            send(("reply", cid, True, value))
            if method == "setup":
                slow_s = injected_slow_exchange(args[0]["index"])
        except BaseException as e:  # noqa: BLE001 - the driver re-raises it as its own type
            send(("reply", cid, False, (type(e).__name__, str(e), "".join(traceback.format_exception(e)))))
        if method == "finish":
            return


def main(argv: list[str]) -> int:
    from multiprocessing.connection import Connection

    from harness.child.lifeline import die_with_parent

    die_with_parent()  # the test process killed outright (SIGKILL): no shard outlives it
    conn = Connection(int(argv[0]))
    try:
        serve(conn)
    finally:
        conn.close()
    sys.stdout.flush()
    # The event loop's thread and a backend's pools are daemons or closed: exit without
    # waiting for the interpreter's teardown of what the driver no longer reads.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
