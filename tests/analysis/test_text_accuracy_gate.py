"""Accuracy of answers in the CI gate and in cost: `harness compare --fail-if` by metric name
(rouge1, accuracy), and a wrong answer not counted as a successful task.

Two real runs each (harness.run.runner.run, real LoadGen) against the truth server: a base
whose answers are all right, a candidate that answers some prompts wrong, so the change the
gate sees is known exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.analysis.cost import cost_for_run, parse_sheet
from harness.cli.main import main as cli
from harness.config.run_config import RunConfig
from harness.errors import EXIT_NEGATIVE
from harness.run import runner
from tests.support.http_servers import ServerThread, Timing, openai_app

QA = [{"prompt": f"question {i}", "answer": f"answer {i}"} for i in range(10)]


def _gguf() -> str:
    from tests.support.smollm2_hf import gguf_path

    return str(gguf_path())


def _run(tmp: Path, dataset: str, answers: dict[str, str], name: str, **options: object) -> Path:
    with ServerThread(openai_app(Timing(), answers=answers)) as srv:
        outcome = runner.run(RunConfig(
            name=name, backend="http", scenario="Offline", mode="AccuracyOnly", dataset=dataset,
            backend_options={"protocol": "openai-chat", "url": srv.url + "/v1", "tokenizer": _gguf(), **options},
        ), tmp / "results")
    return outcome.run_dir


@pytest.fixture(scope="module")
def qa_runs(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("qa")
    data = tmp / "qa.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in QA))
    right = {r["prompt"]: r["answer"] for r in QA}
    # the candidate gets 2 of 10 wrong: accuracy 100 -> 80
    cand = {p: (a if i >= 2 else "I do not know") for i, (p, a) in enumerate(right.items())}
    return _run(tmp, str(data), right, "base"), _run(tmp, str(data), cand, "cand")


@pytest.fixture(scope="module")
def rouge_runs(tmp_path_factory) -> tuple[Path, Path]:
    import pandas as pd

    tmp = tmp_path_factory.mktemp("rouge")
    refs = ["Council approves bridge budget.", "Snow closes schools.", "Team wins title.", "Frog species found."]
    prompts = [f"Summarize article {i}." for i in range(4)]
    path = tmp / "cnn_eval.json"
    pd.DataFrame({"input": prompts, "tok_input": [[1, 2]] * 4, "output": refs}).to_json(path)
    right = dict(zip(prompts, refs))
    cand = {**right, prompts[0]: "Zebra quilts juggle."}  # one of 4 shares nothing: ROUGE 100 -> 75
    spec = f"mlperf:llama3.1-8b:{path}"
    return _run(tmp, spec, right, "base"), _run(tmp, spec, cand, "cand")


def _compare(*args: str) -> int:
    return CliRunner().invoke(cli, ["compare", *args]).exit_code


@pytest.mark.parallel
def test_accuracy_gate_fires_on_wrong_answers(qa_runs):
    base, cand = qa_runs
    s = json.loads((cand / "summary.json").read_text())
    assert s["text_accuracy"]["exact_match"]["exact_match"] == 80.0
    assert _compare(str(base), str(cand), "--fail-if", "accuracy < -1pt") == EXIT_NEGATIVE
    assert _compare(str(base), str(cand), "--fail-if", "accuracy < -25pt") == 0  # a 20-point drop is within it
    assert _compare(str(base), str(base), "--fail-if", "accuracy < -1pt") == 0


@pytest.mark.parallel
def test_rouge_gate_fires_by_metric_name(rouge_runs):
    base, cand = rouge_runs
    rouge = json.loads((cand / "summary.json").read_text())["text_accuracy"]["rouge"]
    assert (rouge["rouge1"], rouge["rougeLsum"]) == (75.0, 75.0)
    assert _compare(str(base), str(cand), "--fail-if", "rouge1 < -0.5pt") == EXIT_NEGATIVE
    assert _compare(str(base), str(cand), "--fail-if", "rougeLsum < -30pt") == 0
    assert _compare(str(base), str(base), "--fail-if", "rouge1 < -0.5pt") == 0


@pytest.mark.parallel
def test_a_wrong_answer_is_not_a_successful_task(qa_runs):
    _, cand = qa_runs
    summary = json.loads((cand / "summary.json").read_text())
    assert summary["harness"]["succeeded"] == 10  # every request came back...
    cost = cost_for_run(cand, summary, parse_sheet({"per_request": 1.0}, "test"))
    assert cost["usage"]["succeeded"] == 8 and cost["usage"]["wrong_answers"] == 2  # ...2 of them wrong
    assert cost["per_successful_task"] == pytest.approx(10 / 8)
    assert "2 wrong answers are not successes" in cost["success_criterion"]


@pytest.mark.parallel
def test_rouge_runs_say_their_successes_are_not_adjusted(rouge_runs):
    _, cand = rouge_runs
    summary = json.loads((cand / "summary.json").read_text())
    cost = cost_for_run(cand, summary, parse_sheet({"per_request": 1.0}, "test"))
    assert cost["usage"]["succeeded"] == 4 and "ROUGE" in cost["success_criterion"]


def test_a_sweep_shows_where_answers_degrade_and_the_diagnosis_names_it(tmp_path):
    """Concurrency 1, 2, 4 against a server that cuts answers to 2 words while more than 2
    requests are open: the accuracy curve holds at 1 and 2 and falls at 4, and the diagnosis
    says so, with the answers' length."""
    from harness.analysis.diagnosis import diagnose
    from harness.run.sweep import Axis, SweepSpec, new_sweep, run_sweep

    data = tmp_path / "qa.jsonl"
    rows = [{"prompt": f"question {i}", "answer": f"the answer is number {i}"} for i in range(6)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    answers = {r["prompt"]: r["answer"] for r in rows}
    app = openai_app(Timing(tpot_ms=5), answers=answers, truncate_above=2, truncate_words=2)
    with ServerThread(app) as srv:
        base = RunConfig(backend="http", scenario="Offline", dataset=str(data), min_query_count=24, min_duration_s=0.1,
                         backend_options={"protocol": "openai-completions", "url": srv.url + "/v1"})
        spec = SweepSpec("sweep", base, [Axis("concurrency", ("1", "2", "4"))])
        result = run_sweep(spec, new_sweep(spec, tmp_path / "results"))
    points = sorted(result["points"], key=lambda p: int(p["values"]["concurrency"]))
    acc = [p["text_accuracy"]["value"] for p in points]
    assert acc[0] == acc[1] == 100.0 and acc[2] < 100.0, acc
    assert [p["metrics"]["accuracy"] for p in points] == acc  # the gate's name, per point
    found = next(f for f in diagnose(result) if f["finding"].startswith("exact match"))
    assert found["finding"].startswith(f"exact match 100 → {acc[2]:.4g} between concurrency 2 and 4; answers shorter, 5 → ")
    assert found["figures"]["values"] == acc
    from harness.report.sweep_plots import sweep_plots

    assert "answers' accuracy vs load" in [title for title, _ in sweep_plots(result)]


def _sweep_cli(*args: str) -> object:
    return CliRunner().invoke(cli, ["sweep", "--backend", "http", "--scenario", "Offline",
                                    "--set", "min_query_count=24", "--set", "min_duration_s=0.1", *args])


def test_sweep_accuracy_shows_each_points_score_in_its_table(tmp_path):
    """`harness sweep --accuracy` against a server that cuts answers while more than 2 requests
    are open: the table, at 80 columns, gives each point its summary.json score, CI and n."""
    from rich.console import Console

    from harness.report.sweep_view import render_sweep

    data = tmp_path / "qa.jsonl"
    rows = [{"prompt": f"question {i}", "answer": f"the answer is number {i}"} for i in range(6)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    app = openai_app(Timing(tpot_ms=5), answers={r["prompt"]: r["answer"] for r in rows}, truncate_above=2, truncate_words=2)
    with ServerThread(app) as srv:
        res = _sweep_cli("--set", "protocol=openai-completions", "--set", f"url={srv.url}/v1", "--dataset", str(data),
                         "--vary", "concurrency=1,4", "--accuracy", "--output-dir", str(tmp_path / "results"))
    assert res.exit_code == 0, res.output
    (sweep_dir,) = (tmp_path / "results").iterdir()
    sweep = json.loads((sweep_dir / "sweep.json").read_text())
    assert sweep["accuracy"] is True and "accuracy: true" in (sweep_dir / "sweep.yaml").read_text()  # --resume keeps it
    from harness.report.sweep_figures import points_table

    header, rows = points_table(sweep)
    column = header.index(next(h for h in header if h.startswith("exact %")))
    for p, row in zip(sorted(sweep["points"], key=lambda p: p["index"]), rows, strict=True):
        exact = json.loads((sweep_dir / p["run"] / "summary.json").read_text())["text_accuracy"]["exact_match"]
        value, half = row[column].split(" ±")
        assert float(value) == pytest.approx(exact["exact_match"], abs=0.05), (row, exact)
        assert float(half) == pytest.approx((exact["ci95"][1] - exact["ci95"][0]) / 2, abs=0.05), (row, exact)
        assert header[column] == f"exact % n={exact['samples']}"  # every point scored the same count
    assert [r[column].split(" ±")[0] for r in rows][0] == "100" and rows[1][column] != rows[0][column]
    console = Console(width=80, record=True)
    render_sweep(sweep, console, sweep_dir)
    text = console.export_text()
    assert all(len(line) <= 80 for line in text.splitlines()) and "…" not in text, text  # nothing cut
    assert "concurrency" in text and "exact %" in text and "± the half-width of the 95% CI" in text
    for row in rows:  # the cell's two parts, wrapped or not, in the terminal and in the CLI's output
        for part in row[column].split(" "):
            assert part in text and part in res.stdout, (part, text)


@pytest.mark.parallel
def test_sweep_accuracy_refuses_a_dataset_without_references_before_any_run(tmp_path):
    from harness.errors import EXIT_USAGE

    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "hello"}) + "\n")
    res = _sweep_cli("--set", "protocol=openai-completions", "--set", "url=http://127.0.0.1:9/v1",
                     "--set", "check_server=false", "--dataset", str(data), "--vary", "concurrency=1,4",
                     "--accuracy", "--output-dir", str(tmp_path / "results"))
    assert res.exit_code == EXIT_USAGE, res.output
    msg = res.stderr.strip()
    assert "\n" not in msg and f"dataset jsonl:{data} carries no reference answers" in msg
    assert "`answer`" in msg and "mlperf:SET:PATH" in msg
    assert not (tmp_path / "results").exists()  # no sweep folder, no point run
