"""summary.json's `text_accuracy`: how right a generative run's answers were, from its folder alone.

The child writes the dataset's references into the run folder (references.json: each row's
reference, metric and sub-dataset, the dataset file's sha256, and the tokenizer the run's
ids decode with, with its sha256), so scoring never needs the dataset, the model or the
server again, and `harness accuracy RUN_DIR` gives the figures the summary holds.

    AccuracyOnly / SubmissionRun   LoadGen's accuracy log: the logged int32 ids, first entry
                                   per qsl_idx (the official scripts' rule; a scorer in
                                   exact_match.SCORES_EVERY_ENTRY scores every entry),
                                   decoded with the recorded tokenizer; a transcript's
                                   int64 labels (references.json "accuracy_log":
                                   "transcript-labels"), read back as MLPerf's
                                   speech2text/accuracy_eval.py reads them (scoring.wer)
    PerformanceOnly (any load)     every answer the run gave, from tokens.jsonl's texts:
                                   "accuracy under load"

A failed answer (no entry data, or a failed request) is scored as an empty text: wrong, and
counted apart. ROUGE rows are scored by harness.results.scoring.rouge (MLCommons'
evaluation.py); DeepSeek-R1 and gpt-oss rows by their scripts' extraction rules; users'
rows by their metric (exact_match, choice, regex, json_field).

Each figure comes with its sample count and a 95 % confidence interval by the normal
approximation of a mean: mean ± 1.96 × s / √n over the per-sample scores (f-measures x 100,
or 0/100 for a verdict). Every figure is a plain Python number.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.errors import ResultsError
from harness.results import folder
from harness.results.loadgen_log import read_accuracy_log

CI_METHOD = ("ROUGE: normal approximation, mean ± 1.96 × sd / √n of the per-sample scores (x 100); "
             "exact match: Wilson score interval of the share correct; "
             "WER: the ratio estimator's normal interval (delta method) over the transcripts")
ACCURACY_MODES = ("AccuracyOnly", "SubmissionRun")
#: ROUGE figures and their names as summary.json, compare and the CLI give them
ROUGE_FIGURES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
#: the row metrics of transcripts (harness.data.audio)
WER_METRICS = ("wer", "whisper")


def ci95(values: Sequence[float]) -> list[float] | None:
    """[low, high] of the mean of `values` (already x 100); None under two samples.

    Exactly rounded sums (math.fsum): answers arrive in completion order, which differs
    from run to run, and two runs with the same answers must print the same interval."""
    n = len(values)
    if n < 2:
        return None
    mean = math.fsum(values) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = 1.96 * sd / math.sqrt(n)
    return [float(mean - half), float(mean + half)]


def wilson95(correct: int, n: int) -> list[float] | None:
    """[low, high] (x 100) of a share correct, by Wilson's score interval; None with no sample.

    Exact match scores each answer 0 or 1. The normal approximation above collapses to
    ±0 when every answer is right (or wrong), claiming certainty from any n; Wilson's
    interval stays honest there ([83.9, 100] for 20 of 20) and inside [0, 100] always."""
    if n < 1:
        return None
    z = 1.959963984540054  # the 97.5th percentile of the standard normal
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return [100.0 * max(0.0, centre - half), 100.0 * min(1.0, centre + half)]


def _answers_from_log(run_dir: Path, refs: dict[str, Any], n_rows: int,
                      token_entries: list[dict[str, Any]] | None) -> tuple[list[tuple[int, str, int, bool]], str | None]:
    """(qsl_idx, text, tokens, failed) per scored entry, and the tokenizer that decoded them."""
    from harness.results.scoring.accuracy_log import check_in_range, dedup_entries, parse_entries
    from harness.results.scoring.detokenize import load_decoder
    from harness.results.scoring.exact_match import SCORES_EVERY_ENTRY

    source = f"{run_dir / folder.LOADGEN_ACCURACY}"
    transcripts = refs.get("accuracy_log") == "transcript-labels"
    entries = parse_entries(read_accuracy_log(run_dir), dtype="int64" if transcripts else "int32", source=source)
    check_in_range(entries, n_rows, source=source)
    if not all(row.get("metric") in SCORES_EVERY_ENTRY for row in refs["rows"]):
        entries = dedup_entries(entries)
    if transcripts:
        entries_ = folder.read_jsonl(run_dir, folder.TOKENS) if token_entries is None else token_entries
        return _transcripts(entries, source, entries_), "speech2text/accuracy_eval.py's labels (int64)"
    tok = refs.get("tokenizer") or {}
    decoder = load_decoder(tok["path"], tok.get("sha256")) if tok.get("path") else None
    if decoder is None:
        raise ResultsError(f"{run_dir / folder.REFERENCES}: the run recorded no tokenizer, so the ids of "
                           f"{folder.LOADGEN_ACCURACY} cannot be decoded")
    out = []
    for n, e in enumerate(entries):
        text = decoder.decode(e.token_ids, f"{source}: entry {n} (qsl_idx {e.qsl_idx})") if e.token_ids else ""
        out.append((e.qsl_idx, text, len(e.token_ids), not e.token_ids))
    return out, decoder.path


def _transcripts(entries: list[Any], source: str, token_entries: list[dict[str, Any]]) -> list[tuple[int, str, int, bool]]:
    """Each entry's transcript, from its labels as accuracy_eval.py decodes them; an entry
    without data (a failed request, or nothing said back) is an empty transcript, failed.
    Its tokens are the answer's count in tokens.jsonl (the labels are characters, not tokens)."""
    from harness.results.scoring.wer import labels_transcript

    tokens = {e.get("sample_index"): int(e.get("n") or 0) for e in token_entries if e.get("status") == "ok"}
    out = []
    for n, e in enumerate(entries):
        try:
            text = labels_transcript(e.token_ids)
        except ValueError as err:
            raise ResultsError(f"{source}: entry {n} (qsl_idx {e.qsl_idx}): {err}") from err
        out.append((e.qsl_idx, text, tokens.get(e.qsl_idx, 0) if e.token_ids else 0, not e.token_ids))
    return out


