"""A harness-owned arrival schedule: open-loop timed arrivals inside one Offline query.

LoadGen's Server scenario draws Poisson arrivals only. For bursty (gamma), smooth
(constant) or ramping arrivals, and for a trace's own timestamps, the harness runs
Offline: LoadGen issues every sample at once, and this module holds each one back until
its scheduled time, then hands it to the event-loop SUT (harness.child.stream_sut) to
dispatch. LoadGen's latencies then count from its one Offline issue, so they include
the scheduled wait; the harness's own figures count from dispatch (docs/traffic.md).

Which sample goes when:
    arrivals (`ArrivalPlan`)  by position: the k-th sample LoadGen issued leaves one
                              gap after the (k-1)-th, the first one gap after the issue
    trace (`TracePlan`)       by dataset index: row j leaves at its own (scaled) timestamp

Each dispatched sample's scheduled time (records' clock, perf_counter_ns) is kept and
written to `schedule.parquet` (query_id, scheduled_ns) when the test ends, beside
records.parquet: the summary joins them on query_id for the lag, dispatch - scheduled.

asyncio's epoll selector rounds every timeout *up* to a whole millisecond, so a timer
fires up to 1 ms late: as late as the lag this module is meant to keep under 1 ms.
`PreciseEpollSelector` waits with microsecond timeouts instead. Only a scheduled run's
loop uses it.
"""

from __future__ import annotations

import asyncio
import select
import selectors
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from harness.results.folder import SCHEDULE
from harness.results.records import int_array

#: the file of each dispatched sample's scheduled time
SCHEDULE_FILE = SCHEDULE
FD_SETSIZE = 1024  # select()'s limit on an fd's number
CHUNK = 4096  # arrivals' due times drawn at a time


class PreciseEpollSelector(selectors.EpollSelector):
    """epoll, waking on time rather than up to 1 ms after a timeout (see above).

    epoll_wait takes whole milliseconds; select() takes microseconds, and the epoll fd is
    itself readable when any fd it watches is ready. So a timed wait is a select() on the
    epoll fd alone, then an epoll poll that does not block. No spinning: the thread sleeps
    until an fd is ready or the timeout ends, within the kernel's timer slack (50 us)."""

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout > 0:
            fd = self._selector.fileno()  # type: ignore[attr-defined]
            if fd < FD_SETSIZE:
                select.select([fd], [], [], timeout)
                timeout = 0
            else:  # select() cannot watch it: wait the whole ms less, then poll for the rest
                timeout = max(0.0, timeout - 1e-3)
        return super().select(timeout)


def precise_loop() -> asyncio.AbstractEventLoop:
    return asyncio.SelectorEventLoop(PreciseEpollSelector())


# --- arrival times ----------------------------------------------------------------------


def unit_gaps(kind: str, shape: float | None, rng: np.random.Generator, n: int) -> np.ndarray:
    """n inter-arrival gaps of mean 1: exponential (Poisson), gamma(shape) (CV 1/sqrt(shape):
    shape < 1 is burstier than Poisson, > 1 smoother, as vLLM's --burstiness) or constant."""
    if kind == "poisson":
        return rng.exponential(1.0, n)
    if kind == "gamma":
        assert shape is not None
        return rng.gamma(shape, 1.0 / shape, n)
    return np.ones(n)


def operational_to_time(lam: np.ndarray, rate: float, ramp_from: float | None, ramp_s: float) -> np.ndarray:
    """Seconds at which the cumulative expected count Λ(t) = ∫ rate(u) du reaches `lam`.

    Gaps of mean 1 in Λ are arrivals of the time-varying rate (time rescaling), whatever
    their distribution: rate(t) = ramp_from + (rate - ramp_from) t / ramp_s up to ramp_s,
    then `rate`. Inside the ramp, Λ(t) = r0 t + a t² with a = (rate - r0) / (2 ramp_s),
    solved as t = 2Λ / (r0 + sqrt(r0² + 4aΛ)) (finite for r0 = 0 and for a = 0)."""
    if ramp_from is None or ramp_s <= 0:
        return lam / rate
    r0, a = ramp_from, (rate - ramp_from) / (2 * ramp_s)
    lam_ramp = (r0 + rate) * ramp_s / 2
    inside = lam <= lam_ramp
    t = np.empty_like(lam)
    li = lam[inside]
    t[inside] = 2 * li / (r0 + np.sqrt(np.maximum(r0 * r0 + 4 * a * li, 0.0)))
    t[~inside] = ramp_s + (lam[~inside] - lam_ramp) / rate
    return t


class ArrivalPlan:
    """A run's `arrivals` setting: the offsets of the next n positions, drawn as they come
    (a seeded stream, so the k-th sample's offset is the same whatever the query size)."""

    by_index = False

    def __init__(self, kind: str, rate: float, shape: float | None = None, seed: int = 0,
                 ramp_from: float | None = None, ramp_s: float = 0.0) -> None:
        self.kind, self.rate, self.shape, self.seed = kind, rate, shape, seed
        self.ramp_from, self.ramp_s = ramp_from, ramp_s
        self._rng = np.random.default_rng([seed, 0x5C4ED])
        self._lam = 0.0  # Λ of the last position drawn

    @classmethod
    def from_config(cls, arrivals: Any) -> ArrivalPlan:
        return cls(arrivals.kind, arrivals.rate, arrivals.shape, arrivals.seed, arrivals.ramp_from, arrivals.ramp_s)

    def offsets_ns(self, n: int, indices: Any = None) -> np.ndarray:
        lam = self._lam + np.cumsum(unit_gaps(self.kind, self.shape, self._rng, n))
        if n:
            self._lam = float(lam[-1])
        return np.round(operational_to_time(lam, self.rate, self.ramp_from, self.ramp_s) * 1e9).astype(np.int64)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "rate_per_s": self.rate, "shape": self.shape, "seed": self.seed,
                "ramp_from_per_s": self.ramp_from, "ramp_s": self.ramp_s}


