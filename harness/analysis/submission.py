"""`harness submission`: results folders -> the layout MLCommons' submission checker reads.

    <out>/<division>/<org>/
        systems/<system>.json
        src/README.md
        results/<system>/<benchmark>/<scenario>/       the checker's names (a record's checker_name; Interactive)
            performance/run_1/mlperf_log_summary.txt, mlperf_log_detail.txt
            accuracy/mlperf_log_summary.txt, mlperf_log_detail.txt, mlperf_log_accuracy.json, accuracy.txt
            measurements.json  user.conf  README.md  harness_run_performance.yaml  harness_run_accuracy.yaml
            TEST01/, TEST04/, TEST06/, ...   (closed division, from `harness audit` folders:
                                             harness.analysis.compliance)

The checker's rules (harness.analysis.submission_rules) are checked first and every broken
one is listed, one line for each complaint the checker makes; apart from them, what the
checker lets through though it makes a false submission (harness.analysis.submission_loopholes:
`Refusals.loopholes`). Without `force` nothing is written (`SubmissionRefused`, exit 1): a folder
that looks like a submission but is not one is worse than none. With `force` the folder is
written and marked: NOT_FOR_SUBMISSION.txt at the top, the rules in each README and in the
system JSON. MLCommons' submission checker stays the judge.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis import llm_accuracy_txt
from harness.analysis.check import check_run
from harness.analysis.compliance import JUDGED_HERE, Audit, compliance_files, is_audit_folder, load_audit
from harness.analysis.run_data import RunData, load_run
from harness.analysis.submission_loopholes import (
    accuracy_subset_problems,
    equal_issue_problems,
    min_query_count_problems,
    validity_problems,
)
from harness.analysis.submission_rules import (
    ACCELERATOR_FIELDS,
    CHECKER_VERSIONS,
    MEANINGFUL_FIELDS,
    measurements_problems,
    SYSTEM_FIELDS,
    SYSTEM_TYPES,
    accuracy_figures,
    accuracy_line,
    accuracy_problems,
    official_settings,
    scenario_problems,
    system_problems,
    truncate_accuracy_log,
)
from harness.config.run_config import read_yaml
from harness.data.benchmarks import RECORDS, for_submission
from harness.errors import ConfigError, HarnessError, OutputError, SubmissionRefused
from harness.results import folder
from harness.results.text_accuracy import score_folder
from harness.results.loadgen_log import INTERACTIVE, loadgen_scenario, read_detail

__all__ = ["official_settings", "write_submission", "broken_rules", "Refusals", "system_description", "system_template"]

DIVISIONS = ("closed", "open", "network")
SEEDS = ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed")
# RunConfig key -> (user.conf key, multiplier to the conf's unit)
_USER_CONF_KEYS = {
    "target_qps": ("target_qps", 1), "offline_expected_qps": ("target_qps", 1),
    "target_latency_ms": ("target_latency", 1), "single_stream_expected_latency_ms": ("target_latency", 1),
    "multi_stream_expected_latency_ms": ("target_latency", 1), "min_duration_s": ("min_duration", 1000),
    "max_duration_s": ("max_duration", 1000), "min_query_count": ("min_query_count", 1),
    "max_query_count": ("max_query_count", 1), "performance_sample_count": ("performance_sample_count_override", 1),
}


def _key(r: RunData) -> tuple[str, str]:
    return r.config["benchmark"], r.config["scenario"]


def _folder_name(benchmark: str) -> str:
    """results/<system>/<this>/: the checker's name (the record's checker_name), not LoadGen's."""
    bench = for_submission(benchmark)
    return bench.checker_name if bench else ("unnamed" if benchmark == "*" else benchmark)


@dataclass
class Refusals:
    """What `harness submission` refuses, in two lists: `checker`, one line for each complaint
    MLCommons' checker makes (one to one with its log); `loopholes`, what the checker lets
    through though it makes a false submission, which the harness refuses all the same."""

    checker: list[str] = field(default_factory=list)
    loopholes: list[str] = field(default_factory=list)

    def __iadd__(self, other: Refusals) -> Refusals:
        self.checker += other.checker
        self.loopholes += other.loopholes
        return self

    def __bool__(self) -> bool:
        return bool(self.checker or self.loopholes)


