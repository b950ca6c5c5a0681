"""summary.json's `media`: what a run with images or videos sent, and what the server counted.

Read from the folder alone: tokens.jsonl's per-request `metrics` (the http backend keeps,
for each request that carried media, its images, videos, media bytes before base64, the
request body's bytes and its upload time: until the body's last byte left the client for
the kernel, from its first byte's write; `call_to_sent_ms` from
the request call, a wait for a pooled connection included) and `input_tokens`/`input_source`/`image_tokens`;
child.json's dataset description (what the dataset held, and a synthetic set's settings).

Input tokens are the server's (usage.prompt_tokens) where it reported them. Text and image
tokens are split only where the server gave the split (prompt_tokens_details.image_tokens);
otherwise the figure is the server's total, and says so. Only successful requests count,
as everywhere in the harness's figures.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.results.stats import distribution

#: the percentiles shown for sizes and upload times (the latency list would be noise here)
_PCT = (50, 90, 99)


def _dist(values: list[float]) -> dict[str, float | None]:
    return distribution(np.asarray(values, dtype=np.float64), percentiles=_PCT)


def media_summary(token_entries: list[dict[str, Any]], child: dict[str, Any]) -> dict[str, Any] | None:
    """The section, or None when no request carried media."""
    dataset = child.get("dataset") or {}
    held = dataset.get("media")
    sent = [e for e in token_entries if isinstance(e.get("metrics"), dict) and "request_bytes" in e["metrics"]]
    if held is None and not sent:
        return None
    ok = [e for e in sent if e.get("status") == "ok"]
    m = [e["metrics"] for e in ok]
    uploads = [x["upload_ms"] for x in m if isinstance(x.get("upload_ms"), (int, float))]
    upload_bytes = sum(x["request_bytes"] for x in m if isinstance(x.get("upload_ms"), (int, float)))
    server = [e for e in ok if e.get("input_source") == "usage"]
    split = [e for e in server if isinstance(e.get("image_tokens"), int)]
    if split and len(split) == len(ok):
        source = "server split"
    elif server and len(server) == len(ok):
        source = "server total"
    elif server:
        source = f"server total for {len(server)} of {len(ok)}; the others the client's count"
    else:
        source = "client (the server reported no usage): text only, the media's tokens are not in it"
    out: dict[str, Any] = {
        "requests": len(ok),
        "requests_answered": len(sent),  # answered 2xx: their bytes and upload were recorded
        "images_per_request": _dist([x.get("images", 0) for x in m]),
        "videos_per_request": _dist([x.get("videos", 0) for x in m]) if any(x.get("videos") for x in m) else None,
        "media_bytes_per_request": _dist([x.get("media_bytes", 0) for x in m]),
        "request_bytes": _dist([x["request_bytes"] for x in m]),
        "upload_ms": _dist(uploads),
        # from the request call: the wait for a pooled connection (or a connect) included
        "call_to_sent_ms": _dist([x["call_to_sent_ms"] for x in m if isinstance(x.get("call_to_sent_ms"), (int, float))]),
        # bytes over time summed, not a mean of rates: a few tiny bodies would dominate that
        "upload_mb_per_s": upload_bytes / 1e6 / (sum(uploads) / 1e3) if uploads and sum(uploads) > 0 else None,
        "uploads_timed": len(uploads),
        "input_tokens": {
            "source": source,
            "total": _dist([e.get("input_tokens") or 0 for e in ok]),
            "image": _dist([e["image_tokens"] for e in split]) if split else None,
            "text": _dist([(e.get("input_tokens") or 0) - e["image_tokens"] for e in split]) if split else None,
        },
        "dataset": held,
        "synthetic": {k: dataset.get(k) for k in ("image_size", "images_per_request", "format", "content", "quality")}
        if dataset.get("kind") == "synthetic-images" else None,
        "note": dataset.get("size_note"),
    }
    return out
