"""Errors cross the process boundary with their type and traceback, and a bug in the
harness's own hot-path code ends the run as a crash, never as failed samples.

The bug is planted in the real child process: a `sitecustomize` module on the child's
PYTHONPATH wraps a harness function to raise after a number of calls.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.run_config import RunConfig
from harness.errors import EXIT_INCOMPLETE, ModelError, RunError
from harness.results.records import read_records
from harness.run import runner

PLANT = '''
import harness.{module} as target

_real = target.{owner}.{name}
_calls = [0]


def planted(*args, **kwargs):
    _calls[0] += 1
    if _calls[0] > {after}:
        raise RuntimeError("planted harness bug")
    return _real(*args, **kwargs)


target.{owner}.{name} = planted
'''


def plant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, owner: str, name: str, after: int) -> None:
    site = tmp_path / "plant"
    site.mkdir()
    (site / "sitecustomize.py").write_text(PLANT.format(module=module, owner=owner, name=name, after=after))
    monkeypatch.setenv("PYTHONPATH", str(site))


def only_child_runs_it(tmp_path: Path) -> None:
    # The parent never imports sitecustomize from there: the plant acts in the child alone.
    assert "sitecustomize" not in sys.modules or not str(getattr(sys.modules["sitecustomize"], "__file__", "")).startswith(
        str(tmp_path)
    )


@pytest.mark.parametrize(
    ("scenario", "extra"),
    [
        ("Offline", dict(max_batch=8, offline_expected_qps=2000)),
        ("Server", dict(target_qps=400)),
        ("SingleStream", dict(single_stream_expected_latency_ms=1)),  # inline: on LoadGen's thread
    ],
)
@pytest.mark.parallel
def test_a_harness_bug_on_the_hot_path_is_a_crash_not_failed_samples(tmp_path, monkeypatch, scenario, extra):
    plant(tmp_path, monkeypatch, "data.datasets", "Dataset", "batch", after=60)
    config = RunConfig(backend="synthetic", scenario=scenario, min_duration_s=2, backend_options={"service_time_ms": 0.5},
                       **extra)
    with pytest.raises(RunError) as e:
        runner.run(config, tmp_path / "results")
    only_child_runs_it(tmp_path)
    assert e.value.exit_code == EXIT_INCOMPLETE
    assert "RuntimeError: planted harness bug" in str(e.value)
    assert "planted harness bug" in e.value.child_traceback and "tensor_sut.py" in e.value.child_traceback
    (run_dir,) = (tmp_path / "results").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "incomplete"
    records = read_records(run_dir)
    # What was served before the bug is kept, and none of it is marked failed.
    assert len(records) >= 50
    assert set(records.columns["status"]) == {"ok"}


@pytest.mark.parallel
def test_the_child_error_type_and_traceback_reach_the_parent(tmp_path):
    model = tmp_path / "broken.onnx"
    model.write_bytes(b"not an onnx model")
    config = RunConfig(backend="onnxruntime", model=str(model), scenario="Offline")
    with pytest.raises(ModelError) as e:  # not a bare HarnessError: a library caller can catch it
        runner.run(config, tmp_path / "results")
    assert "the attempt's files: " in str(e.value)
    assert "backends/onnxruntime.py" in e.value.child_traceback  # the child's frames, not the parent's
    # A run that never started leaves no folder among the runs: it is set aside under
    # .failed/, which `results/*` skips, with the error that stopped it.
    assert [p.name for p in (tmp_path / "results").iterdir()] == [".failed"]
    (run_dir,) = (tmp_path / "results" / ".failed").iterdir()
    assert str(run_dir) in str(e.value)
    error = json.loads((run_dir / "error.json").read_text())
    assert error["type"] == "ModelError" and error["harness_error"] is True
    # It is the sizing pilot's attempt (no hint given): a model that cannot load fails the
    # timed run the same way, so the run is not tried a second time.
    assert run_dir.name.endswith("-pilot-Offline"), run_dir.name


@pytest.mark.parallel
def test_debug_prints_the_childs_traceback(tmp_path):
    model = tmp_path / "broken.onnx"
    model.write_bytes(b"not an onnx model")
    cmd = [sys.executable, "-m", "harness", "--debug", "run", "--backend", "onnxruntime", "--model", str(model),
           "--scenario", "Offline", "--output-dir", str(tmp_path / "results")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "traceback in the child process" in proc.stderr
    child_part = proc.stderr.split("traceback in the child process", 1)[1]
    assert "backends/onnxruntime.py" in child_part and "harness/child/main.py" in child_part
    plain = subprocess.run([c for c in cmd if c != "--debug"], capture_output=True, text=True, timeout=120)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr


def test_a_harness_bug_in_the_event_loop_sut_is_a_crash_too(tmp_path, monkeypatch):
    """The streaming SUT's own code (here the dataset lookup of each request) fails: a crash with
    the child's traceback, records kept, no failed request."""
    from tests.support.http_servers import ServerThread, Timing, openai_app

    plant(tmp_path, monkeypatch, "data.datasets", "Dataset", "get", after=30)
    with ServerThread(openai_app(Timing(ttft_ms=1, tpot_ms=1, tokens=4))) as srv:
        config = RunConfig(backend="http", scenario="Server", target_qps=100, min_duration_s=3, use_token_latencies=True,
                           dataset="synthetic:isl=8,osl=4,n=64",
                           backend_options={"protocol": "openai-completions", "url": f"{srv.url}/v1", "warmup_requests": 0})
        with pytest.raises(RunError) as e:
            runner.run(config, tmp_path / "results")
    assert "RuntimeError: planted harness bug" in str(e.value)
    assert "stream_sut.py" in e.value.child_traceback
    (run_dir,) = (tmp_path / "results").iterdir()
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "incomplete"
    records = read_records(run_dir)
    assert len(records) >= 10 and set(records.columns["status"]) == {"ok"}


@pytest.mark.parallel
def test_a_backend_failing_its_warm_up_is_one_clear_error(tmp_path):
    """The backend's own failure before the test is bad input about the backend (exit 2), not
    a crash of the harness (before: an unexpected exception from the child's probe call)."""
    from harness.errors import BackendError

    config = RunConfig(backend="synthetic", scenario="Offline", min_duration_s=0.2, backend_options={"fail_every": 1})
    with pytest.raises(BackendError, match="the warm-up call failed before the test started: RuntimeError: injected"):
        runner.run(config, tmp_path / "results")
