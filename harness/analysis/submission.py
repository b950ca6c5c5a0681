"""`harness submission`: results folders -> the MLPerf Inference submission layout.

    <out>/<division>/<org>/
        systems/<system>.json
        results/<system>/<benchmark>/<scenario>/
            performance/run_1/mlperf_log_summary.txt, mlperf_log_detail.txt
            accuracy/mlperf_log_summary.txt, mlperf_log_detail.txt, mlperf_log_accuracy.json, accuracy.txt
            measurements.json  user.conf  README.md  harness_run_performance.yaml  harness_run_accuracy.yaml
        README.md

The rules a run must meet are checked first and every broken one is listed. Without
`force` nothing is written (`SubmissionRefused`, exit 1): a folder that looks like a
submission but is not one is worse than none. With `force` the folder is written and
marked: NOT_FOR_SUBMISSION.txt at the top, the rules in each README and in the system
JSON. The official values (minimum duration, query count, seeds) come from the
mlperf.conf compiled into the installed LoadGen, read in a throwaway process because
LoadGen accepts one conf load per process. MLCommons' submission checker stays the judge.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis.check import check_run
from harness.analysis.run_data import RunData, load_run
from harness.config.run_config import read_yaml
from harness.data.hashing import sha256_file
from harness.errors import ConfigError, HarnessError, OutputError, SubmissionRefused
from harness.results import folder

DIVISIONS = ("closed", "open", "network")
SYSTEM_TYPES = ("datacenter", "edge", "datacenter,edge")
STATUSES = ("available", "preview", "rdi")
# Fields MLPerf's system description must carry with a value.
REQUIRED_SYSTEM_FIELDS = (
    "division", "submitter", "status", "system_type", "system_name", "number_of_nodes",
    "host_processor_model_name", "host_processors_per_node", "host_processor_core_count",
    "host_memory_capacity", "host_storage_capacity", "host_storage_type",
    "accelerator_model_name", "accelerators_per_node", "accelerator_memory_capacity",
    "framework", "operating_system", "other_software_stack",
)
# Fields the checker expects present; empty is allowed.
OPTIONAL_SYSTEM_FIELDS = (
    "host_processor_frequency", "host_processor_caches", "host_processor_interconnect",
    "host_memory_configuration", "host_networking", "host_networking_topology",
    "accelerator_frequency", "accelerator_host_interconnect", "accelerator_interconnect",
    "accelerator_interconnect_topology", "accelerator_memory_configuration", "accelerator_on-chip_memories",
    "cooling", "hw_notes", "sw_notes", "system_type_detail",
)
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


@dataclass
class SubmissionResult:
    root: Path
    broken: list[str]
    written: bool
    files: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # arguments that are not runs, and why


def official_settings(benchmark: str, scenario: str) -> dict[str, int]:
    """min duration, min query count and seeds of the installed LoadGen's mlperf.conf."""
    code = (
        "import json, sys, tempfile, mlperf_loadgen as lg\n"
        "p = tempfile.NamedTemporaryFile('w', suffix='.conf', delete=False); p.write('\\n'); p.close()\n"
        "ts = lg.TestSettings(); rc = ts.FromConfig(p.name, sys.argv[1], sys.argv[2], 1)\n"
        "print(json.dumps({'rc': rc, 'min_duration_ms': ts.min_duration_ms, 'min_query_count': ts.min_query_count,"
        " 'qsl_rng_seed': ts.qsl_rng_seed, 'sample_index_rng_seed': ts.sample_index_rng_seed,"
        " 'schedule_rng_seed': ts.schedule_rng_seed}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, benchmark, scenario], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise HarnessError(f"cannot read LoadGen's mlperf.conf: {out.stderr.strip().splitlines()[-1:]}")
    data = json.loads(out.stdout.strip().splitlines()[-1])
    if data.pop("rc") != 0:
        raise HarnessError("LoadGen rejected an empty user.conf while reading its mlperf.conf")
    return data


def _runs_only(paths: list[Path]) -> tuple[list[Path], list[str]]:
    """The run folders among `paths` (as `results/*` expands), and what was skipped, why.
    A file (a README) or a sweep/repeat folder is not a run: it is named, not an error."""
    runs, skipped = [], []
    for p in paths:
        if not p.is_dir():
            skipped.append(f"{p.name}: not a folder" if p.exists() else f"{p}: does not exist")
        elif (p / folder.RUN_CONFIG).is_file():
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


def broken_rules(runs: list[RunData]) -> list[str]:
    """Every MLPerf rule the set of runs breaks, one sentence each, naming the run."""
    broken: list[str] = []
    groups: dict[tuple[str, str], dict[str, list[RunData]]] = {}
    for r in runs:
        mode = r.config["mode"]
        if mode not in ("PerformanceOnly", "AccuracyOnly"):
            broken.append(f"{r.run_dir.name}: mode {mode}; a submission needs a PerformanceOnly and an AccuracyOnly run")
            continue
        groups.setdefault(_key(r), {"PerformanceOnly": [], "AccuracyOnly": []})[mode].append(r)
        if (r.run_dir / folder.AUDIT_CONFIG).is_file():
            broken.append(f"{r.run_dir.name}: a compliance audit run (audit.config overrode LoadGen's settings); "
                          "submit the normal run and put audits under compliance/")
        verdict = check_run(r.run_dir, rebuild_dataset=False)
        for f in verdict.problems():
            if f.kind in ("tampered", "incomplete") or (f.kind == "invalid" and f.what != "validity"):
                broken.append(f"{r.run_dir.name}: {f.kind}: {f.what}: {f.detail}")
    systems = {json.dumps({k: v for k, v in r.system.items() if k != "harness_git_commit"}, sort_keys=True) for r in runs}
    if len(systems) > 1:
        broken.append("the runs come from different systems (system.json differs): one submission folder per system")
    for (benchmark, scenario), modes in sorted(groups.items()):
        name = f"{benchmark}/{scenario}"
        if benchmark == "*":
            broken.append(f"{name}: no benchmark name; run with --benchmark (e.g. resnet50) so LoadGen applies its rules")
            continue
        for mode, found in modes.items():
            if not found:
                broken.append(f"{name}: no {mode} run; a submission needs both a PerformanceOnly and an AccuracyOnly run")
            elif len(found) > 1:
                broken.append(f"{name}: {len(found)} {mode} runs ({', '.join(r.run_dir.name for r in found)}); pass one")
        official = official_settings(benchmark, scenario)
        for r in modes["PerformanceOnly"]:
            broken += _performance_rules(name, r, official)
        for r in modes["AccuracyOnly"]:
            if not r.summary.get("accuracy") or r.summary["accuracy"].get("value") is None:
                broken.append(f"{name}: {r.run_dir.name} has no accuracy figure (the dataset needs labels)")
    return broken


def _performance_rules(name: str, r: RunData, official: dict[str, int]) -> list[str]:
    broken: list[str] = []
    eff = r.summary["loadgen"].get("effective_settings") or {}
    validity = r.summary["validity"]
    if validity["result"] != "VALID":
        why = "; ".join(validity.get("reasons") or []) or validity.get("loadgen_invalid_reason") or ""
        broken.append(f"{name}: LoadGen judged {r.run_dir.name} {validity['result']}" + (f": {why}" if why else ""))
    if (eff.get("min_duration_ms") or 0) < official["min_duration_ms"]:
        broken.append(f"{name}: min duration {eff.get('min_duration_ms', 0) / 1e3:g} s is under the official "
                      f"{official['min_duration_ms'] / 1e3:g} s (set min_duration_s or drop the override)")
    if (eff.get("min_query_count") or 0) < official["min_query_count"]:
        broken.append(f"{name}: min query count {eff.get('min_query_count')} is under the official {official['min_query_count']}")
    for seed in SEEDS:
        if eff.get(seed) != official[seed]:
            broken.append(f"{name}: {seed} {eff.get(seed)} is not the official {official[seed]} "
                          "(pass LoadGen's mlperf.conf with --mlperf-conf, or set no seed)")
    for key in ("performance_issue_same", "performance_issue_unique"):
        if eff.get(key):
            broken.append(f"{name}: {key} is on: that is an audit setting, not a submission run")
    return broken


def system_description(runs: list[RunData], user: dict[str, Any], division: str, org: str) -> dict[str, Any]:
    """system.json of the runs, completed by the user's file; user values win."""
    s = runs[0].system
    accel = s.get("accelerators") or []
    engines = sorted({f"{(r.summary.get('backend') or {}).get('engine', r.config['backend'])} "
                      f"{(r.summary.get('backend') or {}).get('engine_version', '')}".strip() for r in runs})
    derived: dict[str, Any] = {
        "division": division,
        "submitter": org,
        "number_of_nodes": 1,
        "host_processor_model_name": s.get("cpu_model"),
        "host_processor_core_count": s.get("cpu_cores"),
        "host_memory_capacity": f"{round((s.get('memory_bytes') or 0) / 2**30)} GB" if s.get("memory_bytes") else None,
        "accelerator_model_name": accel[0].split(",")[0].strip() if accel else "N/A",
        "accelerators_per_node": len(accel),
        "accelerator_memory_capacity": accel[0].split(",")[1].strip() if accel and "," in accel[0] else "N/A",
        "framework": ", ".join(engines),
        "operating_system": s.get("os"),
        "other_software_stack": ", ".join(f"{k} {v}" for k, v in sorted((s.get("packages") or {}).items()))
        + f", python {s.get('python')}",
    }
    desc = {**derived, **{k: v for k, v in user.items() if k not in ("measurements", "system_id")}}
    desc["division"], desc["submitter"] = division, org
    for key in OPTIONAL_SYSTEM_FIELDS:
        desc.setdefault(key, "")
    missing = [k for k in REQUIRED_SYSTEM_FIELDS if desc.get(k) in (None, "")]
    if missing:
        raise ConfigError(f"system description lacks {', '.join(missing)}: add them to the --system-desc file")
    if desc["system_type"] not in SYSTEM_TYPES:
        raise ConfigError(f"system_type {desc['system_type']!r}: use one of {', '.join(SYSTEM_TYPES)}")
    if desc["status"] not in STATUSES:
        raise ConfigError(f"status {desc['status']!r}: use one of {', '.join(STATUSES)}")
    return desc


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "system"


def _user_conf(r: RunData) -> str:
    path = r.config.get("user_conf")
    if path and Path(path).is_file():
        return Path(path).read_text()
    lines = [f"# user.conf equivalent of {r.run_dir.name}/run.yaml, written by harness submission"]
    benchmark, scenario = _key(r)
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
        "starting_weights_filename": Path(model).name if model else "none",
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


def _accuracy_txt(r: RunData) -> str:
    acc = r.summary.get("accuracy") or {}
    log = r.run_dir / folder.LOADGEN_ACCURACY
    value = acc.get("value")
    line = (f"{acc.get('metric')}={value * 100:.3f}%, good={acc.get('correct')}, total={acc.get('scored_samples')}"
            if value is not None else "no accuracy metric: the dataset has no labels")
    return f"{line}\nhash={sha256_file(log)}\n"


def write_submission(run_dirs: list[Path], org: str, division: str, system_desc: Path, out: Path,
                     force: bool = False) -> SubmissionResult:
    if division not in DIVISIONS:
        raise ConfigError(f"--division {division!r}: use one of {', '.join(DIVISIONS)}")
    run_dirs, skipped = _runs_only(run_dirs)
    if not run_dirs:
        raise ConfigError("submission needs at least one results folder" + (f" ({'; '.join(skipped)})" if skipped else ""))
    user, _ = read_yaml(system_desc)
    runs = [_load(d) for d in run_dirs]
    desc = system_description(runs, user, division, org)
    broken = broken_rules(runs)
    root = out / division / _slug(org)
    if broken and not force:
        raise SubmissionRefused(
            f"{len(broken)} MLPerf rule(s) broken, nothing written (--force writes a marked folder):\n"
            + "\n".join(f"  - {rule}" for rule in sorted(broken, key=_rule_group))
        )
    if root.exists() and any(root.iterdir()):
        raise OutputError(f"{root} already holds files: pass an empty -o folder")
    system = _slug(str(user.get("system_id") or desc["system_name"]))
    if broken:
        desc["harness_rules_broken"] = broken
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
    mark = "" if not broken else "NOT A VALID SUBMISSION (written with --force). Rules broken:\n" + "".join(f"- {b}\n" for b in broken) + "\n"
    for r in runs:
        benchmark, scenario = _key(r)
        if benchmark == "*":
            benchmark = "unnamed"
        base = root / "results" / system / benchmark / scenario
        if r.config["mode"] == "PerformanceOnly":
            for name in (folder.LOADGEN_SUMMARY, folder.LOADGEN_DETAIL):
                copy(r.run_dir / name, base / "performance" / "run_1" / name)
            copy(r.run_dir / folder.RUN_CONFIG, base / "harness_run_performance.yaml")
            put(base / "measurements.json", json.dumps(_measurements(r, user), indent=2) + "\n")
            put(base / "user.conf", _user_conf(r))
            put(base / "README.md", _scenario_readme(r, mark))
        elif r.config["mode"] == "AccuracyOnly":
            for name in (folder.LOADGEN_SUMMARY, folder.LOADGEN_DETAIL, folder.LOADGEN_ACCURACY):
                copy(r.run_dir / name, base / "accuracy" / name)
            put(base / "accuracy" / "accuracy.txt", _accuracy_txt(r))
            copy(r.run_dir / folder.RUN_CONFIG, base / "harness_run_accuracy.yaml")
    put(root / "README.md", f"# {org}: {division} division\n\n{mark}Written by `harness submission` from:\n"
        + "".join(f"- {r.run_dir}\n" for r in runs)
        + "\nValidate with MLCommons' submission checker before submitting.\n")
    if broken:
        put(root / "NOT_FOR_SUBMISSION.txt", mark)
    return SubmissionResult(root, broken, True, files, skipped)


def _scenario_readme(r: RunData, mark: str) -> str:
    benchmark, scenario = _key(r)
    return (
        f"# {benchmark} {scenario}\n\n{mark}"
        "Reproduce with loadgen-harness:\n\n"
        "```\nharness run -c harness_run_performance.yaml\nharness run -c harness_run_accuracy.yaml\n```\n\n"
        f"Model sha256: {r.manifest.get('sha256', {}).get('model')}\n"
        f"Dataset: {r.config.get('dataset')} (sha256 {(r.summary.get('dataset') or {}).get('sha256')})\n"
    )
