"""`harness parity` for generative backends: each side as a real run, then the two folders compared.

Both sides run as ordinary harness runs (harness.run.runner.run, one LoadGen test each) in
AccuracyOnly mode, Offline, on the same prompt dataset, one after the other so they never
share the machine. Both folders are kept, so what each side measured (its accuracy log,
tokens, summary) is there to read after the comparison; the comparison itself reads only
the folders (harness.analysis.text_parity), as `--run-a/--run-b` does.
"""

from __future__ import annotations

from pathlib import Path

from backends.base import STREAMING_KINDS
from harness.analysis.text_parity import TextParityResult, compare_folders
from harness.analysis.vector_parity import VectorParityResult
from harness.config import registry
from harness.config.run_config import RunConfig
from harness.errors import ConfigError, HarnessError, RunError
from harness.run import runner
from harness.run.parity import Side


def both_streaming(a: Side, b: Side) -> bool:
    """True for two streaming backends, False for two tensor ones; a mix is a ConfigError."""
    kinds = {which: registry.get(side.backend).kind for which, side in (("A", a), ("B", b))}
    streaming = {which: kind in STREAMING_KINDS for which, kind in kinds.items()}
    if streaming["A"] != streaming["B"]:
        what = {w: f"{'streaming' if s else 'tensor'} (kind {kinds[w]})" for w, s in streaming.items()}
        raise ConfigError(
            f"parity compares like with like: side A's backend {a.backend!r} is {what['A']}, side B's "
            f"{b.backend!r} is {what['B']}; compare two tensor backends (outputs) or two streaming ones (answers)"
        )
    return streaming["A"]


def run_side(side: Side, which: str, dataset: str, seed: int, output_dir: Path) -> Path:
    """One side's accuracy run; its folder, or the run's error naming the side."""
    config = RunConfig(name=f"parity-{which.lower()}", backend=side.backend, model=side.model,
                       backend_options=side.options, dataset=dataset, scenario="Offline", mode="AccuracyOnly", seed=seed)
    try:
        outcome = runner.run(config, output_dir)
    except HarnessError as e:
        raise type(e)(f"side {which} ({side.backend}): {e}") from e
    if outcome.summary.get("status") != "complete":
        raise RunError(f"side {which} ({side.backend}): the run did not finish "
                       f"({outcome.summary.get('incomplete_reason')}); its folder: {outcome.run_dir}")
    return outcome.run_dir


def run_text_parity(
    a: Side, b: Side, *, dataset: str, output_dir: Path, seed: int = 0, first_ids: int = 32, min_text_match: float = 1.0,
    min_cosine: float = 0.999,
) -> TextParityResult | VectorParityResult:
    """Run A, then B, on the same prompts, and compare their answers (or, for embeddings,
    their vectors by cosine)."""
    if not 0 <= min_text_match <= 1 or first_ids < 1:  # before two runs, not after them
        raise ConfigError(f"--min-text-match must be in [0, 1] and --first-ids >= 1 (got {min_text_match}, {first_ids})")
    run_a = run_side(a, "A", dataset, seed, output_dir)
    run_b = run_side(b, "B", dataset, seed, output_dir)
    return compare_folders(run_a, run_b, first_ids=first_ids, min_text_match=min_text_match, min_cosine=min_cosine)
