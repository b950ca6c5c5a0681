"""A small CNN-DailyMail-shaped set, and the end-to-end accuracy check of a real LLM server.

Four short news articles with one-sentence reference summaries, written as MLCommons ships
llama3.1-8b's `cnn_eval.json` (input, tok_input, output). A real server (llama.cpp or vLLM
serving SmolLM2) summarises them twice in AccuracyOnly with greedy decoding; the check is
what a user needs of any score: the two runs give the same texts and the same figures, and
`harness accuracy` on each folder gives exactly what the run's own summary says. The score
itself is whatever a 135M model earns: only its range is asserted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

ARTICLES = [
    ("The city council voted on Tuesday to approve a budget of twelve million dollars for a new bridge over "
     "the river. Construction is set to begin next spring and should take two years.",
     "City council approves twelve million dollar budget for new river bridge."),
    ("Heavy snow fell across the northern region overnight, closing more than two hundred schools and "
     "several highways. Forecasters expect the storm to clear by Thursday afternoon.",
     "Heavy snow closes schools and highways in the northern region."),
    ("The national football team won the championship final three goals to one on Sunday, its third title "
     "in a row. Thousands of fans celebrated in the capital.",
     "National team wins third straight championship title."),
    ("Scientists exploring the rainforest in Peru have found a new species of tree frog. The small green frog "
     "lives high in the canopy and was recorded calling at night.",
     "Scientists find new tree frog species in Peru."),
]
#: SmolLM2's chat template written out, as llama3.1-8b's `input` holds its model's template
#: (the bare instruction made SmolLM2 stop at once, with an empty answer)
PROMPT = "<|im_start|>user\nSummarize this news article in one sentence.\n\n{}<|im_end|>\n<|im_start|>assistant\n"
#: answers of up to this many tokens: long enough for a sentence, short enough for 2 cores
MAX_TOKENS = 24


def write_cnn_eval(path: Path, token_ids: Any) -> Path:
    """cnn_eval.json as MLCommons ships it; `token_ids(text)` makes each prompt's tok_input."""
    import pandas as pd

    prompts = [PROMPT.format(article) for article, _ in ARTICLES]
    pd.DataFrame({"input": prompts, "tok_input": [token_ids(p) for p in prompts],
                  "output": [ref for _, ref in ARTICLES]}).to_json(path)
    return path


def answers(run_dir: Path) -> dict[int, str]:
    """Each sample's generated text, from the run's tokens.jsonl."""
    rows = [json.loads(line) for line in (run_dir / "tokens.jsonl").read_text().splitlines()]
    return {r["sample_index"]: r["text"] for r in rows}


def check_scored_twice_alike(runs: list[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    """Two AccuracyOnly runs of the same greedy server: same texts, same figures, and each
    folder rescored by `harness accuracy` equal to its summary. Returns the first figures."""
    from harness.cli.main import main as cli

    (dir_a, sum_a), (dir_b, sum_b) = runs
    for run_dir, s in runs:
        acc = s["text_accuracy"]
        assert s["harness"]["success_rate"] == 1.0, s["harness"]
        assert (acc["source"], acc["answers"], acc["failed"]) == ("mlperf_log_accuracy.json", len(ARTICLES), 0), acc
        rouge = acc["rouge"]
        assert rouge["gen_num"] == len(ARTICLES)
        assert 0 < rouge["tokens_per_sample"] <= MAX_TOKENS
        assert all(0.0 <= rouge[k] <= 100.0 for k in ("rouge1", "rouge2", "rougeL", "rougeLsum")), rouge
        rescored = CliRunner().invoke(cli, ["accuracy", str(run_dir), "--json"])
        assert rescored.exit_code == 0, rescored.output
        assert json.loads(rescored.stdout) == json.loads(json.dumps(acc))
    texts_a, texts_b = answers(dir_a), answers(dir_b)
    assert texts_a == texts_b, "greedy decoding gave different answers in two runs"
    assert all(t.strip() for t in texts_a.values()), texts_a
    assert sum_a["text_accuracy"]["rouge"] == sum_b["text_accuracy"]["rouge"], (sum_a["text_accuracy"], sum_b["text_accuracy"])
    # `harness parity` on the two folders: the same answers, to the token id
    parity = CliRunner().invoke(cli, ["parity", "--run-a", str(dir_a), "--run-b", str(dir_b), "--json"])
    assert parity.exit_code == 0, parity.output
    verdict = json.loads(parity.stdout)
    assert verdict["agree"] and verdict["text_match_rate"] == 1.0 and verdict["ids_match_rate"] == 1.0, verdict
    return sum_a["text_accuracy"]["rouge"]
