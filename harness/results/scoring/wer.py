"""Word error rate as MLPerf's whisper benchmark scores it, for transcripts.

What MLCommons' speech2text/accuracy_eval.py does (read at mlcommons/inference commit
b66003e10e2db4b8c36a448b0545ec90fcc6e9e9; behaviour mirrored, code not copied):

1. (whisper only) The reference SUT logs each transcript as the indices of its characters in
   a 28-label alphabet (space, a-z, apostrophe) after lower-casing it, so every other
   character is dropped (reference_SUT.py); the references keep the characters of the
   evaluation's 45 labels (manifest.py parse_transcript). `mlperf_hypothesis` and
   `mlperf_reference` do the same.
2. Both texts go through Whisper's EnglishTextNormalizer (openai-whisper's
   whisper/normalizers/english.py), then are split on whitespace.
3. helpers.py compute_wer_with_concatenation: walking both word lists, a reference run of up
   to 3 words written as one hypothesis word (or the other way round) is one matched token;
   the Levenshtein distance of the two token lists is the sample's errors, its reference's
   word count its words.
4. WER = sum of errors / sum of words over the scored samples; accuracy = 100 - WER %.

Accuracy mode: the reference SUT logs each transcript to mlperf_log_accuracy.json as those
label indices, int64 (`array.array('q', ...)`), and accuracy_eval.py turns an entry back into
text by indexing its 45 labels with them (legacy_helpers.py __gather_predictions joins the
labels), the first 28 of which are the SUT's. `transcript_labels` makes that entry of a
transcript, `labels_transcript` reads it back as the script does, so an accuracy log of
this harness decodes, by the script or here, to the transcript the reference SUT would log.

The normalizer is the PyPI package `whisper-normalizer` (openai-whisper's normalizers as a
package of their own, without torch). Its English normalizer (0.1.15) has four replacers that
openai-whisper's lacks ("kinda", "sorta", "dunno", "cause"): they are taken out here, so that
the text is normalized as MLPerf's script does (tests/data/test_audio.py holds a case of
them; the rest of the two packages' English rules compare equal). The Levenshtein
distance is rapidfuzz's, on word lists (jiwer's engine; jiwer.wer itself would differ by
step 3's concatenation rule).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

from harness.errors import ConfigError

INSTALL_HINT = "pip install 'loadgen-harness[speech]'"
#: reference_SUT.py's labels, in its order: a logged transcript is their indices
SUT_LABELS = " abcdefghijklmnopqrstuvwxyz'"
#: accuracy_eval.py's labels, in its order (the SUT's first): what a reference keeps, and
#: what a logged index decodes to
EVAL_LABELS = SUT_LABELS + "0123456789$¢£€%+-"
_SUT_INDEX = {c: i for i, c in enumerate(SUT_LABELS)}
_EVAL_SET = frozenset(EVAL_LABELS)
#: the numpy dtype of a logged transcript: accuracy_eval.py's default `--output_dtype int64`
LABELS_DTYPE = "<i8"
#: whisper-normalizer's replacers that openai-whisper's EnglishTextNormalizer does not have
_NOT_IN_WHISPER = (r"\bkinda\b", r"\bsorta\b", r"\bdunno\b", r"\bcause\b")


@cache
def normalizer() -> Callable[[str], str]:
    """Whisper's English text normalizer, as openai-whisper has it (built once: it compiles
    its spelling table and rules)."""
    try:
        from whisper_normalizer.english import EnglishTextNormalizer
    except ImportError as e:
        raise ConfigError(f"word error rate needs Whisper's English normalizer: {INSTALL_HINT}") from e
    norm = EnglishTextNormalizer()
    for pattern in _NOT_IN_WHISPER:
        norm.replacers.pop(pattern, None)
    return norm


def mlperf_hypothesis(text: str) -> str:
    """A transcript as the reference SUT logs it: lower case, stripped, labels only."""
    return "".join(c for c in text.lower().strip() if c in _SUT_INDEX)


def transcript_labels(text: str) -> list[int]:
    """A transcript as the reference SUT logs it in accuracy mode: the index in SUT_LABELS of
    each character `mlperf_hypothesis` keeps."""
    return [_SUT_INDEX[c] for c in mlperf_hypothesis(text)]


def labels_transcript(labels: Sequence[int]) -> str:
    """A logged transcript's text, as accuracy_eval.py reads it: each index's EVAL_LABELS
    character; an index outside them is a ValueError naming it."""
    bad = next((i for i in labels if not 0 <= i < len(EVAL_LABELS)), None)
    if bad is not None:
        raise ValueError(f"label {bad} is not an index of accuracy_eval.py's {len(EVAL_LABELS)} labels")
    return "".join(EVAL_LABELS[i] for i in labels)


def mlperf_reference(text: str) -> str:
    """A reference as the evaluation's manifest keeps it: its labels only."""
    return "".join(c for c in text if c in _EVAL_SET)


