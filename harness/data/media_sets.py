"""Prompt sets with images: a folder of images, public sets by their column layout, and
synthetic images. Each file is read and encoded once, here (harness.data.media).

    images:DIR[,prompt=TEXT,images_per_request=1,osl=N,max_media_bytes=B]
            every image of the folder (sorted by name), `images_per_request` to a request,
            each request the text `prompt` ("Describe the image." by default)
    visionarena:PATH[,n=N,seed=S,osl=128,max_media_bytes=B]
            VisionArena-Chat rows (lmarena-ai/VisionArena-Chat as its parquet ships, or
            JSON Lines): the first user turn `conversation[0][0].content` (bench-v0.1's
            `turns`), the images of `images` ({bytes, path} items)
    sharegpt4v:PATH[,image_root=DIR,n=N,seed=S,max_media_bytes=B]
            ShareGPT4V rows (a JSON list): `image` a path under `image_root` (the file's
            folder by default), the first human turn of `conversations` the prompt (its
            `<image>` marker dropped: the image is a part of its own), the first model turn
            the expected output and its word count the max_tokens
    synthetic-images[:n=64,image_size=512,images_per_request=1,format=png,content=noise,
                     quality=90,osl=16,seed=S,prompt=TEXT]
            seeded images: image_size is N (square) or WxH; format png or jpeg; content
            noise, gradient or solid, which sets the compressed size (media.SIZE_NOTE)

A public set is read by a column mapping (`Layout`), so a set of the same shape is one more entry.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.data.jsonl import json_objects
from harness.data.media import (
    CONTENTS,
    FORMATS,
    IMAGE_SUFFIXES,
    SIZE_NOTE,
    image_from_bytes,
    image_part,
    max_bytes_param,
    synthetic_image,
    user_content,
)
from harness.data.prompt_set import Prompt, PromptDataset
from harness.errors import DatasetError

DEFAULT_PROMPT = "Describe the image."


def _int(params: dict[str, str], key: str, default: int | None, spec: str, low: int = 1) -> int | None:
    raw = params.pop(key, None)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if value < low:
        raise DatasetError(f"dataset spec {spec!r}: {key} must be an integer >= {low}, got {raw!r}")
    return value


def _leftover(params: dict[str, str], spec: str) -> None:
    if params:
        raise DatasetError(f"dataset spec {spec!r}: unknown parameter(s) {', '.join(params)}")


def _chat(text: str | None, parts: list[Any], osl: int | None, **kw: Any) -> Prompt:
    return Prompt(None, ({"role": "user", "content": user_content(text, parts)},), osl,
                  target_input_tokens=len((text or "").split()), **kw)


# --- a folder of images ----------------------------------------------------------------------


def load_image_folder(spec: str, path: Path, params: dict[str, str]) -> PromptDataset:
    params = dict(params)
    limit = max_bytes_param(params, spec)
    per = _int(params, "images_per_request", 1, spec)
    osl = _int(params, "osl", None, spec)
    text = params.pop("prompt", DEFAULT_PROMPT)
    _leftover(params, spec)
    if not path.is_dir():
        raise DatasetError(f"image folder {path} does not exist (images:DIR takes a folder of images)")
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise DatasetError(f"image folder {path} holds no image ({', '.join(IMAGE_SUFFIXES)})")
    parts = [image_part(f.name, path, f"{path}", limit) for f in files]
    prompts = [_chat(text, parts[i:i + per], osl) for i in range(0, len(parts), per)]
    return PromptDataset("images", prompts, {"path": str(path), "images_per_request": per, "prompt": text,
                                             "max_media_bytes": limit})


# --- public sets, by their columns -------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where a row keeps what a request needs: each a path of keys and indexes into the row."""

    prompt: tuple[tuple[Any, ...], ...]  # tried in turn (a set's versions name it apart)
    images: str
    answer: tuple[Any, ...] | None = None
    #: cut from the prompt: a placeholder the set's own model expanded into the image
    marker: str = ""


LAYOUTS: dict[str, Layout] = {
    "visionarena": Layout(prompt=(("conversation", 0, 0, "content"), ("turns", 0, 0, "content")), images="images",
                          answer=("conversation", 0, 1, "content")),
    "sharegpt4v": Layout(prompt=(("conversations", 0, "value"),), images="image", answer=("conversations", 1, "value"),
                         marker="<image>"),
}


def _at(row: Any, keys: tuple[Any, ...]) -> Any:
    for k in keys:
        try:
            row = row[k]
        except (KeyError, IndexError, TypeError):
            return None
    return row


def _rows(path: Path) -> list[dict[str, Any]]:
    """A set's rows: parquet (as Hugging Face ships it), a JSON list, or JSON Lines."""
    if not path.is_file():
        raise DatasetError(f"dataset file {path} does not exist")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as e:  # noqa: BLE001 - pyarrow's errors have no common base worth naming
            raise DatasetError(f"{path}: not a readable parquet file ({e})") from e
    if path.suffix == ".jsonl":
        return [obj for _, obj in json_objects(path, lambda row, line: f"{path}:{line}", "a row of the set")]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DatasetError(f"{path}: not a readable JSON file ({e})") from e
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of rows")
    return data