def answers_from_tokens(entries: list[dict[str, Any]], n_rows: int, path: Path) -> list[tuple[int, str, int, bool]]:
    out = []
    for n, e in enumerate(entries):
        index = e.get("sample_index")
        if not isinstance(index, int) or not 0 <= index < n_rows:
            raise ResultsError(f"{path}: line {n + 1} names sample {index!r}, not one of the dataset's {n_rows}")
        ok = e.get("status") == "ok"
        text = e.get("text") if ok else ""
        if not isinstance(text, str):
            raise ResultsError(f"{path}: line {n + 1} (sample {index}) has no answer text")
        out.append((index, text, int(e.get("n_ids") or e.get("n") or 0) if ok else 0, not ok))
    return out


def _rouge(answers: list[tuple[int, str, int, bool]], rows: list[dict[str, Any]]) -> dict[str, Any]:
    from harness.results.scoring.rouge import score_rouge

    result = score_rouge([a[1] for a in answers], [rows[a[0]]["reference"] for a in answers],
                         token_counts=[a[2] for a in answers])
    out: dict[str, Any] = dict(result.figures())
    out["tokens_per_sample"] = result.tokens_per_sample
    out["samples"] = len(answers)
    out["ci95"] = {k: ci95([v * 100 for v in result.per_sample[k]]) for k in ROUGE_FIGURES}
    return out


def _exact(answers: list[tuple[int, str, int, bool]], rows: list[dict[str, Any]]) -> dict[str, Any]:
    from harness.results.scoring.exact_match import MLPERF_SCORERS, score_exact

    outs = [a[1] for a in answers]
    refs = [rows[a[0]]["reference"] for a in answers]
    metrics = [rows[a[0]]["metric"] for a in answers]
    tokens = [a[2] for a in answers]
    families = set(metrics)
    # rows of one MLPerf benchmark: its script's scorer (the record's `scorer`), which reads
    # each row's sub-dataset; anything else: the users' rules, row by row
    mlperf = MLPERF_SCORERS.get(next(iter(families))) if len(families) == 1 else None
    if mlperf is not None:
        result = mlperf(outs, refs, [rows[a[0]]["subset"] for a in answers], tokens)
    else:
        result = score_exact(outs, refs, metrics)
    return {
        "exact_match": float(result.exact_match),
        "samples": int(result.num_samples),
        "correct": int(result.correct),
        # answers that came back (status ok) and were judged wrong: cost per successful
        # task does not count them as successes (harness.analysis.cost)
        "wrong_answers": sum(1 for a, right in zip(answers, result.per_sample) if not right and not a[3]),
        "tokens_per_sample": float(sum(tokens) / len(tokens)) if tokens else None,
        "metrics": dict(Counter(metrics)),
        "ci95": wilson95(int(result.correct), int(result.num_samples)),
    }


