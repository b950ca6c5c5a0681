"""Prompt datasets for generative (HTTP/LLM) backends, behind the same QSL as tensors.

Specs, as given to `--dataset`:
    prompts.jsonl  (or jsonl:PATH[,validator=KIND])
                                     one JSON object a line: `prompt` (text) or `messages`
                                     (chat turns), optional `max_tokens`, optional expected
                                     output (`expected`, `output` or `completion`), optional
                                     `validator` (exact, contains, regex, json: see
                                     harness.data.validators) overriding the file's; or a
                                     reference `answer` scored for text accuracy, with an
                                     optional `metric` (exact_match by default; rouge,
                                     choice[:LETTERS], regex:PATTERN, json_field:PATH);
                                     optional `schema`, a JSON Schema the answer must
                                     follow (structured outputs: sent to the server, and
                                     each answer checked against it).
                                     Media: `images` (a list of paths relative to the file,
                                     or URLs) and/or `video` (one), sent with the (last) user
                                     turn as image_url / video_url parts; or a message's
                                     `content` given as OpenAI parts (text, image_url,
                                     video_url). Parameter: max_media_bytes (harness.data.media)
    images:DIR, visionarena:PATH, sharegpt4v:PATH, synthetic-images[:...]
                                     prompts with images (harness.data.media_sets)
    mlperf:SET:PATH                  MLPerf's processed LLM file (harness.data.mlperf_llm):
                                     its prompts, with each row's reference and metric
    sharegpt:PATH[,n=N,seed=S,validator=KIND]
                                     a ShareGPT-format JSON file on disk: the first human
                                     turn of each conversation is the prompt, the first
                                     model turn the expected output, and its length (in the
                                     model's tokens when a tokenizer is known) the max_tokens
    trace:PATH[,format=F,time_scale=X,start_s=S,end_s=E,max_idle_s=I,block_size=B]
                                     a timestamped trace (Mooncake JSONL, Azure or BurstGPT
                                     CSV): synthetic prompts of each row's lengths, sent at
                                     its times (harness.data.traces, docs/traffic.md)
    synthetic[:isl=128,osl=64,n=256,seed=0,prefix_groups=N,prefix_len=L]
                                     seeded random prompts of `isl` input tokens, each
                                     asking for `osl` output tokens (sent as max_tokens)

`isl`/`osl` take a fixed number or a distribution: lognormal(median,sigma),
normal(mean,std), uniform(lo,hi). Synthetic prompts are built from common English words
that are one token in the usual BPE vocabularies. When the backend under test has a
tokenizer (`count_tokens`), only words that are one token in *it* are used and each
prompt is checked, and trimmed or extended, until it is exactly `isl` tokens there;
otherwise `isl` counts words, which the server's usage (or a local tokenizer) corrects.

Shared prefixes (prompt caching): with `prefix_groups=N,prefix_len=L`, sample i belongs
to group i mod N and starts with that group's L-token prefix; its total length is still
drawn from `isl` (at least L + 1: every prompt has a suffix of its own). A server that
caches prompts can reuse the prefix for every request after the first of its group.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from harness.data.jsonl import json_objects
from harness.data.media import MAX_MEDIA_BYTES, image_part, max_bytes_param, user_content, video_part
from harness.data.prompt_set import Prompt, PromptDataset, TokenCounter
from harness.data.spec import parse_dataset_spec
from harness.data.synthetic_prompts import synthetic_prompts
from harness.data.traces import load_trace
from harness.data.validators import VALIDATORS
from harness.errors import DatasetError


def _validator_param(params: dict[str, str], spec: str) -> str | None:
    v = params.get("validator")
    if v is not None and v not in VALIDATORS:
        raise DatasetError(f"dataset spec {spec!r}: unknown validator {v!r}; use one of {', '.join(VALIDATORS)}")
    return v


# --- JSONL ----------------------------------------------------------------------------


def load_jsonl(path: Path, validator: str | None = None, max_media_bytes: int = MAX_MEDIA_BYTES) -> PromptDataset:
    if not path.is_file():
        raise DatasetError(f"prompt file {path} does not exist")
    media = _Media(path.parent, max_media_bytes)
    prompts = [_prompt_from(obj, where, validator, media)
               for where, obj in json_objects(path, lambda _, line: f"{path}:{line}", "`prompt` or `messages`")]
    if not prompts:
        raise DatasetError(f"prompt file {path} holds no prompts")
    scored = [p.reference is not None for p in prompts]
    if any(scored) and not all(scored):  # a row without a reference would silently not count
        row = scored.index(False)
        raise DatasetError(f"{path}: row {row} has no `answer`, while row {scored.index(True)} has one: "
                           "give every row a reference answer, or none")
    source: dict[str, Any] = {"path": str(path), "validator": validator}
    if media.used:
        source["max_media_bytes"] = max_media_bytes
    if any(scored):  # text accuracy: the references' file, pinned
        from harness.data.hashing import sha256_file

        source["sha256"] = sha256_file(path)
    return PromptDataset("jsonl", prompts, source)


class _Media:
    """A JSONL file's media: paths relative to its folder, each file held to the limit."""

    def __init__(self, base: Path, limit: int) -> None:
        self.base, self.limit, self.used = base, limit, False

    def parts(self, obj: dict[str, Any], where: str) -> list[Any]:
        """The row's `images` and `video` as parts (read, checked and encoded now)."""
        images, video = obj.get("images"), obj.get("video")
        if images is not None and (not isinstance(images, list) or not all(isinstance(i, str) for i in images)):
            raise DatasetError(f"{where}: `images` must be a list of paths (relative to the file) or URLs")
        if video is not None and not isinstance(video, str):
            raise DatasetError(f"{where}: `video` must be a path (relative to the file) or a URL")
        out: list[Any] = [image_part(i, self.base, where, self.limit) for i in images or ()]
        if video is not None:
            out.append(video_part(video, self.base, where, self.limit))
        self.used = self.used or bool(out)
        return out

    def content(self, content: Any, where: str) -> Any:
        """A message's content: a string, or OpenAI parts (text, image_url, video_url) typed."""
        from backends.content import TextPart

        if isinstance(content, str):
            return content
        if not isinstance(content, list) or not content:
            raise DatasetError(f"{where}: a message's `content` must be a string or a non-empty list of parts")
        parts: list[Any] = []
        for k, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            value = part.get(kind) if kind else None
            url = value.get("url") if isinstance(value, dict) else value
            if kind == "text" and isinstance(value, str):
                parts.append(TextPart(value))
            elif kind == "image_url" and isinstance(url, str):
                parts.append(image_part(url, self.base, f"{where} part {k}", self.limit))
            elif kind == "video_url" and isinstance(url, str):
                parts.append(video_part(url, self.base, f"{where} part {k}", self.limit))
            else:
                raise DatasetError(f"{where}: content part {k} is not one of text, image_url {{url}}, video_url {{url}}")
        self.used = True
        return tuple(parts)


