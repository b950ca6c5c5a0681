"""Several samples a request in the event-loop SUT (StreamingBackend.max_inputs_per_request):
a LoadGen sample stays one input; the SUT groups up to the limit of what is queued now,
never waiting for more, and completes each sample with its own entry of the answer.

The SUT is driven directly on its event loop, with LoadGen's own QuerySample and
QuerySampleResponse types and an outlet that keeps what each completion carried. The
backend answers each group at once with each input doubled, so every sample's output is
known to the test.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import mlperf_loadgen as lg
import numpy as np

from backends.base import Chunk, StreamingBackend, Usage
from harness.child.event_loop_thread import EventLoopThread
from harness.child.record_writer import RecordWriter
from harness.child.stream_sut import StreamingSUT
from harness.data.datasets import Dataset
from harness.results import folder
from harness.results.records import read_records


class Numbers(Dataset):
    """Sample i is the number i: what `prepare` hands the backend."""

    name = "numbers"
    validate = None

    def _make(self, index: int) -> int:
        return index


class Doubler(StreamingBackend):
    """Answers a group of numbers with their doubles, one per input (or `drop` fewer), after
    `gate` opens, so a test can hold the first request while more samples queue."""

    name = "doubler"

    def __init__(self, per_request: int, drop: int = 0) -> None:
        super().__init__(StreamingBackend.Options())
        self.max_inputs_per_request = per_request
        self.drop = drop
        self.sent: list[list[int]] = []
        self.gate: asyncio.Event | None = None

    def group(self, requests: list[int]) -> list[int]:
        return list(requests)

    async def stream(self, sample: list[int]) -> AsyncIterator[Chunk]:
        self.sent.append(sample)
        if self.gate is not None:
            await self.gate.wait()
        yield Chunk(n_tokens=0, headers=200)
        yield Chunk(n_tokens=0, usage=Usage(input_tokens=len(sample), vectors=len(sample)))
        out = np.array([[2.0 * i, 1.0] for i in sample], dtype=np.float32)
        yield Chunk(n_tokens=0, output=out[: len(sample) - self.drop])


class Outlet:
    """Where completions go: each sample's data, as LoadGen would copy it."""

    def __init__(self, expected: int) -> None:
        self.data: dict[int, np.ndarray | None] = {}
        self._left = expected
        self.done = threading.Event()

    def complete(self, qid: int, data: Any, n_tokens: int) -> None:
        self.data[qid] = None if data is None else np.array(data)
        self._left -= 1
        if self._left <= 0:
            self.done.set()

    def first(self, qid: int, text: Any) -> None:  # pragma: no cover - no token mode here
        raise AssertionError("a grouped request has no first token")


def serve(tmp_path, backend: Doubler, queries: list[list[int]], max_in_flight: int | None = None,
          hold_first: bool = False) -> tuple[Outlet, dict[str, np.ndarray], list[dict[str, Any]]]:
    """Issue `queries` (each a list of dataset indices; query id = 1000 + index) and serve them."""
    n = sum(len(q) for q in queries)
    dataset = Numbers(64)
    dataset.load(range(64))
    runner = EventLoopThread()
    records = RecordWriter(tmp_path)
    outlet = Outlet(n)
    sut = StreamingSUT(backend, dataset, records, runner, outlet, tokens=False, first_token_calls=False,
                       return_outputs=True, max_in_flight=max_in_flight)
    if hold_first:
        backend.gate = runner.run(_event())
    sut.start()
    sut.issue([lg.QuerySample(1000 + i, i) for i in queries[0]])
    if hold_first:  # the rest arrive while the first request is held open
        while not backend.sent:
            threading.Event().wait(0.001)
        for q in queries[1:]:
            sut.issue([lg.QuerySample(1000 + i, i) for i in q])
        runner.run(_later(backend.gate))
    else:
        for q in queries[1:]:
            sut.issue([lg.QuerySample(1000 + i, i) for i in q])
    assert outlet.done.wait(30), "not every sample was completed"
    sut.stop()
    records.close()
    return outlet, read_records(tmp_path).columns, folder.read_jsonl(tmp_path, folder.TOKENS)


async def _event() -> asyncio.Event:
    return asyncio.Event()


async def _later(gate: asyncio.Event) -> None:
    # The issues above reached the loop (call_soon_threadsafe) before this coroutine did:
    # the loop runs its callbacks in order, so they are queued by now.
    gate.set()


def test_offline_groups_full_requests_and_each_sample_gets_its_own_output(tmp_path):
    backend = Doubler(per_request=4)
    outlet, rec, entries = serve(tmp_path, backend, [list(range(10))])
    assert sorted(len(g) for g in backend.sent) == [2, 4, 4]
    assert sorted(i for g in backend.sent for i in g) == list(range(10))
    for i in range(10):
        np.testing.assert_array_equal(outlet.data[1000 + i], [2.0 * i, 1.0])
    assert (rec["status"] == "ok").all()
    # one request a batch id; its samples share the request's dispatch and completion
    by_batch: dict[int, list[int]] = {}
    for b, q in zip(rec["batch_id"].tolist(), rec["query_id"].tolist()):
        by_batch.setdefault(b, []).append(q - 1000)
    assert sorted(map(sorted, by_batch.values())) == sorted(map(sorted, backend.sent))
    assert sorted(e["inputs"] for e in entries) == [2, 4, 4]
    assert all(e["server_input_tokens"] == e["inputs"] and e["output_shape"] == [2] for e in entries)


def test_server_groups_only_what_is_queued_and_never_waits(tmp_path):
    # One request in flight at most: the first sample goes alone, held open; the five that
    # arrive meanwhile queue, and go as groups of at most 3 once it is answered.
    backend = Doubler(per_request=3)
    outlet, rec, _ = serve(tmp_path, backend, [[0], [1], [2], [3], [4], [5]], max_in_flight=1, hold_first=True)
    assert backend.sent == [[0], [1, 2, 3], [4, 5]]
    assert all(outlet.data[1000 + i][0] == 2.0 * i for i in range(6))


def test_an_answer_without_one_output_per_input_fails_each_sample_by_its_reason(tmp_path):
    backend = Doubler(per_request=4, drop=1)
    outlet, rec, entries = serve(tmp_path, backend, [list(range(4))])
    assert all(outlet.data[1000 + i] is None for i in range(4))
    assert (rec["status"] == "error").all()
    errors = set(rec["error"].tolist())
    assert errors == {"output_count: the answer carried 3 outputs for a request of 4 inputs"}
    assert [e["status"] for e in entries] == ["error"]
