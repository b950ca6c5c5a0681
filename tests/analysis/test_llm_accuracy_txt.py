"""accuracy.txt of LLM accuracy runs, read back with the submission checker's own patterns.

The patterns are data copied from tools/submission/submission_checker/constants.py
(ACC_PATTERN) and checks/accuracy_check.py (the hash line) of mlcommons/inference at commit
b66003e10e2db4b8c36a448b0545ec90fcc6e9e9; each written file must give back the summary's
figures exactly, as the checker would read them."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import yaml

from harness.analysis.llm_accuracy_txt import accuracy_txt
from harness.analysis.submission import write_submission
from harness.config.run_config import RunConfig
from harness.run import runner
from tests.analysis.test_submission import USER_SYSTEM
from tests.results.test_text_accuracy import _answers, _gguf, write_cnn_eval
from tests.support.http_servers import ServerThread, Timing, openai_app

# constants.py ACC_PATTERN (b66003e1), the LLM entries
CHECKER_PATTERNS = {
    "ROUGE1": r".*'rouge1':\s+'?([\d.]+)'?.*",
    "ROUGE2": r".*'rouge2':\s+'?([\d.]+)'?.*",
    "ROUGEL": r".*'rougeL':\s+'?([\d.]+)'?.*",
    "ROUGELSUM": r".*'rougeLsum':\s+'?([\d.]+)'?.*",
    "GEN_LEN": r".*'gen_len':\s([\d.]+).*",
    "TOKENS_PER_SAMPLE": r".*'tokens_per_sample':\s([\d.]+).*",
    "exact_match": r".*'exact_match':\s([\d.]+).*",
}
HASH_PATTERN = r"^hash=([\w\d]+)$"  # checks/accuracy_check.py accuracy_result_check
# the summary figure each pattern reads
FIGURE = {"ROUGE1": "rouge1", "ROUGE2": "rouge2", "ROUGEL": "rougeL", "ROUGELSUM": "rougeLsum", "GEN_LEN": "gen_len",
          "TOKENS_PER_SAMPLE": "tokens_per_sample", "exact_match": "exact_match"}

ROUGE = {"rouge1": 38.3886, "rouge2": 15.9511, "rougeL": 24.5216, "rougeLsum": 35.8004, "gen_len": 8167644,
         "gen_num": 13368, "gen_tok_len": 3936213, "tokens_per_sample": 294.5, "samples": 13368}
EXACT = {"exact_match": 81.35824977210574, "samples": 4388, "correct": 3570, "tokens_per_sample": 3886.227438468551,
         "metrics": {"deepseek-r1": 4388}}
DIGEST = "ab" * 32


def read_as_checker(text: str) -> tuple[dict[str, float], str | None]:
    """Every pattern's value (float(group 1), as the checker compares it) and the hash, line by line."""
    found: dict[str, float] = {}
    digest = None
    for line in text.splitlines():
        for name, pattern in CHECKER_PATTERNS.items():
            m = re.match(pattern, line)
            if m:
                found[name] = float(m.group(1))
        m = re.match(HASH_PATTERN, line)
        if m:
            digest = m.group(1)
    return found, digest


@pytest.mark.parametrize("benchmark", ["llama3.1-8b", "llama2-70b-99", "*"])
def test_rouge_forms_give_back_the_summary_figures(benchmark):
    text = accuracy_txt({"rouge": ROUGE, "exact_match": None}, benchmark, DIGEST)
    found, digest = read_as_checker(text)
    assert digest == DIGEST
    for name in ("ROUGE1", "ROUGE2", "ROUGEL", "ROUGELSUM", "GEN_LEN"):
        assert found[name] == ROUGE[FIGURE[name]], name
    if benchmark == "llama3.1-8b":  # evaluation.py prints the ROUGE figures as strings, and no token counts
        assert "'rouge1': '38.3886'" in text and "tokens_per_sample" not in text
    else:
        assert found["TOKENS_PER_SAMPLE"] == ROUGE["tokens_per_sample"]
        assert "'gen_tok_len': 3936213" in text
    assert "np." not in text  # numpy 2 reprs break GEN_LEN (mlcommons/inference#1763)


def test_exact_match_forms_give_back_the_summary_figures():
    found, digest = read_as_checker(accuracy_txt({"rouge": None, "exact_match": EXACT}, "deepseek-r1", DIGEST))
    assert digest == DIGEST
    assert found["exact_match"] == EXACT["exact_match"] and found["TOKENS_PER_SAMPLE"] == EXACT["tokens_per_sample"]
    # gpt-oss's script prints 3 decimals for the checker, and no token count
    gpt = accuracy_txt({"rouge": None, "exact_match": {**EXACT, "metrics": {"gpt-oss": 4388}}}, "*", DIGEST)
    assert "'exact_match': 81.358\n" in gpt and read_as_checker(gpt)[0] == {"exact_match": 81.358}


def test_an_unscored_run_says_why_and_gives_the_checker_no_figure():
    text = accuracy_txt({"error": "the run's tokenizer x.gguf no longer exists"}, "llama3.1-8b", DIGEST)
    assert text.startswith("no accuracy figures: the run's tokenizer") and read_as_checker(text) == ({}, DIGEST)


def test_harness_submission_writes_the_llm_form_for_an_accuracy_run(tmp_path: Path):
    data = write_cnn_eval(tmp_path / "cnn_eval.json")
    with ServerThread(openai_app(Timing(), answers=_answers())) as srv:
        run_dir = runner.run(RunConfig(
            backend="http", scenario="Offline", mode="AccuracyOnly", dataset=f"mlperf:llama3.1-8b:{data}",
            backend_options={"protocol": "openai-completions", "url": srv.url + "/v1", "tokenizer": _gguf()},
        ), tmp_path / "results").run_dir
    system = tmp_path / "system.yaml"
    system.write_text(yaml.safe_dump(USER_SYSTEM))
    result = write_submission([run_dir], "Acme", "open", system, tmp_path / "out", force=True)
    txt = next(p for p in result.files if p.name == "accuracy.txt")
    rouge = json.loads((run_dir / "summary.json").read_text())["text_accuracy"]["rouge"]
    found, digest = read_as_checker(txt.read_text())
    assert digest == hashlib.sha256((run_dir / "mlperf_log_accuracy.json").read_bytes()).hexdigest()
    assert {name: found[name] for name in FIGURE if name != "exact_match"} == {
        name: rouge[FIGURE[name]] for name in FIGURE if name != "exact_match"}
    assert rouge["rouge1"] == 50.0 and found["GEN_LEN"] == rouge["gen_len"] > 0
