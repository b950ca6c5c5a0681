"""summary.json's `transcription`: how fast a speech-to-text run turned audio into text.

Per successful request, from tokens.jsonl (`audio_seconds`, the dataset's length of the file
sent) joined on query_id with records.parquet (its dispatch and completion stamps):

    processing s         completion - dispatch: the request's time at the server and on the
                         wire, without the harness's own queue (AIPerf's request latency)
    RTFx                 audio seconds / processing seconds (AIPerf's definition): per
                         request (p50, p10 the slow tail, mean) and aggregate, total audio
                         over total processing (a request's weight is its length)
    throughput RTFx      total audio / the run's duration: audio transcribed per second of
                         wall time, all requests together (what a fleet plans on)
    latency per audio s  processing seconds / audio seconds (p50, p99): the inverse of
                         RTFx per request, in the unit a latency budget is read in
    TTFT                 first delta - dispatch, for streamed transcripts only (a whole
                         answer's first token is its end)
    output tokens/s      the server's token count (its usage) over the run's duration, only
                         when every successful request had one

Every figure is a plain Python number; None where the run has no such figure.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from harness.results.stats import distribution, percentile


def _percentile(values: np.ndarray, q: float) -> float:
    """LoadGen's rule, as every percentile of the summary."""
    return percentile(np.sort(values), q)


def transcription_section(rec: Any, entries: list[dict[str, Any]], duration_s: float | None,
                          streamed: bool) -> dict[str, Any] | None:
    """The section, or None when no request carried audio (not a speech run)."""
    audio = {e["query_id"]: e for e in entries if isinstance(e.get("audio_seconds"), (int, float))}
    if not audio or rec is None or not len(rec):
        return None
    cols = rec.columns
    qids = np.asarray(cols["query_id"])
    ok = np.asarray(cols["status"]) == "ok"
    dispatch, complete, first = (np.asarray(cols[k], dtype=np.int64) for k in ("dispatch_ns", "complete_ns", "first_token_ns"))
    seconds, processing, ttft, tokens = [], [], [], []
    for i in np.flatnonzero(ok):
        entry = audio.get(int(qids[i]))
        if entry is None:
            continue
        seconds.append(float(entry["audio_seconds"]))
        processing.append((int(complete[i]) - int(dispatch[i])) / 1e9)
        if streamed and first[i]:
            ttft.append((int(first[i]) - int(dispatch[i])) / 1e6)
        tokens.append(entry.get("server_tokens"))
    requests = len(audio)
    if not seconds:
        return {"requests": requests, "succeeded": 0, "audio_seconds": 0.0, "rtfx": None}
    s, p = np.asarray(seconds), np.asarray(processing)
    per_request = s / np.maximum(p, 1e-9)
    per_audio_s = p / np.maximum(s, 1e-9)
    total_audio = math.fsum(seconds)
    server_tokens = [t for t in tokens if isinstance(t, int)]
    all_counted = len(server_tokens) == len(tokens)
    return {
        "requests": requests,
        "succeeded": len(seconds),
        "audio_seconds": total_audio,
        "audio_seconds_per_request": distribution(s),
        "processing_s": math.fsum(processing),
        "rtfx": total_audio / math.fsum(processing) if math.fsum(processing) > 0 else None,
        "rtfx_per_request": {"p50": _percentile(per_request, 50), "p10": _percentile(per_request, 10),
                             "mean": float(per_request.mean())},
        "throughput_rtfx": total_audio / duration_s if duration_s else None,
        "latency_per_audio_s": {"p50": _percentile(per_audio_s, 50), "p99": _percentile(per_audio_s, 99)},
        "streamed": streamed,
        "ttft_ms": distribution(np.asarray(ttft)) if ttft else None,
        "output_tokens_per_s": (sum(server_tokens) / duration_s) if all_counted and duration_s else None,
        "server_audio_seconds": math.fsum(e["server_audio_seconds"] for e in audio.values()
                                          if isinstance(e.get("server_audio_seconds"), (int, float))) or None,
    }
