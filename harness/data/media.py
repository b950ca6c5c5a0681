"""Images and videos read once, when the dataset loads, into chat content parts (backends.content).

Each file is read, checked and base64-encoded here, so the timed path sends ready bytes:
    an image   is decoded whole with Pillow (a truncated or unreadable file is one line
               naming it and the row), and becomes a data URL of its own bytes, unchanged
    a video    is checked for a known container (by its suffix) and a non-empty body
    a URL      (http, https) is sent as is; the server fetches it, so its size is unknown
Every file is held to `max_media_bytes` (20 MiB by default, OpenAI's limit for an image):
a larger one is one line naming it, the limit and the parameter that raises it.

Synthetic images (`synthetic_image`) are seeded: noise, a gradient or one solid colour.
The content sets the compressed size, not the pixel count: a 512x512 PNG of noise is
~790 kB, of a gradient a few kB, of a solid colour a few hundred bytes.
"""

from __future__ import annotations

import base64
import hashlib
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from backends.content import ImagePart, TextPart, VideoPart, media_parts
from harness.errors import DatasetError

#: the default limit on one media file (OpenAI's on an image); `max_media_bytes=` changes it
MAX_MEDIA_BYTES = 20 * 1024 * 1024
#: video containers by suffix, with the type their data URL carries
VIDEO_TYPES = {".mp4": "video/mp4", ".webm": "video/webm", ".mov": "video/quicktime", ".mkv": "video/x-matroska",
               ".avi": "video/x-msvideo"}
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff")
#: synthetic image content kinds and formats
CONTENTS = ("noise", "gradient", "solid")
FORMATS = {"png": "PNG", "jpeg": "JPEG", "jpg": "JPEG"}
SIZE_NOTE = ("the image content sets the compressed size, not the pixel count: noise barely compresses, "
             "a gradient or a solid colour compresses to little")


def max_bytes_param(params: dict[str, str], spec: str) -> int:
    """The `max_media_bytes` parameter (taken out of `params`), or the default."""
    raw = params.pop("max_media_bytes", None)
    if raw is None:
        return MAX_MEDIA_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise DatasetError(f"dataset spec {spec!r}: max_media_bytes must be a positive integer (bytes), got {raw!r}")
    return value


def _too_big(where: str, what: str, size: int, limit: int) -> DatasetError:
    return DatasetError(f"{where}: {what} is {size:,} bytes, over max_media_bytes {limit:,}: "
                        "use a smaller file or raise the limit (max_media_bytes=N in the dataset spec)")


def image_from_bytes(data: bytes, source: str, where: str, limit: int) -> ImagePart:
    """An encoded image's bytes as a part: decoded whole (so a truncated file fails here, not
    at the server), sent as a data URL of the same bytes."""
    if len(data) > limit:
        raise _too_big(where, f"image {source}", len(data), limit)
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()  # decodes every pixel: a truncated file raises here
            fmt, size = img.format or "", img.size
            mime = Image.MIME.get(fmt, "")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        raise DatasetError(f"{where}: image {source} cannot be decoded ({e}): "
                           "replace the file with a whole PNG, JPEG, WebP or GIF") from e
    if not mime:
        raise DatasetError(f"{where}: image {source} is {fmt or 'of no known format'}, which has no MIME type "
                           "a chat API takes: convert it to PNG or JPEG")
    url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
    return ImagePart(url, source, len(data), size[0], size[1], fmt.lower(), hashlib.sha256(data).hexdigest())


def read_file(path: Path, where: str, what: str, limit: int) -> bytes:
    """A media file's bytes, its size checked against `limit` before it is read."""
    try:
        size = path.stat().st_size
        if size > limit:
            raise _too_big(where, f"{what} {path}", size, limit)
        return path.read_bytes()
    except OSError as e:
        raise DatasetError(f"{where}: cannot read {what} {path}: {e.strerror or e}") from e


