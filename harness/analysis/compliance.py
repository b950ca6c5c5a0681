"""A submission's compliance folders (closed division): TEST01, TEST04, TEST06 beside each result.

    <Scenario>/TEST01/verify_accuracy.txt  verify_performance.txt  performance/run_1/{summary, detail}
    <Scenario>/TEST04/verify_performance.txt  performance/run_1/{summary, detail}
    <Scenario>/TEST06/verify_accuracy.txt  accuracy/mlperf_log_accuracy.json

The audit runs come from `harness audit` folders (harness.run.audit). The verify files are
judged here at export time, as MLCommons' compliance scripts judge them
(compliance/TEST01/verify_performance.py, verify_accuracy.py, compliance/TEST04/
verify_performance.py): against the performance and accuracy runs being submitted, with
their thresholds, and with their "TEST PASS" / "TEST FAIL" lines, which the checker reads.

- TEST01 performance: the audit's score within ±10 % of the submitted run's (±20 % for a
  SingleStream early-stopping latency under 0.2 ms or MultiStream under 1.6 ms); both
  VALID. Scores: Offline samples/s, Server completed samples/s, SingleStream/MultiStream
  LoadGen's early-stopping latency estimate.
- TEST01 accuracy: every output the audit run logged, for a sample the accuracy run also
  answered, has the accuracy run's first value (the script compares element 0); at least
  one such sample.
- TEST04 performance: one-sided, the audit (one sample repeated) scores under the
  submitted run's x (1 + t), t = 10 %, and 20 % for SingleStream/MultiStream (their score
  is 1e9 / the latency in ns, always under the scripts' 200,000 / 1,600,000 cut); both VALID.
- TEST06 (LLMs): the audit run's logged answers, first token, EOS and length
  (`verify_test06`, compliance/TEST06/run_verification.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.analysis.run_data import RunData, load_run
from harness.data.benchmarks import DEFAULT_EOS_TOKEN_ID, find
from harness.errors import OutputError
from harness.results import folder
from harness.results.loadgen_log import read_accuracy_log

AUDIT_JSON = "audit.json"
# the score each script reads, per scenario
_SCORE = {"Offline": "samples/s", "Server": "completed samples/s", "SingleStream": "early-stopping latency (ns)",
          "MultiStream": "early-stopping latency (ns)"}


@dataclass
class Audit:
    test: str
    folder: Path  # the `harness audit` folder
    run: RunData  # the run made with audit.config

    @property
    def key(self) -> tuple[str, str]:
        return self.run.config["benchmark"], self.run.config["scenario"]


def is_audit_folder(path: Path) -> bool:
    return (path / AUDIT_JSON).is_file()


def load_audit(path: Path) -> Audit:
    data = json.loads((path / AUDIT_JSON).read_text())
    runs = sorted(p for p in (path / "audit").iterdir() if (p / folder.RUN_CONFIG).is_file())
    if len(runs) > 1:
        # TEST04's rounds: the round audit.json judged by (its median) stands for the audit.
        # By name, not path: the folder may have moved since.
        named = Path(str((data.get("figures") or {}).get("audit_run", ""))).name
        runs = [p for p in runs if p.name == named]
    if len(runs) != 1:
        raise OutputError(f"{path}: expected one run under audit/ (or the one audit.json names), found {len(runs)}: "
                          "pass a `harness audit` folder as it was written")
    return Audit(str(data["test"]), path, load_run(runs[0]))


def _score(run: RunData) -> float | None:
    lg = run.summary.get("loadgen") or {}
    scenario = run.config["scenario"]
    if scenario in ("Offline", "Server"):
        return lg.get("throughput_per_s")
    early = (lg.get("early_stopping_latency_ms") or {}).get("single_stream" if scenario == "SingleStream" else "multi_stream")
    return early * 1e6 if early else None  # ns, as the scripts read it


def _valid(run: RunData) -> bool:
    return run.summary["validity"]["result"] == "VALID"


def verify_performance(test: str, submitted: RunData, audit: RunData) -> tuple[bool, str]:
    """(passed, verify_performance.txt) in the scripts' terms."""
    scenario = submitted.config["scenario"]
    lines = ["Verifying performance.", f"(harness submission: {test} as compliance/{test}/verify_performance.py judges it)"]
    for label, run in (("Reference", submitted), ("Test", audit)):
        if not _valid(run):
            return False, "\n".join([*lines, f"TEST FAIL: {label.lower()} results are invalid ({run.run_dir.name})"]) + "\n"
    if audit.config["scenario"] != scenario:
        return False, "\n".join([*lines, "TEST FAIL: Test and reference scenarios do not match!"]) + "\n"
    ref, got = _score(submitted), _score(audit)
    if ref is None or got is None:
        return False, "\n".join([*lines, f"TEST FAIL: no {_SCORE[scenario]} in a run"]) + "\n"
    latency = scenario in ("SingleStream", "MultiStream")
    if test == "TEST01":
        threshold = 0.20 if latency and ref <= (200_000 if scenario == "SingleStream" else 1_600_000) else 0.10
        passed = ref * (1 - threshold) <= got <= ref * (1 + threshold)
    else:  # TEST04: a rate; for latency scenarios 1e9 / latency, always under the cut, so 20 %
        ref, got = (1e9 / ref, 1e9 / got) if latency else (ref, got)
        threshold = 0.20 if latency else 0.10
        passed = got < ref * (1 + threshold)
    lines += [f"reference score = {ref}", f"test score = {got}", f"threshold = {threshold:.2f}",
              "TEST PASS" if passed else "TEST FAIL: Test score invalid"]
    return passed, "\n".join(lines) + "\n"


