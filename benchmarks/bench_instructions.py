"""Instructions per sample that noise cannot move: the harness beside raw LoadGen.

    python benchmarks/bench_instructions.py [--scenarios Offline,Server] [--counts 22000,88000]
                                            [--repeats N] [--tree DIR ...]

Each side runs whole under `valgrind --tool=callgrind --trace-children=yes` (the harness:
`python -m harness run`, parent, child and every process they start; raw: LoadGen with an
inline null SUT, benchmarks/raw_loadgen.py) at two sample counts. The slope between them,
(I(n2) - I(n1)) / (n2 - n1), is the cost of one more sample end to end (test, records,
recovery, summary) with start-up and imports cancelled out. Instruction counts repeat for
the same binary and inputs whatever else the machine does, so the figures hold on a busy
machine where a wall-clock ratio swings, nearly: whatever waits by spinning (OpenBLAS's
threads after a BLAS call, ~40-57 M instructions a process here) counts more the longer
it waits, and one harness run at 22,000 samples, beside a full test suite, counted 1.0 G
more than a repeat of it (a slope of 738 a sample instead of ~16,400).
Such work only ever adds, so `--repeats N` runs every count N times and keeps the least,
with the spread printed. `--tree DIR` adds the harness of another checkout
(e.g. a `git worktree` of an earlier commit) as a column, for before/after comparisons.

Server runs raw LoadGen twice, with LoadGen's defaults (the ratio's side) and with
server_coalesce_queries (the harness's Server default), at a target far above what valgrind lets either side sustain, so both issue
and serve as fast as they can; LoadGen sleeps between scheduled queries, it does not spin.
The synthetic backend has zero service time and one worker (max_batch 256 in Offline).
Slow: ~1.5 min a harness run under valgrind on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def instructions(cmd: list[str], env: dict[str, str], workdir: Path) -> int:
    """Instructions of `cmd` and every process it starts, summed over callgrind's outputs."""
    out = workdir / "cg"
    out.mkdir()
    full = ["valgrind", "--tool=callgrind", "--trace-children=yes", f"--callgrind-out-file={out}/callgrind.%p", *cmd]
    proc = subprocess.run(full, env=env, cwd=workdir, capture_output=True, text=True)
    if proc.returncode not in (0, 1):  # 1: a negative verdict (an INVALID run still counts)
        raise SystemExit(f"{' '.join(cmd)} failed under valgrind (rc {proc.returncode}):\n{proc.stderr[-2000:]}")
    total = 0
    for f in out.iterdir():
        for line in f.read_text(errors="replace").splitlines():
            if line.startswith(("summary:", "totals:")):
                total += int(line.split()[1])
                break
    return total


def harness_cmd(scenario: str, n: int, outdir: Path) -> list[str]:
    common = ["--backend", "synthetic", "--scenario", scenario, "--set", "workers=1", "--set", "min_duration_s=0",
              "--set", f"min_query_count={n}", "--output-dir", str(outdir)]
    if scenario == "Offline":
        return [sys.executable, "-m", "harness", "run", *common, "--set", "max_batch=256", "--set", "offline_expected_qps=1"]
    return [sys.executable, "-m", "harness", "run", *common, "--set", "target_qps=1000000", "--set", "target_latency_ms=100000"]


def count(side: str, scenario: str, n: int, tree: Path | None) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-instr-") as tmp:
        work = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        if side in ("raw", "raw-coalesced"):
            env.update(BENCH_MIN_DURATION_S="0", BENCH_MIN_QUERY_COUNT=str(n))
            env["BENCH_COALESCE"] = "1" if side == "raw-coalesced" else "0"
            value = "1" if scenario == "Offline" else "1000000"
            if scenario == "Server":
                env["BENCH_TARGET_LATENCY_MS"] = "100000"
            cmd = [sys.executable, str(ROOT / "benchmarks" / "raw_loadgen.py"), scenario, value, str(work / "lg")]
        else:
            env["PYTHONPATH"] = str(tree or ROOT)  # that tree's harness, child included
            cmd = harness_cmd(scenario, n, work / "results")
        return instructions(cmd, env, work)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default="Offline,Server")
    ap.add_argument("--counts", default="22000,88000", help="two sample counts; the slope is taken between them")
    ap.add_argument("--repeats", type=int, default=1, help="runs of every count; the least is kept")
    ap.add_argument("--tree", action="append", type=Path, default=[], help="another checkout's harness, as a column")
    args = ap.parse_args()
    n1, n2 = (int(c) for c in args.counts.split(","))
    base_sides = [("raw", None), ("harness", None), *((f"harness@{t.name}", t.resolve()) for t in args.tree)]
    print(f"instructions per sample, slope between {n1:,} and {n2:,} samples (callgrind, all processes)")
    for scenario in args.scenarios.split(","):
        # Server: raw LoadGen both ways, since the harness's Server coalesces by default
        # (raw: LoadGen defaults, the goal's side; raw-coalesced: server_coalesce_queries)
        sides = [*base_sides[:1], *([("raw-coalesced", None)] if scenario == "Server" else []), *base_sides[1:]]
        print(f"{'scenario':<10}" + "".join(f"{name:>18}" for name, _ in sides) + f"{'harness/raw':>13}" + "   goal")
        slopes = {}
        # Interleaved by count, so a slow stretch of the machine cannot favour a side:
        # not that it would move a count, but the whole run finishes sooner this way.
        totals: dict[str, list[int]] = {name: [] for name, _ in sides}
        spreads: dict[str, list[int]] = {name: [] for name, _ in sides}
        for n in (n1, n2):
            for name, tree in sides:
                runs = [count(name.split("@")[0], scenario, n, tree) for _ in range(args.repeats)]
                totals[name].append(min(runs))
                spreads[name].append(max(runs) - min(runs))
        for name, (a, b) in totals.items():
            slopes[name] = (b - a) / (n2 - n1)
        ratio = slopes["harness"] / slopes["raw"] if slopes["raw"] else float("nan")
        row = f"{scenario:<10}" + "".join(f"{slopes[name]:>18,.0f}" for name, _ in sides) + f"{ratio:>13.2f}"
        print(row + f"   <=2.00 {'ok' if ratio <= 2 else 'ABOVE'}", flush=True)
        for name, (a, b) in totals.items():
            spread = (f"; the least of {args.repeats}, the most {spreads[name][0]:,} and {spreads[name][1]:,} more"
                      if args.repeats > 1 else "")
            print(f"  ({name}: {a:,} instructions at {n1:,} samples, {b:,} at {n2:,}{spread})", flush=True)


if __name__ == "__main__":
    main()
