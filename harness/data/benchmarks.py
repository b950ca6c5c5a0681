"""The MLPerf benchmarks the harness knows: one frozen record each, every fact about it here.

A record is keyed by `name`, mlperf.conf's model name (what `--benchmark` takes and LoadGen
looks its conf keys up by: `llama3_1-8b`). It also owns the submission checker's name (the
results folder's: `llama3.1-8b`) and the checker's other spellings of it, whether LoadGen
measures token latencies for it and has `<name>-interactive` entries, its TTFT/TPOT bounds,
its tokenizer's EOS id (TEST06), whether mlperf.conf pads its runs to equal issue, its
dataset reader, scorer and accuracy.txt form, its sample counts, and its entries in the
checker's v6.1 tables.

Sources, read at mlcommons/inference commit b66003e10e2db4b8c36a448b0545ec90fcc6e9e9 (LoadGen
6.0.17); none of their code is copied:
    loadgen/mlperf.conf                      use_token_latencies, -interactive entries, bounds,
                                             sample_concatenate_permutation,
                                             performance_sample_count (tests/data/
                                             test_benchmarks.py reads the installed LoadGen's)
    tools/submission/submission_checker/     MODEL_CONFIG["v6.1"] (models, model_mapping,
      constants.py                           scenarios, accuracy-target/-upper-limit,
                                             dataset-size, performance-/accuracy-sample-count,
                                             models_TEST0x), OFFLINE_MIN_SPQ_SINCE_V4,
                                             LLM_LATENCY_LIMITS, RESULT_FIELD_*
    compliance/TEST06/run_verification.py    --eos_token_id (the tokenizer's, default 2)

Why in harness.data, the lowest layer: every layer reads these facts (config refuses a
checker name, data reads a set, results scores it, analysis writes the folder), and layers
import downward only. So the record names what lives higher, or beside it, by key: `reader`
is a key of harness.data.mlperf_llm.READERS (which imports this module for the set names;
importing it back would be a circle), `scorer` the row metric harness.results.text_accuracy
dispatches on, `accuracy_form` the script whose printed line harness.analysis.llm_accuracy_txt
writes. tests/data/test_benchmarks.py checks that every key names something that exists.

Adding a benchmark: one record in RECORDS and its row in that test's excerpts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

#: harness.data.mlperf_llm.READERS: how a processed file is read (columns, pandas reader);
#: "whisper-manifest": harness.data.audio.AUDIO_READERS
Reader = Literal["rouge-json", "rouge-pickle", "exact-text-pickle", "exact-ids-parquet", "whisper-manifest"]
#: the row metric harness.results.text_accuracy scores a row by: ROUGE, or an official
#: exact-match script's extraction rules (harness.results.scoring.exact_match.Family)
Scorer = Literal["rouge", "deepseek-r1", "gpt-oss", "whisper"]
#: how the evaluation script prints its result, which accuracy.txt imitates
#: (the docstring of harness.analysis.llm_accuracy_txt says which script prints which)
AccuracyForm = Literal["rouge-strings", "rouge-numbers", "exact-dict", "exact-line", "wer-line"]

#: compliance/TEST06/run_verification.py's --eos_token_id default (Llama 2's </s>)
DEFAULT_EOS_TOKEN_ID = 2


@dataclass(frozen=True)
class TokenLimits:
    """p99 bounds of an LLM's Server-like scenario, ms: mlperf.conf's ttft_latency/tpot_latency,
    and the checker's LLM_LATENCY_LIMITS (it wants both strictly under; performance_check.py
    llm_check)."""

    ttft_ms: float
    tpot_ms: float


@dataclass(frozen=True)
class Benchmark:
    """One MLPerf benchmark: its names, its LoadGen facts, its data and scoring, and its
    entries in the checker's v6.1 tables."""

    name: str  # mlperf.conf's model name: what --benchmark takes
    checker_name: str  # MODEL_CONFIG models (model_mapping of `name`): the results folder's name
    dataset_size: int  # every sample of the set (dataset-size; OFFLINE_MIN_SPQ_SINCE_V4 where v6.1 has none)
    performance_sample_count: int  # mlperf.conf's and performance-sample-count
    # the checker's other names for it: its -99/-99.9 and -interactive entries
    aliases: tuple[str, ...] = ()
    # whether MODEL_CONFIG["v6.1"] lists it: `harness submission` writes only these
    in_checker: bool = True
    # mlperf.conf `<name>.*.use_token_latencies = 1`: TTFT/TPOT measured; an LLM
    # (configuration.py get_llm_models: requested_use_token_latencies must be on)
    token_latencies: bool = False
    # configuration.py get_llm_models lists it (the checker's LLM rules): whisper measures
    # token latencies in mlperf.conf, yet the checker does not hold it to them
    checker_llm: bool = True
    # mlperf.conf `<name>-interactive.Server.ttft_latency`/`tpot_latency`: the Interactive scenario
    interactive: bool = False
    # mlperf.conf `<name>.*.sample_concatenate_permutation = 1` (and its -interactive entry's):
    # equal-issue padding, a performance run issues whole passes over the loaded samples. The
    # v6.1 checker never reads it (requires_equal_issue is for v4.1), so `harness submission`
    # refuses a run that turned it off
    equal_issue: bool = False
    # LLM_LATENCY_LIMITS, the same as mlperf.conf's; the checker reads them by the log's
    # effective_scenario, which is Server in an Interactive folder: it applies the Server
    # bounds there (performance_check.py __init__ and llm_check). The harness checks Interactive's own.
    token_limits: Mapping[str, TokenLimits] = field(default_factory=dict)
    # the tokenizer's eos_token_id, TEST06's --eos_token_id; None: the script's default
    eos_token_id: int | None = None
    # mlperf:SET:PATH's SET (and the dataset's kind in references.json); reader and scorer
    dataset: str | None = None
    reader: Reader | None = None
    scorer: Scorer | None = None
    accuracy_form: AccuracyForm | None = None
    # accuracy-sample-count: what an accuracy run must cover, when not the whole set
    accuracy_sample_count: int | None = None
    # OFFLINE_MIN_SPQ_SINCE_V4: the closed division's Offline query, in samples
    offline_min_samples: int = 0
    # accuracy.txt's figures, (ACC_PATTERN key, minimum) in the closed division (accuracy-target);
    # the first is the headline one
    accuracy_targets: tuple[tuple[str, float], ...] = ()
    # accuracy-upper-limit: (ACC_PATTERN key, maximum); with the targets, the generated-length window
    accuracy_upper: tuple[tuple[str, float], ...] = ()
    # required-scenarios-<system type>: a missing system type has no entry (the checker fails)
    required: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # optional-scenarios-<system type>: allowed; when Interactive and Server are both here,
    # one of them is required (loader.py check_scenarios)
    optional: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    compliance: tuple[str, ...] = ()  # models_TEST0x: these audits in every scenario (closed division)
    # RESULT_FIELD_NEW, overridden by RESULT_FIELD_BENCHMARK_OVERWRITE; for Interactive the
    # checker reads the Server key (the log's effective_scenario)
    metric: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_llm(self) -> bool:
        return self.token_latencies and self.checker_llm

    @property
    def names(self) -> tuple[str, ...]:
        """Every name this benchmark goes by: LoadGen's, the checker's, and their -interactive forms."""
        found = (self.name, self.checker_name, *self.aliases)
        if self.interactive:
            found += (f"{self.name}-interactive", f"{self.checker_name}-interactive")
        return tuple(dict.fromkeys(found))

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
_LLAMA3_EOS = 128009  # Llama 3.1 Instruct's <|eot_id|>


