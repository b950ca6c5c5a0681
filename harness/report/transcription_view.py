"""The report's "speech to text" rows, from summary.json's `transcription`
(harness.results.transcription): RTFx, latency per audio second, TTFT of streamed
transcripts and the server's tokens/s. The transcripts' WER is in the answers' section."""

from __future__ import annotations

from typing import Any

from harness.report.figures import Table, num


def transcription_table(t: dict[str, Any]) -> Table:
    rows: list[list[str]] = [
        ["requests (succeeded)", f"{t['requests']:,} ({t['succeeded']:,})"],
        ["audio transcribed (s)", num(t["audio_seconds"], 2)],
    ]
    if t.get("rtfx") is not None:
        per = t["rtfx_per_request"]
        rows += [
            ["RTFx, total audio / total processing", num(t["rtfx"], 2)],
            ["RTFx per request p50 (p10)", f"{num(per['p50'], 2)} ({num(per['p10'], 2)})"],
            ["throughput RTFx, audio / run time", num(t["throughput_rtfx"], 2)],
            ["processing per audio second p50 (p99)",
             f"{num(t['latency_per_audio_s']['p50'], 3)} s ({num(t['latency_per_audio_s']['p99'], 3)} s)"],
        ]
    if t.get("ttft_ms"):
        rows.append(["TTFT p50 (p99), streamed", f"{num(t['ttft_ms']['p50'])} ms ({num(t['ttft_ms']['p99'])} ms)"])
    if t.get("output_tokens_per_s") is not None:
        rows.append(["output tokens/s (the server's count)", num(t["output_tokens_per_s"], 2)])
    return ["figure", "value"], rows


#: what the figures are, for the page and --details
NOTE = ("RTFx = audio seconds / processing seconds (dispatch to completion, AIPerf's request latency); "
        "above 1: faster than real time")
