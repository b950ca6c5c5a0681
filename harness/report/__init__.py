"""Every renderer of a results folder: terminal, Markdown, HTML, JSON and per-request CSV/JSONL,
plus the views of compare, repeat aggregates and parity.

    write_report(DIR, fmt, out) -> the text, also written to `out` when given

Renderers read a folder through harness.analysis.run_data.load_run only, so any report can
be regenerated from a folder later.
"""

from __future__ import annotations

from pathlib import Path

from harness.analysis.run_data import load_run
from harness.errors import OutputError

FORMATS = ("terminal", "md", "html", "json", "csv", "jsonl")


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
    return write_out(text, out)


def write_out(text: str, out: Path | None) -> str:
    """`text`, also written to `out` when given (one clear error when it cannot be)."""
    if out is not None:
        try:
            out.write_text(text)
        except OSError as e:
            raise OutputError(f"cannot write report {out}: {e.strerror}") from e
    return text
