"""`harness check`: is a results folder complete, untouched, valid and re-runnable?

Every finding has a kind; the worst kind decides the exit code, so scripts can branch
on it without parsing text:

    0  valid       complete, hashes intact, LoadGen says VALID (or an accuracy run finished)
    4  invalid     intact and complete, but LoadGen's verdict is INVALID or it logged errors
    5  incomplete  a file is missing, the run was cut short, or records are missing
    6  tampered    a recorded sha256 no longer matches (run.yaml, records.csv, summary.json,
                   the model file, the rebuilt dataset)

Exit 2 stays the harness's "cannot read this at all" (not a results folder).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.embedded import sha256_file
from harness.errors import HarnessError, OutputError
from harness.loadgen_log import read_detail
from harness.records import RECORDS_FILE, read_records

EXIT_VALID = 0
EXIT_INVALID = 4
EXIT_INCOMPLETE = 5
EXIT_TAMPERED = 6
_SEVERITY = {"ok": 0, "note": 0, "invalid": 1, "incomplete": 2, "tampered": 3}
_EXIT = {0: EXIT_VALID, 1: EXIT_INVALID, 2: EXIT_INCOMPLETE, 3: EXIT_TAMPERED}

EXPECTED_FILES = (
    "run.yaml",
    "system.json",
    "manifest.json",
    "child.json",
    "summary.json",
    RECORDS_FILE,
    "mlperf_log_summary.txt",
    "mlperf_log_detail.txt",
    "mlperf_log_accuracy.json",
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
    queries of `samples_per_query`); accuracy mode logs no result, only the generated set.
    """
    if lg.get("result_query_count") is not None:
        return int(lg["result_query_count"]) * int(lg.get("effective_samples_per_query") or 1)
    if lg.get("effective_test_mode") == "AccuracyOnly" and lg.get("generated_query_count") is not None:
        return int(lg["generated_query_count"]) * int(lg.get("generated_samples_per_query") or 1)
    return None


def check_run(run_dir: Path, rebuild_dataset: bool = True) -> CheckResult:
    """Every check that needs only the folder (plus the model file and dataset it names)."""
    if not run_dir.is_dir():
        raise OutputError(f"{run_dir} is not a results folder")
    result = CheckResult(run_dir)
    missing = [name for name in EXPECTED_FILES if not (run_dir / name).is_file()]
    for name in missing:
        result.add("incomplete", name, "missing")
    if (run_dir / "manifest.json").is_file():
        manifest = json.loads((run_dir / "manifest.json").read_text())
        _check_hashes(result, run_dir, manifest)
    summary = _load_json(run_dir / "summary.json")
    lg, lg_errors, _ = read_detail(run_dir)
    _check_records(result, run_dir, lg)
    _check_verdict(result, summary, lg, lg_errors)
    if (run_dir / "audit.config").is_file():
        # LoadGen let audit.config override the settings: a compliance run, not a result to publish.
        result.add("note", "audit.config", "a compliance audit run: LoadGen's settings were overridden by audit.config")
    if (run_dir / "run.yaml").is_file():
        _check_rerunnable(result, run_dir, summary, rebuild_dataset)
    return result


def check_path(path: Path, rebuild_dataset: bool = True) -> list[CheckResult]:
    """A results folder, or a `--repeat` folder: then each of the runs its aggregate lists."""
    aggregate = path / "aggregate.json"
    if aggregate.is_file():
        runs = json.loads(aggregate.read_text()).get("runs") or []
        if not runs:
            raise OutputError(f"{aggregate} lists no runs")
        return [check_run(path / name, rebuild_dataset) for name in runs]
    return [check_run(path, rebuild_dataset)]


def _load_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except json.JSONDecodeError:
        return None


def _check_hashes(result: CheckResult, run_dir: Path, manifest: dict[str, Any]) -> None:
    recorded: dict[str, str] = manifest.get("sha256", {})
    for name in ("run.yaml", RECORDS_FILE, "summary.json"):
        if name not in recorded:
            if name != "run.yaml":  # folders from before the manifest held them
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
        data = yaml.safe_load((run_dir / "run.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def _check_records(result: CheckResult, run_dir: Path, lg: dict[str, Any]) -> None:
    if not (run_dir / RECORDS_FILE).is_file() or not lg:
        return
    try:
        records = read_records(run_dir)
    except OutputError as e:
        result.add("tampered", RECORDS_FILE, str(e))
        return
    want = expected_samples(lg)
    if want is None:
        result.add("incomplete", "query count", "LoadGen logged no query count: the test did not finish")
    elif len(records) != want:
        result.add("incomplete", "records", f"{len(records)} records for the {want} samples LoadGen issued")
    else:
        result.add("ok", "records", f"{len(records)} records = samples LoadGen issued")


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


def _check_rerunnable(result: CheckResult, run_dir: Path, summary: dict[str, Any] | None, rebuild_dataset: bool) -> None:
    """run.yaml must still build a RunConfig here; the dataset must hash as it did."""
    from harness import registry
    from harness.config import RunConfig, validate_backend_options

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
        result.add("note", "dataset", f"a {backend_cls.kind} backend's generated prompt set is not rebuilt; sha256 not verified")
        return
    try:
        if backend_cls.kind != "tensor":
            from harness.prompts import load_jsonl

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
    from harness.datasets import build_tensor_dataset

    backend = backend_cls(options)
    backend.load(LoadContext(config.model, config.max_batch, config.scenario, config.seed, 1))
    try:
        inputs = backend.inputs()
    finally:
        backend.close()
    return build_tensor_dataset(config.dataset, inputs, config.seed).fingerprint()