class TracePlan:
    """A trace's timestamps: sample j (dataset row j) at its offset, whenever LoadGen issued it."""

    by_index = True

    def __init__(self, offsets_s: np.ndarray, kind: str) -> None:
        self._offsets = np.round(np.asarray(offsets_s, dtype=np.float64) * 1e9).astype(np.int64)
        self.kind = kind

    def offsets_ns(self, n: int, indices: Any = None) -> np.ndarray:
        return self._offsets[np.asarray(indices, dtype=np.int64)]

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind}


# --- the schedule, on the event loop ------------------------------------------------------


class Schedule:
    """Holds issued samples until their time, then hands them to `dispatch` as
    (query id, dataset index, issue time) items. Runs on the loop only.

    One timer at a time, for the earliest pending sample: every sample due when it fires
    leaves in that callback, so a late wake-up catches up in one go instead of piling a
    timer per sample onto the loop's heap."""

    def __init__(self, plan: ArrivalPlan | TracePlan, loop: asyncio.AbstractEventLoop,
                 dispatch: Callable[[list[tuple[int, int, int]]], None], path: Path | None,
                 clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self.plan = plan
        self._loop = loop
        self._dispatch = dispatch
        self._path = path
        self._now = clock
        # pending samples, in due order: parallel lists (one list per column is cheaper
        # than a tuple per sample, as in harness.child.issue_queue)
        self._ids: list[int] = []
        self._idx: list[int] = []
        self._issued: list[int] = []
        self._due: list[int] = []
        self._pos = 0
        #: arrivals: LoadGen's own list of samples, unpacked as they leave (see `put`)
        self._src: list[Any] | None = None
        self._src_issued = 0
        self._timer: asyncio.TimerHandle | None = None
        # what left, and when it was due: written to SCHEDULE_FILE at the end
        self.sent_ids: list[int] = []
        self.sent_due: list[int] = []
        # loop.time() (time.monotonic) minus the records' clock: both CLOCK_MONOTONIC on
        # Linux, so ~0; measured rather than assumed
        self._skew = loop.time() - clock() / 1e9

    def put(self, samples: list[Any], issued: int) -> None:
        """An issued query (LoadGen's samples), on the loop. Arrivals with nothing pending
        (an Offline run's one query) keep LoadGen's list as it is and unpack each sample
        when it leaves: unpacking a million samples first would make the first ones late."""
        if not self.plan.by_index and self._pos >= self._total():
            self._src, self._src_issued = samples, issued
            self._due, self._pos = [], 0
            self._arm()
            return
        ids = [s.id for s in samples]
        idx = [s.index for s in samples]
        due = (issued + self.plan.offsets_ns(len(samples), idx)).tolist()
        old_ids, old_idx, old_due, old_iss = self._pending()
        ids, idx, due, iss = old_ids + ids, old_idx + idx, old_due + due, old_iss + [issued] * len(samples)
        order = sorted(range(len(due)), key=due.__getitem__)
        self._ids, self._idx, self._due, self._issued = ([col[i] for i in order] for col in (ids, idx, due, iss))
        self._src, self._pos = None, 0
        self._arm()

    def _pending(self) -> tuple[list[int], list[int], list[int], list[int]]:
        """The samples not yet sent, as columns."""
        rest = slice(self._pos, None)
        if self._src is not None:
            self._extend(len(self._src))
            left = self._src[rest]
            return [s.id for s in left], [s.index for s in left], self._due[rest], [self._src_issued] * len(left)
        return self._ids[rest], self._idx[rest], self._due[rest], self._issued[rest]

    def _total(self) -> int:
        return len(self._src) if self._src is not None else len(self._due)

    def _extend(self, upto: int) -> None:
        """Arrivals: due times drawn CHUNK positions at a time, as they are needed (1.3
        million at once took 0.2 s, a delay every first sample would have carried)."""
        assert self._src is not None
        have = len(self._due)
        if have < upto:
            self._due += (self._src_issued + self.plan.offsets_ns(upto - have)).tolist()

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._src is not None and self._pos + CHUNK // 2 > len(self._due):
            self._extend(min(len(self._src), len(self._due) + CHUNK))
        if self._pos < len(self._due):
            self._timer = self._loop.call_at(self._due[self._pos] / 1e9 + self._skew, self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = self._now()
        pos, end = self._pos, len(self._due)
        due = self._due
        stop = pos
        while stop < end and due[stop] <= now:
            stop += 1
        if stop > pos:
            if self._src is not None:
                issued = self._src_issued
                items = [(q.id, q.index, issued) for q in self._src[pos:stop]]
                self.sent_ids += [item[0] for item in items]
            else:
                items = list(zip(self._ids[pos:stop], self._idx[pos:stop], self._issued[pos:stop], strict=True))
                self.sent_ids += self._ids[pos:stop]
            self.sent_due += due[pos:stop]
            self._pos = stop
            self._dispatch(items)
        self._arm()

    def close(self) -> None:
        """Stop the timer and write what left, and when it was due, to SCHEDULE_FILE."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._path is None:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_arrays([int_array(self.sent_ids, pa.int64()), int_array(self.sent_due, pa.int64())],
                                     names=["query_id", "scheduled_ns"])
        tmp = self._path.with_suffix(".tmp")
        pq.write_table(table, tmp)
        tmp.replace(self._path)

