"""Structured outputs: a JSON Schema goes to the server in the form it takes, and each answer
is checked against it with `jsonschema`; a rejected answer is a failed task (schema_invalid),
counted in the headline's valid rate and taken off the successes that cost is divided by.

Two servers, each with truth the test made:
- llama.cpp's OpenAI server (llama-cpp-python) on SmolLM2, which turns the schema into a
  grammar: with a bounded schema and max_tokens 40, every answer is valid, and the harness's
  verdicts equal an independent re-validation of the answers it saved;
- an in-test server that breaks every k-th answer (tests/support/structured_server.py): the
  valid rate is exactly 1 - 1/k, and each broken answer is schema_invalid with its detail.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import jsonschema
import pytest
from rich.console import Console

from backends.http.structured import request_fields, schema_in
from harness.analysis.cost import CostSheet, cost_for_run
from harness.config.run_config import RunConfig
from harness.data.prompts import load_jsonl
from harness.errors import ConfigError, DatasetError
from harness.report.terminal import render
from harness.results.token_metrics import read_token_entries
from harness.run import runner
from tests.support.http_servers import ServerThread
from tests.support.llama_server import llama_server  # noqa: F401 - the module's fixture
from tests.support.structured_server import DETAIL, PERSON, StructuredTruth, structured_app

K = 4  # every 4th answer breaks
N = 12  # timed requests: 3 broken, one of each way


def _offline(n: int, **settings) -> dict:
    # Offline issues max(min_query_count, 1.1 x qps x duration) samples: exactly n here
    return dict(backend="http", scenario="Offline", min_duration_s=0.1, min_query_count=n,
                offline_expected_qps=1, use_token_latencies=True, **settings)


def _terminal(run_dir: Path) -> str:
    buf = io.StringIO()
    render(json.loads((run_dir / "summary.json").read_text()), Console(file=buf, width=80, color_system=None),
           str(run_dir))
    return buf.getvalue()


@pytest.fixture(scope="module", params=[True, False], ids=["streamed", "whole"])
def broken_every_k(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A run of N prompts, each with its own schema (a JSONL row's `schema`), sent in
    OpenAI's form, against the server that breaks every K-th answer; streamed or whole."""
    tmp = tmp_path_factory.mktemp("structured")
    prompts = tmp / "people.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Give person {i} as JSON.", "schema": PERSON}) + "\n"
                               for i in range(N)))
    truth = StructuredTruth(K)
    with ServerThread(structured_app(truth)) as server:
        outcome = runner.run(RunConfig(**_offline(
            N, dataset=str(prompts), cost={"currency": "EUR", "per_request": 0.01},
            backend_options={"protocol": "openai-chat", "url": server.url + "/v1", "max_in_flight": 2,
                             "max_tokens": 40, "stream": request.param}),
        ), tmp / "results")
    return outcome.run_dir, outcome.summary, truth