def word_errors(hypothesis: Sequence[str], reference: Sequence[str]) -> int:
    """Errors of one sample: helpers.py's concatenation matching, then the Levenshtein
    distance of the matched token lists."""
    from rapidfuzz.distance import Levenshtein

    ref_tokens: list[str] = []
    hyp_tokens: list[str] = []
    i = j = 0
    while i < len(reference) and j < len(hypothesis):
        if reference[i] == hypothesis[j]:
            ref_tokens.append(reference[i])
            hyp_tokens.append(hypothesis[j])
            i, j = i + 1, j + 1
            continue
        take_ref = take_hyp = 1
        for k in range(1, 4):  # the reference's order: k reference words first, then k hypothesis words
            if i + k <= len(reference) and "".join(reference[i:i + k]) == hypothesis[j]:
                take_ref = k
                break
            if j + k <= len(hypothesis) and "".join(hypothesis[j:j + k]) == reference[i]:
                take_hyp = k
                break
        ref_tokens.append("".join(reference[i:i + take_ref]))
        hyp_tokens.append("".join(hypothesis[j:j + take_hyp]))
        i, j = i + take_ref, j + take_hyp
    ref_tokens += reference[i:]
    hyp_tokens += hypothesis[j:]
    return int(Levenshtein.distance(ref_tokens, hyp_tokens))


@dataclass(frozen=True)
class WerResult:
    errors: list[int]  # per sample, in the order given
    words: list[int]  # the reference's words, per sample

    @property
    def wer(self) -> float:
        """Percent: sum of errors over sum of reference words (0 with no word)."""
        total = sum(self.words)
        return 100.0 * sum(self.errors) / total if total else 0.0

    def sample_wer(self, i: int) -> float:
        """One sample's WER, percent (an empty reference: 0 when nothing was said back, else 100)."""
        return 100.0 * self.errors[i] / self.words[i] if self.words[i] else (100.0 if self.errors[i] else 0.0)

    def ci95(self) -> list[float] | None:
        """[low, high] of the WER, percent: the ratio estimator's normal interval (delta method),
        WER ± 1.96 × sd(errors_i − WER × words_i) / (√n × mean words); None under two samples.
        Exactly rounded sums, so that two runs with the same transcripts print the same interval."""
        n = len(self.words)
        total = math.fsum(self.words)
        if n < 2 or not total:
            return None
        ratio = math.fsum(self.errors) / total
        residual = [e - ratio * w for e, w in zip(self.errors, self.words, strict=True)]
        sd = math.sqrt(math.fsum(r * r for r in residual) / (n - 1))
        half = 1.96 * sd / (math.sqrt(n) * total / n)
        return [100.0 * max(0.0, ratio - half), 100.0 * (ratio + half)]


def score_wer(hypotheses: Sequence[str], references: Sequence[str], mlperf: bool = False) -> WerResult:
    """Each transcript against its reference; `mlperf`: the whisper benchmark's label filters first."""
    norm = normalizer()
    errors, words = [], []
    for hyp, ref in zip(hypotheses, references, strict=True):
        if mlperf:
            hyp, ref = mlperf_hypothesis(hyp), mlperf_reference(ref)
        h, r = norm(hyp).split(), norm(ref).split()
        errors.append(word_errors(h, r))
        words.append(len(r))
    return WerResult(errors, words)
