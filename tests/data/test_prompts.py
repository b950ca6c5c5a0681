"""Prompt datasets: JSONL parsing with located errors, seeded synthetic lengths, the QSL contract."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.data.prompts import build_prompt_dataset
from harness.errors import DatasetError


def _write(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_jsonl_prompts_and_messages(tmp_path):
    f = _write(
        tmp_path / "p.jsonl",
        [
            {"prompt": "hello there", "max_tokens": 7, "expected": "hi"},
            {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "why?"}]},
        ],
    )
    for spec in (str(f), f"jsonl:{f}", f"npy:{f}"):  # npy: is how the runner resolves a path
        ds = build_prompt_dataset(spec, 0)
        assert len(ds) == 2
        assert ds.materialize(0).prompt == "hello there" and ds.materialize(0).max_tokens == 7
        assert ds.materialize(0).expected == "hi"
        assert ds.materialize(1).messages[1] == {"role": "user", "content": "why?"}
        assert ds.materialize(1).text() == "be brief\nwhy?"
    assert ds.describe()["chat"] is True and ds.describe()["with_expected_output"] == 1


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("{oops", "p.jsonl:2: not valid JSON"),
        ({"prompt": "a", "messages": []}, "exactly one of"),
        ({"prompt": "a", "max_tokens": 0}, "max_tokens"),
        ({"messages": [{"role": "user"}]}, "messages"),
        ({"prompt": "a", "temperature": 1}, "unknown field(s) temperature"),
    ],
)
def test_jsonl_errors_name_the_line(tmp_path, row, message):
    f = _write(tmp_path / "p.jsonl", [{"prompt": "fine"}, row])
    with pytest.raises(DatasetError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_prompt_dataset(str(f), 0)


def test_synthetic_lengths_are_seeded_and_follow_the_distribution():
    a = build_prompt_dataset("synthetic:isl=lognormal(1024,0.5),osl=64,n=400", 0)
    b = build_prompt_dataset("synthetic:isl=lognormal(1024,0.5),osl=64,n=400", 0)
    c = build_prompt_dataset("synthetic:isl=lognormal(1024,0.5),osl=64,n=400,seed=1", 0)
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()
    words = np.array([len(p.prompt.split()) for p in a.prompts])
    assert np.all(words == [p.target_input_tokens for p in a.prompts])
    assert abs(np.median(words) / 1024 - 1) < 0.1  # lognormal's median
    assert abs(np.std(np.log(words)) - 0.5) < 0.05
    assert {p.max_tokens for p in a.prompts} == {64}  # osl is asked for via max_tokens
    # sample i does not depend on n
    short = build_prompt_dataset("synthetic:isl=lognormal(1024,0.5),osl=64,n=3", 0)
    assert [p.prompt for p in short.prompts] == [p.prompt for p in a.prompts[:3]]


def test_synthetic_fixed_and_uniform_lengths():
    ds = build_prompt_dataset("synthetic:isl=128,osl=uniform(10,20),n=200", 3)
    assert {len(p.prompt.split()) for p in ds.prompts} == {128}
    outs = [p.max_tokens for p in ds.prompts]
    assert min(outs) >= 10 and max(outs) <= 20 and len(set(outs)) > 5


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("synthetic:isl=lognormal(1024)", "neither a number"),
        ("synthetic:isl=0", "at least 1"),
        ("synthetic:isl=8,foo=1", "unknown parameter"),
        ("digits", "unknown prompt dataset"),
        ("jsonl:/nonexistent/p.jsonl", "does not exist"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec, message):
    with pytest.raises(DatasetError, match=message):
        build_prompt_dataset(spec, 0)


def test_qsl_load_and_unload():
    ds = build_prompt_dataset("synthetic:isl=4,osl=4,n=10", 0)
    ds.load([1, 3, 5])
    assert ds.loaded_count == 3 and ds.get(3).target_input_tokens == 4
    ds.unload([1, 3, 5])
    assert ds.loaded_count == 0
    with pytest.raises(KeyError):
        ds.get(3)


def test_shared_prefix_groups_and_expected_ratio_exact():
    ds = build_prompt_dataset("synthetic:isl=12,osl=4,n=16,prefix_groups=4,prefix_len=8", 0)
    for p in ds.prompts:
        assert len(p.prompt.split()) == p.target_input_tokens == 12 and p.prefix_tokens == 8
        assert p.prompt.split()[:8] == ds.prompts[p.prefix_group].prompt.split()[:8]
    assert len({" ".join(p.prompt.split()[:8]) for p in ds.prompts}) == 4
    # 16 requests in 4 groups: 12 of them reuse 8 of their 12 tokens
    assert ds.describe()["prefix"]["expected_reusable_fraction"] == 12 * 8 / (16 * 12) == 0.5
    # a drawn length below the prefix still leaves each prompt a suffix of its own
    short = build_prompt_dataset("synthetic:isl=4,osl=4,n=4,prefix_groups=2,prefix_len=8", 0)
    assert {p.target_input_tokens for p in short.prompts} == {9}
    with pytest.raises(DatasetError, match="prefix_groups"):
        build_prompt_dataset("synthetic:isl=12,prefix_groups=4", 0)


def test_sharegpt_file(tmp_path):
    convs = [
        {"id": "a", "conversations": [{"from": "human", "value": "say hi to me"}, {"from": "gpt", "value": "hi there"}]},
        {"id": "b", "conversations": [{"from": "gpt", "value": "orphan"}]},  # no human turn first: skipped
        {"id": "c", "conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "two words"},
                                      {"from": "gpt", "value": "one two three"}]},
    ]  # fmt: skip
    f = tmp_path / "share,gpt.json"  # a comma in the path stays part of the path
    f.write_text(json.dumps(convs))
    ds = build_prompt_dataset(f"sharegpt:{f},seed=3", 0)
    assert ds.describe()["conversations_usable"] == 2 and len(ds) == 2
    by_prompt = {p.prompt: p for p in ds.prompts}
    assert by_prompt["say hi to me"].expected == "hi there" and by_prompt["say hi to me"].max_tokens == 2
    assert by_prompt["two words"].max_tokens == 3 and by_prompt["two words"].target_input_tokens == 2
    one = build_prompt_dataset(f"sharegpt:{f},n=1,seed=3,validator=contains", 0)
    assert len(one) == 1 and one.validate(0, f"well, {one.prompts[0].expected}!") is True
    with pytest.raises(DatasetError, match="no conversation"):
        (tmp_path / "empty.json").write_text("[]")
        build_prompt_dataset(f"sharegpt:{tmp_path / 'empty.json'}", 0)


@pytest.mark.parametrize(
    ("validator", "expected", "answer", "ok"),
    [
        ("exact", "Paris", "  Paris\n", True),
        ("exact", "Paris", "Paris.", False),
        ("contains", "paris", "It is PARIS.", True),
        ("contains", "Berlin", "Paris", False),
        ("regex", r"\b4\b", "2+2 is 4.", True),
        ("regex", r"^\d+$", "four", False),
        ("json", None, '```json\n{"a": 1}\n```', True),
        ("json", '{"a": 1}', '{"a": 2}', False),
        ("json", None, "{not json", False),
    ],
)
def test_validators(tmp_path, validator, expected, answer, ok):
    row = {"prompt": "q", "validator": validator} | ({"expected": expected} if expected is not None else {})
    ds = build_prompt_dataset(str(_write(tmp_path / "v.jsonl", [row])), 0)
    assert ds.validate(0, answer) is ok


def test_validator_errors_are_found_at_load(tmp_path):
    with pytest.raises(DatasetError, match="needs an expected output"):
        build_prompt_dataset(str(_write(tmp_path / "a.jsonl", [{"prompt": "q", "validator": "exact"}])), 0)
    with pytest.raises(DatasetError, match="regular expression"):
        build_prompt_dataset(str(_write(tmp_path / "b.jsonl", [{"prompt": "q", "expected": "(", "validator": "regex"}])), 0)
    with pytest.raises(DatasetError, match="unknown validator"):
        build_prompt_dataset(f"jsonl:{_write(tmp_path / 'c.jsonl', [{'prompt': 'q'}])},validator=fuzzy", 0)
    plain = build_prompt_dataset(str(_write(tmp_path / "d.jsonl", [{"prompt": "q", "expected": "x"}])), 0)
    assert plain.validate(0, "x") is None  # an expected output alone is a reference, not a check
