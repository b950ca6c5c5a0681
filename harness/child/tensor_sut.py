"""The SUT adapter for tensor backends: LoadGen's callbacks on one side, workers on the other.

LoadGen calls `issue` on its own thread with the GIL held, so `issue` only stamps the time
and appends to a deque. Worker threads pull up to `max_batch` samples (optionally waiting
`batch_timeout_ms` to fill a batch), call `backend.predict`, and complete the whole batch
in one `QuerySamplesComplete` call. A backend exception fails exactly the samples of that
call: they are completed to LoadGen (it needs every sample back) and marked "error" in the
records, so they never count as fast successes.

Completion coalescing: while samples are queued and backend calls are short, a worker may
serve the next batch before completing the previous one, for at most `coalesce_us`
counted from the first held result. Why: LoadGen's thread must take the GIL for every
query, and a worker that completes (releasing and at once retaking the GIL) after every
tiny call keeps waking it without letting it in; under a backlog it starved for
milliseconds and the test went INVALID far below capacity. One completion per backlog
slice lets it in. A held completion only ever makes LoadGen's latency larger, never
smaller, and never by more than the bound; the records keep each call's own end time.

Inline issue (`inline=True`, SingleStream by default): `issue` serves the query itself, on
LoadGen's thread, and no worker thread runs. SingleStream has one query in flight and
LoadGen waits for it anyway, so the hand-off buys nothing there; it cost ~50 us a query
(waking the worker and passing it the GIL), 1 % of a 5 ms query, all of it counted by
LoadGen as latency.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from backends.base import Backend
from harness.child.issue_queue import IssueQueue, Taken
from harness.child.record_writer import RecordWriter
from harness.data.datasets import Dataset


class _Held:
    """Results a worker has served but not yet completed to LoadGen, and the worker's
    reusable responses."""

    def __init__(self, make_response: Callable[..., Any]) -> None:
        # Responses without data, reused call after call: LoadGen copies what it needs in
        # QuerySamplesComplete, and setting an id costs a third of constructing a response
        # (0.23 vs 0.63 us a sample, ~20 % of the worker's time at zero service time).
        self.blanks: list[Any] = []
        self._make = make_response
        self.clear()

    def blank_responses(self, ids: list[int]) -> list[Any]:
        """Data-less responses for `ids`, from positions no held response uses."""
        start = len(self.responses)
        end = start + len(ids)
        blanks = self.blanks
        if end > len(blanks):
            blanks += [self._make(0, 0, 0) for _ in range(end - len(blanks))]
        part = blanks[start:end]
        for r, q in zip(part, ids):
            r.id = q
        return part

    def clear(self) -> None:
        self.responses: list[Any] = []
        self.calls: list[tuple] = []  # record entries (records.Call)
        self.keep: list[np.ndarray] = []  # the buffers `responses` point into
        self.first_done = 0  # end of the oldest held call (perf_counter_ns)

    def add(self, responses: list[Any], keep: list[np.ndarray], call: tuple, done: int) -> None:
        if not self.responses:
            self.first_done = done
        self.responses += responses
        self.keep += keep
        self.calls.append(call)


class TensorSUT:
    def __init__(
        self,
        backend: Backend,
        dataset: Dataset,
        records: RecordWriter,
        complete: Callable[[list[Any]], None],
        make_response: Callable[..., Any],
        *,
        workers: int,
        max_batch: int,
        batch_timeout_ms: float,
        return_outputs: bool,
        coalesce_us: float = 0.0,
        inline: bool = False,
        crash: Callable[[BaseException], None] | None = None,
        replicas: Any = None,
    ) -> None:
        self.backend = backend
        self.dataset = dataset
        self.records = records
        self._complete = complete  # mlperf_loadgen.QuerySamplesComplete
        self._response = make_response  # mlperf_loadgen.QuerySampleResponse
        self.max_batch = max_batch
        self.batch_timeout_ns = int(batch_timeout_ms * 1e6)
        self.coalesce_ns = int(coalesce_us * 1e3)
        self.return_outputs = return_outputs
        self._queue = IssueQueue()
        self._take_lock = threading.Lock()
        self._cv = threading.Condition()
        self._waiting = 0  # workers inside cv.wait(); issue() notifies only when one is
        self._stopping = False
        self._batch_ids = itertools.count()  # next() is atomic under the GIL
        self.failed = 0
        self._inline = inline
        # Called with an exception of the harness's own code (not the backend's): the child
        # ends the run as a crash. None (tests that drive the SUT directly): re-raised.
        self._crash = crash
        # Replicas (harness.child.replicas.ReplicaPool): worker w calls its own replica's
        # client; a call that finds the replica dead ends that worker (pool.on_lost decides
        # whether the run goes on). None: every worker calls the one local backend.
        self._replicas = replicas
        self._inline_held = _Held(make_response)  # never holds a result (nothing queues behind an inline call); keeps its blanks
        self._threads = [
            threading.Thread(target=self._work, args=(w,), name=f"worker-{w}", daemon=True)
            for w in range(0 if inline else workers)
        ]

    # --- LoadGen side (its thread) -----------------------------------------------------
    def issue(self, query_samples: list[Any]) -> None:
        if self._inline:
            try:
                self._issue_inline(query_samples)
            except BaseException as e:
                self._crashed(e)
            return
        # Only stamp and enqueue: an Offline query can hold millions of samples, and
        # unpacking them here would stall LoadGen's thread. Workers unpack in batches.
        self._queue.append([query_samples, 0, time.perf_counter_ns()])
        # A worker counts itself waiting (under the lock) before it looks at the queue,
        # so reading the count after the append cannot miss a sleeper; a busy worker
        # costs LoadGen's thread no lock at all.
        if self._waiting:
            with self._cv:
                self._cv.notify()

    def _issue_inline(self, query_samples: list[Any]) -> None:
        """Serve the query here, on LoadGen's thread, in calls of up to max_batch samples."""
        t = time.perf_counter_ns()
        if len(query_samples) == 1:  # SingleStream: no slicing or comprehension frames
            s = query_samples[0]
            self._serve(([s.id], [s.index], [t]), 0, self._inline_held, self.backend)
            return
        for start in range(0, len(query_samples), self.max_batch):
            part = query_samples[start : start + self.max_batch]
            self._serve(([s.id for s in part], [s.index for s in part], [t] * len(part)), 0, self._inline_held, self.backend)

    def flush(self) -> None:
        """LoadGen's flush_queries: nothing is held back, so nothing to do."""

    # --- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        for t in self._threads:
            t.join()

    # --- workers -----------------------------------------------------------------------
    def _take(self, limit: int, taken: Taken) -> None:
        """Move up to `limit` queued samples into `taken`."""
        with self._take_lock:
            self._queue.take(limit, taken)

    def _crashed(self, exc: BaseException) -> None:
        if self._crash is None:
            raise exc
        self._crash(exc)

    def _work(self, worker: int) -> None:
        try:
            self._work_loop(worker)
        except BaseException as e:  # the backend's own exceptions never reach here (_serve)
            self._crashed(e)

    def _work_loop(self, worker: int) -> None:
        cv = self._cv
        share = len(self._threads) > 1
        held = _Held(self._response)  # served, not yet completed to LoadGen
        replica = None if self._replicas is None else self._replicas.client(worker)
        backend = replica or self.backend
        while True:
            if replica is not None and replica.lost:  # this call, or a sibling's, found the replica dead
                if held.responses:
                    self._complete_held(held)
                return
            items: Taken = ([], [], [])
            self._take(self.max_batch, items)
            if not items[0]:
                if held.responses:
                    self._complete_held(held)
                    continue
                with cv:
                    self._waiting += 1
                    while not self._queue and not self._stopping:
                        cv.wait()
                    self._waiting -= 1
                    if self._stopping and not self._queue:
                        return
                continue
            if share and self._queue:
                with cv:  # more is queued: let an idle sibling take it meanwhile
                    cv.notify()
            if self.batch_timeout_ns and len(items[0]) < self.max_batch:
                self._fill(items)
            if self._serve(items, worker, held, backend) and replica is not None and replica.lost:
                if held.responses:  # recorded before on_lost may end the run
                    self._complete_held(held)
                self._replicas.on_lost(worker)  # raises to stop the run (a crash of this thread: see _work)

    def _complete_held(self, held: _Held) -> None:
        self._complete(held.responses)  # copies the output buffers the responses point to
        self.records.extend(held.calls)
        held.clear()

    def _fill(self, items: Taken) -> None:
        """Wait up to batch_timeout_ms for `items` to grow to max_batch."""
        deadline = time.perf_counter_ns() + self.batch_timeout_ns
        ids = items[0]
        while len(ids) < self.max_batch:
            have = len(ids)
            self._take(self.max_batch - have, items)
            if len(ids) > have:
                continue
            left = deadline - time.perf_counter_ns()
            if left <= 0:
                break
            with self._cv:
                self._waiting += 1
                if not self._queue:
                    self._cv.wait(left / 1e9)
                self._waiting -= 1

    def _serve(self, items: Taken, worker: int, held: _Held, backend: Backend) -> bool:
        """Serve one call; True when the backend failed it."""
        batch_id = next(self._batch_ids)
        dispatch = time.perf_counter_ns()
        error = ""
        outputs = None
        ids, indices, issued = items
        n = len(ids)
        # Only the backend's call is guarded: an exception of the harness's own code
        # (dataset.batch included) is a bug, and ends the run as a crash (see _work).
        batch = self.dataset.batch(indices)
        try:
            outputs = backend.predict(batch)
            if self.return_outputs:
                first = np.asarray(outputs[0])
                if len(first) != n:
                    raise ValueError(f"backend returned {len(first)} rows for a batch of {n}")
        except Exception as e:  # any backend failure fails these samples, visibly
            error = f"{type(e).__name__}: {e}".replace("\n", " ")[:500]
        done = time.perf_counter_ns()
        keep = []  # output buffers: they must live until QuerySamplesComplete copies them
        if error or not self.return_outputs:
            responses = held.blank_responses(ids)
        else:
            response = self._response
            responses = []
            for row, q in enumerate(ids):
                arr = np.ascontiguousarray(first[row])
                keep.append(arr)
                responses.append(response(q, arr.ctypes.data, arr.nbytes))
        if error:
            self.failed += n
        # Hold while more is queued and one more call as long as this one would still end
        # inside the bound: a slow backend's every call is completed at once.
        hold = self._queue and 2 * done - dispatch - (held.first_done or done) < self.coalesce_ns
        at_once = not hold and not held.responses
        if at_once:  # before the record entry is made: that need not count in LoadGen's latency
            self._complete(responses)
        # Tuples, not the lists: a tuple of ints leaves the garbage collector's lists at its
        # first pass, while thousands of lists held until the next flush were walked by
        # every collection (~1.5 us a sample more at batch 1).
        status = "error" if error else "ok"
        call = (tuple(ids), tuple(indices), tuple(issued), dispatch, done, batch_id, worker, status, error)
        if at_once:
            self.records.add(call)
            return bool(error)
        held.add(responses, keep, call, done)
        if not hold:
            self._complete_held(held)
        return bool(error)
