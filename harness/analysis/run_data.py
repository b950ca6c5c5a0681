"""One results folder read once, for the verbs and the renderers: `load_run(DIR) -> RunData`.

Files are read through harness.results.folder (one rule for missing or damaged files);
the per-request records load on first use, as they can hold millions of rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from harness.analysis.cost import cost_for_run, parse_sheet, read_cost
from harness.errors import OutputError, ResultsError
from harness.results import folder
from harness.results.breakdown import aggregate, aggregate_from_summary, backend_stages, rates
from harness.results.records import read_records
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
        return (self.run_dir / folder.RECORDS).exists()

    @cached_property
    def columns(self) -> dict[str, Any] | None:
        return read_records(self.run_dir).columns if self.has_records else None

    def require_records(self, what: str) -> dict[str, Any]:
        cols = self.columns
        if cols is None:
            raise OutputError(f"{self.run_dir} has no {folder.RECORDS}: {what} needs the per-request records")
        return cols

    @cached_property
    def breakdown(self) -> dict[str, Any] | None:
        # A non-streaming run's breakdown is in summary.json already; its records.csv can
        # hold millions of rows (tens of seconds to read), so read it only when needed.
        out = aggregate_from_summary(self.summary)
        if out is None:
            cols = self.columns
            if cols is None or not len(cols["status"]):
                return None
            out = aggregate(cols)
        out["backend_stages"] = backend_stages(self.run_dir)
        return out

    @cached_property
    def rates(self) -> dict[str, Any]:
        return rates(self.summary)


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
        config=folder.read_run_config(run_dir, required=False) or {},
        system=folder.read_json(run_dir, folder.SYSTEM) or {},
        manifest=folder.read_json(run_dir, folder.MANIFEST) or {},
    )
    data.cost = read_cost(run_dir)
    if data.cost is None and data.config.get("cost"):
        # The run carried a price sheet but no cost.json was written: price it now.
        data.cost = cost_for_run(run_dir, summary, parse_sheet(data.config["cost"], f"{run_dir / folder.RUN_CONFIG}: cost"))
    return data


