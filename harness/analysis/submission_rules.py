"""What MLCommons' submission checker enforces, for the version `harness submission` targets.

Read from the checker's source (mlcommons/inference, tools/submission/submission_checker,
v6.1 config), not run here: the checker is not on PyPI, and it stays the judge. Each rule
below names where the checker holds it, so a new checker version can be compared line by
line. What the harness cannot know (a benchmark it has no entry for) it says, rather
than pass silently.

The values LoadGen itself holds (durations, seeds, counts, Server's latency bound) are read
from the mlperf.conf compiled into the installed LoadGen (`official_settings`), not copied.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import HarnessError

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


@dataclass(frozen=True)
class Benchmark:
    """A benchmark's entry in the checker's v6.1 tables."""

    checker_name: str
    dataset_size: int  # an accuracy run covers all of it (accuracy_check.py dataset_check, every division)
    accuracy_key: str  # the name accuracy.txt's line starts with (constants.py ACC_PATTERN)
    accuracy_target: float  # percent, closed division (constants.py accuracy-target)
    edge_scenarios: tuple[str, ...]  # system_type edge: exactly these (loader.check_scenarios)
    all_scenarios: tuple[str, ...]  # system_type datacenter,edge: exactly these
    compliance: tuple[str, ...]  # closed division: these audits, in every scenario


BENCHMARKS = {
    "resnet50": Benchmark("resnet", 50_000, "accuracy", 76.46 * 0.99, ("SingleStream", "MultiStream", "Offline"),
                          ("SingleStream", "MultiStream", "Offline", "Server"), ("TEST01", "TEST04")),
}


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
        " 'server_target_latency_ns': ts.server_target_latency_ns}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, benchmark, scenario], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise HarnessError(f"cannot read LoadGen's mlperf.conf: {out.stderr.strip().splitlines()[-1:]}")
    data = json.loads(out.stdout.strip().splitlines()[-1])
    if data.pop("rc") != 0:
        raise HarnessError("LoadGen rejected an empty user.conf while reading its mlperf.conf")
    return data


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
    """The closed division's scenario set per system_type (loader.check_scenarios)."""
    bench = BENCHMARKS.get(benchmark)
    if division == "open" or bench is None or not system_type:
        return []
    if system_type == "datacenter":
        return [f"{benchmark}: system_type datacenter has no {benchmark} entry in the checker's scenario tables "
                f"(it stops with a traceback): use edge ({', '.join(bench.edge_scenarios)}) or datacenter,edge "
                f"({', '.join(bench.all_scenarios)})"]
    want = bench.edge_scenarios if system_type == "edge" else bench.all_scenarios
    if scenarios != set(want):
        return [f"{benchmark}: system_type {system_type} in the {division} division needs exactly the scenarios "
                f"{', '.join(want)}; these runs have {', '.join(sorted(scenarios))}"]
    return []


def accuracy_line(metric: str | None, value: float | None, correct: int | None, total: int | None,
                  benchmark: str) -> str:
    """accuracy.txt's first line in the form the checker parses for the benchmark (the
    reference script's `accuracy=76.456%, good=38228, total=50000` for resnet50)."""
    if value is None:
        return "no accuracy metric: the dataset has no labels"
    bench = BENCHMARKS.get(benchmark)
    key = bench.accuracy_key if bench else (metric or "accuracy")
    return f"{key}={value * 100:.3f}%, good={correct}, total={total}"


def accuracy_problems(name: str, run_name: str, benchmark: str, division: str, eff: dict[str, Any],
                      value: float | None) -> list[str]:
    """The accuracy run's rules: the whole dataset (every division), and in the closed
    division the benchmark's accuracy target."""
    bench = BENCHMARKS.get(benchmark)
    if bench is None:
        return [f"{name}: the harness has no entry for {benchmark} in the checker's tables (dataset size, accuracy "
                "target): check the folder with the official checker"]
    problems = []
    count = eff.get("accuracy_sample_count")
    if count != bench.dataset_size:
        problems.append(f"{name}: the accuracy run {run_name} covers {count:,} samples; the checker wants the whole "
                        f"{benchmark} dataset, {bench.dataset_size:,} (in every division)")
    if division == "closed" and value is not None and value * 100 < bench.accuracy_target:
        problems.append(f"{name}: accuracy {value * 100:.3f}% is under the closed division's target "
                        f"{bench.accuracy_target:.4f}% (99 % of the reference)")
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
