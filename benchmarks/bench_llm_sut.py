"""Which system under test can carry the llama3.1-8b proof on 2 cores? Candidates side by side.

The proof (benchmarks/llm_submission.py) is six passes over the 13,368-sample set; it fits
75 minutes only if a system sustains ~25 samples/s inside Interactive's bounds (TTFT p99
500 ms, TPOT p99 30 ms). Each candidate answers the same made-up llama3.1-8b set through the
harness (`openai-completions`, 4 tokens, EOS ignored):
  - Offline: LoadGen's samples/s, --rounds times, the candidates interleaved round by round
    in rotating order (a shared machine moves one run by more than some differences);
    the median and the spread (min-max) are printed;
  - Interactive at half the candidate's median Offline rate, --interactive-s seconds:
    TTFT p99 and TPOT p99 (the harness's, from dispatch) and LoadGen's verdict.
Beside them, ROUGE-1 of the Offline answers: a faster system that answers worse is not simply
better. The levers: llama-cpp-python's server ("py") with and without its RAM prompt cache, shorter prompts
(35 tokens, not 58), llama.cpp's C++ server (4 slots, continuous batching, each slot's
prompt cache), SmolLM2's first --layers layers (tests/support/smollm2_layers.py), and with
--vllm, vLLM CPU on the whole model (HARNESS_VLLM_PYTHON, HARNESS_VLLM_MODEL; not
interleaved: started after the others, ~70 s to ready).

    python benchmarks/bench_llm_sut.py [--samples 200] [--rounds 2] [--layers 2] [--vllm]

The C++ server is built on first use (tests/support/llama_cpp_server_build.py, ~10 min).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llm_sut import Server, harness, harness_args, serving, write_dataset  # noqa: E402

from tests.support.llama_cpp_server_build import llama_server  # noqa: E402
from tests.support.smollm2_hf import gguf_path  # noqa: E402
from tests.support.smollm2_layers import first_layers  # noqa: E402

#: Interactive's bounds for llama3.1-8b (mlperf.conf; harness/data/benchmarks.py holds them)
TTFT_BOUND_MS, TPOT_BOUND_MS = 500.0, 30.0


@dataclass(frozen=True)
class Candidate:
    label: str
    server: str  # a key of the servers started
    short: bool  # the 35-token prompts
    extra: tuple[str, ...] = ()  # more `harness run` options


def newest_run(folder: Path) -> dict:
    runs = sorted(p for p in folder.iterdir() if (p / "summary.json").exists())
    return json.loads((runs[-1] / "summary.json").read_text())


def offline(c: Candidate, url: str, server: Server, data: Path, out: Path, n: int) -> tuple[float, float, float]:
    """(LoadGen's samples/s, prompt tokens a request, ROUGE-1 of the answers) of one Offline
    pass over n samples: how fast, and how well it answers (a faster system that answers
    worse is not simply better)."""
    harness("run", *harness_args(server, url, data, out), "--scenario", "Offline", *c.extra,
            "--set", "offline_expected_qps=10", "--set", "min_duration_s=1", "--set", f"min_query_count={n}",
            quiet=True)
    s = newest_run(out)
    return (s["loadgen"]["throughput_per_s"], s["tokens"]["input_tokens"] / s["tokens"]["requests"],
            s["text_accuracy"]["rouge"]["rouge1"])


def interactive(c: Candidate, url: str, server: Server, data: Path, out: Path, n: int, qps: float,
                seconds: float) -> dict:
    harness("run", *harness_args(server, url, data, out), "--scenario", "Interactive", *c.extra,
            "--set", f"target_qps={qps:.3f}", "--set", f"min_duration_s={seconds}",
            "--set", f"min_query_count={n}", ok=(0, 1), quiet=True)
    s = newest_run(out)
    return {"ttft_p99": s["tokens"]["ttft_ms"]["p99"], "tpot_p99": s["tokens"]["tpot_ms"]["p99"],
            "valid": s["validity"]["result"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=200, help="rows of the made-up set, answered each Offline pass")
    p.add_argument("--rounds", type=int, default=2, help="Offline passes per candidate, interleaved")
    p.add_argument("--layers", type=int, default=2, help="blocks kept of SmolLM2's 30 in the cut model")
    p.add_argument("--interactive-s", type=float, default=20.0, help="each Interactive run's min_duration_s")
    p.add_argument("--vllm", action="store_true", help="add vLLM CPU (HARNESS_VLLM_PYTHON, HARNESS_VLLM_MODEL)")
    a = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-llm-sut-") as tmp_name, ExitStack() as stack:
        tmp = Path(tmp_name)
        whole = gguf_path()
        cut = first_layers(a.layers, tmp / f"smollm2-{a.layers}-layers.gguf")
        binary = llama_server()
        data = {short: tmp / f"cnn_eval{'-short' if short else ''}.json" for short in (False, True)}
        for short, path in data.items():
            write_dataset(path, a.samples, whole, short)
        servers = {"py": Server("python", whole), "py-cache": Server("python", whole, prompt_cache=True),
                   "py-cut": Server("python", cut), "cpp": Server("cpp", whole), "cpp-cut": Server("cpp", cut)}
        urls = {}
        for key, server in servers.items():
            url = stack.enter_context(serving(server, tmp / f"{key}.log", binary))
            urls[key] = url
        cut_name = f"{a.layers} layers"
        candidates = [
            Candidate("py server, 30 layers", "py", False),
            Candidate("py server + prompt cache", "py-cache", False),
            Candidate("py server, short prompts", "py", True),
            Candidate(f"py server, {cut_name}", "py-cut", False),
            Candidate("C++ server, 30 layers", "cpp", False),
            Candidate("C++ server, short prompts", "cpp", True),
            Candidate(f"C++ server, {cut_name}", "cpp-cut", False),
            Candidate(f"C++ server, {cut_name}, short", "cpp-cut", True),
        ]
        rates: dict[str, list[float]] = {c.label: [] for c in candidates}
        tokens: dict[str, float] = {}
        rouge: dict[str, float] = {}
        for r in range(a.rounds):
            k = r % len(candidates)  # rotate who goes first
            for c in candidates[k:] + candidates[:k]:
                rate, tokens[c.label], rouge[c.label] = offline(c, urls[c.server], servers[c.server], data[c.short],
                                                                tmp / "runs", a.samples)
                rates[c.label].append(rate)
                print(f"  round {r + 1}: {c.label}: {rate:.1f} samples/s", flush=True)
        checks = {}
        for c in candidates:
            qps = statistics.median(rates[c.label]) / 2
            checks[c.label] = interactive(c, urls[c.server], servers[c.server], data[c.short], tmp / "runs",
                                          a.samples, qps, a.interactive_s)
        stack.close()
        if a.vllm:
            c = Candidate("vLLM CPU, 30 layers", "vllm", False)
            vllm = Server("vllm", Path(os.environ["HARNESS_VLLM_MODEL"]))
            with serving(vllm, tmp / "vllm.log", python=os.environ["HARNESS_VLLM_PYTHON"]) as url:
                rates[c.label] = []
                for _ in range(a.rounds):
                    rate, tokens[c.label], rouge[c.label] = offline(c, url, vllm, data[False], tmp / "runs", a.samples)
                    rates[c.label].append(rate)
                qps = statistics.median(rates[c.label]) / 2
                checks[c.label] = interactive(c, url, vllm, data[False], tmp / "runs", a.samples, qps,
                                              a.interactive_s)
            candidates.append(c)
        print_table(candidates, rates, tokens, rouge, checks, a)
    return 0


def print_table(candidates: list[Candidate], rates: dict[str, list[float]], tokens: dict[str, float],
                rouge: dict[str, float], checks: dict[str, dict], a: argparse.Namespace) -> None:
    print(f"\n{a.samples} samples a pass, {a.rounds} rounds (median, min-max); tok: prompt tokens; R-1: ROUGE-1")
    print(f"of the answers; Interactive at half the median for {a.interactive_s:g} s: TTFT/TPOT p99 (ms) and")
    print(f"whether inside its bounds ({TTFT_BOUND_MS:g} / {TPOT_BOUND_MS:g} ms) and VALID")
    print(f"{'candidate':<29}{'tok':>4}{'samples/s':>10}{'min-max':>12}{'R-1':>6}{'TTFT':>7}{'TPOT':>7}{'ok':>5}")
    for c in candidates:
        r, ch = rates[c.label], checks[c.label]
        inside = ch["ttft_p99"] < TTFT_BOUND_MS and ch["tpot_p99"] < TPOT_BOUND_MS and ch["valid"] == "VALID"
        print(f"{c.label:<29}{tokens[c.label]:>4.0f}{statistics.median(r):>10.1f}{f'{min(r):.1f}-{max(r):.1f}':>12}"
              f"{rouge[c.label]:>6.1f}{ch['ttft_p99']:>7.0f}{ch['tpot_p99']:>7.1f}{'yes' if inside else 'no':>5}")

if __name__ == "__main__":
    sys.exit(main())
