"""The SUT adapter for async and generative backends: one asyncio event loop in its own thread.

LoadGen's issue callback runs on LoadGen's thread with the GIL held, so `issue` only
stamps the time and hands the query to the loop (`call_soon_threadsafe`). On the loop,
up to `max_in_flight` request coroutines run at once (unlimited when the backend sets
none); each drives `backend.stream(sample)` and stamps, on `perf_counter_ns`:

    dispatch     the request leaves the harness (queue time = dispatch - issue)
    first_byte   response headers arrived        (a chunk with `headers`)
    first_token  the first content-bearing chunk (text or n_tokens > 0)
    each chunk   kept in tokens.jsonl with its token count, for per-token ITL
    complete     the stream ended

The whole generated text is kept per request in tokens.jsonl ("text"), with the dataset's
checks' verdict ("valid", and "invalid": the reason, e.g. schema_invalid) when the sample
has any (a validator, a JSON Schema: harness.data.validators), the server's cached prompt tokens
(Usage.cached_tokens) when it reports them, and any figures a
backend measured itself (a chunk with `metrics`, e.g. its KV-cache bytes).

With a harness-owned schedule (`arrivals`, a trace: harness.child.schedule), an issued
sample first waits in the `Schedule` for its time, then joins the queue; the rest is as above.

Completions (and first tokens) go to an outlet. `LoadGenOutlet` coalesces those that
finish in the same loop iteration into one `QuerySamplesComplete` (`FirstTokenComplete`)
call, made after the iteration; a client shard's outlet (harness.child.shard) sends them
to the process that holds LoadGen instead. Every issued sample is completed exactly once:
a failed request is completed with no data and recorded with status "error" and
"reason: detail", so it never counts as a fast success.

Failed request or harness bug: only the backend's own code is guarded per request (its
`stream()` call and each step of the stream, where it talks to its server and parses the
answer). An exception there fails that request. An exception in the harness's code on
the same path (the dataset lookup, the chunk bookkeeping, the record) is a bug: the
sample is still completed to LoadGen (it would wait for it forever), and the run ends as
a crash through the child's `crash` handler (error.json with the traceback, the records
so far kept). Without a handler, every later sample is completed unserved so that LoadGen
ends the test, and `stop()` raises the bug.

Accuracy mode (`return_outputs` with a token-generating backend): each answer is completed
to LoadGen as its generated token ids, int32, as MLCommons' reference SUTs log them, and
the n_tokens LoadGen gets is the number of ids logged. The ids are the chunks' own (the
backend's model, or the server's `token_ids`), else the backend's tokenizer's ids of the
text (tokenized only in accuracy mode); tokens.jsonl says which ("ids_source"). An answer
of fewer than 2 tokens is a failed sample ("short_output"), never a LoadGen error.
A backend that gives a transcript (output_kind "transcript") has no model ids to log: its
answer (and its first chunk) is completed as MLPerf's whisper reference SUT logs a
transcript, each kept character's index in its 28-label alphabet, int64
(harness.results.scoring.wer.transcript_labels), which speech2text/accuracy_eval.py reads
back to the same text; LoadGen's token count stays the answer's.

Reasoning and tool calls: a chunk marked `reasoning` is timed as a token (TTFT is the first
token of either kind, as GuideLLM and AIPerf define it) but its text goes to tokens.jsonl's
`reasoning`, apart from `text` (the answer, which validators and scoring read); the first
content chunk not marked so is stamped `first_answer_ns` (TTFO, time to first output
token). `reasoning_tokens` is the client's count, `server_reasoning_tokens` the server's
(Usage.reasoning_tokens). A backend's reassembled tool calls
(Chunk.tool_calls) are kept as `tool_calls` (index, id, name, arguments, tokens, json):
the record a later turn of a conversation reads them back from, with `reasoning`.

Several samples a request (a backend's `max_inputs_per_request`, e.g. an embeddings API
that takes a list of inputs): a LoadGen sample is still one input, so Offline and Server
mean what they mean for MLPerf. A worker takes up to that many samples of those queued
now, never waiting for more, and sends them as one request (`backend.group`); each sample
is completed when the request is, with its own entry of the answer's `output` in accuracy
mode. Every sample of the request shares its dispatch, first-byte and completion stamps
and its batch id; tokens.jsonl keeps one entry per request (its inputs, input tokens
counted by the client and by the server, the output's shape per input). An answer whose
output has not one entry per input fails each of its samples (`output_count`).

Token counts per request: the server's (Usage.output_tokens) when it sent one, else
the sum of the chunks' counts (a local tokenizer's, or one per chunk). Both are kept in
tokens.jsonl so the summary can report the source and any server/client mismatch.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from backends.base import StreamingBackend, Usage
from harness.child.issue_queue import IssueQueue, ItemQueue
from harness.child.record_writer import RecordWriter
from harness.child.schedule import ArrivalPlan, Schedule, TracePlan
from harness.results.stats import distribution

if TYPE_CHECKING:
    from pathlib import Path

    from harness.child.event_loop_thread import EventLoopThread
    from harness.child.prepared_dataset import PreparedDataset

#: how often the event loop's lag probe fires: 20 wake-ups a second cost the loop ~0.01 %
LAG_PERIOD_S = 0.05


class LoadGenOutlet:
    """Completions to LoadGen, coalesced per loop iteration: first tokens and completions
    that finish in one iteration go in one `FirstTokenComplete` and one
    `QuerySamplesComplete` call, made after it (call_soon)."""

    def __init__(self, lg: Any, loop: asyncio.AbstractEventLoop, *, tokens: bool, return_outputs: bool) -> None:
        self._lg = lg
        self._loop = loop
        self._response = lg.QuerySampleResponse
        self._tokens = tokens
        self._return_outputs = return_outputs
        self._firsts: list[Any] = []
        self._done: list[Any] = []
        self._keep: list[Any] = []  # response buffers, alive until LoadGen has copied them
        self._flush_pending = False

    def first(self, qid: int, text: str | np.ndarray) -> None:
        """`text`: the first chunk's text, or (accuracy mode) its token ids, int32."""
        if self._return_outputs and len(text):
            buf = np.frombuffer(text.encode(), dtype=np.uint8) if isinstance(text, str) else text
            self._keep.append(buf)
            self._firsts.append(self._response(qid, buf.ctypes.data, buf.nbytes))
        else:
            self._firsts.append(self._response(qid, 0, 0))
        self._schedule()

    def complete(self, qid: int, data: Any, n_tokens: int) -> None:
        if data is None:
            ptr = size = 0
        else:
            buf = np.frombuffer(data.encode(), dtype=np.uint8) if isinstance(data, str) else np.ascontiguousarray(data)
            self._keep.append(buf)
            ptr, size = buf.ctypes.data, buf.nbytes
        if self._tokens:
            self._done.append(self._response(qid, ptr, size, n_tokens))
        else:
            self._done.append(self._response(qid, ptr, size))
        self._schedule()

    def unserved(self, qid: int, first_sent: bool, first_token_calls: bool) -> None:
        """Complete `qid` with no data and no request: only ever after a crash."""
        if first_token_calls and not first_sent:
            self._firsts.append(self._response(qid, 0, 0))
        self._done.append(self._response(qid, 0, 0, 2) if self._tokens else self._response(qid, 0, 0))
        self._schedule()

    def _schedule(self) -> None:
        if not self._flush_pending:
            self._flush_pending = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        firsts, done, keep = self._firsts, self._done, self._keep
        self._firsts, self._done, self._keep = [], [], []
        # First tokens before completions: LoadGen needs a sample's TTFT before its end.
        if firsts:
            self._lg.FirstTokenComplete(firsts)
        if done:
            self._lg.QuerySamplesComplete(done)
        del keep