def is_wer_metric(metric: Any) -> bool:
    """A transcript's row: `wer[:P]`, or `whisper[:P]` (MLPerf's whisper: its label filters too);
    P: the sample WER, percent, above which a transcript is wrong (default 0: any error)."""
    return isinstance(metric, str) and metric.partition(":")[0] in WER_METRICS


def _wer(answers: list[tuple[int, str, int, bool]], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Word error rate over the transcripts (harness.results.scoring.wer), with its interval, and
    the transcripts judged wrong: their own WER above the row metric's threshold."""
    from harness.results.scoring.wer import score_wer

    metrics = {rows[a[0]]["metric"] for a in answers}
    if len(metrics) > 1:
        raise ResultsError(f"transcripts scored by {len(metrics)} metrics ({', '.join(sorted(metrics))}): a dataset has one")
    kind, _, threshold = next(iter(metrics)).partition(":")
    above = float(threshold) if threshold else 0.0
    result = score_wer([a[1] for a in answers], [str(rows[a[0]]["reference"]) for a in answers], mlperf=kind == "whisper")
    wrong = [i for i, a in enumerate(answers) if not a[3] and result.sample_wer(i) > above]
    tokens = [a[2] for a in answers]
    return {
        "wer": result.wer,
        "accuracy": 100.0 - result.wer,  # MLPerf's whisper figure
        "samples": len(answers),
        "errors": sum(result.errors),
        "words": sum(result.words),
        "ci95": result.ci95(),
        # answered, and wrong: cost per successful task does not count them (harness.analysis.cost)
        "wrong_answers": len(wrong),
        "wrong_above": above,
        "rules": "MLPerf whisper: label filters, Whisper's English normalizer, concatenation-aware Levenshtein"
                 if kind == "whisper" else "Whisper's English normalizer, concatenation-aware Levenshtein (as MLPerf's)",
        "tokens_per_sample": float(sum(tokens) / len(tokens)) if tokens else None,
    }


def text_accuracy(run_dir: Path, mode: str, token_entries: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """The section, or None when the run's dataset has no references (or no answer was recorded)."""
    refs = folder.read_json(run_dir, folder.REFERENCES)
    if refs is None:
        return None
    rows = refs.get("rows")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) and "reference" in r for r in rows):
        raise ResultsError(f"{run_dir / folder.REFERENCES} is damaged: expected rows of reference, metric and subset")
    decoded_with = None
    if mode in ACCURACY_MODES and read_accuracy_log(run_dir):
        answers, decoded_with = _answers_from_log(run_dir, refs, len(rows), token_entries)
        label, source = "accuracy", folder.LOADGEN_ACCURACY
    else:
        entries = folder.read_jsonl(run_dir, folder.TOKENS) if token_entries is None else token_entries
        answers = answers_from_tokens(entries, len(rows), run_dir / folder.TOKENS)
        label, source = "accuracy under load", folder.TOKENS
    if not answers:
        return None
    rouge_answers = [a for a in answers if rows[a[0]].get("metric") == "rouge"]
    wer_answers = [a for a in answers if is_wer_metric(rows[a[0]].get("metric"))]
    exact_answers = [a for a in answers if rows[a[0]].get("metric") != "rouge" and not is_wer_metric(rows[a[0]].get("metric"))]
    out: dict[str, Any] = {
        "label": label,
        "source": source,
        "decoded_with": decoded_with,
        "answers": len(answers),
        "failed": sum(a[3] for a in answers),
        "dataset": refs.get("dataset"),
        "ci_method": CI_METHOD,
        "rouge": _rouge(rouge_answers, rows) if rouge_answers else None,
        "exact_match": _exact(exact_answers, rows) if exact_answers else None,
    }
    if wer_answers:  # transcripts: only then the key, so that text runs' summaries stay as they were
        out["wer"] = _wer(wer_answers, rows)
    return out


