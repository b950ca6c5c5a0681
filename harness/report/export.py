"""Machine-readable exports: the report as JSON, the per-request records as CSV or JSONL.

Per-request exports add the stage times in ms (queue, service, generation, e2e), so a
spreadsheet can check that the stages sum to the end-to-end latency of each request.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import numpy as np

from harness.analysis.run_data import RunData
from harness.results.breakdown import stage_times_ns
from harness.results.records import COLUMNS

DERIVED = ("queue_ms", "service_ms", "generation_ms", "e2e_ms", "ttft_ms")
#: stamps a request may not have (no byte or token arrived): exported as empty/null, not 0
OPTIONAL_STAMPS = ("first_byte_ns", "first_token_ns")


def _rows(data: RunData) -> tuple[list[str], list[list[Any]]]:
    cols = data.require_records("a per-request export")
    stages = stage_times_ns(cols)
    header = list(COLUMNS) + list(DERIVED)
    n = len(cols["status"])
    ints = [cols[c].tolist() for c in COLUMNS if c not in ("status", "error")]
    first = cols["first_token_ns"]
    ttft = np.where(first > 0, (first - cols["issue_ns"]) / 1e6, np.nan)  # from issue, as summary's TTFT
    derived = [(stages[k.removesuffix("_ms")] / 1e6).tolist() for k in DERIVED if k != "ttft_ms"]
    derived.append([None if np.isnan(v) else float(v) for v in ttft])
    ints = [[None if (c in OPTIONAL_STAMPS and v == 0) else v for v in vals]
            for c, vals in zip((c for c in COLUMNS if c not in ("status", "error")), ints, strict=True)]
    status, error = cols["status"].tolist(), cols["error"].tolist()
    rows = [[*(c[i] for c in ints), status[i], error[i], *(d[i] for d in derived)] for i in range(n)]
    return header, rows


def records_csv(data: RunData) -> str:
    header, rows = _rows(data)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def records_jsonl(data: RunData) -> str:
    header, rows = _rows(data)
    return "".join(json.dumps(dict(zip(header, row))) + "\n" for row in rows)


def _plain(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"{type(v).__name__} is not JSON serializable")


def report_json(data: RunData) -> str:
    """summary.json plus what the report derives from the folder: breakdown, rates, cost."""
    doc = {
        "summary": data.summary,
        "breakdown": data.breakdown,
        "rates": data.rates,
        "cost": data.cost,
        "system": data.system,
        "manifest": data.manifest,
    }
    return json.dumps(doc, indent=2, default=_plain)
