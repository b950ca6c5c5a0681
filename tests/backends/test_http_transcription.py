"""Speech to text against a real recognizer: the harness's openai-transcriptions protocol, under
LoadGen, against the in-test `/v1/audio/transcriptions` server around PocketSphinx
(tests/support/transcription_server.py), fed espeak-ng speech of known sentences.

The truth is the test's own: the sentences it had said, the files' bytes and lengths, and
the server's log of what it received (sha256, audio seconds it measured), what it answered
and how long it took. WER is whatever the model does with those bytes: the same on two runs,
equal between `harness accuracy` on the folder and the run's summary, and equal to the WER
of the server's own transcripts against the sentences. RTFx is held to the server's stamps.
An AccuracyOnly run logs each transcript to LoadGen as MLPerf's whisper reference does (its
labels, int64), and the WER scored from that log is the same again.
"""

from __future__ import annotations

import array
import hashlib
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from harness.analysis.llm_accuracy_txt import accuracy_lines
from harness.config.run_config import RunConfig
from harness.errors import HarnessError
from harness.results.records import read_records
from harness.results.scoring.wer import score_wer
from harness.results.text_accuracy import score_folder
from harness.run import runner
from tests.support.http_servers import ServerThread
from tests.support.speech import spoken
from tests.support.transcription_server import Heard, Recognizer, transcription_app

SENTENCES = ("The birch canoe slid on the smooth planks.", "Glue the sheet to the dark blue background.",
             "It is easy to tell the depth of a well.", "These days a chicken leg is a rare dish.",
             "Rice is often served in round bowls.", "The juice of lemons makes fine punch.")


@pytest.fixture(scope="module")
def recognizer() -> Recognizer:
    return Recognizer()


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JSONL of espeak-ng WAVs of SENTENCES, each row's text the sentence said."""
    root = tmp_path_factory.mktemp("speech")
    rows = [{"audio": spoken(s, root / f"s{i}.wav").name, "text": s} for i, s in enumerate(SENTENCES)]
    (root / "speech.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root / "speech.jsonl"


def _run(root: Path, url: str, dataset: str, mode: str = "PerformanceOnly", **options: Any) -> tuple[Path, dict[str, Any]]:
    config = RunConfig(backend="http", scenario="Offline", mode=mode, dataset=dataset, offline_expected_qps=1,
                       min_duration_s=0.1, min_query_count=len(SENTENCES),
                       backend_options={"protocol": "openai-transcriptions", "url": url + "/v1", **options})
    outcome = runner.run(config, root)
    return outcome.run_dir, outcome.summary


def _tokens(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "tokens.jsonl").read_text().splitlines()]