def _image(item: Any, root: Path, where: str, limit: int) -> Any:
    if isinstance(item, str):
        return image_part(item, root, where, limit)
    if isinstance(item, dict) and isinstance(item.get("bytes"), (bytes, bytearray)):
        return image_from_bytes(bytes(item["bytes"]), str(item.get("path") or "(embedded)"), where, limit)
    if isinstance(item, dict) and isinstance(item.get("path"), str):
        return image_part(item["path"], root, where, limit)
    raise DatasetError(f"{where}: an image is {type(item).__name__}; expected a path, a URL or {{bytes, path}}")


def load_layout(kind: str, spec: str, path: Path, params: dict[str, str], seed: int,
                measure: Callable[[str], int] | None) -> PromptDataset:
    layout = LAYOUTS[kind]
    params = dict(params)
    limit = max_bytes_param(params, spec)
    n = _int(params, "n", None, spec)
    s = _int(params, "seed", seed, spec, low=0)
    osl = _int(params, "osl", None, spec)
    root = Path(params.pop("image_root", str(path.parent)))
    _leftover(params, spec)
    rows = list(enumerate(_rows(path)))
    random.Random(s).shuffle(rows)  # seeded: n=100 is a fair sample of the set, not its head
    count = measure or (lambda text: len(text.split()))
    prompts: list[Prompt] = []
    skipped = 0
    for i, row in rows:
        if n is not None and len(prompts) >= n:
            break
        where = f"{path} row {i}"
        text = next((t for keys in layout.prompt if isinstance(t := _at(row, keys), str)), None)
        items = row.get(layout.images) if isinstance(row, dict) else None
        items = [items] if isinstance(items, (str, dict)) else list(items or [])
        if text is None or not items:
            skipped += 1  # a text-only row: not what an image benchmark measures
            continue
        if layout.marker:
            text = text.replace(layout.marker, "").strip()
        answer = _at(row, layout.answer) if layout.answer else None
        answer = answer if isinstance(answer, str) and answer.strip() else None
        parts = [_image(item, root, where, limit) for item in items]
        max_tokens = osl or (max(1, count(answer)) if answer else None)
        prompts.append(_chat(text, parts, max_tokens, expected=answer))
    if not prompts:
        raise DatasetError(f"{path}: no row with a prompt and an image in the {kind} layout "
                           f"(prompt at {' or '.join('.'.join(map(str, k)) for k in layout.prompt)}, images at {layout.images})")
    return PromptDataset(kind, prompts, {"path": str(path), "seed": s, "rows_without_images": skipped,
                                         "image_root": str(root), "max_media_bytes": limit})


# --- synthetic images ---------------------------------------------------------------------------


def _size(raw: str, spec: str) -> tuple[int, int]:
    w, x, h = raw.lower().partition("x")
    try:
        width, height = int(w), int(h if x else w)
    except ValueError:
        width = height = 0
    if not (1 <= width <= 16384 and 1 <= height <= 16384):
        raise DatasetError(f"dataset spec {spec!r}: image_size must be N or WxH, 1 to 16384 pixels, got {raw!r}")
    return width, height


def synthetic_images(spec: str, params: dict[str, str], seed: int) -> PromptDataset:
    params = dict(params)
    n = _int(params, "n", 64, spec)
    width, height = _size(params.pop("image_size", "512"), spec)
    per = _int(params, "images_per_request", 1, spec, low=0)
    osl = _int(params, "osl", 16, spec)
    quality = _int(params, "quality", 90, spec)
    s = _int(params, "seed", seed, spec, low=0)
    fmt = params.pop("format", "png").lower()
    content = params.pop("content", "noise")
    text = params.pop("prompt", DEFAULT_PROMPT)
    _leftover(params, spec)
    if fmt not in FORMATS:
        raise DatasetError(f"dataset spec {spec!r}: format {fmt!r}: use png or jpeg")
    if content not in CONTENTS:
        raise DatasetError(f"dataset spec {spec!r}: content {content!r}: use one of {', '.join(CONTENTS)}")
    prompts = []
    for i in range(n or 0):
        rng = np.random.default_rng([s or 0, i])  # each request's own images: no server cache hit between them
        parts = [image_from_bytes(synthetic_image(width, height, fmt, content, rng, quality or 90),
                                  f"synthetic {i}.{k}", f"synthetic image {i}.{k}", 1 << 62) for k in range(per or 0)]
        prompts.append(_chat(text, parts, osl))
    return PromptDataset("synthetic-images", prompts, {
        "n": n, "image_size": f"{width}x{height}", "width": width, "height": height, "images_per_request": per,
        "format": FORMATS[fmt].lower(), "content": content, "quality": quality if FORMATS[fmt] == "JPEG" else None,
        "seed": s, "prompt": text, "size_note": SIZE_NOTE,
    })
