"""Multi-turn sessions against the truth server's sessions mode (tests/support/http_servers.py
`SessionTruth`): every carried history checked by the server, per-turn TTFT against what the
server did, think time and the users cap from the records, a failing turn failing its
session. Each run is a real LoadGen Offline test in a child process (harness.run.runner)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from rich.console import Console

from harness.errors import ConfigError
from harness.report.markdown import render_markdown
from harness.report.terminal import render
from harness.results.records import read_records
from harness.results.token_metrics import read_token_entries
from tests.support.http_servers import ServerThread, SessionTruth, Timing, openai_app
from tests.support.report_runs import SCHEMA

THINK_S = 0.03
USERS = 3


def _run(run_harness: Any, srv: ServerThread, dataset: str, **sessions: Any) -> tuple[Path, dict[str, Any]]:
    return run_harness(
        backend="http", scenario="Offline", dataset=dataset,
        backend_options={"protocol": "openai-chat", "url": srv.url + "/v1"},
        sessions={"users": USERS, "think_time_s": str(THINK_S), **sessions},
        use_token_latencies=True,
    )  # fmt: skip


def _schema_checked_terminal(s: dict[str, Any], run_dir: Path) -> str:
    """The summary holds to the schema, and its terminal view fits 80 columns: that view's text."""
    schema = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    assert [f"{list(e.path)}: {e.message}" for e in schema.iter_errors(s)] == []
    console = Console(width=80, record=True, file=io.StringIO())
    render(s, console, str(run_dir))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    return text


def test_sessions_carry_history_pace_and_match_the_servers_ttft(run_harness):
    truth = SessionTruth()
    # a prefill that costs 0.5 ms a prompt word not already cached: later turns are longer
    # but their history is cached, so only their new words are paid for
    t = Timing(ttft_ms=40, tpot_ms=3, ttft_ms_per_prompt_token=0.5)
    with ServerThread(openai_app(t, sessions=truth)) as srv:
        run_dir, s = _run(run_harness, srv, "synthetic-sessions:n=6,turns=3,isl=20,osl=6,system_len=10")
    assert truth.mismatches == 0, truth.mismatch_notes
    assert len(truth.turns) == 18  # every turn reached the server once, with its session header
    ses = s["sessions"]
    assert (ses["count"], ses["completed"], ses["turns_completed"], ses["failed"]) == (6, 6, 18, [])
    # no tool calls: no tool step and no tool message (the run is as it was before tools)
    assert ses["tool_steps"] == {"count": 0, "calls": 0, "delay_ms": {"p50": None, "p99": None},
                                 "gap_ms": {"min": None, "p50": None, "p99": None}}
    assert not [m for msgs in truth.received.values() for m in msgs if m.get("role") == "tool"]
    # LoadGen issued each turn exactly once, in its one Offline query
    eff = s["loadgen"]["effective_settings"]
    assert (eff["samples_per_query"], eff["performance_issue_unique"], s["harness"]["samples"]) == (18, True, 18)
    assert sorted(read_records(run_dir).columns["sample_index"]) == list(range(18))
    # think time respected: each turn left at least THINK_S after its predecessor's answer,
    # from the records themselves (the hold re-checks the clock, so never earlier)
    assert ses["think_gap_ms"]["min"] >= THINK_S * 1e3
    rec = read_records(run_dir).columns
    entries = {e["query_id"]: e for e in read_token_entries(run_dir) if "session" in e}
    by_session: dict[str, dict[int, int]] = {}
    for i, q in enumerate(rec["query_id"]):
        e = entries[int(q)]
        by_session.setdefault(e["session"], {})[e["turn"]] = i
    gaps = [rec["dispatch_ns"][ix[k + 1]] - rec["complete_ns"][ix[k]] for ix in by_session.values() for k in range(2)]
    assert min(gaps) >= THINK_S * 1e9
    # users cap: never more than USERS sessions between their first dispatch and last answer,
    # and all USERS used (6 sessions issued at once)
    assert ses["open_max"] == USERS
    # per-turn TTFT against what the server did for those very turns, on one clock, request by
    # request. The server's one thread takes simultaneous first turns ms apart (the client
    # rightly sees that), so a turn's truth can be two clusters 10 ms apart: a p50 set against
    # a p50 then compares different requests, and one request read a ms late moves it by the
    # gap between the clusters (seen once in CI). Paired, each request's first token was read
    # after the server began writing it (no client is early: no tolerance), and at the median
    # a turn's reading lags the server's stamp after that write by at most the single-turn
    # fidelity bound of test_http_truth (5 % of the truth's p50); its p50 reads as the truth's.
    row_of = {(e["session"], e["turn"]): i for i, e in ((i, entries[int(q)]) for i, q in enumerate(rec["query_id"]))}
    for row in ses["by_turn"]:
        k = row["turn"]
        mine = {key: i for key, i in row_of.items() if key[1] == k}
        served = {key: truth.served[key] for key in mine}
        first = {key: int(rec["first_token_ns"][i]) for key, i in mine.items()}
        assert all(first[key] >= served[key].first_write_began_ns for key in mine), (k, first, served)
        lag_ms = np.median([(first[key] - served[key].first_write_ns) / 1e6 for key in mine])
        truth_ms = sorted((served[key].first_write_ns - rec["dispatch_ns"][i]) / 1e6 for key, i in mine.items())
        truth_p50 = truth_ms[int(0.5 * len(truth_ms))]  # nearest rank, as the summary's
        assert lag_ms <= 0.05 * truth_p50, (k, lag_ms, row, truth_ms)
        ours_ms = sorted((first[key] - rec["dispatch_ns"][i]) / 1e6 for key, i in mine.items())
        assert row["ttft_ms"]["p50"] == pytest.approx(ours_ms[int(0.5 * len(ours_ms))]), (row, ours_ms)
        for key, i in mine.items():
            injected = t.ttft_ms + t.ttft_ms_per_prompt_token * (served[key].prompt_words - served[key].cached_words)
            assert (first[key] - rec["dispatch_ns"][i]) / 1e6 >= injected, (key, injected)
        cached = [v.cached_words for (sid, kk), v in truth.served.items() if kk == k]
        assert row["cached_tokens_mean"] == pytest.approx(np.mean(cached))  # the server's usage, carried
        words = [v.prompt_words for (sid, kk), v in truth.served.items() if kk == k]
        assert row["input_tokens_mean"] == pytest.approx(np.mean(words))
    # later turns are longer, yet cheaper to prefill: the cache holds their history
    turns = ses["by_turn"]
    assert turns[2]["input_tokens_mean"] > turns[1]["input_tokens_mean"] > turns[0]["input_tokens_mean"]
    assert turns[2]["cached_tokens_mean"] > turns[1]["cached_tokens_mean"] > turns[0]["cached_tokens_mean"]


