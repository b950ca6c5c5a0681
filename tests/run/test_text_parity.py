"""`harness parity` for generative backends: two real accuracy runs (harness.run.runner.run, real
LoadGen) against truth servers whose answers are known, so every figure is known exactly.

Side A's server answers each prompt with a fixed sentence; side B's the same, except that
prompts 1 and 4 get one word changed ("river" -> "lake"). The runs log SmolLM2's ids of the
texts (the http backend's tokenizer), so the first differing token is known from the
tokenizer itself, independently of the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from harness.analysis.text_parity import as_dict, compare_folders
from harness.cli.main import main as cli
from harness.errors import EXIT_NEGATIVE, EXIT_USAGE
from harness.report.parity_view import render_text_parity
from harness.run.parity import Side
from harness.run.text_parity_runs import run_side, run_text_parity
from tests.support.http_servers import ServerThread, Timing, openai_app

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)

PROMPTS = [f"Summarize report {i}." for i in range(6)]
ANSWERS_A = {p: f"The report says the river rose {i + 1} metres on Monday after the storm." for i, p in enumerate(PROMPTS)}
CHANGED = (1, 4)
ANSWERS_B = {p: (a.replace("river", "lake") if i in CHANGED else a) for i, (p, a) in enumerate(ANSWERS_A.items())}


def _gguf() -> str:
    from tests.support.smollm2_hf import gguf_path

    return str(gguf_path())


def _side(url: str) -> Side:
    return Side("http", None, {"protocol": "openai-completions", "url": url + "/v1", "tokenizer": _gguf()})


def _prompts(path: Path, prompts: list[str]) -> str:
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    return str(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("text-parity")
    dataset = _prompts(tmp / "prompts.jsonl", PROMPTS)
    with ServerThread(openai_app(Timing(), answers=ANSWERS_A)) as a1, ServerThread(openai_app(Timing(), answers=ANSWERS_A)) as a2:
        same = run_text_parity(_side(a1.url), _side(a2.url), dataset=dataset, output_dir=tmp / "results")
    with ServerThread(openai_app(Timing(), answers=ANSWERS_B)) as b:
        run_b = run_side(_side(b.url), "B", dataset, 0, tmp / "results")
        other = run_side(_side(b.url), "B", _prompts(tmp / "other.jsonl", PROMPTS[:3]), 0, tmp / "results")
    return {"same": same, "run_a": Path(same.run_a), "run_b": run_b, "other": other}


def _first_differing_token(a: str, b: str) -> int:
    from llama_cpp import Llama

    vocab = Llama(model_path=_gguf(), vocab_only=True, verbose=False)
    ia = vocab.tokenize(a.encode(), add_bos=False, special=False)
    ib = vocab.tokenize(b.encode(), add_bos=False, special=False)
    return next(i for i, (x, y) in enumerate(zip(ia, ib)) if x != y)


def test_identical_sides_agree_and_both_folders_are_kept(runs):
    same = runs["same"]
    assert same.agree and same.text_match_rate == 1.0 and same.text_matches == 6
    assert same.ids_compared and same.ids_match_rate == 1.0
    assert same.rouge == {"rouge1": 100.0, "rouge2": 100.0, "rougeL": 100.0, "rougeLsum": 100.0}
    assert same.first_divergence is None
    assert Path(same.run_a) != Path(same.run_b)
    for folder in (same.run_a, same.run_b):
        assert (Path(folder) / "mlperf_log_accuracy.json").stat().st_size > 0
        assert json.loads((Path(folder) / "summary.json").read_text())["run"]["mode"] == "AccuracyOnly"


def test_a_changed_word_is_named_with_its_sample_and_token(runs):
    from harness.results.scoring.rouge import score_rouge

    result = compare_folders(runs["run_a"], runs["run_b"])
    assert not result.agree
    assert result.text_matches == 4 and result.text_match_rate == 4 / 6
    assert [d.sample for d in result.divergences] == list(CHANGED)
    first = result.first_divergence
    text_a, text_b = ANSWERS_A[PROMPTS[1]], ANSWERS_B[PROMPTS[1]]
    assert first.char == text_a.index("river")
    assert first.token == _first_differing_token(text_a, text_b)
    assert "river" in first.excerpt_a and "lake" in first.excerpt_b
    assert result.ids_compared and result.ids_matches == 4  # the change falls within the first 32 ids
    expected = score_rouge([ANSWERS_B[p] for p in PROMPTS], [ANSWERS_A[p] for p in PROMPTS])
    assert result.rouge == {k: getattr(expected, k) for k in ("rouge1", "rouge2", "rougeL", "rougeLsum")}
    assert result.rouge["rouge1"] < 100.0


def test_first_ids_counts_only_the_first_n(runs):
    token = compare_folders(runs["run_a"], runs["run_b"]).first_divergence.token
    # the first `token` ids are equal on every sample; one more takes in the changed word
    assert compare_folders(runs["run_a"], runs["run_b"], first_ids=token).ids_matches == 6
    assert compare_folders(runs["run_a"], runs["run_b"], first_ids=token + 1).ids_matches == 4


def test_a_threshold_below_the_match_rate_agrees(runs):
    assert compare_folders(runs["run_a"], runs["run_b"], min_text_match=0.6).agree
    assert not compare_folders(runs["run_a"], runs["run_b"], min_text_match=0.7).agree


def test_terminal_view_at_80_columns_names_the_first_divergence(runs):
    result = compare_folders(runs["run_a"], runs["run_b"])
    console = Console(width=80, record=True, color_system=None)
    render_text_parity(result, console)
    text = console.export_text()
    lines = text.splitlines()
    assert lines[0].startswith("DISAGREE · texts equal in 4 of 6 samples (66.67%; needed 100.00%)")
    assert f"first divergence: sample 1, token {result.first_divergence.token} (text differs)" in text
    assert all(len(line) <= 80 for line in lines), text
    assert "other disagreeing samples: 4" in text


def _cli(*args: str) -> tuple[int, str]:
    out = CliRunner().invoke(cli, ["parity", *args])
    return out.exit_code, out.output


def test_cli_exit_codes_and_json(runs):
    a, b = str(runs["run_a"]), str(runs["run_b"])
    code, out = _cli("--run-a", a, "--run-b", str(runs["same"].run_b))
    assert code == 0 and "AGREE" in out
    code, out = _cli("--run-a", a, "--run-b", b)
    assert code == EXIT_NEGATIVE and "first divergence: sample 1" in out
    code, out = _cli("--run-a", a, "--run-b", b, "--json")
    doc = json.loads(out)
    assert code == EXIT_NEGATIVE and doc["agree"] is False
    assert doc["first_divergence"]["sample"] == 1 and type(doc["text_match_rate"]) is float
    assert doc == json.loads(json.dumps(as_dict(compare_folders(runs["run_a"], runs["run_b"]))))


def test_cli_bad_input_is_one_line_and_the_usage_code(runs):
    code, out = _cli("--run-a", str(runs["run_a"]), "--run-b", str(runs["other"]))
    assert code == EXIT_USAGE and "answered different prompts" in out
    code, out = _cli("--backend-a", "http", "--backend-b", "onnxruntime")
    assert code == EXIT_USAGE and "side A's backend 'http' is streaming" in out
    code, out = _cli("--run-a", str(runs["run_a"]))
    assert code == EXIT_USAGE and "--run-a and --run-b go together" in out


def test_a_performance_run_is_refused(runs, tmp_path):
    from harness.config.run_config import RunConfig
    from harness.run import runner

    perf = runner.run(RunConfig(backend="synthetic", min_query_count=8, min_duration_s=0), tmp_path).run_dir
    code, out = _cli("--run-a", str(runs["run_a"]), "--run-b", str(perf))
    assert code == EXIT_USAGE and "is a PerformanceOnly run" in out


def test_cli_runs_both_streaming_sides_and_keeps_their_folders(tmp_path):
    dataset = _prompts(tmp_path / "prompts.jsonl", PROMPTS)
    with ServerThread(openai_app(Timing(), answers=ANSWERS_A)) as a, ServerThread(openai_app(Timing(), answers=ANSWERS_B)) as b:
        sides = [arg for which, srv in (("a", a), ("b", b)) for arg in (
            f"--backend-{which}", "http", f"--set-{which}", "protocol=openai-completions",
            f"--set-{which}", f"url={srv.url}/v1", f"--set-{which}", f"tokenizer={_gguf()}")]
        code, out = _cli(*sides, "--dataset", dataset, "--output-dir", str(tmp_path / "results"), "--json")
    doc = json.loads(out)
    assert code == EXIT_NEGATIVE and doc["text_matches"] == 4 and doc["first_divergence"]["sample"] == 1
    kept = sorted(p.name.split("-", 2)[2] for p in (tmp_path / "results").iterdir())
    assert kept == ["parity-a-Offline", "parity-b-Offline"]
    assert {Path(doc["run_a"]).parent, Path(doc["run_b"]).parent} == {tmp_path / "results"}
