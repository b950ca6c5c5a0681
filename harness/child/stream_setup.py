"""Setting up the event-loop SUT (harness.child.stream_sut) before the timed test.

`build_streaming` turns the run's dataset into ready requests (`PreparedDataset`: request
bodies are built at load time, outside the timed path), starts the event loop thread,
sends the warm-up requests (which also open the pooled connections, so no handshake lands
in a timed TTFT) and returns the factory the child calls once the records exist.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from backends.base import Chunk, ResponseFormat, StreamingBackend
from harness.child.event_loop_thread import EventLoopThread
from harness.child.prepared_dataset import PreparedDataset
from harness.child.record_writer import RecordWriter
from harness.child.schedule import SCHEDULE_FILE, ArrivalPlan, TracePlan
from harness.child.stream_sut import LoadGenOutlet, StreamingSUT
from harness.config.run_config import RunConfig
from harness.data.datasets import Dataset
from harness.errors import BackendError, ConfigError


class StreamingFactory:
    """What `build_streaming` hands the child: builds the SUT once records exist."""

    def __init__(
        self,
        config: RunConfig,
        backend: StreamingBackend,
        dataset: PreparedDataset,
        runner: EventLoopThread,
        warm_output: Any,
    ) -> None:
        self.config = config
        self.warmup_s = 0.0
        self.backend = backend
        self.dataset = dataset
        self.runner = runner
        #: dtype/shape of one output, so the summary can score accuracy (tensor answers
        #: only): the server's metadata when it has some, else the warm-up answer's
        self.response_format: ResponseFormat | None = backend.response_format()
        if self.response_format is None and isinstance(warm_output, np.ndarray):
            self.response_format = {"dtype": warm_output.dtype.name, "shape": list(warm_output.shape)}

    def __call__(
        self, records: RecordWriter, return_outputs: bool, crash: Callable[[BaseException], None] | None = None
    ) -> StreamingSUT:
        import mlperf_loadgen as lg

        outlet = LoadGenOutlet(lg, self.runner.loop, tokens=self.backend.produces_tokens, return_outputs=return_outputs)
        return self.sut(records, outlet, return_outputs, crash)

    def sut(self, records: Any, outlet: Any, return_outputs: bool, crash: Callable[[BaseException], None] | None,
            max_in_flight: int | None = None, **kw: Any) -> StreamingSUT:
        """The SUT over any outlet: LoadGen's here, a client shard's in harness.child.shard."""
        held = session_hold(self.config, self.backend, self.dataset, self.runner.loop)
        if held is not None:
            kw["sessions"] = held
            max_in_flight = held.users  # one turn in flight a session at most
        plan = schedule_plan(self.config, self.dataset)
        if plan is not None and "schedule_path" not in kw:
            run_dir = getattr(records, "run_dir", None)
            kw["schedule_path"] = run_dir / SCHEDULE_FILE if run_dir is not None else None
        return StreamingSUT(
            self.backend,
            self.dataset,
            records,
            self.runner,
            outlet,
            tokens=self.backend.produces_tokens,
            first_token_calls=first_token_calls(self.config),
            return_outputs=return_outputs,
            max_in_flight=max_in_flight or in_flight_limit(self.config.concurrency, self.backend.max_in_flight),
            crash=crash,
            schedule=plan,
            **kw,
        )


def session_hold(config: RunConfig, backend: StreamingBackend, dataset: Dataset, loop: Any) -> Any:
    """The SUT's hold for a session dataset (harness.child.sessions); None for any other."""
    from harness.data.sessions import SessionDataset

    source = getattr(dataset, "source", None)
    if not isinstance(source, SessionDataset):
        return None
    from harness.child.sessions import SessionHold

    s = config.sessions
    return SessionHold(source, backend.chat_request, loop, time.perf_counter_ns, users=s.users,
                       think_time=s.think_time_s, header=s.affinity_header, salt=s.salt, seed=config.seed,
                       carry_reasoning=s.carry_reasoning, tool_delay=s.tool_delay_s, tool_result=s.tool_result,
                       rate=s.user_centric_rate)


def schedule_plan(config: RunConfig, dataset: Dataset) -> ArrivalPlan | TracePlan | None:
    """The run's harness-owned schedule: a trace's timestamps, or its `arrivals`; None: none."""
    offsets = getattr(getattr(dataset, "source", dataset), "arrival_s", None)
    if offsets is not None:
        return TracePlan(offsets, getattr(dataset, "name", "trace"))
    return ArrivalPlan.from_config(config.arrivals) if config.arrivals is not None else None


