"""Embeddings (protocol openai-embeddings) against a real server: llama.cpp's OpenAI server
(llama-cpp-python, `--embedding true`) serving SmolLM2-135M's GGUF, mean-pooled (the GGUF
names no pooling, and without one the server answers one vector per token). Truth the test
makes itself: llama_cpp's in-process embeddings of the same texts, embedded in the same
groups the harness sent (a batch's composition moves a vector by ~2e-6), and the GGUF's
own token counts. Answers a real server cannot be made to give (a wrong dimension, a NaN,
a missing vector, a body that is not JSON, 404, a batch over its limit) come from an
in-test server that gives them on purpose.
"""

from __future__ import annotations

import http.client
import json
import math
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
from aiohttp import web

from harness.errors import ConfigError, HarnessError
from harness.results import folder
from harness.results.records import read_records
from tests.support.calibrate import Pilot, _closed_loop, offered_rate
from tests.support.http_servers import ServerThread
from tests.support.server_process import free_port, server_process
from tests.support.smollm2_hf import gguf_path

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings map each text to one vector.",
    "héllo wörld ✓ — unicode too",
    "x " * 40,
    "one",
    "A LoadGen sample is one input, and a request carries several.",
    "Servers pool the tokens' states into a single vector per input.",
]
DIMENSION = 576  # SmolLM2-135M's n_embd


@pytest.fixture(scope="module")
def embedding_server(tmp_path_factory):
    gguf = gguf_path()
    port = free_port()
    # pooling_type=1 (mean): the GGUF names none, and without one each input gets a vector per token
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", "smollm2",
           "--embedding", "true", "--kv_overrides", "llama.pooling_type=int:1", "--n_threads", "2",
           "--interrupt_requests", "False", "--host", "127.0.0.1", "--port", str(port)]
    url = f"http://127.0.0.1:{port}/v1"
    with server_process(cmd, url + "/models", tmp_path_factory.mktemp("llama-emb") / "server.log", 90):
        yield url, gguf


@pytest.fixture(scope="module")
def in_process(embedding_server):
    """llama_cpp in this process, as the server runs it: the same GGUF, mean pooling, defaults."""
    import llama_cpp

    return llama_cpp.Llama(model_path=str(embedding_server[1]), embedding=True, n_threads=2, verbose=False,
                           pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN)


@pytest.fixture(scope="module")
def texts_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("texts") / "texts.jsonl"
    path.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in TEXTS))
    return path


def logged_vectors(run_dir: Path) -> dict[int, np.ndarray]:
    """LoadGen's accuracy log: each sample's vector, float32, by dataset index."""
    entries = json.loads((run_dir / folder.LOADGEN_ACCURACY).read_text())
    return {e["qsl_idx"]: np.frombuffer(bytes.fromhex(e["data"]), dtype="<f4") for e in entries}


