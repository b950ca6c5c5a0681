"""The queue between LoadGen's issue callback and whoever serves the samples.

Both SUT adapters use it: the tensor SUT's worker threads take batches, the event-loop SUT
takes one sample per request. LoadGen's thread only appends a whole query,
`[samples, next position, issue time]` (an Offline query can hold millions of samples, and
unpacking them on LoadGen's thread would stall it); takers unpack as they go.

A deque subclass, not a wrapper: `append` and truthiness stay deque's own C calls, which
matters on LoadGen's thread (one append per query, tens of thousands a second in Server).
"""

from __future__ import annotations

from collections import deque
from typing import Any

# Samples taken from the queue, one list per column (query ids, dataset indices, issue
# times): three lists cost less than a tuple per sample.
Taken = tuple[list[int], list[int], list[int]]


class IssueQueue(deque):
    def put(self, samples: Any, issued_ns: int) -> None:
        """One query, whole (LoadGen's thread calls `append` with the same list directly)."""
        self.append([samples, 0, issued_ns])

    def take(self, limit: int, taken: Taken) -> None:
        """Move up to `limit` samples into `taken`. Not thread-safe: workers hold a lock."""
        ids, indices, issued = taken
        want = len(ids) + limit
        while self and len(ids) < want:
            run = self[0]
            samples, pos, t = run
            end = min(len(samples), pos + want - len(ids))
            if end - pos == 1:  # Server: one sample per query; no comprehension frames
                s = samples[pos]
                ids.append(s.id)
                indices.append(s.index)
                issued.append(t)
            else:
                part = samples[pos:end]
                ids += [s.id for s in part]
                indices += [s.index for s in part]
                issued += [t] * len(part)
            if end == len(samples):
                self.popleft()
            else:
                run[1] = end

    def take_one(self) -> tuple[int, int, int] | None:
        """(query id, dataset index, issue time) of the next sample, or None."""
        if not self:
            return None
        run = self[0]
        samples, pos, issued = run
        s = samples[pos]
        if pos + 1 == len(samples):
            self.popleft()
        else:
            run[1] = pos + 1
        return s.id, s.index, issued


class ItemQueue(deque):
    """Samples already unpacked, `(query id, dataset index, issue time)` each: what a client
    shard receives from the process that holds LoadGen (harness.child.shard)."""

    def take_one(self) -> tuple[int, int, int] | None:
        return self.popleft() if self else None