def _rouge(r1: float, r2: float, rl: float, share: float) -> tuple[tuple[str, float], ...]:
    return (("ROUGE1", r1 * share), ("ROUGE2", r2 * share), ("ROUGEL", rl * share))


def _limits(server: tuple[float, float], interactive: tuple[float, float] | None = None) -> dict[str, TokenLimits]:
    out = {"Server": TokenLimits(*server)}
    if interactive:
        out["Interactive"] = TokenLimits(*interactive)
    return out


#: in the order the sets are listed to users (mlperf:SET)
RECORDS: tuple[Benchmark, ...] = (
    # model_mapping resnet50 -> resnet; no datacenter entry (the checker stops with a traceback)
    Benchmark(
        "resnet50", "resnet", 50_000, 1024, offline_min_samples=24_576,
        accuracy_targets=(("acc", 76.46 * 0.99),),
        required={"edge": ("SingleStream", "MultiStream", "Offline"),
                  "datacenter,edge": ("SingleStream", "MultiStream", "Offline", "Server")},
        compliance=("TEST01", "TEST04"), metric=_SAMPLES),
    # model_mapping llama3_1-8b -> llama3.1-8b
    Benchmark(
        "llama3_1-8b", "llama3.1-8b", 13_368, 13_368, token_latencies=True, equal_issue=True, interactive=True,
        token_limits=_limits((2000, 100), (500, 30)), eos_token_id=_LLAMA3_EOS,
        dataset="llama3.1-8b", reader="rouge-json", scorer="rouge", accuracy_form="rouge-strings",
        offline_min_samples=13_368,
        accuracy_targets=(*_rouge(38.7792, 15.9075, 24.4957, 0.99), ("ROUGELSUM", 35.793 * 0.99),
                          ("GEN_LEN", 8167644 * 0.9)),
        accuracy_upper=(("GEN_LEN", 8167644 * 1.1),),
        required=_OFFLINE_DC, optional=_SERVER_OR_INTERACTIVE, compliance=("TEST06",), metric=_TOKENS),
    # edge only; not in models_TEST06 (nor any other compliance list); a 5,000-sample CNN-DailyMail
    # file in cnn_eval.json's form, scored and printed as llama3.1-8b's
    Benchmark(
        "llama3_1-8b-edge", "llama3.1-8b-edge", 5_000, 5_000, token_latencies=True, equal_issue=True,
        eos_token_id=_LLAMA3_EOS,
        dataset="llama3.1-8b", reader="rouge-json", scorer="rouge", accuracy_form="rouge-strings",
        offline_min_samples=5_000,
        accuracy_targets=(*_rouge(39.06, 16.1147, 24.6375, 0.99), ("ROUGELSUM", 36.124 * 0.99),
                          ("GEN_LEN", 3051113 * 0.9)),
        accuracy_upper=(("GEN_LEN", 3051113 * 1.1),),
        required={"edge": ("SingleStream", "Offline"), "datacenter,edge": ("SingleStream", "Offline")},
        metric={"Offline": "result_tokens_per_second", "SingleStream": "result_90.00_percentile_latency_ns"}),
    # v6.1 has only the 99.9 % variant; Llama 2's </s>
    Benchmark(
        "llama2-70b", "llama2-70b-99.9", 24_576, 24_576,
        aliases=("llama2-70b-99", "llama2-70b-interactive-99", "llama2-70b-interactive-99.9"),
        token_latencies=True, equal_issue=True, interactive=True, token_limits=_limits((2000, 200), (450, 40)),
        eos_token_id=2,
        dataset="llama2-70b", reader="rouge-pickle", scorer="rouge", accuracy_form="rouge-numbers",
        offline_min_samples=24_576,
        accuracy_targets=(*_rouge(44.4312, 22.0352, 28.6162, 0.999), ("TOKENS_PER_SAMPLE", 294.45 * 0.9)),
        accuracy_upper=(("TOKENS_PER_SAMPLE", 294.45 * 1.1),),
        required=_OFFLINE_DC, optional=_SERVER_OR_INTERACTIVE, compliance=("TEST06",), metric=_TOKENS),
    # mlperf.conf still has it; MODEL_CONFIG v6.1 does not (OFFLINE_MIN_SPQ_SINCE_V4 gives its set's size)
    Benchmark(
        "mixtral-8x7b", "mixtral-8x7b", 15_000, 15_000, in_checker=False, token_latencies=True, equal_issue=True,
        token_limits=_limits((2000, 200)), eos_token_id=2, offline_min_samples=15_000),
    # model_mapping llama3_1-405b -> llama3.1-405b; MODEL_CONFIG v6.1 does not list it
    Benchmark(
        "llama3_1-405b", "llama3.1-405b", 8_313, 8_313, in_checker=False, token_latencies=True, equal_issue=True,
        interactive=True,
        token_limits=_limits((6000, 175), (4500, 80)), eos_token_id=_LLAMA3_EOS, offline_min_samples=8_313),
    # DeepSeek-R1's <｜end▁of▁sentence｜>
    Benchmark(
        "deepseek-r1", "deepseek-r1", 4_388, 4_388, token_latencies=True, equal_issue=True, interactive=True,
        token_limits=_limits((2000, 80), (1500, 15)), eos_token_id=1,
        dataset="deepseek-r1", reader="exact-text-pickle", scorer="deepseek-r1", accuracy_form="exact-dict",
        offline_min_samples=4_388,
        accuracy_targets=(("exact_match", 0.99 * 81.3582), ("TOKENS_PER_SAMPLE", 0.9 * 3886.2274)),
        accuracy_upper=(("TOKENS_PER_SAMPLE", 1.1 * 3886.2274),),
        required=_OFFLINE_DC, optional=_SERVER_OR_INTERACTIVE, compliance=("TEST06",), metric=_TOKENS),
    # accuracy-sample-count 4,395 of the 6,396 (mlperf.conf's accuracy_sample_count_override);
    # mlperf.conf sets no Offline min_query_count for it: the checker still wants 6,396 in
    # the closed division's Offline query (OFFLINE_MIN_SPQ_SINCE_V4). No EOS id: not in
    # models_TEST06, so TEST06 keeps the script's default.
    Benchmark(
        "gpt-oss-120b", "gpt-oss-120b", 6_396, 6_396, token_latencies=True, equal_issue=True, interactive=True,
        token_limits=_limits((3000, 80), (2000, 15)),
        dataset="gpt-oss", reader="exact-ids-parquet", scorer="gpt-oss", accuracy_form="exact-line",
        accuracy_sample_count=4_395, offline_min_samples=6_396,
        accuracy_targets=(("exact_match", 83.13 * 0.99),), accuracy_upper=(("TOKENS_PER_SAMPLE", 1.1 * 9999),),
        required=_OFFLINE_DC, optional=_SERVER_OR_INTERACTIVE, compliance=("TEST07", "TEST09"), metric=_TOKENS),
    # speech to text, in the layout of speech2text/utils/repackage_librispeech.py (a JSON manifest
    # and its WAVs; harness.data.audio reads it: `reader` is its key there), scored by
    # speech2text/accuracy_eval.py (harness.results.scoring.wer): 100 - WER. mlperf.conf measures
    # its token latencies and pads to equal issue; the checker reads Offline's tokens/s and holds it
    # to no LLM rule (not in get_llm_models); models_TEST01.
    Benchmark(
        "whisper", "whisper", 1_633, 1_633, token_latencies=True, checker_llm=False, equal_issue=True,
        dataset="whisper", reader="whisper-manifest", scorer="whisper", accuracy_form="wer-line",
        offline_min_samples=1_633, accuracy_targets=(("ACCURACY", (100.0 - 2.0671) * 0.99),),
        required={t: ("Offline",) for t in ("datacenter", "edge", "datacenter,edge")}, compliance=("TEST01",),
        metric={"Offline": "result_tokens_per_second"}),
)

