"""The layer contracts of pyproject.toml ([tool.importlinter]) hold, and they can fail.

`lint-imports` runs on this tree, then on a copy with one back-import planted in each of
the contracts' directions: a contract that cannot fail would pin nothing. No two modules import
each other, lazily or not; a planted lazy back-import shows that check can fail too.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)

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


def import_circles(root: Path) -> list[tuple[str, str]]:
    """Pairs of modules of `harness` and `backends` under `root` that import each other,
    counting every import statement: at the top, inside a function (a lazy import is
    still a circle, hidden) and under TYPE_CHECKING."""
    modules: dict[str, Path] = {}
    for package in ("harness", "backends"):
        for path in (root / package).rglob("*.py"):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    imports: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = imports.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:  # `from pkg import module` names the module
                    target = f"{node.module}.{a.name}"
                    found.add(target if target in modules else node.module)
        found.discard(name)
    return sorted((a, b) for a in imports for b in imports[a] if a < b and a in imports.get(b, ()))


def test_no_two_modules_import_each_other() -> None:
    assert import_circles(ROOT) == []


def test_a_planted_lazy_back_import_is_a_circle(tmp_path: Path) -> None:
    copy = tmp_path / "tree"
    for name in ("harness", "backends"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "harness/run/sizing.py"  # the runner imports it; a pilot once imported the runner back
    target.write_text(target.read_text() + "\n\ndef _planted():\n    from harness.run import runner  # noqa\n")
    assert import_circles(copy) == [("harness.run.runner", "harness.run.sizing")]