@pytest.mark.parallel
def test_a_server_that_drops_the_history_is_counted(run_harness):
    truth = SessionTruth(drop_history=True)
    with ServerThread(openai_app(Timing(ttft_ms=5, tpot_ms=1), sessions=truth)) as srv:
        _run(run_harness, srv, "synthetic-sessions:n=4,turns=3,isl=8,osl=3")
    # every turn after the first reached the server without its history
    assert truth.mismatches == 4 * 2, truth.mismatch_notes


@pytest.mark.parallel
def test_a_failing_turn_fails_its_session_and_later_turns_are_not_sent(run_harness, tmp_path):
    def session(sid: str, second: str) -> dict[str, Any]:
        return {"id": sid, "messages": [{"role": "user", "content": "hello there"},
                                        {"role": "assistant", "content": "hi"},
                                        {"role": "user", "content": second},
                                        {"role": "assistant", "content": "ok"},
                                        {"role": "user", "content": "and then"}]}

    f = tmp_path / "chats.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in (
        session("good-1", "go on"), session("bad", "please @http_503"), session("good-2", "more"))))
    truth = SessionTruth()
    with ServerThread(openai_app(Timing(ttft_ms=5, tpot_ms=1), sessions=truth)) as srv:
        run_dir, s = _run(run_harness, srv, f"chat-sessions:{f}")
    ses = s["sessions"]
    assert (ses["count"], ses["completed"], ses["turns"], ses["turns_completed"], ses["turns_not_sent"]) == (3, 2, 9, 7, 1)
    assert len(ses["failed"]) == 1
    failed = ses["failed"][0]
    assert (failed["session"], failed["turn"]) == ("bad", 1) and failed["reason"].startswith("http_503")
    assert ("bad", 2) not in truth.turns and truth.mismatches == 0  # never sent
    rec = read_records(run_dir).columns
    reasons = sorted(str(e) for e in rec["error"] if e)
    assert reasons[1] == "session_failed: turn 1 of session bad failed (http_503); turn 2 not sent", reasons
    assert s["harness"]["failures_by_reason"] == {"http_503": 1, "session_failed": 1}
    # the section is what the schema says, and the views show it (the terminal's in 80 columns)
    text = _schema_checked_terminal(s, run_dir)
    assert "session bad failed at turn 1: http_503" in text
    assert re.search(r"^3 +2 +1 +7/9 ", text, re.M), text  # sessions, done, failed, turns ok
    assert "think min ms" in text and "idle min" not in text  # think times, not user-centric ticks
    from harness.analysis.run_data import load_run

    md = render_markdown(load_run(run_dir, s))
    assert "### Sessions" in md and "| 1 | 2/3 |" in md  # turn 1: the bad session's failed


