"""What MLCommons' submission checker enforces, for the version `harness submission` targets.

Read from the checker's source (mlcommons/inference, tools/submission/submission_checker,
v6.1 config), not run here: the checker is not on PyPI, and it stays the judge. Each rule
below names where the checker holds it, so a new checker version can be compared line by
line; each benchmark's own entries are its record (harness.data.benchmarks). What
the harness cannot know (a benchmark it has no entry for) it says, rather than pass silently.

The values LoadGen itself holds (durations, seeds, counts, Server's latency bound) are read
from the mlperf.conf compiled into the installed LoadGen (`official_settings`), not copied.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.data.benchmarks import for_submission
from harness.errors import HarnessError
from harness.results.loadgen_log import INTERACTIVE, loadgen_scenario

#: checker versions whose rules are implemented here; v6.1 is the one whose seeds LoadGen
#: 6.0's compiled-in mlperf.conf carries
CHECKER_VERSIONS = ("v6.1",)

# constants.py SYSTEM_DESC_REQUIRED_FIELDS: every key must be present
SYSTEM_FIELDS = (
    "division", "submitter", "status", "system_name", "number_of_nodes", "host_processor_model_name",
    "host_processors_per_node", "host_processor_core_count", "host_memory_capacity", "host_storage_capacity",
    "host_storage_type", "accelerators_per_node", "accelerator_model_name", "accelerator_memory_capacity",
    "framework", "operating_system", "system_type", "other_software_stack", "host_processor_frequency",
    "host_processor_caches", "host_memory_configuration", "host_processor_interconnect", "host_networking",
    "host_networking_topology", "accelerator_frequency", "accelerator_host_interconnect", "accelerator_interconnect",
    "accelerator_interconnect_topology", "accelerator_memory_configuration", "accelerator_on-chip_memories",
    "cooling", "hw_notes", "sw_notes", "host_network_card_count", "system_type_detail",
)
# constants.py SYSTEM_DESC_MEANINGFUL_RESPONSE_REQUIRED_FIELDS: a truthy value ("", 0 and
# null fail; a CPU-only system writes accelerators_per_node as the string "0")
MEANINGFUL_FIELDS = (
    "division", "submitter", "system_type", "status", "system_name", "number_of_nodes",
    "host_processor_model_name", "host_processors_per_node", "host_processor_core_count", "host_memory_capacity",
    "host_memory_configuration", "host_storage_capacity", "host_storage_type", "host_networking",
    "host_network_card_count", "host_networking_topology", "accelerators_per_node", "accelerator_model_name",
    "accelerator_memory_capacity", "accelerator_host_interconnect", "accelerator_memory_configuration",
    "accelerator_interconnect", "cooling", "framework", "operating_system", "other_software_stack",
)
# fields about accelerators, "N/A" on a system without one
ACCELERATOR_FIELDS = ("accelerator_model_name", "accelerator_memory_capacity", "accelerator_host_interconnect",
                      "accelerator_memory_configuration", "accelerator_interconnect")
STATUSES = ("available", "preview", "rdi")  # constants.py VALID_AVAILABILITIES
SYSTEM_TYPES = ("datacenter", "edge", "datacenter,edge", "edge,datacenter")  # system_check.py
# the results CSV multiplies these as integers (results.py), outside any error handling
INTEGER_FIELDS = ("number_of_nodes", "accelerators_per_node")
ACCURACY_LOG_MAX_BYTES = 10 * 1024  # constants.py MAX_ACCURACY_LOG_SIZE
TRUNCATE_KEEP_CHARS = 4096  # truncate_accuracy_log.py: the first and last 4096 characters


def official_settings(benchmark: str, scenario: str) -> dict[str, int]:
    """Minimum duration and query count, seeds, performance sample count and Server's
    latency bound from the installed LoadGen's mlperf.conf, read in a throwaway process
    (LoadGen accepts one conf load per process)."""
    code = (
        "import json, sys, tempfile, mlperf_loadgen as lg\n"
        "p = tempfile.NamedTemporaryFile('w', suffix='.conf', delete=False); p.write('\\n'); p.close()\n"
        "ts = lg.TestSettings(); rc = ts.FromConfig(p.name, sys.argv[1], sys.argv[2], 1)\n"
        "print(json.dumps({'rc': rc, 'min_duration_ms': ts.min_duration_ms, 'min_query_count': ts.min_query_count,"
        " 'qsl_rng_seed': ts.qsl_rng_seed, 'sample_index_rng_seed': ts.sample_index_rng_seed,"
        " 'schedule_rng_seed': ts.schedule_rng_seed, 'performance_sample_count': ts.performance_sample_count_override,"
        " 'server_target_latency_ns': ts.server_target_latency_ns, 'use_token_latencies': ts.use_token_latencies,"
        " 'ttft_latency_ns': ts.ttft_latency, 'tpot_latency_ns': ts.tpot_latency}))\n"
    )
    # Interactive: LoadGen's Server with mlperf.conf's <model>-interactive entries
    model = f"{benchmark}-interactive" if scenario == INTERACTIVE else benchmark
    out = subprocess.run([sys.executable, "-c", code, model, loadgen_scenario(scenario)], capture_output=True, text=True,
                         timeout=60)
    if out.returncode != 0:
        raise HarnessError(f"cannot read LoadGen's mlperf.conf: {out.stderr.strip().splitlines()[-1:]}")
    data = json.loads(out.stdout.strip().splitlines()[-1])
    if data.pop("rc") != 0:
        raise HarnessError("LoadGen rejected an empty user.conf while reading its mlperf.conf")
    return data


# constants.py SYSTEM_IMP_REQUIRED_FILES: each result's measurements.json must give every one
# a value (checks/measurements_checks.py required_fields_check: "missing meaningful value")
MEASUREMENTS_FIELDS = ("input_data_types", "retraining", "starting_weights_filename", "weight_data_types",
                       "weight_transformations")


def measurements_problems(name: str, data: dict[str, Any]) -> list[str]:
    """What the checker would reject in one result's measurements.json, with the fix."""
    empty = [k for k in MEASUREMENTS_FIELDS if not data.get(k)]
    if not empty:
        return []
    return [f"{name}: measurements.json's {', '.join(empty)} must have a value (the checker rejects empty ones; "
            "a run with no model file, as over HTTP, names none): set it under measurements: in the --system-desc file"]


