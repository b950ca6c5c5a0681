"""Every HTTP failure kind is completed to LoadGen, recorded with its reason, counted apart,
and kept out of latency; credentials never reach the results folder."""

from __future__ import annotations

import json
import socket
from collections import Counter
from pathlib import Path

import pytest

from backends.http import HttpOptions
from harness.results.records import read_records
from tests.support.http_servers import BEHAVIOURS, ServerThread, Timing, openai_app, write_prompts

TOKEN_RUN = dict(use_token_latencies=True, ttft_latency_ms=5000, tpot_latency_ms=1000)


def _expected(run_dir: Path, behaviours: list[str]) -> tuple[Counter, Counter]:
    """(reasons the records hold, reasons the prompts of the issued samples call for)."""
    rec = read_records(run_dir).columns
    got = Counter(str(e).split(":", 1)[0] for e in rec["error"] if e)
    want = Counter(BEHAVIOURS[behaviours[i]] for i in rec["sample_index"] if BEHAVIOURS[behaviours[i]])
    return got, want


def _streaming_run(run_harness, tmp_path, behaviours: list[str], timing: Timing, scenario: str, queries: int):
    """A streaming completions run with a 0.5 s read timeout, one prompt per behaviour."""
    prompts = write_prompts(tmp_path / "prompts.jsonl", behaviours, max_tokens=timing.tokens)
    with ServerThread(openai_app(timing)) as srv:
        return run_harness(
            backend="http",
            scenario=scenario,
            dataset=str(prompts),
            target_qps=100,
            backend_options={
                "protocol": "openai-completions",
                "url": srv.url + "/v1",
                "read_timeout_s": 0.5,
                "warmup_requests": 0,
            },
            min_duration_s=0.1,
            min_query_count=queries,
            offline_expected_qps=1,
            **TOKEN_RUN,
        )


@pytest.mark.parametrize("scenario", ["Offline", "Server"])
def test_every_failure_kind_is_counted_apart(run_harness, tmp_path, scenario):
    behaviours = list(BEHAVIOURS)  # one prompt per kind, "@ok" among them
    t = Timing(ttft_ms=50, tpot_ms=5, tokens=8)
    run_dir, s = _streaming_run(run_harness, tmp_path, behaviours, t, scenario, queries=48)
    ours = s["harness"]
    got, want = _expected(run_dir, behaviours)
    assert got == want
    assert set(want) == {r for r in BEHAVIOURS.values() if r}  # each kind really happened
    assert ours["failures_by_reason"] == dict(want)
    # all completed to LoadGen (it would wait forever otherwise), without a LoadGen error
    n = ours["samples"]
    assert n >= 48 and s["loadgen"]["errors"] == []
    assert ours["failed"] == sum(want.values())
    assert ours["success_rate"] == (n - ours["failed"]) / n
    # failures never count as fast successes: the fastest success took the whole stream
    assert ours["latency_ms"]["min"] >= t.ttft_ms + 7 * t.tpot_ms
    assert s["tokens"]["requests"] == ours["succeeded"]
    assert s["tokens"]["output_tokens"] == 8 * ours["succeeded"]
    rec = read_records(run_dir).columns
    timeouts = [e for e in rec["error"] if e.startswith("timeout")]
    assert all("read 0.5 s" in e for e in timeouts)
    assert all(e.startswith("http_503: ") and "overloaded" in e for e in rec["error"] if e.startswith("http_503"))
    assert any("failed" in r for r in s["validity"]["reasons"])


@pytest.mark.parallel
def test_non_streaming_malformed_and_empty_answers(run_harness, tmp_path):
    behaviours = ["@ok", "@empty", "@http_503", "@disconnect"]
    prompts = write_prompts(tmp_path / "prompts.jsonl", behaviours)
    with ServerThread(openai_app(Timing(ttft_ms=5, tokens=4))) as srv:
        run_dir, s = run_harness(
            backend="http",
            scenario="Offline",
            dataset=str(prompts),
            backend_options={"protocol": "openai-chat", "url": srv.url + "/v1", "stream": False, "warmup_requests": 0},
            min_duration_s=0.1,
            min_query_count=24,
            offline_expected_qps=1,
            **TOKEN_RUN,
        )
    got, want = _expected(run_dir, behaviours)
    assert got == want and set(want) == {"empty_output", "http_503", "disconnected"}


def test_read_timeout_counts_silence_not_length(run_harness, tmp_path):
    # Streams with 300 ms between events outlive a 0.5 s read timeout and succeed; a stream
    # that goes quiet after its first event, and a server that never sends headers, fail
    # about 0.5 s after their last bytes.
    behaviours = ["@ok", "@ok", "@hang", "@no_headers"]
    t = Timing(ttft_ms=300, tpot_ms=300, tokens=4)
    run_dir, _ = _streaming_run(run_harness, tmp_path, behaviours, t, "Offline", queries=4)
    rec = read_records(run_dir).columns
    by_kind = {behaviours[i]: k for k, i in enumerate(rec["sample_index"])}
    ok = [k for k, i in enumerate(rec["sample_index"]) if behaviours[i] == "@ok"]
    assert len(ok) >= 2 and all(rec["status"][k] == "ok" for k in ok)
    assert all((rec["complete_ns"][k] - rec["dispatch_ns"][k]) / 1e6 >= 1200 for k in ok)  # 2.4 read timeouts
    hang, no_headers = by_kind["@hang"], by_kind["@no_headers"]
    assert rec["error"][hang].startswith("timeout: ") and "read 0.5 s" in rec["error"][hang]
    assert rec["error"][no_headers].startswith("timeout: ") and "read 0.5 s" in rec["error"][no_headers]
    # Timed from the last bytes: the first token (hang) or the request's start (no headers).
    assert 500 <= (rec["complete_ns"][hang] - rec["first_token_ns"][hang]) / 1e6 < 700
    assert 500 <= (rec["complete_ns"][no_headers] - rec["dispatch_ns"][no_headers]) / 1e6 < 700


