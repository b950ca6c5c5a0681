"""What a short run costs around its test, this tree beside another commit, in one run.

    python benchmarks/bench_startup.py [--against REV] [--rounds N]
    python benchmarks/bench_startup.py --bytecode [--rounds N]

A sweep, a capacity search, a repeat and most of the test suite are runs of a second or
less, so what each run pays before and after LoadGen's test is most of their time: the
`harness` command's imports, the child's, writing records.parquet and the summary.

Each round runs, for each tree in turn (the two sides next to each other, so a burst of the
shared machine falls on both):
1. `harness run --backend synthetic --scenario Offline` of 100 queries at zero service time
   (its test takes ~0.1 s): the command's wall time;
2. the same run with Python's import log on (PYTHONPROFILEIMPORTTIME), once, for counts
   that noise cannot move: modules imported by the command and its child, and whether
   pandas or matplotlib is among them.
`--against REV` (default HEAD: the working tree against its last commit) is checked out
with `git worktree` into a temporary folder and run by the same interpreter, with
PYTHONPATH set to each tree.
Prints the medians, the range, and the median of the rounds' ratios.

`--bytecode` compares one commit with itself instead: two worktrees of HEAD, one compiled
(`compileall`, as `make test` has Python do by unsetting PYTHONDONTWRITEBYTECODE) and one
never, both run with PYTHONDONTWRITEBYTECODE=1, as this machine class sets it. Its count
is the project's own modules each command compiles from source when nothing is cached.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ["run", "--backend", "synthetic", "--scenario", "Offline", "--set", "min_duration_s=0",
       "--set", "min_query_count=100", "--set", "service_time_ms=0"]


def command(tree: Path, out: Path, log_imports: bool = False) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if log_imports:
        env["PYTHONPROFILEIMPORTTIME"] = "1"
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "harness", *RUN, "--output-dir", str(out)], cwd=out.parent, env=env,
                          capture_output=True, text=True, timeout=300)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: harness run exited {proc.returncode}: {proc.stderr[-2000:]}")
    return took, proc.stderr


def imports(stderr: str) -> tuple[int, list[str], int]:
    """Modules imported by the command and its child, the heavy ones among them, and how
    many are the project's own (what PYTHONDONTWRITEBYTECODE leaves uncompiled)."""
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)$", stderr, re.M)
    heavy = sorted({n.split(".")[0] for n in names} & {"pandas", "matplotlib", "torch"})
    own = sum(1 for n in names if n.split(".")[0] in ("harness", "backends"))
    return len(names), heavy, own


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", default="HEAD", help="the other commit (default HEAD)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--bytecode", action="store_true", help="REV from source against REV compiled")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    trees = [work / "other"] + ([work / "compiled"] if args.bytecode else [])
    for tree in trees:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), args.against], check=True)
    try:
        if args.bytecode:
            os.environ["PYTHONDONTWRITEBYTECODE"] = "1"  # neither side writes: one stays uncompiled
            subprocess.run([sys.executable, "-m", "compileall", "-q", "harness", "backends"], cwd=trees[1], check=True,
                           stdout=subprocess.DEVNULL)
            sides = {"from source": trees[0], "compiled": trees[1]}
        else:
            sides = {"this tree": ROOT, args.against: trees[0]}
        walls: dict[str, list[float]] = {name: [] for name in sides}
        for r in range(args.rounds):
            for name, tree in sides.items():
                out = work / f"{r}-{name.replace(' ', '_').replace('~', '_')}"
                out.mkdir()
                walls[name].append(command(tree, out / "results")[0])
        print(f"`harness {' '.join(RUN)}`, {args.rounds} rounds, sides interleaved")
        print(f"{'side':<16}{'wall median':>12}{'range':>16}{'modules':>9}{'own':>5}  heavy modules")
        for name, tree in sides.items():
            out = work / f"log-{name.replace(' ', '_').replace('~', '_')}"
            out.mkdir()
            count, heavy, own = imports(command(tree, out / "results", log_imports=True)[1])
            w = walls[name]
            print(f"{name:<16}{statistics.median(w):>10.2f} s{min(w):>8.2f}-{max(w):.2f} s{count:>9}{own:>5}  "
                  f"{', '.join(heavy) or '-'}")
        ratios = [a / b for a, b in zip(*walls.values())]
        first, second = sides
        print(f"{first} / {second}: median {statistics.median(ratios):.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f})")
    finally:
        for tree in trees:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