@dataclass
class SubmissionResult:
    root: Path
    broken: list[str]  # the checker's complaints (Refusals.checker)
    written: bool
    files: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # arguments that are not runs, and why
    loopholes: list[str] = field(default_factory=list)  # refused though the checker lets them through


def _runs_only(paths: list[Path]) -> tuple[list[Path], list[str]]:
    """The run and `harness audit` folders among `paths` (as `results/*` expands), and
    what was skipped, why. A file (a README) or a sweep/repeat folder is not a run: it is
    named, not an error."""
    runs, skipped = [], []
    for p in paths:
        if not p.is_dir():
            skipped.append(f"{p.name}: not a folder" if p.exists() else f"{p}: does not exist")
        elif (p / folder.RUN_CONFIG).is_file() or is_audit_folder(p):
            runs.append(p)
        elif (p / folder.SWEEP).is_file() or (p / folder.AGGREGATE).is_file():
            skipped.append(f"{p.name}: a sweep or repeat folder; pass the runs inside it")
        else:
            skipped.append(f"{p.name}: not a results folder (no {folder.RUN_CONFIG})")
    return runs, skipped


def _rule_group(rule: str) -> tuple[str, str]:
    """Rules grouped by the run or benchmark/scenario they name, so a list reads by subject."""
    head, _, rest = rule.partition(": ")
    return head, rest


def _load(run_dir: Path) -> RunData:
    missing = [n for n in (folder.SUMMARY, folder.RUN_CONFIG, folder.SYSTEM, folder.MANIFEST) if not (run_dir / n).is_file()]
    if missing:
        raise OutputError(f"{run_dir} lacks {', '.join(missing)}: run `harness check {run_dir}`")
    return load_run(run_dir)


def broken_rules(runs: list[RunData], division: str = "open", audits: list[Audit] = (),
                 system_type: str = "") -> Refusals:
    """Every rule of the checker the set of runs breaks, and every loophole they use, one
    sentence each, naming the run."""
    refused = Refusals()
    broken, own = refused.checker, refused.loopholes
    groups: dict[tuple[str, str], dict[str, list[RunData]]] = {}
    for r in runs:
        mode = r.config["mode"]
        if mode not in ("PerformanceOnly", "AccuracyOnly"):
            own.append(f"{r.run_dir.name}: mode {mode}; a submission needs a PerformanceOnly and an AccuracyOnly run")
            continue
        groups.setdefault(_key(r), {"PerformanceOnly": [], "AccuracyOnly": []})[mode].append(r)
        if (r.run_dir / folder.AUDIT_CONFIG).is_file():
            own.append(f"{r.run_dir.name}: a compliance audit run (audit.config overrode LoadGen's settings); "
                          "submit the normal run, and pass the `harness audit` folder for the compliance tests")
        verdict = check_run(r.run_dir, rebuild_dataset=False)
        for f in verdict.problems():
            if f.kind in ("tampered", "incomplete") or (f.kind == "invalid" and f.what != "validity"):
                own.append(f"{r.run_dir.name}: {f.kind}: {f.what}: {f.detail}")
    systems = {json.dumps({k: v for k, v in r.system.items() if k != "harness_git_commit"}, sort_keys=True)
               for r in [*runs, *(a.run for a in audits)]}
    if len(systems) > 1:
        own.append("the runs come from different systems (system.json differs): one submission folder per system")
    for (benchmark, scenario), modes in sorted(groups.items()):
        name = f"{benchmark}/{scenario}"
        if benchmark == "*":
            broken.append(f"{name}: no benchmark name; run with --benchmark (e.g. {RECORDS[0].name}) so LoadGen "
                          "applies its rules")
            continue
        for mode, found in modes.items():
            if not found:
                broken.append(f"{name}: no {mode} run; a submission needs both a PerformanceOnly and an AccuracyOnly run")
            elif len(found) > 1:
                broken.append(f"{name}: {len(found)} {mode} runs ({', '.join(r.run_dir.name for r in found)}); pass one")
        own += _same_system_under_test(name, modes)
        official = official_settings(benchmark, scenario)
        for r in modes["PerformanceOnly"]:
            refused += _performance_rules(name, r, official, division)
            own += equal_issue_problems(name, r) + min_query_count_problems(name, r, official)
            broken += _loadgen_error_rules(name, r)
        for r in modes["AccuracyOnly"]:
            eff = r.summary["loadgen"].get("effective_settings") or {}
            broken += accuracy_problems(name, r.run_dir.name, benchmark, division, eff, accuracy_figures(r.summary))
            own += accuracy_subset_problems(name, r, eff)
            broken += _loadgen_error_rules(name, r)
        refused += _compliance_rules(name, benchmark, scenario, modes, audits, division, official)
    by_benchmark: dict[str, set[str]] = {}
    for benchmark, scenario in groups:
        by_benchmark.setdefault(benchmark, set()).add(scenario)
    for benchmark, scenarios in sorted(by_benchmark.items()):
        broken += scenario_problems(benchmark, scenarios, system_type, division)
    return refused


