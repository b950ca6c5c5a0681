"""How fast and how faithful is the harness's HTTP backend? Figures side by side, one run.

1. Throughput: a no-op OpenAI server (benchmarks/noop_server.py, its own process, pinned
   to the last core) answers streaming chat requests with 4 tokens; each client, pinned to
   the first core, keeps 64 requests open:
     - the harness (LoadGen Offline, http backend, max_in_flight=64)
     - a minimal `vllm bench serve`-style client: aiohttp, one loop, written below
     - GuideLLM (`guidellm` from a separate venv, --guidellm PATH), when it is installed
   Requests/s and the harness's ratio to each are printed.
2. Fidelity: the server injects TTFT 200 ms, 20 ms/token, 100 tokens; the harness's TTFT,
   TPOT and E2E medians must be within 2 % of that truth at 1 and at 32 streams. At 32
   streams the minimal client's medians for the same bursts are printed beside them.

3. With --telemetry (only): requests a second and the TTFT error with telemetry off and on,
   interleaved round by round: what sampling beside the test costs the timed path.
4. With --against DIR (only): this checkout's harness against another's (e.g. a `git
   worktree` of an earlier commit), interleaved round by round in alternating order, each
   run in its own process from its own tree: requests/s on the no-op server, and the
   32-stream TTFT error against the injected 200 ms. Prints both sides, the ratio per
   round, and whether this side's median falls inside the other's spread.

    python benchmarks/bench_http.py [--seconds 8] [--guidellm /tmp/guidellm-venv/bin/guidellm] [--telemetry]
    python benchmarks/bench_http.py --against /tmp/old --rounds 8 --seconds 2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.config.run_config import RunConfig  # noqa: E402
from harness.run import runner  # noqa: E402

CONCURRENCY = 64
TRUTH = {"ttft_ms": 200.0, "tpot_ms": 20.0, "tokens": 100}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def noop_server(core: int | None, *extra: str) -> Iterator[str]:
    port = _free_port()
    cmd = [sys.executable, str(ROOT / "benchmarks" / "noop_server.py"), "--port", str(port), *extra]
    if core is not None:
        cmd = ["taskset", "-c", str(core), *cmd]
    proc = subprocess.Popen(cmd)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(base + "/v1/models", timeout=1).read()
                break
            except OSError:
                time.sleep(0.05)
        yield base
    finally:
        proc.terminate()
        proc.wait(5)


# --- the minimal client ------------------------------------------------------------------


_HEADERS = {"Content-Type": "application/json"}


def _chat_body(max_tokens: int) -> bytes:
    return json.dumps({"model": "noop", "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": max_tokens, "stream": True}).encode()  # fmt: skip


async def _chat_request(session: Any, url: str, body: bytes, start: int) -> tuple[float, float, int]:
    """One streamed chat request as the minimal client sends it, every event JSON-decoded:
    (ms to the first token, ms to the end, tokens), both from `start` (perf_counter_ns)."""
    first = tokens = 0
    async with session.post(url + "/v1/chat/completions", data=body, headers=_HEADERS) as r:
        async for line in r.content:
            if line.startswith(b"data: ") and line[6:].strip() != b"[DONE]" and json.loads(line[6:]).get("choices"):
                first = first or time.perf_counter_ns()
                tokens += 1
    return (first - start) / 1e6, (time.perf_counter_ns() - start) / 1e6, tokens


async def _minimal(url: str, concurrency: int, seconds: float) -> float:
    """A `vllm bench serve`-style client: one loop, one pooled session, N workers."""
    import aiohttp

    body = _chat_body(4)
    done = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        t0 = time.perf_counter()
        deadline = t0 + seconds

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                await _chat_request(session, url, body, time.perf_counter_ns())
                done += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done / (time.perf_counter() - t0)


async def _minimal_bursts(url: str, streams: int, rounds: int) -> dict[str, float]:
    """The minimal client's own TTFT/TPOT/E2E medians for bursts of `streams` requests at
    once (the first burst, which opens the connections, is not counted): what any one-loop
    aiohttp client sees on this server and machine, beside the harness's figures."""
    import aiohttp

    body = _chat_body(TRUTH["tokens"])
    figures: dict[str, list[float]] = {"ttft_ms": [], "tpot_ms": [], "e2e_ms": []}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=streams)) as session:
        for burst in range(rounds + 1):
            start = time.perf_counter_ns()
            done = await asyncio.gather(*(_chat_request(session, url, body, start) for _ in range(streams)))
            if burst:
                for ttft, e2e, tokens in done:
                    figures["ttft_ms"].append(ttft)
                    figures["e2e_ms"].append(e2e)
                    figures["tpot_ms"].append((e2e - ttft) / max(1, tokens - 1))
    return {k: statistics.median(v) for k, v in figures.items()}