def first_token_calls(config: RunConfig) -> bool:
    """LoadGen gets FirstTokenComplete calls in token mode, except Offline (it has no TTFT)."""
    return bool(config.use_token_latencies) and config.scenario != "Offline"


def in_flight_limit(concurrency: int | None, backend_limit: int | None) -> int | None:
    """The most requests the SUT keeps open: `concurrency` makes it exactly N (Offline
    issues every sample, so N are always waiting to start), within the backend's own limit."""
    if concurrency is None:
        return backend_limit
    if backend_limit is not None and backend_limit < concurrency:
        raise ConfigError(
            f"concurrency {concurrency}: the backend serves at most {backend_limit} requests at once "
            "(its max_in_flight, or max_batch for pytorch-llm); raise that or lower concurrency"
        )
    return concurrency


def build_streaming(config: RunConfig, backend: StreamingBackend, workers: int,
                    return_outputs: bool = False) -> tuple[PreparedDataset, StreamingFactory]:
    """(dataset, sut_factory) for a backend whose kind is not "tensor".

    One event loop serves every request whatever `workers` says: the loop is I/O bound,
    and a second loop would only split the pool and add a thread contending for the GIL.
    With `return_outputs`, a token-generating backend must give each answer's token ids
    (MLPerf logs ids): its chunks' or its tokenizer's; the warm-up shows which, and a
    backend with neither stops the run here, before the test, with the option to set.
    """
    source = build_source(config, backend)
    # A session's turns are built at dispatch, from the answers before them (harness.child.sessions).
    dataset = PreparedDataset(source, _as_is if _is_sessions(source) else backend.prepare)
    # a schedule's timers must fire on time; other runs keep asyncio's own selector
    runner = EventLoopThread(precise=schedule_plan(config, dataset) is not None)
    t0 = time.perf_counter()
    warm = backend.options.warmup_requests
    if warm and _is_sessions(source):
        # one pooled connection a user: the first turns go out together, and a handshake
        # would land in their timed TTFT (seen: ~3 ms of a 55 ms TTFT here)
        warm = max(warm, config.sessions.users)
    output, saw_ids = runner.run(_warmup(backend, dataset, warm))
    # a transcript is logged as its labels, not ids (StreamingSUT): it needs no tokenizer
    if return_outputs and backend.output_kind == "tokens" and backend.tokenize_output is None and not saw_ids:
        runner.close()
        heard = "the warm-up answers carried no token ids" if backend.options.warmup_requests else "warmup_requests is 0"
        raise ConfigError(
            f"accuracy mode logs each answer's token ids, as MLPerf does, but {heard} and backend "
            f"{backend.name!r} has no tokenizer: {backend.tokenizer_hint}"
        )
    factory = StreamingFactory(config, backend, dataset, runner, output)
    factory.warmup_s = time.perf_counter() - t0  # the child reports it as the run's warm-up
    return dataset, factory


def build_source(config: RunConfig, backend: StreamingBackend) -> Dataset:
    """The run's dataset for a loaded streaming backend: prompts (lengths in the backend's
    tokens when it has a tokenizer) or tensors shaped by its inputs."""
    from harness.data.sessions import build_session_dataset, is_session_spec

    if is_session_spec(config.dataset):
        if not backend.takes_sessions:
            protocol = getattr(backend.options, "protocol", None)
            raise ConfigError(
                f"dataset {config.dataset!r} is multi-turn sessions, which need a chat API to carry the history: "
                f"backend {backend.name!r}" + (f" with protocol {protocol}" if protocol else "")
                + " takes none; use backend http with protocol=openai-chat"
            )
        limit = backend.max_in_flight
        if limit is not None and limit < config.sessions.users:  # the rest would wait for a connection, timed
            raise ConfigError(f"sessions.users {config.sessions.users}: the backend serves at most {limit} requests at "
                              "once (its max_in_flight); raise max_in_flight or lower sessions.users")
        return build_session_dataset(config.dataset, config.seed, backend.count_tokens)
    kind = backend.input_kind
    if kind in ("prompt", "chat"):
        from harness.data.prompts import build_prompt_dataset
        from harness.results.slo import parse_slo

        parse_slo(config.slo)  # a wrong target key stops the run before the test, not after it
        # The backend's own tokenizer, when it has one, so lengths count in its tokens.
        prompts = build_prompt_dataset(config.dataset, config.seed, backend.count_tokens)
        prompts.check_sendable(backend.sends_token_ids)  # a row without what is sent: one line, before any request
        if backend.answer_schema is not None:  # asked of the server: every answer is checked against it
            prompts.expect_schema(backend.answer_schema, f"backend {backend.name}'s answer schema")
        return prompts
    if kind == "rank":
        from harness.data.rerank import build_rank_dataset

        return build_rank_dataset(config.dataset, config.seed, backend.count_tokens)
    if kind == "audio":
        from harness.data.audio import build_audio_dataset

        return build_audio_dataset(config.dataset)
    if kind != "tensor":
        raise ConfigError(f"backend {backend.name!r} takes {kind} inputs, which no dataset of this harness provides yet")
    from harness.data.datasets import build_tensor_dataset

    return build_tensor_dataset(config.dataset, backend.inputs(), config.seed)