@pytest.mark.parallel
def test_malformed_json_body(run_harness, tmp_path):
    # A server that is not what it claims: the json protocol's answer is an HTML page.
    from aiohttp import web

    async def garbage(_: web.Request) -> web.Response:
        return web.Response(text="<html>Bad Gateway</html>", content_type="text/html")

    app = web.Application()
    app.router.add_post("/predict", garbage)
    template = tmp_path / "req.json"
    template.write_text(json.dumps({"text": "{{prompt}}", "limit": "{{max_tokens}}"}))
    with ServerThread(app) as srv:
        run_dir, s = run_harness(
            backend="http",
            scenario="Offline",
            dataset="synthetic:isl=4,osl=4,n=8",
            backend_options={
                "protocol": "json",
                "url": srv.url + "/predict",
                "request_template": str(template),
                "response_path": "outputs.0.data",
                "warmup_requests": 0,
            },
            min_duration_s=0.1,
            min_query_count=8,
            offline_expected_qps=1,
        )
    assert s["harness"]["failures_by_reason"] == {"malformed_json": 8}
    assert all("Bad Gateway" in e for e in read_records(run_dir).columns["error"])
    assert s["tokens"] is None  # a json run carries no tokens


@pytest.mark.parallel
def test_connection_refused_with_retries_counted(run_harness):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    run_dir, s = run_harness(
        backend="http",
        scenario="Offline",
        dataset="synthetic:isl=4,osl=4,n=8",
        backend_options={
            "protocol": "openai-chat",
            "url": f"http://127.0.0.1:{port}/v1",
            "check_server": False,
            "warmup_requests": 0,
            "retries": 2,
        },
        min_duration_s=0.1,
        min_query_count=16,
        offline_expected_qps=1,
    )
    ours = s["harness"]
    assert ours["failures_by_reason"] == {"connect": 16}
    assert ours["success_rate"] == 0.0
    assert s["backend"]["retries_total"] == 32 and s["backend"]["requests_retried"] == 16
    lines = [json.loads(x) for x in (run_dir / "tokens.jsonl").read_text().splitlines()]
    assert [e["retries"] for e in lines] == [2] * 16


@pytest.mark.parallel
def test_api_key_is_used_but_never_written(run_harness, monkeypatch, tmp_path):
    secret = "sk-test-7f3a9c1e5b2d"
    monkeypatch.setenv("HARNESS_TEST_API_KEY", secret)
    with ServerThread(openai_app(Timing(tokens=4), api_key=secret)) as srv:
        opts = {"protocol": "openai-chat", "url": srv.url + "/v1", "api_key_env": "HARNESS_TEST_API_KEY", "headers": {"X-Team": "bench"}}
        run_dir, s = run_harness(
            backend="http", scenario="Offline", dataset="synthetic:isl=4,osl=4,n=8", backend_options=opts,
            min_duration_s=0.1, min_query_count=8, offline_expected_qps=1,
        )
        assert s["harness"]["success_rate"] == 1.0
        assert s["backend"]["api_key_set"] is True and s["backend"]["header_names"] == ["X-Team"]
        # a wrong key: the server echoes what it got in its 401 body, the harness redacts it
        monkeypatch.setenv("HARNESS_TEST_API_KEY", secret + "-wrong")
        bad_dir, bad = run_harness(
            backend="http", scenario="Offline", dataset="synthetic:isl=4,osl=4,n=8",
            backend_options={**opts, "check_server": False, "warmup_requests": 0},
            min_duration_s=0.1, min_query_count=8, offline_expected_qps=1,
        )
    assert bad["harness"]["failures_by_reason"] == {"http_401": 8}
    assert "***" in read_records(bad_dir).columns["error"][0]
    for folder in (run_dir, bad_dir):
        for f in folder.rglob("*"):
            if f.is_file():
                assert secret.encode() not in f.read_bytes(), f


@pytest.mark.parallel
def test_credentials_never_come_from_the_config():
    with pytest.raises(ValueError, match="api_key_env"):
        HttpOptions(protocol="openai-chat", url="http://127.0.0.1:1/v1", headers={"Authorization": "Bearer x"})
    with pytest.raises(ValueError, match="credentials"):
        HttpOptions(protocol="openai-chat", url="http://user:pw@127.0.0.1:1/v1")
    with pytest.raises(ValueError, match="api_key"):
        HttpOptions(protocol="openai-chat", url="http://127.0.0.1:1/v1", api_key="sk-x")
    assert HttpOptions(protocol="openai-chat", url="https://127.0.0.1:1/v1").verify_tls is True