def test_wer_and_rtfx_against_the_servers_own_truth(tmp_path, speech, recognizer):
    files = {hashlib.sha256((speech.parent / f"s{i}.wav").read_bytes()).hexdigest(): i for i in range(len(SENTENCES))}
    runs = []
    for attempt in range(2):
        log: list[Heard] = []
        with ServerThread(transcription_app(recognizer, log)) as srv:
            run_dir, summary = _run(tmp_path / f"r{attempt}", srv.url, str(speech))
        runs.append((run_dir, summary, log))
        # the exact bytes of the dataset's files arrived, encoded before the test, each file once a query
        assert all(h.sha256 in files for h in log)  # the warm-up (log[0]) sends sample 0's bytes
        assert sorted(files[h.sha256] for h in log[1:]) == sorted(e["sample_index"] for e in _tokens(run_dir))
        assert summary["harness"]["failed"] == 0
        # what the harness recorded is what the server answered, and WER is that against the sentences
        by_file = {files[h.sha256]: h for h in log}
        entries = _tokens(run_dir)
        assert {e["sample_index"]: e["text"] for e in entries} == {i: by_file[i].text for i in by_file}
        truth = score_wer([by_file[e["sample_index"]].text for e in entries],
                          [SENTENCES[e["sample_index"]] for e in entries])
        wer = summary["text_accuracy"]["wer"]
        assert wer["wer"] == pytest.approx(truth.wer, abs=1e-12) and wer["samples"] == len(entries)
        assert wer["ci95"][0] <= wer["wer"] <= wer["ci95"][1]
        # `harness accuracy` on the folder gives the summary's figures
        assert score_folder(run_dir)["wer"] == wer
        # audio seconds: the dataset's, equal to what the server measured from the bytes it got
        t = summary["transcription"]
        heard_s = sum(by_file[e["sample_index"]].seconds for e in entries)
        assert t["audio_seconds"] == pytest.approx(heard_s, rel=1e-9)
        # RTFx: the records' processing time is never under the server's own, per request
        rec = read_records(run_dir).columns
        processing = {int(q): (int(c) - int(d)) for q, c, d in zip(rec["query_id"], rec["complete_ns"], rec["dispatch_ns"])}
        server_ns = sorted(h.processing_ns for h in log[1:])  # the warm-up request first
        harness_ns = sorted(processing.values())
        assert all(h >= s for h, s in zip(harness_ns, server_ns))
        assert t["rtfx"] == pytest.approx(heard_s / (sum(harness_ns) / 1e9), rel=1e-9)
        assert t["rtfx"] <= heard_s / (sum(server_ns) / 1e9)  # the server's own RTFx bounds it
        assert t["latency_per_audio_s"]["p50"] > 0 and t["ttft_ms"] is None  # whole answers: no TTFT
        # the server reported its words as tokens: tokens/s exists
        assert t["output_tokens_per_s"] == pytest.approx(
            sum(len(by_file[e["sample_index"]].text.split()) for e in entries) / summary["harness"]["duration_s"])
        # summary.json's schema has the new sections
        schema = json.loads((Path(__file__).parents[2] / "docs" / "summary.schema.json").read_text())
        jsonschema.Draft202012Validator(schema).validate(summary)
    (_, one, _), (_, two, _) = runs
    assert one["text_accuracy"]["wer"]["wer"] == two["text_accuracy"]["wer"]["wer"]  # the same model, the same bytes
    # accuracy mode: LoadGen's accuracy log holds each transcript as MLPerf's whisper reference
    # SUT logs it, and the WER scored from that log is the server's, and the performance run's
    log = []
    with ServerThread(transcription_app(recognizer, log)) as srv:
        run_dir, acc = _run(tmp_path / "accuracy", srv.url, str(speech), mode="AccuracyOnly")
    by_file = {files[h.sha256]: h for h in log}
    entries = json.loads((run_dir / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == list(range(len(SENTENCES)))
    # accuracy_eval.py's reading: array('q', bytes.fromhex(data)), each index one of its labels
    eval_labels = " abcdefghijklmnopqrstuvwxyz'0123456789$¢£€%+-"
    decoded = {e["qsl_idx"]: "".join(eval_labels[i] for i in array.array("q", bytes.fromhex(e["data"])))
               for e in entries}
    assert decoded == {i: "".join(c for c in by_file[i].text.lower().strip() if c in eval_labels[:28]) for i in decoded}
    wer = acc["text_accuracy"]["wer"]
    assert acc["text_accuracy"]["source"] == "mlperf_log_accuracy.json" and wer["samples"] == len(SENTENCES)
    truth = score_wer([by_file[i].text for i in range(len(SENTENCES))], list(SENTENCES))
    assert wer["wer"] == pytest.approx(truth.wer, abs=1e-12) == one["text_accuracy"]["wer"]["wer"]
    assert score_folder(run_dir)["wer"] == wer
    print(f"WER {one['text_accuracy']['wer']['wer']:.2f}% (CI {one['text_accuracy']['wer']['ci95']}), "
          f"RTFx {one['transcription']['rtfx']:.2f}, throughput RTFx {one['transcription']['throughput_rtfx']:.2f}")


def test_streamed_transcripts_have_a_first_token_before_their_end(tmp_path, speech, recognizer):
    log: list[Heard] = []
    with ServerThread(transcription_app(recognizer, log)) as srv:
        run_dir, summary = _run(tmp_path, srv.url, str(speech), stream=True)
    assert all(h.fields.get("stream") == "true" for h in log)
    t = summary["transcription"]
    assert t["streamed"] and t["ttft_ms"]["max"] <= max(
        (int(c) - int(d)) / 1e6 for c, d in zip(read_records(run_dir).columns["complete_ns"], read_records(run_dir).columns["dispatch_ns"]))
    # the deltas' words are the server's usage count: one token a word
    entries = _tokens(run_dir)
    assert all(e["n"] == len(e["text"].split()) and e["source"] == "usage" for e in entries)
    assert summary["text_accuracy"]["wer"]["samples"] == len(entries)


def test_a_server_that_refuses_multipart_fails_each_request_by_its_reason(tmp_path, speech, recognizer):
    with ServerThread(transcription_app(recognizer, [], refuse_multipart=True)) as srv:
        with pytest.raises(HarnessError) as e:  # the warm-up's failure stops the run, with the server's words
            _run(tmp_path, srv.url, str(speech), warmup_requests=0 + 1)
    assert "415" in str(e.value) and "\n" not in str(e.value).strip()


def test_a_refused_request_under_load_is_counted_by_its_reason(tmp_path, speech, recognizer):
    with ServerThread(transcription_app(recognizer, [], refuse_multipart=True)) as srv:
        run_dir, summary = _run(tmp_path, srv.url, str(speech), warmup_requests=0)
    ours = summary["harness"]
    assert ours["failed"] == ours["samples"] and set(ours["failures_by_reason"]) == {"http_415"}
    # every failed transcript is scored, as an empty one: all words deleted
    assert summary["text_accuracy"]["wer"]["wer"] == 100.0


def test_whisper_shaped_offline_run(tmp_path, recognizer):
    """MLPerf's whisper record, Offline, on its reference's dataset layout (a repackaged
    manifest and its WAVs, made here with espeak-ng): tokens/s as the checker reads it."""
    data = tmp_path / "data"
    (data / "dev-all-repack").mkdir(parents=True)
    manifest = []
    for i, s in enumerate(SENTENCES[:4]):
        wav = spoken(s, data / "dev-all-repack" / f"1272-128104_{i}.wav")
        from harness.data.audio import read_clip

        seconds = read_clip(wav, "", 25).sample.seconds
        manifest.append({"transcript": s.lower(), "files": [{"fname": f"dev-all-repack/{wav.name}", "speed": 1,
                                                             "duration": seconds}], "original_duration": seconds})
    (data / "dev-all-repack.json").write_text(json.dumps(manifest))
    with ServerThread(transcription_app(recognizer, [])) as srv:
        config = RunConfig(backend="http", scenario="Offline", benchmark="whisper",
                           dataset=f"mlperf:whisper:{data / 'dev-all-repack.json'}", offline_expected_qps=1,
                           min_duration_s=0.1, min_query_count=4,
                           backend_options={"protocol": "openai-transcriptions", "url": srv.url + "/v1"})
        outcome = runner.run(config, tmp_path / "results")
    s = outcome.summary
    # the record's accuracy run: accuracy.txt's line is accuracy_eval.py's, scored from LoadGen's log
    with ServerThread(transcription_app(recognizer, [])) as srv:
        accuracy = runner.run(config.model_copy(update={"mode": "AccuracyOnly", "backend_options": {
            "protocol": "openai-transcriptions", "url": srv.url + "/v1"}}), tmp_path / "accuracy").summary
    w = accuracy["text_accuracy"]["wer"]
    assert accuracy["text_accuracy"]["source"] == "mlperf_log_accuracy.json" and w["samples"] == 4
    assert w["wer"] == s["text_accuracy"]["wer"]["wer"]  # the same transcripts, under load or not
    assert accuracy_lines(accuracy["text_accuracy"], "whisper") == [
        f"Word Error Rate: {float(w['wer'])}%, accuracy={float(w['accuracy'])}%"]
    # mlperf.conf's whisper entries, in effect: token latencies on, equal issue, its sample count
    assert RunConfig(benchmark="whisper").use_token_latencies is True
    effective = s["loadgen"]["effective_settings"]
    assert effective["sample_concatenate_permutation"] is True and effective["performance_sample_count"] == 1633
    wer = s["text_accuracy"]["wer"]
    assert wer["rules"].startswith("MLPerf whisper") and wer["accuracy"] == pytest.approx(100 - wer["wer"])
    assert score_folder(outcome.run_dir)["wer"] == wer
    # the checker's Offline figure, result_tokens_per_second: the server's token counts over
    # LoadGen's one query (its latency is the run's length in Offline)
    tokens = sum(e["n"] for e in _tokens(outcome.run_dir))
    lg_tps = s["tokens"]["loadgen"]["output_tokens_per_s"]
    assert tokens > 0 and lg_tps == pytest.approx(tokens / (s["loadgen"]["latency_ms"]["max"] / 1e3), rel=1e-4)
    print(f"whisper-shaped: WER {wer['wer']:.2f}%, accuracy {wer['accuracy']:.2f}, result_tokens_per_second {lg_tps}")
