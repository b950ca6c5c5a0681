"""Records at MLPerf scale: time and memory of a run, its summary, check and report by record count.

    python benchmarks/bench_records.py [--counts 1000000,10000000] [--tree DIR ...]

For each count, one real `harness run` (synthetic backend, Offline, zero service time, one
worker, max_batch 256: as many samples a second as LoadGen issues) in a temporary folder,
then, each in a fresh process: the summary rebuilt from the folder (`build_summary`, what the
parent does after the child), `harness check --no-dataset` and `harness report --format html`.
Printed side by side per count: wall seconds, peak memory of each process (the parent and
the child of the run polled from /proc VmHWM every 20 ms; the others from wait4), the records
file's bytes per sample, and the memory slope per 10^6 records between the first two counts.
`--tree DIR` adds another checkout (e.g. a `git worktree` of an earlier commit) as columns.

The synthetic run's times repeat from sample to sample and compress to almost nothing; the
row "bytes/sample, random times" writes records with Poisson issue times, lognormal service
times, failures and token counts (this tree's writer) for a figure of real-looking entropy.
Goals (docs/records.md): memory <= 64 MiB per 10^6 records in every process the harness
adds (LoadGen's own per-sample memory, shown as raw LoadGen's, is not the harness's),
summary/check/report of 10^7 records each under 10 s, <= 20 bytes per sample on disk.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POLL_S = 0.02

SUMMARY_SCRIPT = """
import resource, sys, time
from pathlib import Path
from harness.results.summary import build_summary
t = time.perf_counter()
build_summary(Path(sys.argv[1]), {"status": "complete"})
print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def _hwm_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def run_polled(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, float]:
    """(wall s, the parent's peak MiB, the largest child's peak MiB) of a harness run."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    parent = child = 0.0
    while proc.poll() is None:
        parent = max(parent, _hwm_mib(proc.pid) or 0.0)
        for c in _children(proc.pid):
            child = max(child, _hwm_mib(c) or 0.0)
        time.sleep(POLL_S)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (rc {proc.returncode}):\n{proc.stderr.read()[-2000:]}")
    return wall, parent, child


def run_measured(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, str]:
    """(wall s, peak MiB, stdout) of a command with no children of its own."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    out, err = proc.stdout.read(), proc.stderr.read()
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (rc {rc}):\n{err[-2000:]}")
    return wall, usage.ru_maxrss / 1024, out


def measure(tree: Path, n: int, work: Path) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(tree)
    out = work / "results"
    cmd = [sys.executable, "-m", "harness", "run", "--backend", "synthetic", "--scenario", "Offline",
           "--set", "workers=1", "--set", "max_batch=256", "--set", "min_duration_s=0",
           "--set", f"min_query_count={n}", "--set", "offline_expected_qps=1", "--output-dir", str(out)]
    fig: dict[str, float] = {}
    # Run from the temporary folder: `python -m`/`-c` put the working directory first on
    # sys.path, which would import this checkout's harness whatever PYTHONPATH says.
    fig["run s"], fig["run parent MiB"], fig["run child MiB"] = run_polled(cmd, env, work)
    (run_dir,) = out.iterdir()
    records = next(p for p in run_dir.iterdir() if p.name.startswith("records."))
    fig["records B/sample"] = records.stat().st_size / n
    _, _, text = run_measured([sys.executable, "-c", SUMMARY_SCRIPT, str(run_dir)], env, work)  # it times itself
    fig["summary s"], fig["summary MiB"] = (float(v) for v in text.split())
    fig["check s"], fig["check MiB"], _ = run_measured(
        [sys.executable, "-m", "harness", "check", "--no-dataset", str(run_dir)], env, work)
    fig["report s"], fig["report MiB"], _ = run_measured(
        [sys.executable, "-m", "harness", "report", str(run_dir), "--format", "html"], env, work)
    return fig


