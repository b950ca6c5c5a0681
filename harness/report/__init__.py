"""Reports from a results folder alone: terminal, Markdown, HTML, JSON and per-request CSV/JSONL.

    load_run(DIR) -> RunData   everything a renderer needs, read and checked once
    write_report(DIR, fmt, out) -> the text, also written to `out` when given

Nothing here reads live state, so any report can be regenerated from a folder later.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from harness.errors import OutputError
from harness.records import RECORDS_FILE, read_records
from harness.report.breakdown import aggregate, aggregate_from_summary, backend_stages, rates
from harness.report.cost import cost_for_run, parse_sheet, read_cost
from harness.report_io import load_summary

FORMATS = ("terminal", "md", "html", "json", "csv", "jsonl")

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
        return (self.run_dir / RECORDS_FILE).exists()

    @cached_property
    def columns(self) -> dict[str, Any] | None:
        return read_records(self.run_dir).columns if self.has_records else None

    def require_records(self, what: str) -> dict[str, Any]:
        cols = self.columns
        if cols is None:
            raise OutputError(f"{self.run_dir} has no {RECORDS_FILE}: {what} needs the per-request records")
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


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise OutputError(f"{path} is not valid JSON (line {e.lineno}): the file is damaged") from e


def load_run(run_dir: Path, summary: dict[str, Any] | None = None) -> RunData:
    """`summary`: one already in hand (the run just wrote it); else read from the folder."""
    summary = load_summary(run_dir) if summary is None else summary
    missing = [k for k in REQUIRED_SECTIONS if k not in summary]
    if missing:
        raise OutputError(
            f"{run_dir / 'summary.json'} lacks section {', '.join(repr(m) for m in missing)}: it was cut off "
            "or edited by hand; rebuild it with harness.summary.write_summary(DIR, {}) or re-run the test"
        )
    config_path = run_dir / "run.yaml"
    config = yaml.safe_load(config_path.read_text()) if config_path.exists() else {}
    data = RunData(
        run_dir=run_dir,
        summary=summary,
        config=config or {},
        system=_read_json(run_dir / "system.json"),
        manifest=_read_json(run_dir / "manifest.json"),
    )
    data.cost = read_cost(run_dir)
    if data.cost is None and data.config.get("cost"):
        # The run carried a price sheet but no cost.json was written: price it now.
        data.cost = cost_for_run(run_dir, summary, parse_sheet(data.config["cost"], f"{config_path}: cost"))
    return data


def write_report(run_dir: Path, fmt: str, out: Path | None = None) -> str:
    """Render one non-terminal format; write it to `out` when given."""
    data = load_run(run_dir)
    if fmt == "md":
        from harness.report.markdown import render_markdown

        text = render_markdown(data)
    elif fmt == "html":
        from harness.report.html import render_html

        text = render_html(data)
    elif fmt == "json":
        from harness.report.export import report_json

        text = report_json(data)
    elif fmt in ("csv", "jsonl"):
        from harness.report.export import records_csv, records_jsonl

        text = records_csv(data) if fmt == "csv" else records_jsonl(data)
    else:
        raise OutputError(f"unknown report format {fmt!r}; formats: {', '.join(FORMATS)}")
    if out is not None:
        try:
            out.write_text(text)
        except OSError as e:
            raise OutputError(f"cannot write report {out}: {e.strerror}") from e
    return text