@pytest.mark.parallel
def test_sessions_need_openai_chat(run_harness):
    with ServerThread(openai_app(Timing())) as srv, pytest.raises(ConfigError) as info:
        run_harness(backend="http", scenario="Offline", dataset="synthetic-sessions:n=2,turns=2",
                    backend_options={"protocol": "openai-completions", "url": srv.url + "/v1"})
    assert "\n" not in str(info.value)
    assert "with protocol openai-completions takes none; use backend http with protocol=openai-chat" in str(info.value)


@pytest.mark.parallel
@pytest.mark.parametrize("salt", [False, True])
def test_salt_defeats_the_prefix_shared_across_sessions(run_harness, tmp_path, salt):
    same = [{"role": "system", "content": "you are terse"}, {"role": "user", "content": "tell me a long story now"}]
    f = tmp_path / "same.jsonl"
    f.write_text("".join(json.dumps({"id": sid, "messages": same}) + "\n" for sid in ("first", "second")))
    truth = SessionTruth(header="X-Conv")
    with ServerThread(openai_app(Timing(ttft_ms=5, tpot_ms=1), sessions=truth)) as srv:
        _, s = _run(run_harness, srv, f"chat-sessions:{f}", users=1, salt=salt, affinity_header="X-Conv")
    assert sorted(truth.turns) == [("first", 0), ("second", 0)]  # each id in the configured header
    cached, words = truth.served[("second", 0)].cached_words, truth.served[("second", 0)].prompt_words
    # users=1: the second session starts after the first ended, whose prompt it repeats. The
    # server caches all of it but the last word; with a salt after the system prompt, only
    # the system prompt's 3 words are shared.
    assert cached == (3 if salt else words - 1), (cached, words)
    assert s["sessions"]["by_turn"][0]["cached_tokens_mean"] == pytest.approx((0 + cached) / 2)


@pytest.mark.parallel
def test_users_beyond_the_backends_in_flight_limit_are_refused(run_harness):
    # the extra users' turns would wait for a pooled connection inside their timed TTFT
    with ServerThread(openai_app(Timing())) as srv, pytest.raises(ConfigError) as info:
        run_harness(backend="http", scenario="Offline", dataset="synthetic-sessions:n=4,turns=2",
                    backend_options={"protocol": "openai-chat", "url": srv.url + "/v1", "max_in_flight": 2},
                    sessions={"users": 3})
    assert str(info.value).startswith("sessions.users 3: the backend serves at most 2 requests at once")


@pytest.mark.parallel
@pytest.mark.parametrize("carry", [False, True])
def test_a_reasoning_answer_goes_back_as_the_server_sent_it(run_harness, carry):
    """A reasoning model's turn: the next turn carries the answer text (the server checks it
    turn by turn) and, with carry_reasoning, the reasoning as `reasoning_content`, exactly as
    streamed; without it no reasoning goes back (chat templates drop it)."""
    truth = SessionTruth()
    t = Timing(ttft_ms=5, tpot_ms=1, reasoning_tokens=3, reasoning_ms=10)
    with ServerThread(openai_app(t, sessions=truth)) as srv:
        _, s = _run(run_harness, srv, "synthetic-sessions:n=2,turns=3,isl=8,osl=4", carry_reasoning=carry)
    assert truth.mismatches == 0, truth.mismatch_notes
    assert s["sessions"]["turns_completed"] == 6 and s["tokens"]["reasoning"]["reasoning_tokens"] == 6 * 3
    carried = [m for msgs in truth.received.values() for m in msgs if m.get("role") == "assistant"]
    assert len(carried) == 2 * (1 + 2)  # turns 1 and 2 of each session carry 1 and 2 answers
    want = " r0 r1 r2" if carry else None  # the truth server's reasoning events, joined
    assert [m.get("reasoning_content") for m in carried] == [want] * len(carried)


