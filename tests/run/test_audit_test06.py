"""`harness audit TEST06` against the OpenAI truth server: an honest server passes the three
checks of compliance/TEST06/run_verification.py (mlcommons/inference b66003e1), a server that
pads its answers with EOS ids fails the EOS check, and the verification's rules hold on logs
made by hand (a first token that is not the answer's cannot come out of the harness: the first
token LoadGen gets is the start of the ids it logs, by construction)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.analysis.compliance import compliance_files, eos_token_id_for, load_audit, verify_test06
from harness.config.run_config import RunConfig
from harness.results.loadgen_log import read_accuracy_log, read_detail
from harness.run.audit import run_audit
from tests.results.test_text_accuracy import _answers, _gguf, write_cnn_eval
from tests.support.http_servers import ServerThread, Timing, answer_pieces, openai_app

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)

EOS = 7


def word_ids(piece: str) -> list[int]:
    """The truth server's tokenizer: one id a word, never EOS."""
    return [100 + sum(map(ord, piece.strip())) % 5000]


def honest_ids(piece: str) -> list[int]:
    return word_ids(piece) + ([EOS] if piece.endswith(".") else [])  # one EOS after a sentence: allowed


def padding_ids(piece: str) -> list[int]:
    return word_ids(piece) + ([EOS] * 4 if piece.endswith(".") else [])  # the EOS exploit: answers padded


def _config(url: str, data: Path, scenario: str) -> RunConfig:
    return RunConfig(backend="http", scenario=scenario, dataset=f"mlperf:llama3.1-8b:{data}",
                     **({"target_qps": 100} if scenario == "Server" else {}),
                     backend_options={"protocol": "openai-completions", "url": url + "/v1"})


@pytest.mark.parametrize("lead_ids", [None, [EOS + 1]], ids=["ids-with-text", "ids-before-text"])
def test_an_honest_server_passes_all_three_checks(tmp_path: Path, lead_ids):
    data = write_cnn_eval(tmp_path / "cnn_eval.json")
    with ServerThread(openai_app(Timing(), answers=_answers(), token_ids=honest_ids, lead_ids=lead_ids)) as srv:
        result = run_audit("TEST06", _config(srv.url, data, "Server"), tmp_path, eos_token_id=EOS)
    assert result.passed and result.conclusive, result.message
    f = result.figures
    text = (result.audit_dir / "TEST06" / "verify_accuracy.txt").read_text().splitlines()
    assert text[:4] == ["First token check pass: True", "EOS check pass: True", "Sample length check pass: True",
                        "TEST06 verification complete"]
    assert f["entries"] >= 90 and f["first_token_mismatches"] == f["eos_repeated"] == f["length_mismatches"] == 0
    run = Path(f["audit_run"])
    assert "*.*.min_query_count = 100" in (run / "audit.config").read_text()
    logged = read_accuracy_log(run)
    assert (result.audit_dir / "TEST06" / "accuracy" / "mlperf_log_accuracy.json").read_bytes() == \
        (run / "mlperf_log_accuracy.json").read_bytes()
    # the first token LoadGen logged is the answer's first id, even when the server sent the
    # ids before any text (the SUT then reports them with the first text)
    for e in logged:
        data_ids = np.frombuffer(bytes.fromhex(e["data"]), np.int32)
        first = np.frombuffer(bytes.fromhex(e["token_data"]), np.int32)
        assert len(first) and data_ids[0] == first[0] == (lead_ids[0] if lead_ids else data_ids[0])
        assert data_ids[-1] == EOS and int(e["token_count"]) == len(data_ids)
    lg, _, _ = read_detail(run)
    assert lg["effective_accuracy_log_sampling_target"] == 100 and lg["effective_test_mode"] == "PerformanceOnly"
    # harness submission's TEST06 folder: the same verdict, with the audit's EOS id, and the log it judged
    audit = load_audit(result.audit_dir)
    passed, files = compliance_files(audit, audit.run, None)
    assert passed and set(files) == {"TEST06/verify_accuracy.txt", "TEST06/accuracy/mlperf_log_accuracy.json"}
    assert files["TEST06/verify_accuracy.txt"] == (result.audit_dir / "TEST06" / "verify_accuracy.txt").read_text()


