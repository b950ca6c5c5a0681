"""`harness parity` and `harness export-onnx` on real models: onnxruntime and pytorch agree on
the embedded digits model, and disagree, with exit code 1, once its weights are perturbed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from harness.cli import main  # noqa: E402
from harness.errors import ConfigError, DatasetError, ModelError  # noqa: E402
from harness.run.export_onnx import export_onnx  # noqa: E402
from harness.run.parity import Side, Tolerances, run_parity  # noqa: E402

DIGITS = "tests.support.torch_models:digits_mlp"


@pytest.fixture(scope="module")
def perturbed(embedded_model: Path, tmp_path_factory) -> Path:
    """The embedded model with noise on its output layer: same graph, different answers."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(embedded_model))
    for i, t in enumerate(model.graph.initializer):
        if t.name == "w2":
            w2 = numpy_helper.to_array(t)
            noise = np.random.default_rng(0).normal(0, 0.5 * w2.std(), w2.shape).astype(np.float32)
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(w2 + noise, "w2"))
    path = tmp_path_factory.mktemp("perturbed") / "digits-perturbed.onnx"
    onnx.save(model, str(path))
    return path


def cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False, terminal_width=200)


def test_onnxruntime_and_pytorch_agree_on_the_embedded_model(embedded_model):
    r = run_parity(Side("onnxruntime", str(embedded_model)), Side("pytorch", DIGITS), dataset="digits", samples=256, batch=32)
    assert r.agree, r.failures
    (out,) = r.outputs
    assert out.shape == (256, 10) and out.mismatched == 0 and out.elements == 2560
    assert out.max_abs < 1e-5 and out.top1 == 1.0
    assert r.accuracy_a == r.accuracy_b and r.accuracy_a > 0.9  # the real digits test split
    assert r.describe_a["engine"] == "onnxruntime" and r.describe_b["engine"] == "torch"


def test_a_perturbed_model_disagrees(embedded_model, perturbed):
    r = run_parity(Side("onnxruntime", str(perturbed)), Side("pytorch", DIGITS), dataset="digits", samples=256)
    assert not r.agree
    (out,) = r.outputs
    assert out.max_abs > 1e-2 and out.mismatched > 100
    assert r.accuracy_a != r.accuracy_b
    assert any("differ by more than atol" in f for f in r.failures)


def test_cli_exit_codes_and_table(embedded_model, perturbed):
    ok = cli("parity", "--model-a", str(embedded_model), "--model-b", DIGITS, "--dataset", "digits", "--samples", "64")
    assert ok.exit_code == 0, ok.output
    assert "AGREE" in ok.output and "0 / 640" in ok.output and "100.00%" in ok.output
    bad = cli("parity", "--model-a", str(perturbed), "--backend-a", "onnxruntime", "--model-b", DIGITS, "--backend-b", "pytorch", "--samples", "64")
    assert bad.exit_code == 1, bad.output
    assert "DISAGREE" in bad.output and "why:" in bad.output


def test_bf16_needs_looser_tolerances(embedded_model):
    fp32, bf16 = Side("onnxruntime", str(embedded_model)), Side("pytorch", DIGITS, {"precision": "bf16"})
    strict = run_parity(fp32, bf16, dataset="digits", samples=128)
    assert not strict.agree and strict.outputs[0].mismatched > 0
    loose = run_parity(fp32, bf16, dataset="digits", samples=128, tolerances=Tolerances(atol=0.05, rtol=0.1, min_top1=0.97))
    assert loose.agree, loose.failures
    assert loose.outputs[0].top1 >= 0.97 and loose.outputs[0].max_abs < 0.05


def test_top1_threshold_alone_can_fail(embedded_model, perturbed):
    loose = Tolerances(atol=1.0, rtol=1.0, min_top1=1.0)  # elementwise always passes here
    r = run_parity(Side("onnxruntime", str(perturbed)), Side("pytorch", DIGITS), dataset="digits", tolerances=loose)
    assert r.outputs[0].mismatched == 0 and r.outputs[0].top1 < 1.0
    assert [f for f in r.failures if "top-1 agreement" in f] == r.failures != []


def test_export_onnx_then_parity(tmp_path):
    torch.manual_seed(5)
    from tests.support.torch_models import tiny_mlp

    weights = tmp_path / "tiny.pt"
    torch.save(tiny_mlp().state_dict(), weights)
    out = tmp_path / "tiny.onnx"
    result = cli("export-onnx", "tests.support.torch_models:tiny_mlp", "--weights", str(weights), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert out.is_file() and "max abs diff" in result.output
    r = run_parity(Side("pytorch", "tests.support.torch_models:tiny_mlp", {"weights": str(weights)}), Side("onnxruntime", str(out)), samples=100, batch=16)
    assert r.agree and r.outputs[0].max_abs < 1e-5 and r.samples == 100
    assert r.accuracy_a is None  # synthetic data has no labels


def test_export_a_torchscript_model_with_a_declared_shape(tmp_path):
    from tests.support.torch_models import bare_mlp

    script = tmp_path / "bare.ts"
    torch.jit.script(bare_mlp()).save(str(script))
    res = export_onnx(str(script), tmp_path / "bare.onnx", input_shape=(64,), input_name="features")
    assert res.exporter == "torchscript" and res.max_abs_diff is not None and res.max_abs_diff < 1e-5
    assert [(s.name, s.shape) for s in res.inputs] == [("features", (None, 64))]


def test_export_a_fixed_batch_program_keeps_its_batch(tmp_path):
    from tests.support.torch_models import tiny_mlp

    program = tmp_path / "batch1.pt2"
    torch.export.save(torch.export.export(tiny_mlp().eval(), (torch.zeros(1, 1, 8, 8),)), program)
    res = export_onnx(str(program), tmp_path / "batch1.onnx")
    assert res.inputs[0].shape == (1, 1, 8, 8) and res.max_abs_diff < 1e-5
    r = run_parity(Side("pytorch", str(program)), Side("onnxruntime", str(tmp_path / "batch1.onnx")), samples=5, batch=1)
    assert r.agree and r.outputs[0].shape == (5, 10)


def test_inputs_with_other_names_are_matched_by_position():
    a = Side("pytorch", "tests.support.torch_models:bare_mlp", {"input_shape": [1, 8, 8], "input_name": "x"})
    b = Side("pytorch", "tests.support.torch_models:bare_mlp", {"input_shape": [1, 8, 8]})
    r = run_parity(a, b, samples=40, batch=16)
    assert r.agree and r.input_map == {"x": "input"} and r.outputs[0].max_abs == 0.0


def test_mismatched_models_are_clear_errors(embedded_model):
    flat = Side("pytorch", "tests.support.torch_models:bare_mlp", {"input_shape": [64]})  # loads, but takes N x 64
    with pytest.raises(DatasetError, match=r"sample shape \(1, 8, 8\).*\[N, 64\]"):
        run_parity(Side("onnxruntime", str(embedded_model)), flat, samples=8)
    with pytest.raises(ModelError, match=r"side B \(pytorch\): .*failed on input 'input' \[N, 3\]"):
        run_parity(Side("onnxruntime", str(embedded_model)), Side("pytorch", "tests.support.torch_models:bare_mlp", {"input_shape": [3]}))
    with pytest.raises(ConfigError, match="min_top1"):
        Tolerances(min_top1=2)
    bad = CliRunner().invoke(main, ["parity", "--model-a", str(embedded_model), "--model-b", DIGITS, "--set-b", "precison=bf16"])
    assert bad.exit_code == 2
    assert "side B: backend 'pytorch' has no option 'precison' (did you mean 'precision'?)" in bad.output