def _compliance_rules(name: str, benchmark: str, scenario: str, modes: dict[str, list[RunData]], audits: list[Audit],
                      division: str, official: dict[str, int]) -> Refusals:
    """Closed division: the benchmark's audits, each a passing one of this result, each
    audit run itself meeting the performance rules (the checker runs them on its log)."""
    mine = [a for a in audits if a.key == (benchmark, scenario)]
    if division != "closed":
        return Refusals([f"{name}: {a.folder.name}: compliance audits are for the closed division; drop it" for a in mine])
    bench = for_submission(benchmark)
    wanted = bench.compliance if bench else ()
    refused = Refusals()
    broken = refused.checker
    perf, acc = modes["PerformanceOnly"], modes["AccuracyOnly"]
    for test in wanted:
        found = [a for a in mine if a.test == test]
        if not found:
            broken.append(f"{name}: no {test} audit; the closed division needs {', '.join(wanted)} in every scenario "
                          f"(`harness audit {test} ...` with this run's config, then pass its folder)")
            continue
        if len(found) > 1:
            broken.append(f"{name}: {len(found)} {test} audits ({', '.join(a.folder.name for a in found)}); pass one")
            continue
        audit = found[0]
        if test in JUDGED_HERE:  # the checker runs its performance checks on these audits' logs only
            found_rules = _performance_rules(name, audit.run, official, division, audit=True)
            refused += Refusals(*([rule.replace(f"{name}: ", f"{name}: {test}: ", 1) for rule in rules]
                                  for rules in (found_rules.checker, found_rules.loopholes)))
        if len(perf) == 1:
            passed, files = compliance_files(audit, perf[0], acc[0] if len(acc) == 1 else None)
            if not passed:
                why = next(line for text in files.values() if isinstance(text, str)
                           for line in text.splitlines() if line.startswith(("TEST FAIL", "TEST06 verification failed")))
                broken.append(f"{name}: {test} fails against the submitted runs: {why}")
    return refused


#: summary.json's `backend` keys that the run measured, not set: the server's own answer, and
#: the HTTP client's retry counters (a resent request in one run is not another system)
_MEASURED_BY_THE_RUN = ("server", "retries_total", "requests_retried", "resent_on_closed_connection")


def _sut_identity(r: RunData) -> dict[str, Any]:
    """What must be the same in the performance and the accuracy run of one result: the
    engine, its settings, the model file and the dataset (MLPerf: the same SUT)."""
    backend = {k: v for k, v in (r.summary.get("backend") or {}).items() if k not in _MEASURED_BY_THE_RUN}
    return {"backend": r.config.get("backend"), "backend settings": backend,
            "backend_options": r.config.get("backend_options") or {},
            "model sha256": (r.manifest.get("sha256") or {}).get("model"), "dataset": r.config.get("dataset")}


def _same_system_under_test(name: str, modes: dict[str, list[RunData]]) -> list[str]:
    perf, acc = modes["PerformanceOnly"], modes["AccuracyOnly"]
    if len(perf) != 1 or len(acc) != 1:
        return []
    a, b = _sut_identity(perf[0]), _sut_identity(acc[0])
    differ = [(k, a[k], b[k]) for k in a if a[k] != b[k]]
    if not differ:
        return []
    # a dict of settings is shown by the keys that differ (a server's url, not its first 40 characters)
    differ = [part for k, x, y in differ for part in (
        [(f"{k} {sub}", x.get(sub), y.get(sub)) for sub in sorted(set(x) | set(y)) if x.get(sub) != y.get(sub)]
        if isinstance(x, dict) and isinstance(y, dict) else [(k, x, y)])]
    shown = "; ".join(f"{k} {_brief(x)} vs {_brief(y)}" for k, x, y in differ[:3])
    return [f"{name}: the performance run {perf[0].run_dir.name} and the accuracy run {acc[0].run_dir.name} "
            f"are not of the same system under test ({shown}): run both with one config"]