def summary_section(run_dir: Path, mode: str, token_entries: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """`text_accuracy` for summary.json: a folder whose answers cannot be scored (ids past the
    vocabulary, the tokenizer gone) still gets its summary, with the reason in `error`;
    `harness accuracy` raises the same error as one line."""
    from harness.errors import HarnessError

    try:
        return text_accuracy(run_dir, mode, token_entries)
    except HarnessError as e:
        return {"label": None, "source": None, "decoded_with": None, "answers": 0, "failed": 0, "dataset": None,
                "ci_method": CI_METHOD, "rouge": None, "exact_match": None, "error": str(e)}


def headline(section: dict[str, Any] | None) -> dict[str, float]:
    """The section's figures by the names `harness compare` gates on: rouge1, rouge2, rougeL,
    rougeLsum, and accuracy (exact match, percent)."""
    if not section:
        return {}
    out: dict[str, float] = {}
    for k in ROUGE_FIGURES:
        if section.get("rouge"):
            out[k] = float(section["rouge"][k])
    if section.get("exact_match"):
        out["accuracy"] = float(section["exact_match"]["exact_match"])
    if section.get("wer"):
        out["wer"] = float(section["wer"]["wer"])
    return out


def lines(section: dict[str, Any]) -> list[str]:
    """The section in words, one figure a line: what `harness accuracy` prints."""
    if section.get("error"):
        return [f"text accuracy not scored: {section['error']}"]
    out = [f"{section['label']} from {section['source']}: {section['answers']} answers, {section['failed']} failed"
           + (f" (decoded with {section['decoded_with']})" if section.get("decoded_with") else "")]
    r = section.get("rouge")
    if r:
        for k in ROUGE_FIGURES:
            ci = r["ci95"].get(k)
            out.append(f"{k}: {r[k]}" + (f"  95% CI [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "") + f"  n={r['samples']}")
        out.append(f"gen_len: {r['gen_len']}")
        out.append(f"gen_num: {r['gen_num']}")
        if r.get("tokens_per_sample") is not None:
            out.append(f"tokens_per_sample: {r['tokens_per_sample']}")
    e = section.get("exact_match")
    if e:
        ci = e.get("ci95")
        out.append(f"exact_match: {e['exact_match']}" + (f"  95% CI [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "")
                   + f"  n={e['samples']}, correct={e['correct']}")
        if e.get("tokens_per_sample") is not None:
            out.append(f"tokens_per_sample: {e['tokens_per_sample']}")
    w = section.get("wer")
    if w:
        ci = w.get("ci95")
        out.append(f"wer: {w['wer']:.4f}%" + (f"  95% CI [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "")
                   + f"  n={w['samples']}, errors={w['errors']} of {w['words']} words")
        out.append(f"accuracy (100 - WER): {w['accuracy']:.4f}%")
        out.append(f"wrong transcripts (WER above {w['wrong_above']:g}%): {w['wrong_answers']}")
        out.append(f"scored by: {w['rules']}")
    out.append(f"confidence interval: {section['ci_method']}")
    return out


def score_folder(run_dir: Path) -> dict[str, Any]:
    """`harness accuracy RUN_DIR`: the section again, from the folder alone (the summary's own
    figures, recomputed); a folder without references is a ResultsError saying why."""
    folder.require_folder(run_dir)
    config = folder.read_run_config(run_dir) or {}
    section = text_accuracy(run_dir, str(config.get("mode", "PerformanceOnly")))
    if section is None:
        if not (run_dir / folder.REFERENCES).is_file():
            raise ResultsError(f"{run_dir} has no {folder.REFERENCES}: its dataset had no references "
                               "(run with --dataset mlperf:SET:PATH, or a JSONL whose rows have an answer)")
        raise ResultsError(f"{run_dir}: no answer was recorded ({folder.LOADGEN_ACCURACY} and {folder.TOKENS} hold none)")
    return section
