"""A run with images or videos in the reports: one table from summary.json's `media`
(harness.results.media), each figure's p50, p99 and max in a row, and the notes that say
where the input tokens come from and what sets a synthetic image's size."""

from __future__ import annotations

from typing import Any

from harness.report.figures import Table


def _bytes(v: float | None) -> str:
    if v is None:
        return "-"
    for unit, size in (("MB", 1e6), ("kB", 1e3)):
        if v >= size:
            return f"{v / size:,.2f} {unit}"
    return f"{v:,.0f} B"


def _count(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}" if float(v).is_integer() else f"{v:,.1f}"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.2f}"


def media_table(section: dict[str, Any]) -> Table:
    """Per request: images (and videos), media bytes, body bytes, upload time, input tokens."""
    rows: list[list[str]] = []

    def row(label: str, dist: dict[str, Any] | None, fmt: Any) -> None:
        if dist is not None and dist.get("p50") is not None:
            rows.append([label, fmt(dist["p50"]), fmt(dist["p99"]), fmt(dist["max"])])

    row("images / request", section["images_per_request"], _count)
    row("videos / request", section.get("videos_per_request"), _count)
    row("media bytes / request", section["media_bytes_per_request"], _bytes)
    row("request body", section["request_bytes"], _bytes)
    row("upload (ms)", section["upload_ms"], _ms)
    row("call to sent (ms)", section.get("call_to_sent_ms"), _ms)
    tokens = section["input_tokens"]
    row("input tokens", tokens["total"], _count)
    row("image tokens (of input)", tokens.get("image"), _count)
    row("text tokens (of input)", tokens.get("text"), _count)
    return ["per request", "p50", "p99", "max"], rows


def media_lines(section: dict[str, Any]) -> list[str]:
    """Sentences beside the table: the requests, the upload rate, the tokens' source, the
    synthetic set and what sets its size."""
    timed = section.get("upload_mb_per_s")
    lines = [f"{section['requests']:,} of {section['requests_answered']:,} answered requests with media succeeded; "
             + (f"upload {timed:,.0f} MB/s" if timed is not None else "upload not timed")]
    lines.append(f"input tokens: {section['input_tokens']['source']}")
    synthetic = section.get("synthetic")
    if synthetic:
        fmt = synthetic.get("format")
        if synthetic.get("quality"):
            fmt = f"{fmt} q{synthetic['quality']}"
        lines.append(f"synthetic images: {synthetic.get('image_size')} {fmt}, {synthetic.get('content')}, "
                     f"{synthetic.get('images_per_request')} per request")
    if section.get("note"):  # the summary's sentence, in words that fit a terminal line
        lines.append("the content sets the compressed size, not the pixel count")
    held = section.get("dataset") or {}
    if held.get("by_url"):
        lines.append(f"{held['by_url']:,} sent as URLs: fetched by the server, not in the body")
    return lines