def _prompt_from(obj: dict[str, Any], where: str, validator: str | None, media: _Media) -> Prompt:
    prompt, messages = obj.get("prompt"), obj.get("messages")
    if (prompt is None) == (messages is None):
        raise DatasetError(f"{where}: give exactly one of `prompt` (text) and `messages` (chat turns)")
    if prompt is not None and not isinstance(prompt, str):
        raise DatasetError(f"{where}: `prompt` must be a string")
    turns: tuple[dict[str, Any], ...] | None = None
    if messages is not None:
        if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), (str, list))
            for m in messages
        ):
            raise DatasetError(f"{where}: `messages` must be a non-empty list of {{role, content}}, "
                               "each content a string or a list of parts")
        turns = tuple({"role": m["role"], "content": media.content(m["content"], where)} for m in messages)
    attached = media.parts(obj, where)
    if attached:  # sent with the last user turn, after its text
        if turns is None:
            turns, prompt = ({"role": "user", "content": user_content(prompt, attached)},), None
        else:
            last = max((i for i, m in enumerate(turns) if m["role"] == "user"), default=None)
            if last is None:
                raise DatasetError(f"{where}: `images`/`video` go with a user turn, and `messages` has none")
            content = turns[last]["content"]
            content = content if isinstance(content, tuple) else user_content(content, ())
            turns = (*turns[:last], {**turns[last], "content": (*content, *attached)}, *turns[last + 1:])
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise DatasetError(f"{where}: `max_tokens` must be a positive integer")
    expected = next((obj[k] for k in ("expected", "output", "completion") if k in obj), None)
    if expected is not None and not isinstance(expected, str):
        raise DatasetError(f"{where}: the expected output must be a string")
    unknown = set(obj) - {"prompt", "messages", "max_tokens", "expected", "output", "completion", "id", "validator",
                          "answer", "metric", "schema", "images", "video"}
    if unknown:
        raise DatasetError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    line_validator = obj.get("validator", validator)
    if line_validator is not None and line_validator not in VALIDATORS:
        raise DatasetError(f"{where}: unknown validator {line_validator!r}; use one of {', '.join(VALIDATORS)}")
    reference, metric = None, None
    if "answer" in obj:
        from harness.data.mlperf_llm import check_metric

        reference = obj["answer"]
        if isinstance(reference, bool) or not isinstance(reference, (str, int, float)):
            raise DatasetError(f"{where}: `answer` is {type(reference).__name__}, expected text or a number")
        metric = check_metric(obj.get("metric", "exact_match"), where)
    elif "metric" in obj:
        raise DatasetError(f"{where}: `metric` without an `answer`: give the reference answer it scores against")
    schema = obj.get("schema")
    if schema is not None and not isinstance(schema, (dict, bool)):
        raise DatasetError(f"{where}: `schema` must be a JSON Schema (an object), not {type(schema).__name__}")
    return Prompt(prompt, turns, max_tokens, expected, validator=line_validator, reference=reference, metric=metric,
                  response_schema=schema)