def verify_accuracy(accuracy_run: RunData, audit: RunData) -> tuple[bool, str]:
    """(passed, verify_accuracy.txt): TEST01's output check, element 0 of each logged output
    against the accuracy run's, by sample index (compliance/TEST01/verify_accuracy.py)."""
    child = folder.read_json(accuracy_run.run_dir, folder.CHILD) or {}
    dtype = np.dtype((child.get("response_format") or {}).get("dtype") or "uint8")
    reference: dict[int, str] = {}
    for entry in read_accuracy_log(accuracy_run.run_dir):
        reference.setdefault(int(entry["qsl_idx"]), entry["data"])
    logged = read_accuracy_log(audit.run_dir)
    matched = mismatched = missing = 0
    for entry in logged:
        want = reference.get(int(entry["qsl_idx"]))
        if want is None:
            missing += 1
            continue
        matched += 1
        a, b = np.frombuffer(bytes.fromhex(entry["data"]), dtype), np.frombuffer(bytes.fromhex(want), dtype)
        if ((a.size == 0 or b.size == 0) and a.size != b.size) or (a.size and b.size and a[0] != b[0]):
            mismatched += 1
    passed = mismatched == 0 and matched > 0
    lines = ["(harness submission: TEST01 as compliance/TEST01/verify_accuracy.py judges it, dtype " + dtype.name + ")",
             f"num_acc_log_entries = {len(reference)}", f"num_perf_log_entries = {len(logged)}",
             f"num_perf_log_qsl_idx_match = {matched}", f"num_perf_log_data_mismatch = {mismatched}",
             f"num_missing_qsl_idxs = {missing}", "TEST PASS" if passed else "TEST FAIL"]
    return passed, "\n".join(lines) + "\n"


def eos_token_id_for(benchmark: str) -> tuple[int, str]:
    """(EOS id, where it came from) for a benchmark name, any of its record's names:
    compliance/TEST06/run_verification.py's --eos_token_id is "the EOS token id of the
    tokenizer", default 2 (DEFAULT_EOS_TOKEN_ID); the record holds its tokenizer's."""
    record = find(benchmark)
    if record is not None and record.eos_token_id is not None:
        return record.eos_token_id, f"{record.checker_name}'s tokenizer"
    return DEFAULT_EOS_TOKEN_ID, "run_verification.py's default"


def _ids(hex_data: str, dtype: np.dtype) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(hex_data), dtype=dtype)


def _eos_ok(data: np.ndarray, eos: int) -> bool:
    """eos_check of one sample, as the script walks it: from the last id back, stopping at the
    first that is not EOS, two EOS fail; index 0 is never looked at (`while i > 0`)."""
    i, n = data.shape[0] - 1, 0
    while i > 0:
        if data[i] == eos:
            n += 1
        if n >= 2:
            return False
        if data[i] != eos:
            break
        i -= 1
    return True


