"""The benchmarks `harness submission` knows, as data: the submission checker's v6.1 tables.

Read from mlcommons/inference at commit b66003e1, tools/submission/submission_checker/
constants.py MODEL_CONFIG["v6.1"] unless a field says otherwise; not run here, and none of
its code is copied. Keyed by the name `--benchmark` takes, the model name LoadGen's
mlperf.conf uses (`llama3_1-8b`, not the checker's `llama3.1-8b`): the results folder takes
`checker_name`. LoadGen's own values (seeds, 600 s, counts, Server's bound) are not here:
they are read from the installed LoadGen (submission_rules.official_settings).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: system_type values whose scenario tables differ ("edge,datacenter" reads as "datacenter,edge")
SYSTEM_TYPE_TABLES = ("datacenter", "edge", "datacenter,edge")


@dataclass(frozen=True)
class TokenLimits:
    """p99 bounds of an LLM's Server-like scenario, ms; the checker wants both strictly under
    (constants.py LLM_LATENCY_LIMITS, performance_check.py llm_check)."""

    ttft_ms: float
    tpot_ms: float


@dataclass(frozen=True)
class Benchmark:
    """A benchmark's entry in the checker's v6.1 tables."""

    checker_name: str  # MODEL_CONFIG models: the results folder's name
    dataset_size: int  # dataset-size
    # accuracy.txt's figures, (ACC_PATTERN key, minimum) in the closed division (accuracy-target);
    # the first is the headline one
    accuracy_targets: tuple[tuple[str, float], ...]
    # required-scenarios-<system type>: a missing system type has no entry (the checker fails)
    required: dict[str, tuple[str, ...]]
    # optional-scenarios-<system type>: allowed; when Interactive and Server are both here,
    # one of them is required (loader.py check_scenarios)
    optional: dict[str, tuple[str, ...]] = field(default_factory=dict)
    compliance: tuple[str, ...] = ()  # models_TEST0x: these audits in every scenario (closed division)
    performance_sample_count: int = 0  # performance-sample-count
    accuracy_sample_count: int | None = None  # accuracy-sample-count, else the dataset size
    # accuracy-upper-limit: (ACC_PATTERN key, maximum); with the targets, the generated-length window
    accuracy_upper: tuple[tuple[str, float], ...] = ()
    # LLM_LATENCY_LIMITS; the checker reads them by the log's effective_scenario, which is
    # Server in an Interactive folder: it applies the Server bounds there (performance_check.py
    # __init__ and llm_check). The harness checks Interactive's own.
    token_limits: dict[str, TokenLimits] = field(default_factory=dict)
    # RESULT_FIELD_NEW, overridden by RESULT_FIELD_BENCHMARK_OVERWRITE; for Interactive the
    # checker reads the Server key (the log's effective_scenario)
    metric: dict[str, str] = field(default_factory=dict)
    # configuration.py get_llm_models: requested_use_token_latencies must be on (llm_check)
    is_llm: bool = False

    @property
    def accuracy_count(self) -> int:
        """configuration.py get_accuracy_sample_count: what an accuracy run must cover."""
        return self.accuracy_sample_count or self.dataset_size

    def scenarios_for(self, system_type: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """(required, optional) for a system_type, None when the checker has no entry."""
        key = "datacenter,edge" if system_type in ("datacenter,edge", "edge,datacenter") else system_type
        if key not in self.required:
            return None
        return self.required[key], self.optional.get(key, ())


_DC = ("datacenter", "datacenter,edge")
_SAMPLES = {"Offline": "result_samples_per_second", "SingleStream": "early_stopping_latency_ss",
            "MultiStream": "early_stopping_latency_ms", "Server": "result_completed_samples_per_sec"}
_TOKENS = {"Offline": "result_tokens_per_second", "Server": "result_completed_tokens_per_second",
           "Interactive": "result_completed_tokens_per_second"}
_SERVER_OR_INTERACTIVE = {t: ("Interactive", "Server") for t in _DC}
_OFFLINE_DC = {t: ("Offline",) for t in _DC}


def _rouge(r1: float, r2: float, rl: float, share: float) -> tuple[tuple[str, float], ...]:
    return (("ROUGE1", r1 * share), ("ROUGE2", r2 * share), ("ROUGEL", rl * share))


BENCHMARKS: dict[str, Benchmark] = {
    # model_mapping resnet50 -> resnet; no datacenter entry (the checker stops with a traceback)
    "resnet50": Benchmark(
        "resnet", 50_000, (("acc", 76.46 * 0.99),),
        {"edge": ("SingleStream", "MultiStream", "Offline"),
         "datacenter,edge": ("SingleStream", "MultiStream", "Offline", "Server")},
        compliance=("TEST01", "TEST04"), performance_sample_count=1024, metric=_SAMPLES),
    # mlperf.conf llama2-70b; v6.1 has only the 99.9 % variant
    "llama2-70b": Benchmark(
        "llama2-70b-99.9", 24_576,
        (*_rouge(44.4312, 22.0352, 28.6162, 0.999), ("TOKENS_PER_SAMPLE", 294.45 * 0.9)),
        _OFFLINE_DC, _SERVER_OR_INTERACTIVE, ("TEST06",), 24_576,
        accuracy_upper=(("TOKENS_PER_SAMPLE", 294.45 * 1.1),),
        token_limits={"Server": TokenLimits(2000, 200), "Interactive": TokenLimits(450, 40)}, metric=_TOKENS,
        is_llm=True),
    # mlperf.conf llama3_1-8b; model_mapping llama3_1-8b -> llama3.1-8b
    "llama3_1-8b": Benchmark(
        "llama3.1-8b", 13_368,
        (*_rouge(38.7792, 15.9075, 24.4957, 0.99), ("ROUGELSUM", 35.793 * 0.99), ("GEN_LEN", 8167644 * 0.9)),
        _OFFLINE_DC, _SERVER_OR_INTERACTIVE, ("TEST06",), 13_368,
        accuracy_upper=(("GEN_LEN", 8167644 * 1.1),),
        token_limits={"Server": TokenLimits(2000, 100), "Interactive": TokenLimits(500, 30)}, metric=_TOKENS,
        is_llm=True),
    # edge only; not in models_TEST06 (nor any other compliance list)
    "llama3_1-8b-edge": Benchmark(
        "llama3.1-8b-edge", 5_000,
        (*_rouge(39.06, 16.1147, 24.6375, 0.99), ("ROUGELSUM", 36.124 * 0.99), ("GEN_LEN", 3051113 * 0.9)),
        {"edge": ("SingleStream", "Offline"), "datacenter,edge": ("SingleStream", "Offline")},
        performance_sample_count=5_000, accuracy_upper=(("GEN_LEN", 3051113 * 1.1),),
        metric={"Offline": "result_tokens_per_second", "SingleStream": "result_90.00_percentile_latency_ns"},
        is_llm=True),
    "deepseek-r1": Benchmark(
        "deepseek-r1", 4_388, (("exact_match", 0.99 * 81.3582), ("TOKENS_PER_SAMPLE", 0.9 * 3886.2274)),
        _OFFLINE_DC, _SERVER_OR_INTERACTIVE, ("TEST06",), 4_388,
        accuracy_upper=(("TOKENS_PER_SAMPLE", 1.1 * 3886.2274),),
        token_limits={"Server": TokenLimits(2000, 80), "Interactive": TokenLimits(1500, 15)}, metric=_TOKENS,
        is_llm=True),
    # accuracy-sample-count 4,395 of the 6,396 (mlperf.conf's accuracy_sample_count_override);
    # mlperf.conf sets no Offline min_query_count for it: the checker still wants 6,396 in
    # the closed division's Offline query (OFFLINE_MIN_SPQ_SINCE_V4)
    "gpt-oss-120b": Benchmark(
        "gpt-oss-120b", 6_396, (("exact_match", 83.13 * 0.99),),
        _OFFLINE_DC, _SERVER_OR_INTERACTIVE, ("TEST07", "TEST09"), 6_396, accuracy_sample_count=4_395,
        accuracy_upper=(("TOKENS_PER_SAMPLE", 1.1 * 9999),),
        token_limits={"Server": TokenLimits(3000, 80), "Interactive": TokenLimits(2000, 15)}, metric=_TOKENS,
        is_llm=True),
}

#: constants.py OFFLINE_MIN_SPQ_SINCE_V4: the closed division's Offline query, in samples
OFFLINE_MIN_SAMPLES = {"resnet50": 24_576, "llama2-70b": 24_576, "llama3_1-8b": 13_368, "llama3_1-8b-edge": 5_000,
                       "deepseek-r1": 4_388, "gpt-oss-120b": 6_396}

#: the checker's names, for a `--benchmark` that used one where LoadGen's is wanted
BY_CHECKER_NAME = {b.checker_name: name for name, b in BENCHMARKS.items()}
