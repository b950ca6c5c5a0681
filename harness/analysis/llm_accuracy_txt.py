"""accuracy.txt of an LLM accuracy run: the line MLCommons' evaluation script prints, then `hash=`.

A submission's accuracy.txt is the evaluation script's output; the submission checker reads
it line by line with its ACC_PATTERN regexes (tools/submission/submission_checker/
constants.py: ROUGE1 `.*'rouge1':\\s+'?([\\d.]+)'?.*`, GEN_LEN `.*'gen_len':\\s([\\d.]+).*`,
TOKENS_PER_SAMPLE `.*'tokens_per_sample':\\s([\\d.]+).*`, exact_match
`.*'exact_match':\\s([\\d.]+).*`) and the `^hash=` line. A benchmark's form is its record's
`accuracy_form` (harness.data.benchmarks); what each script prints, read at
mlcommons/inference commit b66003e10e2db4b8c36a448b0545ec90fcc6e9e9:

    rouge-strings  language/llama3.1-8b/evaluation.py
                   {'rouge1': '38.3886', 'rouge2': '...', 'rougeL': '...', 'rougeLsum': '...',
                    'gen_len': 8167644, 'gen_num': 13368}
                   (the ROUGE figures are strings: f"{round(mean * 100, 4)}")
    rouge-numbers  language/llama2-70b/evaluate-accuracy.py
                   {'rouge1': 44.4312, ..., 'gen_len': N, 'gen_num': N, 'gen_tok_len': N,
                    'tokens_per_sample': 294.5}
    exact-dict     language/deepseek-r1/eval_accuracy.py
                   {'exact_match': 81.3, 'tokens_per_sample': 3886.2, 'num-samples': 4388}
    exact-line     language/gpt-oss-120b/eval_mlperf_accuracy.py
                   'exact_match': 83.130   (after "Printing for submission_checker:")
    wer-line       speech2text/accuracy_eval.py
                   Word Error Rate: 2.0671%, accuracy=97.9329%

The figures come from summary.json's `text_accuracy` (harness.results.text_accuracy), which
scores as those scripts do; they are written as plain Python numbers: under numpy 2 the
scripts' own `np.int64(8167644)` reprs no longer match GEN_LEN (mlcommons/inference#1763).
A run that names no benchmark gets rouge-numbers for ROUGE (it carries every figure the
checker reads), and for exact match the form of the benchmark whose scorer its rows name,
else exact-dict.
"""

from __future__ import annotations

from typing import Any

from harness.data.benchmarks import find, for_scorer

ROUGE_KEYS = ("rouge1", "rouge2", "rougeL", "rougeLsum")
ROUGE_FORMS = ("rouge-strings", "rouge-numbers")


def is_llm_section(section: dict[str, Any] | None) -> bool:
    """A summary's `text_accuracy` holding figures (not an error, not empty)."""
    return bool(section) and not section.get("error") and bool(section.get("rouge") or section.get("exact_match")
                                                               or section.get("wer"))


def _rouge_line(r: dict[str, Any], form: str) -> str:
    if form == "rouge-strings":
        out: dict[str, Any] = {k: str(float(r[k])) for k in ROUGE_KEYS}
        out.update(gen_len=int(r["gen_len"]), gen_num=int(r["gen_num"]))
        return repr(out)
    out = {k: float(r[k]) for k in ROUGE_KEYS}
    out.update(gen_len=int(r["gen_len"]), gen_num=int(r["gen_num"]))
    if r.get("gen_tok_len") is not None and r.get("tokens_per_sample") is not None:
        out.update(gen_tok_len=int(r["gen_tok_len"]), tokens_per_sample=float(r["tokens_per_sample"]))
    return repr(out)


def _exact_line(e: dict[str, Any], form: str) -> str:
    if form == "exact-line":
        return f"'exact_match': {float(e['exact_match']):.3f}"
    out: dict[str, Any] = {"exact_match": float(e["exact_match"])}
    if e.get("tokens_per_sample") is not None:
        out["tokens_per_sample"] = float(e["tokens_per_sample"])
    out["num-samples"] = int(e["samples"])
    return repr(out)


def form_for(benchmark: str, section: dict[str, Any]) -> str:
    """The form of the script whose output the file imitates: the benchmark's (any of its
    names), else the one its rows' scorer implies."""
    record = find(benchmark)
    if record is not None and record.accuracy_form is not None:
        return record.accuracy_form
    metrics = (section.get("exact_match") or {}).get("metrics") or {}
    if section.get("exact_match"):
        by_scorer = for_scorer(next(iter(metrics))) if len(metrics) == 1 else None
        return by_scorer.accuracy_form if by_scorer and by_scorer.accuracy_form else "exact-dict"
    return "rouge-numbers"


def accuracy_lines(section: dict[str, Any], benchmark: str) -> list[str]:
    """The lines before `hash=`: "Results" and the script's dict, as the script prints them.
    A dataset mixing ROUGE and exact-match rows gets both lines."""
    if section.get("error"):  # no figure the checker could read: it fails the result, and this says why
        return [f"no accuracy figures: {section['error']}"]
    form = form_for(benchmark, section)
    out: list[str] = []
    if section.get("rouge"):
        out += ["", "Results", "", _rouge_line(section["rouge"], form if form in ROUGE_FORMS else "rouge-numbers")]
    if section.get("exact_match"):
        e = section["exact_match"]
        if form == "exact-line":
            out += ["", "", "Printing for submission_checker:", "", _exact_line(e, form)]
        else:
            out += ["", "Results", "", _exact_line(e, "exact-dict")]
    if section.get("wer"):  # speech2text/accuracy_eval.py's line (ACC_PATTERN "ACCURACY")
        w = section["wer"]
        out += [f"Word Error Rate: {float(w['wer'])}%, accuracy={float(w['accuracy'])}%"]
    return out


def accuracy_txt(section: dict[str, Any], benchmark: str, digest: str) -> str:
    """The whole accuracy.txt: the script's output, then `hash=` of the untruncated log."""
    return "\n".join([*accuracy_lines(section, benchmark), f"hash={digest}"]) + "\n"
