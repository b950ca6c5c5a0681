"""Do two generative runs give the same answers? Two finished accuracy-run folders, compared.

Each side is a results folder of an AccuracyOnly (or SubmissionRun) run of a streaming
backend. Per sample (LoadGen's qsl_idx, the dataset's index) we take the side's first
answer, as the official scripts do:

    text   tokens.jsonl's "text" (the child keeps every answer's text in accuracy mode;
           a failed request counts as no answer)
    ids    LoadGen's accuracy log, int32, first entry per qsl_idx; a side whose log holds no
           entry has no ids, and the ids are then not compared (said so, never guessed)

and report: the share of samples whose texts are equal; the share whose first N ids are
equal (both sides' ids); ROUGE-1/2/L/Lsum of B's texts against A's (A is the reference,
MLCommons' scorer); and for each disagreeing sample the first id and the first character
where the two part. A sample that failed or is missing on either side disagrees: there is
nothing to agree with. The verdict is on the texts: with greedy decoding both sides should
match exactly, so the default threshold is 1.0.

The two folders must have answered the same prompts: the datasets' fingerprints (child.json,
and references.json when both have it) are compared first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis.accuracy_run import accuracy_run_label
from harness.errors import ConfigError, DatasetError
from harness.results import folder
from harness.results.loadgen_log import read_accuracy_log
from harness.results.scoring.accuracy_log import dedup_entries, first_per_qsl_idx, parse_entries
from harness.results.text_accuracy import ROUGE_FIGURES, answers_from_tokens

EXCERPT_BEFORE, EXCERPT_AFTER = 24, 40


@dataclass(frozen=True)
class SideAnswers:
    """One folder's answers by sample index: text (None when the request failed) and ids."""

    run_dir: Path
    label: str
    dataset: dict[str, Any]
    texts: dict[int, str | None]
    ids: dict[int, tuple[int, ...]] | None  # None: the accuracy log holds no entry


@dataclass(frozen=True)
class Divergence:
    """Where one sample's two answers part."""

    sample: int
    reason: str  # "text differs", "failed on A", "missing on B", ...
    char: int | None  # first differing character of the texts
    token: int | None  # first differing position of the id sequences; None: ids not compared or equal
    excerpt_a: str
    excerpt_b: str


@dataclass(frozen=True)
class TextParityResult:
    run_a: str
    run_b: str
    label_a: str
    label_b: str
    dataset: dict[str, Any]
    samples: int  # samples answered on either side
    text_matches: int
    text_match_rate: float
    first_ids: int
    ids_compared: bool
    ids_note: str | None  # why the ids were not compared
    ids_matches: int | None
    ids_match_rate: float | None
    rouge: dict[str, float]  # B against A, x 100
    failed_a: int
    failed_b: int
    min_text_match: float
    divergences: list[Divergence] = field(default_factory=list)

    @property
    def agree(self) -> bool:
        return self.text_match_rate >= self.min_text_match

    @property
    def first_divergence(self) -> Divergence | None:
        return self.divergences[0] if self.divergences else None


def read_side(run_dir: Path) -> SideAnswers:
    """A folder's answers; a folder that is not a finished generative accuracy run is one line."""
    label = accuracy_run_label(run_dir, "text parity compares the answers of accuracy runs")
    if not (run_dir / folder.TOKENS).is_file():
        raise ConfigError(f"{run_dir} has no {folder.TOKENS}: not a generative backend's run (parity of tensor "
                          "backends runs both models itself: --backend-a/--backend-b)")
    child = folder.read_json(run_dir, folder.CHILD, required=True) or {}
    dataset = child.get("dataset")
    if not isinstance(dataset, dict) or not isinstance(dataset.get("count"), int):
        raise ConfigError(f"{run_dir / folder.CHILD} records no dataset: the run did not finish")
    answers = answers_from_tokens(folder.read_jsonl(run_dir, folder.TOKENS), dataset["count"], run_dir / folder.TOKENS)
    texts = {index: (None if failed else text) for index, (_, text, _, failed) in
             first_per_qsl_idx((a[0], a) for a in answers)}
    if not texts:
        raise ConfigError(f"{run_dir}: no answer was recorded in {folder.TOKENS}: nothing to compare")
    raw = read_accuracy_log(run_dir)
    ids = None
    if raw:
        entries = dedup_entries(parse_entries(raw, dtype="int32", source=str(run_dir / folder.LOADGEN_ACCURACY)))
        ids = {e.qsl_idx: e.token_ids for e in entries}
    return SideAnswers(run_dir, label, dataset, texts, ids)


def _same_dataset(a: SideAnswers, b: SideAnswers) -> None:
    fa, fb = a.dataset.get("sha256"), b.dataset.get("sha256")
    if fa != fb or a.dataset.get("count") != b.dataset.get("count"):
        raise DatasetError(
            f"the two runs answered different prompts: A {a.dataset.get('path') or a.dataset.get('kind')} "
            f"({a.dataset.get('count')} samples, sha256 {str(fa)[:12]}), B {b.dataset.get('path') or b.dataset.get('kind')} "
            f"({b.dataset.get('count')} samples, sha256 {str(fb)[:12]}); parity needs the same dataset on both sides"
        )
    ra = (folder.read_json(a.run_dir, folder.REFERENCES) or {}).get("dataset")
    rb = (folder.read_json(b.run_dir, folder.REFERENCES) or {}).get("dataset")
    if ra and rb and ra.get("sha256") != rb.get("sha256"):
        raise DatasetError(f"the two runs' references come from different files: A {ra.get('path')}, B {rb.get('path')}")


