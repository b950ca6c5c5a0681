"""Prompt sets with images (harness.data.media, media_sets): each file read, checked and
encoded once, into content parts whose bytes are the file's own; bad input is one line
naming the file and the row."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from backends.content import ImagePart, TextPart, VideoPart, media_parts, wire_messages
from harness.data.media import SIZE_NOTE
from harness.data.prompts import build_prompt_dataset
from harness.errors import DatasetError

pytestmark = pytest.mark.parallel


def _png(path: Path, w: int, h: int, seed: int = 0) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels, "RGB").save(path, "PNG")
    return path.read_bytes()


def _rows(path: Path, *rows: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _decoded(part: ImagePart) -> bytes:
    return base64.b64decode(part.url.partition(",")[2])


def test_jsonl_images_and_video_become_parts_holding_the_files_bytes(tmp_path):
    a = _png(tmp_path / "img" / "a.png", 64, 48)
    b = _png(tmp_path / "img" / "b.png", 20, 10, seed=1)
    (tmp_path / "clip.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)))
    data = _rows(
        tmp_path / "p.jsonl",
        {"prompt": "What is it?", "images": ["img/a.png"], "max_tokens": 4},
        {"messages": [{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": [{"type": "text", "text": "Compare"},
                                                   {"type": "image_url", "image_url": {"url": "img/b.png"}}]}],
         "images": ["https://example.com/c.jpg"]},
        {"prompt": "And the clip?", "video": "clip.mp4"},
        {"prompt": "text only"},
    )
    ds = build_prompt_dataset(str(data), 0)
    first = ds.prompts[0].messages[0]["content"]
    assert first[0] == TextPart("What is it?") and first[1].width == 64 and first[1].height == 48
    assert _decoded(first[1]) == a and first[1].sha256 == hashlib.sha256(a).hexdigest()
    second = ds.prompts[1].messages  # the row's images join its last user turn, after its parts
    assert [type(p).__name__ for p in second[1]["content"]] == ["TextPart", "ImagePart", "ImagePart"]
    assert _decoded(second[1]["content"][1]) == b and second[1]["content"][2].url == "https://example.com/c.jpg"
    video = ds.prompts[2].messages[0]["content"][1]
    assert isinstance(video, VideoPart) and video.url.startswith("data:video/mp4;base64,")
    assert ds.prompts[3].prompt == "text only" and ds.prompts[3].messages is None
    wired = wire_messages(ds.prompts[1].messages)
    assert wired[0] == {"role": "system", "content": "Be brief."}
    assert wired[1]["content"][1] == {"type": "image_url", "image_url": {"url": second[1]["content"][1].url}}
    media = ds.describe()["media"]
    assert media["images"] == 3 and media["videos"] == 1 and media["samples_with_media"] == 3 and media["by_url"] == 1
    assert media["images_per_request"] == {"mean": 0.75, "min": 0, "max": 2}
    assert ds.prompts[1].text() == "Be brief.\nCompare"  # what a local tokenizer counts: text only


def test_a_folder_of_images_groups_them_by_request(tmp_path):
    files = [_png(tmp_path / "pics" / f"{i}.png", 8 + i, 8, seed=i) for i in range(5)]
    (tmp_path / "pics" / "notes.txt").write_text("not an image")
    ds = build_prompt_dataset(f"images:{tmp_path / 'pics'},images_per_request=2,prompt=Count them.,osl=7", 0)
    assert len(ds) == 3 and [len(media_parts(p.messages)) for p in ds.prompts] == [2, 2, 1]
    assert [_decoded(p) for p in media_parts(ds.prompts[0].messages)] == files[:2]
    assert ds.prompts[0].max_tokens == 7 and ds.prompts[0].messages[0]["content"][0] == TextPart("Count them.")


def test_visionarena_parquet_rows_by_their_columns(tmp_path):
    imgs = [_png(tmp_path / f"v{i}.png", 16, 12, seed=i) for i in range(3)]
    rows = [
        {"conversation": [[{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": "an answer"}]],
         "images": [{"bytes": imgs[i], "path": f"v{i}.png"}]}
        for i in range(3)
    ]
    rows.append({"conversation": [[{"role": "user", "content": "no image"}]], "images": []})
    path = tmp_path / "va.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    ds = build_prompt_dataset(f"visionarena:{path},n=2,seed=3", 0)
    assert len(ds) == 2 and ds.source["rows_without_images"] <= 1
    for p in ds.prompts:
        text, image = p.messages[0]["content"]
        i = int(text.text.split()[-1])
        assert _decoded(image) == imgs[i] and p.expected == "an answer" and p.max_tokens == 2


def test_sharegpt4v_rows_under_an_image_root(tmp_path):
    img = _png(tmp_path / "coco" / "train2017" / "000000000009.jpg.png", 24, 24)
    rows = [{"id": "1", "image": "train2017/000000000009.jpg.png",
             "conversations": [{"from": "human", "value": "<image>\nWhat is in the image?"},
                               {"from": "gpt", "value": "A plate of food."}]}]
    path = tmp_path / "sharegpt4v.json"
    path.write_text(json.dumps(rows))
    ds = build_prompt_dataset(f"sharegpt4v:{path},image_root={tmp_path / 'coco'}", 0)
    text, image = ds.prompts[0].messages[0]["content"]
    assert text == TextPart("What is in the image?") and _decoded(image) == img
    assert ds.prompts[0].expected == "A plate of food." and ds.prompts[0].max_tokens == 4


def test_synthetic_images_are_seeded_and_their_content_sets_their_size():
    spec = "synthetic-images:n=3,image_size=96x64,images_per_request=2,content={}"
    sizes = {}
    for content in ("noise", "gradient", "solid"):
        ds = build_prompt_dataset(spec.format(content), 5)
        again = build_prompt_dataset(spec.format(content), 5)
        assert ds.fingerprint() == again.fingerprint()  # seeded: the same bytes every time
        parts = [p for prompt in ds.prompts for p in media_parts(prompt.messages)]
        assert len(parts) == 6 and {(p.width, p.height, p.format) for p in parts} == {(96, 64, "png")}
        assert len({p.sha256 for p in parts}) == (6 if content != "solid" else len({p.sha256 for p in parts}))
        sizes[content] = ds.describe()["media"]["media_bytes_per_request"]["mean"]
        assert ds.source["size_note"] == SIZE_NOTE
    assert sizes["noise"] > 10 * sizes["gradient"] > 0 and sizes["gradient"] > sizes["solid"]
    jpeg = build_prompt_dataset("synthetic-images:n=1,image_size=32,format=jpeg,quality=50", 0)
    (part,) = media_parts(jpeg.prompts[0].messages)
    assert part.url.startswith("data:image/jpeg;base64,") and Image.open(io.BytesIO(_decoded(part))).size == (32, 32)


# --- bad input: one line naming the file and the row -------------------------------------------


def test_a_truncated_image_is_one_line_naming_file_and_row(tmp_path):
    whole = _png(tmp_path / "ok.png", 64, 64)
    (tmp_path / "cut.png").write_bytes(whole[: len(whole) // 2])
    data = _rows(tmp_path / "p.jsonl", {"prompt": "a", "images": ["ok.png"]}, {"prompt": "b", "images": ["cut.png"]})
    with pytest.raises(DatasetError) as info:
        build_prompt_dataset(str(data), 0)
    msg = str(info.value)
    assert "\n" not in msg and f"{data}:2" in msg and "cut.png" in msg and "cannot be decoded" in msg


def test_an_unreadable_or_missing_image_is_one_line(tmp_path):
    (tmp_path / "junk.png").write_bytes(b"this is not an image")
    for name, words in (("junk.png", "cannot be decoded"), ("missing.png", "cannot read image")):
        data = _rows(tmp_path / "p.jsonl", {"prompt": "a", "images": [name]})
        with pytest.raises(DatasetError) as info:
            build_prompt_dataset(str(data), 0)
        msg = str(info.value)
        assert "\n" not in msg and name in msg and words in msg and f"{data}:1" in msg


def test_a_file_over_max_media_bytes_is_one_line_naming_the_limit(tmp_path):
    size = len(_png(tmp_path / "big.png", 64, 64))
    data = _rows(tmp_path / "p.jsonl", {"prompt": "a", "images": ["big.png"]})
    with pytest.raises(DatasetError) as info:
        build_prompt_dataset(f"jsonl:{data},max_media_bytes=1000", 0)
    msg = str(info.value)
    assert "\n" not in msg and "big.png" in msg and f"{size:,} bytes" in msg and "max_media_bytes 1,000" in msg
    assert len(build_prompt_dataset(f"jsonl:{data},max_media_bytes={size}", 0)) == 1  # at the limit: taken
    (tmp_path / "clip.xyz").write_bytes(b"abc")
    bad_video = _rows(tmp_path / "v.jsonl", {"prompt": "a", "video": "clip.xyz"})
    with pytest.raises(DatasetError, match=r"unknown container '\.xyz'"):
        build_prompt_dataset(str(bad_video), 0)


def test_bad_parts_and_parameters_are_one_line(tmp_path):
    data = _rows(tmp_path / "p.jsonl", {"messages": [{"role": "user", "content": [{"type": "audio", "x": 1}]}]})
    with pytest.raises(DatasetError, match="content part 0 is not one of text, image_url"):
        build_prompt_dataset(str(data), 0)
    for spec, words in (("synthetic-images:format=gif", "use png or jpeg"),
                        ("synthetic-images:content=stripes", "noise, gradient, solid"),
                        ("synthetic-images:image_size=0", "image_size must be N or WxH"),
                        ("synthetic-images:colour=red", r"unknown parameter\(s\) colour")):
        with pytest.raises(DatasetError, match=words):
            build_prompt_dataset(spec, 0)