def raw_loadgen(n: int) -> float:
    """Raw LoadGen's peak MiB for n samples with an inline null SUT (benchmarks/raw_loadgen.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(BENCH_MIN_DURATION_S="0", BENCH_MIN_QUERY_COUNT=str(n))
    with tempfile.TemporaryDirectory(prefix="bench-rec-raw-") as tmp:
        _, mib, _ = run_measured([sys.executable, str(ROOT / "benchmarks" / "raw_loadgen.py"), "Offline", "1", tmp], env,
                                 Path(tmp))
    return mib


def random_records_bytes(n: int) -> float:
    """Bytes per sample of records with real-looking entropy, written by this tree's writer."""
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from harness.results.records import COLUMNS, write_records

    rng = np.random.default_rng(0)
    issue = 10**12 + np.cumsum(rng.exponential(1e9 / 5000, n)).astype(np.int64)  # Poisson, 5,000/s
    dispatch = issue + rng.exponential(50_000, n).astype(np.int64)
    first = dispatch + rng.lognormal(np.log(2e7), 0.5, n).astype(np.int64)
    tokens = rng.integers(1, 512, n)
    complete = first + tokens * rng.lognormal(np.log(1e7), 0.2, n).astype(np.int64)
    failed = rng.random(n) < 0.01
    cols = {
        "query_id": 140_000_000_000_000 + rng.permutation(n) * 64,
        "sample_index": rng.integers(0, 24_576, n),
        "issue_ns": issue, "dispatch_ns": dispatch, "first_byte_ns": first - 1000, "first_token_ns": first,
        "complete_ns": complete, "n_tokens": tokens, "input_tokens": rng.integers(16, 2048, n),
        "batch_id": np.arange(n), "worker": rng.integers(0, 4, n),
        "status": np.where(failed, "error", "ok"),
        "error": np.where(failed, "http_500: Internal Server Error", ""),
    }
    assert set(cols) == set(COLUMNS)
    with tempfile.TemporaryDirectory(prefix="bench-rec-rand-") as tmp:
        path = write_records(Path(tmp), cols)
        return path.stat().st_size / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default="1000000,10000000", help="record counts, comma-separated (at least two)")
    ap.add_argument("--tree", action="append", type=Path, default=[], help="another checkout's harness, as columns")
    args = ap.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    trees = [("this tree", ROOT)] + [(str(t), t.resolve()) for t in args.tree]
    cols: list[tuple[str, int, dict[str, float]]] = []
    for n in counts:
        for name, tree in trees:
            with tempfile.TemporaryDirectory(prefix="bench-rec-") as tmp:
                fig = measure(tree, n, Path(tmp))
            cols.append((name, n, fig))
            print(f"measured {name} at {n:,} records: " + json.dumps({k: round(v, 2) for k, v in fig.items()}),
                  file=sys.stderr, flush=True)
    raw = {n: raw_loadgen(n) for n in counts}
    rows = list(cols[0][2])
    head = ["figure"] + [f"{name[:14]} {n / 1e6:g}M" for name, n, _ in cols]
    slopes = [name for name, _ in trees] if len(counts) >= 2 else []
    head += [f"{s[:14]} /1M" for s in slopes]
    print(f"load average at the end: {os.getloadavg()[0]:.2f}; cores: {os.cpu_count()}")
    widths = [max(22, len(head[0]))] + [max(14, len(h)) for h in head[1:]]
    print("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths))))

    def slope(tree: str, row: str) -> str:
        a = next(f[row] for name, n, f in cols if name == tree and n == counts[0])
        b = next(f[row] for name, n, f in cols if name == tree and n == counts[1])
        return f"{(b - a) / (counts[1] - counts[0]) * 1e6:.1f}" if row.endswith("MiB") else ""

    for row in rows:
        cells = [f"{f[row]:.2f}" for _, _, f in cols] + [slope(s, row) for s in slopes]
        print("  ".join([row.ljust(widths[0])] + [c.rjust(w) for c, w in zip(cells, widths[1:])]))
    raw_cells = [f"{raw[n]:.0f}" for _, n, _ in cols]
    raw_slope = [f"{(raw[counts[1]] - raw[counts[0]]) / (counts[1] - counts[0]) * 1e6:.1f}"] * len(slopes)
    print("  ".join(["raw LoadGen MiB".ljust(widths[0])] + [c.rjust(w) for c, w in zip(raw_cells + raw_slope, widths[1:])]))
    print(f"bytes/sample, random times ({counts[0]:,} records, this tree): {random_records_bytes(counts[0]):.2f}")


if __name__ == "__main__":
    main()