def _brief(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:39] + "…"


def _performance_rules(name: str, r: RunData, official: dict[str, int], division: str,
                       audit: bool = False) -> Refusals:
    """The checker's performance checks (performance_check.py) on one run's settings, plus
    VALID (which its compliance scripts and its previous version require; the checker
    itself reads only early stopping: harness.analysis.submission_loopholes)."""
    refused = Refusals(*validity_problems(name, r))
    broken = refused.checker
    eff = r.summary["loadgen"].get("effective_settings") or {}
    scenario = r.config["scenario"]
    if (eff.get("min_duration_ms") or 0) < official["min_duration_ms"]:
        broken.append(f"{name}: min duration {eff.get('min_duration_ms', 0) / 1e3:g} s is under the official "
                      f"{official['min_duration_ms'] / 1e3:g} s (set min_duration_s or drop the override)")
    # SingleStream, MultiStream and Server are bounded by early stopping, not a query count;
    # Offline is one query, and the closed division's count is of the samples in it
    # (the record's offline_min_samples: its effective min_query_count may be 1)
    if scenario == "Offline" and division == "closed":
        samples = int(eff.get("samples_per_query") or 0)
        # the checker's count (OFFLINE_MIN_SPQ_SINCE_V4), also where mlperf.conf has none
        record = for_submission(r.config["benchmark"])
        wanted = max(official["min_query_count"] or 0, record.offline_min_samples if record else 0)
        if samples < wanted:
            broken.append(f"{name}: {samples:,} samples in the Offline query, under the official "
                          f"{wanted:,} (raise offline_expected_qps or min_duration_s)")
    if official.get("performance_sample_count") and (eff.get("performance_sample_count") or 0) < official["performance_sample_count"]:
        broken.append(f"{name}: performance sample count {eff.get('performance_sample_count')} is under the official "
                      f"{official['performance_sample_count']} (drop the performance_sample_count override, or use a "
                      "dataset of at least that many samples)")
    # an LLM's Server is bounded by TTFT/TPOT (mlperf.conf sets its target_latency to 0): _token_rules
    if (scenario == "Server" and official["server_target_latency_ns"]
            and (eff.get("target_latency_ns") or 0) > official["server_target_latency_ns"]):
        broken.append(f"{name}: target latency {eff['target_latency_ns'] / 1e6:g} ms is over the benchmark's "
                      f"{official['server_target_latency_ns'] / 1e6:g} ms")
    for seed in SEEDS:
        if eff.get(seed) != official[seed]:
            broken.append(f"{name}: {seed} {eff.get(seed)} is not the official {official[seed]} "
                          f"(name the benchmark, e.g. --benchmark {RECORDS[0].name}, and set no seed: LoadGen then applies its "
                          "compiled-in mlperf.conf)")
    if not audit:
        for key in ("performance_issue_same", "performance_issue_unique"):
            if eff.get(key):
                refused.loopholes.append(f"{name}: {key} is on: that is an audit setting, not a submission run")
    refused += _token_rules(name, r)
    return refused


