"""The one dataset-spec grammar: every spelling splits into kind, path and parameters."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.data.spec import DatasetSpec, parse_dataset_spec
from harness.errors import DatasetError


@pytest.mark.parametrize(
    ("text", "kind", "path", "params"),
    [
        ("synthetic", "synthetic", None, {}),
        ("synthetic:n=8,seed=1", "synthetic", None, {"n": "8", "seed": "1"}),
        ("synthetic:isl=lognormal(1024,0.5),osl=64", "synthetic", None, {"isl": "lognormal(1024,0.5)", "osl": "64"}),
        ("digits", "digits", None, {}),
        ("npy:/data/a,b", "npy", Path("/data/a,b"), {}),  # npy takes no parameters: the comma is the path's
        ("data/samples", "npy", Path("data/samples"), {}),
        ("prompts.jsonl", "jsonl", Path("prompts.jsonl"), {}),
        ("jsonl:p.jsonl,validator=exact", "jsonl", Path("p.jsonl"), {"validator": "exact"}),
        ("sharegpt:x,y.json,n=8,seed=2", "sharegpt", Path("x,y.json"), {"n": "8", "seed": "2"}),
        ("sharegpt:x.json,other=1", "sharegpt", Path("x.json,other=1"), {}),  # an unknown key stays in the path
    ],
)
def test_every_spelling_splits_the_same_way(text, kind, path, params):
    spec = parse_dataset_spec(text)
    assert (spec.kind, spec.path, spec.params) == (kind, path, params)
    assert parse_dataset_spec(str(spec)) == spec  # run.yaml's explicit form reads back the same


def test_written_out_with_an_absolute_path():
    spec = parse_dataset_spec("sharegpt:conv.json,n=8").with_path(Path("/abs/conv.json"))
    assert str(spec) == "sharegpt:/abs/conv.json,n=8"
    assert str(DatasetSpec("digits")) == "digits"


@pytest.mark.parametrize("text", ["synthetic:n", "jsonl:", "sharegpt:"])
def test_malformed_specs_are_one_clear_error(text):
    with pytest.raises(DatasetError, match="dataset spec"):
        parse_dataset_spec(text)