def test_the_valid_rate_is_exactly_one_minus_one_over_k(broken_every_k):
    run_dir, s, truth = broken_every_k
    assert len(truth.answers) == N and s["harness"]["success_rate"] == 1.0  # every request returned
    v = s["tokens"]["validation"]
    assert v["checked"] == N and v["valid"] == N - N // K and v["invalid"] == N // K
    assert v["rate"] == 1 - 1 / K
    assert v["invalid_by_reason"] == {"schema_invalid": N // K}
    # each row's own schema went out in OpenAI's form, as the server received it
    assert all(b["response_format"] == request_fields("openai", PERSON)["response_format"] for b in truth.bodies)
    assert truth.bodies[0]["response_format"]["json_schema"]["strict"] is True
    assert s["dataset"]["with_schema"] == N


def test_each_broken_answer_is_schema_invalid_with_its_detail(broken_every_k):
    run_dir, s, truth = broken_every_k
    broke = dict(truth.answers)  # answer text -> how the server broke it ("" valid)
    entries = [e for e in read_token_entries(run_dir) if e.get("valid") is not None]
    assert len(entries) == N
    for e in entries:
        how = broke[e["text"]]
        assert e["valid"] is (how == ""), e
        if how:
            assert e["invalid"].startswith("schema_invalid: ") and DETAIL[how] in e["invalid"], e
            assert len(e["invalid"]) < 200  # short: a path and a message
        else:
            assert "invalid" not in e
    assert sorted(h for h in broke.values() if h) == ["cut_short", "not_json", "wrong_type"]


def test_schema_invalid_answers_are_not_successful_tasks_in_cost(broken_every_k):
    run_dir, s, _ = broken_every_k
    cost = cost_for_run(run_dir, s, CostSheet(currency="EUR", per_request=0.01))
    valid = N - N // K
    assert cost["usage"]["requests"] == N and cost["usage"]["succeeded"] == valid
    assert cost["per_request"] == pytest.approx(0.01)
    assert cost["per_successful_task"] == pytest.approx(0.01 * N / valid)
    assert "answer valid" in cost["success_criterion"]


def test_the_valid_rate_stands_in_the_headline_at_80_columns(broken_every_k):
    run_dir, s, _ = broken_every_k
    text = _terminal(run_dir)
    valid = N - N // K
    line = f"answers schema-valid {(1 - 1 / K) * 100:.2f}% ({valid} of {N} checked) · invalid: schema_invalid {N // K}"
    assert line in text, text
    head = text.split("\n\n")[0]  # the headline: speed, success, the valid rate, cost
    assert head.index("success 100.00%") < head.index(line) < head.index("per successful task")
    assert "answers' checks" in text and "first schema_invalid:" in text
    assert max(len(x) for x in text.splitlines()) <= 80


def test_llama_cpp_answers_follow_a_bounded_schema(run_harness, llama_server, tmp_path):
    """llama-cpp-python takes the schema as response_format json_object + schema (its own
    form; OpenAI's gives HTTP 500), from the json_schema option, for every prompt."""
    url, _ = llama_server
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(PERSON))
    prompts = tmp_path / "ask.jsonl"
    asks = ["Give the name and age of a person as JSON.", "Describe a musician as JSON with name and age.",
            "A JSON object for a child: name and age."]
    prompts.write_text("".join(json.dumps({"prompt": a}) + "\n" for a in asks))
    run_dir, s = run_harness(**_offline(
        len(asks), dataset=str(prompts),
        backend_options={"protocol": "openai-chat", "url": url, "json_schema": str(schema), "schema_form": "llama-cpp",
                         "max_tokens": 40, "temperature": 0.0, "max_in_flight": 1, "read_timeout_s": 120}))
    assert s["harness"]["success_rate"] == 1.0, s["harness"]["failures_by_reason"]
    v = s["tokens"]["validation"]
    assert v["checked"] == len(asks) and v["rate"] == 1.0 and v["invalid_by_reason"] == {}
    assert s["backend"]["schema_form"] == "llama-cpp"
    # truth: the saved answers, re-validated here, independently of the harness
    entries = [e for e in read_token_entries(run_dir) if e["status"] == "ok"]
    assert len(entries) == len(asks)
    for e in entries:
        jsonschema.validate(json.loads(e["text"]), PERSON)
        assert e["valid"] is True
    assert "answers schema-valid 100.00%" in _terminal(run_dir)


# --- bad input: one line each, before the test ------------------------------------------

def test_a_schema_that_is_no_schema_names_the_row(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "a", "schema": {"type": "persn"}}) + "\n")
    with pytest.raises(DatasetError, match=r"jsonl sample 0: not a valid JSON Schema: .* at \$\.type"):
        load_jsonl(bad)
    bad.write_text(json.dumps({"prompt": "a", "schema": "person.json"}) + "\n")
    with pytest.raises(DatasetError, match=r"bad.jsonl:1: `schema` must be a JSON Schema \(an object\), not str"):
        load_jsonl(bad)


def test_a_json_schema_option_that_is_not_json_is_one_line(run_harness, tmp_path):
    schema = tmp_path / "s.json"
    schema.write_text("{not json")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "a"}) + "\n")
    with pytest.raises(ConfigError, match=r"json_schema .*s.json: not valid JSON \(Expecting property name"):
        run_harness(**_offline(1, dataset=str(prompts), backend_options={
            "protocol": "openai-chat", "url": "http://127.0.0.1:9/v1", "json_schema": str(schema), "check_server": False}))


@pytest.mark.parametrize("fields", [
    {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}}},
    {"response_format": {"type": "json_object", "schema": PERSON}},
    {"structured_outputs": {"json": json.dumps(PERSON)}},
    {"guided_json": PERSON},
])
def test_a_schema_passed_through_extra_body_is_read_back_in_every_form(fields):
    assert schema_in(fields) == PERSON
    assert schema_in({"response_format": {"type": "json_object"}}) == {"type": "object"}
    assert schema_in({"structured_outputs": {"regex": "[a-z]+"}}) is None
