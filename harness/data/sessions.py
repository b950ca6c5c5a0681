"""Multi-turn chat sessions: each session's turns, flattened so that one sample is one turn.

Specs, as given to `--dataset`:
    chat-sessions:PATH               JSON Lines, one session a line: OpenAI `messages` (an
                                     optional leading system message, then user and
                                     assistant turns alternating, user first), optional
                                     `id` and `max_tokens`. The user turns are sent; the
                                     file's assistant turns are not (the server's own answers
                                     are carried instead): their length, when given, is
                                     that turn's max_tokens.
    sharegpt-sessions:PATH[,n=N,seed=S]
                                     a ShareGPT file's conversations with all their turns
                                     (human/model alternating; a conversation that is not
                                     is skipped, as the single-turn reader skips them)
    synthetic-sessions[:n=8,turns=4,isl=64,osl=16,system_len=0,context_len=0,seed=S]
                                     n seeded sessions of `turns` turns; `isl`/`osl` per turn
                                     take a number or a distribution (as synthetic prompts);
                                     a system prompt of `system_len` tokens shared by every
                                     session, and a per-user context of `context_len` tokens
                                     ahead of each session's first turn

The harness builds turn k's request when it sends it (harness.child.sessions), from the
turns before it as the server answered them: this module only holds what the user says.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.data.datasets import Dataset
from harness.data.jsonl import json_objects
from harness.data.spec import parse_dataset_spec
from harness.errors import DatasetError

#: dataset kinds read by this module
SESSION_KINDS = ("chat-sessions", "sharegpt-sessions", "synthetic-sessions")
#: a session id travels in a request header: no byte that could end or split one
_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")
# synthetic streams, apart from synthetic prompts' ([seed, index]) ones
_SYSTEM_STREAM, _SESSION_STREAM = 50_021, 50_023


@dataclass(frozen=True)
class Turn:
    """What the user says at one turn, and how long an answer it asks for."""

    content: str
    max_tokens: int | None = None
    target_input_tokens: int = 0  # synthetic: this turn's own length


@dataclass(frozen=True)
class Session:
    id: str
    turns: tuple[Turn, ...]
    system: str | None = None  # sent first, on every turn
    context: str | None = None  # the user's own context, ahead of the first turn


@dataclass(frozen=True)
class TurnRef:
    """A sample: turn `turn` of session number `session` (an index into the dataset's list)."""

    session: int
    turn: int


def is_session_spec(spec: str) -> bool:
    return spec.partition(":")[0] in SESSION_KINDS


class SessionDataset(Dataset):
    """Sessions held in memory; index i is a turn (sessions in order, their turns in order)."""

    def __init__(self, name: str, sessions: list[Session], source: dict[str, Any]) -> None:
        self.name = name
        self.sessions = sessions
        self.source = source
        self.refs = [TurnRef(s, k) for s, sess in enumerate(sessions) for k in range(len(sess.turns))]
        #: the first turn's index of each session
        self.first = [0]
        for sess in sessions[:-1]:
            self.first.append(self.first[-1] + len(sess.turns))
        #: no per-sample answer check: answers are free text the next turn carries
        self.validate = None
        super().__init__(len(self.refs))

    def _make(self, index: int) -> TurnRef:
        return self.refs[index]

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for sess in self.sessions:
            h.update(json.dumps(asdict(sess), sort_keys=True).encode())
        return h.hexdigest()

    def describe(self) -> dict[str, Any]:
        turns = [len(s.turns) for s in self.sessions]
        return {
            **super().describe(),
            **self.source,
            "chat": True,
            "sessions": len(self.sessions),
            "turns": len(self.refs),
            "turns_per_session_max": max(turns),
            "with_system_prompt": sum(s.system is not None for s in self.sessions),
        }


# --- multi-turn JSONL -------------------------------------------------------------------


def load_chat_sessions(path: Path) -> SessionDataset:
    if not path.is_file():
        raise DatasetError(f"session file {path} does not exist")
    sessions: list[Session] = []
    seen: dict[str, str] = {}
    for where, obj in json_objects(path, lambda _, line: f"{path}:{line}", "`messages` (a conversation)"):
        sess = _session_from(obj, where, len(sessions))
        if sess.id in seen:
            raise DatasetError(f"{where}: session id {sess.id!r} is used again (first at {seen[sess.id]}); give each "
                               "line its own `id`")
        seen[sess.id] = where
        sessions.append(sess)
    if not sessions:
        raise DatasetError(f"session file {path} holds no sessions")
    return SessionDataset("chat-sessions", sessions, {"path": str(path)})


def _session_from(obj: dict[str, Any], where: str, number: int) -> Session:
    unknown = set(obj) - {"messages", "id", "max_tokens"}
    if unknown:
        raise DatasetError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}; a session line holds "
                           "`messages`, and optionally `id` and `max_tokens`")
    messages = obj.get("messages")
    if not isinstance(messages, list) or not messages or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages
    ):
        raise DatasetError(f"{where}: `messages` must be a non-empty list of {{role, content}} strings")
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise DatasetError(f"{where}: `max_tokens` must be a positive integer")
    sid = obj.get("id", f"s{number}")
    if not isinstance(sid, (str, int)) or isinstance(sid, bool) or not _ID.match(str(sid)):
        raise DatasetError(f"{where}: `id` {sid!r} cannot go in a request header: use 1-128 letters, digits "
                           "and . _ : @ / + = -")
    system = None
    rest = messages
    if messages[0]["role"] == "system":
        system, rest = messages[0]["content"], messages[1:]
    turns: list[Turn] = []
    expect = "user"
    for i, m in enumerate(rest, 1 if system is not None else 0):
        role = m["role"]
        if role != expect:
            before = f"follows {messages[i - 1]['role']!r}" if i else "opens the conversation"
            raise DatasetError(
                f"{where}: message {i} has role {role!r}, which {before}; a session is an optional system "
                "message, then user and assistant turns alternating, user first: reorder or drop that message"
            )
        if role == "user":
            turns.append(Turn(m["content"], max_tokens))
        elif m["content"].strip():  # the recorded answer's length: as much as the model said
            turns[-1] = Turn(turns[-1].content, max(1, len(m["content"].split())) if max_tokens is None else max_tokens)
        expect = "assistant" if role == "user" else "user"
    if not turns:
        raise DatasetError(f"{where}: the conversation has no user turn to send")
    return Session(str(sid), tuple(turns), system)


