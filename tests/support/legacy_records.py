"""records.csv as the harness wrote it before records.parquet, for the tests of old folders."""

from __future__ import annotations

import csv
from pathlib import Path

from harness.results import folder
from harness.results.records import COLUMNS, read_records


def to_legacy_csv(run_dir: Path) -> list[str]:
    """Rewrites the folder's records.parquet as a legacy records.csv; returns its lines."""
    cols = read_records(run_dir).columns
    values = [cols[c].tolist() for c in COLUMNS]
    path = run_dir / folder.LEGACY_RECORDS
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows(zip(*values))
    (run_dir / folder.RECORDS).unlink()
    return path.read_text().splitlines()