def run_minimal(url: str, seconds: float) -> float:
    return asyncio.run(_minimal(url, CONCURRENCY, seconds))


# --- the harness -------------------------------------------------------------------------


def run_harness(url: str, samples: int, out: Path, telemetry: dict[str, Any] | None = None) -> dict[str, Any]:
    config = RunConfig(
        name="bench-http",
        backend="http",
        scenario="Offline",
        dataset="synthetic:isl=1,osl=4,n=4096",
        backend_options={
            "protocol": "openai-chat",
            "url": url + "/v1",
            "max_in_flight": CONCURRENCY,
            "warmup_requests": CONCURRENCY,
        },
        min_duration_s=0.1,
        min_query_count=samples,
        offline_expected_qps=1,
        use_token_latencies=True,
        telemetry=telemetry or {},
    )
    return runner.run(config, out).summary


# --- GuideLLM ----------------------------------------------------------------------------


def run_guidellm(exe: str, url: str, seconds: float, work: Path) -> tuple[float | None, str]:
    data = work / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"hi {i}"}) + "\n" for i in range(200_000)))
    report = work / "guidellm.json"
    cmd = [
        exe, "run",
        "--backend", f"kind=openai_http,target={url},model=noop",
        "--profile", f"kind=concurrent,streams={CONCURRENCY}",
        "--constraint", f"kind=max_duration,seconds={seconds:g}",
        "--data", f"kind=json_file,path={data}",
        "--output", f"kind=json,path={report}",
        "--disable-progress", "--disable-console",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 10 + 120)
    if proc.returncode != 0 or not report.exists():
        return None, f"guidellm failed (rc {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-300:]}"
    b = json.loads(report.read_text())["benchmarks"][0]
    st = b["scheduler_state"]
    span = st["end_requests_time"] - st["start_requests_time"]
    return st["successful_requests"] / span, f"{st['successful_requests']} requests in {span:.1f} s"


# --- fidelity ----------------------------------------------------------------------------


def telemetry_cost(core: int | None, out: Path, rounds: int, samples: int) -> None:
    """Requests a second (no-op server) and the TTFT error (injected 200 ms, 32 streams) with
    telemetry off and on (server scrape every 0.2 s, host; five times the default rate), the
    two interleaved round by round in alternating order."""
    def on(url: str) -> dict[str, Any]:
        return {"server": [url + "/metrics"], "host": True, "interval_s": 0.2}

    rates: dict[str, list[float]] = {"off": [], "on": []}
    errors: dict[str, list[float]] = {"off": [], "on": []}
    with noop_server(core) as url:
        for r in range(rounds):
            for side in (("off", "on") if r % 2 == 0 else ("on", "off")):
                s = run_harness(url, samples, out, on(url) if side == "on" else None)
                rates[side].append(s["harness"]["throughput_per_s"])
    extra = ["--ttft-ms", str(TRUTH["ttft_ms"]), "--tpot-ms", str(TRUTH["tpot_ms"]), "--tokens", "20"]
    with noop_server(core, *extra) as url:
        for r in range(rounds):
            for side in (("off", "on") if r % 2 == 0 else ("on", "off")):
                config = RunConfig(
                    name="bench-http-telemetry", backend="http", scenario="Offline", dataset="synthetic:isl=8,osl=20,n=64",
                    backend_options={"protocol": "openai-chat", "url": url + "/v1", "max_in_flight": 32, "warmup_requests": 32},
                    min_duration_s=0.1, min_query_count=96, offline_expected_qps=1, use_token_latencies=True,
                    telemetry=on(url) if side == "on" else {},
                )  # fmt: skip
                # from dispatch: 96 requests through 32 streams wait for a free one first
                ttft = runner.run(config, out).summary["tokens"]["ttft_from_dispatch_ms"]["p50"]
                errors[side].append(ttft / TRUTH["ttft_ms"] - 1)
    ratios = [a / b for a, b in zip(rates["on"], rates["off"], strict=True)]
    print(f"\ntelemetry on vs off ({rounds} rounds, interleaved; on: server scrape + host every 0.2 s)")
    print(f"  {'figure':<34}{'off':>10}{'on':>10}{'on / off':>10}  per-round range")
    print(f"  {'req/s, no-op server, 64 streams':<34}{statistics.median(rates['off']):>10,.0f}"
          f"{statistics.median(rates['on']):>10,.0f}{statistics.median(ratios):>10.3f}  {min(ratios):.3f}–{max(ratios):.3f}")
    print(f"  {'TTFT p50 error, 32 streams':<34}{statistics.median(errors['off']) * 100:>9.2f}%"
          f"{statistics.median(errors['on']) * 100:>9.2f}%{'':>10}  on: "
          + ", ".join(f"{e * 100:.2f}%" for e in errors["on"]) + "; off: " + ", ".join(f"{e * 100:.2f}%" for e in errors["off"]))
    rate_ok = min(rates["off"]) <= statistics.median(rates["on"]) <= max(rates["off"])
    ttft_ok = max(abs(e) for e in errors["on"]) <= 0.02
    print(f"  target: the on side's median req/s inside the off side's spread: {'PASS' if rate_ok else 'FAIL'} "
          f"(off {min(rates['off']):,.0f}–{max(rates['off']):,.0f}); TTFT error within 2 % with telemetry on: "
          f"{'PASS' if ttft_ok else 'FAIL'}")


