"""A third-party backend, registered only through the `harness.backends` entry-point group,
runs in both SUTs under the real LoadGen, and the registry refuses a class that breaks the
contract (backends.base) with the class named and the valid kinds listed.

Nothing is installed: a `<name>.dist-info` folder (METADATA, entry_points.txt) beside the
module in a temporary folder is a distribution to importlib.metadata once the folder is on
the path: sys.path for this process, PYTHONPATH for the child that runs the test.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.config import registry
from harness.config.run_config import RunConfig
from harness.errors import BackendError, RunError
from harness.results.records import read_records
from harness.run import runner

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)

MODULE = "thirdparty_backends"

SOURCE = '''
"""Backends of a pretend third-party package: they import only the public contract."""

import asyncio

from backends.base import Backend, Chunk, StreamingBackend, StreamingOptions, TensorBackend, TensorSpec, Usage
from harness.errors import RequestFailed


class Doubler(TensorBackend):
    name = "tp-doubler"

    def inputs(self):
        return [TensorSpec("x", (None, 3), "float32")]

    def predict(self, batch):
        return [batch["x"] * 2]

    def describe(self):
        return {"backend": self.name, "engine": "numpy", "precision": "fp32"}


class LegacyDoubler(Backend):
    """Written as tensor backends were before TensorBackend existed: no kind, no base but Backend."""

    name = "tp-legacy"

    def inputs(self):
        return [TensorSpec("x", (None, 3), "float32")]

    def predict(self, batch):
        return [batch["x"] * 2]


class WordsOptions(StreamingOptions):
    words: str = "alpha"


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("this exception cannot be shown")


class Words(StreamingBackend):
    """`max_tokens` words per prompt, one chunk each, then the usage a server would send.
    A prompt saying @refuse fails before any content, @break after two words, @unprintable
    with an exception whose text cannot be read: each fails only its own request."""

    name = "tp-words"
    kind = "generative"
    Options = WordsOptions
    max_in_flight = 4

    def __init__(self, options):
        super().__init__(options)
        self.opened = self.closed = 0

    def count_tokens(self, text):
        return len(text.split())

    def prepare(self, prompt):
        return (prompt.prompt, prompt.max_tokens)

    async def open(self):
        self.opened += 1

    async def aclose(self):
        self.closed += 1

    async def stream(self, request):
        prompt, n = request
        if "@refuse" in prompt:
            raise RequestFailed("tp_refused", "the pretend server said no")
        yield Chunk(n_tokens=0, headers=200)
        for i in range(n):
            await asyncio.sleep(0)  # other requests run meanwhile, as between a real client's reads
            if i == 2 and "@break" in prompt:
                raise ValueError("the pretend server's answer broke off")
            if i == 2 and "@unprintable" in prompt:
                raise _Unprintable()
            yield Chunk(f" {self.options.words}{i}", 1)
        yield Chunk(n_tokens=0, usage=Usage(output_tokens=n, input_tokens=self.count_tokens(prompt)))
        yield Chunk(n_tokens=0, metrics={"tp_words": n})

    def describe(self):
        return {"backend": self.name, "engine": "words", "opened": self.opened, "closed": self.closed}


class Typo(TensorBackend):
    kind = "tensr"

    def predict(self, batch):
        return []


class NoStream(StreamingBackend):
    kind = "async"


class PlainAsync(Backend):
    kind = "async"

    async def stream(self, sample):
        yield Chunk("x")


class StreamingAsTensor(StreamingBackend):
    kind = "tensor"

    async def stream(self, sample):
        yield Chunk("x")
'''

ENTRY_POINTS = {
    "tp-doubler": "Doubler",
    "tp-legacy": "LegacyDoubler",
    "tp-words": "Words",
    "tp-typo": "Typo",
    "tp-nostream": "NoStream",
    "tp-plain-async": "PlainAsync",
    "tp-streaming-as-tensor": "StreamingAsTensor",
}


@pytest.fixture
def third_party(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The pretend package's folder, on the path of this process and of the child."""
    site = tmp_path / "site"
    dist = site / "thirdparty_backends-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / f"{MODULE}.py").write_text(SOURCE)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-backends\nVersion: 0.1\n")
    lines = [f"{name} = {MODULE}:{cls}" for name, cls in ENTRY_POINTS.items()]
    (dist / "entry_points.txt").write_text("[harness.backends]\n" + "\n".join(lines) + "\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p))
    yield site
    sys.modules.pop(MODULE, None)


def _run(tmp_path: Path, **settings) -> tuple[Path, dict]:
    outcome = runner.run(RunConfig(**settings), tmp_path / "results")
    return outcome.run_dir, outcome.summary


def test_the_entry_points_are_listed_with_the_built_in_backends(third_party):
    names = registry.names()
    assert {"tp-doubler", "tp-legacy", "tp-words", "synthetic", "http"} <= set(names)
    assert registry.get("tp-words").kind == "generative"


@pytest.mark.parametrize(("name", "scenario"), [("tp-doubler", "Server"), ("tp-legacy", "SingleStream")])
def test_a_third_party_tensor_backend_runs_in_the_tensor_sut(third_party, tmp_path, name, scenario):
    run_dir, s = _run(
        # SingleStream: LoadGen generates min_duration / expected latency queries; at 0.01 ms
        # (30,000) this trivial backend served them all in under 0.3 s on a fast machine
        # ("ran out of generated queries"); at 0.001 ms a query would have to take < 1 µs
        tmp_path, backend=name, scenario=scenario, target_qps=300, single_stream_expected_latency_ms=0.001,
        min_duration_s=0.3, min_query_count=100,
    )  # fmt: skip
    assert s["status"] == "complete" and s["loadgen"]["errors"] == []
    ours, lg = s["harness"], s["loadgen"]
    assert ours["samples"] == lg["query_count"] >= 100
    assert ours["failed"] == 0 and ours["success_rate"] == 1.0
    assert s["backend"]["backend"] == name
    assert s["sut"]["issue_inline"] is (scenario == "SingleStream")  # the tensor SUT served it
    assert len(read_records(run_dir)) == ours["samples"]


def _prompts(path: Path, kinds: list[str], max_tokens: int) -> Path:
    rows = [{"prompt": f"request {i} {k}", "max_tokens": max_tokens} for i, k in enumerate(kinds)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_third_party_streaming_backend_runs_in_the_event_loop_sut(third_party, tmp_path):
    kinds = ["@ok", "@ok", "@refuse", "@ok", "@break", "@ok", "@unprintable", "@ok"]
    prompts = _prompts(tmp_path / "prompts.jsonl", kinds, max_tokens=5)
    run_dir, s = _run(
        tmp_path, backend="tp-words", scenario="Server", dataset=str(prompts), target_qps=200,
        min_duration_s=0.3, min_query_count=64, use_token_latencies=True, ttft_latency_ms=2000, tpot_latency_ms=1000,
        backend_options={"words": "beta", "warmup_requests": 2},
    )  # fmt: skip
    assert s["status"] == "complete" and s["loadgen"]["errors"] == []
    ours, lg = s["harness"], s["loadgen"]
    assert ours["samples"] == lg["query_count"] >= 64
    rec = read_records(run_dir).columns
    wanted = [kinds[i] for i in rec["sample_index"]]
    # The backend's own exceptions fail exactly their requests, each with its reason.
    assert ours["failed"] == sum(k != "@ok" for k in wanted) > 0
    for kind, status, error in zip(wanted, rec["status"], rec["error"], strict=True):
        assert (status == "ok") is (kind == "@ok")
        if kind == "@refuse":
            assert error == "tp_refused: the pretend server said no"
        elif kind == "@break":
            assert error == "ValueError: the pretend server's answer broke off"
        elif kind == "@unprintable":
            assert error.startswith("_Unprintable: ")
    # Tokens: 5 per successful request, the "server's" usage agreeing with the chunks.
    tok = s["tokens"]
    succeeded = ours["samples"] - ours["failed"]
    assert tok["requests"] == succeeded and tok["output_tokens"] == 5 * succeeded
    assert tok["token_count_source"] == {"usage": succeeded}
    assert tok["mismatch"]["requests_differing"] == 0 and tok["mismatch"]["client_tokens"] == 5 * succeeded
    entries = [json.loads(line) for line in (run_dir / "tokens.jsonl").read_text().splitlines()]
    ok = [e for e in entries if e["status"] == "ok"]
    assert {e["text"] for e in ok} == {" beta0 beta1 beta2 beta3 beta4"}
    assert {e["input_tokens"] for e in ok} == {3}  # "request i @ok", counted by count_tokens
    assert all(e["metrics"] == {"tp_words": 5} and len(e["t"]) == 5 for e in ok)
    assert all(rec["first_byte_ns"][k] > 0 for k in range(len(wanted)) if wanted[k] == "@ok")
    # open() and aclose() ran once each, around the warm-up and the test
    assert s["backend"]["opened"] == 1 and s["backend"]["closed"] == 1


def test_a_streaming_backends_tokenizer_counts_the_generated_prompt_lengths(third_party, tmp_path):
    run_dir, s = _run(
        tmp_path, backend="tp-words", scenario="Offline", dataset="synthetic:isl=6,osl=4,n=16",
        min_duration_s=0.1, min_query_count=16, offline_expected_qps=1000,
    )  # fmt: skip
    assert s["status"] == "complete" and s["harness"]["failed"] == 0
    assert s["dataset"]["lengths_counted_in"] == "tokenizer"  # the backend's count_tokens, not words
    entries = [json.loads(line) for line in (run_dir / "tokens.jsonl").read_text().splitlines()]
    assert len(entries) == s["harness"]["samples"] >= 16
    assert {e["input_tokens"] for e in entries} == {6} and {e["n"] for e in entries} == {4}


CRASH_PLANT = '''
import harness.data.datasets as target

_real = target.Dataset.get
_calls = [0]


def planted(self, index):
    _calls[0] += 1
    if _calls[0] > 20:
        raise RuntimeError("planted harness bug")
    return _real(self, index)


target.Dataset.get = planted
'''


def test_a_harness_bug_in_the_event_loop_sut_is_a_crash_not_failed_samples(third_party, tmp_path, monkeypatch):
    # The dataset lookup is the harness's code on the request path: a bug there must end
    # the run with its traceback, never hang LoadGen or read as failed requests.
    plant = tmp_path / "plant"
    plant.mkdir()
    (plant / "sitecustomize.py").write_text(CRASH_PLANT)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join((str(plant), str(third_party))))
    prompts = _prompts(tmp_path / "prompts.jsonl", ["@ok"] * 8, max_tokens=3)
    with pytest.raises(RunError) as e:
        _run(tmp_path, backend="tp-words", scenario="Offline", dataset=str(prompts), min_duration_s=0.1,
             min_query_count=200, offline_expected_qps=200)  # fmt: skip
    assert "RuntimeError: planted harness bug" in str(e.value)
    assert "planted harness bug" in e.value.child_traceback and "stream_sut.py" in e.value.child_traceback
    (run_dir,) = (tmp_path / "results").iterdir()
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "incomplete"
    records = read_records(run_dir)
    assert len(records) >= 16 and set(records.columns["status"]) == {"ok"}  # kept, none marked failed


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("tp-typo", ["thirdparty_backends.Typo", "'tensr'", "valid kinds: 'tensor', 'async', 'generative'"]),
        ("tp-nostream", ["thirdparty_backends.NoStream", "does not implement stream()", "valid kinds: 'tensor', 'async', 'generative'"]),
        ("tp-plain-async", ["thirdparty_backends.PlainAsync", "must subclass backends.base.StreamingBackend", "valid kinds"]),
        ("tp-streaming-as-tensor", ["thirdparty_backends.StreamingAsTensor", "kind 'tensor'", "'async', 'generative'"]),
    ],
)
def test_a_class_breaking_the_contract_is_refused_at_registration(third_party, name, words):
    with pytest.raises(BackendError) as e:
        registry.get(name)
    assert all(w in str(e.value) for w in words), str(e.value)
    bi = registry.info(name)  # the listing shows it as unavailable, with the same reason
    assert not bi.available and all(w in bi.error for w in words)
