"""harness.child.sessions.SessionHold on its own: the order turns may go out in whatever
order LoadGen issued them, the users cap, think time on the loop's timer, the history each
request carries (built by the real HTTP backend), and a failed turn failing its session."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import pytest

from backends.base import LoadContext
from backends.http import HttpBackend, HttpOptions
from harness.child.sessions import SessionHold
from harness.data.sessions import build_session_dataset


@dataclass
class Issued:  # LoadGen's QuerySample as the issue callback sees it: an id and an index
    id: int
    index: int


def _backend() -> HttpBackend:
    b = HttpBackend(HttpOptions(protocol="openai-chat", url="http://127.0.0.1:9/v1", model_name="m", check_server=False))
    b.load(LoadContext(model=None, max_batch=1, scenario="Offline"))
    return b


def _hold(spec: str, loop: asyncio.AbstractEventLoop, **kw) -> SessionHold:
    ds = build_session_dataset(spec, 0)
    args = {"users": 2, "think_time": "0", "header": "X-Session-ID", "salt": False, "seed": 0, **kw}
    return SessionHold(ds, _backend().chat_request, loop, time.perf_counter_ns, **args)


def test_turns_wait_for_their_predecessor_and_users_cap_in_dataset_order():
    loop = asyncio.new_event_loop()
    try:
        hold = _hold("synthetic-sessions:n=3,turns=2,isl=4,osl=2", loop)
        # LoadGen issues in its own order: last turn first
        hold.put([Issued(100 + i, i) for i in reversed(range(6))], 1)
        a, b = hold.take_one(), hold.take_one()
        assert (a[1], b[1]) == (0, 2)  # sessions 0 and 1 open, first turns, in dataset order
        assert hold.take_one() is None  # turn 1s wait; session 2 waits for a user
        req, error = hold.request(0)
        assert error == "" and b"X-Session-ID: s0\r\n" == req.headers
        hold.done(0, "first answer", "", time.perf_counter_ns())
        assert hold.take_one()[1] == 1  # no think time: session 0's turn 1 is ready at once
        body = json.loads(hold.request(1)[0].body)
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
        assert body["messages"][1]["content"] == "first answer"  # the server's answer, carried
        assert hold.take_one() is None  # still 2 sessions open
        hold.done(1, "second", "", time.perf_counter_ns())  # session 0 ends: session 2 gets its user
        assert hold.take_one()[1] == 4
    finally:
        loop.close()


def test_think_time_holds_the_next_turn_on_the_loop():
    think = 0.05

    async def run() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        hold = _hold("synthetic-sessions:n=1,turns=2,isl=4,osl=2", loop, think_time=str(think))
        woke = asyncio.Event()
        hold.wake = woke.set
        hold.put([Issued(1, 0), Issued(2, 1)], 1)
        hold.take_one()
        ended = time.perf_counter_ns()
        hold.done(0, "a", "", ended)
        assert hold.take_one() is None  # thinking
        await asyncio.wait_for(woke.wait(), 5)
        item = hold.take_one()
        return ended, time.perf_counter_ns() if item is not None else 0

    ended, taken = asyncio.run(run())
    assert taken - ended >= think * 1e9


def test_a_failed_turn_fails_the_rest_of_its_session(tmp_path):
    f = tmp_path / "s.jsonl"
    turns = [{"role": "user", "content": "q0"}, {"role": "assistant", "content": "a"},
             {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "q2"}]
    f.write_text(json.dumps({"id": "x", "messages": turns}) + "\n")
    loop = asyncio.new_event_loop()
    try:
        hold = _hold(f"chat-sessions:{f}", loop)
        hold.put([Issued(i, i) for i in range(3)], 1)
        hold.take_one()
        hold.done(0, "fine", "", time.perf_counter_ns())
        assert hold.take_one()[1] == 1
        hold.done(1, "", "http_503: overloaded", time.perf_counter_ns())
        item = hold.take_one()
        assert item is not None and item[1] == 2
        req, reason = hold.request(2)
        assert req is None
        assert reason == "session_failed: turn 1 of session x failed (http_503); turn 2 not sent"
        assert hold.take_one() is None
    finally:
        loop.close()


@pytest.mark.parametrize("salt", [False, True])
def test_salt_and_context_lead_the_first_turn(salt):
    loop = asyncio.new_event_loop()
    try:
        hold = _hold("synthetic-sessions:n=2,turns=1,isl=3,osl=2,system_len=4,context_len=5", loop, salt=salt)
        first = [json.loads(hold.request(i)[0].body)["messages"] for i in range(2)]
        sess = hold.data.sessions
        for s, msgs in enumerate(first):
            assert msgs[0] == {"role": "system", "content": sess[s].system}
            lead = msgs[1]["content"].split("\n\n")
            assert lead[-2:] == [sess[s].context, sess[s].turns[0].content]
            assert (len(lead) == 3) == salt  # the salt, ahead of the user's context
        if salt:
            assert first[0][1]["content"].split("\n\n")[0] != first[1][1]["content"].split("\n\n")[0]
    finally:
        loop.close()


def test_an_answer_carries_its_tool_calls_in_openais_form():
    """The next turn must hand back the calls the model made, as OpenAI's chat API takes an
    assistant message: id, type and function {name, arguments}, arguments as streamed."""
    from harness.child.sessions import assistant_message

    calls = [{"index": 0, "id": "call_a", "name": "get_weather", "arguments": '{"city": "Paris"}', "tokens": 5, "json": True},
             {"index": 1, "id": None, "name": "get_time", "arguments": "{}", "tokens": 1, "json": True}]
    m = assistant_message("", "checking", calls)
    assert m == {"role": "assistant", "content": "", "reasoning_content": "checking", "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]}
    assert assistant_message("hi") == {"role": "assistant", "content": "hi"}


def test_a_tool_call_answer_waits_the_tool_delay_and_its_results_go_back():
    """An answer with tool calls: the next turn waits the mocked tool's delay, not the think
    time (an hour here: a turn that waited it would never come), and carries the answer with
    its calls, one `tool` message per call naming it, then the next user message. The delay
    drawn is tagged on the answer's turn, once."""
    delay = 0.05
    calls = [{"index": 0, "id": "call_a", "name": "f", "arguments": "{}"},
             {"index": 1, "id": "call_b", "name": "g", "arguments": '{"x": 1}'}]

    async def run() -> tuple[int, int, dict, dict]:
        loop = asyncio.get_running_loop()
        hold = _hold("synthetic-sessions:n=1,turns=2,isl=4,osl=2", loop, think_time="3600",
                     tool_delay=str(delay), tool_result="RESULT")
        woke = asyncio.Event()
        hold.wake = woke.set
        hold.put([Issued(1, 0), Issued(2, 1)], 1)
        hold.take_one()
        ended = time.perf_counter_ns()
        hold.done(0, "", "", ended, "", calls)
        tags = hold.tags(0)
        assert hold.take_one() is None  # the tool runs
        await asyncio.wait_for(woke.wait(), 5)
        item = hold.take_one()
        assert item is not None and item[1] == 1
        return ended, time.perf_counter_ns(), tags, json.loads(hold.request(1)[0].body)

    ended, taken, tags, body = asyncio.run(run())
    assert taken - ended >= delay * 1e9
    assert tags == {"session": "s0", "turn": 0, "tool_delay_ms": delay * 1e3}
    msgs = body["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "tool", "user"]
    assert [c["id"] for c in msgs[1]["tool_calls"]] == ["call_a", "call_b"]
    assert msgs[2:4] == [{"role": "tool", "tool_call_id": "call_a", "content": "RESULT"},
                         {"role": "tool", "tool_call_id": "call_b", "content": "RESULT"}]


def test_user_centric_pacing_staggers_the_users_and_spaces_each_users_turns():
    """users=2 at 20 turns/s: the users' first turns are paced 1/20 s apart from the issue,
    each user's next turn users/rate = 100 ms after its previous one left (not after the
    answer), and a third session takes the slot a session freed, a gap after its last turn
    left. The ticks go to tokens.jsonl's tags (`paced_ns`); nothing leaves before its tick."""
    rate, users = 20.0, 2
    gap = int(users / rate * 1e9)

    async def run() -> dict[int, tuple[int, int]]:
        loop = asyncio.get_running_loop()
        hold = _hold("synthetic-sessions:n=3,turns=2,isl=4,osl=2", loop, users=users, rate=rate)
        woke = asyncio.Event()
        hold.wake = woke.set
        issued = time.perf_counter_ns()
        hold.put([Issued(100 + i, i) for i in range(6)], issued)
        sent: dict[int, tuple[int, int]] = {}  # index -> the clock just before and just after take_one gave it

        async def next_one() -> int:
            while True:
                before = time.perf_counter_ns()
                item = hold.take_one()
                if item is not None:
                    sent[item[1]] = (before, time.perf_counter_ns())
                    return item[1]
                woke.clear()
                await asyncio.wait_for(woke.wait(), 5)

        order = []
        order.append(await next_one())  # session 0's first turn, at the issue
        hold.done(order[-1], "a", "", time.perf_counter_ns())  # answered at once: its next turn still waits a gap
        order.append(await next_one())  # session 1's first turn, 50 ms after the issue
        order.append(await next_one())  # session 0's second turn, a gap after its first left
        hold.done(order[-2], "b", "", time.perf_counter_ns())
        hold.done(order[-1], "c", "", time.perf_counter_ns())  # session 0 ends: its slot is free a gap later
        order.append(await next_one())  # session 1's second turn
        order.append(await next_one())  # session 2's first turn, on session 0's slot
        hold.done(order[-2], "d", "", time.perf_counter_ns())
        hold.done(order[-1], "e", "", time.perf_counter_ns())
        order.append(await next_one())
        assert order == [0, 2, 1, 3, 4, 5]
        return {i: (sent[i], hold.tags(i)["paced_ns"]) for i in order} | {-1: ((issued, issued), issued)}

    at = asyncio.run(run())
    issued = at.pop(-1)[0][0]
    for i, ((_, after), paced) in at.items():
        assert after >= paced, i  # never before its tick

    def a_gap_after(prev: int, nxt: int) -> bool:  # the hold read its clock inside take_one
        return at[prev][0][0] + gap <= at[nxt][1] <= at[prev][0][1] + gap

    assert at[0][1] == issued and at[2][1] == issued + int(1e9 / rate)  # staggered 1/rate
    assert a_gap_after(0, 1) and a_gap_after(2, 3)  # start to start, not from the answer
    assert a_gap_after(1, 4)  # the freed slot: a gap after its last session's last turn left
    assert a_gap_after(4, 5)
