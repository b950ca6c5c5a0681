"""Images and video over OpenAI chat, end to end under LoadGen, against a server that
decodes every image it is sent (tests/support/image_server.py): each answer names the
size, format and sha256 of each media part where the server found it, so the test checks,
per sample, that the dataset's exact bytes arrived at the stated size in the stated part.
The figures of the summary's media section are checked against that server's own log
(body bytes) and its usage (text and image tokens)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from backends.content import ImagePart, VideoPart
from harness.config.run_config import RunConfig
from harness.data.prompts import build_prompt_dataset
from harness.run import runner
from tests.support.http_servers import ServerThread
from tests.support.image_server import ImageServerLog, image_app, image_tokens, parse_answer


def _image(path: Path, w: int, h: int, fmt: str, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    Image.fromarray(pixels, "RGB").save(path, fmt)


def _truth(spec: str, seed: int = 0) -> list[list[dict]]:
    """What each sample holds, read again here: per media part, where it sits and its bytes' hash."""
    ds = build_prompt_dataset(spec, seed)
    out = []
    for p in ds.prompts:
        parts = []
        for i, m in enumerate(p.messages or ()):
            for k, part in enumerate(m["content"] if isinstance(m["content"], tuple) else ()):
                if isinstance(part, ImagePart):
                    parts.append({"where": f"m{i}.p{k}", "kind": "image", "sha256": part.sha256, "width": part.width,
                                  "height": part.height, "format": part.format})
                elif isinstance(part, VideoPart):
                    parts.append({"where": f"m{i}.p{k}", "kind": "video", "sha256": part.sha256, "bytes": part.nbytes})
        out.append(parts)
    return out


def _answers(run_dir: Path) -> dict[int, list[dict]]:
    entries = [json.loads(line) for line in (run_dir / "tokens.jsonl").read_text().splitlines()]
    return {e["sample_index"]: e for e in entries}


def _check_arrived(run_dir: Path, truth: list[list[dict]]) -> list[dict]:
    entries = _answers(run_dir)
    for index, e in entries.items():
        assert e["status"] == "ok", e
        assert parse_answer(e["text"]) == truth[index], index  # the exact bytes, size and place
    return list(entries.values())


def _run(tmp_path: Path, name: str, dataset: str, url: str, options: dict | None = None, **settings) -> tuple[Path, dict]:
    out = runner.run(RunConfig(
        name=name, backend="http", dataset=dataset, use_token_latencies=True, ttft_latency_ms=5000, tpot_latency_ms=1000,
        backend_options={"protocol": "openai-chat", "url": url + "/v1", "read_timeout_s": 30, **(options or {})},
        **settings,
    ), tmp_path / "results")
    return out.run_dir, out.summary


def test_images_and_video_arrive_exact_offline(tmp_path):
    _image(tmp_path / "img" / "a.png", 64, 48, "PNG", 1)
    _image(tmp_path / "img" / "b.jpg", 40, 30, "JPEG", 2)
    _image(tmp_path / "img" / "c.png", 16, 16, "PNG", 3)
    (tmp_path / "clip.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8)
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in (
        {"prompt": "What is in the picture?", "images": ["img/a.png"], "max_tokens": 8},
        {"messages": [{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": [{"type": "text", "text": "Compare these two"},
                                                   {"type": "image_url", "image_url": {"url": "img/b.jpg"}}]}],
         "images": ["img/c.png"]},
        {"prompt": "And the clip?", "video": "clip.mp4"},
    )))
    truth = _truth(str(data))
    log = ImageServerLog()
    with ServerThread(image_app(log)) as server:
        # no warm-up: every body the server logs is a timed request's
        run_dir, s = _run(tmp_path, "images-offline", str(data), server.url, {"warmup_requests": 0},
                          scenario="Offline", min_query_count=12, min_duration_s=0.1, offline_expected_qps=10)
    entries = _check_arrived(run_dir, truth)
    assert s["harness"]["failed"] == 0 and s["harness"]["succeeded"] >= 12
    media = s["media"]
    assert media["requests"] == s["harness"]["succeeded"] == len(log.requests)
    # bytes sent: what the client says each request sent is what the server read for it
    # (the answer names the request's images, so it pairs the two)
    received = {answer: n for n, answer in log.requests}
    assert all(e["metrics"]["request_bytes"] == received[e["text"]] for e in entries)
    assert media["request_bytes"]["max"] == max(received.values())
    assert media["images_per_request"]["max"] == 2 and media["videos_per_request"]["max"] == 1
    assert media["uploads_timed"] == media["requests"] and media["upload_ms"]["min"] > 0
    # the write's own time is part of the time from the request call (which waits for a connection)
    assert all(0 < e["metrics"]["upload_ms"] <= e["metrics"]["call_to_sent_ms"] for e in entries)
    # input tokens: the server's split, equal to what it counted from the images it decoded
    assert media["input_tokens"]["source"] == "server split"
    by_index = {e["sample_index"]: e for e in entries}
    assert by_index[0]["image_tokens"] == image_tokens(64, 48)
    assert by_index[1]["image_tokens"] == image_tokens(40, 30) + image_tokens(16, 16)
    assert by_index[1]["input_tokens"] == 5 + by_index[1]["image_tokens"]  # "Be brief." + "Compare these two"
    assert media["input_tokens"]["image"]["max"] == max(image_tokens(64, 48), image_tokens(40, 30) + image_tokens(16, 16))
    assert media["input_tokens"]["image"]["min"] == 0  # the video's request: the server counted no image
    _schema_valid(s)


