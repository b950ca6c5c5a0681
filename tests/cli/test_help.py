"""The CLI explains itself (#16): help texts, examples, and hints towards the fix."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from harness.cli.main import main as cli


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "80"}, catch_exceptions=False)


def test_kv_cache_takes_the_dtype_from_the_config_or_says_which_default(tmp_path: Path):
    shape = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}
    (tmp_path / "fp32.json").write_text(json.dumps({**shape, "torch_dtype": "float32"}))
    (tmp_path / "bare.json").write_text(json.dumps(shape))
    fp32 = invoke("kv-cache", "--model-config", str(tmp_path / "fp32.json"), "--seq-len", "100")
    assert fp32.exit_code == 0 and "(fp32)" in fp32.output and "torch_dtype 'float32'" in fp32.output
    bare = invoke("kv-cache", "--model-config", str(tmp_path / "bare.json"), "--seq-len", "100")
    assert "(fp16)" in bare.output and "by default" in bare.output and "--dtype" in bare.output
    js = invoke("kv-cache", "--model-config", str(tmp_path / "bare.json"), "--seq-len", "100", "--json")
    assert "by default" in json.loads(js.output)["dtype_source"]


# --- error messages with a path to the fix (#16 item 12) -----------------------------------


def test_an_openai_url_without_v1_gets_a_hint_on_404():
    import pytest
    from aiohttp import web

    from backends.base import LoadContext
    from backends.http import HttpBackend, HttpOptions
    from harness.errors import BackendError
    from tests.support.http_servers import ServerThread

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": []})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    ctx = LoadContext(None, 1, "Offline")
    with ServerThread(app) as srv:
        with pytest.raises(BackendError, match=r"404 \(OpenAI servers serve under /v1: try url=http://127\.0\.0\.1:\d+/v1\)"):
            HttpBackend(HttpOptions(protocol="openai-chat", url=srv.url)).load(ctx)
        HttpBackend(HttpOptions(protocol="openai-chat", url=srv.url + "/v1")).load(ctx)  # the fix works
        backend = HttpBackend(HttpOptions(protocol="openai-chat", url=srv.url + "/v1", check_server=False))
        backend.load(ctx)
        assert backend._protocol.failure_hint(404) == ""  # with /v1 already there, a 404 is something else


def test_a_missing_protocol_lists_the_four():
    out = invoke("run", "--backend", "http", "--set", "url=http://127.0.0.1:9/v1")
    assert out.exit_code == 2
    assert all(p in out.output for p in ("kserve-v2", "json", "openai-completions", "openai-chat"))


def test_a_server_name_as_backend_points_at_the_http_backend():
    for name in ("openai", "vllm", "openai-chat"):
        out = invoke("run", "--backend", name)
        assert out.exit_code == 2 and "--backend http --set protocol=openai-chat" in out.output, out.output


def test_a_folder_that_is_no_results_folder_says_so(tmp_path: Path):
    out = invoke("report", str(tmp_path))
    assert out.exit_code == 2 and "is not a results folder" in out.output
    assert "did not finish" not in out.output


# --- help texts (#16 item 11) ----------------------------------------------------------------


def test_group_help_has_examples_and_uncut_short_helps():
    out = invoke("--help").output
    assert "Examples:" in out and "harness run --backend onnxruntime --model model.onnx" in out
    commands = out.split("Commands:")[1].split("Examples:")[0]
    assert "..." not in commands
    assert all(len(line) <= 80 for line in out.splitlines())


def test_run_options_have_help_and_the_dataset_syntax():
    from harness.cli.run import run

    helps = {o: p.help for p in run.params for o in p.opts}
    for option in ("--backend", "--model", "--scenario", "--mode", "--mlperf-conf", "--user-conf"):
        assert helps[option], option
    out = invoke("run", "--help").output
    flat = " ".join(out.split())
    assert "prompts.jsonl" in flat and "sharegpt:FILE" in flat and "synthetic:isl=..,osl=.." in flat


def test_backends_shows_required_options_and_descriptions():
    out = invoke("backends").output
    assert "PydanticUndefined" not in out
    protocol = next(x for x in out.splitlines() if x.strip().startswith("protocol "))
    assert "required" in protocol and "wire protocol" in protocol
    assert "longest silence between two reads" in " ".join(out.split())
    assert all(len(line) <= 80 for line in out.splitlines())
    # a protocol's heading (http) wraps under itself: its lines keep the indent
    http = out[out.index("http · available"):]
    heading = next(i for i, x in enumerate(http.splitlines()) if x.startswith("  kserve-v2-grpc: "))
    assert all(x.startswith("  ") for x in http.splitlines()[heading:heading + 4]), http


# --- README examples (#16 item 14) -----------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def test_readme_parity_example_passes_the_weights_the_onnx_file_was_exported_with():
    readme = (ROOT / "README.md").read_text()
    export = next(x for x in readme.splitlines() if x.startswith("harness export-onnx"))
    parity = next(x for x in readme.splitlines() if x.startswith("harness parity"))
    assert "--weights w.pt" in export and "--out model.onnx" in export
    assert "--model-a model.onnx" in parity and "--set-b weights=w.pt" in parity


def test_mlperf_conf_is_explained_not_assumed():
    readme = (ROOT / "README.md").read_text()
    assert "--mlperf-conf mlperf.conf" not in readme and "compiled in" in readme
    from harness.config.reference import HEADER

    assert "You need no mlperf.conf file" in HEADER and "compiled in" in HEADER
