"""Text accuracy wired into runs, against a truth server whose answers are known.

The server answers the reference itself for a known subset of prompts and a text sharing
no word with any reference for the rest, so every per-sample ROUGE is 1 or 0 and the
expected score is exact: 100 x right / answers. Runs go through the real LoadGen
(harness.run.runner.run); the score is then read from summary.json and recomputed by
`harness accuracy` from the folder alone.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from harness.cli.main import main as cli
from harness.config.run_config import RunConfig
from harness.errors import EXIT_RESULTS
from harness.results.records import read_records
from harness.run import runner
from tests.support.http_servers import ServerThread, Timing, openai_app

ARTICLES = [
    ("Summarize: the council approved the new bridge budget.", "Council approves bridge budget."),
    ("Summarize: heavy snow closed schools across the region.", "Snow closes regional schools. Classes resume Monday."),
    ("Summarize: the team won its third title in a row.", "Team wins third straight title."),
    ("Summarize: a new species of frog was found in Peru.", "New frog species found in Peru."),
    ("Summarize: fuel prices rose for the fifth week.", "Fuel prices rise again."),
    ("Summarize: the museum reopened after repairs.", "Museum reopens after repairs."),
]
RIGHT = {0, 1, 2}  # answered with the reference; the rest with WRONG
WRONG = "Zebra quilts juggle violet xylophones."  # no word (or stem) of any reference


def _gguf() -> str:
    from tests.support.smollm2_hf import gguf_path

    return str(gguf_path())


def write_cnn_eval(path: Path) -> Path:
    """cnn_eval.json as MLCommons ships it: a DataFrame (input, tok_input, output) written with to_json."""
    import pandas as pd

    pd.DataFrame({"input": [a for a, _ in ARTICLES], "tok_input": [[1, 2, 3]] * len(ARTICLES),
                  "output": [r for _, r in ARTICLES]}).to_json(path)
    return path


def _answers() -> dict[str, str]:
    return {a: (r if i in RIGHT else WRONG) for i, (a, r) in enumerate(ARTICLES)}


def _expected_ci(per_sample: list[float]) -> list[float]:
    n, mean = len(per_sample), sum(per_sample) / len(per_sample)
    half = 1.96 * math.sqrt(sum((v - mean) ** 2 for v in per_sample) / (n - 1)) / math.sqrt(n)
    return [mean - half, mean + half]


@pytest.fixture(scope="module")
def cnn_run(tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("cnn")
    data = write_cnn_eval(tmp / "cnn_eval.json")
    with ServerThread(openai_app(Timing(), answers=_answers())) as srv:  # sends no ids: the tokenizer makes them
        outcome = runner.run(RunConfig(
            backend="http", scenario="Offline", mode="AccuracyOnly", dataset=f"mlperf:llama3.1-8b:{data}",
            backend_options={"protocol": "openai-completions", "url": srv.url + "/v1", "tokenizer": _gguf()},
        ), tmp / "results")
    return outcome.run_dir, outcome.summary


@pytest.mark.parallel
def test_accuracy_run_scores_rouge_exactly(cnn_run):
    from llama_cpp import Llama

    run_dir, s = cnn_run
    acc = s["text_accuracy"]
    assert (acc["label"], acc["source"], acc["answers"], acc["failed"]) == ("accuracy", "mlperf_log_accuracy.json", 6, 0)
    rouge = acc["rouge"]
    for k in ("rouge1", "rouge2", "rougeL", "rougeLsum"):
        assert rouge[k] == 50.0, k  # 3 answers of 6 equal their reference, 3 share no word with it
        assert rouge["ci95"][k] == pytest.approx(_expected_ci([100.0] * 3 + [0.0] * 3))
    assert rouge["gen_num"] == 6
    vocab = Llama(model_path=_gguf(), vocab_only=True, verbose=False)
    answers = list(_answers().values())
    lengths = [len(vocab.tokenize(a.encode(), add_bos=False, special=False)) for a in answers]
    assert rouge["tokens_per_sample"] == round(sum(lengths) / 6, 1)
    # references and tokenizer pinned in the folder
    refs = json.loads((run_dir / "references.json").read_text())
    assert [r["reference"] for r in refs["rows"]] == [r for _, r in ARTICLES]
    assert refs["dataset"]["sha256"] and refs["tokenizer"]["path"] == str(Path(_gguf()).resolve())
    assert all(type(v) in (int, float) for v in (rouge["rouge1"], rouge["gen_len"], rouge["tokens_per_sample"]))


@pytest.mark.parallel
def test_harness_accuracy_on_the_folder_equals_the_summary(cnn_run):
    run_dir, s = cnn_run
    res = CliRunner().invoke(cli, ["accuracy", str(run_dir), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == json.loads(json.dumps(s["text_accuracy"]))  # llama.cpp logs to stderr
    text = CliRunner().invoke(cli, ["accuracy", str(run_dir)]).stdout
    assert "rouge1: 50.0" in text and "np.float64" not in text and "gen_num: 6" in text


@pytest.mark.parallel
def test_undecodable_ids_are_one_line_naming_the_entry(cnn_run, tmp_path):
    run_dir, _ = cnn_run
    bad = tmp_path / "bad"
    shutil.copytree(run_dir, bad)
    log = json.loads((bad / "mlperf_log_accuracy.json").read_text())
    log[2]["data"] = np.asarray([5, 10**9], dtype="<i4").tobytes().hex()
    (bad / "mlperf_log_accuracy.json").write_text(json.dumps(log))
    res = CliRunner().invoke(cli, ["accuracy", str(bad)])
    assert res.exit_code == EXIT_RESULTS
    msg = res.stderr.strip()
    assert msg.startswith("error:") and "\n" not in msg
    assert f"entry 2 (qsl_idx {log[2]['qsl_idx']})" in msg and "token id 1000000000" in msg
    # the summary is still built, every other figure kept, with the reason in the section
    from harness.results.summary import write_summary

    rebuilt = write_summary(bad, {"status": "complete"})
    assert rebuilt["text_accuracy"]["error"] in msg and rebuilt["text_accuracy"]["rouge"] is None
    assert rebuilt["harness"]["succeeded"] == 6
    _schema().validate(json.loads(json.dumps(rebuilt)))


@pytest.mark.parallel
def test_accuracy_under_load_scores_every_answer_given(tmp_path):
    rows = [{"prompt": f"question {i}", "answer": f"answer {i}"} for i in range(8)]
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    right = {0, 3, 5}
    answers = {r["prompt"]: (r["answer"] if i in right else "no idea") for i, r in enumerate(rows)}
    with ServerThread(openai_app(Timing(), answers=answers)) as srv:
        outcome = runner.run(RunConfig(
            backend="http", scenario="Offline", dataset=str(data), min_query_count=40, min_duration_s=0.1,
            backend_options={"protocol": "openai-chat", "url": srv.url + "/v1"},
        ), tmp_path / "results")
    acc = outcome.summary["text_accuracy"]
    index = read_records(outcome.run_dir).columns["sample_index"].tolist()
    expected = 100.0 * sum(i in right for i in index) / len(index)
    assert (acc["label"], acc["source"], acc["answers"]) == ("accuracy under load", "tokens.jsonl", len(index))
    assert acc["exact_match"]["exact_match"] == pytest.approx(expected)
    assert acc["exact_match"]["correct"] == sum(i in right for i in index)
    assert acc["rouge"] is None
    _schema().validate(outcome.summary)


def _schema() -> Any:
    import jsonschema

    from tests.support.report_runs import SCHEMA

    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parallel
def test_summaries_with_text_accuracy_follow_the_schema(cnn_run):
    _, s = cnn_run
    _schema().validate(json.loads(json.dumps(s)))
    broken = json.loads(json.dumps(s))
    broken["text_accuracy"]["rouge"]["rouge1"] = "50"
    with pytest.raises(Exception, match="is not of type 'number'"):
        _schema().validate(broken)


def test_a_server_that_truncates_under_load_shows_the_accuracy_drop(tmp_path):
    """The truth server cuts answers to 2 words while more than 2 requests are open: at
    concurrency 1 every answer is right, at concurrency 4 exactly the cut ones are wrong."""
    rows = [{"prompt": f"question {i}", "answer": f"the answer is number {i}"} for i in range(6)]
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    answers = {r["prompt"]: r["answer"] for r in rows}
    scores = {}
    for concurrency in (1, 4):
        cut: list[str] = []
        app = openai_app(Timing(tpot_ms=5), answers=answers, truncate_above=2, truncate_words=2, truncated=cut)
        with ServerThread(app) as srv:
            outcome = runner.run(RunConfig(
                name=f"c{concurrency}", backend="http", scenario="Offline", dataset=str(data), concurrency=concurrency,
                min_query_count=24, min_duration_s=0.1,
                backend_options={"protocol": "openai-completions", "url": srv.url + "/v1"},
            ), tmp_path / "results")
        exact = outcome.summary["text_accuracy"]["exact_match"]
        n = outcome.summary["text_accuracy"]["answers"]
        assert exact["exact_match"] == pytest.approx(100.0 * (n - len(cut)) / n)
        assert exact["correct"] == n - len(cut)
        scores[concurrency] = (exact["exact_match"], len(cut))
    assert scores[1] == (100.0, 0)
    assert scores[4][1] > 0 and scores[4][0] < 100.0


@pytest.mark.parallel
def test_reports_show_the_text_accuracy(cnn_run):
    from harness.report import write_report

    run_dir, _ = cnn_run
    res = CliRunner().invoke(cli, ["report", str(run_dir)], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80  # the full tokenizer path used to wrap
    assert any(line.startswith("  answers: ROUGE-1 50.00 (95% CI ") for line in lines[:8])  # beside the speed
    for name in ("ROUGE-1", "ROUGE-2", "ROUGE-L", "ROUGE-Lsum"):
        assert any(line.split()[:2] == [name, "50.0000"] and line.split()[-1] == "6" for line in lines), name
    assert "  scored: the answers in mlperf_log_accuracy.json" in lines
    assert f"  ids decoded with {Path(_gguf()).name}" in lines
    md = write_report(run_dir, "md")
    assert "### Answers' accuracy" in md and "| ROUGE-1 | 50.0000 | " in md  # the table the terminal has


@pytest.mark.parallel
def test_deepseek_r1_file_is_scored_by_its_scripts_rules(tmp_path):
    """mlperf:deepseek-r1: the pickle's text_input prompts, ground_truth references and dataset
    names; answers judged by DeepSeek-R1's extraction (ANSWER: letter, \\boxed{} for math)."""
    import pandas as pd

    frame = pd.DataFrame({
        "text_input": ["Q0 choose", "Q1 choose", "Q2 sum", "Q3 choose"],
        "ground_truth": ["A", "C", "5", "D"],
        "dataset": ["gpqa", "gpqa", "aime", "mmlu_pro"],
    })
    path = tmp_path / "ds.pkl"
    frame.to_pickle(path)
    answers = {"Q0 choose": "Thinking done. ANSWER: A", "Q1 choose": "ANSWER: B",  # right, wrong
               "Q2 sum": "So the total is \\boxed{5}", "Q3 choose": "I cannot tell"}  # right, wrong
    with ServerThread(openai_app(Timing(), answers=answers)) as srv:
        outcome = runner.run(RunConfig(
            backend="http", scenario="Offline", mode="AccuracyOnly", dataset=f"mlperf:deepseek-r1:{path}",
            backend_options={"protocol": "openai-completions", "url": srv.url + "/v1", "tokenizer": _gguf()},
        ), tmp_path / "results")
    exact = outcome.summary["text_accuracy"]["exact_match"]
    assert (exact["exact_match"], exact["correct"], exact["samples"], exact["wrong_answers"]) == (50.0, 2, 4, 2)
    assert exact["metrics"] == {"deepseek-r1": 4} and outcome.summary["text_accuracy"]["rouge"] is None
    # 2 of 4 right: Wilson's interval, symmetric about 50 % (the normal one would be 50 ± 56.6, past 0 and 100)
    low, high = exact["ci95"]
    assert low == pytest.approx(100 - high) and 14.9 < low < 15.1