# --- ShareGPT conversations, every turn --------------------------------------------------


def load_sharegpt_sessions(spec: str, path: Path, params: dict[str, str], seed: int,
                           count: Callable[[str], int] | None) -> SessionDataset:
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
    usable: list[tuple[str, tuple[Turn, ...]]] = []
    for i, conv in enumerate(data):
        turns = conv.get("conversations") if isinstance(conv, dict) else None
        if not isinstance(turns, list):
            continue
        pairs: list[Turn] = []
        for a, b in zip(turns[::2], turns[1::2], strict=False):
            ok = (isinstance(a, dict) and isinstance(b, dict) and a.get("from") in ("human", "user")
                  and b.get("from") in ("gpt", "assistant", "model") and isinstance(a.get("value"), str)
                  and isinstance(b.get("value"), str) and a["value"].strip() and b["value"].strip())
            if not ok:  # out of order or empty from here on: keep the turns before it
                break
            pairs.append(Turn(a["value"], max(1, measure(b["value"])), measure(a["value"])))
        if pairs:
            sid = conv.get("id") if isinstance(conv.get("id"), str) and _ID.match(conv["id"]) else f"c{i}"
            usable.append((sid, tuple(pairs)))
    if not usable:
        raise DatasetError(f"ShareGPT file {path}: no conversation opens with a human turn followed by a model turn")
    random.Random(s).shuffle(usable)
    chosen = usable[: n or len(usable)]
    sessions = [Session(sid, turns) for sid, turns in chosen]
    source = {"path": str(path), "seed": s, "conversations_usable": len(usable),
              "lengths_counted_in": "tokenizer" if count else "words"}
    return SessionDataset("sharegpt-sessions", sessions, source)


# --- synthetic sessions -----------------------------------------------------------------


