"""Session datasets (harness.data.sessions): each reader, the flattening into turns, and
bad input as one line naming the row."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.config.run_config import RunConfig
from harness.data.sessions import build_session_dataset, think_time_sampler
from harness.errors import DatasetError


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_chat_sessions_flatten_into_turns(tmp_path):
    f = _write(tmp_path / "s.jsonl", [
        {"id": "a", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "one"},
                                 {"role": "assistant", "content": "w1 w2 w3"}, {"role": "user", "content": "two"}]},
        {"messages": [{"role": "user", "content": "only"}], "max_tokens": 7},
    ])
    ds = build_session_dataset(f"chat-sessions:{f}", 0)
    assert len(ds) == 3 and ds.first == [0, 2]
    assert [(r.session, r.turn) for r in ds.refs] == [(0, 0), (0, 1), (1, 0)]
    a, b = ds.sessions
    assert a.id == "a" and a.system == "be brief" and [t.content for t in a.turns] == ["one", "two"]
    # the file's answer is never sent: its length (3 words) is that turn's max_tokens
    assert a.turns[0].max_tokens == 3 and a.turns[1].max_tokens is None
    assert b.id == "s1" and b.turns[0].max_tokens == 7
    assert ds.describe()["sessions"] == 2 and ds.describe()["turns"] == 3


@pytest.mark.parametrize(("messages", "says"), [
    ([{"role": "assistant", "content": "x"}], "message 0 has role 'assistant', which opens the conversation"),
    ([{"role": "user", "content": "x"}, {"role": "user", "content": "y"}], "message 1 has role 'user', which follows 'user'"),
    ([{"role": "system", "content": "s"}, {"role": "assistant", "content": "y"}],
     "message 1 has role 'assistant', which follows 'system'"),
    ([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}, {"role": "system", "content": "z"}],
     "message 2 has role 'system', which follows 'assistant'"),
])
def test_roles_out_of_order_are_one_line_naming_the_row(tmp_path, messages, says):
    ok = {"messages": [{"role": "user", "content": "fine"}]}
    f = _write(tmp_path / "s.jsonl", [ok, {"messages": messages}])
    with pytest.raises(DatasetError) as info:
        build_session_dataset(f"chat-sessions:{f}", 0)
    line = str(info.value)
    assert "\n" not in line
    assert line.startswith(f"{f}:2: {says}"), line
    assert "reorder or drop that message" in line


def test_session_id_that_cannot_be_a_header_is_refused(tmp_path):
    f = _write(tmp_path / "s.jsonl", [{"id": "a\r\nX-Evil: 1", "messages": [{"role": "user", "content": "x"}]}])
    with pytest.raises(DatasetError, match=r"s\.jsonl:1: `id` .* cannot go in a request header"):
        build_session_dataset(f"chat-sessions:{f}", 0)


def test_sharegpt_sessions_keep_every_turn(tmp_path):
    conv = [{"from": "human", "value": "q1"}, {"from": "gpt", "value": "a b"},
            {"from": "human", "value": "q2"}, {"from": "gpt", "value": "c d e"},
            {"from": "human", "value": "dangling"}]  # a question with no answer ends the usable turns
    f = tmp_path / "sg.json"
    f.write_text(json.dumps([{"id": "c-1", "conversations": conv}, {"conversations": [{"from": "gpt", "value": "x"}]}]))
    ds = build_session_dataset(f"sharegpt-sessions:{f}", 0)
    assert len(ds.sessions) == 1 and len(ds) == 2
    assert [(t.content, t.max_tokens) for t in ds.sessions[0].turns] == [("q1", 2), ("q2", 3)]


def test_synthetic_sessions_lengths_and_shared_system_prompt():
    ds = build_session_dataset("synthetic-sessions:n=5,turns=3,isl=12,osl=4,system_len=6,context_len=9,seed=3", 0)
    assert len(ds) == 15
    systems = {s.system for s in ds.sessions}
    assert len(systems) == 1 and len(next(iter(systems)).split()) == 6  # one system prompt for all
    assert len({s.context for s in ds.sessions}) == 5  # each user's own context
    assert all(len(s.context.split()) == 9 for s in ds.sessions)
    assert all(len(t.content.split()) == 12 and t.max_tokens == 4 for s in ds.sessions for t in s.turns)
    # session i is the same whatever n is
    again = build_session_dataset("synthetic-sessions:n=2,turns=3,isl=12,osl=4,system_len=6,context_len=9,seed=3", 0)
    assert again.sessions == ds.sessions[:2]
    with pytest.raises(DatasetError, match="unknown parameter"):
        build_session_dataset("synthetic-sessions:n=2,tunrs=3", 0)


def test_think_time_distributions():
    rng = np.random.default_rng(0)
    assert think_time_sampler("0.25")(rng) == 0.25
    draws = [think_time_sampler("uniform(0.1,0.2)")(rng) for _ in range(200)]
    assert 0.1 <= min(draws) and max(draws) <= 0.2
    logn = np.array([think_time_sampler("lognormal(0.5,0.3)")(rng) for _ in range(2000)])
    # median of a lognormal is its scale; 2000 draws put the sample median within ~3 %
    # (its standard error is 1.2533 * sigma / sqrt(n) in log space: 0.0084; 3.5 of them)
    assert abs(np.median(logn) / 0.5 - 1) < 0.03
    for bad in ("fast", "-1", "uniform(2,1)", "lognormal(0,1)"):
        with pytest.raises(ValueError, match="think_time_s"):
            think_time_sampler(bad)


def test_config_refuses_sessions_outside_offline_and_with_concurrency():
    with pytest.raises(ValueError, match="use scenario Offline, not Server"):
        RunConfig(backend="http", scenario="Server", dataset="synthetic-sessions:n=2")
    with pytest.raises(ValueError, match="drop concurrency"):
        RunConfig(backend="http", scenario="Offline", dataset="synthetic-sessions:n=2", concurrency=2)
    with pytest.raises(ValueError, match="think_time_s 'soon'"):
        RunConfig(backend="http", scenario="Offline", dataset="synthetic-sessions:n=2", sessions={"think_time_s": "soon"})
    with pytest.raises(ValueError, match=r"tool_delay_s 'gamma\(1,2\)': write seconds"):  # the mocked tool's, named as such
        RunConfig(backend="http", scenario="Offline", dataset="synthetic-sessions:n=2", sessions={"tool_delay_s": "gamma(1,2)"})
    with pytest.raises(ValueError, match="not an HTTP header name"):
        RunConfig(backend="http", scenario="Offline", dataset="synthetic-sessions:n=2",
                  sessions={"affinity_header": "X Session"})
    # two clocks for one user's turns: refused, naming both
    with pytest.raises(ValueError, match=r"think_time_s \(0.5\) paces them from the answer: set one of them"):
        RunConfig(backend="http", scenario="Offline", dataset="synthetic-sessions:n=2",
                  sessions={"user_centric_rate": 4, "think_time_s": "0.5"})
    with pytest.raises(ValueError, match="greater than 0"):
        RunConfig(backend="http", scenario="Offline", dataset="synthetic-sessions:n=2", sessions={"user_centric_rate": 0})
    with pytest.raises(ValueError, match="drop min_duration_s, min_query_count; the dataset's n sets the run's size"):
        RunConfig(backend="http", scenario="Offline", dataset="synthetic-sessions:n=2", min_duration_s=10, min_query_count=5)
