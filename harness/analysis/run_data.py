"""One results folder read once, for the verbs and the renderers: `load_run(DIR) -> RunData`.

Files are read through harness.results.folder (one rule for missing or damaged files);
the per-request records load on first use, as they can hold millions of rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from harness.analysis.cost import cost_for_run, parse_sheet, read_cost
from harness.errors import OutputError, ResultsError
from harness.results import folder
from harness.results.breakdown import aggregate, aggregate_from_summary, backend_stages, rates, stage_labels
from harness.results.records import read_records, records_path
from harness.results.schedule import timed_from_dispatch
from harness.results.summary import check_shape

#: sections every renderer reads; a summary without one is from an interrupted write
REQUIRED_SECTIONS = ("run", "status", "validity", "loadgen", "harness")


@dataclass
class RunData:
    """One results folder, read once. Records load on first use (they can be large)."""

    run_dir: Path
    summary: dict[str, Any]
    config: dict[str, Any]
    system: dict[str, Any]
    manifest: dict[str, Any]
    cost: dict[str, Any] | None = field(default=None)

    @property
    def has_records(self) -> bool:
        return records_path(self.run_dir) is not None

    @cached_property
    def columns(self) -> Mapping[str, Any] | None:
        return read_records(self.run_dir).columns if self.has_records else None

    def require_records(self, what: str) -> Mapping[str, Any]:
        cols = self.columns
        if cols is None:
            raise OutputError(f"{self.run_dir} has no {folder.RECORDS}: {what} needs the per-request records")
        return cols

    @cached_property
    def breakdown(self) -> dict[str, Any] | None:
        # A non-streaming run's breakdown is in summary.json already; its records.parquet can
        # hold millions of rows (tens of seconds to read), so read it only when needed.
        out = aggregate_from_summary(self.summary)
        if out is None:
            cols = self.columns
            if cols is None or not len(cols["status"]):
                return None
            out = aggregate(cols)
        out["backend_stages"] = backend_stages(self.run_dir)
        out["labels"] = stage_labels(timed_from_dispatch(self.summary))
        return out

    @cached_property
    def rates(self) -> dict[str, Any]:
        return rates(self.summary)

    @cached_property
    def child(self) -> dict[str, Any]:
        """child.json: what the test process resolved and measured (its threads, the loop's lag)."""
        return folder.read_json(self.run_dir, folder.CHILD) or {}

    @cached_property
    def telemetry_entries(self) -> list[dict[str, Any]]:
        """telemetry.jsonl's samples, for the plots over time ([] when the run took none)."""
        return folder.read_jsonl(self.run_dir, folder.TELEMETRY)


def _damaged(run_dir: Path, name: str, problem: str) -> ResultsError:
    return ResultsError(f"{run_dir / name} is damaged: {problem}")


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """manifest.json ({} when absent): `sha256` must map names to hex digests."""
    manifest = folder.read_json(run_dir, folder.MANIFEST) or {}
    hashes = manifest.get("sha256", {})
    if not isinstance(hashes, dict) or not all(isinstance(v, str) for v in hashes.values()):
        raise _damaged(run_dir, folder.MANIFEST, "sha256 is not a mapping of file names to digests")
    return manifest


def read_system(run_dir: Path) -> dict[str, Any]:
    """system.json ({} when absent): `packages` maps names to versions, `accelerators` is a list."""
    system = folder.read_json(run_dir, folder.SYSTEM) or {}
    if not isinstance(system.get("packages") or {}, dict):
        raise _damaged(run_dir, folder.SYSTEM, "packages is not a mapping of package names to versions")
    accelerators = system.get("accelerators") or []
    if not isinstance(accelerators, list) or not all(isinstance(a, str) for a in accelerators):
        raise _damaged(run_dir, folder.SYSTEM, "accelerators is not a list of names")
    return system


def read_config(run_dir: Path, *, required: bool = False) -> dict[str, Any]:
    """run.yaml as a mapping ({} when absent and not required): `backend_options` a mapping."""
    config = folder.read_run_config(run_dir, required=required) or {}
    if not isinstance(config.get("backend_options") or {}, dict):
        raise _damaged(run_dir, folder.RUN_CONFIG, "backend_options is not a mapping of options")
    return config


def load_run(run_dir: Path, summary: dict[str, Any] | None = None) -> RunData:
    """`summary`: one already in hand (the run just wrote it); else read from the folder."""
    summary = folder.load_summary(run_dir) if summary is None else summary
    missing = [k for k in REQUIRED_SECTIONS if k not in summary]
    if missing:
        raise ResultsError(
            f"{run_dir / folder.SUMMARY} lacks section {', '.join(repr(m) for m in missing)}: it was cut off "
            "or edited by hand; rebuild it with harness.results.summary.write_summary(DIR, {}) or re-run the test"
        )
    check_shape(run_dir, summary)
    data = RunData(
        run_dir=run_dir,
        summary=summary,
        config=read_config(run_dir),
        system=read_system(run_dir),
        manifest=read_manifest(run_dir),
    )
    data.cost = read_cost(run_dir)
    if data.cost is None and data.config.get("cost"):
        # The run carried a price sheet but no cost.json was written: price it now.
        data.cost = cost_for_run(run_dir, summary, parse_sheet(data.config["cost"], f"{run_dir / folder.RUN_CONFIG}: cost"))
    return data


