"""Run configuration: scenario YAML + `--set` overrides -> one validated, frozen RunConfig.

Everything is checked before any model loads. An error names the key, the file and line
it came from, and the closest valid key. The resolved config is saved as `run.yaml` in
the results folder, so `harness run -c results/<run>/run.yaml` repeats the run.

LoadGen settings left unset (None) keep LoadGen's own value: its compiled-in
mlperf.conf defaults, or what `mlperf_conf`/`user_conf` set. The effective values are
read back from LoadGen's log into summary.json.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.data import benchmarks
from harness.data.sessions import is_session_spec
from harness.errors import ConfigError
from harness.results.loadgen_log import INTERACTIVE, loadgen_scenario
from harness.results.slo import TARGETS as SLO_TARGETS

#: LoadGen's four, and MLPerf's Interactive: LoadGen's Server with the benchmark's
#: `<model>-interactive` conf entries (harness.results.loadgen_log)
Scenario = Literal["SingleStream", "MultiStream", "Server", "Offline", "Interactive"]
#: a results folder is named <stamp>-<name>-<scenario>: no separators, no dot first, no newline
NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._-]*$"
# Bounds of what LoadGen and a machine can do: past them LoadGen overflows its integer
# milliseconds/nanoseconds or allocates per-sample state it cannot hold (1e12 samples
# crashed the child with SIGSEGV). A week of test, 2^31 samples, 10^8 queries a second.
MAX_DURATION_S = 7 * 24 * 3600.0
MAX_COUNT = 2**31 - 1
MAX_QPS = 1e8
MAX_LATENCY_MS = 24 * 3600 * 1e3
MAX_WORKERS = 1024
Mode = Literal["PerformanceOnly", "AccuracyOnly", "FindPeakPerformance", "SubmissionRun"]


#: Server's default max_batch for a backend that batches freely: the most samples a worker
#: takes of those already queued (it never waits for more: batch_timeout_ms is 0), so an
#: idle system still serves one sample a call and only a backlog is batched.
SERVER_AUTO_BATCH = 256


class Telemetry(BaseModel):
    """What the parent samples beside the test (docs/telemetry.md), never on its request path."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    server: list[str] = Field(
        default_factory=list, description="Prometheus text endpoints to scrape, e.g. http://127.0.0.1:8000/metrics"
    )
    host: bool = Field(False, description="CPU and memory of the test process, its threads and the machine (psutil)")
    gpu: bool = Field(False, description="NVIDIA GPUs through NVML: utilisation, memory, power, energy")
    interval_s: float = Field(1.0, ge=0.05, le=60, description="seconds between samples")
    optional: bool = Field(False, description="an endpoint that does not answer before the test is a warning, not an error")
    series: list[str] = Field(
        default_factory=list, description="more server series to summarise, by name, beside the known servers' ones"
    )

    @model_validator(mode="before")
    @classmethod
    def _one_url(cls, data: Any) -> Any:
        # `--set telemetry.server=URL` gives one string; a YAML list gives several.
        if isinstance(data, dict):
            for key in ("server", "series"):
                if isinstance(data.get(key), str):
                    data = {**data, key: [data[key]]}
        return data

    @model_validator(mode="after")
    def _urls(self) -> Telemetry:
        for url in self.server:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"telemetry server {url!r}: expected an http:// or https:// URL of a /metrics endpoint")
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.server or self.host or self.gpu)


#: one line for a run that asks for Ray where the `ray` extra is not installed
RAY_MISSING = "distribute needs Ray here: pip install 'loadgen-harness[ray]'"