def warmup_request(dataset: Dataset, i: int, backend: StreamingBackend | None = None) -> Any:
    """The i-th warm-up request: for a prompt dataset, sample i's prompt behind a marker, so
    that no timed prompt was sent before. A server's prompt cache matches the longest
    common prefix: warmed on sample 0 itself, a first timed request on sample 0 was a full
    hit (127 of 128 prompt tokens reused, TTFT 44 ms against a p50 of 2.9 s). A prompt that
    differs from its first word on shares nothing but what every timed request shares
    (a chat template's system prompt). Token ids (prompt_from=ids) have no marker to put
    in front, so they go reversed: the same tokens, sharing no prefix with the timed one
    beyond a coincidence of their first and last token. Other datasets warm up on their
    own samples."""
    from dataclasses import replace

    from harness.data.prompt_set import PromptDataset

    source = getattr(dataset, "source", None)
    if isinstance(dataset, PreparedDataset) and _is_sessions(source):
        # A session's first turn as a chat of its own, behind the marker: nothing timed was sent.
        sess = source.sessions[i % len(source.sessions)]
        turn = sess.turns[0]
        return backend.chat_request([{"role": "user", "content": f"Warm-up request {i}, not timed. {turn.content}"}],
                                    turn.max_tokens, {})
    if not isinstance(dataset, PreparedDataset) or not isinstance(source, PromptDataset):
        return dataset.materialize(i % len(dataset))
    base = source.materialize(i % len(source))
    mark = f"Warm-up request {i}, not timed. "
    if base.messages:
        from backends.content import prefixed

        first, *rest = base.messages  # a content of parts gets the marker in its first text part
        sample = replace(base, messages=({**first, "content": prefixed(first.get("content", ""), mark)}, *rest))
    else:
        sample = replace(base, prompt=mark + (base.prompt or ""))
    if base.input_ids is not None:
        sample = replace(sample, input_ids=tuple(reversed(base.input_ids)))
    return dataset._prepare(sample)


def _as_is(sample: Any) -> Any:
    return sample


def _is_sessions(source: Any) -> bool:
    from harness.data.sessions import SessionDataset

    return isinstance(source, SessionDataset)


async def _warmup(backend: StreamingBackend, dataset: Dataset, n: int) -> Any:
    """Open the pool and send `n` requests at once, outside the timed test.

    Sent concurrently so that `n` pooled connections are open when the test starts: a
    burst of first requests would otherwise pay the TCP (and TLS) handshakes inside
    the timed TTFT. Any failure stops the run. Returns a whole answer (a chunk's
    `output`) seen, if any, and whether any chunk carried token ids.
    """
    await backend.open()

    async def one(i: int) -> Any:
        sample = warmup_request(dataset, i, backend)
        output = None
        ids = False
        try:
            async for chunk in backend.stream(sample):
                if not isinstance(chunk, Chunk):  # checked here, outside the timed test
                    raise TypeError(f"stream() yielded a {type(chunk).__name__}, not a backends.base.Chunk")
                if chunk.output is not None:
                    output = chunk.output
                ids = ids or bool(chunk.token_ids)
        except Exception as e:  # noqa: BLE001 - every failure kind stops the run here, with its text
            raise BackendError(f"warm-up request {i} failed before the test started: {e}") from e
        return output, ids

    answers = await asyncio.gather(*(one(i) for i in range(n)))
    return next((o for o, _ in answers if o is not None), None), any(ids for _, ids in answers)