@pytest.mark.parallel
def test_a_folder_without_references_is_one_line_saying_why(cnn_run, tmp_path):
    run_dir, _ = cnn_run
    bare = tmp_path / "bare"
    shutil.copytree(run_dir, bare)
    (bare / "references.json").unlink()
    res = CliRunner().invoke(cli, ["accuracy", str(bare)])
    assert res.exit_code == EXIT_RESULTS
    assert res.stderr.count("\n") == 1 and "has no references.json: its dataset had no references" in res.stderr


@pytest.mark.parallel
def test_a_tokenizer_other_than_the_runs_is_refused(cnn_run, tmp_path):
    run_dir, _ = cnn_run
    moved = tmp_path / "moved"
    shutil.copytree(run_dir, moved)
    refs = json.loads((moved / "references.json").read_text())
    refs["tokenizer"]["sha256"] = "0" * 64
    (moved / "references.json").write_text(json.dumps(refs))
    res = CliRunner().invoke(cli, ["accuracy", str(moved)])
    assert res.exit_code == EXIT_RESULTS and "changed since the run (sha256 differs)" in res.stderr


@pytest.mark.parallel
def test_the_interval_does_not_depend_on_the_order_answers_completed_in():
    """Offline completes answers in a different order each run; the same answers must give
    the same interval to the last digit (a plain sum rounds differently in another order)."""
    from harness.results.text_accuracy import ci95

    scores = [63.906814054416, 15.061642402352, 63.486065828519, 86.80453071433, 52.31812103833, 74.125185620149, 67.141147536959]
    backwards = scores[::-1]
    assert sum(scores) != sum(backwards)  # the order does change a plain sum: this test can fail
    assert ci95(scores) == ci95(backwards)


@pytest.mark.parallel
def test_an_exact_match_of_every_answer_keeps_an_interval_below_100():
    """All answers right is no certainty: the normal approximation said "100 ± 0" at any n.
    Wilson's lower bound for n of n right is n / (n + z²), its closed form at p = 1."""
    from harness.results.text_accuracy import wilson95

    z2 = 1.959963984540054**2
    for n in (1, 4, 20, 1000):
        low, high = wilson95(n, n)
        assert high == 100.0 and low == pytest.approx(100 * n / (n + z2))
        assert wilson95(0, n) == pytest.approx([0.0, 100 - low])  # the mirror image
    assert wilson95(0, 0) is None
