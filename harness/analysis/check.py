"""`harness check`: is a results folder complete, untouched, valid and re-runnable?

Every finding has a kind; the worst kind decides the exit code, so scripts can branch
on it without parsing text:

    0  valid       complete, hashes intact, LoadGen says VALID (or an accuracy run finished)
    4  invalid     intact and complete, but LoadGen's verdict is INVALID or it logged errors,
                   or fewer samples succeeded than the run's min_success_rate
    5  incomplete  a file is missing or empty (LoadGen's log included), the run was cut
                   short, or records are missing
    6  tampered    a recorded sha256 no longer matches (run.yaml, records.parquet, summary.json,
                   schedule.parquet, the model file, the rebuilt dataset), or a file is damaged: not what
                   the harness or LoadGen writes (garbage, a JSON list, a bad records cell)

Exit 2 stays the harness's "cannot read this at all" (not a results folder).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis.cost import read_cost
from harness.analysis.run_data import read_config, read_manifest, read_system
from harness.data.hashing import sha256_file
from harness.errors import HarnessError, OutputError, ResultsError
from harness.results import folder
from harness.results.loadgen_log import detail_problem, read_detail
from harness.results.records import records_path, scan_records
from harness.results.summary import min_success_rate_of, shape_problem

EXIT_VALID = 0
EXIT_INVALID = 4
EXIT_INCOMPLETE = 5
EXIT_TAMPERED = 6
_SEVERITY = {"ok": 0, "note": 0, "invalid": 1, "incomplete": 2, "tampered": 3}
_EXIT = {0: EXIT_VALID, 1: EXIT_INVALID, 2: EXIT_INCOMPLETE, 3: EXIT_TAMPERED}

EXPECTED_FILES = (
    folder.RUN_CONFIG,
    folder.SYSTEM,
    folder.MANIFEST,
    folder.CHILD,
    folder.SUMMARY,
    folder.RECORDS,
    folder.LOADGEN_SUMMARY,
    folder.LOADGEN_DETAIL,
    folder.LOADGEN_ACCURACY,
)


@dataclass(frozen=True)
class Finding:
    kind: str  # ok | note | invalid | incomplete | tampered
    what: str
    detail: str


@dataclass
class CheckResult:
    run_dir: Path
    findings: list[Finding] = field(default_factory=list)

    def add(self, kind: str, what: str, detail: str) -> None:
        self.findings.append(Finding(kind, what, detail))

    @property
    def verdict(self) -> str:
        worst = max((_SEVERITY[f.kind] for f in self.findings), default=0)
        return ("valid", "invalid", "incomplete", "tampered")[worst]

    @property
    def exit_code(self) -> int:
        return _EXIT[max((_SEVERITY[f.kind] for f in self.findings), default=0)]

    def problems(self) -> list[Finding]:
        return [f for f in self.findings if _SEVERITY[f.kind] > 0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "findings": [f.__dict__ for f in self.findings],
        }


def expected_samples(lg: dict[str, Any]) -> int | None:
    """Samples LoadGen issued, from its own log: queries x samples per query.

    Performance mode logs `result_query_count` (Offline: 1 query of N samples; MultiStream:
    queries of `samples_per_query`); accuracy mode logs no result, only the generated sets.
    """
    if lg.get("effective_test_mode") == "FindPeakPerformance" and lg.get("generated_query_counts"):
        # every round's queries; LoadGen's result_* keys are the reported round's only
        return sum(int(c) for c in lg["generated_query_counts"]) * int(lg.get("effective_samples_per_query") or 1)
    if lg.get("result_query_count") is not None:
        # generated_samples_per_query is what each query held: with sample_concatenate_permutation
        # (mlperf.conf's, for every LLM) LoadGen pads Offline's query to a multiple of the loaded
        # samples (loadgen.cc GenerateQueries), past effective_samples_per_query (22 -> 32)
        per_query = lg.get("generated_samples_per_query") or lg.get("effective_samples_per_query") or 1
        return int(lg["result_query_count"]) * int(per_query)
    counts, per_query = lg.get("generated_query_counts") or [], lg.get("generated_samples_per_queries") or []
    if lg.get("effective_test_mode") == "AccuracyOnly" and counts and len(counts) == len(per_query):
        # one generated set per loadable set: a dataset larger than the performance sample
        # count is issued in several (50,000 samples in sets of 1,024: 49 sets, the last 848;
        # Offline: one query of each set's size)
        return sum(int(c) * int(q or 1) for c, q in zip(counts, per_query))
    if lg.get("effective_test_mode") == "AccuracyOnly" and lg.get("generated_query_count") is not None:
        return int(lg["generated_query_count"]) * int(lg.get("generated_samples_per_query") or 1)
    return None


def check_run(run_dir: Path, rebuild_dataset: bool = True) -> CheckResult:
    """Every check that needs only the folder (plus the model file and dataset it names)."""
    folder.require_folder(run_dir)
    result = CheckResult(run_dir)
    records = records_path(run_dir)
    if records is not None and records.name == folder.LEGACY_RECORDS:  # a folder from before records.parquet
        expected = tuple(folder.LEGACY_RECORDS if n == folder.RECORDS else n for n in EXPECTED_FILES)
    else:
        expected = EXPECTED_FILES
    missing = [name for name in expected if not (run_dir / name).is_file()]
    for name in missing:
        result.add("incomplete", name, "missing")
    manifest = _read(result, folder.MANIFEST, lambda: read_manifest(run_dir) if (run_dir / folder.MANIFEST).is_file() else None)
    if manifest is not None:
        _check_hashes(result, run_dir, manifest, records)
    # Read by the reports and verbs: damage there is a finding here.
    _read(result, folder.SYSTEM, lambda: read_system(run_dir))
    _read(result, folder.CHILD, lambda: folder.read_json(run_dir, folder.CHILD))
    _read(result, folder.COST, lambda: read_cost(run_dir))
    _read(result, folder.RUN_CONFIG, lambda: read_config(run_dir))
    summary = _read(result, folder.SUMMARY, lambda: folder.read_json(run_dir, folder.SUMMARY))
    if summary is not None and (problem := shape_problem(summary)):
        result.add("tampered", folder.SUMMARY, f"{run_dir / folder.SUMMARY} is damaged: {problem}")
        summary = None
    lg, lg_errors, _ = read_detail(run_dir)
    log_problem = detail_problem(run_dir)
    if log_problem and (run_dir / folder.LOADGEN_DETAIL).is_file():  # a missing one is reported already
        result.add(log_problem[0], folder.LOADGEN_DETAIL, log_problem[1])
    _check_records(result, run_dir, records, lg)
    _check_verdict(result, summary, lg, lg_errors)
    _check_success_rate(result, summary)
    if (run_dir / folder.AUDIT_CONFIG).is_file():
        # LoadGen let audit.config override the settings: a compliance run, not a result to publish.
        result.add("note", folder.AUDIT_CONFIG, "a compliance audit run: LoadGen's settings were overridden by audit.config")
    if (run_dir / folder.RUN_CONFIG).is_file():
        _check_rerunnable(result, run_dir, summary, rebuild_dataset)
    return result


def check_path(path: Path, rebuild_dataset: bool = True) -> list[CheckResult]:
    """A results folder, or a `--repeat` folder: then each of the runs its aggregate lists."""
    aggregate = folder.read_json(path, folder.AGGREGATE)
    if aggregate is not None:
        runs = aggregate.get("runs") or []
        if not isinstance(runs, list) or not runs:
            raise ResultsError(f"{path / folder.AGGREGATE} is damaged: it lists no runs")
        return [check_run(path / str(name), rebuild_dataset) for name in runs]
    return [check_run(path, rebuild_dataset)]


def _read(result: CheckResult, name: str, read: Any) -> Any:
    """A damaged file is a finding of the check, not an error of the tool."""
    try:
        return read()
    except ResultsError as e:
        result.add("tampered", name, str(e))
        return None


def _check_hashes(result: CheckResult, run_dir: Path, manifest: dict[str, Any], records: Path | None) -> None:
    recorded: dict[str, str] = manifest.get("sha256", {})
    # telemetry.jsonl and schedule.parquet only where the run made them (their hashes are then recorded)
    optional = [name for name in (folder.TELEMETRY, folder.SCHEDULE)
                if name in recorded or (run_dir / name).is_file()]
    for name in (folder.RUN_CONFIG, records.name if records else folder.RECORDS, folder.SUMMARY, *optional):
        if name not in recorded:
            if name != folder.RUN_CONFIG:  # folders from before the manifest held them
                result.add("note", name, "no sha256 recorded; not verified")
            continue
        path = run_dir / name
        if not path.is_file():
            continue  # reported as missing already
        actual = sha256_file(path)
        if actual != recorded[name]:
            result.add("tampered", name, f"sha256 {actual[:12]}… differs from the recorded {recorded[name][:12]}…")
        else:
            result.add("ok", name, "sha256 matches")
    config = _run_yaml(run_dir)
    for key in ("model", "mlperf_conf", "user_conf"):
        if key not in recorded or not config:
            continue
        path = Path(str(config.get(key)))
        if not path.is_file():
            result.add("note", key, f"{path} is not on this machine; its sha256 cannot be verified")
        elif sha256_file(path) != recorded[key]:
            result.add("tampered", key, f"{path} changed since the run (sha256 differs from the recorded one)")
        else:
            result.add("ok", key, f"sha256 of {path.name} matches")


def _run_yaml(run_dir: Path) -> dict[str, Any] | None:
    try:
        return folder.read_run_config(run_dir, required=False)
    except ResultsError:
        return None


def _check_records(result: CheckResult, run_dir: Path, path: Path | None, lg: dict[str, Any]) -> None:
    if path is None:
        return
    try:
        rows = scan_records(run_dir)  # every value decoded: a damaged page is found here
    except OutputError as e:
        result.add("tampered", path.name, str(e))
        return
    if not lg:
        # Nothing to count them against: LoadGen's log is missing, empty or damaged, a
        # finding of its own. Never a pass: the log is the official record.
        result.add("incomplete", "records", f"{rows} records, but no LoadGen log entries to count them against")
        return
    try:
        want = expected_samples(lg)
    except (TypeError, ValueError):
        result.add("tampered", folder.LOADGEN_DETAIL, "its query count is not a number")
        return
    if want is None:
        result.add("incomplete", "query count", "LoadGen logged no query count: the test did not finish")
    elif rows != want:
        result.add("incomplete", "records", f"{rows} records for the {want} samples LoadGen issued")
    else:
        result.add("ok", "records", f"{rows} records = samples LoadGen issued")


def _check_verdict(result: CheckResult, summary: dict[str, Any] | None, lg: dict[str, Any], errors: list[str]) -> None:
    if summary is None:
        return
    if summary.get("status") != "complete":
        result.add("incomplete", "status", f"run incomplete: {summary.get('incomplete_reason')}")
    if errors or (lg.get("num_errors") or 0) > 0:
        result.add("invalid", "LoadGen errors", "; ".join(errors) or f"{lg.get('num_errors')} errors logged")
    if summary["run"]["mode"] == "AccuracyOnly":
        result.add("ok", "validity", "accuracy run: LoadGen gives no performance verdict")
        return
    validity = summary["validity"]["result"]
    if validity == "VALID":
        result.add("ok", "validity", "LoadGen: VALID")
    elif validity is None:
        result.add("incomplete", "validity", "LoadGen logged no verdict")
    else:
        why = "; ".join(summary["validity"].get("reasons") or []) or summary["validity"].get("loadgen_invalid_reason") or ""
        result.add("invalid", "validity", f"LoadGen: {validity}" + (f" ({why})" if why else ""))


def _check_success_rate(result: CheckResult, summary: dict[str, Any] | None) -> None:
    """The harness's own verdict: LoadGen's VALID speaks of latencies only."""
    if summary is None or not summary["harness"].get("samples"):
        return
    rate = summary["harness"]["success_rate"]
    recorded = summary["validity"].get("harness")
    if isinstance(recorded, dict) and isinstance(recorded.get("min_success_rate"), (int, float)):
        threshold = float(recorded["min_success_rate"])
    else:  # a summary from before the setting: the run's config, else the default
        threshold = min_success_rate_of(_run_yaml(result.run_dir) or {})
    if rate < threshold:
        result.add("invalid", "success rate",
                   f"{rate * 100:.2f}% of samples succeeded, below min_success_rate {threshold * 100:g}% "
                   f"({summary['harness']['failed']:,} failed)")
    else:
        result.add("ok", "success rate", f"{rate * 100:.2f}% ≥ min_success_rate {threshold * 100:g}%")


def _check_rerunnable(result: CheckResult, run_dir: Path, summary: dict[str, Any] | None, rebuild_dataset: bool) -> None:
    """run.yaml must still build a RunConfig here; the dataset must hash as it did."""
    from harness.config import registry
    from harness.config.run_config import RunConfig, validate_backend_options

    data = _run_yaml(run_dir)
    try:
        config = RunConfig(**(data or {}))
        backend_cls = registry.get(config.backend)
        options = validate_backend_options(config, backend_cls.Options)
    except (HarnessError, ValueError, TypeError) as e:
        result.add("note", "re-runnable", f"not here: {str(e).splitlines()[0]}")
        return
    recorded = ((summary or {}).get("dataset") or {}).get("sha256")
    if not rebuild_dataset or not recorded:
        result.add("ok", "re-runnable", "run.yaml is a valid config for an installed backend")
        return
    described = (summary or {}).get("dataset") or {}
    if backend_cls.kind != "tensor" and described.get("kind") != "jsonl":
        # Synthetic and ShareGPT prompts are counted in the tokenizer of the model under
        # test: rebuilding them needs that model, which a check does not load.
        result.add("note", "dataset", f"the {config.backend} backend's generated prompt set is not rebuilt (it needs the "
                   "model's tokenizer); sha256 not verified")
        return
    try:
        if backend_cls.kind != "tensor":
            from harness.data.prompts import load_jsonl

            actual = load_jsonl(Path(described["path"]), described.get("validator")).fingerprint()
        else:
            actual = _dataset_sha256(config, backend_cls, options)
    except HarnessError as e:
        result.add("note", "dataset", f"cannot rebuild it here: {e}")
        return
    if actual != recorded:
        result.add("tampered", "dataset", f"rebuilt dataset sha256 {actual[:12]}… differs from the recorded {recorded[:12]}…")
    else:
        result.add("ok", "dataset", "rebuilt from run.yaml; sha256 matches")
        result.add("ok", "re-runnable", "run.yaml, backend, model and dataset all available")


def _dataset_sha256(config: Any, backend_cls: Any, options: Any) -> str:
    """The backend's input signature needs the model loaded; the dataset is then rebuilt
    exactly as the child built it."""
    from backends.base import LoadContext
    from harness.data.datasets import build_tensor_dataset

    backend = backend_cls(options)
    backend.load(LoadContext(config.model, config.max_batch or 1, config.scenario, config.seed, 1))
    try:
        inputs = backend.inputs()
    finally:
        backend.close()
    return build_tensor_dataset(config.dataset, inputs, config.seed).fingerprint()
