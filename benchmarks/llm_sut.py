"""The systems under test of the llama3.1-8b proof, and the made-up set they answer: shared by
benchmarks/bench_llm_sut.py (which one is fastest) and benchmarks/llm_submission.py (the proof).

A system is a server (llama-cpp-python's Python server, llama.cpp's C++ server, vLLM CPU)
serving a model (SmolLM2-135M, or its first layers: tests/support/smollm2_layers.py), asked
with the harness's `openai-completions` protocol, 4 answer tokens, EOS ignored.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.cnn_small import PROMPT  # noqa: E402  SmolLM2's chat template, written out
from tests.support.server_process import free_port, server_process  # noqa: E402

SUBJECTS = ["council", "storm", "team", "museum", "river", "market", "school", "bridge", "festival", "harbour"]
EVENTS = ["approved a new budget", "closed for the winter", "won its third title", "reopened after repairs",
          "flooded the lower town", "reported record sales", "hired forty teachers", "opened to traffic",
          "drew large crowds", "welcomed a new ferry"]
#: tokens per answer: LoadGen needs at least 2 for TPOT; the made-up references are short
MAX_TOKENS = 4
#: llama.cpp's C++ server: requests decoded together (continuous batching), each slot's context
SLOTS, SLOT_CONTEXT = 4, 256


def article(i: int, short: bool) -> tuple[str, str]:
    """Row i's article and its reference summary. The long form is 58 prompt tokens in the
    chat template, the short one 35: the same subject and event, fewer words around them."""
    subject, event = SUBJECTS[i % len(SUBJECTS)], EVENTS[(i // len(SUBJECTS)) % len(EVENTS)]
    if short:
        return f"Day {i % 28 + 1}: the {subject} {event}.", f"The {subject} {event}."
    return (f"On day {i % 28 + 1}, the {subject} {event}, officials said. Residents welcomed the news.",
            f"The {subject} {event}.")


def write_dataset(path: Path, n: int, gguf: Path, short: bool = False) -> None:
    """cnn_eval.json's columns (input, tok_input, output) for n made-up articles."""
    import pandas as pd
    from llama_cpp import Llama

    vocab = Llama(model_path=str(gguf), vocab_only=True, verbose=False)
    inputs, ids, refs = [], [], []
    for i in range(n):
        text, ref = article(i, short)
        prompt = PROMPT.format(text)
        inputs.append(prompt)
        ids.append(vocab.tokenize(prompt.encode(), add_bos=True))
        refs.append(ref)
    pd.DataFrame({"input": inputs, "tok_input": ids, "output": refs}).to_json(path)


@dataclass(frozen=True)
class Server:
    """A server kind and the model it serves: `kind` python (llama-cpp-python), cpp
    (llama.cpp's llama-server) or vllm; `model` a .gguf (python, cpp) or an HF folder (vllm)."""

    kind: str
    model: Path
    prompt_cache: bool = False  # llama-cpp-python's RAM prompt cache (--cache True)

    @property
    def tokenizer(self) -> Path:
        return self.model

    def command(self, port: int, binary: Path | None = None, python: str | None = None) -> list[str]:
        if self.kind == "python":
            # interrupt_requests False: its default cancels an in-flight stream when another arrives
            return [sys.executable, "-m", "llama_cpp.server", "--model", str(self.model), "--n_threads", "2",
                    "--interrupt_requests", "False", "--host", "127.0.0.1", "--port", str(port),
                    *(["--cache", "True"] if self.prompt_cache else [])]
        if self.kind == "cpp":
            # --parallel slots share one batch (continuous batching is the server's default);
            # each request's cache_prompt (on by default) keeps the slot's KV of the shared
            # chat-template prefix, so only the article is computed. --no-repack: on this
            # CPU (AMX) the native build's AMX weight layout segfaults in its first matmul
            # (ggml_backend_amx_mul_mat, seen in gdb); Q4_1 has no other repacked layout on x86
            return [str(binary), "-m", str(self.model), "-t", "2", "-tb", "2", "--parallel", str(SLOTS),
                    "-c", str(SLOTS * SLOT_CONTEXT), "--host", "127.0.0.1", "--port", str(port), "--no-webui",
                    "--no-repack"]
        if self.kind == "vllm":
            return [python or "python", "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model),
                    "--served-model-name", "smollm2", "--host", "127.0.0.1", "--port", str(port), "--enforce-eager",
                    "--enable-prefix-caching", "--max-model-len", "512", "--dtype", "float32"]
        raise ValueError(f"server kind must be python, cpp or vllm, not {self.kind!r}")


@contextmanager
def serving(server: Server, log: Path, binary: Path | None = None, python: str | None = None,
            port: int | None = None) -> Iterator[str]:
    """The server's base URL (ending in /v1) once /v1/models answers; stopped after. On `port`
    if given (a resumed proof: the URL is one of the settings a result's two runs share)."""
    port = port or free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    url = f"http://127.0.0.1:{port}/v1"
    with server_process(server.command(port, binary, python), url + "/models", log, 600, env=env):
        yield url


def harness_args(server: Server, url: str, data: Path, out: Path) -> list[str]:
    """`harness run` arguments common to every run of the proof and of the benchmark."""
    return ["--backend", "http", "--benchmark", "llama3_1-8b", "--dataset", f"mlperf:llama3.1-8b:{data}",
            "--set", "protocol=openai-completions", "--set", f"url={url}", "--set", f"tokenizer={server.tokenizer}",
            "--set", "temperature=0", "--set", f"max_tokens={MAX_TOKENS}", "--set", "ignore_eos=true",
            # an Offline query of 40,000 samples opened as many connections at once, and they
            # failed to connect; the server's slots take SLOTS at a time, the rest wait in its queue
            "--set", f"max_in_flight={4 * SLOTS}", "--output-dir", str(out)]


def harness(*args: str, ok: tuple[int, ...] = (0,), quiet: bool = False) -> int:
    """`python -m harness ARGS` from the repository, printed with its exit code and time."""
    print(f"$ harness {shlex.join(args)}", flush=True)
    start = time.monotonic()
    out = subprocess.DEVNULL if quiet else None
    rc = subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, stdout=out).returncode
    print(f"  -> exit {rc} in {time.monotonic() - start:.0f} s", flush=True)
    if rc not in ok:
        raise SystemExit(f"`harness {args[0]}` exited {rc}")
    return rc
