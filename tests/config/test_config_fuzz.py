"""A fuzz corpus of mutated run configs: every case is one ConfigError naming the file,
quoting at most a short piece of the value, in bounded time and memory, before any model
loads; through the CLI it is one line and exit 2, never a traceback or a crashed child.

The cases are the mutations a reviewer found slipping through (bad bytes, names that
escape the results folder, alias bombs, impossible numbers, duplicate keys, empty files,
typos) plus their neighbours.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from harness.config import registry
from harness.config.run_config import build_config
from harness.errors import ConfigError
from harness.run.runner import resolve

BASE = "name: fuzz\nscenario: Offline\nbackend: synthetic\nmin_duration_s: 0.2\n"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")
)

CASES: dict[str, bytes | str] = {
    # bytes and encodings
    "non-UTF-8 byte": b"name: fuzz\xff\nscenario: Offline\n",
    "UTF-16 file": BASE.encode("utf-16"),
    "binary garbage": b"\x00\x01\x02\x03\xfe\xff" * 20,
    # names that would escape or break the results folder's name
    "name with a slash": BASE.replace("name: fuzz", "name: a/b"),
    "name climbing out": BASE.replace("name: fuzz", "name: ../../escape"),
    "name of 300 characters": BASE.replace("name: fuzz", "name: " + "x" * 300),
    "name with a newline": BASE.replace("name: fuzz", 'name: "a\\nb"'),
    "empty name": BASE.replace("name: fuzz", 'name: ""'),
    "hidden name": BASE.replace("name: fuzz", "name: .hidden"),
    "name as a number": BASE.replace("name: fuzz", "name: 123"),
    # YAML structure
    "5,000 levels of flow nesting": "a: " + "[" * 5000 + "]" * 5000 + "\n",
    "deep block nesting": "".join(" " * i + f"k{i}:\n" for i in range(200)) + " " * 200 + "v: 1\n",
    "alias bomb": BOMB,
    "alias bomb in a setting": BOMB + "backend_options: *i\n",
    "one alias": "name: &n fuzz\nbenchmark: *n\n",
    "an anchor alone": "name: &n fuzz\n",
    "duplicate key": BASE + "scenario: Server\n",
    "duplicate nested key": BASE + "backend_options:\n  service_time_ms: 1\n  service_time_ms: 2\n",
    "empty file": "",
    "only comments": "# nothing here\n# at all\n",
    "a list at the top": "- scenario\n- Offline\n",
    "a scalar at the top": "Offline\n",
    "two documents": BASE + "---\n" + BASE,
    "unclosed bracket": "scenario: [Offline\n",
    "tab indentation": "backend_options:\n\tservice_time_ms: 1\n",
    "python tag": "name: !!python/object/apply:os.system ['true']\n",
    "nested mapping for a number": BASE + "target_qps: {a: 1}\n",
    "list for backend options": BASE + "backend_options: [1, 2]\n",
    "a number as a key": BASE + "1: 2\n",
    # impossible numbers
    "min_duration_s 1e300": BASE.replace("0.2", "1e300"),
    "min_duration_s inf": BASE.replace("0.2", ".inf"),
    "min_duration_s nan": BASE.replace("0.2", ".nan"),
    "min_duration_s negative": BASE.replace("0.2", "-1"),
    "offline_expected_qps 1e12": BASE + "offline_expected_qps: 1e12\n",
    "an Offline query too big to hold": BASE.replace("0.2", "600") + "offline_expected_qps: 5000000\n",
    "min_query_count 1e12": BASE + "min_query_count: 1000000000000\n",
    "min_query_count beyond int64": BASE + "min_query_count: 99999999999999999999999\n",
    "workers 100000": BASE + "workers: 100000\n",
    "workers 2.5": BASE + "workers: 2.5\n",
    "max_batch 0": BASE + "max_batch: 0\n",
    "max_batch 1e9": BASE + "max_batch: 1000000000\n",
    "batch_timeout_ms negative": BASE + "batch_timeout_ms: -1\n",
    "target_qps 0": BASE + "target_qps: 0\n",
    "target_qps 1e20": BASE + "target_qps: 1e20\n",
    "performance_sample_count 0": BASE + "performance_sample_count: 0\n",
    "percentile above 1": BASE + "target_latency_percentile: 1.5\n",
    "probability 2": BASE + "accuracy_log_probability: 2\n",
    "seed negative": BASE + "seed: -1\n",
    "seed 2^70": BASE + "seed: 1180591620717411303424\n",
    "server threads 100000": BASE + "server_num_issue_query_threads: 100000\n",
    "samples per query 1e9": BASE + "multi_stream_samples_per_query: 1000000000\n",
    "latency of a year": BASE + "target_latency_ms: 31536000000\n",
    "min_success_rate 2": BASE + "min_success_rate: 2\n",
    # typos and mistyped values
    "unknown key": BASE + "min_duraton_s: 1\n",
    "scenario typo": BASE.replace("Offline", "Ofline"),
    "mode typo": BASE + "mode: PerformanceOnyl\n",
    "wrong type": BASE.replace("0.2", "lots"),
    "bool that is not": BASE + "use_token_latencies: maybe\n",
    "slo typo": BASE + "slo:\n  ttft: 500\n",
    "slo negative": BASE + "slo:\n  ttft_ms: -5\n",
    "backend option typo": BASE + "backend_options:\n  servise_time_ms: 1\n",
    "backend option out of range": BASE + "backend_options:\n  service_time_ms: -5\n",
    # rules between settings
    "max below min duration": BASE + "max_duration_s: 0.1\n",
    "max below min query count": BASE + "min_query_count: 100\nmax_query_count: 10\n",
    "FindPeakPerformance in Offline": BASE + "mode: FindPeakPerformance\n",
    "issue_inline in Server": BASE.replace("Offline", "Server") + "issue_inline: true\n",
    # a value quoted back must stay short
    "a megabyte of value": BASE + "min_duration_s: " + "9" * 1_000_000 + "x\n",
}


@pytest.mark.parallel
def test_the_corpus_is_large_enough():
    assert len(CASES) >= 60


def _config_error(path: Path) -> tuple[ConfigError, float, int]:
    """The error, the seconds it took and the peak traced memory, under tracemalloc (which
    slows Python several times over: the time is compared only with a file timed alike)."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(ConfigError) as e:
            resolve(build_config(path, (), None, registry.option_names, registry.options_class))
        elapsed = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return e.value, elapsed, peak