class StreamingSUT:
    """`outlet` receives first tokens and completions (`LoadGenOutlet`, or a shard's);
    `clock` stamps every time (a client shard's may be corrected to the driver's clock);
    `worker` goes in each record's worker column (the client shard's index)."""

    def __init__(
        self,
        backend: StreamingBackend,
        dataset: PreparedDataset,
        records: RecordWriter,
        runner: EventLoopThread,
        outlet: Any,
        *,
        tokens: bool,
        first_token_calls: bool,
        return_outputs: bool,
        max_in_flight: int | None,
        crash: Callable[[BaseException], None] | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
        worker: int = 0,
        sessions: Any = None,
        schedule: ArrivalPlan | TracePlan | None = None,
        schedule_path: Path | None = None,
    ) -> None:
        self.backend = backend
        self.dataset = dataset
        self.records = records
        self.runner = runner
        self._loop = runner.loop
        self._out = outlet
        self.tokens = tokens
        self.first_token_calls = first_token_calls
        self.return_outputs = return_outputs
        self._limit = max_in_flight or sys.maxsize
        self._queue: IssueQueue | ItemQueue = IssueQueue()
        self._active = 0
        self._tasks: set[asyncio.Task[None]] = set()  # strong refs: the loop keeps only weak ones
        self._now = clock
        self.worker = worker
        self._ids = iter(range(worker << 40, 1 << 62))  # one request a batch id, unique across client shards
        self.failed = 0
        #: called with a bug of the harness's own code on the request path (the child's
        #: crash handler: error.json, records kept, exit); None: see `crashed`
        self._crash = crash
        #: the first such bug; from then on samples are completed unserved, and `stop` raises it
        self.crashed: BaseException | None = None
        #: how the client counts tokens without usage: "tokenizer", "model" or "chunks"
        self._client_method = backend.token_source
        self._input_method = backend.input_token_method
        self._judge = getattr(dataset, "judge", None)
        #: accuracy mode with token answers: each answer's ids go to LoadGen's log (int32)
        self._log_ids = return_outputs and backend.output_kind == "tokens"
        #: accuracy mode with transcripts: each answer's labels go to LoadGen's log (int64)
        self._log_labels = return_outputs and backend.output_kind == "transcript"
        #: the backend's redaction of a request's whole text (its secrets, echoed by a
        #: server, never reach tokens.jsonl or LoadGen's log); None: nothing to hide
        self._redact: Callable[[str], str] | None = backend.redact_text
        #: a session dataset's hold (harness.child.sessions): it is the queue, builds each
        #: turn's request at dispatch and hears each turn's end; None: samples are independent
        #: most samples a request carries (StreamingBackend.max_inputs_per_request): workers
        #: then take groups of what is queued and `_serve_group` serves them; None: one each
        self._per_request = backend.max_inputs_per_request
        if self._per_request is not None:
            self._start_workers = self._start_groups  # type: ignore[method-assign]
        self.sessions = sessions
        if sessions is not None:
            self._queue = sessions
            sessions.wake = self._start_workers
        self._probing = True
        self._lags: list[tuple[float, float]] = []  # (the loop's clock, seconds late), one a LAG_PERIOD_S
        #: a harness-owned arrival schedule (`schedule`: an ArrivalPlan or TracePlan): each
        #: issued sample waits there for its time, then joins the queue (harness.child.schedule)
        self.schedule: Schedule | None = None
        if schedule is not None:
            self.schedule = Schedule(schedule, self._loop, self._scheduled, schedule_path, clock)
            self._queue = ItemQueue()

    # --- LoadGen side (its thread) -----------------------------------------------------
    def issue(self, query_samples: list[Any]) -> None:
        self._loop.call_soon_threadsafe(self._enqueue, query_samples, self._now())

    def put_items(self, items: list[tuple[int, int, int]]) -> None:
        """(query id, dataset index, issue time) samples, on the loop: a client shard's
        samples, issued by LoadGen in the driver and forwarded here."""
        if not isinstance(self._queue, ItemQueue):
            self._queue = ItemQueue()
        self._queue.extend(items)
        self._start_workers()

    def flush(self) -> None:
        """LoadGen's flush_queries: nothing is held back, so nothing to do."""

    # --- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        """The loop already runs (warm-up used it); only the lag probe starts."""
        self._loop.call_soon_threadsafe(self._probe)

    def stop(self) -> None:
        self._probing = False
        self.runner.run(self._shutdown())
        self.runner.close()
        if self.schedule is not None:
            self.schedule.close()
        if self.crashed is not None:
            # No crash handler ended the process: LoadGen ran to its end on unserved
            # completions. The records so far are kept, and the run ends as the bug.
            self.records.close()
            raise self.crashed

    async def _shutdown(self) -> None:
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self.backend.aclose()

    # --- the loop's own lag: is the client keeping up? -----------------------------------
    def _probe(self, due: float | None = None) -> None:
        """Every LAG_PERIOD_S, how late this timer fires: the time the loop spent on other
        callbacks (or waiting for a CPU) before it could come back. A loop that keeps up
        answers within its selector's 1 ms timeout rounding; a saturated one runs late, and
        so does every chunk timestamp it takes (docs/telemetry.md)."""
        now = self._loop.time()
        if due is not None:
            self._lags.append((now, max(0.0, now - due)))
        if self._probing:
            self._loop.call_at(now + LAG_PERIOD_S, self._probe, now + LAG_PERIOD_S)

    @property
    def lags(self) -> list[tuple[float, float]]:
        """The probe's (the loop's clock, seconds late) pairs, one a LAG_PERIOD_S."""
        return self._lags

    def loop_lag_ms(self) -> dict[str, Any] | None:
        """The probe's lateness over the test, for child.json."""
        return lag_summary(self._lags)

    # --- the loop ----------------------------------------------------------------------
    def _enqueue(self, samples: list[Any], issued: int) -> None:
        if self.schedule is not None:
            self.schedule.put(samples, issued)
            return
        self._queue.put(samples, issued)
        self._start_workers()

    def _scheduled(self, items: list[tuple[int, int, int]]) -> None:
        """Samples whose scheduled time has come, from the schedule's timer."""
        self._queue.extend(items)
        self._start_workers()

    def _start_workers(self) -> None:
        while self._active < self._limit:
            item = self._queue.take_one()
            if item is None:
                return
            self._active += 1
            task = self._loop.create_task(self._worker(item))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _worker(self, item: tuple[int, int, int] | None) -> None:
        # A worker serves queued samples until none is left: at most `max_in_flight`
        # workers exist, so the limit holds without a semaphore per request.
        try:
            while item is not None:
                if self.crashed is None:
                    await self._serve(*item)
                else:
                    self._unserved(item[0], first_sent=False)
                item = self._queue.take_one()
        finally:
            self._active -= 1

    # --- several samples a request (a backend with max_inputs_per_request) ---------------
    def _start_groups(self) -> None:
        while self._active < self._limit:
            group = self._take_group()
            if not group:
                return
            self._active += 1
            task = self._loop.create_task(self._group_worker(group))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _take_group(self) -> list[tuple[int, int, int]]:
        """Up to max_inputs_per_request samples, of those queued now: a group never waits
        for samples still to come (in Server, samples queue only while every allowed
        request is open, so groups form under load and a lone sample goes alone)."""
        group: list[tuple[int, int, int]] = []
        while len(group) < self._per_request:  # type: ignore[operator]
            item = self._queue.take_one()
            if item is None:
                break
            group.append(item)
        return group

    async def _group_worker(self, group: list[tuple[int, int, int]]) -> None:
        try:
            while group:
                if self.crashed is None:
                    await self._serve_group(group)
                else:
                    for item in group:
                        self._unserved(item[0], first_sent=False)
                group = self._take_group()
        finally:
            self._active -= 1

    async def _serve_group(self, group: list[tuple[int, int, int]]) -> None:
        """One request for the group's samples. Each sample is completed when the request
        is, with its own entry of the answer's output (accuracy mode); a failed request
        fails each of them with its reason, and so does an answer whose output has not one
        entry per sample (output_count). The request itself is kept in tokens.jsonl."""
        _now = self._now
        completed: set[int] = set()
        stream: Any = None
        try:
            requests = [self.dataset.get(index) for _, index, _ in group]
            usage: Usage | None = None
            output: Any = None
            first_byte = retries = 0
            error = ""
            dispatch = _now()
            try:
                stream = self.backend.stream(self.backend.group(requests))
                async for chunk in stream:
                    if chunk.headers is not None:
                        first_byte = _now()
                    if chunk.usage is not None:
                        usage = chunk.usage
                    if chunk.output is not None:
                        output = chunk.output
                    if chunk.retry is not None:
                        retries += 1
            except Exception as e:  # noqa: BLE001 - the backend failed this request, visibly
                error = _failure_text(e)
            done = _now()
            n = len(group)
            count = len(output) if isinstance(output, (list, tuple, np.ndarray)) and getattr(output, "ndim", 1) else None
            if not error and count != n:
                got = "no list of outputs" if count is None else f"{count} outputs"
                error = f"output_count: the answer carried {got} for a request of {n} inputs"
            status = "error" if error else "ok"
            if error:
                self.failed += n
            batch = next(self._ids)
            inputs = [getattr(r, "input_tokens", 0) for r in requests]
            for k, (qid, index, issued) in enumerate(group):
                self._out.complete(qid, output[k] if self.return_outputs and not error else None, 0)
                completed.add(qid)
                self.records.add((qid, index, issued, dispatch, first_byte, 0, done, 0, inputs[k], batch,
                                  self.worker, status, error))
            shape = list(np.shape(output)[1:]) if not error else None
            self.records.add_tokens({
                "request": batch,
                "query_ids": [item[0] for item in group],
                "sample_indices": [item[1] for item in group],
                "status": status,
                "inputs": n,
                "input_tokens": sum(inputs),
                "input_source": self._input_method,
                "server_input_tokens": usage.input_tokens if usage is not None else None,
                "server_outputs": usage.vectors if usage is not None else None,
                "output_shape": shape,
                "dispatch_ns": dispatch,
                "complete_ns": done,
                "retries": retries,
            })
        except Exception as e:  # noqa: BLE001 - a bug of the harness: the run ends as a crash
            for qid, _, _ in group:
                if qid not in completed:
                    self._unserved(qid, first_sent=False)
                    completed.add(qid)
            await self._crashed(e, group[0][0], False, True, stream)

    async def _serve(self, qid: int, index: int, issued: int) -> None:
        _now = self._now
        first_token = 0
        completed = False
        stream: Any = None
        try:
            held = self.sessions
            sample = self.dataset.get(index) if held is None else None
            times: list[int] = []
            counts: list[int] = []
            texts: list[str] = []  # the answer's: reasoning is kept apart, never scored
            reasoning: list[str] = []
            reasoning_tokens = 0
            first_answer = 0
            tool_calls: list[dict[str, Any]] | None = None
            usage: Usage | None = None
            output: Any = None
            metrics: dict[str, Any] = {}
            first_byte = retries = 0
            error = ""
            #: accuracy mode: the answer's generated token ids, logged to LoadGen as int32
            ids: list[int] | None = [] if self._log_ids else None
            ids_source: str | None = None
            #: accuracy mode, no ids from the server: the first chunk's text and the ids the
            #: tokenizer made of it for FirstTokenComplete, which the logged answer must lead with
            lead: tuple[str, list[int]] | None = None
            bug: Exception | None = None
            if held is not None:  # built now, from the answers so far; or not sent, with the reason
                sample, error = held.request(index)
            dispatch = _now()
            try:
                stream = self.backend.stream(sample) if not error else _nothing()
                async for chunk in stream:
                    try:  # the loop body is the harness's own code: an exception here is a bug
                        t = _now()
                        if chunk.text or chunk.n_tokens:
                            if not first_token:
                                first_token = t
                                if self.first_token_calls:
                                    first_data = (self._first_ids(chunk, ids) if ids is not None
                                                  else _labels(chunk.text) if self._log_labels else chunk.text)
                                    if ids is not None and not ids and not chunk.token_ids and not chunk.reasoning:
                                        lead = (chunk.text, first_data.tolist())  # the tokenizer's ids of this text
                                    self._out.first(qid, first_data)
                            times.append(t)
                            counts.append(chunk.n_tokens)
                            if chunk.reasoning:
                                reasoning.append(chunk.text)
                                reasoning_tokens += chunk.n_tokens
                            else:
                                if not first_answer:
                                    first_answer = t
                                texts.append(chunk.text)
                        if chunk.headers is not None:
                            first_byte = t
                        if chunk.usage is not None:
                            usage = chunk.usage
                        if chunk.output is not None:
                            output = chunk.output
                        if chunk.retry is not None:
                            retries += 1
                        if chunk.metrics is not None:
                            metrics.update(chunk.metrics)
                        if chunk.tool_calls is not None:
                            tool_calls = chunk.tool_calls
                        if ids is not None and chunk.token_ids is not None:  # accuracy mode only
                            ids.extend(chunk.token_ids)
                    except Exception as e:  # noqa: BLE001 - not this request's failure: re-raised below
                        bug = e
                        break
            except Exception as e:  # noqa: BLE001 - the backend failed this request, visibly
                error = _failure_text(e)
            if bug is not None:
                raise bug
            done = _now()
            client_tokens = sum(counts)
            server_tokens = usage.output_tokens if usage is not None else None
            n_tokens = server_tokens if server_tokens is not None else client_tokens
            server_input = usage.input_tokens if usage is not None else None
            input_tokens = server_input or getattr(sample, "input_tokens", 0)
            lg_tokens = n_tokens
            answer: str | None = None
            logged: np.ndarray | None = None
            if ids is not None and not error and output is None:
                answer, ids, ids_source, error = self._answer_ids(texts, ids, lead)
                logged = np.asarray(ids, dtype=np.int32) if not error else None
                if not error:
                    lg_tokens = len(ids)  # the count LoadGen gets is the count of ids it logs
            if error:
                self.failed += 1
                data = None
                # LoadGen has no notion of failure: a sample without a first token wrecks its
                # TTFT statistics (min becomes INT64_MIN) and fewer than 2 tokens logs an error
                # per sample. So a failed sample reports its failure time as first token and
                # at least 2 tokens; the harness's own figures exclude it entirely.
                if self.first_token_calls and not first_token:
                    self._out.first(qid, "")
                lg_tokens = max(n_tokens, 2)
            elif output is not None:
                data = output
            elif ids is not None:
                data = logged
            elif self._log_labels:
                data = _labels(self._redact("".join(texts)) if self._redact is not None else "".join(texts))
            elif self.return_outputs:
                data = "".join(texts)
                if self._redact is not None:
                    data = self._redact(data)
            else:
                data = None
            self._out.complete(qid, data, lg_tokens)
            completed = True
            if held is not None:
                held.done(index, "".join(texts), error, done, "".join(reasoning), tool_calls)
            status = "error" if error else "ok"
            self.records.add(
                (qid, index, issued, dispatch, first_byte, first_token, done, n_tokens, input_tokens, next(self._ids),
                 self.worker, status, error)
            )
            if self.tokens or retries:
                text = answer if answer is not None else "".join(texts)
                if self._redact is not None and answer is None:  # once per request, and only with secrets configured
                    text = self._redact(text)
                # Checked after the completion was queued to LoadGen, so it is not timed.
                judged = self._judge(index, text) if self._judge is not None and not error else None
                valid, invalid = judged if judged is not None else (None, None)
                server_reasoning = usage.reasoning_tokens if usage is not None else None
                thought = "".join(reasoning) if reasoning else None
                if thought is not None and self._redact is not None:
                    thought = self._redact(thought)
                entry = {
                    "query_id": qid,
                    "sample_index": index,
                    "status": status,
                    "t": times,
                    "k": counts,
                    "n": n_tokens,
                    "source": ("usage" if server_tokens is not None else self._client_method) if self.tokens else None,
                    "client_method": self._client_method,
                    "server_tokens": server_tokens,
                    "client_tokens": client_tokens,
                    "input_tokens": input_tokens,
                    "input_source": "usage" if server_input else self._input_method,
                    "retries": retries,
                    "cached_tokens": usage.cached_tokens if usage is not None else None,
                    "text": text,
                    "valid": valid,
                }
                # The keys below only where they say something, added one by one: conditional
                # ** parts would build and merge a dict each on every request of a plain run.
                if usage is not None and usage.image_tokens is not None:  # the server's image split
                    entry["image_tokens"] = usage.image_tokens
                if invalid:
                    entry["invalid"] = invalid
                if metrics:
                    entry["metrics"] = metrics
                if (seconds := getattr(sample, "audio_seconds", None)) is not None:
                    # an audio request's length (the dataset's), and the server's own figure
                    entry["audio_seconds"] = seconds
                    entry["server_audio_seconds"] = usage.audio_seconds if usage else None
                if held is not None:
                    entry.update(held.tags(index))
                if reasoning or server_reasoning:
                    # only when the answer had reasoning, or the server counted some (a model
                    # that reasons unseen; OpenAI sends a count of 0 for every answer)
                    entry.update(reasoning=thought or "", reasoning_tokens=reasoning_tokens,
                                 server_reasoning_tokens=server_reasoning, first_answer_ns=first_answer)
                if tool_calls:
                    entry["tool_calls"] = _redacted_calls(tool_calls, self._redact)
                if ids_source is not None and ids is not None:
                    entry.update(ids_source=ids_source, n_ids=len(ids))
                self.records.add_tokens(entry)
        except Exception as e:  # noqa: BLE001 - a bug of the harness: the run ends as a crash
            await self._crashed(e, qid, bool(first_token), completed, stream)

    async def _crashed(self, exc: Exception, qid: int, first_sent: bool, completed: bool, stream: Any) -> None:
        """A bug of the harness's own code while serving `qid`: complete the sample if it is
        not yet (LoadGen would wait for it forever), then end the run as a crash."""
        if not completed:
            self._unserved(qid, first_sent)
        if self.crashed is None:
            self.crashed = exc
        if self._crash is not None:
            self._crash(exc)  # the child's handler exits the process
        if inspect.isasyncgen(stream):  # left suspended mid-answer: let the backend clean up
            with contextlib.suppress(Exception):
                await stream.aclose()

    def _first_ids(self, chunk: Any, before: list[int]) -> np.ndarray:
        """The first token's data in accuracy mode, as MLCommons' reference SUTs send it to
        FirstTokenComplete (LoadGen logs it as `token_data`): the first chunk's ids, int32;
        the tokenizer's ids of its text when it carried none; none when neither works.

        Ids that came before any text (`before`: a server may send a token's ids first and
        its text later, as vLLM does while a UTF-8 character is incomplete) lead them: the
        first token logged is then the answer's first id, which TEST06 checks
        (compliance/TEST06/run_verification.py first_token_check, mlcommons/inference b66003e1)."""
        ids = chunk.token_ids
        if before:
            ids = [*before, *(ids or ())]
        elif not ids and self.backend.tokenize_output is not None and chunk.text:
            try:
                ids = self.backend.tokenize_output(chunk.text)
            except Exception:  # noqa: BLE001 - the backend's tokenizer: the first token logs no data
                ids = None
        if not ids or not all(i.__class__ is int and 0 <= i < 2**31 for i in ids):
            return np.zeros(0, dtype=np.int32)
        return np.asarray(list(ids), dtype=np.int32)

    def _answer_ids(self, texts: list[str], ids: list[int],
                    lead: tuple[str, list[int]] | None = None) -> tuple[str, list[int], str | None, str]:
        """(text, ids, where the ids came from, failure) of an answer in accuracy mode.

        The ids the chunks carried (the model's, or the server's), else the backend's
        tokenizer's ids of the whole text: tokenized only here, in accuracy mode, never on a
        performance run's path. `lead` is the first chunk's text and the tokenizer's ids of it
        alone, which FirstTokenComplete got: where the whole text's ids do not begin with
        them (a tokenizer merges across the chunk's end: "Th" then "e council" is [1082]
        alone, [504] together), the answer's ids are the lead's then the rest's, so the
        first token LoadGen logged is the answer's first id (TEST06) for an honest server,
        and the ids still spell the same text. An answer of fewer than 2 tokens fails with its reason:
        LoadGen logs an error for every sample under 2 tokens, and a 0-token answer has
        nothing to score."""
        text = "".join(texts)
        if self._redact is not None:
            text = self._redact(text)
        source: str | None = self.backend.output_ids_source
        if not ids:
            tokenize = self.backend.tokenize_output
            if tokenize is None:
                return text, ids, None, ("no_token_ids: the answer carried no token ids and the backend has no tokenizer "
                                         f"({self.backend.tokenizer_hint})")
            try:
                ids = list(tokenize(text)) if text else []
                if lead is not None and lead[1] and ids[:len(lead[1])] != lead[1] and text.startswith(lead[0]):
                    ids = [*lead[1], *tokenize(text[len(lead[0]):])]
            except Exception as e:  # noqa: BLE001 - the backend's tokenizer failed this answer
                return text, [], None, f"tokenize: {_failure_text(e)}"
            source = "tokenizer"
        if len(ids) < 2:
            return text, ids, source, (f"short_output: the answer has {len(ids)} token(s); LoadGen needs at least 2 "
                                       "and scoring counts it as a failure")
        if not all(i.__class__ is int and 0 <= i < 2**31 for i in ids):
            bad = next(i for i in ids if not (i.__class__ is int and 0 <= i < 2**31))
            return text, [], source, f"malformed_token_ids: {source} gave {bad!r}, not an int32 token id"
        return text, ids, source, ""

    def _unserved(self, qid: int, first_sent: bool) -> None:
        """Complete `qid` to LoadGen with no data and no request: only ever after a crash."""
        self._out.unserved(qid, first_sent, self.first_token_calls)


