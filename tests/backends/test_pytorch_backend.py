"""The PyTorch backend against real torch on the CPU: every model source, precision, compile,
a real LoadGen run, and each user error as one clear line from the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from backends.base import LoadContext  # noqa: E402
from backends.pytorch import PyTorchBackend, PyTorchOptions  # noqa: E402
from harness.config.host import usable_cores  # noqa: E402
from harness.data.hashing import sha256_file  # noqa: E402
from harness.errors import BackendError, ConfigError, ModelError  # noqa: E402
from harness.report.figures import setup_line  # noqa: E402
from tests.support.torch_models import bare_mlp, tiny_mlp  # noqa: E402

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
TINY = "tests.support.torch_models:tiny_mlp"
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def load(model: str, max_batch: int = 8, **options) -> PyTorchBackend:
    backend = PyTorchBackend(PyTorchOptions(**options))
    backend.load(LoadContext(model, max_batch, "Offline", seed=0, threads=2))
    return backend


def images(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 1, 8, 8)).astype(np.float32)


def reference(module: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module.eval()(torch.from_numpy(x)).numpy()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[torch.nn.Module, Path]:
    """A tiny_mlp with weights unlike the seeded default, saved as a state_dict."""
    torch.manual_seed(1234)
    module = tiny_mlp()
    path = tmp_path_factory.mktemp("weights") / "tiny.pt"
    torch.save(module.state_dict(), path)
    return module, path


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("models")
    torch.manual_seed(7)
    module = tiny_mlp().eval()
    torch.jit.script(bare_mlp()).save(d / "bare.ts")
    example = (torch.zeros(4, 1, 8, 8),)
    dyn = torch.export.export(module, example, dynamic_shapes=({0: torch.export.Dim("batch")},))
    torch.export.save(dyn, d / "dynamic.pt2")
    torch.export.save(torch.export.export(module, (torch.zeros(1, 1, 8, 8),)), d / "batch1.pt2")
    return {"ts": d / "bare.ts", "dynamic": d / "dynamic.pt2", "batch1": d / "batch1.pt2"}


# --- model sources ---------------------------------------------------------------------------


def test_callable_with_weights_gives_the_saved_model(trained):
    module, path = trained
    backend = load(TINY, weights=str(path))
    x = images(5)
    (out,) = backend.predict({"image": x})
    assert out.dtype == np.float32 and out.shape == (5, 10)
    np.testing.assert_allclose(out, reference(module, x), atol=1e-6)
    d = backend.describe()
    assert d["model_source"] == "callable" and d["weights_sha256"] == sha256_file(path)
    assert d["parameters"] == 64 * 32 + 32 + 32 * 10 + 10
    assert [s.name for s in backend.inputs()] == ["image"] and backend.inputs()[0].shape == (None, 1, 8, 8)


def test_callable_without_weights_is_seeded_and_takes_kwargs():
    a = load(TINY, model_kwargs={"hidden": 16})
    b = load(TINY, model_kwargs={"hidden": 16})
    x = images(3)
    np.testing.assert_array_equal(a.predict({"image": x})[0], b.predict({"image": x})[0])
    assert a.describe()["parameters"] == 64 * 16 + 16 + 16 * 10 + 10


def test_torchscript_file_with_input_shape_from_config(artifacts):
    backend = load(str(artifacts["ts"]), input_shape=(1, 8, 8))
    assert backend.inputs()[0].name == "input" and backend.inputs()[0].shape == (None, 1, 8, 8)
    x = images(4)
    (out,) = backend.predict({"input": x})
    np.testing.assert_allclose(out, reference(torch.jit.load(str(artifacts["ts"])), x), atol=1e-6)
    assert backend.describe()["model_source"] == "torchscript"
    with pytest.raises(ConfigError, match="declares no input signature.*input_shape"):
        load(str(artifacts["ts"]))
    with pytest.raises(ConfigError, match="compile=default cannot trace a TorchScript model"):
        load(str(artifacts["ts"]), input_shape=(1, 8, 8), compile="default")


def test_export_program_brings_its_signature(artifacts):
    backend = load(str(artifacts["dynamic"]), max_batch=16)
    (spec,) = backend.inputs()
    assert spec.name == "image" and spec.shape == (None, 1, 8, 8) and spec.dtype == "float32"
    x = images(13)
    program = torch.export.load(str(artifacts["dynamic"])).module()
    expected = program(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(backend.predict({"image": x})[0], expected, atol=1e-6)
    assert backend.describe()["model_source"] == "export" and backend.describe()["padded_batch"] is None


def test_export_program_with_a_fixed_batch(artifacts):
    backend = load(str(artifacts["batch1"]), max_batch=1)
    assert backend.inputs()[0].shape == (1, 1, 8, 8)
    assert backend.predict({"image": images(1)})[0].shape == (1, 10)
    with pytest.raises(ConfigError, match="fixed batch of 1 but max_batch is 8"):
        load(str(artifacts["batch1"]), max_batch=8)


# --- precision, compile, options ---------------------------------------------------------------


@pytest.mark.parametrize("mode", ["autocast", "convert"])
def test_bf16_is_close_to_fp32_but_not_equal(trained, mode):
    _, path = trained
    fp32 = load(TINY, weights=str(path))
    bf16 = load(TINY, weights=str(path), precision="bf16", precision_mode=mode)
    x = images(64)
    a, b = fp32.predict({"image": x})[0], bf16.predict({"image": x})[0]
    assert b.dtype == np.float32  # bf16 results come back as float32
    err = np.abs(a - b).max()
    assert 0 < err < 0.1, err
    assert np.mean(a.argmax(1) == b.argmax(1)) >= 0.9
    d = bf16.describe()
    assert d["precision"] == "bf16" and d["precision_mode"] == mode
    assert d["parameter_dtype"] == ("bfloat16" if mode == "convert" else "float32")


def test_compile_default_runs_once_at_max_batch_and_pads(trained):
    module, path = trained
    backend = load(TINY, max_batch=4, weights=str(path), compile="default", threads=1)
    d = backend.describe()
    assert d["compile"] == "default" and d["compile_s"] > 0 and d["padded_batch"] == 4 and d["threads"] == 1
    line = setup_line({"timings_s": {"load_s": 5.0, "warmup_s": 0.5, "test_s": 60.0}, "backend": d})
    assert line == f"setup before LoadGen started: load 5.00 s (compile {d['compile_s']:.2f} s), warm-up 0.50 s · timed test 60.00 s"
    x = images(3)  # smaller than max_batch: padded to the compiled shape, 3 rows back
    (out,) = backend.predict({"image": x})
    assert out.shape == (3, 10)
    np.testing.assert_allclose(out, reference(module, x), atol=1e-5)
    backend.warmup({"image": x[:1]})
    assert backend.describe()["warmup_s"] > 0


def test_channels_last_and_fp16_on_a_convolution():
    x = np.random.default_rng(2).standard_normal((4, 3, 16, 16)).astype(np.float32)
    plain = load("tests.support.torch_models:tiny_cnn").predict({"input": x})[0]
    nhwc = load("tests.support.torch_models:tiny_cnn", channels_last=True)
    np.testing.assert_allclose(nhwc.predict({"input": x})[0], plain, atol=1e-5)
    assert nhwc.describe()["channels_last"] is True
    half = load("tests.support.torch_models:tiny_cnn", precision="fp16", precision_mode="convert")
    out = half.predict({"input": x})[0]
    assert out.dtype == np.float32 and 0 < np.abs(out - plain).max() < 0.05
    assert half.describe()["parameter_dtype"] == "float16"


def test_options_are_validated():
    with pytest.raises(ValueError, match="device"):
        PyTorchOptions(device="tpu")
    assert PyTorchOptions(compile=False).compile == "off"  # YAML reads `compile=off` as False
    with pytest.raises(ValueError, match="extra"):
        PyTorchOptions(precison="bf16")


def test_wrong_input_shape_fails_at_load():
    with pytest.raises(ModelError, match=r"failed on input 'input' \[N, 3\] float32 \(from input_shape"):
        load("tests.support.torch_models:bare_mlp", input_shape=(3,))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_on_a_cpu_machine_is_an_error():
    with pytest.raises(BackendError, match="device cuda asked for, but"):
        load(TINY, device="cuda")


@CUDA
def test_cuda_matches_cpu(trained):
    _, path = trained
    x = images(32)
    cpu = load(TINY, weights=str(path)).predict({"image": x})[0]
    gpu = load(TINY, weights=str(path), device="cuda")
    np.testing.assert_allclose(gpu.predict({"image": x})[0], cpu, atol=1e-4)
    d = gpu.describe()
    assert d["device"] == "cuda:0" and d["cuda_version"] and d["device_name"] != "cpu"


@CUDA
def test_cuda_bf16_compiled(trained):
    _, path = trained
    x = images(16)
    cpu = load(TINY, weights=str(path)).predict({"image": x})[0]
    gpu = load(TINY, max_batch=16, weights=str(path), device="cuda", precision="bf16", compile="default")
    out = gpu.predict({"image": x})[0]
    assert out.dtype == np.float32 and np.abs(out - cpu).max() < 0.1
    assert gpu.describe()["compile_s"] > 0


# --- a real LoadGen run ----------------------------------------------------------------------------


def test_offline_run_through_loadgen(run_harness, trained, monkeypatch):
    _, path = trained
    # The child process imports tests.support.torch_models like a user's own package.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    run_dir, s = run_harness(
        backend="pytorch",
        model=TINY,
        backend_options={"weights": str(path), "precision": "bf16"},
        scenario="Offline",
        max_batch=32,
        min_duration_s=1.0,
        offline_expected_qps=20_000,
    )
    assert s["status"] == "complete"
    samples = s["loadgen"]["effective_settings"]["samples_per_query"]
    assert samples >= 20_000 and s["harness"]["succeeded"] == samples and s["harness"]["failed"] == 0
    assert s["loadgen"]["throughput_per_s"] > 0 and s["harness"]["throughput_per_s"] > 0
    assert s["harness"]["mean_batch_size"] > 1
    b = s["backend"]
    assert b["engine"] == "torch" and b["engine_version"] == torch.__version__ and b["precision"] == "bf16"
    assert b["warmup_s"] > 0 and s["timings_s"]["load_s"] > 0 and s["timings_s"]["warmup_s"] > 0
    # Offline on the CPU: one single-threaded worker per core, torch told so process-wide
    assert s["sut"]["workers"] == usable_cores() and s["sut"]["threads_per_worker"] == 1 and b["threads"] == 1
    assert not PyTorchBackend.scales_with_host_cores(PyTorchOptions(device="cuda"))
    assert not PyTorchBackend.scales_with_host_cores(PyTorchOptions(compile="default"))


# --- one clear line from the CLI ---------------------------------------------------------------


def harness(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=180,
        env={**os.environ, "COLUMNS": "300", **(env or {})},
    )


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    return lines[0]


def run_pytorch(tmp_path: Path, model: str, *sets: str) -> subprocess.CompletedProcess:
    args = ["run", "--backend", "pytorch", "--model", model, "--output-dir", str(tmp_path)]
    for s in sets:
        args += ["--set", s]
    return harness(*args)


def test_cli_unimportable_callable(tmp_path):
    msg = one_error_line(run_pytorch(tmp_path, "nosuchpkg.models:build"))
    assert "cannot import 'nosuchpkg.models'" in msg and "PYTHONPATH" in msg
    msg = one_error_line(run_pytorch(tmp_path, "tests.support.torch_models:nope"))
    assert "has no callable 'nope'" in msg and "tiny_mlp" in msg
    msg = one_error_line(run_pytorch(tmp_path, "tests.support.torch_models:not_a_module"))
    assert "returned str, not a torch.nn.Module" in msg


def test_cli_weights_that_do_not_fit(tmp_path, trained):
    _, path = trained
    msg = one_error_line(run_pytorch(tmp_path, TINY, f"weights={path}", "model_kwargs={hidden: 16}"))
    assert f"weights {path} do not fit" in msg and "fc1.weight (32, 64) in file vs (16, 64) in module" in msg


def test_cli_weights_flag_is_the_weights_option(tmp_path, trained):
    _, path = trained
    proc = harness("run", "--backend", "pytorch", "--model", TINY, "--weights", str(path),
                   "--set", "model_kwargs={hidden: 16}", "--output-dir", str(tmp_path))
    msg = one_error_line(proc)  # the flag reached the backend: the file is checked against the module
    assert f"weights {path.resolve()} do not fit" in msg


def test_cli_state_dict_given_as_the_model(tmp_path, trained):
    _, path = trained
    msg = one_error_line(run_pytorch(tmp_path, str(path)))
    assert "plain torch.save file" in msg and "--set weights=" in msg


def test_cli_wrong_input_shape(tmp_path):
    msg = one_error_line(run_pytorch(tmp_path, "tests.support.torch_models:bare_mlp", "input_shape=[3]"))
    assert "failed on input 'input' [N, 3] float32" in msg and "set input_shape" in msg


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cli_cuda_on_a_cpu_machine(tmp_path):
    msg = one_error_line(run_pytorch(tmp_path, TINY, "device=cuda"))
    assert "device cuda asked for, but" in msg and "use device=cpu" in msg


def test_without_torch_the_backend_is_listed_unavailable(tmp_path):
    # sys.modules["torch"] = None makes find_spec("torch") None and `import torch` fail:
    # these processes see exactly what a machine without the extra sees.
    block = "import sys; sys.modules['torch'] = None; "
    env = {**os.environ, "COLUMNS": "400"}

    def python(code: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", block + code, *args], capture_output=True, text=True, cwd=ROOT, env=env)

    hint = "pip install 'loadgen-harness[pytorch]'"
    error = python("from harness.config import registry\ntry: registry.get('pytorch')\nexcept Exception as e: print(e)")
    assert error.stdout.strip() == f"backend 'pytorch' needs torch, which is not installed: {hint}", error.stderr
    listing = python("from harness.cli import main; main()", "backends")
    assert listing.returncode == 0, listing.stderr
    row = next(line for line in listing.stdout.splitlines() if "pytorch" in line)
    # The hint holds "[pytorch]", which rich would read as markup were it not escaped.
    assert "no: needs torch" in row and hint in row
    assert any("onnxruntime" in line and "yes" in line for line in listing.stdout.splitlines())
    run = python("from harness.cli import main; main()", "run", "--backend", "pytorch", "--model", TINY, "--output-dir", str(tmp_path))
    assert one_error_line(run) == f"error: backend 'pytorch' needs torch, which is not installed: {hint}"