TOOL_RESULT = '{"temp_c": 21}'


def test_tool_calls_get_the_mocked_tools_results_after_its_delay(run_harness):
    """Turns 0 and 2 of each session are answered with a tool call (the truth server's
    `tool_turns`): turns 1 and 3 must carry that answer with its call id and one `tool`
    message answering it (the server checks both), and leave the tool's delay after the
    answer instead of the think time. The delay drawn per step is in tokens.jsonl; the
    records say when the answer ended and the next turn left. The run then renders: the
    terminal's tool-steps table in 80 columns, the HTML's by-turn figure off its frame."""
    think_s, tool = 0.5, (0.04, 0.06)
    truth = SessionTruth(tool_turns=(0, 2))
    with ServerThread(openai_app(Timing(ttft_ms=5, tpot_ms=1), sessions=truth)) as srv:
        run_dir, s = _run(run_harness, srv, "synthetic-sessions:n=4,turns=4,isl=8,osl=3", think_time_s=str(think_s),
                          tool_delay_s=f"uniform({tool[0]},{tool[1]})", tool_result=TOOL_RESULT)
    assert truth.mismatches == 0, truth.mismatch_notes
    assert s["sessions"]["turns_completed"] == 16
    for (sid, k), msgs in truth.received.items():
        results = [m for m in msgs if m.get("role") == "tool"]
        # one result per earlier tool-call turn, naming its call, holding the configured text
        assert [(m["tool_call_id"], m["content"]) for m in results] == [
            (f"call_{sid}_{j}", TOOL_RESULT) for j in (0, 2) if j < k], (sid, k, msgs)
    rec = read_records(run_dir).columns
    entries = {e["query_id"]: e for e in read_token_entries(run_dir) if "session" in e}
    row = {(entries[int(q)]["session"], entries[int(q)]["turn"]): i for i, q in enumerate(rec["query_id"])}
    delays, gaps = [], []
    for (sid, k), i in row.items():
        e = entries[int(rec["query_id"][i])]
        if k in (0, 2):  # a tool step: its call recorded, the delay drawn within the distribution's range
            assert [c["id"] for c in e["tool_calls"]] == [f"call_{sid}_{k}"]
            assert tool[0] * 1e3 <= e["tool_delay_ms"] <= tool[1] * 1e3
            gap = rec["dispatch_ns"][row[(sid, k + 1)]] - rec["complete_ns"][i]
            # never earlier than the drawn delay (the hold re-checks the clock); and below the
            # think time: had the hold waited the think time instead, or both, the gap would be
            # at least think_s. The 440 ms between them is the room for a late event loop.
            assert e["tool_delay_ms"] * 1e6 <= gap < think_s * 1e9, (sid, k, e["tool_delay_ms"], gap)
            delays.append(e["tool_delay_ms"])
            gaps.append(gap / 1e6)
        else:
            assert "tool_delay_ms" not in e and "tool_calls" not in e
    steps = s["sessions"]["tool_steps"]
    assert (steps["count"], steps["calls"]) == (8, 8)
    assert len(set(delays)) == 8  # drawn per step, seeded per session and turn
    nearest = sorted(delays)[int(0.5 * 8)]  # nearest rank, as the summary's
    assert steps["delay_ms"]["p50"] == pytest.approx(nearest)
    assert steps["gap_ms"]["min"] == pytest.approx(min(gaps))
    # the think gaps are turn 1 -> 2 only, and each waited the think time
    assert s["sessions"]["think_gap_ms"]["min"] >= think_s * 1e3
    text = _schema_checked_terminal(s, run_dir)
    assert re.search(r"^8 +8 +\d+\.\d{3} +\d+\.\d{3} +\d+\.\d{3} +\d+\.\d{3}\s*$", text, re.M), text  # steps, calls
    from harness.analysis.run_data import load_run
    from harness.report.html import render_html
    from harness.report.session_plot import turns_plot
    from tests.support.plot_frames import check_frames, check_zero

    page = render_html(load_run(run_dir, s))
    assert '<img alt="TTFT and input tokens by turn" src="data:image/png;base64,' in page
    axes = [("turns", ax) for ax in turns_plot(s["sessions"]).figure.axes]  # the figure the page embeds
    assert check_frames(axes) == [] and check_zero(axes) == []
    for ax in axes:  # counts and times from zero
        assert ax[1].get_ylim()[0] == 0
    top = axes[0][1]
    p50 = top.get_lines()[0].get_ydata()
    assert list(p50) == pytest.approx([r["ttft_ms"]["p50"] for r in s["sessions"]["by_turn"]])


