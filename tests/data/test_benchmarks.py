"""Every benchmark record against its two sources: LoadGen's compiled-in mlperf.conf, read from
the installed mlperf_loadgen, and the submission checker's tables at the pinned commit.

The checker's values below are data copied from mlcommons/inference at commit
b66003e10e2db4b8c36a448b0545ec90fcc6e9e9 (LoadGen 6.0.17), the entries of the records'
names only, each table under its name in tools/submission/submission_checker/constants.py
(MODEL_CONFIG["v6.1"] unless named otherwise) or configuration/configuration.py; none of the
checker's code. A new benchmark is a record in harness.data.benchmarks plus its entries here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.analysis.compliance import eos_token_id_for
from harness.analysis.llm_accuracy_txt import form_for
from harness.data.benchmarks import RECORDS, Benchmark, checker_only_name, find
from harness.data.audio import AUDIO_READERS
from harness.data.mlperf_llm import READERS
from harness.results.scoring.exact_match import MLPERF_SCORERS
from harness.results.text_accuracy import WER_METRICS

pytestmark = pytest.mark.parallel  # reads tables and LoadGen's conf: no time, no rate

# MODEL_CONFIG["v6.1"]["models"], the records' entries
V61_MODELS = {"resnet", "llama3.1-8b", "llama3.1-8b-edge", "llama2-70b-99.9", "deepseek-r1", "gpt-oss-120b", "whisper"}
# MODEL_CONFIG["v6.1"]["model_mapping"], the records' entries
MODEL_MAPPING = {"resnet50": "resnet", "llama3_1-405b": "llama3.1-405b", "llama3_1-8b": "llama3.1-8b",
                 "llama3_1-8b-edge": "llama3.1-8b-edge"}
# configuration/configuration.py get_llm_models
LLM_MODELS = {"llama2-70b-99", "llama2-70b-99.9", "llama2-70b-interactive-99", "llama2-70b-interactive-99.9",
              "mixtral-8x7b", "llama3.1-405b", "llama3.1-8b", "llama3.1-8b-edge", "deepseek-r1", "gpt-oss-120b"}
DATASET_SIZE = {"resnet": 50000, "llama3.1-8b": 13368, "llama3.1-8b-edge": 5000, "llama2-70b-99.9": 24576,
                "deepseek-r1": 4388, "gpt-oss-120b": 6396, "whisper": 1633}
PERFORMANCE_SAMPLE_COUNT = {"resnet": 1024, "llama3.1-8b": 13368, "llama3.1-8b-edge": 5000,
                            "llama2-70b-99.9": 24576, "deepseek-r1": 4388, "gpt-oss-120b": 6396, "whisper": 1633}
ACCURACY_SAMPLE_COUNT = {"gpt-oss-120b": 4395}
ACCURACY_TARGET = {
    "resnet": ("acc", 76.46 * 0.99),
    "llama3.1-8b": ("ROUGE1", 38.7792 * 0.99, "ROUGE2", 15.9075 * 0.99, "ROUGEL", 24.4957 * 0.99,
                    "ROUGELSUM", 35.793 * 0.99, "GEN_LEN", 8167644 * 0.9),
    "llama3.1-8b-edge": ("ROUGE1", 39.06 * 0.99, "ROUGE2", 16.1147 * 0.99, "ROUGEL", 24.6375 * 0.99,
                         "ROUGELSUM", 36.124 * 0.99, "GEN_LEN", 3051113 * 0.9),
    "llama2-70b-99.9": ("ROUGE1", 44.4312 * 0.999, "ROUGE2", 22.0352 * 0.999, "ROUGEL", 28.6162 * 0.999,
                        "TOKENS_PER_SAMPLE", 294.45 * 0.9),
    "deepseek-r1": ("exact_match", 0.99 * 81.3582, "TOKENS_PER_SAMPLE", 0.9 * 3886.2274),
    "gpt-oss-120b": ("exact_match", 83.13 * 0.99),
    "whisper": ("ACCURACY", (100.0 - 2.0671) * 0.99),
}
ACCURACY_UPPER_LIMIT = {"llama2-70b-99.9": ("TOKENS_PER_SAMPLE", 294.45 * 1.1), "llama3.1-8b": ("GEN_LEN", 8167644 * 1.1),
                        "llama3.1-8b-edge": ("GEN_LEN", 3051113 * 1.1), "deepseek-r1": ("TOKENS_PER_SAMPLE", 1.1 * 3886.2274),
                        "gpt-oss-120b": ("TOKENS_PER_SAMPLE", 1.1 * 9999)}
_LLMS_DC = {"llama3.1-8b", "llama2-70b-99.9", "deepseek-r1", "gpt-oss-120b"}
REQUIRED = {  # required-scenarios-<system type>
    "datacenter": {**{m: ["Offline"] for m in _LLMS_DC}, "whisper": ["Offline"]},
    "edge": {"resnet": ["SingleStream", "MultiStream", "Offline"], "llama3.1-8b-edge": ["SingleStream", "Offline"],
             "whisper": ["Offline"]},
    "datacenter,edge": {"resnet": ["SingleStream", "MultiStream", "Offline", "Server"],
                        "llama3.1-8b-edge": ["SingleStream", "Offline"], **{m: ["Offline"] for m in _LLMS_DC},
                        "whisper": ["Offline"]},
}
OPTIONAL = {  # optional-scenarios-<system type>
    "datacenter": {m: ["Interactive", "Server"] for m in _LLMS_DC},
    "edge": {},
    "datacenter,edge": {m: ["Interactive", "Server"] for m in _LLMS_DC},
}
MODELS_TEST = {  # models_TEST0x, the records' entries
    "TEST01": {"resnet", "whisper"}, "TEST04": {"resnet"},
    "TEST06": {"llama2-70b-99.9", "llama2-70b-interactive-99", "llama2-70b-interactive-99.9", "llama3.1-8b",
               "llama3.1-8b-interactive", "deepseek-r1"},
    "TEST07": {"gpt-oss-120b"}, "TEST09": {"gpt-oss-120b"},
}
# OFFLINE_MIN_SPQ_SINCE_V4 (top level), the records' entries
OFFLINE_MIN_SPQ = {"resnet": 24576, "llama3.1-8b": 13368, "llama3.1-8b-edge": 5000, "llama2-70b-99": 24576,
                   "llama2-70b-99.9": 24576, "llama2-70b-interactive-99": 24576, "llama2-70b-interactive-99.9": 24576,
                   "mixtral-8x7b": 15000, "llama3.1-405b": 8313, "deepseek-r1": 4388, "gpt-oss-120b": 6396,
                   "whisper": 1633}
# LLM_LATENCY_LIMITS (top level), ms (the checker's are ns: x 1000000)
LLM_LATENCY_LIMITS = {
    "llama2-70b-99.9": {"Server": (2000, 200), "Interactive": (450, 40)},
    "mixtral-8x7b": {"Server": (2000, 200)},
    "llama3.1-405b": {"Server": (6000, 175), "Interactive": (4500, 80)},
    "llama3.1-8b": {"Server": (2000, 100), "Interactive": (500, 30)},
    "deepseek-r1": {"Server": (2000, 80), "Interactive": (1500, 15)},
    "gpt-oss-120b": {"Server": (3000, 80), "Interactive": (2000, 15)},
}
# RESULT_FIELD_NEW["v6.1"] and RESULT_FIELD_BENCHMARK_OVERWRITE["v6.1"] (top level)
RESULT_FIELD_NEW = {"Offline": "result_samples_per_second", "SingleStream": "early_stopping_latency_ss",
                    "MultiStream": "early_stopping_latency_ms", "Server": "result_completed_samples_per_sec",
                    "Interactive": "result_completed_samples_per_sec"}
_TOKENS = {"Offline": "result_tokens_per_second", "Server": "result_completed_tokens_per_second"}
RESULT_FIELD_BENCHMARK_OVERWRITE = {
    "gpt-oss-120b": _TOKENS, "llama2-70b-99.9": _TOKENS, "llama3.1-8b": _TOKENS, "deepseek-r1": _TOKENS,
    "llama3.1-8b-edge": {"Offline": "result_tokens_per_second", "SingleStream": "result_90.00_percentile_latency_ns"},
    "mixtral-8x7b": _TOKENS, "llama3.1-405b": _TOKENS, "whisper": {"Offline": "result_tokens_per_second"},
}

#: what the test reads of LoadGen's compiled-in mlperf.conf, for a model name and scenario
_READ_CONF = (
    "import json, sys, tempfile, mlperf_loadgen as lg\n"
    "p = tempfile.NamedTemporaryFile('w', suffix='.conf', delete=False); p.write('\\n'); p.close()\n"
    "ts = lg.TestSettings(); rc = ts.FromConfig(p.name, sys.argv[1], sys.argv[2], 1)\n"
    "print(json.dumps({'rc': rc, 'use_token_latencies': ts.use_token_latencies, 'ttft_ns': ts.ttft_latency,"
    " 'tpot_ns': ts.tpot_latency, 'performance_sample_count': ts.performance_sample_count_override,"
    " 'accuracy_sample_count': ts.accuracy_sample_count_override,"
    " 'equal_issue': ts.sample_concatenate_permutation}))\n"
)


def mlperf_conf(model: str, scenario: str) -> dict[str, int]:
    """The installed LoadGen's mlperf.conf values for `model` (a process each: LoadGen loads
    its conf once per process)."""
    out = subprocess.run([sys.executable, "-c", _READ_CONF, model, scenario], capture_output=True, text=True,
                         timeout=60, check=True)
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert data.pop("rc") == 0, model
    return data


@pytest.mark.parametrize("record", RECORDS, ids=lambda b: b.name)
def test_the_record_is_loadgens_mlperf_conf(record: Benchmark):
    offline = mlperf_conf(record.name, "Offline")
    assert offline["use_token_latencies"] == record.token_latencies
    assert offline["performance_sample_count"] == record.performance_sample_count
    assert offline["accuracy_sample_count"] == (record.accuracy_sample_count or 0)
    assert offline["equal_issue"] == record.equal_issue
    # `<name>-interactive` entries exist exactly when the record says it has Interactive
    interactive = mlperf_conf(f"{record.name}-interactive", "Server")
    assert interactive["use_token_latencies"] == record.interactive
    assert interactive["equal_issue"] == (record.equal_issue and record.interactive)
    assert ("Interactive" in record.token_limits) == record.interactive
    # bounds of its own, or (no Server bounds in the record) the ones every model gets
    server = mlperf_conf(record.name, "Server")
    confs = {"Server": server, "Interactive": interactive}
    for scenario, conf in confs.items():
        limits = record.token_limits.get(scenario)
        if limits is not None:
            assert (conf["ttft_ns"], conf["tpot_ns"]) == (limits.ttft_ms * 1e6, limits.tpot_ms * 1e6), scenario
    if "Server" not in record.token_limits:
        anyone = mlperf_conf("*", "Server")
        assert (server["ttft_ns"], server["tpot_ns"]) == (anyone["ttft_ns"], anyone["tpot_ns"])


@pytest.mark.parametrize("record", RECORDS, ids=lambda b: b.name)
def test_the_record_is_the_checkers_table(record: Benchmark):
    name = record.checker_name
    assert name == MODEL_MAPPING.get(record.name, record.name) or record.name == "llama2-70b"  # v6.1: only -99.9
    assert record.in_checker == (name in V61_MODELS)
    assert record.is_llm == (name in LLM_MODELS)
    assert all(a in OFFLINE_MIN_SPQ or a in LLM_MODELS or any(a in m for m in MODELS_TEST.values())
               for a in record.aliases)  # every alias is a name the checker uses
    assert record.offline_min_samples == OFFLINE_MIN_SPQ[name]
    assert {s: (t.ttft_ms, t.tpot_ms) for s, t in record.token_limits.items()} == LLM_LATENCY_LIMITS.get(name, {})
    if not record.in_checker:  # the size of its set where v6.1 has no dataset-size
        assert record.dataset_size == OFFLINE_MIN_SPQ[name] and not record.required
        return
    assert record.dataset_size == DATASET_SIZE[name]
    assert record.performance_sample_count == PERFORMANCE_SAMPLE_COUNT[name]
    assert record.accuracy_sample_count == ACCURACY_SAMPLE_COUNT.get(name)
    assert tuple(x for pair in record.accuracy_targets for x in pair) == ACCURACY_TARGET[name]
    assert tuple(x for pair in record.accuracy_upper for x in pair) == ACCURACY_UPPER_LIMIT.get(name, ())
    for system_type in REQUIRED:
        assert list(record.required.get(system_type, ())) == REQUIRED[system_type].get(name, []), system_type
        assert list(record.optional.get(system_type, ())) == OPTIONAL[system_type].get(name, []), system_type
    assert record.compliance == tuple(t for t, models in MODELS_TEST.items() if name in models)
    overwrite = RESULT_FIELD_BENCHMARK_OVERWRITE.get(name)
    if overwrite is None:
        expected = {s: f for s, f in RESULT_FIELD_NEW.items() if s != "Interactive"}
    else:  # the checker reads an Interactive folder's log as Server's (its effective_scenario)
        expected = {**overwrite, **({"Interactive": overwrite["Server"]} if record.interactive else {})}
    assert dict(record.metric) == expected


@pytest.mark.parametrize("record", RECORDS, ids=lambda b: b.name)
def test_every_key_the_record_names_exists_and_every_name_finds_it(record: Benchmark):
    if record.dataset is not None:
        assert record.reader in READERS or record.reader in AUDIO_READERS
        assert record.scorer is not None and record.accuracy_form is not None
        assert record.scorer in ("rouge", *WER_METRICS) or record.scorer in MLPERF_SCORERS
        assert form_for(record.name, {}) == record.accuracy_form
    for name in record.names:
        assert find(name) is record, name
    assert checker_only_name(record.name) is None
    assert checker_only_name(record.checker_name) == (None if record.checker_name == record.name else record.name)
    # TEST06's EOS: the tokenizer's where the checker asks for TEST06, found by LoadGen's name
    # as by the checker's (a run's config holds LoadGen's)
    if record.eos_token_id is None:
        assert "TEST06" not in record.compliance
    for name in record.names:
        assert eos_token_id_for(name)[0] == (record.eos_token_id or 2), name


def test_names_are_unique_across_records():
    names = [n for b in RECORDS for n in b.names]
    assert len(names) == len(set(names))