def system_problems(desc: dict[str, Any]) -> list[str]:
    """What the checker would reject in a system description, one line each, with the fix."""
    problems = []
    missing = [k for k in SYSTEM_FIELDS if k not in desc]
    if missing:
        problems.append(f"system description lacks {', '.join(missing)}")
    empty = [k for k in MEANINGFUL_FIELDS if k in desc and not desc[k]]
    if empty:
        problems.append(f"system description: {', '.join(empty)} must have a value (the checker rejects empty ones)")
    for key in INTEGER_FIELDS:
        value = desc.get(key)
        if value not in (None, "") and not str(value).strip().isdigit():
            problems.append(f"system description: {key} {value!r} must be a whole number (the checker multiplies it)")
    if desc.get("status") and str(desc["status"]).lower() not in STATUSES:
        problems.append(f"system description: status {desc['status']!r}: use one of {', '.join(STATUSES)}")
    if desc.get("system_type") and desc["system_type"] not in SYSTEM_TYPES:
        problems.append(f"system description: system_type {desc['system_type']!r}: use one of {', '.join(SYSTEM_TYPES)}")
    if "is_network" in desc:
        problems.append("system description: drop is_network (any value, even \"false\", makes 13 network fields "
                        "required; the closed and open divisions are not network submissions)")
    return [f"{p}: fix the --system-desc file (`harness system-desc` writes a template)" for p in problems]


def scenario_problems(benchmark: str, scenarios: set[str], system_type: str, division: str) -> list[str]:
    """The closed division's scenario set per system_type (loader.py check_scenarios): every
    required one, nothing outside required and optional, and one of Interactive and Server
    when both are optional (the LLMs in a datacenter)."""
    bench = for_submission(benchmark)
    if division == "open" or bench is None or not system_type:
        return []
    entry = bench.scenarios_for(system_type)
    if entry is None:
        known = " or ".join(f"{t} ({', '.join(bench.required[t])})" for t in bench.required)
        return [f"{benchmark}: system_type {system_type} has no {bench.checker_name} entry in the checker's scenario "
                f"tables (it stops with a traceback): use {known}"]
    required, optional = entry
    either = {"Interactive", "Server"} <= set(optional)
    missing = [s for s in required if s not in scenarios]
    if either and not scenarios & {"Interactive", "Server"}:
        missing.append("one of Interactive or Server")
    unknown = sorted(scenarios - set(required) - set(optional))
    if not missing and not unknown:
        return []
    if not optional:
        want = f"exactly the scenarios {', '.join(required)}"
    else:
        want = f"{', '.join(required)}" + (" and one of Interactive or Server" if either else
                                         f" (optional: {', '.join(optional)})")
    detail = "; ".join(part for part in (f"missing {', '.join(missing)}" if missing else "",
                                         f"{', '.join(unknown)} not allowed" if unknown else "") if part)
    return [f"{benchmark}: system_type {system_type} in the {division} division needs {want}; these runs have "
            f"{', '.join(sorted(scenarios))} ({detail})"]