def embeddings_pilot(base_url: str, texts: list[str], *, batch: int, requests: int) -> Pilot:
    """`requests` embeddings requests of `batch` texts each, one at a time, with plain
    http.client (nothing of the harness): the request rate the server sustains here."""
    parts = urlsplit(base_url)
    e2e: list[float] = []
    failures: list[str] = []

    def loop() -> None:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        try:
            for i in range(requests):
                body = json.dumps({"model": "smollm2", "input": [texts[(i + k) % len(texts)] for k in range(batch)]})
                t0 = time.perf_counter()
                try:
                    conn.request("POST", parts.path + "/embeddings", body, {"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    data = resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"HTTP {resp.status}: {data[:200]!r}")
                except (OSError, RuntimeError, http.client.HTTPException) as e:
                    failures.append(f"{type(e).__name__}: {e}")
                    continue
                e2e.append(time.perf_counter() - t0)
        finally:
            conn.close()

    wall = _closed_loop(loop, 1)
    return Pilot(base_url, 1, wall, tuple(e2e), tuple(e2e), (0.0,) * len(e2e), 0, tuple(failures))


def test_offline_vectors_equal_llama_cpp_in_process_and_usage_equals_the_client_count(
        run_harness, embedding_server, in_process, texts_file):
    url, gguf = embedding_server
    run_dir, s = run_harness(
        backend="http", scenario="Offline", mode="AccuracyOnly", dataset=str(texts_file),
        backend_options={"protocol": "openai-embeddings", "url": url, "batch": 3, "tokenizer": str(gguf)},
    )
    assert s["harness"]["success_rate"] == 1.0 and s["harness"]["samples"] == len(TEXTS)
    requests = [e for e in folder.read_jsonl(run_dir, folder.TOKENS) if "inputs" in e]
    # Offline issues every sample at once: full groups of 3, then the rest
    assert sorted(e["inputs"] for e in requests) == [1, 3, 3]
    vectors = logged_vectors(run_dir)
    assert sorted(vectors) == list(range(len(TEXTS)))
    worst = 0.0
    for e in requests:  # truth: the same groups, embedded in-process
        truth = in_process.create_embedding([TEXTS[i] for i in e["sample_indices"]])
        for i, d in zip(e["sample_indices"], truth["data"], strict=True):
            worst = max(worst, float(np.abs(vectors[i] - np.asarray(d["embedding"], dtype=np.float32)).max()))
        assert e["server_input_tokens"] == truth["usage"]["prompt_tokens"] == e["input_tokens"]
    assert worst == 0.0, f"vectors differ from llama_cpp's in-process ones by up to {worst}"
    v = s["vectors"]
    counted = sum(len(in_process.tokenize(t.encode(), add_bos=False)) for t in TEXTS)
    assert v["input_tokens"] == {"server": counted, "client": counted} and v["mismatch"]["requests_differing"] == 0
    assert v["dimension"] == DIMENSION and v["dimensions_seen"] == [[DIMENSION]]
    assert v["requests"] == 3 and v["inputs"] == len(TEXTS) and v["inputs_per_request_mean"] == pytest.approx(7 / 3)
    # the rates share the harness's span: inputs/s is its throughput, requests/s that over 7/3
    assert v["inputs_per_s"] == pytest.approx(s["harness"]["throughput_per_s"], rel=1e-9)
    assert v["requests_per_s"] == pytest.approx(v["inputs_per_s"] * 3 / 7, rel=1e-9)
    rec = read_records(run_dir).columns
    took = {b: (c - d) for b, c, d in zip(rec["batch_id"].tolist(), rec["complete_ns"].tolist(), rec["dispatch_ns"].tolist())}
    assert v["request_latency_ms"]["max"] == pytest.approx(max(took.values()) / 1e6)
    assert s["accuracy"]["logged_samples"] == len(TEXTS)
    print(f"\n  {len(TEXTS)} texts in {len(requests)} requests: max |server - in-process| = {worst}; "
          f"{counted} input tokens (server = client = in-process); dimension {v['dimension']}; "
          f"{v['inputs_per_s']:.1f} inputs/s, {v['requests_per_s']:.2f} requests/s, "
          f"{v['input_tokens_per_s']['server']:.0f} input tokens/s")


def test_server_scenario_at_a_measured_rate_groups_what_queued(run_harness, embedding_server):
    url, gguf = embedding_server
    # the server embeds one request at a time: its rate alone, measured first, is its
    # capacity; the run offers a quarter of it (tests/support/calibrate.py)
    pilot = embeddings_pilot(url, TEXTS, batch=1, requests=4)
    rate = offered_rate(pilot, 0.25, queries=8, within_s=60)
    run_dir, s = run_harness(
        backend="http", scenario="Server", dataset="synthetic:isl=12,osl=1,n=16",
        backend_options={"protocol": "openai-embeddings", "url": url, "batch": 4, "max_in_flight": 1,
                         "tokenizer": str(gguf)},
        target_qps=rate, min_duration_s=3.0, min_query_count=8, target_latency_ms=60_000,
    )
    ours, v = s["harness"], s["vectors"]
    assert ours["success_rate"] == 1.0 and ours["samples"] >= 8, f"offered {rate:.2f}/s; {pilot.describe()}"
    entries = [e for e in folder.read_jsonl(run_dir, folder.TOKENS) if "inputs" in e]
    # a group never waits for samples to come: it holds at most batch, and a sample goes out
    # in the request a free slot first sends (the requests' inputs add up to the samples)
    assert all(1 <= e["inputs"] <= 4 for e in entries) and sum(e["inputs"] for e in entries) == ours["samples"]
    assert v["dimension"] == DIMENSION and v["mismatch"]["requests_differing"] == 0
    assert v["input_tokens"]["server"] == v["input_tokens"]["client"] == 12 * ours["samples"]
    assert v["inputs_per_s"] == pytest.approx(ours["throughput_per_s"], rel=1e-9)
    assert s["loadgen"]["errors"] == []
    print(f"\n  Server at {rate:.2f}/s ({pilot.describe()}): {ours['samples']} inputs in {v['requests']} requests, "
          f"{v['inputs_per_s']:.2f} inputs/s, request p50 {v['request_latency_ms']['p50']:.0f} ms, "
          f"input p50 {v['input_latency_ms']['p50']:.0f} ms")


# --- answers a real server will not give, from an in-test one ----------------------------

LIMIT = 2  # the in-test server's most inputs a request


def broken_app(limit: int = LIMIT) -> web.Application:
    """Answers each input with [len, 1, 2, 3], except: an input containing "nan" gets a NaN,
    "short" a vector of 3, "few" drops the request's last vector, "garbage" a body that is not
    JSON; a request of more than `limit` inputs gets 413 with why."""

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "broken"}]})

    async def embeddings(request: web.Request) -> web.Response:
        body = await request.json()
        texts = body["input"]
        if len(texts) > limit:
            return web.Response(status=413, text=f"batch of {len(texts)} inputs is over this server's {limit}")
        if any("garbage" in t for t in texts):
            return web.Response(text="<html>not json</html>", content_type="text/html")
        data = []
        for i, t in enumerate(texts):
            vector = [float(len(t)), 1.0, 2.0, 3.0]
            if "nan" in t:
                vector[1] = math.nan
            if "short" in t:
                vector = vector[:3]
            data.append({"object": "embedding", "index": i, "embedding": vector})
        if any("few" in t for t in texts):
            data = data[:-1]
        return web.Response(text=json.dumps({"data": data, "usage": {"prompt_tokens": 1, "total_tokens": 1}}),
                            content_type="application/json")

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/embeddings", embeddings)
    return app


