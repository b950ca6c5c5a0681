"""Bad input: one clear line naming what, where and how to fix; exit 2; no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)


def harness(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr
    text = " ".join(lines)
    assert text.startswith("error:"), proc.stderr
    return text


def test_unknown_key_names_file_line_and_closest_key(tmp_path):
    cfg = tmp_path / "s.yaml"
    cfg.write_text("scenario: Server\ntarget_qsp: 100\n")
    msg = one_error_line(harness("run", "-c", str(cfg), "--output-dir", str(tmp_path)))
    assert f"{cfg}:2" in msg and "target_qsp" in msg and "did you mean 'target_qps'" in msg


def test_wrong_type_and_impossible_value(tmp_path):
    cfg = tmp_path / "s.yaml"
    cfg.write_text("scenario: Server\n\ntarget_qps: lots\n")
    msg = one_error_line(harness("run", "-c", str(cfg), "--output-dir", str(tmp_path)))
    assert f"{cfg}:3" in msg and "target_qps" in msg
    msg = one_error_line(harness("run", "--backend", "synthetic", "--set", "min_duration_s=-1", "--output-dir", str(tmp_path)))
    assert "min_duration_s" in msg and "greater than or equal to 0" in msg


def test_bad_yaml_names_the_line(tmp_path):
    cfg = tmp_path / "s.yaml"
    cfg.write_text("scenario: Server\ntarget_qps: [1,\n")
    msg = one_error_line(harness("run", "-c", str(cfg), "--output-dir", str(tmp_path)))
    assert "invalid YAML" in msg and str(cfg) in msg


def test_unknown_backend_lists_known_ones(tmp_path):
    msg = one_error_line(harness("run", "--backend", "tensorrt", "--output-dir", str(tmp_path)))
    assert "onnxruntime" in msg and "synthetic" in msg


def test_unknown_backend_option_suggests(tmp_path):
    msg = one_error_line(harness("run", "--backend", "synthetic", "--set", "service_time=3", "--output-dir", str(tmp_path)))
    assert "did you mean 'service_time_ms'" in msg


def test_missing_and_corrupt_model(tmp_path):
    msg = one_error_line(harness("run", "--backend", "onnxruntime", "--model", str(tmp_path / "no.onnx"), "--output-dir", str(tmp_path)))
    assert "does not exist" in msg
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    msg = one_error_line(harness("run", "--backend", "onnxruntime", "--model", str(bad), "--output-dir", str(tmp_path)))
    assert "cannot load" in msg and str(bad) in msg


def test_unavailable_provider_is_an_error_not_a_fallback(tmp_path, embedded_model):
    msg = one_error_line(
        harness("run", "--backend", "onnxruntime", "--model", str(embedded_model),
                "--set", "providers=[CUDAExecutionProvider]", "--output-dir", str(tmp_path))
    )
    assert "CUDAExecutionProvider" in msg and "not available" in msg


def test_dataset_that_does_not_fit_the_model(tmp_path, embedded_model):
    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        np.save(data / f"{i}.npy", np.zeros((3, 3), dtype=np.float32))
    msg = one_error_line(
        harness("run", "--backend", "onnxruntime", "--model", str(embedded_model), "--dataset", str(data), "--output-dir", str(tmp_path))
    )
    assert "(3, 3)" in msg and "[N, 1, 8, 8]" in msg


def test_unwritable_output_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    msg = one_error_line(harness("run", "--backend", "synthetic", "--output-dir", str(blocker / "sub")))
    assert "output dir" in msg and "--output-dir" in msg


def test_debug_shows_the_traceback(tmp_path):
    proc = harness("--debug", "run", "--backend", "nope", "--output-dir", str(tmp_path))
    assert proc.returncode == 2 and "Traceback" in proc.stderr


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ("min_duration_s=2 max_duration_s=1", "max_duration_s"),
        ("mode=FindPeakPerformance scenario=Offline", "FindPeakPerformance"),
        ("issue_inline=true scenario=Server", "issue_inline"),
        ("issue_inline=true scenario=SingleStream workers=2", "issue_inline"),
    ],
)
def test_inconsistent_settings(tmp_path, bad, named):
    args = [a for kv in bad.split() for a in ("--set", kv)]
    msg = one_error_line(harness("run", "--backend", "synthetic", *args, "--output-dir", str(tmp_path)))
    assert named in msg


def test_interactive_for_a_benchmark_without_interactive_bounds(tmp_path):
    """Interactive is an LLM benchmark's Server with mlperf.conf's interactive entries; for
    resnet50 there are none, and LoadGen would silently run a plain Server."""
    msg = one_error_line(harness("run", "--backend", "synthetic", "--scenario", "Interactive", "--benchmark", "resnet50",
                                 "--output-dir", str(tmp_path)))
    assert "scenario Interactive" in msg and "'resnet50' has none" in msg and "llama3_1-8b" in msg
    msg = one_error_line(harness("run", "--backend", "synthetic", "--benchmark", "llama3.1-8b", "--output-dir", str(tmp_path)))
    assert "mlperf.conf calls it 'llama3_1-8b'" in msg
