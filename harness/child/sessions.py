"""Multi-turn sessions in the event-loop SUT: which turn may go out when, and its request.

LoadGen knows no dependency between samples, so the mapping is the harness's: one sample is
one turn (harness.data.sessions), the run is Offline, and LoadGen issues every turn at once.
`SessionHold` stands in for the SUT's issue queue and holds turn k of a session back until
turn k-1 has completed and a think time has passed; at most `users` sessions are open at
once (opened in dataset order whatever order LoadGen issued them in, so a seeded run
starts the same sessions together; a session stays open through its think times until its last
turn ends). LoadGen's latencies therefore count from its Offline issue and include the time
a turn was held; the harness's per-turn figures count from dispatch.

Turn k's request is built when it is sent (`request`), from the session's turns before it
as the server answered them: the user messages and the server's answer texts (the answers in
a dataset file are never sent). A turn that fails ends its session: the later turns are
not sent, and complete to LoadGen as failed with a reason naming the turn that failed.

The agent step is a mocked tool: when an answer carries tool calls, the next turn waits the
tool's delay instead of the think time, and its history carries, after that answer (with
its `tool_calls`), one `tool` message per call holding the fixed `tool_result`, then the
next user message. The delay drawn is kept in tokens.jsonl on the answer's turn
(`tool_delay_ms`), so the summary can check the gap against it.

User-centric pacing (`rate`, AIPerf's user-centric mode) replaces the think time: each of the
`users` is a slot whose turns start `users / rate` seconds apart, start to start, the slots
staggered `1 / rate` apart from LoadGen's issue, so the users together offer `rate` turns a
second whatever the server's answer times (the gap a cache must hold a session's history
for is fixed). A turn whose previous answer (and tool) ends after its tick goes at the
answer: a user cannot ask before reading. A session that ends frees its slot for the next
session at that slot's next tick (or at its end, if later). Each turn's tick, so moved, is
kept in tokens.jsonl (`paced_ns`, on the records' clock; `paced_waited` when the answer or
the slot's last session moved it), so the summary measures the harness's own lateness apart
from the server's.
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from harness.data.sessions import SessionDataset, think_time_sampler

# think-time and tool-delay draws, apart from the dataset's streams and from each other
_THINK_STREAM, _TOOL_STREAM = 60_013, 60_017

#: the reason of a turn not sent because an earlier one of its session failed
NOT_SENT = "session_failed"


def session_settings(settings: Any, dataset: Any) -> None:
    """LoadGen must issue each turn exactly once: every turn loaded, each index once, and
    as many samples as turns (no duration to fill: a session's length is its own)."""
    n = len(dataset)
    settings.performance_issue_unique = True
    settings.min_query_count = settings.max_query_count = n
    settings.min_duration_ms = 0
    settings.max_duration_ms = 0


class SessionHold:
    """The SUT's queue for a session dataset: `put` takes LoadGen's issued samples,
    `take_one` gives the next turn that may go out now (or None), `done` is told each
    turn's end. `wake` (the SUT's worker start) is called when a held turn becomes ready."""

    def __init__(self, dataset: SessionDataset, build: Callable[[list[dict[str, Any]], int | None, dict[str, str]], Any],
                 loop: asyncio.AbstractEventLoop, clock: Callable[[], int], *, users: int, think_time: str,
                 header: str | None, salt: bool, seed: int,
                 carry_reasoning: bool = False, tool_delay: str = "0", tool_result: str = '{"ok": true}',
                 rate: float | None = None) -> None:
        self.data = dataset
        self._build = build
        self._loop = loop
        self._now = clock
        self.users = users
        self._think = think_time_sampler(think_time)
        self._tool_delay = think_time_sampler(tool_delay, "tool_delay_s")
        self._tool_result = tool_result
        self._tool_waits: dict[int, int] = {}  # index -> the tool's delay (ns) after its answer, until tagged
        self._header = header
        self._seed = seed
        self._carry_reasoning = carry_reasoning
        self._salt = [hashlib.sha256(f"{seed}:{s.id}".encode()).hexdigest()[:16] if salt else None
                      for s in dataset.sessions]
        n = len(dataset.sessions)
        self._issued: dict[int, tuple[int, int, int]] = {}  # index -> (query id, index, issue time), not yet sent
        # per session, per answered turn: the messages that follow its user message (the
        # answer, then a tool message per tool call)
        self._answers: list[list[list[dict[str, Any]]]] = [[] for _ in range(n)]
        self._next = [0] * n  # the next turn to send
        self._ready_at = [0] * n  # perf_counter_ns the next turn may go, once issued
        self._busy = [False] * n  # a turn in flight
        self._state = [0] * n  # 0 not opened, 1 open, 2 ended
        self._failed: dict[int, str] = {}  # session -> why it ended early
        self._open = 0
        self._fresh: list[int] = []  # a heap: sessions whose first turn is issued, waiting for a user
        self._ready: deque[int] = deque()  # open sessions whose next turn may go now
        self._failing: deque[tuple[int, int, int]] = deque()  # turns of failed sessions: completed unsent
        self.wake: Callable[[], None] = lambda: None
        # user-centric pacing: a heap of (tick, slot) of the free user slots, filled at the first issue
        self._rate = rate
        self._gap = int(users / rate * 1e9) if rate else 0
        self._slots: list[tuple[int, int, bool]] | None = None
        self._slot_of = [-1] * n
        self._sent_at = [0] * n  # a session's last dispatch
        self._tick = [0] * n  # the tick its next turn is paced for
        self._waited = [False] * n  # that tick was moved to the answer (or to the slot's freeing)
        self._paced: dict[int, tuple[int, bool]] = {}  # index -> (its tick, moved), until tagged
        self._armed = False  # a timer is set for the first free slot's tick

    # --- the queue -----------------------------------------------------------------------
    def put(self, samples: Any, issued: int) -> None:
        if self._rate and self._slots is None:
            self._slots = [(issued + int(j * 1e9 / self._rate), j, False) for j in range(self.users)]
        for s in samples:
            self._add((s.id, s.index, issued))

    def extend(self, items: list[tuple[int, int, int]]) -> None:  # pragma: no cover - client shards are refused
        for item in items:
            self._add(item)

    def _add(self, item: tuple[int, int, int]) -> None:
        ref = self.data.refs[item[1]]
        s = ref.session
        if s in self._failed:
            self._failing.append(item)
            return
        self._issued[item[1]] = item
        if ref.turn != self._next[s]:
            return  # a later turn: it waits for the ones before it
        if ref.turn == 0 and self._state[s] == 0:
            heapq.heappush(self._fresh, s)
        elif self._state[s] == 1 and not self._busy[s]:
            self._when_due(s)

    def take_one(self) -> tuple[int, int, int] | None:
        if self._failing:
            return self._failing.popleft()
        if self._ready:
            s = self._ready.popleft()
        elif self._fresh and self._open < self.users:
            if self._slots is not None and not self._slot_due():
                return None
            s = heapq.heappop(self._fresh)
            self._state[s] = 1
            self._open += 1
            if self._slots is not None:
                self._tick[s], self._slot_of[s], self._waited[s] = heapq.heappop(self._slots)
        else:
            return None
        self._busy[s] = True
        index = self.data.first[s] + self._next[s]
        if self._slots is not None:
            self._sent_at[s] = self._now()
            self._paced[index] = (self._tick[s], self._waited[s])
        return self._issued.pop(index)

    def _slot_due(self) -> bool:
        """User-centric: is the first free slot's tick here? If not, wake the SUT then."""
        wait = self._slots[0][0] - self._now() if self._slots else 0
        if wait <= 0:
            return bool(self._slots)
        if not self._armed:
            self._armed = True
            self._loop.call_later(wait / 1e9, self._fire)
        return False

    def _fire(self) -> None:
        self._armed = False  # a timer may fire a little early: take_one checks the clock again
        self.wake()

    def _when_due(self, s: int) -> None:
        wait = self._ready_at[s] - self._now()
        if wait <= 0:
            self._ready.append(s)
            self.wake()
        else:  # a timer may fire a little early: _when_due checks the clock again
            self._loop.call_later(wait / 1e9, self._when_due, s)

    # --- a turn's request and its end ---------------------------------------------------
    def request(self, index: int) -> tuple[Any, str]:
        """(the request, "") for a turn that goes out now; (None, reason) for a turn of a
        failed session, which is completed as failed without a request."""
        ref = self.data.refs[index]
        if ref.session in self._failed:
            return None, f"{NOT_SENT}: {self._failed[ref.session]}; turn {ref.turn} not sent"
        sess = self.data.sessions[ref.session]
        messages: list[dict[str, Any]] = []
        if sess.system is not None:
            messages.append({"role": "system", "content": sess.system})
        for k in range(ref.turn + 1):
            content = sess.turns[k].content
            if k == 0:
                # The session's own lead: the salt (no two sessions share a prefix past the
                # system prompt), then the user's context.
                lead = [x for x in (self._salt[ref.session] and f"[{self._salt[ref.session]}]", sess.context) if x]
                content = "\n\n".join([*lead, content])
            messages.append({"role": "user", "content": content})
            if k < ref.turn:
                messages.extend(self._answers[ref.session][k])
        headers = {self._header: sess.id} if self._header else {}
        return self._build(messages, sess.turns[ref.turn].max_tokens, headers), ""

    def done(self, index: int, text: str, error: str, at: int, reasoning: str = "",
             tool_calls: list[dict[str, Any]] | None = None) -> None:
        """Turn `index` ended at `at` (the recorded completion time) with `text` (and the
        reasoning and tool calls the stream carried), or failed."""
        ref = self.data.refs[index]
        s = ref.session
        if self._state[s] != 1:
            return  # a turn of a session that had already failed: completed unsent
        self._busy[s] = False
        if error:
            self._failed[s] = f"turn {ref.turn} of session {self.data.sessions[s].id} failed ({error.split(':')[0]})"
            late = [self._issued.pop(i) for i in range(index + 1, self.data.first[s] + len(self.data.sessions[s].turns))
                    if i in self._issued]
            self._failing.extend(late)
            self._end(s, at)
            return
        answer = assistant_message(text, reasoning if self._carry_reasoning else "", tool_calls)
        self._next[s] += 1
        if self._next[s] == len(self.data.sessions[s].turns):
            self._answers[s].append([answer])
            self._end(s, at)
            return
        if tool_calls:  # the mocked tool runs each call; its results go back before the next user message
            wait = int(self._tool_delay(np.random.default_rng([self._seed, _TOOL_STREAM, s, ref.turn])) * 1e9)
            self._tool_waits[index] = wait
            self._answers[s].append([answer, *tool_messages(answer["tool_calls"], self._tool_result)])
        else:
            wait = int(self._think(np.random.default_rng([self._seed, _THINK_STREAM, s, ref.turn])) * 1e9)
            self._answers[s].append([answer])
        self._ready_at[s] = at + wait
        if self._slots is not None:  # user-centric: the slot's next tick, or the answer (and tool) if later
            tick = self._sent_at[s] + self._gap
            self._tick[s], self._waited[s] = max(tick, at + wait), at + wait > tick
            self._ready_at[s] = self._tick[s]
        if self.data.first[s] + self._next[s] in self._issued:
            self._when_due(s)

    def _end(self, s: int, at: int) -> None:
        self._state[s] = 2
        self._open -= 1
        if self._slots is not None and self._slot_of[s] >= 0:  # the slot's next session: a gap after its last turn left
            tick = self._sent_at[s] + self._gap
            heapq.heappush(self._slots, (max(tick, at), self._slot_of[s], at > tick))
        if self._fresh or self._failing:
            self.wake()

    def tags(self, index: int) -> dict[str, Any]:
        """What tokens.jsonl keeps of a turn: its session and turn index, and after an answer
        whose tool calls the mocked tool ran, the tool's delay (asked once, after `done`)."""
        ref = self.data.refs[index]
        out: dict[str, Any] = {"session": self.data.sessions[ref.session].id, "turn": ref.turn}
        wait = self._tool_waits.pop(index, None)
        if wait is not None:
            out["tool_delay_ms"] = wait / 1e6
        paced = self._paced.pop(index, None)
        if paced is not None:
            out["paced_ns"] = paced[0]
            if paced[1]:
                out["paced_waited"] = True
        return out


def assistant_message(text: str, reasoning: str = "", tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An answer as the next turn carries it back, in OpenAI's chat form: its text; its tool
    calls, which an API needs back before the tool's result (`tool_call_id` refers to them);
    its reasoning as `reasoning_content` when the run carries reasoning (some APIs need it
    back between tool calls; most chat templates drop it, so it is off by default)."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if reasoning:
        message["reasoning_content"] = reasoning
    if tool_calls:
        message["tool_calls"] = [
            {"id": c.get("id") or f"call_{c.get('index', k)}", "type": "function",
             "function": {"name": c.get("name") or "", "arguments": c.get("arguments") or ""}}
            for k, c in enumerate(tool_calls)
        ]
    return message


def tool_messages(calls: list[dict[str, Any]], result: str) -> list[dict[str, Any]]:
    """The mocked tool's answer to each call of an assistant message, in OpenAI's chat form:
    one `tool` message per call, naming the call it answers."""
    return [{"role": "tool", "tool_call_id": c["id"], "content": result} for c in calls]