def accuracy_line(metric: str | None, value: float | None, correct: int | None, total: int | None,
                  benchmark: str) -> str:
    """accuracy.txt's first line in the form the checker parses for the benchmark (the
    reference script's `accuracy=76.456%, good=38228, total=50000` for resnet50)."""
    if value is None:
        return "no accuracy metric: the dataset has no labels"
    bench = for_submission(benchmark)
    key = "accuracy" if bench is None or bench.accuracy_targets[0][0] == "acc" else (metric or "accuracy")
    return f"{key}={value * 100:.3f}%, good={correct}, total={total}"


#: summary.json's figures under the names of the checker's ACC_PATTERN keys
_TEXT_FIGURES = {"ROUGE1": ("rouge", "rouge1"), "ROUGE2": ("rouge", "rouge2"), "ROUGEL": ("rouge", "rougeL"),
                 "ROUGELSUM": ("rouge", "rougeLsum"), "GEN_LEN": ("rouge", "gen_len"),
                 "exact_match": ("exact_match", "exact_match"), "ACCURACY": ("wer", "accuracy")}


def accuracy_figures(summary: dict[str, Any]) -> dict[str, float]:
    """A run's accuracy figures by the checker's ACC_PATTERN keys, in the units its
    accuracy.txt patterns read: percent for acc/ROUGE/exact match, characters for GEN_LEN,
    tokens for TOKENS_PER_SAMPLE (summary.json's `accuracy` for tensors, `text_accuracy` for text)."""
    out: dict[str, float] = {}
    acc = summary.get("accuracy") or {}
    if acc.get("value") is not None:
        out["acc"] = float(acc["value"]) * 100
    text = summary.get("text_accuracy") or {}
    for key, (section, name) in _TEXT_FIGURES.items():
        value = (text.get(section) or {}).get(name)
        if isinstance(value, (int, float)):
            out[key] = float(value)
    tokens = [(text.get(s) or {}).get("tokens_per_sample") for s in ("rouge", "exact_match")]
    tokens = [t for t in tokens if isinstance(t, (int, float))]
    if tokens:
        out["TOKENS_PER_SAMPLE"] = float(tokens[0])
    return out


def accuracy_problems(name: str, run_name: str, benchmark: str, division: str, eff: dict[str, Any],
                      figures: dict[str, float]) -> list[str]:
    """The accuracy run's rules: the whole dataset (every division; gpt-oss-120b's accuracy
    subset), and in the closed division each of the benchmark's targets and upper limits
    (accuracy_check.py accuracy_result_check, dataset_check)."""
    bench = for_submission(benchmark)
    if bench is None:
        return [f"{name}: the harness has no entry for {benchmark} in the checker's tables (dataset size, accuracy "
                "target): check the folder with the official checker"]
    problems = []
    count = eff.get("accuracy_sample_count")
    if count != bench.accuracy_count:
        whole = "the whole" if bench.accuracy_count == bench.dataset_size else "its accuracy set of"
        problems.append(f"{name}: the accuracy run {run_name} covers {count or 0:,} samples; the checker wants {whole} "
                        f"{benchmark} dataset, {bench.accuracy_count:,} (in every division)")
    if not figures:
        problems.append(f"{name}: {run_name} has no accuracy figure (the dataset needs labels or references)")
    if division != "closed":
        return problems
    for key, target in bench.accuracy_targets:
        value = figures.get(key)
        if value is None:
            if figures:
                problems.append(f"{name}: {run_name} has no {key} figure; the closed division's target is {target:,.4f}")
        elif value < target:
            what = "%" if key in ("acc", "exact_match") or key.startswith("ROUGE") else ""
            problems.append(f"{name}: {key} {value:,.4f}{what} is under the closed division's target {target:,.4f}{what}"
                            + (" (99 % of the reference)" if key == "acc" else ""))
    for key, limit in bench.accuracy_upper:
        value = figures.get(key)
        if value is not None and value > limit:
            problems.append(f"{name}: {key} {value:,.4f} is over the closed division's upper limit {limit:,.4f} "
                            "(generated length outside the reference's window)")
    return problems


def truncate_accuracy_log(src: Path, dst: Path) -> str:
    """Write the checker's truncated form of an accuracy log; returns the sha256 of the
    whole original, which accuracy.txt's `hash=` line carries (as MLCommons'
    truncate_accuracy_log.py does: the first and last 4,096 characters, joined by
    "\\n\\n...\\n\\n", when the file is longer)."""
    raw = src.read_bytes()  # LoadGen's accuracy log is ASCII JSON: bytes and characters agree
    digest = hashlib.sha256(raw).hexdigest()
    if len(raw) >= TRUNCATE_KEEP_CHARS:
        raw = raw[:TRUNCATE_KEEP_CHARS] + b"\n\n...\n\n" + raw[-TRUNCATE_KEEP_CHARS:]
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(raw)
    return digest