class Distribute(BaseModel):
    """Scale-out (docs/distribute.md): one LoadGen in the child drives backend replicas on
    Ray (tensor backends) or client shards (event-loop backends: HTTP)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    address: str | None = Field(
        None, description="a Ray cluster to join (ray://HOST:PORT, or auto); unset: a local Ray on loopback, "
        "started by the run and stopped after it"
    )
    replicas: int = Field(0, ge=0, le=MAX_WORKERS, description="backend replicas, each a Ray actor holding one "
                          "loaded backend; 0: the backend runs in the test process")
    cpus_per_replica: float = Field(1.0, gt=0, le=1024, description="Ray CPUs per replica; also its backend's threads")
    gpus_per_replica: float = Field(0.0, ge=0, le=64, description="Ray GPUs per replica")
    placement: Literal["none", "PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = Field(
        "none", description="reserve the replicas as one Ray placement group with this strategy"
    )
    in_flight: int = Field(1, ge=1, le=64, description="calls queued at each replica at once: 2 overlaps the "
                           "round trip with the next call (throughput); 1 keeps a call's service time its own")
    replica_calls: Literal["direct", "ray"] = Field(
        "direct", description="how a worker's batch reaches its replica: direct (Ray places the replica; each "
        "worker then calls it over a connection of its own, ~0.1 ms a call), ray (a Ray task a call, ~1 ms)"
    )
    client_processes: int = Field(
        0, ge=0, le=MAX_WORKERS, description="client shards (per node with client_nodes): processes, each with "
        "its own event loop and connections, sending an event-loop backend's requests; 0: one loop in the test "
        "process"
    )
    client_nodes: int = Field(
        0, ge=0, le=1024, description="Ray nodes the client shards run on, client_processes (at least 1) on each, "
        "one node apiece; 0: this host"
    )
    client_transport: Literal["auto", "process", "ray"] = Field(
        "auto", description="how shards start and talk: process (this host, a socket pair each), ray (actors on any "
        "node, a TCP connection each); auto: ray with client_nodes or address, else process"
    )
    on_loss: Literal["continue", "stop"] = Field(
        "continue", description="a replica or client shard that dies fails its in-flight samples; continue on the "
        "others, or stop the run (incomplete, records kept)"
    )
    max_clock_uncertainty_ms: float = Field(
        1.0, gt=0, le=1000, description="a client shard on another host whose clock offset the round trips bound "
        "only to worse than +- this is refused before the test: its stamps could not be put on the driver's clock"
    )

    @model_validator(mode="after")
    def _one_kind(self) -> Distribute:
        if self.replicas and self.shards:
            raise ValueError("distribute: replicas scale a tensor backend, client_processes/client_nodes an "
                             "event-loop backend's client; set one of them")
        if self.client_transport == "process" and (self.client_nodes or self.address):
            raise ValueError("distribute.client_transport process runs shards on this host only; client_nodes and "
                             "address need ray")
        return self

    @property
    def enabled(self) -> bool:
        """Backend replicas on Ray."""
        return self.replicas > 0

    @property
    def shards(self) -> int:
        """Client shards in all: client_processes on this host, or per node with client_nodes."""
        if self.client_nodes:
            return max(1, self.client_processes) * self.client_nodes
        return self.client_processes

    @property
    def transport(self) -> str:
        """The client shards' transport, `auto` resolved."""
        if self.client_transport != "auto":
            return self.client_transport
        return "ray" if (self.client_nodes or self.address) else "process"

    @property
    def needs_ray(self) -> bool:
        return self.enabled or (self.shards > 0 and self.transport == "ray")