def _common_prefix(x: Any, y: Any) -> int:
    n = min(len(x), len(y))
    return next((i for i in range(n) if x[i] != y[i]), n)


def _excerpt(text: str | None, at: int) -> str:
    if text is None:
        return "(no answer)"
    start = max(0, at - EXCERPT_BEFORE)
    piece = text[start:at + EXCERPT_AFTER].replace("\n", "⏎")
    return ("…" if start else "") + piece + ("…" if at + EXCERPT_AFTER < len(text) else "")


def _divergence(i: int, a: SideAnswers, b: SideAnswers) -> Divergence | None:
    ta, tb = a.texts.get(i), b.texts.get(i)
    if ta is not None and ta == tb:
        return None
    missing = [f"{'missing' if i not in s.texts else 'failed'} on {w}" for w, s in (("A", a), ("B", b)) if s.texts.get(i) is None]
    char = _common_prefix(ta, tb) if ta is not None and tb is not None else None
    token = None
    if a.ids is not None and b.ids is not None and char is not None:
        ia, ib = a.ids.get(i, ()), b.ids.get(i, ())
        token = _common_prefix(ia, ib) if ia != ib else None
    at = char or 0
    return Divergence(i, ", ".join(missing) or "text differs", char, token, _excerpt(ta, at), _excerpt(tb, at))


def _rouge(a: SideAnswers, b: SideAnswers, samples: list[int]) -> dict[str, float]:
    from harness.results.scoring.rouge import score_rouge

    result = score_rouge([b.texts.get(i) or "" for i in samples], [a.texts.get(i) or "" for i in samples])
    return {k: float(getattr(result, k)) for k in ROUGE_FIGURES}


def compare_sides(a: SideAnswers, b: SideAnswers, *, first_ids: int = 32, min_text_match: float = 1.0) -> TextParityResult:
    if first_ids < 1:
        raise ConfigError(f"--first-ids must be >= 1 (got {first_ids})")
    if not 0 <= min_text_match <= 1:
        raise ConfigError(f"--min-text-match must be between 0 and 1 (got {min_text_match})")
    _same_dataset(a, b)
    samples = sorted(set(a.texts) | set(b.texts))
    divergences = [d for i in samples if (d := _divergence(i, a, b)) is not None]
    ids_note = None
    ids_matches = None
    if a.ids is None or b.ids is None:
        ids_note = "side " + " and ".join(w for w, s in (("A", a), ("B", b)) if s.ids is None) + \
            f" logged no token ids ({folder.LOADGEN_ACCURACY} is empty): ids not compared"
    else:
        ids_matches = sum(1 for i in samples
                          if a.ids.get(i) and b.ids.get(i) and a.ids[i][:first_ids] == b.ids[i][:first_ids])
    return TextParityResult(
        run_a=str(a.run_dir), run_b=str(b.run_dir), label_a=a.label, label_b=b.label,
        dataset={k: a.dataset.get(k) for k in ("kind", "path", "set", "count", "sha256") if k in a.dataset},
        samples=len(samples),
        text_matches=len(samples) - len(divergences),
        text_match_rate=(len(samples) - len(divergences)) / len(samples),
        first_ids=first_ids,
        ids_compared=ids_matches is not None,
        ids_note=ids_note,
        ids_matches=ids_matches,
        ids_match_rate=None if ids_matches is None else ids_matches / len(samples),
        rouge=_rouge(a, b, samples),
        failed_a=sum(1 for i in samples if a.texts.get(i) is None),
        failed_b=sum(1 for i in samples if b.texts.get(i) is None),
        min_text_match=min_text_match,
        divergences=divergences,
    )


def compare_folders(run_a: Path, run_b: Path, *, first_ids: int = 32, min_text_match: float = 1.0,
                    min_cosine: float = 0.999) -> Any:
    """`harness parity --run-a DIR --run-b DIR`: the two folders only, nothing run. Runs that
    gave vectors (embeddings) are compared by cosine (harness.analysis.vector_parity)."""
    from harness.analysis.vector_parity import compare_vector_folders, is_vector_run

    if is_vector_run(run_a) or is_vector_run(run_b):
        return compare_vector_folders(run_a, run_b, min_cosine=min_cosine)
    return compare_sides(read_side(run_a), read_side(run_b), first_ids=first_ids, min_text_match=min_text_match)


def as_dict(result: TextParityResult) -> dict[str, Any]:
    """The result for --json: plain Python values, the verdict and the first divergence included."""
    from dataclasses import asdict

    if not isinstance(result, TextParityResult):  # vectors: harness.analysis.vector_parity
        return {**asdict(result), "agree": result.agree}
    first = result.first_divergence
    return {**asdict(result), "agree": result.agree, "first_divergence": asdict(first) if first else None}