def _texts(tmp_path: Path, texts: list[str]) -> str:
    path = tmp_path / "texts.jsonl"
    path.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in texts))
    return str(path)


def test_bad_answers_fail_their_samples_by_reason_and_keep_what_was_recorded(run_harness, tmp_path):
    # AccuracyOnly: LoadGen issues each sample once, so each reason counts one sample
    texts = ["fine", "a nan here", "too short", "few of them", "garbage please", "fine again"]
    with ServerThread(broken_app()) as srv:
        run_dir, s = run_harness(
            backend="http", scenario="Offline", mode="AccuracyOnly", dataset=_texts(tmp_path, texts), min_success_rate=0,
            backend_options={"protocol": "openai-embeddings", "url": srv.url + "/v1", "batch": 1},
        )
    ours = s["harness"]
    assert ours["failures_by_reason"] == {"vector_nan": 1, "vector_dimension": 1, "output_count": 1, "malformed_json": 1}
    assert ours["succeeded"] == 2 and s["vectors"]["requests_failed"] == 4 and s["vectors"]["dimension"] == 4
    rec = read_records(run_dir).columns
    errors = dict(zip(rec["sample_index"].tolist(), rec["error"].tolist()))
    assert errors[2] == "vector_dimension: vectors of length 3, not the 4 of the first answer"
    assert errors[3] == "output_count: the answer carried 0 outputs for a request of 1 inputs"
    assert "not json" in errors[4]
    # every request is kept, failed ones too
    assert len([e for e in folder.read_jsonl(run_dir, folder.TOKENS) if "inputs" in e]) == len(texts)