def _token_rules(name: str, r: RunData) -> Refusals:
    """An LLM's performance run (performance_check.py llm_check, get_performance_metric_check):
    token latencies requested, the scenario's result metric in the log, and in Server and
    Interactive both p99s strictly under the scenario's bounds. The checker reads the bounds
    by the log's effective_scenario, Server even in an Interactive folder; the harness holds
    an Interactive result to Interactive's own, which the rules mean: a p99 under Server's
    bound but not Interactive's is a loophole the checker lets through."""
    bench = for_submission(r.config["benchmark"])
    refused = Refusals()
    if bench is None or not bench.is_llm:
        return refused
    scenario = r.config["scenario"]
    values, _, _ = read_detail(r.run_dir)
    broken = refused.checker
    if not values.get("requested_use_token_latencies"):
        broken.append(f"{name}: {r.run_dir.name} ran without use_token_latencies; the checker requires it for "
                      "an LLM benchmark (drop the use_token_latencies=false override)")
        return refused
    metric = bench.metric.get(scenario)
    if metric and values.get(metric) is None:
        broken.append(f"{name}: {r.run_dir.name}'s LoadGen log has no {metric}, the {scenario} result the checker reads")
    limits = bench.token_limits.get(scenario)
    if limits is None:
        return refused
    # the checker's bounds: Server's, by the log's effective_scenario; one complaint for both p99s
    judged = bench.token_limits.get(loadgen_scenario(scenario), limits)
    over: list[str] = []
    checker_fails = False
    for what, key, bound, checked in (
            ("TTFT", "result_first_token_99.00_percentile_latency_ns", limits.ttft_ms, judged.ttft_ms),
            ("TPOT", "result_time_per_output_token_99.00_percentile_ns", limits.tpot_ms, judged.tpot_ms)):
        value = values.get(key)
        if value is None:
            broken.append(f"{name}: {r.run_dir.name}'s LoadGen log has no {what} p99 ({key})")
        elif value / 1e6 >= bound:
            over.append(f"{what} p99 {value / 1e6:,.1f} ms is not under {scenario}'s {bound:g} ms bound")
            checker_fails = checker_fails or value / 1e6 >= checked
    if over:
        line = f"{name}: {' and '.join(over)} ({bench.checker_name})"
        if checker_fails:
            broken.append(line)
        else:
            refused.loopholes.append(line + f"; the checker holds it to Server's {judged.ttft_ms:g}/{judged.tpot_ms:g} ms")
    return refused


def _loadgen_error_rules(name: str, r: RunData) -> list[str]:
    """LoadGen's logged errors fail the checker (performance_check.py and accuracy_check.py
    loadgen_errors_check): for an LLM, a sample completed before its first token outside
    Offline, or with fewer than 2 tokens."""
    errors = r.summary["loadgen"].get("errors") or []
    if not errors:
        return []
    shown = "; ".join(sorted({e.split(": ", 1)[-1] for e in errors})[:3])
    return [f"{name}: LoadGen logged {len(errors)} error(s) in {r.run_dir.name} ({shown}); the checker rejects a log "
            "with errors"]


def _measured(system: dict[str, Any], runs: list[RunData]) -> dict[str, Any]:
    """The system description fields the runs' system.json and summaries answer."""
    accel = system.get("accelerators") or []
    engines = sorted({f"{(r.summary.get('backend') or {}).get('engine', r.config['backend'])} "
                      f"{(r.summary.get('backend') or {}).get('engine_version', '')}".strip() for r in runs})
    fields: dict[str, Any] = {
        "number_of_nodes": 1,
        "host_processor_model_name": system.get("cpu_model"),
        "host_processor_core_count": system.get("cpu_cores"),
        "host_memory_capacity": f"{round((system.get('memory_bytes') or 0) / 2**30)} GB" if system.get("memory_bytes") else None,
        # a string: the checker reads a numeric 0 as "no answer"
        "accelerators_per_node": str(len(accel)),
        "framework": ", ".join(engines) if engines else None,
        "operating_system": system.get("os"),
        "other_software_stack": ", ".join(f"{k} {v}" for k, v in sorted((system.get("packages") or {}).items()))
        + f", python {system.get('python')}",
    }
    if accel:
        fields["accelerator_model_name"] = accel[0].split(",")[0].strip()
        if "," in accel[0]:
            fields["accelerator_memory_capacity"] = accel[0].split(",")[1].strip()
    else:
        fields.update({k: "N/A" for k in ACCELERATOR_FIELDS})
    return {k: v for k, v in fields.items() if v is not None}


def system_description(runs: list[RunData], user: dict[str, Any], division: str,
                       org: str) -> tuple[dict[str, Any], list[str]]:
    """systems/<system>.json: every field the checker requires, from the runs where they
    answer it, else the user's file (whose values win); the rest empty. With it, what the
    checker would reject in it, one line each: listed with the runs' broken rules."""
    desc: dict[str, Any] = {k: "" for k in SYSTEM_FIELDS}
    desc.update(_measured(runs[0].system, runs))
    desc.update({k: v for k, v in user.items() if k not in ("measurements", "system_id")})
    desc["division"], desc["submitter"] = division, org
    for key in ("accelerators_per_node", "number_of_nodes", "host_network_card_count"):
        if isinstance(desc.get(key), int):
            desc[key] = str(desc[key])  # "0" accelerators: a string, or the checker calls it empty
    return desc, system_problems(desc)


