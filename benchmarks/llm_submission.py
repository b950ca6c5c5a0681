"""An MLPerf llama3.1-8b submission made end to end, as a user makes one: SmolLM2 on
llama.cpp's OpenAI server, a cnn_eval.json of short made-up articles, every scenario's
performance run, accuracy run and TEST06 audit, `harness submission`, then MLCommons'
checker on the folder. Each command is printed as it runs, with its exit code and time.

    python benchmarks/llm_submission.py --out /tmp/llm-sub --checker /tmp/checker/tools/submission
    python benchmarks/llm_submission.py --out /tmp/llm-dry --duration-s 5 --samples 300 --force   # a dry run

The official figures: 600 s a performance run and the whole 13,368-sample set in each
accuracy run (both the defaults). On 2 cores llama.cpp answered 4.7 samples/s with the whole
Offline query in flight, so each pass over the 13,368 samples takes ~47 min and the whole
run ~5 h (three 13,368-sample Offline passes, three accuracy passes, two 600 s Server runs). --duration-s and --samples make a dry run, which the
harness refuses (600 s rule, set size) unless --force, and marks NOT_FOR_SUBMISSION.

The division is open by default: SmolLM2 is not Llama 3.1 8B, so the closed division's
accuracy target and generated-length window (7,350,880-8,984,408 characters) cannot be met.
Audits are passed to `harness submission` in the closed division only (it refuses them in
the open one); --division closed runs them and shows what the closed rules say.

The checker is mlcommons/inference `tools/submission` at the commit the harness's rules are
read from (b66003e1); pass the folder that holds `submission_checker/` as --checker.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.cnn_small import PROMPT  # noqa: E402  SmolLM2's chat template, written out
from tests.support.server_process import free_port, server_process  # noqa: E402
from tests.support.smollm2_hf import gguf_path  # noqa: E402

SCENARIOS = ("Offline", "Server", "Interactive")
FULL_SET = 13_368  # llama3.1-8b's cnn_eval.json (the checker's dataset size for the benchmark)
SUBJECTS = ["council", "storm", "team", "museum", "river", "market", "school", "bridge", "festival", "harbour"]
EVENTS = ["approved a new budget", "closed for the winter", "won its third title", "reopened after repairs",
          "flooded the lower town", "reported record sales", "hired forty teachers", "opened to traffic",
          "drew large crowds", "welcomed a new ferry"]
SYSTEM = {"system_name": "SmolLM2 on llama.cpp", "system_type": "datacenter", "status": "available",
          "host_processors_per_node": 1, "host_storage_capacity": "64 GB", "host_storage_type": "SSD",
          "host_memory_configuration": "a VM", "host_networking": "loopback", "host_network_card_count": 1,
          "host_networking_topology": "N/A", "cooling": "air", "submitter": "loadgen-harness",
          "division": "open"}


def write_dataset(path: Path, n: int, gguf: Path) -> None:
    """cnn_eval.json's columns (input, tok_input, output) for n short articles: each a
    sentence about a subject and an event, its reference that sentence cut short."""
    import pandas as pd
    from llama_cpp import Llama

    vocab = Llama(model_path=str(gguf), vocab_only=True, verbose=False)
    inputs, ids, refs = [], [], []
    for i in range(n):
        subject, event = SUBJECTS[i % len(SUBJECTS)], EVENTS[(i // len(SUBJECTS)) % len(EVENTS)]
        article = f"On day {i % 28 + 1}, the {subject} {event}, officials said. Residents welcomed the news."
        prompt = PROMPT.format(article)
        inputs.append(prompt)
        ids.append(vocab.tokenize(prompt.encode(), add_bos=True))
        refs.append(f"The {subject} {event}.")
    pd.DataFrame({"input": inputs, "tok_input": ids, "output": refs}).to_json(path)


def harness(*args: str, ok: tuple[int, ...] = (0,)) -> int:
    cmd = [sys.executable, "-m", "harness", *args]
    print(f"$ harness {shlex.join(args)}", flush=True)
    start = time.monotonic()
    rc = subprocess.run(cmd, cwd=ROOT).returncode
    print(f"  -> exit {rc} in {time.monotonic() - start:.0f} s", flush=True)
    if rc not in ok:
        raise SystemExit(f"`harness {args[0]}` exited {rc}")
    return rc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="a new folder for the dataset, runs and submission")
    ap.add_argument("--duration-s", type=float, default=600.0, help="each performance run's min_duration_s")
    ap.add_argument("--samples", type=int, default=FULL_SET, help="rows of the made cnn_eval.json")
    ap.add_argument("--max-tokens", type=int, default=4, help="tokens per answer (LoadGen needs at least 2)")
    ap.add_argument("--server-qps", type=float, default=4.0, help="Server's target_qps")
    ap.add_argument("--interactive-qps", type=float, default=2.0, help="Interactive's target_qps")
    ap.add_argument("--offline-qps", type=float, default=20.0, help="Offline's offline_expected_qps")
    ap.add_argument("--division", choices=("open", "closed"), default="open")
    ap.add_argument("--force", action="store_true", help="write the submission even with rules broken")
    ap.add_argument("--checker", type=Path, help="mlcommons/inference tools/submission, to run its checker")
    a = ap.parse_args()

    a.out.mkdir(parents=True, exist_ok=False)
    gguf = gguf_path()
    data = a.out / "cnn_eval.json"
    write_dataset(data, a.samples, gguf)
    runs = a.out / "runs"
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    server = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--n_threads", "2",
              "--interrupt_requests", "False", "--host", "127.0.0.1", "--port", str(port)]
    folders_before = set()
    with server_process(server, url + "/models", a.out / "llama-server.log", 120):
        common = ["--backend", "http", "--benchmark", "llama3_1-8b", "--dataset", f"mlperf:llama3.1-8b:{data}",
                  "--set", "protocol=openai-completions", "--set", f"url={url}", "--set", f"tokenizer={gguf}",
                  "--set", "temperature=0", "--set", f"max_tokens={a.max_tokens}", "--set", "ignore_eos=true",
                  "--output-dir", str(runs)]
        for scenario in SCENARIOS:
            load = {"Offline": f"offline_expected_qps={a.offline_qps}", "Server": f"target_qps={a.server_qps}",
                    "Interactive": f"target_qps={a.interactive_qps}"}[scenario]
            timing = ["--set", load, "--set", f"min_duration_s={a.duration_s}"]
            if a.samples < FULL_SET:  # a dry run: mlperf.conf's 13,368-sample Offline query would take ~47 min
                timing += ["--set", f"min_query_count={a.samples}"]
            harness("run", *common, "--scenario", scenario, *timing, ok=(0, 1))  # 1: INVALID, which submission names
            harness("run", *common, "--scenario", scenario, "--mode", "AccuracyOnly", "--set", load)
            if a.division == "closed":
                harness("audit", "TEST06", *common, "--scenario", scenario, "--set", load, ok=(0, 1))
        folders_before = {p for p in runs.iterdir() if p.is_dir()}
    import yaml

    desc = a.out / "system.yaml"
    plain_runs = sorted(str(p) for p in folders_before if not p.name.endswith("-TEST06"))
    harness("system-desc", *plain_runs, "-o", str(desc))
    filled = yaml.safe_load(desc.read_text()) or {}
    filled.update({k: v for k, v in SYSTEM.items() if not filled.get(k)})
    filled["division"] = a.division
    # over HTTP the runs name no model file: the weights the server loaded are named here
    filled.setdefault("measurements", {})
    filled["measurements"] = {**(filled["measurements"] or {}), "starting_weights_filename": gguf.name}
    desc.write_text(yaml.safe_dump(filled, sort_keys=False))
    submission = a.out / "submission"
    harness("submission", "--org", "loadgen-harness", "--division", a.division, "--system-desc", str(desc),
            *sorted(map(str, folders_before)), "-o", str(submission), *(["--force"] if a.force else []))
    if a.checker:
        cmd = [sys.executable, "-m", "submission_checker.main", "--input", str(submission), "--version", "v6.1"]
        print(f"$ (cd {a.checker} && {shlex.join(cmd[1:])})", flush=True)
        done = subprocess.run(cmd, cwd=a.checker, capture_output=True, text=True)
        (a.out / "checker.log").write_text(done.stdout + done.stderr)
        for line in (done.stdout + done.stderr).splitlines():
            if any(k in line for k in ("ERROR", "WARNING", "Results=", "SUMMARY", "looks OK")):
                print("  " + line, flush=True)
        print(f"  -> checker exit {done.returncode}; its whole output: {a.out / 'checker.log'}")


if __name__ == "__main__":
    main()
