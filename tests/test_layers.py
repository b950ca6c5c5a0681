"""The layer contracts of pyproject.toml ([tool.importlinter]) hold, and they can fail.

`lint-imports` runs on this tree, then on a copy with one back-import planted in each of
the contracts' directions: a contract that cannot fail would pin nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).parent / "lint-imports"


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH first: grimp must build the graph of the copy, not of the installed tree.
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT)], cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_the_tree_keeps_every_layer_contract() -> None:
    out = lint(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "3 kept, 0 broken" in out.stdout


@pytest.mark.parametrize(
    ("module", "planted", "contract"),
    [
        ("harness/results/folder.py", "import harness.report.terminal", "harness layers import downward only"),
        ("harness/data/datasets.py", "import harness.config.run_config", "harness layers import downward only"),
        ("backends/synthetic.py", "import harness.results.summary", "backends import only the contract"),
        ("harness/report/html.py", "import harness.run.runner", "folder readers never import the child"),
    ],
)
def test_a_planted_back_import_breaks_its_contract(tmp_path: Path, module: str, planted: str, contract: str) -> None:
    copy = tmp_path / "tree"
    copy.mkdir()
    for name in ("harness", "backends"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    target = copy / module
    target.write_text(target.read_text() + f"\n{planted}  # planted by tests/test_layers.py\n")
    out = lint(copy)
    assert out.returncode != 0, out.stdout
    assert f"{contract}" in out.stdout and "BROKEN" in out.stdout, out.stdout
    assert module.removesuffix(".py").replace("/", ".") in out.stdout, out.stdout
