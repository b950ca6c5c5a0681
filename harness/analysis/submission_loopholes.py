"""What MLCommons' submission checker (v6.1) lets through, though it makes a false submission.

`harness submission` refuses each of these with one line, even where the checker would
accept the folder; they are listed apart from the checker's own complaints
(harness.analysis.submission_rules), so that those stay one to one with the checker's log.
Read at mlcommons/inference b66003e1 (tools/submission/submission_checker, LoadGen 6.0.17):

- equal-issue padding off: mlperf.conf turns `sample_concatenate_permutation` on for the
  LLMs (a run issues whole passes over the loaded samples, so short and long prompts weigh
  as they do in the set); performance_check.py equal_issue_check only applies to v4.1;
- a lowered `min_query_count`: min_query_count_check reads it only outside early stopping
  (Offline, where mlperf.conf's count becomes the query's samples and the effective count
  is 1), and the closed division's samples-per-query check is all that catches its effect;
- an accuracy run on a smaller set: accuracy_check.py dataset_check reads the *logged*
  `effective_accuracy_sample_count`; LoadGen logs an accuracy_sample_count_override above
  the dataset as it is, but issues only the dataset's samples (GenerateLoadableSets caps it);
- an INVALID run: the checker never reads `result_validity`. Where the run used early
  stopping and it failed, the checker does complain ("Early stopping condition was not
  met"), and the INVALID line stands for that complaint instead.

Each line says where the setting came from (run.yaml, or the line of a conf file) and the fix.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness.analysis.run_data import RunData
from harness.data.benchmarks import for_submission
from harness.results.loadgen_log import INTERACTIVE, loadgen_scenario, read_accuracy_log, read_detail

#: performance_check.py uses_early_stopping, by the log's effective_scenario (Interactive is Server)
EARLY_STOPPING_SCENARIOS = ("Server", "SingleStream", "MultiStream")


def where_set(r: RunData, run_key: str, conf_key: str) -> str:
    """Where a run's setting came from, for the line that refuses it: run.yaml's key (which
    wins over conf files), else the last conf line that sets it for this benchmark and
    scenario (user.conf after mlperf_conf, as LoadGen reads them), else LoadGen's defaults."""
    value = r.config.get(run_key)
    if value is not None:
        return f"{r.run_dir.name}/run.yaml sets {run_key}: {str(value).lower() if isinstance(value, bool) else value}"
    benchmark, scenario = r.config["benchmark"], r.config["scenario"]
    if scenario == INTERACTIVE:
        benchmark = f"{benchmark}-interactive"
    pattern = re.compile(rf"^\s*({re.escape(benchmark)}|\*)\.({loadgen_scenario(scenario)}|\*)\.{conf_key}\s*=\s*\S+")
    found = None
    for file_key in ("mlperf_conf", "user_conf"):
        path = r.config.get(file_key)
        if not path or not Path(path).is_file():
            continue
        for line in Path(path).read_text().splitlines():
            if pattern.match(line):
                found = f"{Path(path).name} ({path}) sets {line.strip()}"
    return found or f"{r.run_dir.name}'s LoadGen settings have {conf_key}"


def equal_issue_problems(name: str, r: RunData) -> list[str]:
    """A performance run of a benchmark whose mlperf.conf pads to equal issue, with it off."""
    bench = for_submission(r.config["benchmark"])
    values, _, _ = read_detail(r.run_dir)
    if bench is None or not bench.equal_issue or values.get("effective_sample_concatenate_permutation", True):
        return []
    return [f"{name}: {where_set(r, 'sample_concatenate_permutation', 'sample_concatenate_permutation')}: "
            "MLPerf's equal-issue padding is off (mlperf.conf turns it on for this benchmark; the checker does not "
            "look); remove that setting"]


def min_query_count_problems(name: str, r: RunData, official: dict[str, Any]) -> list[str]:
    """A performance run whose requested min_query_count is under mlperf.conf's for its
    benchmark and scenario (LoadGen logs what was asked: Offline's effective count is 1)."""
    values, _, _ = read_detail(r.run_dir)
    asked, wanted = values.get("requested_min_query_count"), official.get("min_query_count") or 0
    if not isinstance(asked, int) or asked >= wanted:
        return []
    return [f"{name}: {where_set(r, 'min_query_count', 'min_query_count')}: min_query_count {asked:,} is under "
            f"mlperf.conf's {wanted:,} for {r.config['benchmark']} {r.config['scenario']} (the checker lets it "
            "through); remove that setting"]


def accuracy_subset_problems(name: str, r: RunData, eff: dict[str, Any]) -> list[str]:
    """An accuracy run that logs more accuracy samples than LoadGen issued: distinct
    qsl_idx in mlperf_log_accuracy.json against the logged effective_accuracy_sample_count."""
    logged = eff.get("accuracy_sample_count")
    if not isinstance(logged, int):
        return []
    issued = len({e.get("qsl_idx") for e in read_accuracy_log(r.run_dir) if isinstance(e, dict)})
    if issued >= logged:
        return []
    return [f"{name}: the accuracy run {r.run_dir.name} logs {logged:,} accuracy samples but LoadGen issued "
            f"{issued:,} distinct ones ({where_set(r, 'accuracy_sample_count_override', 'accuracy_sample_count_override')}"
            ", above its dataset; the checker reads the logged count): run on the whole dataset, without that override"]


def validity_problems(name: str, r: RunData) -> tuple[list[str], list[str]]:
    """(what the checker says, what it lets through) of LoadGen's verdict on a performance
    run. An INVALID run is one line: the checker's early-stopping complaint where early
    stopping failed in a scenario that uses it, else a loophole. A VALID run whose early
    stopping failed (LoadGen 6.0's VALID includes it, but the checker reads the flag on its
    own) is the checker's complaint."""
    validity = r.summary["validity"]
    stopping = loadgen_scenario(r.config["scenario"]) in EARLY_STOPPING_SCENARIOS
    values, _, _ = read_detail(r.run_dir)
    missed = stopping and values.get("early_stopping_met") is False
    if validity["result"] != "VALID":
        why = "; ".join(validity.get("reasons") or []) or validity.get("loadgen_invalid_reason") or ""
        line = f"{name}: LoadGen judged {r.run_dir.name} {validity['result']}" + (f": {why}" if why else "")
        return ([line], []) if missed else ([], [line + " (the checker does not read LoadGen's verdict)"])
    if missed:
        result = " ".join(str(values.get(k) or "").strip() for k in
                          ("early_stopping_result", "early_stopping_ttft_result", "early_stopping_tpot_result")).strip()
        return [f"{name}: early stopping condition was not met in {r.run_dir.name}" + (f": {result}" if result else "")
                + " (run longer, or at a lower target_qps)"], []
    return [], []