class Sessions(BaseModel):
    """Multi-turn sessions (a session dataset: chat-sessions, sharegpt-sessions,
    synthetic-sessions; docs/llm.md): how many users talk at once and how they pace."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    users: int = Field(1, ge=1, le=MAX_WORKERS, description="sessions open at once (concurrent users); a session "
                       "stays open through its think times until its last turn ends")
    think_time_s: str = Field("0", description="after a turn's answer, before the next turn: seconds (0.5), "
                              "uniform(lo,hi) or lognormal(median,sigma)")
    affinity_header: str | None = Field("X-Session-ID", description="request header carrying the session's id "
                                        "(sticky routing to the server that holds its cache); null: none")
    salt: bool = Field(False, description="a per-session salt ahead of each session's own content, so no two "
                       "sessions share a prefix past the system prompt (defeats cross-session prefix caching)")
    carry_reasoning: bool = Field(False, description="send each answer's reasoning back in the history as "
                                  "`reasoning_content` (APIs that need it back between tool calls); off: the answer "
                                  "text and its tool calls only, as most servers' chat templates drop past reasoning")
    tool_delay_s: str = Field("0", description="a mocked tool: after an answer with tool calls, the next turn waits "
                              "this instead of the think time: seconds (0.5), uniform(lo,hi) or lognormal(median,sigma)")
    user_centric_rate: float | None = Field(None, gt=0, le=1e5, description="user-centric pacing (AIPerf's "
                                            "user-centric mode), turns a second over all users: each user's turns "
                                            "start users/rate s apart (start to start), the users staggered 1/rate "
                                            "apart; a turn whose previous answer comes later goes at the answer. "
                                            "Replaces think_time_s; null: turns go after the answer and a think time")
    tool_result: str = Field('{"ok": true}', min_length=1, description="the mocked tool's result: the next turn "
                             "carries one `tool` message of this text per tool call, after the answer that made them")

    @model_validator(mode="after")
    def _valid(self) -> Sessions:
        from harness.data.sessions import think_time_sampler

        think_time_sampler(self.think_time_s)  # ValueError: the config's one line says what to write
        think_time_sampler(self.tool_delay_s, "tool_delay_s")
        if self.user_centric_rate is not None and self.think_time_s.strip() not in ("0", "0.0"):
            raise ValueError(f"sessions.user_centric_rate paces each user's turns users/rate apart, start to start; "
                             f"sessions.think_time_s ({self.think_time_s}) paces them from the answer: set one of them")
        if self.affinity_header is not None and not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}", self.affinity_header):
            raise ValueError(f"sessions.affinity_header {self.affinity_header!r} is not an HTTP header name")
        return self


#: dataset specs whose rows carry their own arrival times (harness.data.traces)
TRACE_PREFIX = "trace:"


class Arrivals(BaseModel):
    """A harness-owned open-loop schedule (docs/traffic.md). LoadGen's own Server scenario
    stays Poisson; this runs in Offline underneath: LoadGen issues every sample at once and
    the harness dispatches sample k (in LoadGen's issue order) at its scheduled time."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["poisson", "gamma", "constant"] = Field(
        "poisson", description="inter-arrival gaps: poisson (exponential), gamma (with shape: CV = 1/sqrt(shape), "
        "below 1 burstier than Poisson, as vLLM's --burstiness), constant (evenly spaced)"
    )
    rate: float = Field(gt=0, le=1e6, description="requests a second (after the ramp, if any)")
    shape: float | None = Field(None, gt=0, le=1e6, description="gamma only: the gamma shape")
    seed: int = Field(0, ge=0, lt=2**32, description="seed of the gaps")
    ramp_from: float | None = Field(None, ge=0, le=1e6, description="a linear ramp: the rate at the start, "
                                    "reaching `rate` after ramp_s")
    ramp_s: float = Field(0.0, ge=0, le=MAX_DURATION_S, description="the ramp's length in seconds")

    @model_validator(mode="after")
    def _parameters(self) -> Arrivals:
        if (self.kind == "gamma") != (self.shape is not None):
            raise ValueError("arrivals.shape is the gamma shape: set it with kind gamma, and only then")
        if (self.ramp_from is not None) != (self.ramp_s > 0):
            raise ValueError("a ramp needs both arrivals.ramp_from (the starting rate) and arrivals.ramp_s > 0")
        return self