_TEMPLATE_HINTS = {
    "system_name": "a name for this system, e.g. 2-core EPYC VM",
    "system_type": "edge (SingleStream, MultiStream, Offline) or datacenter,edge (all four)",
    "status": "available, preview or rdi",
    "host_processors_per_node": "sockets, e.g. 1",
    "host_memory_configuration": "e.g. 8 x 32 GB DDR5-4800",
    "host_storage_capacity": "e.g. 1 TB",
    "host_storage_type": "e.g. NVMe SSD",
    "host_networking": "e.g. Ethernet, 10 Gbit/s",
    "host_network_card_count": "e.g. 1",
    "host_networking_topology": "e.g. N/A (one node)",
    "cooling": "e.g. air",
}


def system_template(runs: list[RunData]) -> str:
    """A YAML template of the system description: what the runs measured, filled and
    commented as measured; every other field the checker requires, empty, with what goes
    there. `harness submission --system-desc` takes it once filled."""
    measured = _measured(runs[0].system, runs) if runs else {}
    lines = ["# System description for `harness submission --system-desc` (MLCommons checker "
             f"{CHECKER_VERSIONS[-1]}).",
             "# Fields marked 'required' must have a value; 'measured' ones came from the runs' system.json",
             "# (edit them if they are wrong). division and submitter come from --division and --org.", ""]
    for key in SYSTEM_FIELDS:
        if key in ("division", "submitter"):
            continue
        need = "required" if key in MEANINGFUL_FIELDS else "optional"
        if key in measured:
            lines.append(f"{key}: {json.dumps(measured[key])}  # measured")
        else:
            hint = _TEMPLATE_HINTS.get(key, "")
            lines.append(f"{key}: \"\"  # {need}" + (f": {hint}" if hint else ""))
    lines += ["", "# measurements.json, per result: the weights and their types", "measurements:",
              '  starting_weights_filename: ""  # required: the model file as published', '  retraining: "No"',
              '  weight_transformations: "No"']
    return "\n".join(lines) + "\n"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "system"


def _user_conf(r: RunData) -> str:
    path = r.config.get("user_conf")
    if path and Path(path).is_file():
        return Path(path).read_text()
    lines = [f"# user.conf equivalent of {r.run_dir.name}/run.yaml, written by harness submission"]
    benchmark, scenario = _key(r)
    if scenario == INTERACTIVE:  # LoadGen's keys for it: <model>-interactive.Server
        benchmark, scenario = f"{benchmark}-interactive", loadgen_scenario(scenario)
    for key, (conf_key, scale) in _USER_CONF_KEYS.items():
        value = r.config.get(key)
        if value is not None:
            value = value * scale
            lines.append(f"{benchmark}.{scenario}.{conf_key} = {int(value) if float(value).is_integer() else value}")
    return "\n".join(lines) + "\n"


def _measurements(r: RunData, user: dict[str, Any]) -> dict[str, Any]:
    backend = r.summary.get("backend") or {}
    precision = backend.get("precision") or "fp32"
    model = r.config.get("model")
    data = {
        "starting_weights_filename": Path(model).name if model else "",  # none over HTTP: the user names it
        "retraining": "No",
        "input_data_types": precision,
        "weight_data_types": precision,
        "weight_transformations": "No",
        **(user.get("measurements") or {}),
    }
    data["harness"] = {
        "model_sha256": r.manifest.get("sha256", {}).get("model"),
        "dataset": r.config.get("dataset"),
        "dataset_sha256": (r.summary.get("dataset") or {}).get("sha256"),
        "backend": backend,
    }
    return data


def _accuracy_txt(r: RunData, digest: str) -> str:
    llm = _llm_section(r)
    if llm is not None:  # an LLM accuracy run: its evaluation script's printed form
        return llm_accuracy_txt.accuracy_txt(llm, r.config["benchmark"], digest)
    acc = r.summary.get("accuracy") or {}
    line = accuracy_line(acc.get("metric"), acc.get("value"), acc.get("correct"), acc.get("scored_samples"),
                         r.config["benchmark"])
    return f"{line}\nhash={digest}\n"