def test_a_server_padding_answers_with_eos_fails_the_eos_check(tmp_path: Path):
    data = write_cnn_eval(tmp_path / "cnn_eval.json")
    with ServerThread(openai_app(Timing(), answers=_answers(), token_ids=padding_ids)) as srv:
        out = subprocess.run([sys.executable, "-m", "harness", "audit", "TEST06", "--backend", "http", "--scenario",
                              "Offline", "--dataset", f"mlperf:llama3.1-8b:{data}", "--set", "protocol=openai-completions",
                              "--set", f"url={srv.url}/v1", "--eos-token-id", str(EOS), "--output-dir", str(tmp_path),
                              "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr  # EXIT_NEGATIVE: a verdict, FAIL
    result = json.loads(out.stdout)
    f = result["figures"]
    assert result["passed"] is False and result["conclusive"] is True
    assert f["eos_repeated"] == f["entries"] > 0 and f["length_mismatches"] == 0 and f["first_token_mismatches"] is None
    assert "ending in repeated EOS" in result["message"]
    text = (Path(result["audit_dir"]) / "TEST06" / "verify_accuracy.txt").read_text().splitlines()
    assert text[:4] == ["First token check pass: Skipped", "EOS check pass: False", "Sample length check pass: True",
                        "TEST06 verification failed"]


def test_an_honest_server_without_ids_passes_when_its_first_chunk_cuts_a_word(tmp_path: Path):
    """A server that sends no ids, each answer's first chunk two letters ("Co", then "uncil
    approves ..."): the backend's tokenizer (SmolLM2's .gguf) makes the ids. Tokenized alone
    the first chunk is not the start of the whole answer's ids ([8959] against [51, 4400]),
    so an answer tokenized whole would fail an honest server's first-token check. The
    logged answer leads with the first chunk's ids, then the rest's, and still spells the
    answer."""
    from llama_cpp import Llama

    vocab = Llama(model_path=_gguf(), vocab_only=True, verbose=False)

    def tokenize(text: str) -> list[int]:
        return vocab.tokenize(text.encode(), add_bos=False, special=False)

    answers = _answers()
    # the case this test is for: every answer's first two letters merge across the cut
    assert all(tokenize(a)[:len(tokenize(a[:2]))] != tokenize(a[:2]) for a in answers.values())
    data = write_cnn_eval(tmp_path / "cnn_eval.json")
    with ServerThread(openai_app(Timing(), answers=answers, cut=lambda a: [a[:2], *answer_pieces(a[2:])])) as srv:
        config = _config(srv.url, data, "Server")
        config = config.model_copy(update={"backend_options": {**config.backend_options, "tokenizer": _gguf()}})
        result = run_audit("TEST06", config, tmp_path)
    f = result.figures
    assert result.passed and result.conclusive, result.message
    assert f["entries"] >= 90 and f["first_token_mismatches"] == f["length_mismatches"] == 0
    by_text = {a: (tokenize(a[:2]), tokenize(a[2:])) for a in answers.values()}
    spelled = set()
    for e in read_accuracy_log(Path(f["audit_run"])):
        ids = np.frombuffer(bytes.fromhex(e["data"]), np.int32).tolist()
        first = np.frombuffer(bytes.fromhex(e["token_data"]), np.int32).tolist()
        text = vocab.detokenize(ids).decode()
        assert text in by_text and ids == [*by_text[text][0], *by_text[text][1]] and first == by_text[text][0]
        spelled.add(text)
    assert len(spelled) >= 2


def _entry(data: list[int], token_data: list[int] | None = None, token_count: int | None = None) -> dict:
    e = {"seq_id": 0, "qsl_idx": 0, "data": np.asarray(data, np.int32).tobytes().hex()}
    if token_data is not None:
        e["token_data"] = np.asarray(token_data, np.int32).tobytes().hex()
    e["token_count"] = len(data) if token_count is None else token_count
    return e


def test_the_verification_rules_are_the_scripts():
    ok = [_entry([5, 6, EOS], [5])]
    assert verify_test06(ok, "Server", EOS)[0]
    # a first token that is not the answer's; one with no token_data (the script: "Unexpected error")
    passed, f, text = verify_test06([*ok, _entry([5, 6], [9]), _entry([5, 6])], "Server", EOS)
    assert not passed and f["first_token_mismatches"] == 2 and text.startswith("First token check pass: False\n")
    assert verify_test06([_entry([5, 6], [9])], "Offline", EOS)[2].startswith("First token check pass: Skipped\n")
    # EOS: one at the end is fine, two fail; the walk never looks at index 0 (`while i > 0`)
    assert verify_test06([_entry([5, EOS, EOS], [5])], "Server", EOS)[1]["eos_repeated"] == 1
    assert verify_test06([_entry([EOS, EOS], [EOS])], "Server", EOS)[0]
    assert verify_test06([_entry([EOS, 5, EOS], [EOS])], "Server", EOS)[0]
    # length: token_count must be the ids logged
    assert verify_test06([_entry([5, 6, 7], [5], token_count=2)], "Server", EOS)[1]["length_mismatches"] == 1
    # an empty log: the script would pass it; nothing was checked, so the harness does not
    assert not verify_test06([], "Server", EOS)[0]


def test_eos_ids_per_benchmark():
    assert eos_token_id_for("llama3.1-8b")[0] == 128009 and eos_token_id_for("llama2-70b-99.9")[0] == 2
    assert eos_token_id_for("deepseek-r1")[0] == 1 and eos_token_id_for("*") == (2, "run_verification.py's default")