def _schema_valid(summary: dict) -> None:
    import jsonschema

    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "summary.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(json.loads(json.dumps(summary)))


def test_synthetic_images_under_a_server_scenario_at_a_low_rate(tmp_path):
    spec = "synthetic-images:n=6,image_size=128x96,images_per_request=2,content=gradient,seed=4"
    truth = _truth(spec)
    log = ImageServerLog()
    with ServerThread(image_app(log, split=False)) as server:
        run_dir, s = _run(tmp_path, "images-server", spec, server.url, scenario="Server", target_qps=20,
                          min_query_count=20, min_duration_s=0.5, target_latency_ms=5000)
    _check_arrived(run_dir, truth)
    media = s["media"]
    assert s["harness"]["failed"] == 0 and media["requests"] == s["harness"]["succeeded"] >= 20
    assert media["input_tokens"]["source"] == "server total" and media["input_tokens"]["image"] is None
    assert media["input_tokens"]["total"]["min"] == 3 + 2 * image_tokens(128, 96)  # "Describe the image." + 2 images
    assert media["synthetic"] == {"image_size": "128x96", "images_per_request": 2, "format": "png", "content": "gradient",
                                  "quality": None}
    assert media["note"] and "content sets the compressed size" in media["note"]
    _schema_valid(s)


def test_a_server_that_refuses_an_image_part_fails_that_request_by_its_reason(tmp_path):
    data = tmp_path / "prompts.jsonl"
    _image(tmp_path / "small.png", 16, 16, "PNG", 1)
    _image(tmp_path / "large.png", 64, 64, "PNG", 2)
    data.write_text(json.dumps({"prompt": "ok", "images": ["small.png"]}) + "\n"
                    + json.dumps({"prompt": "too big", "images": ["large.png"]}) + "\n")
    with ServerThread(image_app(ImageServerLog(), max_pixels=32 * 32)) as server:
        run_dir, s = _run(tmp_path, "images-refused", str(data), server.url, {"warmup_requests": 0},
                          scenario="Offline", min_query_count=8, min_duration_s=0.1, offline_expected_qps=10)
    assert s["harness"]["failures_by_reason"] == {"http_400": s["harness"]["samples"] // 2}
    entries = _answers(run_dir)
    assert entries[0]["status"] == "ok" and entries[1]["status"] == "error"
    from harness.results.records import read_records

    errors = {e for e in read_records(run_dir).columns["error"] if e}
    assert len(errors) == 1 and "http_400" in next(iter(errors))
    assert "image is 64x64, over this model's 1024 pixels" in next(iter(errors))  # the server's own text
    assert s["media"]["requests"] == s["harness"]["succeeded"]  # figures of the successful ones only


def test_a_sweep_varies_the_image_size(tmp_path):
    """`--vary image_size=...`: one point per size, each sending images of that size (the
    server's own decoding says so), and sweep.json's points carry each TTFT: the curve."""
    from harness.run.sweep import Axis, SweepSpec, run_sweep

    base_spec = "synthetic-images:n=4,content=noise,seed=2"
    log = ImageServerLog()
    with ServerThread(image_app(log)) as server:
        base = RunConfig(name="image-sizes", backend="http", dataset=base_spec, scenario="Offline", min_query_count=8,
                         min_duration_s=0.1, offline_expected_qps=10, use_token_latencies=True,
                         backend_options={"protocol": "openai-chat", "url": server.url + "/v1", "warmup_requests": 0})
        spec = SweepSpec("sweep", base, [Axis("image_size", ("32", "96x64"))])
        data = run_sweep(spec, tmp_path / "sweep")
    points = sorted(data["points"], key=lambda e: e["index"])
    assert [p["status"] for p in points] == ["complete", "complete"]
    for point, size in zip(points, ("32", "96x64"), strict=True):
        run_dir = tmp_path / "sweep" / point["run"]
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["run"]["dataset"] == f"{base_spec},image_size={size}"
        _check_arrived(run_dir, _truth(summary["run"]["dataset"]))
        w, _, h = size.partition("x")
        assert summary["media"]["synthetic"]["image_size"] == f"{w}x{h or w}"
        assert point["values"] == {"image_size": size} and point["metrics"]["ttft_p99"] is not None