def verify_test06(entries: list[dict[str, Any]], scenario: str, eos: int, dtype: str = "int32") -> tuple[bool, dict[str, Any], str]:
    """(passed, figures, verify_accuracy.txt) of TEST06's audit-run accuracy log, as
    compliance/TEST06/run_verification.py judges it (mlcommons/inference b66003e1):

    - first token (not Offline): each entry's `token_data` (what FirstTokenComplete got)
      equals `data` over their common length; an entry without token_data fails (the
      script's "Unexpected error").
    - EOS: no answer ends with two or more EOS ids.
    - sample length: `token_count` (the n_tokens LoadGen got) equals the ids logged.

    The script stops at the first failing sample; the figures count every one. The file
    holds the script's lines, which the checker reads (compliance_check.py, TEST06), then
    one line of how the harness judged."""
    dt = np.dtype(dtype)
    first_bad = eos_bad = len_bad = 0
    offline = scenario == "Offline"
    for e in entries:
        data = _ids(e["data"], dt)
        if not offline:
            token = e.get("token_data")
            first = _ids(token, dt) if isinstance(token, str) else None
            if first is None or any(a != b for a, b in zip(data, first)):
                first_bad += 1
        if not _eos_ok(data, eos):
            eos_bad += 1
        if "token_count" not in e or len(data) != int(e["token_count"]):
            len_bad += 1
    first_ok, eos_ok, len_ok = first_bad == 0, eos_bad == 0, len_bad == 0
    passed = first_ok and eos_ok and len_ok
    figures = {"entries": len(entries), "first_token_mismatches": None if offline else first_bad,
               "eos_repeated": eos_bad, "length_mismatches": len_bad, "eos_token_id": eos, "dtype": dtype}
    lines = [f"First token check pass: {'Skipped' if offline else first_ok}", f"EOS check pass: {eos_ok}",
             f"Sample length check pass: {len_ok}",
             "TEST06 verification complete" if passed else "TEST06 verification failed",
             f"(harness: TEST06 as compliance/TEST06/run_verification.py judges it; {len(entries)} logged entries, "
             f"EOS id {eos}, dtype {dtype}; failing samples: first token {'-' if offline else first_bad}, "
             f"repeated EOS {eos_bad}, length {len_bad})"]
    if not entries:  # the script passes an empty log; nothing was checked, so the harness does not
        passed = False
        lines[3] = "TEST06 verification failed"
        lines.append("(harness: the audit run logged no outputs: nothing to verify)")
    return passed, figures, "\n".join(lines) + "\n"


#: the tests whose verify files are judged here; the checker also runs its performance
#: checks on their audit logs (compliance_check.py performance_check)
JUDGED_HERE = ("TEST01", "TEST04")


def _audit_verdict(audit: Audit) -> tuple[bool, dict[str, Any]]:
    """A test judged by its own `harness audit` (TEST07, TEST09 for gpt-oss): its
    audit.json's verdict, and the verify files it wrote (verify_accuracy.txt,
    verify_output_len.txt: compliance_check.py dir_exists_check), copied as they are."""
    data = json.loads((audit.folder / AUDIT_JSON).read_text())
    passed = bool(data.get("passed")) and data.get("conclusive", True) is not False
    files: dict[str, Any] = {f"{audit.test}/{p.name}": p for p in sorted(audit.folder.glob("verify_*.txt"))}
    if not files:
        files[f"{audit.test}/verify_accuracy.txt"] = (f"TEST FAIL: {audit.folder.name} holds no verify file "
                                                      f"(the checker reads {audit.test}'s TEST PASS line)\n")
        passed = False
    elif not passed:
        files.setdefault(f"{audit.test}/harness_verdict.txt", f"TEST FAIL: audit.json says passed={data.get('passed')}, "
                                                                f"conclusive={data.get('conclusive', True)}\n")
    return passed, files


def compliance_files(audit: Audit, submitted: RunData, accuracy_run: RunData | None) -> tuple[bool, dict[str, Any]]:
    """(every verify passed, {relative path under <Scenario>/: text or a source Path})."""
    base = audit.test
    if base == "TEST06":  # no performance check: verify_accuracy.txt and the log it judged
        benchmark, scenario = audit.key
        eos = (json.loads((audit.folder / AUDIT_JSON).read_text()).get("figures") or {}).get("eos_token_id")
        eos = eos_token_id_for(benchmark)[0] if eos is None else int(eos)  # the audit's own, as it judged
        passed, _, text = verify_test06(read_accuracy_log(audit.run.run_dir), scenario, eos)
        return passed, {f"{base}/verify_accuracy.txt": text,
                        f"{base}/accuracy/{folder.LOADGEN_ACCURACY}": audit.run.run_dir / folder.LOADGEN_ACCURACY}
    if base not in JUDGED_HERE:  # TEST07, TEST09: their audit's own verdict and verify files
        return _audit_verdict(audit)
    files: dict[str, Any] = {f"{base}/performance/run_1/{name}": audit.run.run_dir / name
                             for name in (folder.LOADGEN_SUMMARY, folder.LOADGEN_DETAIL)}
    passed, text = verify_performance(audit.test, submitted, audit.run)
    files[f"{base}/verify_performance.txt"] = text
    if audit.test == "TEST01":
        if accuracy_run is None:
            acc_ok, acc_text = False, "TEST FAIL: no accuracy run to compare the logged outputs with\n"
        else:
            acc_ok, acc_text = verify_accuracy(accuracy_run, audit.run)
        files[f"{base}/verify_accuracy.txt"] = acc_text
        passed = passed and acc_ok
    return passed, files