class RunConfig(BaseModel):
    """One LoadGen test. Units are in the key names."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(
        "run", description="label used in the results folder name: letters, digits, '.', '_', '-'",
        pattern=NAME_PATTERN, max_length=64,
    )
    scenario: Scenario = Field(
        "Offline", description="LoadGen's scenario; Interactive: an LLM benchmark's Server with mlperf.conf's "
        "`<benchmark>-interactive` TTFT/TPOT bounds, reported and filed as Interactive",
    )
    mode: Mode = "PerformanceOnly"
    backend: str = Field("onnxruntime", description="a name from `harness backends`")
    model: str | None = Field(None, description="model path or reference, as the backend takes it")
    dataset: str = Field("synthetic", description="dataset spec: synthetic[:n=N], digits, DIR, ...")
    seed: int = Field(0, ge=0, lt=2**32, description="seed of synthetic data")
    backend_options: dict[str, Any] = Field(default_factory=dict, description="the backend's own options")

    # --- the SUT adapter -------------------------------------------------------------
    workers: int | None = Field(None, ge=1, le=MAX_WORKERS, description="worker threads; default 1, or one per core in Offline on a CPU backend (ORT CPU provider, PyTorch cpu)")
    max_batch: int | None = Field(
        None, ge=1, le=1 << 20,
        description=f"largest batch handed to the backend; default: in Server, up to {SERVER_AUTO_BATCH} of the samples "
        "queued when a call starts, for a backend that batches freely (ONNX Runtime with a dynamic batch dimension, synthetic), else 1",
    )
    batch_timeout_ms: float = Field(
        0.0, ge=0, le=MAX_LATENCY_MS, description="Server/SingleStream: wait up to this long to fill a batch (0: off)"
    )
    completion_coalesce_us: float = Field(
        200.0, ge=0, le=1e6, description="while samples queue up behind fast backend calls, complete them to LoadGen together, holding a result at most this long (0: complete every call at once)"
    )
    concurrency: int | None = Field(
        None, ge=1, le=1 << 16,
        description="a closed loop: exactly N requests in flight for the whole test (Offline: LoadGen issues every "
        "sample at once and the harness holds N in flight, starting the next as one ends); the schedule is then "
        "the harness's, so the headline latency, TTFT and TPOT (and compare's gate) count from dispatch, and "
        "LoadGen's issue-based figures and the backlog are shown apart (docs/sweeps.md)",
    )
    issue_inline: bool | None = Field(
        None,
        description="SingleStream/MultiStream: serve each query inside LoadGen's issue callback, on its thread, "
        "with no hand-off to a worker thread (tensor backends; default: on in SingleStream with one worker)",
    )
    arrivals: Arrivals | None = Field(
        None, description="open-loop timed arrivals owned by the harness (kind poisson, gamma or constant, rate, "
        "seed, ramp): runs in Offline, LoadGen issuing every sample at once and the harness dispatching each at its "
        "time; LoadGen's own Server scenario stays Poisson (docs/traffic.md)",
    )
    schedule_lag_limit_ms: float = Field(
        2.0, gt=0, le=MAX_LATENCY_MS,
        description="arrivals or a trace: the run is called degraded when dispatch - scheduled time has its p99 "
        "above this (default 2 ms: LoadGen's own Server issue measured p99 1.1-1.9 ms on a 2-core VM)",
    )
    enable_trace: bool = Field(False, description="write LoadGen's mlperf_log_trace.json (costly at high QPS)")

    # --- MLPerf conf files, read by LoadGen itself ---------------------------------------
    mlperf_conf: str | None = Field(None, description="an mlperf.conf-format file")
    user_conf: str | None = Field(None, description="a user.conf file")
    benchmark: str = Field(
        "*", description="model name the conf files are keyed by, mlperf.conf's: e.g. "
        f"{', '.join(b.name for b in benchmarks.RECORDS if b.in_checker)}",
    )
    official_conf: bool | None = Field(
        None,
        description="load LoadGen's compiled-in mlperf.conf (official seeds, durations, counts) before any conf "
        "file and --set; default: on when a benchmark is named; false: off (--no-mlperf-conf)",
    )

    # --- LoadGen test settings (None: LoadGen's default or the conf files') --------------
    min_duration_s: float | None = Field(None, ge=0, le=MAX_DURATION_S)
    max_duration_s: float | None = Field(None, ge=0, le=MAX_DURATION_S, description="0: no limit")
    min_query_count: int | None = Field(None, ge=1, le=MAX_COUNT)
    max_query_count: int | None = Field(None, ge=0, le=MAX_COUNT, description="0: no limit")
    performance_sample_count: int | None = Field(None, ge=1, le=MAX_COUNT, description="samples loaded for the timed run")
    target_qps: float | None = Field(None, gt=0, le=MAX_QPS, description="Server: Poisson arrival rate")
    target_latency_ms: float | None = Field(None, gt=0, le=MAX_LATENCY_MS, description="Server: latency bound")
    target_latency_percentile: float | None = Field(None, gt=0, lt=1, description="Server: e.g. 0.99")
    server_coalesce_queries: bool | None = Field(
        None,
        description="Server: LoadGen issues every query whose time has passed in one call (each keeps its "
        "scheduled time), so a lagging issue thread catches up in one call; default on unless a conf file sets "
        "coalesce_queries (run.yaml records the value used)",
    )
    server_max_async_queries: int | None = Field(None, ge=0, le=MAX_COUNT)
    server_num_issue_query_threads: int | None = Field(None, ge=0, le=MAX_WORKERS)
    find_peak_step_size: float | None = Field(None, gt=0, le=MAX_QPS, description="FindPeakPerformance: QPS step")
    offline_expected_qps: float | None = Field(
        None, gt=0, le=MAX_QPS,
        description="Offline: sizes the query (1.1 x this x min_duration samples); unset, a pilot run measures the "
        "rate first and the run uses 1.5 x it (manifest.json `sizing`; a run that still ran out is sized again from "
        "its own rate, once)",
    )
    single_stream_expected_latency_ms: float | None = Field(None, gt=0, le=MAX_LATENCY_MS)
    single_stream_target_latency_percentile: float | None = Field(None, gt=0, lt=1)
    multi_stream_samples_per_query: int | None = Field(None, ge=1, le=1 << 20)
    multi_stream_expected_latency_ms: float | None = Field(None, gt=0, le=MAX_LATENCY_MS)
    multi_stream_target_latency_percentile: float | None = Field(None, gt=0, lt=1)
    use_token_latencies: bool | None = Field(
        None, description="LLM: TTFT/TPOT constraints; default on for an LLM benchmark (mlperf.conf turns it on)"
    )
    ttft_latency_ms: float | None = Field(None, gt=0, le=MAX_LATENCY_MS)
    tpot_latency_ms: float | None = Field(None, gt=0, le=MAX_LATENCY_MS)
    qsl_rng_seed: int | None = Field(None, ge=0, lt=2**64)
    sample_index_rng_seed: int | None = Field(None, ge=0, lt=2**64)
    schedule_rng_seed: int | None = Field(None, ge=0, lt=2**64)
    accuracy_log_rng_seed: int | None = Field(None, ge=0, lt=2**64)
    accuracy_log_probability: float | None = Field(None, ge=0, le=1)
    accuracy_log_sampling_target: int | None = Field(None, ge=0, le=MAX_COUNT)
    performance_issue_unique: bool | None = None
    performance_issue_same: bool | None = None
    performance_issue_same_index: int | None = Field(None, ge=0, le=MAX_COUNT)
    sample_concatenate_permutation: bool | None = None

    # LoadGen's VALID speaks of latencies only: a run whose requests failed can pass it.
    min_success_rate: float = Field(
        0.95, ge=0, le=1,
        description="the harness's verdict, 0 to 1: below this share of succeeded samples the run is INVALID "
        "(exit 1) whatever LoadGen says; 0 turns the rule off",
    )

    cost: dict[str, Any] | None = Field(None, description="price sheet, see docs/cost.md")
    telemetry: Telemetry = Field(
        default_factory=Telemetry, description="server metrics, host and GPU samples taken beside the test (docs/telemetry.md)"
    )
    distribute: Distribute = Field(
        default_factory=Distribute, description="backend replicas on Ray, client shards (docs/distribute.md)"
    )
    sessions: Sessions = Field(
        default_factory=Sessions, description="multi-turn sessions: users, think time, affinity header, salt"
    )
    slo: dict[str, float] | None = Field(
        None, description="per-request targets for goodput: ttft_ms, tpot_ms, e2e_ms (see docs/llm.md)"
    )

    @model_validator(mode="before")
    @classmethod
    def _token_latencies_default(cls, data: Any) -> Any:
        """An LLM benchmark measures TTFT/TPOT: mlperf.conf turns LoadGen's use_token_latencies
        on for it, and the SUT must then report each first token, so the harness's default
        follows (an explicit false stays: the submission rules name it)."""
        name = data.get("benchmark") if isinstance(data, dict) else None
        record = benchmarks.benchmark(name) if isinstance(name, str) else None
        if record is not None and record.token_latencies and data.get("use_token_latencies") is None:
            data = {**data, "use_token_latencies": True}
        return data

    @model_validator(mode="before")
    @classmethod
    def _schedule_sizes_the_query(cls, data: Any) -> Any:
        """Arrivals at `rate`: the Offline query holds 1.1 x rate x min_duration samples, so
        the schedule spans 1.1 x min_duration (no sizing pilot: the rate is known). A trace
        holds its rows, once each: no minimum duration."""
        if not isinstance(data, dict):
            return data
        arrivals = data.get("arrivals")
        rate = arrivals.get("rate") if isinstance(arrivals, dict) else getattr(arrivals, "rate", None)
        if rate is not None and data.get("offline_expected_qps") is None:
            data = {**data, "offline_expected_qps": rate}
        if str(data.get("dataset", "")).startswith(TRACE_PREFIX) and data.get("min_duration_s") is None:
            data = {**data, "min_duration_s": 0}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> RunConfig:
        loadgen_name = benchmarks.checker_only_name(self.benchmark)
        if loadgen_name is not None:
            raise ValueError(f"benchmark {self.benchmark!r} is the submission checker's name; LoadGen's mlperf.conf "
                             f"calls it {loadgen_name!r}: use that (the submission folder takes the checker's)")
        record = benchmarks.benchmark(self.benchmark)
        if self.scenario == INTERACTIVE and not (record and record.interactive):
            interactive = sorted(b.name for b in benchmarks.RECORDS if b.interactive)
            raise ValueError(f"scenario Interactive is an LLM benchmark's Server with mlperf.conf's tighter TTFT/TPOT "
                             f"bounds; benchmark {self.benchmark!r} has none: name one of "
                             f"{', '.join(interactive)}, or use Server")
        if (self.scenario == INTERACTIVE and self.official_conf is False and not (self.mlperf_conf or self.user_conf)
                and not (self.ttft_latency_ms and self.tpot_latency_ms)):
            raise ValueError("scenario Interactive takes its TTFT/TPOT bounds from mlperf.conf's "
                             f"{self.benchmark}-interactive entries, which official_conf false leaves unread: "
                             "drop --no-mlperf-conf, or set ttft_latency_ms and tpot_latency_ms")
        if self.max_duration_s and self.min_duration_s and self.max_duration_s < self.min_duration_s:
            raise ValueError("max_duration_s is below min_duration_s")
        if self.max_query_count and self.min_query_count and self.max_query_count < self.min_query_count:
            raise ValueError("max_query_count is below min_query_count")
        if self.mode == "FindPeakPerformance" and loadgen_scenario(self.scenario) != "Server":
            raise ValueError("mode FindPeakPerformance only exists for the Server scenario")
        if self.issue_inline and self.scenario not in ("SingleStream", "MultiStream"):
            raise ValueError(
                f"issue_inline serves on LoadGen's thread, which would delay the {self.scenario} arrivals; "
                "use it in SingleStream or MultiStream"
            )
        if self.concurrency and self.scenario != "Offline":
            raise ValueError(
                f"concurrency holds N requests in flight in a closed loop, which needs LoadGen to issue every sample "
                f"at once: use scenario Offline (in {self.scenario} the arrivals are LoadGen's; max_in_flight caps them)"
            )
        if self.arrivals or self.dataset.startswith(TRACE_PREFIX):
            self._check_schedule()
        if self.concurrency and self.workers and self.workers != self.concurrency:
            raise ValueError(f"concurrency {self.concurrency} sets the workers of a tensor backend; drop workers={self.workers}")
        if self.distribute.shards and self.issue_inline:
            raise ValueError("client shards send requests from their own processes: drop issue_inline")
        if self.distribute.enabled and (self.workers or self.concurrency or self.issue_inline):
            raise ValueError("with distribute.replicas the replicas serve the calls (replicas x in_flight at once): "
                             "drop workers, concurrency and issue_inline")
        if self.issue_inline and self.workers and self.workers > 1:
            raise ValueError("issue_inline serves every query on LoadGen's thread; workers above 1 would stay idle")
        if self.offline_expected_qps and self.min_duration_s:
            # LoadGen issues 1.1 x expected_qps x min_duration samples in one Offline query.
            samples = 1.1 * self.offline_expected_qps * self.min_duration_s
            if samples > MAX_COUNT:
                raise ValueError(
                    f"offline_expected_qps x min_duration_s asks LoadGen for {samples:.3g} samples in one query, "
                    f"more than it can hold ({MAX_COUNT:,}); lower one of them"
                )
        if is_session_spec(self.dataset):
            if self.scenario != "Offline":
                raise ValueError(f"dataset {self.dataset!r} is multi-turn sessions: LoadGen must issue every turn at "
                                 f"once and the harness paces them, so use scenario Offline, not {self.scenario}")
            if self.concurrency or self.distribute.shards:
                raise ValueError("a session dataset's requests in flight are its users (sessions.users): drop "
                                 "concurrency and distribute.client_processes")
            counts = [k for k in ("min_duration_s", "max_duration_s", "min_query_count", "max_query_count",
                                  "performance_sample_count", "offline_expected_qps") if getattr(self, k)]
            if counts:
                raise ValueError(f"a session run sends each turn of the dataset once (the harness sets LoadGen's counts "
                                 f"to the number of turns): drop {', '.join(counts)}; the dataset's n sets the run's size")
        unknown = sorted(set(self.slo or {}) - set(SLO_TARGETS))
        if unknown:
            raise ValueError(f"slo.{unknown[0]}: unknown target; use {', '.join('slo.' + t for t in SLO_TARGETS)}")
        for key, value in (self.slo or {}).items():
            if not 0 < value <= MAX_LATENCY_MS:
                raise ValueError(f"slo.{key}: must be a positive number of milliseconds (got {value!r})")
        return self

    def _check_schedule(self) -> None:
        """Arrivals and traces hold samples back inside one Offline query: only there, alone."""
        what = "arrivals" if self.arrivals else f"a trace dataset ({self.dataset.split(',')[0]})"
        if self.arrivals and self.dataset.startswith(TRACE_PREFIX):
            raise ValueError("a trace dataset brings its own arrival times: drop arrivals, or use another dataset")
        if self.arrivals and is_session_spec(self.dataset):
            raise ValueError("a session's turns wait for the previous answer and a think time (sessions.think_time_s), "
                             "not for arrival times: drop arrivals")
        if self.scenario != "Offline":
            raise ValueError(f"{what} is a harness-owned schedule inside one Offline query (LoadGen's Server is "
                             f"Poisson only): use scenario Offline, not {self.scenario}")
        if self.concurrency:
            raise ValueError(f"{what} is an open loop; concurrency a closed one: set one of them")
        if self.distribute.shards or self.distribute.enabled:
            raise ValueError(f"{what} is dispatched from the test process's one event loop: drop distribute")
        if self.dataset.startswith(TRACE_PREFIX):
            for key in ("min_query_count", "max_query_count", "offline_expected_qps", "performance_sample_count"):
                if getattr(self, key) is not None:
                    raise ValueError(f"a trace replays each of its rows once, which sets the query's size: drop {key}")
            if self.min_duration_s:
                raise ValueError("a trace replays each of its rows once, for as long as it lasts: drop min_duration_s")

    def to_yaml(self) -> str:
        data = self.model_dump(mode="json")
        return yaml.safe_dump(data, sort_keys=False)


FIELDS = tuple(RunConfig.model_fields)


# --- loading with line numbers --------------------------------------------------------

MAX_DEPTH = 32  # a run config nests two levels; 5,000 overflowed PyYAML's recursion
MAX_CONFIG_BYTES = 256 * 1024
_QUOTE = 80  # characters of a value quoted back in an error


class _StrictLoader(yaml.SafeLoader):
    """safe_load, minus what a settings file never needs and an attacker can use: anchors
    and aliases (a 500-byte alias bomb expands to gigabytes), duplicate keys (PyYAML keeps
    the last one silently) and deep nesting."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.MarkedYAMLError(problem="anchors and aliases (&name, *name) are not accepted here",
                                       problem_mark=event.start_mark)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise yaml.MarkedYAMLError(problem=f"nested deeper than {MAX_DEPTH} levels", problem_mark=event.start_mark)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else id(key_node)
            if key in seen:
                raise yaml.MarkedYAMLError(problem=f"duplicate key {_cut(key)}", problem_mark=key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def _cut(value: Any) -> str:
    """repr(value), cut to a sane length: an error line quotes what it refuses."""
    text = repr(value)
    return text if len(text) <= _QUOTE else text[: _QUOTE - 1] + "…"


def _key_lines(text: str) -> dict[str, int]:
    """Top-level and `backend_options.*` keys of a YAML mapping -> 1-based line numbers."""
    lines: dict[str, int] = {}
    try:
        node = yaml.compose(text, Loader=_StrictLoader)
    except yaml.YAMLError:
        return lines
    if not isinstance(node, yaml.MappingNode):
        return lines
    for k, v in node.value:
        lines[str(k.value)] = k.start_mark.line + 1
        if isinstance(v, yaml.MappingNode):
            for k2, _ in v.value:
                lines[f"{k.value}.{k2.value}"] = k2.start_mark.line + 1
    return lines


def _closest(key: str, choices: list[str]) -> str:
    match = difflib.get_close_matches(key, choices, n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""


def read_yaml(path: Path) -> tuple[dict[str, Any], dict[str, int]]:
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:  # PyYAML's scanner takes ~10 s a megabyte: refuse, do not hang
            raise ConfigError(f"{path}: {size:,} bytes; a run config is at most {MAX_CONFIG_BYTES:,}")
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read config {path}: {e.strerror}") from e
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start}); save it as UTF-8") from e
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}{where}: invalid YAML: {problem}") from e
    except RecursionError as e:  # a nesting PyYAML's parser itself cannot follow
        raise ConfigError(f"{path}: invalid YAML: nested too deeply") from e
    if data is None:
        raise ConfigError(f"{path}: no settings (the file is empty); write at least `scenario:`, or run without -c")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings at the top level")
    lines = _key_lines(text)
    for key in data:
        if not isinstance(key, str):
            where = f":{lines[str(key)]}" if str(key) in lines else ""
            raise ConfigError(f"{path}{where}: {_cut(key)} is not a setting name{_closest(str(key), list(FIELDS))}")
    return data, lines