# --- ShareGPT -------------------------------------------------------------------------


def load_sharegpt(spec: str, path: Path, params: dict[str, str], seed: int, count: TokenCounter | None) -> PromptDataset:
    """Conversations from a ShareGPT-format file: [{"conversations": [{"from", "value"}...]}].

    The first human turn is the prompt and the model's reply to it the expected output;
    the reply's length becomes max_tokens, so the run asks for as much as the recorded
    model said (the convention of vLLM's and MLPerf's ShareGPT benchmarks).
    """
    validator = _validator_param(params, spec)
    try:
        n = int(params["n"]) if "n" in params else None
        s = int(params.get("seed", seed))
    except ValueError as e:
        raise DatasetError(f"dataset spec {spec!r}: n and seed must be integers") from e
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise DatasetError(f"ShareGPT file {path}: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise DatasetError(f"ShareGPT file {path}: not valid JSON ({e.msg} at line {e.lineno})") from e
    if not isinstance(data, list):
        raise DatasetError(f"ShareGPT file {path}: expected a JSON list of conversations")
    measure = count or (lambda text: len(text.split()))
    pairs: list[tuple[str, str]] = []
    for conv in data:
        turns = conv.get("conversations") if isinstance(conv, dict) else None
        if not isinstance(turns, list):
            continue
        for a, b in zip(turns, turns[1:], strict=False):
            if (
                isinstance(a, dict) and isinstance(b, dict) and a.get("from") in ("human", "user")
                and b.get("from") in ("gpt", "assistant", "model")
                and isinstance(a.get("value"), str) and isinstance(b.get("value"), str)
                and a["value"].strip() and b["value"].strip()
            ):  # fmt: skip
                pairs.append((a["value"], b["value"]))
                break
    if not pairs:
        raise DatasetError(f"ShareGPT file {path}: no conversation with a human turn followed by a model turn")
    # A seeded shuffle, so n=100 is a fair sample of the file rather than its first 100.
    random.Random(s).shuffle(pairs)
    chosen = pairs[: n or len(pairs)]
    prompts = [
        Prompt(q, None, max(1, measure(a)), a, target_input_tokens=measure(q), validator=validator)
        for q, a in chosen
    ]
    source = {
        "path": str(path), "seed": s, "conversations_usable": len(pairs), "validator": validator,
        "lengths_counted_in": "tokenizer" if count else "words",
    }  # fmt: skip
    return PromptDataset("sharegpt", prompts, source)


def load_mlperf(name: str, path: Path) -> PromptDataset:
    """MLPerf's processed file as its reference implementation reads it: row i is qsl_idx i,
    its text prompt (cnn_eval.json's `input`) and/or its token ids (`tok_input`), its
    reference and its metric. A row with ids only is valid: whether the run can send it
    depends on the backend's prompt_from (`PromptDataset.check_sendable`)."""
    from harness.data.hashing import sha256_file
    from harness.data.mlperf_llm import read_llm_dataset

    data = read_llm_dataset(name, path)
    prompts = []
    for row in data.rows:
        prompts.append(Prompt(row.prompt, row.messages, reference=row.reference, metric=row.metric, subset=row.dataset,
                              input_ids=row.input_ids))
    return PromptDataset(f"mlperf:{name}", prompts, {"path": str(path), "set": name, "sha256": sha256_file(path)})


def build_prompt_dataset(spec: str, seed: int, count_tokens: TokenCounter | None = None) -> PromptDataset:
    """The dataset a spec names. `count_tokens` is the tokenizer of the model under test,
    when the backend has one: synthetic lengths and ShareGPT output lengths are then counted
    in that model's tokens."""
    parsed = parse_dataset_spec(spec)
    if parsed.kind == "mlperf" and parsed.path is not None:
        return load_mlperf(parsed.params["set"], parsed.path)
    if parsed.kind == "trace" and parsed.path is not None:

        return load_trace(spec, parsed.path, parsed.params, seed, count_tokens)
    if parsed.kind == "sharegpt" and parsed.path is not None:  # a path kind: it always has one
        return load_sharegpt(spec, parsed.path, parsed.params, seed, count_tokens)
    if parsed.kind in ("jsonl", "npy") and parsed.path is not None:
        # A file given without a kind reads as `npy:PATH` unless it ends in .jsonl; for a
        # generative backend it is still a prompt file, so every spelling lands here.
        return load_jsonl(parsed.path, _validator_param(parsed.params, spec), max_bytes_param(dict(parsed.params), spec))
    if parsed.kind == "images" and parsed.path is not None:
        from harness.data.media_sets import load_image_folder

        return load_image_folder(spec, parsed.path, parsed.params)
    if parsed.kind in ("visionarena", "sharegpt4v") and parsed.path is not None:
        from harness.data.media_sets import load_layout

        return load_layout(parsed.kind, spec, parsed.path, parsed.params, seed, count_tokens)
    if parsed.kind == "synthetic-images":
        from harness.data.media_sets import synthetic_images

        return synthetic_images(spec, parsed.params, seed)
    params = dict(parsed.params)
    if parsed.kind != "synthetic":
        raise DatasetError(
            f"unknown prompt dataset {spec!r}: use a .jsonl file of prompts, sharegpt:FILE.json, "
            "synthetic:isl=N,osl=N[,n=N,seed=S,prefix_groups=G,prefix_len=L], or with images images:DIR, "
            "visionarena:FILE, sharegpt4v:FILE or synthetic-images[:image_size=N,...]"
        )

    ds = synthetic_prompts(spec, params, seed, count_tokens)
    if params:
        raise DatasetError(f"dataset spec {spec!r}: unknown parameter(s) {', '.join(params)}")
    return ds