def test_a_batch_over_the_servers_limit_fails_with_its_answer_and_over_the_protocols_is_refused(run_harness, tmp_path):
    with ServerThread(broken_app()) as srv:
        run_dir, s = run_harness(
            backend="http", scenario="Offline", mode="AccuracyOnly", dataset=_texts(tmp_path, ["a", "b", "c", "d", "e", "f"]),
            min_success_rate=0, backend_options={"protocol": "openai-embeddings", "url": srv.url + "/v1", "batch": 3},
        )
    assert s["harness"]["failures_by_reason"] == {"http_413": 6}
    assert set(read_records(run_dir).columns["error"].tolist()) == {"http_413: batch of 3 inputs is over this server's 2"}
    with pytest.raises(ConfigError) as e:
        run_harness(backend="http", dataset=_texts(tmp_path, ["a"]),
                    backend_options={"protocol": "openai-embeddings", "url": "http://127.0.0.1:9/v1", "batch": 4096})
    assert "\n" not in str(e.value) and "batch" in str(e.value) and "2048" in str(e.value), str(e.value)


def test_a_server_without_the_endpoint_stops_the_run_in_one_line(run_harness, tmp_path):
    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "chat-only"}]})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    with ServerThread(app) as srv, pytest.raises(HarnessError) as e:
        run_harness(backend="http", dataset=_texts(tmp_path, ["a"]),
                    backend_options={"protocol": "openai-embeddings", "url": srv.url + "/v1"})
    msg = str(e.value)
    assert "\n" not in msg and "http_404" in msg and "no /embeddings route" in msg, msg


# --- parity: two servers' (or two batchings') vectors by cosine ---------------------------


def test_parity_compares_each_inputs_vectors_by_cosine(embedding_server, in_process, texts_file, tmp_path):
    from click.testing import CliRunner

    from harness.analysis.text_parity import compare_folders
    from harness.cli.main import main as cli
    from harness.run.parity import Side
    from harness.run.text_parity_runs import run_side

    url, _ = embedding_server
    a = Side("http", None, {"protocol": "openai-embeddings", "url": url, "batch": 1})
    b = Side("http", None, {"protocol": "openai-embeddings", "url": url, "batch": 3})
    run_a = run_side(a, "A", str(texts_file), 0, tmp_path / "a")
    run_b = run_side(b, "B", str(texts_file), 0, tmp_path / "b")
    result = compare_folders(run_a, run_b)
    # truth: llama_cpp in-process, each text alone (A) and in B's groups; a text's batch moves its vector
    alone = {i: in_process.create_embedding([t])["data"][0]["embedding"] for i, t in enumerate(TEXTS)}
    grouped = {}
    for e in folder.read_jsonl(run_b, folder.TOKENS):
        data = in_process.create_embedding([TEXTS[i] for i in e["sample_indices"]])["data"]
        grouped.update({i: d["embedding"] for i, d in zip(e["sample_indices"], data, strict=True)})
    x = np.array([alone[i] for i in range(len(TEXTS))], dtype=np.float32).astype(np.float64)
    y = np.array([grouped[i] for i in range(len(TEXTS))], dtype=np.float32).astype(np.float64)
    cos = (x * y).sum(axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))
    assert result.agree and result.compared == result.samples == len(TEXTS)
    assert result.cosine_min == pytest.approx(cos.min(), abs=1e-12) and result.cosine_mean == pytest.approx(cos.mean(), abs=1e-12)
    assert result.least_sample == int(np.argmin(cos)) and result.dimension_a == result.dimension_b == DIMENSION
    # another "model": the in-test server's 4-long vectors of the same texts disagree, by dimension
    with ServerThread(broken_app(limit=8)) as srv:
        run_c = run_side(Side("http", None, {"protocol": "openai-embeddings", "url": srv.url + "/v1"}), "B",
                         str(texts_file), 0, tmp_path / "c")
    out = CliRunner().invoke(cli, ["parity", "--run-a", str(run_a), "--run-b", str(run_c)], terminal_width=80)
    assert out.exit_code == 1, out.output
    assert "DISAGREE" in out.output and "dimension differs: A [576], B [4]" in out.output
    print(f"\n  parity batch 1 vs 3: cosine min {result.cosine_min:.12f}, mean {result.cosine_mean:.12f}")