def parse_override(item: str) -> tuple[str, Any]:
    key, eq, raw = item.partition("=")
    if not eq or not key.strip():
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set target_qps=500")
    try:
        value = yaml.load(raw, Loader=_StrictLoader) if raw.strip() else ""  # noqa: S506 - SafeLoader
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def build_config(
    config_file: Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    cli_values: dict[str, Any] | None = None,
    backend_option_names: Any = None,
    backend_options_cls: Any = None,
    sections: dict[str, Any] | None = None,
    base: tuple[dict[str, Any], str] | None = None,
) -> RunConfig:
    """Merge file < CLI flags < --set, then validate once.

    `base`: settings already resolved (a sweep's base config, with the file named in
    errors) that stand in for `config_file`.

    `backend_option_names(backend) -> list[str]` lets a bare `--set KEY=V` reach the
    chosen backend's options (e.g. `--set intra_op_threads=1`). `backend_options_cls(backend)
    -> Options class or None` checks their values here, so an error names the file and line;
    `sections` maps a section (e.g. "cost") to a `check(value, where)` of a layer above
    this one (the price sheet), called with the same file:line.
    """
    data: dict[str, Any] = {}
    lines: dict[str, int] = {}
    source = "command line"
    if config_file is not None:
        data, lines = read_yaml(config_file)
        source = str(config_file)
    elif base is not None:
        data, source = dict(base[0]), base[1]
    origin: dict[str, str] = {k: f"{source}:{lines[k]}" if k in lines else source for k in data}
    if isinstance(data.get("backend_options"), dict):
        data["backend_options"] = dict(data["backend_options"])
        for k in data["backend_options"]:
            full = f"backend_options.{k}"
            origin[full] = f"{source}:{lines[full]}" if full in lines else source
    for k, v in (cli_values or {}).items():
        if v is not None:
            data[k] = v
            origin[k] = "command line"
    pending_backend: list[tuple[str, Any]] = []
    for item in overrides:
        key, value = parse_override(item)
        if key.startswith("backend_options."):
            pending_backend.append((key.split(".", 1)[1], value))
        elif "." in key:
            section, sub = key.split(".", 1)
            if section not in FIELDS:
                raise ConfigError(f"--set {key}: unknown section {section!r}{_closest(section, list(FIELDS))}")
            current = dict(data.get(section) or {})
            current[sub] = value
            data[section] = current
            origin[key] = "--set"
        elif key in FIELDS:
            data[key] = value
            origin[key] = "--set"
        else:
            pending_backend.append((key, value))
    if pending_backend:
        backend = data.get("backend", RunConfig.model_fields["backend"].default)
        names = list(backend_option_names(backend)) if backend_option_names else []
        opts = dict(data.get("backend_options") or {})
        for key, value in pending_backend:
            if names and key not in names:
                hint = _closest(key, list(FIELDS) + names)
                raise ConfigError(
                    f"--set {key}: not a run setting nor an option of backend {backend!r}{hint}; "
                    "see `harness backends` for its options"
                )
            opts[key] = value
            origin[f"backend_options.{key}"] = "--set"
        data["backend_options"] = opts
    try:
        config = RunConfig(**data)
    except ValidationError as e:
        raise ConfigError(_explain(e, origin, source)) from e
    for section, check in (sections or {}).items():
        if getattr(config, section, None) is not None:
            check(getattr(config, section), f"{origin.get(section, source)}: {section}")
    if backend_option_names and config.backend_options:
        names = list(backend_option_names(config.backend))
        for key in config.backend_options:
            if names and key not in names:
                where = origin.get(f"backend_options.{key}", source)
                raise ConfigError(
                    f"{where}: backend {config.backend!r} has no option {key!r}{_closest(key, names)}"
                )
    options_cls = backend_options_cls(config.backend) if backend_options_cls else None
    if options_cls is not None:
        try:
            options_cls(**config.backend_options)
        except ValidationError as e:
            err = e.errors()[0]
            key = ".".join(str(p) for p in err["loc"])
            where = origin.get(f"backend_options.{key}") or origin.get("backend_options") or source
            raise ConfigError(
                f"{where}: backend {config.backend!r} option {key}: {err['msg']} (got {_cut(err.get('input'))})"
            ) from e
    return config


def _explain(e: ValidationError, origin: dict[str, str], source: str) -> str:
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    where = origin.get(loc) or origin.get(str(err["loc"][0]) if err["loc"] else "", source)
    if err["type"] == "extra_forbidden":
        return f"{where}: unknown setting {loc!r}{_closest(loc, list(FIELDS))}"
    if not loc:  # a model-level rule
        return f"{source}: {err['msg'].removeprefix('Value error, ')}"
    return f"{where}: {loc}: {err['msg']} (got {_cut(err.get('input'))})"


def validate_backend_options(config: RunConfig, options_cls: type[BaseModel]) -> BaseModel:
    """The backend's own options, checked with its pydantic model; errors name the key."""
    try:
        return options_cls(**config.backend_options)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            hint = _closest(key, list(options_cls.model_fields))
            raise ConfigError(
                f"backend {config.backend!r} has no option {key!r}{hint}; options: "
                f"{', '.join(options_cls.model_fields) or 'none'}"
            ) from e
        raise ConfigError(
            f"backend {config.backend!r} option {key}: {err['msg']} (got {_cut(err.get('input'))})"
        ) from e