def _llm_section(r: RunData) -> dict[str, Any] | None:
    """summary.json's text_accuracy; recomputed from the folder when the summary holds an
    error (a tokenizer since restored); None for a run without references."""
    section = r.summary.get("text_accuracy")
    if llm_accuracy_txt.is_llm_section(section):
        return section
    if section is None and not (r.run_dir / folder.REFERENCES).is_file():
        return None
    try:
        return score_folder(r.run_dir)
    except HarnessError as e:  # written as the reason: the checker then finds no figure and says so
        return {"error": str(e)}


def write_submission(run_dirs: list[Path], org: str, division: str, system_desc: Path, out: Path,
                     force: bool = False, version: str = CHECKER_VERSIONS[-1]) -> SubmissionResult:
    if division not in DIVISIONS:
        raise ConfigError(f"--division {division!r}: use one of {', '.join(DIVISIONS)}")
    if version not in CHECKER_VERSIONS:
        raise ConfigError(f"--version {version}: the harness knows the checker's rules of {', '.join(CHECKER_VERSIONS)}")
    run_dirs, skipped = _runs_only(run_dirs)
    if not run_dirs:
        raise ConfigError("submission needs at least one results folder" + (f" ({'; '.join(skipped)})" if skipped else ""))
    user, _ = read_yaml(system_desc)
    audits = [load_audit(d) for d in run_dirs if is_audit_folder(d)]
    runs = [_load(d) for d in run_dirs if not is_audit_folder(d)]
    if not runs:
        raise ConfigError("submission needs the performance and accuracy runs, not only audit folders")
    desc, problems = system_description(runs, user, division, org)
    refused = Refusals(problems)
    system_type = str(desc.get("system_type") or "")
    refused += broken_rules(runs, division, audits, system_type if system_type in SYSTEM_TYPES else "")
    for r in runs:  # each result's measurements.json, as written below from its performance run
        if r.config["mode"] == "PerformanceOnly":
            benchmark, scenario = _key(r)
            refused.checker += measurements_problems(f"{benchmark}/{scenario}", _measurements(r, user))
    broken, loopholes = sorted(refused.checker, key=_rule_group), sorted(refused.loopholes, key=_rule_group)
    root = out / division / _slug(org)
    if refused and not force:
        raise SubmissionRefused(_refusal_message(broken, loopholes, version), broken, loopholes)
    if root.exists() and any(root.iterdir()):
        raise OutputError(f"{root} already holds files: pass an empty -o folder")
    system = _slug(str(user.get("system_id") or desc["system_name"]))
    if broken:
        desc["harness_rules_broken"] = broken
    if loopholes:
        desc["harness_loopholes_refused"] = loopholes
    files: list[Path] = []

    def put(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        files.append(path)

    def copy(src: Path, dst: Path) -> None:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        files.append(dst)

    put(root / "systems" / f"{system}.json", json.dumps(desc, indent=2) + "\n")
    mark = "" if not refused else (
        "NOT A VALID SUBMISSION (written with --force)." + "".join(
            f" {head}:\n" + "".join(f"- {b}\n" for b in lines) for head, lines in
            (("Rules broken", broken), ("Loopholes the checker lets through", loopholes)) if lines) + "\n")
    results: dict[tuple[str, str], dict[str, RunData]] = {}
    for r in runs:
        benchmark, scenario = _key(r)
        results.setdefault((benchmark, scenario), {})[r.config["mode"]] = r
        base = root / "results" / system / _folder_name(benchmark) / scenario
        if r.config["mode"] == "PerformanceOnly":
            for name in (folder.LOADGEN_SUMMARY, folder.LOADGEN_DETAIL):
                copy(r.run_dir / name, base / "performance" / "run_1" / name)
            copy(r.run_dir / folder.RUN_CONFIG, base / "harness_run_performance.yaml")
            put(base / "measurements.json", json.dumps(_measurements(r, user), indent=2) + "\n")
            put(base / "user.conf", _user_conf(r))
            put(base / "README.md", _scenario_readme(r, mark))
        elif r.config["mode"] == "AccuracyOnly":
            for name in (folder.LOADGEN_SUMMARY, folder.LOADGEN_DETAIL):
                copy(r.run_dir / name, base / "accuracy" / name)
            # the checker takes a truncated log (<= 10 KiB); accuracy.txt keeps the whole one's hash
            digest = truncate_accuracy_log(r.run_dir / folder.LOADGEN_ACCURACY, base / "accuracy" / folder.LOADGEN_ACCURACY)
            files.append(base / "accuracy" / folder.LOADGEN_ACCURACY)
            put(base / "accuracy" / "accuracy.txt", _accuracy_txt(r, digest))
            copy(r.run_dir / folder.RUN_CONFIG, base / "harness_run_accuracy.yaml")
    for audit in audits:
        pair = results.get(audit.key) or {}
        if "PerformanceOnly" not in pair:
            continue
        benchmark, scenario = audit.key
        base = root / "results" / system / _folder_name(benchmark) / scenario
        _, compliance = compliance_files(audit, pair["PerformanceOnly"], pair.get("AccuracyOnly"))
        for rel, content in compliance.items():
            if isinstance(content, Path):
                copy(content, base / rel)
            else:
                put(base / rel, content)
    put(root / "src" / "README.md", _src_readme(org, division, runs, audits, mark))
    if refused:
        put(root / "NOT_FOR_SUBMISSION.txt", mark)
    return SubmissionResult(root, broken, True, files, skipped, loopholes)


def _refusal_message(broken: list[str], loopholes: list[str], version: str) -> str:
    """The checker's complaints, then the loopholes it lets through, each list under its head."""
    counts = [f"{len(broken)} rule(s) of the submission checker {version} broken"] if broken else []
    if loopholes:
        counts.append(f"{len(loopholes)} loophole(s) the checker lets through refused")
    text = f"{' and '.join(counts)}, nothing written (--force writes a marked folder):\n"
    text += "".join(f"  - {rule}\n" for rule in broken)
    if loopholes:
        text += "refused though the checker lets them through (each makes a false submission):\n"
        text += "".join(f"  - {rule}\n" for rule in loopholes)
    return text.rstrip("\n")


def _src_readme(org: str, division: str, runs: list[RunData], audits: list[Audit], mark: str) -> str:
    """src/: the checker wants the folder; the honest content is what made the runs."""
    commits = sorted({str(r.system.get("harness_git_commit")) for r in runs})
    return (f"# {org}: {division} division\n\n{mark}"
            "The results were measured with loadgen-harness (harness git commit "
            f"{', '.join(commits)}), driving MLCommons LoadGen; each result folder holds the resolved "
            "config it ran with (harness_run_performance.yaml, harness_run_accuracy.yaml), which "
            "`harness run -c FILE` re-runs.\n\nWritten by `harness submission` from:\n"
            + "".join(f"- {r.run_dir}\n" for r in runs) + "".join(f"- {a.folder} ({a.test})\n" for a in audits)
            + "\nValidate with MLCommons' submission checker before submitting.\n")


def result_metric(r: RunData) -> tuple[str, float | None] | None:
    """The figure the checker reports for a performance run: RESULT_FIELD_NEW, or the
    benchmark's override (tokens/s for an LLM; Interactive reads Server's, as the log's
    effective_scenario does), from LoadGen's log."""
    bench = for_submission(r.config["benchmark"])
    key = bench.metric.get(r.config["scenario"]) if bench else None
    if key is None:
        return None
    value = read_detail(r.run_dir)[0].get(key)
    return key, float(value) if isinstance(value, (int, float)) else None


def _scenario_readme(r: RunData, mark: str) -> str:
    benchmark, scenario = _key(r)
    metric = result_metric(r)
    result = f"Result ({metric[0]}, the checker's figure): {metric[1]}\n\n" if metric else ""
    return (
        f"# {benchmark} {scenario}\n\n{mark}{result}"
        "Reproduce with loadgen-harness:\n\n"
        "```\nharness run -c harness_run_performance.yaml\nharness run -c harness_run_accuracy.yaml\n```\n\n"
        f"Model sha256: {r.manifest.get('sha256', {}).get('model')}\n"
        f"Dataset: {r.config.get('dataset')} (sha256 {(r.summary.get('dataset') or {}).get('sha256')})\n"
    )