#: by mlperf.conf's name
BY_NAME: Mapping[str, Benchmark] = MappingProxyType({b.name: b for b in RECORDS})
#: by every name each goes by (LoadGen's, the checker's, their variants)
_BY_ANY_NAME: Mapping[str, Benchmark] = MappingProxyType({n: b for b in RECORDS for n in b.names})
#: the mlperf:SET names, in RECORDS' order
DATASETS: tuple[str, ...] = tuple(dict.fromkeys(b.dataset for b in RECORDS if b.dataset))


def benchmark(name: str) -> Benchmark | None:
    """The record for LoadGen's name (what a run's config holds), None for another."""
    return BY_NAME.get(name)


def find(name: str) -> Benchmark | None:
    """The record for any of its names (`llama3_1-8b`, `llama3.1-8b`, `llama2-70b-interactive-99`)."""
    return _BY_ANY_NAME.get(name)


def for_submission(name: str) -> Benchmark | None:
    """The record for LoadGen's name when the checker's v6.1 tables have it."""
    record = BY_NAME.get(name)
    return record if record is not None and record.in_checker else None


def for_dataset(dataset: str) -> Benchmark | None:
    """The first record whose set is `dataset` (mlperf:SET): its reader and scorer."""
    return next((b for b in RECORDS if b.dataset == dataset), None)


def for_scorer(scorer: str) -> Benchmark | None:
    """The first record scored by `scorer` (an MLPerf row metric): its accuracy.txt form."""
    return next((b for b in RECORDS if b.scorer == scorer), None)


def checker_only_name(name: str) -> str | None:
    """LoadGen's name for a name only the checker uses (mlperf.conf keys nothing by it), else None."""
    record = _BY_ANY_NAME.get(name)
    if record is None or name in (record.name, f"{record.name}-interactive"):
        return None
    return record.name