def lag_summary(lags: list[tuple[float, float]]) -> dict[str, Any] | None:
    """The lag probe's (time, seconds late) pairs as child.json keeps them: the distribution
    in ms and each second's worst, on the records' timeline. A client shard's pairs are
    merged with the others' before this."""
    if not lags:
        return None
    late = np.array([lag for _, lag in lags])
    # The loop's clock is time.monotonic(), the records' perf_counter_ns() clock on
    # Linux (both CLOCK_MONOTONIC): each second's worst lateness plots on their timeline.
    worst: dict[int, float] = {}
    for now, lag in lags:
        worst[int(now)] = max(lag, worst.get(int(now), 0.0))
    return {"period_ms": LAG_PERIOD_S * 1e3, "samples": len(late),
            **distribution(late, unit=1e-3, percentiles=(50, 99)),  # s -> ms
            "per_second_max": [[sec * 1_000_000_000, lag * 1e3] for sec, lag in sorted(worst.items())]}


def _labels(text: str) -> np.ndarray:
    """A transcript as accuracy mode logs it: MLPerf's whisper reference SUT's labels, int64."""
    from harness.results.scoring.wer import LABELS_DTYPE, transcript_labels

    return np.asarray(transcript_labels(text), dtype=LABELS_DTYPE)


async def _nothing() -> Any:
    """The stream of a turn that is not sent (its session failed): no chunk."""
    return
    yield
def _redacted_calls(calls: list[dict[str, Any]], redact: Callable[[str], str] | None) -> list[dict[str, Any]]:
    """Tool calls as tokens.jsonl keeps them: a server may echo a secret into arguments too."""
    if redact is None:
        return calls
    return [{**c, "name": redact(c.get("name") or ""), "arguments": redact(c.get("arguments") or "")} for c in calls]


def _failure_text(e: BaseException) -> str:
    """"reason: detail" of a failed request, one line. The exception is the backend's, and so
    is its `str`: one that cannot be shown still fails only its request."""
    try:
        reason = getattr(e, "reason", None) or type(e).__name__
        detail = getattr(e, "detail", None) or str(e)
        return f"{reason}: {detail}".replace("\n", " ")[:500]
    except Exception:  # noqa: BLE001 - see above
        return f"{type(e).__name__}: (its text could not be read)"