@pytest.mark.parallel
def test_the_truth_server_counts_missing_or_wrong_tool_results():
    """The checker itself: a turn after a tool-call answer without its tool message, with
    a wrong call id, or with a tool message after the next user message, is a mismatch."""
    truth = SessionTruth()
    truth.answered("s", 0, "q0", ("q0",), "")
    truth.tool_ids[("s", 0)] = ["call_s_0"]
    call = {"id": "call_s_0", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    answer = {"role": "assistant", "content": "", "tool_calls": [call]}
    h = {"X-Session-ID": "s"}
    truth.check(h, [{"role": "user", "content": "q0"}, answer, {"role": "user", "content": "q1"}])
    truth.check(h, [{"role": "user", "content": "q0"}, answer,
                    {"role": "tool", "tool_call_id": "call_x", "content": "{}"}, {"role": "user", "content": "q1"}])
    truth.check(h, [{"role": "user", "content": "q0"}, answer, {"role": "user", "content": "q1"},
                    {"role": "tool", "tool_call_id": "call_s_0", "content": "{}"}])
    truth.check(h, [{"role": "user", "content": "q0"}, answer,
                    {"role": "tool", "tool_call_id": "call_s_0", "content": "{}"}, {"role": "user", "content": "q1"}])
    assert truth.mismatches == 3, truth.mismatch_notes
    assert "tool results for []" in truth.mismatch_notes[0] and "['call_x']" in truth.mismatch_notes[1]
    assert "follows no answer" in truth.mismatch_notes[2]


@pytest.mark.parallel
def test_a_chat_file_asks_for_tool_calls_and_bad_arguments_fail_the_session(run_harness, tmp_path):
    """"@tool_call" in a chat file's user message: the truth server answers it with a tool
    call, and the next turn carries the default result. "@tool_bad_args": arguments that
    are not JSON fail the request (malformed_tool_call) and so the session; no tool runs
    and its next turn is not sent."""
    def session(sid: str, *users: str) -> dict[str, Any]:
        messages: list[dict[str, str]] = []
        for u in users:
            messages += [{"role": "user", "content": u}, {"role": "assistant", "content": "x"}]
        return {"id": sid, "messages": messages[:-1]}

    f = tmp_path / "tools.jsonl"
    # the bad call on a later turn: the warm-up sends the first `users` turns of the file
    f.write_text("".join(json.dumps(r) + "\n" for r in (
        session("calls", "weather in Paris? @tool_call", "thanks"),
        session("bad", "hello", "weather? @tool_bad_args", "thanks"))))
    truth = SessionTruth()
    with ServerThread(openai_app(Timing(ttft_ms=5, tpot_ms=1), sessions=truth)) as srv:
        _, s = _run(run_harness, srv, f"chat-sessions:{f}", tool_delay_s="0.01")
    assert truth.mismatches == 0, truth.mismatch_notes
    assert truth.received[("calls", 1)][2] == {"role": "tool", "tool_call_id": "call_calls_0", "content": '{"ok": true}'}
    assert ("bad", 2) not in truth.received
    ses = s["sessions"]
    assert [(x["session"], x["turn"], x["reason"].split(":")[0]) for x in ses["failed"]] == [("bad", 1, "malformed_tool_call")]
    assert (ses["tool_steps"]["count"], ses["tool_steps"]["calls"], ses["turns_not_sent"]) == (1, 1, 1)
    assert ses["tool_steps"]["gap_ms"]["min"] >= 10


def _pacing_rows(run_dir: Path) -> list[tuple[int, int, int, int, bool]]:
    """(session order, turn, dispatch, paced tick, tick moved) per turn, from the records and tokens.jsonl."""
    rec = read_records(run_dir).columns
    entries = {e["query_id"]: e for e in read_token_entries(run_dir) if "session" in e}
    return [(int(entries[int(q)]["session"][1:]), entries[int(q)]["turn"], int(rec["dispatch_ns"][i]),
             entries[int(q)]["paced_ns"], bool(entries[int(q)].get("paced_waited"))) for i, q in enumerate(rec["query_id"])]


def test_user_centric_pacing_offers_its_rate_with_each_users_turns_a_gap_apart(run_harness):
    """3 users at 15 turns/s against a server that answers well inside the 200 ms gap: the
    users' first turns are ticked 1/15 s apart, every turn leaves at or after its tick, a
    user's turns start at least 200 ms apart (start to start, not from the answer), no tick
    waits for an answer, and the rate achieved is the one offered within what the measured
    lateness allows."""
    rate, users, n, turns = 15.0, 3, 6, 3
    gap_ns = users / rate * 1e9
    truth = SessionTruth()
    with ServerThread(openai_app(Timing(ttft_ms=20, tpot_ms=3), sessions=truth)) as srv:
        run_dir, s = _run(run_harness, srv, f"synthetic-sessions:n={n},turns={turns},isl=8,osl=6",
                          think_time_s="0", user_centric_rate=rate)
    assert truth.mismatches == 0, truth.mismatch_notes
    jsonschema.validate(s, json.loads(SCHEMA.read_text()))
    assert s["schedule"]["kind"] == "sessions, 3 users at once, user-centric at 15 turns/s"
    rec = read_records(run_dir).columns
    answer_ms = (rec["complete_ns"] - rec["dispatch_ns"]).max() / 1e6
    assert answer_ms < gap_ns / 1e6, f"the server answered in {answer_ms:.1f} ms, past the {gap_ns / 1e6:g} ms gap"
    rows = _pacing_rows(run_dir)
    pace = s["sessions"]["pacing"]
    assert (pace["mode"], pace["rate_per_s"], pace["gap_s"], pace["turns"]) == ("user_centric", rate, users / rate, n * turns)
    assert pace["waited_for_answer"] == 0 and not any(r[4] for r in rows)
    assert all(d >= p for _, _, d, p, _ in rows)  # nothing before its tick
    late = [(d - p) / 1e6 for _, _, d, p, _ in rows]
    assert pace["late_ms"]["max"] == pytest.approx(max(late))
    firsts = sorted(p for sess, k, _, p, _ in rows if k == 0 and sess < users)
    assert [p - firsts[0] for p in firsts] == [int(j * 1e9 / rate) for j in range(users)]  # staggered 1/rate
    assert pace["start_gap_min_ms"] >= gap_ns / 1e6  # start to start
    # the last tick of the last-staggered user is 2/rate + 5 gaps after the first; each of its
    # 6 turns may leave up to the measured worst lateness after its tick
    ideal = (users - 1) / rate + (n // users * turns - 1) * gap_ns / 1e9
    worst = pace["late_ms"]["max"] / 1e3
    span = n * turns - 1
    assert span / (ideal + n // users * turns * worst) <= pace["achieved_per_s"] <= span / (ideal - worst), pace
    text = io.StringIO()
    render(s, Console(file=text, width=80), str(run_dir))
    out = text.getvalue()
    assert "user-centric pacing" in out and "…" not in out and all(len(line) <= 80 for line in out.splitlines())
    # no think time here: the answer-to-next-turn gap is the wait for the user's tick
    assert "idle min ms" in out and "think min" not in out
    from harness.analysis.run_data import load_run

    assert "user-centric pacing" in render_markdown(load_run(run_dir, s))


@pytest.mark.parallel
def test_user_centric_turns_wait_for_a_slow_answer_and_say_so(run_harness):
    """The same pacing, 100 ms gaps, against a server slower than the gap: each later turn
    and each session that takes a freed user waits for the answer before it (a user cannot
    ask before reading), and is counted as waited; the users' first sessions are not."""
    rate, users, n, turns = 30.0, 3, 6, 3
    truth = SessionTruth()
    with ServerThread(openai_app(Timing(ttft_ms=150, tpot_ms=5), sessions=truth)) as srv:
        run_dir, s = _run(run_harness, srv, f"synthetic-sessions:n={n},turns={turns},isl=8,osl=6",
                          think_time_s="0", user_centric_rate=rate)
    assert truth.mismatches == 0, truth.mismatch_notes
    rows = _pacing_rows(run_dir)
    pace = s["sessions"]["pacing"]
    # all but the users' first turns (injected 150 ms TTFT > the 100 ms gap)
    assert pace["waited_for_answer"] == n * turns - users == sum(r[4] for r in rows)
    assert not any(w for sess, k, _, _, w in rows if sess < users and k == 0)
    rec = read_records(run_dir).columns
    answer_min_ms = (rec["complete_ns"] - rec["dispatch_ns"]).min() / 1e6
    assert pace["start_gap_min_ms"] >= answer_min_ms  # each waited for an answer at least that long
    assert all(d >= p for _, _, d, p, _ in rows)