def image_part(ref: str, base: Path, where: str, limit: int) -> ImagePart:
    """An image named in a dataset: an http(s) URL, kept; a data URL, checked; else a path
    relative to `base` (the dataset file's folder)."""
    if ref.startswith(("http://", "https://")):
        return ImagePart(ref, ref)
    if ref.startswith("data:"):
        head, comma, payload = ref.partition(",")
        if not comma or not head.endswith(";base64"):
            raise DatasetError(f"{where}: an image data URL must be data:TYPE;base64,... (got {ref[:40]!r})")
        try:
            data = base64.b64decode(payload, validate=True)
        except ValueError as e:
            raise DatasetError(f"{where}: an image data URL's base64 is invalid ({e})") from e
        part = image_from_bytes(data, "(data URL)", where, limit)
        return ImagePart(ref, part.source, part.nbytes, part.width, part.height, part.format, part.sha256)
    path = base / ref
    return image_from_bytes(read_file(path, where, "image", limit), str(path), where, limit)


def video_part(ref: str, base: Path, where: str, limit: int) -> VideoPart:
    """A video named in a dataset: an http(s) URL, kept; else a file of a known container."""
    if ref.startswith(("http://", "https://", "data:video/")):
        return VideoPart(ref, ref[:60])
    path = base / ref
    mime = VIDEO_TYPES.get(path.suffix.lower())
    if mime is None:
        raise DatasetError(f"{where}: video {path}: unknown container {path.suffix or '(no suffix)'!r}; "
                           f"use one of {', '.join(VIDEO_TYPES)}")
    data = read_file(path, where, "video", limit)
    if not data:
        raise DatasetError(f"{where}: video {path} is empty")
    return VideoPart(f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}", str(path), len(data),
                     path.suffix.lower().lstrip("."), hashlib.sha256(data).hexdigest())


def user_content(text: str | None, media: Iterable[ImagePart | VideoPart]) -> tuple[Any, ...]:
    """A user turn's parts: its text first, then its media, as OpenAI's examples order them."""
    return (*((TextPart(text),) if text else ()), *media)


# --- synthetic images ----------------------------------------------------------------------


def synthetic_image(width: int, height: int, fmt: str, content: str, rng: np.random.Generator,
                    quality: int = 90) -> bytes:
    """One seeded image, encoded. `content` sets how well it compresses (SIZE_NOTE)."""
    from PIL import Image

    if content == "noise":
        pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    elif content == "gradient":  # a diagonal ramp, its colours drawn from the seed
        a, b = rng.integers(0, 256, size=(2, 3))
        t = (np.add.outer(np.arange(height), np.arange(width)) / max(1, width + height - 2))[..., None]
        pixels = (a + (b - a) * t).astype(np.uint8)
    else:
        pixels = np.broadcast_to(rng.integers(0, 256, size=3, dtype=np.uint8), (height, width, 3))
    out = io.BytesIO()
    kind = FORMATS[fmt]
    Image.fromarray(np.ascontiguousarray(pixels), "RGB").save(out, kind, **({"quality": quality} if kind == "JPEG" else {}))
    return out.getvalue()


# --- what a dataset's media add up to (its describe()) ---------------------------------------


def media_description(messages_per_sample: Iterable[Any]) -> dict[str, Any] | None:
    """Images and videos per request, their bytes (before base64) and the sizes seen; None
    when no sample has any."""
    images: list[int] = []
    videos: list[int] = []
    nbytes: list[int] = []
    sizes: set[tuple[int, int]] = set()
    formats: set[str] = set()
    urls = 0
    for messages in messages_per_sample:
        parts = media_parts(messages)
        images.append(sum(isinstance(p, ImagePart) for p in parts))
        videos.append(sum(isinstance(p, VideoPart) for p in parts))
        nbytes.append(sum(p.nbytes for p in parts))
        for p in parts:
            if isinstance(p, ImagePart) and p.width:
                sizes.add((p.width, p.height))
            if p.format:
                formats.add(p.format)
            urls += not p.nbytes
    if not any(images) and not any(videos):
        return None
    return {
        "samples_with_media": sum(1 for i, v in zip(images, videos) if i or v),
        "images": sum(images),
        "videos": sum(videos),
        "images_per_request": {"mean": float(np.mean(images)), "min": min(images), "max": max(images)},
        "media_bytes_per_request": {"mean": float(np.mean(nbytes)), "min": min(nbytes), "max": max(nbytes)},
        "image_sizes": [f"{w}x{h}" for w, h in sorted(sizes)][:8],
        "formats": sorted(formats),
        "by_url": urls,  # fetched by the server: their bytes are not in the request
    }