# One run of a tree's harness in its own process (cwd: the tree; its own `harness` first on
# sys.path), a RunConfig given as JSON: the same path for both sides of --against.
_ONE_RUN = """
import json, sys, tempfile
from pathlib import Path
sys.path.insert(0, ".")
from harness.config.run_config import RunConfig
from harness.run import runner
with tempfile.TemporaryDirectory() as out:
    s = runner.run(RunConfig(**json.loads(sys.argv[1])), Path(out)).summary
print(json.dumps({"rate": s["harness"]["throughput_per_s"], "ttft_p50": s["tokens"]["ttft_ms"]["p50"],
                  "ok": s["harness"]["succeeded"], "samples": s["harness"]["samples"]}))
"""


def _tree_run(tree: Path, config: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", _ONE_RUN, json.dumps(config)], cwd=tree, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"the harness in {tree} failed (rc {proc.returncode}): {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def against(core: int | None, other: Path, rounds: int, seconds: float) -> None:
    """This tree's harness and `other`'s, interleaved round by round (the order alternating):
    req/s on the no-op server (as in 1.), then the 32-stream TTFT error (as in 2.)."""
    sides = {"this": ROOT, "other": other.resolve()}
    rates: dict[str, list[float]] = {k: [] for k in sides}
    errors: dict[str, list[float]] = {k: [] for k in sides}
    samples = int(17_000 * seconds)  # about `seconds` at this machine's rate
    def throughput(url: str) -> dict[str, Any]:
        return dict(name="bench-http", backend="http", scenario="Offline", dataset="synthetic:isl=1,osl=4,n=4096",
                    backend_options={"protocol": "openai-chat", "url": url + "/v1", "max_in_flight": CONCURRENCY,
                                     "warmup_requests": CONCURRENCY},
                    min_duration_s=0.1, min_query_count=samples, offline_expected_qps=1, use_token_latencies=True)

    def streams32(url: str) -> dict[str, Any]:
        return dict(name="bench-http-fidelity", backend="http", scenario="Offline",
                    dataset=f"synthetic:isl=8,osl={TRUTH['tokens']},n=64", use_token_latencies=True,
                    ttft_latency_ms=2000, tpot_latency_ms=100,
                    backend_options={"protocol": "openai-chat", "url": url + "/v1", "max_in_flight": 32, "warmup_requests": 32},
                    min_duration_s=0.1, min_query_count=32, offline_expected_qps=1)

    order = [list(sides), list(reversed(sides))]
    with noop_server(core) as url:
        for r in range(rounds):
            for side in order[r % 2]:
                rates[side].append(_tree_run(sides[side], throughput(url))["rate"])
    extra = ["--ttft-ms", str(TRUTH["ttft_ms"]), "--tpot-ms", str(TRUTH["tpot_ms"]), "--tokens", str(TRUTH["tokens"])]
    with noop_server(core, *extra) as url:
        for r in range(rounds):
            for side in order[r % 2]:
                errors[side].append(_tree_run(sides[side], streams32(url))["ttft_p50"] / TRUTH["ttft_ms"] - 1)
    med = {k: statistics.median(v) for k, v in rates.items()}
    ratios = [a / b for a, b in zip(rates["this"], rates["other"], strict=True)]
    print(f"\nthis tree ({ROOT}) against {sides['other']}:\n{rounds} rounds, interleaved, order alternating")
    print(f"  {'figure':<32}{'this':>10}{'other':>10}{'this/other':>12}")
    print(f"  {'req/s, no-op server, 64 open':<32}{med['this']:>10,.0f}{med['other']:>10,.0f}{statistics.median(ratios):>12.3f}")
    print(f"  {'  slowest round':<32}{min(rates['this']):>10,.0f}{min(rates['other']):>10,.0f}")
    print(f"  {'  fastest round':<32}{max(rates['this']):>10,.0f}{max(rates['other']):>10,.0f}")
    print(f"  {'TTFT p50 error, 32 streams':<32}{statistics.median(errors['this']) * 100:>9.2f}%"
          f"{statistics.median(errors['other']) * 100:>9.2f}%")
    print("  this/other req/s by round: " + ", ".join(f"{x:.3f}" for x in ratios))
    for side in sides:
        print(f"  TTFT error by round, {side}: " + ", ".join(f"{e * 100:.2f}%" for e in errors[side]))
    rate_in = min(rates["other"]) <= med["this"]
    err_in = statistics.median(errors["this"]) <= max(errors["other"])
    print(f"  target: median req/s >= the other's slowest round: {'PASS' if rate_in else 'FAIL'}")
    print(f"  target: median TTFT error <= the other's largest: {'PASS' if err_in else 'FAIL'}")


def fidelity(core: int | None, out: Path) -> list[tuple[str, str, float, float, float, float | None]]:
    extra = ["--ttft-ms", str(TRUTH["ttft_ms"]), "--tpot-ms", str(TRUTH["tpot_ms"]), "--tokens", str(TRUTH["tokens"])]
    truth = {
        "ttft_ms": TRUTH["ttft_ms"],
        "tpot_ms": TRUTH["tpot_ms"],
        "e2e_ms": TRUTH["ttft_ms"] + (TRUTH["tokens"] - 1) * TRUTH["tpot_ms"],
    }
    rows = []
    with noop_server(core, *extra) as url:
        common = dict(
            name="bench-http-fidelity",
            backend="http",
            dataset=f"synthetic:isl=8,osl={TRUTH['tokens']},n=64",
            use_token_latencies=True,
            ttft_latency_ms=2000,
            tpot_latency_ms=100,
        )
        runs = {
            "1 stream": RunConfig(
                **common,
                scenario="SingleStream",
                backend_options={"protocol": "openai-chat", "url": url + "/v1"},
                min_duration_s=1.0,
                min_query_count=5,
                single_stream_expected_latency_ms=2200,
            ),
            "32 streams": RunConfig(
                **common,
                scenario="Offline",
                backend_options={"protocol": "openai-chat", "url": url + "/v1", "max_in_flight": 32, "warmup_requests": 32},
                min_duration_s=0.1,
                min_query_count=32,
                offline_expected_qps=1,
            ),
        }
        for label, config in runs.items():
            tok = runner.run(config, out).summary["tokens"]
            streams = int(label.split()[0])
            minimal = asyncio.run(_minimal_bursts(url, streams, 2)) if streams > 1 else {}
            for key, value in truth.items():
                rows.append((label, key, value, tok[key]["p50"], tok[key]["p50"] / value - 1, minimal.get(key)))
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description="HTTP backend throughput and fidelity")
    p.add_argument("--seconds", type=float, default=8.0, help="length of each throughput measurement")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds of the two Python clients")
    p.add_argument("--guidellm", default="/tmp/guidellm-venv/bin/guidellm", help="guidellm executable (separate venv)")
    p.add_argument("--telemetry", action="store_true", help="only the telemetry on-vs-off rounds")
    p.add_argument("--against", type=Path, help="only: this tree's harness against DIR's (another checkout), interleaved")
    args = p.parse_args()

    cores = sorted(os.sched_getaffinity(0))
    server_core = cores[-1] if len(cores) > 1 else None
    if server_core is not None:
        os.sched_setaffinity(0, {cores[0]})  # every client (and the harness's child) on core 0
    print(f"cores: {len(cores)}; server on core {server_core}, clients on core {cores[0]}; concurrency {CONCURRENCY}")

    if args.against is not None:
        against(server_core, args.against, args.rounds, args.seconds)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
        work = Path(tmp)
        if args.telemetry:
            telemetry_cost(server_core, work, max(args.rounds, 4), int(10_000 * args.seconds))
            return 0
        results: dict[str, float | None] = {}
        notes: dict[str, str] = {}
        with noop_server(server_core) as url:
            # Alternate the two Python clients for a few rounds and keep each one's median:
            # on a shared machine a single pair of runs can differ by 2x from noise alone.
            minimal, harness_rates = [], []
            for _ in range(args.rounds):
                minimal.append(run_minimal(url, args.seconds))
                s = run_harness(url, int(minimal[-1] * args.seconds), work)
                harness_rates.append(s["harness"]["throughput_per_s"])
            results["minimal aiohttp client"] = statistics.median(minimal)
            results["harness (http backend)"] = statistics.median(harness_rates)
            notes["minimal aiohttp client"] = "rounds: " + ", ".join(f"{r:,.0f}" for r in minimal)
            notes["harness (http backend)"] = "rounds: " + ", ".join(f"{r:,.0f}" for r in harness_rates) + (
                f"; last: {s['harness']['succeeded']}/{s['harness']['samples']} ok, LoadGen {s['loadgen']['throughput_per_s']:,.0f}/s"
            )
            exe = args.guidellm if Path(args.guidellm).exists() else shutil.which("guidellm")
            if exe:
                results["GuideLLM"], notes["GuideLLM"] = run_guidellm(exe, url, args.seconds, work)
            else:
                results["GuideLLM"], notes["GuideLLM"] = None, f"not installed ({args.guidellm} missing): not measured"

        ours = results["harness (http backend)"] or 0.0
        print("\nthroughput, streaming chat, 4 tokens, no-op server")
        print(f"  {'client':<26}{'req/s':>10}{'harness / it':>15}  notes")
        for name, rate in results.items():
            ratio = f"{ours / rate:.2f}x" if rate else "—"
            print(f"  {name:<26}{rate if rate is not None else float('nan'):>10,.0f}{ratio:>15}  {notes.get(name, '')}")
        g, m = results.get("GuideLLM"), results["minimal aiohttp client"]
        print(f"  target: >= 2x GuideLLM: {'PASS' if g and ours >= 2 * g else 'FAIL' if g else 'n/a'}; "
              f">= minimal client: {'PASS' if ours >= m else 'FAIL'} ({ours / m:.2f}x)")  # fmt: skip

        print(f"\nfidelity: TTFT {TRUTH['ttft_ms']:g} ms, {TRUTH['tpot_ms']:g} ms/token, {TRUTH['tokens']} tokens")
        print(f"  {'streams':<12}{'figure':<10}{'truth ms':>10}{'p50 ms':>10}{'error':>9}{'minimal client':>16}{'error':>9}")
        worst = 0.0
        for label, key, truth, got, err, minimal in fidelity(server_core, work):
            worst = max(worst, abs(err))
            base = f"{minimal:>16.2f}{(minimal / truth - 1) * 100:>8.2f}%" if minimal is not None else ""
            print(f"  {label:<12}{key:<10}{truth:>10.1f}{got:>10.2f}{err * 100:>8.2f}%{base}")
        print(f"  target: every median within 2 %: {'PASS' if worst <= 0.02 else 'FAIL'} (worst {worst * 100:.2f} %); "
              "the minimal client, same bursts on the same server, shows what the server and machine add")
    return 0


if __name__ == "__main__":
    sys.exit(main())