#: a benign file as long as most cases (the flow-nesting one's 10 KB), refused on the same path
REFERENCE = "a: [" + ", ".join(["1"] * 3333) + "]\n"


@pytest.fixture(scope="module")
def seconds_per_byte(tmp_path_factory: pytest.TempPathFactory) -> float:
    """This machine's cost of reading a config, per byte, from the reference file. A fixed
    2 s bound failed on a slower CPU of this class: 5,000 levels of flow nesting took
    2.6-2.8 s there, and the benign flat list of its length 3.0-4.9 s."""
    path = tmp_path_factory.mktemp("fuzz-reference") / "reference.yaml"
    path.write_text(REFERENCE)
    return _config_error(path)[1] / len(REFERENCE)


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_mutation_is_one_config_error(tmp_path: Path, case: str, seconds_per_byte: float):
    path = tmp_path / "fuzz.yaml"
    content = CASES[case]
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    error, elapsed, peak = _config_error(path)
    message = str(error)
    assert str(path) in message, message
    assert "\n" not in message and len(message) < 400, message[:500]
    # Linear in the file's length, as the benign file is: a bomb's blow-up is orders of
    # magnitude, not the factor of 4 this allows (a short file gets the reference's time).
    bound = 4 * seconds_per_byte * max(len(content), len(REFERENCE))
    assert elapsed < bound, f"{case}: {elapsed:.2f} s, over 4x a benign file of its length ({bound:.2f} s here)"
    assert peak < 64 * 2**20 + 4 * len(content), f"{case}: {peak / 2**20:.0f} MB"


@pytest.mark.parallel
def test_errors_from_a_file_name_its_line(tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_text(BASE + "backend_options:\n  service_time_ms: -5\n")
    with pytest.raises(ConfigError, match=rf"{path}:6: backend 'synthetic' option service_time_ms"):
        build_config(path, (), None, registry.option_names, registry.options_class)
    path.write_text(BASE + "scenario: Server\n")
    with pytest.raises(ConfigError, match=rf"{path}:5: invalid YAML: duplicate key 'scenario'"):
        build_config(path, ())


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        ("*.Offline.min_duraton = 1000", "LoadGen has no setting 'min_duraton' (did you mean 'min_duration'?)"),
        ("*.Ofline.min_duration = 1000", "unknown scenario 'Ofline' (did you mean 'Offline'?)"),
        ("min_duration = 1000", "expected `model.scenario.key = value`"),
        ("llama3_1-8b.Interactive.ttft_latency = 400",
         "LoadGen has no Interactive scenario; it reads Interactive's settings as "
         "`llama3_1-8b-interactive.Server.ttft_latency`"),
    ],
)
@pytest.mark.parallel
def test_conf_file_typos_are_refused(tmp_path: Path, line: str, expect: str):
    conf = tmp_path / "user.conf"
    conf.write_text(f"# a comment\n*.Offline.target_qps = 5\n{line}\n")
    path = tmp_path / "s.yaml"
    path.write_text(BASE + f"user_conf: {conf}\n")
    with pytest.raises(ConfigError) as e:
        resolve(build_config(path, (), None, registry.option_names, registry.options_class))
    assert f"{conf}:3" in str(e.value) and expect in str(e.value)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))


@pytest.mark.parametrize("case", ["alias bomb in a setting", "min_duration_s 1e300", "UTF-16 file", "name climbing out",
                                  "offline_expected_qps 1e12", "5,000 levels of flow nesting", "duplicate key", "empty file"])
@pytest.mark.parallel
def test_through_the_cli_one_line_exit_2_no_child(tmp_path: Path, case: str):
    path = tmp_path / "fuzz.yaml"
    content = CASES[case]
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "-c", str(path), "--output-dir", str(out)],
                          capture_output=True, text=True, timeout=60, preexec_fn=_limit_memory)
    assert proc.returncode == 2, (case, proc.returncode, proc.stderr[-2000:])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert not out.exists() or not any(out.iterdir())  # refused before any results folder


@pytest.mark.parallel
def test_a_price_sheet_error_inside_a_config_names_its_line(tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_text(BASE + "cost:\n  device_hourly: -3\n")
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "-c", str(path), "--output-dir", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{path}:5: cost" in proc.stderr and "device_hourly" in proc.stderr