def synthetic_sessions(spec: str, params: dict[str, str], seed: int,
                       count: Callable[[str], int] | None) -> SessionDataset:
    from harness.data.synthetic_prompts import _Words, length_sampler

    isl, osl = params.pop("isl", "64"), params.pop("osl", "16")
    try:
        n = int(params.pop("n", "8"))
        turns = int(params.pop("turns", "4"))
        system_len = int(params.pop("system_len", "0"))
        context_len = int(params.pop("context_len", "0"))
        s = int(params.pop("seed", str(seed)))
    except ValueError as e:
        raise DatasetError(f"dataset spec {spec!r}: n, turns, system_len, context_len and seed must be integers") from e
    if params:
        raise DatasetError(f"dataset spec {spec!r}: unknown parameter(s) {', '.join(params)}; use n, turns, isl, osl, "
                           "system_len, context_len, seed")
    if n < 1 or turns < 1 or system_len < 0 or context_len < 0:
        raise DatasetError(f"dataset spec {spec!r}: n and turns must be at least 1, system_len and context_len at least 0")
    draw_in, draw_out = length_sampler(isl, "isl", spec), length_sampler(osl, "osl", spec)
    words = _Words(count, spec)
    system = words.text(np.random.default_rng([s, _SYSTEM_STREAM]), system_len)[0] if system_len else None
    sessions = []
    for i in range(n):
        rng = np.random.default_rng([s, _SESSION_STREAM, i])  # session i is the same whatever n is
        context = words.text(rng, context_len)[0] if context_len else None
        made = []
        for _ in range(turns):
            text, got = words.text(rng, draw_in(rng))
            made.append(Turn(text, draw_out(rng), got))
        sessions.append(Session(f"s{i}", tuple(made), system, context))
    source = {"isl": isl, "osl": osl, "turns": turns, "system_len": system_len, "context_len": context_len,
              "seed": s, "lengths_counted_in": "tokenizer" if count else "words"}
    return SessionDataset("synthetic-sessions", sessions, source)


def build_session_dataset(spec: str, seed: int, count: Callable[[str], int] | None = None) -> SessionDataset:
    parsed = parse_dataset_spec(spec)
    if parsed.kind == "chat-sessions" and parsed.path is not None:
        return load_chat_sessions(parsed.path)
    if parsed.kind == "sharegpt-sessions" and parsed.path is not None:
        return load_sharegpt_sessions(spec, parsed.path, parsed.params, seed, count)
    if parsed.kind == "synthetic-sessions":
        return synthetic_sessions(spec, dict(parsed.params), seed, count)
    raise DatasetError(f"unknown session dataset {spec!r}: use chat-sessions:FILE.jsonl, sharegpt-sessions:FILE.json "
                       "or synthetic-sessions:n=N,turns=T,isl=N,osl=N")


# --- think time and tool delay ---------------------------------------------------------------------------

_THINK = re.compile(r"^(uniform|lognormal)\(\s*([0-9.eE+-]+)\s*,\s*([0-9.eE+-]+)\s*\)$")


def think_time_sampler(value: str, name: str = "think_time_s") -> Callable[[np.random.Generator], float]:
    """'0.5' (seconds), 'uniform(lo,hi)' or 'lognormal(median,sigma)' -> a draw in seconds
    (a think time, or the mocked tool's delay: `name` is the setting's, for the message).
    Raises ValueError with what to write (the config layer turns it into its one line)."""
    value = value.strip()
    try:
        fixed = float(value)
    except ValueError:
        fixed = None
    if fixed is not None:
        if not 0 <= fixed <= 3600:
            raise ValueError(f"{name} {value!r}: a fixed think time is 0 to 3600 seconds")
        return lambda rng: fixed
    m = _THINK.match(value)
    if not m:
        raise ValueError(f"{name} {value!r}: write seconds (0.5), uniform(lo,hi) or lognormal(median,sigma)")
    kind, a, b = m.group(1), float(m.group(2)), float(m.group(3))
    if kind == "uniform":
        if not 0 <= a <= b <= 3600:
            raise ValueError(f"{name} {value!r}: uniform needs 0 <= lo <= hi <= 3600")
        return lambda rng: float(rng.uniform(a, b))
    if not (0 < a <= 3600 and 0 <= b <= 4):
        raise ValueError(f"{name} {value!r}: lognormal needs a median in (0, 3600] s and sigma in [0, 4]")
    return lambda rng: float(min(3600.0, a * np.exp(rng.normal(0.0, b))))
