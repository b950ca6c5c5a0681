"""harness submission for MLPerf's LLM benchmarks: the checker's v6.1 LLM rules, and the
Interactive scenario (LoadGen's Server with mlperf.conf's `<model>-interactive` bounds).

Real LoadGen runs against the in-test OpenAI server, named llama3_1-8b so LoadGen applies
the benchmark's compiled-in mlperf.conf; short (min_duration_s under a second), so each
breaks the 600 s rule, which the tests expect beside the rule they pin. The harness's
complaints are held one to one to the checker's; the loopholes it lets through (equal issue
off, a lowered min_query_count, an accuracy run on a smaller set than it logs, an INVALID
run outside early stopping) are the harness's own list, pinned apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.analysis.submission import SubmissionRefused, write_submission
from harness.analysis.submission_rules import accuracy_problems, scenario_problems
from harness.config.run_config import RunConfig
from harness.data.benchmarks import BY_NAME
from harness.report.figures import headline
from harness.results.loadgen_log import read_detail
from harness.run import runner
from tests.support.http_servers import ServerThread, Timing, openai_app

SYSTEM = {"system_name": "Test box", "system_type": "datacenter", "status": "available",
          "host_processors_per_node": 1, "host_storage_capacity": "64 GB", "host_storage_type": "SSD",
          "host_memory_configuration": "a VM", "host_networking": "virtio", "host_network_card_count": 1,
          "host_networking_topology": "N/A", "cooling": "air",
          # over HTTP the run names no model file: the weights are named here
          "measurements": {"starting_weights_filename": "SmolLM2-135M-Instruct.Q4_1.gguf"}}


def _llm_run(root: Path, scenario: str, ttft_ms: float, tokens: int = 6) -> Path:
    """A short llama3_1-8b run whose every first token takes `ttft_ms`."""
    # min_query_count under mlperf.conf's (13,368 Offline samples for llama3_1-8b): a short query
    load = {"offline_expected_qps": 40} if scenario == "Offline" else {"target_qps": 40}
    with ServerThread(openai_app(Timing(ttft_ms=ttft_ms, tpot_ms=2, tokens=tokens))) as srv:
        config = RunConfig(backend="http", scenario=scenario, benchmark="llama3_1-8b",
                           dataset=f"synthetic:isl=16,osl={tokens},n=32",
                           backend_options={"protocol": "openai-chat", "url": srv.url + "/v1"},
                           min_duration_s=0.5, min_query_count=20, **load)
        return runner.run(config, root).run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("llm")
    # Interactive's TTFT bound is 500 ms, Server's 2,000 ms: 700 ms passes one, not the other
    return {"interactive": _llm_run(root, "Interactive", 700), "server": _llm_run(root, "Server", 2100),
            "offline": _llm_run(root, "Offline", 5)}


def _refused(paths: list[Path], tmp_path: Path, division: str = "open",
             system: dict | None = None) -> tuple[list[str], list[str]]:
    """(the checker's complaints, the loopholes it lets through) as the harness names them."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    desc = tmp_path / "system.yaml"
    desc.write_text(yaml.safe_dump(SYSTEM if system is None else system))
    with pytest.raises(SubmissionRefused) as e:
        write_submission(paths, "Acme", division, desc, tmp_path / "out")
    listed = [line[4:] for line in str(e.value).splitlines() if line.startswith("  - ")]
    assert listed == e.value.checker + e.value.loopholes  # the message lists both, checker's first
    return e.value.checker, e.value.loopholes


def _rules(paths: list[Path], tmp_path: Path, division: str = "open", system: dict | None = None) -> list[str]:
    """The checker's complaints only: one to one with its log."""
    return _refused(paths, tmp_path, division, system)[0]


def test_interactive_runs_as_loadgens_server_and_is_reported_as_interactive(runs):
    run_dir = runs["interactive"]
    assert run_dir.name.endswith("-Interactive")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["run"]["scenario"] == "Interactive"
    values, errors, _ = read_detail(run_dir)
    assert values["effective_scenario"] == "Server" and not errors  # each first token before its completion
    bounds = summary["tokens"]["loadgen"]
    assert (bounds["ttft_bound_ms"], bounds["tpot_bound_ms"]) == (500, 30)  # llama3_1-8b-interactive's
    lines = headline(summary, None)
    assert lines[0].split(" · ")[1].startswith("Interactive ")
    token = next(line for line in lines if line.startswith("TTFT p50/p99"))
    assert "(bound 500 ms)" in token and "tok/s" in token
    assert any(line.startswith("TPOT p50/p99") and "(bound 30 ms)" in line for line in lines) or "(bound 30 ms)" in token
    over = [line for line in lines if line.startswith("OVER: ")]
    assert len(over) == 1 and over[0].startswith("OVER: TTFT p99") and over[0].endswith("is over its 500 ms bound"), over
    assert all(len(line) <= 78 for line in lines[1:]), lines  # the headline fits 80 columns, indented by 2


@pytest.mark.parallel
def test_interactive_is_refused_for_a_benchmark_without_interactive_bounds():
    with pytest.raises(ValueError, match="scenario Interactive is an LLM benchmark's Server") as e:
        RunConfig(scenario="Interactive", benchmark="resnet50")
    assert "llama3_1-8b" in str(e.value)
    with pytest.raises(ValueError, match="which official_conf false leaves unread"):
        RunConfig(scenario="Interactive", benchmark="llama3_1-8b", official_conf=False)
    with pytest.raises(ValueError, match="LoadGen's mlperf.conf calls it 'llama3_1-8b'"):
        RunConfig(benchmark="llama3.1-8b")
    assert RunConfig(benchmark="llama3_1-8b").use_token_latencies is True
    assert RunConfig(benchmark="resnet50").use_token_latencies is None


def test_a_server_run_over_the_ttft_bound_is_named_as_such(runs, tmp_path):
    """One to one with the checker (v6.1 at b66003e1, run on the --force folder of such runs):
    "Early stopping condition was not met" (LoadGen's INVALID), "Failed extra check for TTFT
    and TPOT ... TTFT 99-tile: 2107414222 ... Required: 2000000000", "Test duration less than
    600s", and no accuracy folder."""
    rules, loopholes = _refused([runs["server"]], tmp_path)
    joined = "\n".join(rules)
    assert len(rules) == 4, rules
    assert "LoadGen judged" in joined and "early stopping" in joined
    assert "llama3_1-8b/Server: TTFT p99" in joined and "is not under Server's 2000 ms bound (llama3.1-8b)" in joined
    assert "TPOT p99" not in joined  # 2 ms against 100 ms
    assert "min duration 0.5 s is under the official 600 s" in joined
    assert "no AccuracyOnly run" in joined
    # the run's short min_query_count, which the checker lets through: the harness's own refusal
    assert len(loopholes) == 1, loopholes
    assert loopholes[0] == (f"llama3_1-8b/Server: {runs['server'].name}/run.yaml sets min_query_count: 20: "
                            "min_query_count 20 is under mlperf.conf's 100 for llama3_1-8b Server (the checker "
                            "lets it through); remove that setting")


def test_an_interactive_run_is_held_to_interactives_bounds(runs, tmp_path):
    """The checker reads the bounds by the log's effective_scenario (Server): it logged "TTFT
    target: 2000000000, TTFT: 706146308 ... Scenario: Server" for such a run and passed it.
    Interactive's own bound is 500 ms."""
    rules, loopholes = _refused([runs["interactive"]], tmp_path)
    assert not any("TTFT p99" in r for r in rules), rules  # the checker passes it
    # LoadGen's early stopping judged by Interactive's bound: the checker's "Early stopping
    # condition was not met", named by LoadGen's INVALID
    assert any(r.startswith("llama3_1-8b/Interactive: LoadGen judged") for r in rules), rules
    over = [r for r in loopholes if "TTFT p99" in r]
    assert len(over) == 1 and "is not under Interactive's 500 ms bound (llama3.1-8b)" in over[0], loopholes
    assert over[0].endswith("the checker holds it to Server's 2000/100 ms")


def test_a_datacenter_llm_needs_offline_and_one_of_server_or_interactive(runs, tmp_path):
    missing = scenario_problems("llama3_1-8b", {"Offline"}, "datacenter", "closed")
    assert len(missing) == 1 and "needs Offline and one of Interactive or Server" in missing[0]
    assert "missing one of Interactive or Server" in missing[0]
    assert scenario_problems("llama3_1-8b", {"Offline", "Interactive"}, "datacenter", "closed") == []
    assert "SingleStream not allowed" in scenario_problems("llama3_1-8b", {"Offline", "Server", "SingleStream"},
                                                           "datacenter", "closed")[0]
    edge = scenario_problems("llama3_1-8b-edge", {"Offline"}, "edge", "closed")
    assert "needs exactly the scenarios SingleStream, Offline" in edge[0]
    assert "has no llama3.1-8b entry" in scenario_problems("llama3_1-8b", {"Offline"}, "edge", "closed")[0]
    # through the command: the Interactive run alone, then the Offline run alone, closed division
    joined = "\n".join(_rules([runs["interactive"]], tmp_path, "closed"))
    assert "system_type datacenter in the closed division needs Offline and one of Interactive or Server" in joined
    assert "missing Offline" in joined
    assert "no TEST06 audit; the closed division needs TEST06 in every scenario" in joined
    joined = "\n".join(_rules([runs["offline"]], tmp_path / "o", "closed"))
    assert "(missing one of Interactive or Server)" in joined
    # 22 samples in the Offline query against the checker's 13,368 for llama3.1-8b
    assert "samples in the Offline query, under the official 13,368" in joined
    assert "no result_tokens_per_second" not in joined and "TTFT" not in joined  # Offline: no token bounds
    # mlperf.conf's sample_concatenate_permutation pads the query to the 32 loaded samples: all recorded
    assert "incomplete" not in joined
    joined = "\n".join(_rules([runs["offline"], runs["interactive"]], tmp_path / "oi", "closed"))
    assert "system_type" not in joined


@pytest.mark.parallel
def test_loadgen_errors_are_named(tmp_path):
    """One token an answer: LoadGen logs an error per sample (it wants at least 2 to time
    TPOT), and the checker rejects a log with errors."""
    run_dir = _llm_run(tmp_path, "Server", 5, tokens=1)
    joined = "\n".join(_rules([run_dir], tmp_path / "sub"))
    assert "llama3_1-8b/Server: LoadGen logged" in joined and "Number of tokens need to be greater than 1" in joined


@pytest.mark.parallel
def test_accuracy_is_held_to_the_llm_targets_and_window():
    """ROUGE and gen_len as accuracy.txt gives them (percent, characters), by the checker's keys."""
    eff = {"accuracy_sample_count": 13_368}
    good = {"ROUGE1": 38.8, "ROUGE2": 15.95, "ROUGEL": 24.5, "ROUGELSUM": 35.8, "GEN_LEN": 8_000_000}
    assert accuracy_problems("b/Offline", "acc", "llama3_1-8b", "closed", eff, good) == []
    bad = accuracy_problems("b/Offline", "acc", "llama3_1-8b", "closed", {"accuracy_sample_count": 100},
                            good | {"ROUGE2": 15.0, "GEN_LEN": 9_000_000})
    assert len(bad) == 3, bad
    assert "covers 100 samples; the checker wants the whole llama3_1-8b dataset, 13,368" in bad[0]
    assert "ROUGE2 15.0000% is under the closed division's target 15.7484%" in bad[1]
    assert "GEN_LEN 9,000,000.0000 is over the closed division's upper limit 8,984,408.4000" in bad[2]
    assert accuracy_problems("b/Offline", "acc", "llama3_1-8b", "open", {"accuracy_sample_count": 13_368}, good) == []
    # gpt-oss-120b: its accuracy set, 4,395 of the 6,396
    oss = accuracy_problems("g/Offline", "acc", "gpt-oss-120b", "open", {"accuracy_sample_count": 6_396},
                            {"exact_match": 90.0})
    assert oss and "its accuracy set of gpt-oss-120b dataset, 4,395" in oss[0]


def test_system_description_problems_are_listed_with_the_run_rules(runs, tmp_path):
    partial = {k: v for k, v in SYSTEM.items() if k != "cooling"} | {"number_of_nodes": "two"}
    rules = _rules([runs["server"]], tmp_path, system=partial)
    assert any(r.startswith("system description: cooling must have a value") for r in rules), rules
    assert any("number_of_nodes 'two' must be a whole number" in r for r in rules)
    assert any("TTFT p99" in r for r in rules)


def test_a_result_without_its_weights_named_is_refused_as_the_checker_refuses_it(runs, tmp_path):
    """The checker's measurements_checks.py: "field starting_weights_filename is missing
    meaningful value" (seen on a forced folder of HTTP runs). A run over HTTP has no model
    file to name, so the system description must name the weights."""
    system = {k: v for k, v in SYSTEM.items() if k != "measurements"}
    rules = _rules([runs["offline"]], tmp_path, system=system)
    assert ("llama3_1-8b/Offline: measurements.json's starting_weights_filename must have a value "
            "(the checker rejects empty ones") in "\n".join(rules), rules
    assert not any("starting_weights_filename" in r for r in _rules([runs["offline"]], tmp_path / "named"))


def test_the_llm_layout_uses_the_checkers_names(runs, tmp_path):
    desc = tmp_path / "system.yaml"
    desc.write_text(yaml.safe_dump(SYSTEM))
    result = write_submission([runs["interactive"]], "Acme", "open", desc, tmp_path / "out", force=True)
    scen = result.root / "results" / "Test_box" / "llama3.1-8b" / "Interactive"
    for rel in ("performance/run_1/mlperf_log_summary.txt", "performance/run_1/mlperf_log_detail.txt",
                "measurements.json", "user.conf", "README.md"):
        assert (scen / rel).is_file(), rel
    assert "llama3_1-8b-interactive.Server.target_qps = 40" in (scen / "user.conf").read_text()
    # the checker reads an LLM's Interactive result as Server's: completed tokens per second
    readme = (scen / "README.md").read_text()
    assert "Result (result_completed_tokens_per_second, the checker's figure): " in readme
    assert float(readme.split("the checker's figure): ")[1].split()[0]) > 0


@pytest.mark.parallel
def test_the_llm_table_reads_as_the_checkers():
    bench = BY_NAME["llama3_1-8b"]
    assert bench.is_llm and not BY_NAME["resnet50"].is_llm
    assert bench.metric["Interactive"] == bench.metric["Server"] == "result_completed_tokens_per_second"
    assert bench.metric["Offline"] == "result_tokens_per_second"
    assert BY_NAME["llama3_1-8b-edge"].metric["SingleStream"] == "result_90.00_percentile_latency_ns"
    assert BY_NAME["gpt-oss-120b"].accuracy_count == 4_395  # the checker's accuracy set, not the 6,396
    assert BY_NAME["gpt-oss-120b"].compliance == ("TEST07", "TEST09")
    assert dict(bench.accuracy_targets)["GEN_LEN"] == pytest.approx(7_350_879.6)
    assert dict(bench.accuracy_upper)["GEN_LEN"] == pytest.approx(8_984_408.4)
    # an explicit false stays false: the submission rules name it
    assert RunConfig(benchmark="llama3_1-8b", use_token_latencies=False).use_token_latencies is False


@pytest.mark.parallel
def test_a_forced_llm_submission_holds_performance_accuracy_txt_and_test06_as_the_checker_reads_them(tmp_path):
    """The three pieces of an LLM scenario folder from three real runs against one truth
    server (llama3_1-8b, Server): the performance run, an accuracy run of a cnn_eval.json whose
    answers are right for 3 of 6 prompts (the server's own ids, one a word, are logged and
decoded with SmolLM2's tokenizer: the score is of that decoding), and a TEST06 audit. Short runs break the 600 s rule,
    so --force writes the folder: accuracy.txt carries the ROUGE figures of the run's summary
    in the evaluation script's form (the checker's regex reads them back), the hash of the
    whole log, and TEST06's verify file passes all three of the script's checks."""
    import re

    from harness.run.audit import run_audit
    from tests.results.test_text_accuracy import _answers, _gguf, write_cnn_eval

    eos = 7
    ids = lambda piece: [100 + sum(map(ord, piece.strip())) % 5000]  # noqa: E731  one id a word, never EOS
    data = write_cnn_eval(tmp_path / "cnn_eval.json")
    with ServerThread(openai_app(Timing(ttft_ms=5, tpot_ms=2), answers=_answers(), token_ids=ids)) as srv:
        def config(mode: str) -> RunConfig:
            return RunConfig(backend="http", scenario="Server", mode=mode, benchmark="llama3_1-8b",
                             dataset=f"mlperf:llama3.1-8b:{data}", target_qps=40, min_duration_s=0.5,
                             min_query_count=20, backend_options={"protocol": "openai-completions", "url": srv.url + "/v1",
                                                                  "tokenizer": _gguf()})  # decodes the logged ids to score them
        perf = runner.run(config("PerformanceOnly"), tmp_path / "results").run_dir
        acc = runner.run(config("AccuracyOnly"), tmp_path / "results").run_dir
        audit = run_audit("TEST06", config("PerformanceOnly"), tmp_path / "results", eos_token_id=eos)
    assert audit.passed, audit.message
    desc = tmp_path / "system.yaml"
    desc.write_text(yaml.safe_dump(SYSTEM))
    # closed: the division that takes compliance folders
    result = write_submission([perf, acc, audit.audit_dir], "Acme", "closed", desc, tmp_path / "out", force=True)
    assert any("600 s" in b for b in result.broken)  # why --force was needed
    assert not any("TEST06" in b for b in result.broken), result.broken
    scen = result.root / "results" / "Test_box" / "llama3.1-8b" / "Server"
    text = (scen / "accuracy" / "accuracy.txt").read_text()
    rouge = json.loads((acc / "summary.json").read_text())["text_accuracy"]["rouge"]
    # constants.py ACC_PATTERN (b66003e1): "'rouge1': (\d+\.?\d*)" and the others alike
    for key in ("rouge1", "rouge2", "rougeL"):
        assert float(re.search(rf"'{key}':\s*'?(\d+\.?\d*)", text).group(1)) == pytest.approx(rouge[key], abs=1e-4)
    assert int(re.search(r"'gen_len':\s*(\d+)", text).group(1)) == rouge["gen_len"]
    assert "np.float64" not in text and re.search(r"^hash=[0-9a-f]{64}$", text, re.M)
    verify = (scen / "TEST06" / "verify_accuracy.txt").read_text().splitlines()
    assert verify[:3] == ["First token check pass: True", "EOS check pass: True", "Sample length check pass: True"]
    assert (scen / "TEST06" / "accuracy" / "mlperf_log_accuracy.json").is_file()
    assert (scen / "accuracy" / "mlperf_log_accuracy.json").is_file() and (scen / "performance" / "run_1").is_dir()


def _conf_run(root: Path, mode: str, scenario: str, conf: str, **settings) -> Path:
    """A short llama3_1-8b run with a user.conf, as a user sets LoadGen's keys."""
    user_conf = root / f"user-{scenario}-{mode}.conf"
    user_conf.parent.mkdir(parents=True, exist_ok=True)
    user_conf.write_text(conf + "\n")
    load = {"offline_expected_qps": 40} if scenario == "Offline" else {"target_qps": 40}
    ids = lambda piece: [100 + len(piece)]  # noqa: E731  token ids in the answers: accuracy mode logs them
    with ServerThread(openai_app(Timing(ttft_ms=5, tpot_ms=2, tokens=6), token_ids=ids)) as srv:
        config = RunConfig(backend="http", scenario=scenario, mode=mode, benchmark="llama3_1-8b",
                           dataset="synthetic:isl=16,osl=6,n=32", user_conf=str(user_conf),
                           backend_options={"protocol": "openai-completions", "url": srv.url + "/v1"},
                           **(load | settings))
        return runner.run(config, root).run_dir


def test_equal_issue_padding_turned_off_is_refused_though_the_checker_lets_it_through(tmp_path):
    """mlperf.conf turns sample_concatenate_permutation on for llama3_1-8b; the v6.1 checker's
    equal_issue_check applies to v4.1 only, so a run with it off passes there."""
    conf = "llama3_1-8b.Server.sample_concatenate_permutation = 0"
    run_dir = _conf_run(tmp_path, "PerformanceOnly", "Server", conf, min_duration_s=0.5)
    assert read_detail(run_dir)[0]["effective_sample_concatenate_permutation"] is False
    rules, loopholes = _refused([run_dir], tmp_path / "sub")
    assert not any("sample_concatenate_permutation" in r or "equal-issue" in r for r in rules), rules
    path = tmp_path / "user-Server-PerformanceOnly.conf"
    assert loopholes == [f"llama3_1-8b/Server: user-Server-PerformanceOnly.conf ({path}) sets {conf}: MLPerf's "
                         "equal-issue padding is off (mlperf.conf turns it on for this benchmark; the checker does "
                         "not look); remove that setting"], loopholes


def test_a_lowered_offline_min_query_count_is_refused_in_the_open_division(runs, tmp_path):
    """mlperf.conf asks 13,368 samples of a llama3_1-8b Offline query; the checker counts them
    in the closed division only (its effective min_query_count is 1)."""
    rules, loopholes = _refused([runs["offline"]], tmp_path)
    assert not any("samples in the Offline query" in r for r in rules), rules
    assert (f"llama3_1-8b/Offline: {runs['offline'].name}/run.yaml sets min_query_count: 20: min_query_count 20 is "
            "under mlperf.conf's 13,368 for llama3_1-8b Offline (the checker lets it through); remove that setting"
            ) in loopholes, loopholes


def test_an_accuracy_run_on_a_smaller_set_than_it_logs_is_refused(tmp_path):
    """accuracy_sample_count_override = 13,368 on a 32-sample set: LoadGen logs 13,368 (what
    the checker's dataset_check reads) but issues the 32 it has."""
    conf = "llama3_1-8b.Offline.accuracy_sample_count_override = 13368"
    run_dir = _conf_run(tmp_path, "AccuracyOnly", "Offline", conf)
    assert read_detail(run_dir)[0]["effective_accuracy_sample_count"] == 13_368
    rules, loopholes = _refused([run_dir], tmp_path / "sub")
    assert not any("covers" in r for r in rules), rules  # the logged count is the checker's
    path = tmp_path / "user-Offline-AccuracyOnly.conf"
    assert loopholes == [f"llama3_1-8b/Offline: the accuracy run {run_dir.name} logs 13,368 accuracy samples but "
                         f"LoadGen issued 32 distinct ones (user-Offline-AccuracyOnly.conf ({path}) sets {conf}, "
                         "above its dataset; the checker reads the logged count): run on the whole dataset, without "
                         "that override"], loopholes


def test_an_invalid_offline_run_is_refused_though_the_checker_never_reads_validity(tmp_path):
    """32 samples cannot fill a 60 s minimum duration: LoadGen's INVALID, which the checker
    never reads in Offline (no early stopping there); the harness refuses it all the same."""
    run_dir = _conf_run(tmp_path, "PerformanceOnly", "Offline", "# nothing", min_duration_s=60,
                        min_query_count=20)  # (a loophole of its own, beside this one)
    assert json.loads((run_dir / "summary.json").read_text())["validity"]["result"] == "INVALID"
    rules, loopholes = _refused([run_dir], tmp_path / "sub")
    assert not any("LoadGen judged" in r for r in rules), rules
    assert any(r.startswith(f"llama3_1-8b/Offline: LoadGen judged {run_dir.name} INVALID: ")
               and r.endswith("(the checker does not read LoadGen's verdict)") for r in loopholes), loopholes
