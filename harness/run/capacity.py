"""`harness capacity`: the highest Server rate (target_qps) at which a run meets its targets
(Server, or an LLM benchmark's Interactive: the same search under its tighter bounds).

The search is a harness.run.sweep strategy, so a capacity search is a sweep folder: one
ordinary run per try, sweep.json with every try, and a `capacity` section.

    1. start: `start_qps`, or the throughput of an Offline pilot of the same config
    2. bracket: try 0.8 x start; while it passes go up x1.25, while it fails down x0.8,
       the stride growing with each step in the same direction (x1.25, x1.25^2, then x1.25^4:
       a pilot far off the capacity, as an Offline pilot of a server that batches its
       backlog is, took 20 rates of x1.25 to bracket where this takes 7)
    3. bisect the bracket [highest passing, lowest failing] until its width is at most
       `precision` of the passing rate

"Meets its targets" is LoadGen's VALID (latency or TTFT/TPOT bounds, early stopping
included) and the harness's success-rate rule, or with `attainment` the share of requests
meeting every `slo` target. A shared machine is noisy and one Poisson schedule can be
lucky, so a rate passes when `need` of `of` tries pass, each repeat with its own
schedule_rng_seed; the tries at a rate stop as soon as the outcome is decided. The search
stops when it converges, when its time budget is spent, or after `max_crashes` runs
crashed, and says which.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from harness.analysis.points import verdict
from harness.config.run_config import RunConfig
from harness.errors import ConfigError
from harness.run.rate_pilot import pilot_values, rate_text

FIRST = 0.8  # of the start: a Server sustains less than the Offline peak
UP, DOWN = 1.25, 0.8
MAX_STRIDE = 4  # the most powers of UP (or DOWN) one bracketing step takes: x2.44


def _stride(steps: int) -> int:
    """Powers of UP (DOWN) for the n-th step in one direction: 1, 2, 4, 4, ... A pilot near
    the capacity is bracketed in the first steps, as before; a far one in few more."""
    return min(2 ** (steps - 1), MAX_STRIDE)
FLOOR = 0.01  # of the start: below it, no rate passes


@dataclass
class Search:
    base: RunConfig
    precision: float = 0.02
    need: int = 2
    of: int = 3
    start_qps: float | None = None
    attainment: float | None = None
    budget_s: float | None = None
    max_crashes: int = 3

    SETTINGS = ("precision", "need", "of", "start_qps", "attainment", "budget_s", "max_crashes")

    def __post_init__(self) -> None:
        if not 0 < self.precision < 1:
            raise ConfigError(f"--precision {self.precision}: give a fraction of the rate between 0 and 1, e.g. 0.02")
        if not 1 <= self.need <= self.of:
            raise ConfigError(f"--need {self.need} --of {self.of}: need 1 <= need <= of (e.g. --need 2 --of 3)")
        if self.attainment is not None and not 0 < self.attainment <= 1:
            raise ConfigError(f"--attainment {self.attainment}: give a share between 0 and 1, e.g. 0.99")
        if self.attainment is not None and not self.base.slo:
            raise ConfigError("--attainment needs per-request targets: add --slo ttft_ms=500 (and/or tpot_ms, e2e_ms)")
        # Interactive is LoadGen's Server under the benchmark's tighter TTFT/TPOT bounds: its
        # capacity is the rate that meets those, searched the same way
        if self.base.scenario not in ("Server", "Interactive"):
            raise ConfigError(f"capacity searches the Server rate; the config's scenario is {self.base.scenario} "
                              "(use --scenario Server or Interactive, or `harness sweep` for other loads)")

    @classmethod
    def from_settings(cls, settings: dict[str, Any], base: RunConfig) -> Search:
        return cls(base, **{k: v for k, v in settings.items() if k in cls.SETTINGS})

    def settings(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.SETTINGS}

    @property
    def rule(self) -> str:
        what = (f"at least {self.attainment:.0%} of requests meet every slo target ({self._slo_text()})"
                if self.attainment is not None else "LoadGen calls the run VALID")
        tries = ("one try" if self.of == 1 else
                 f"{self.need} of {self.of} tries (stopping once decided; each repeat draws new arrival times)")
        return f"a rate passes when {what} and the success rate is at least {self.base.min_success_rate:.0%}, in {tries}"

    def _slo_text(self) -> str:
        return ", ".join(f"{k} <= {v:g}" for k, v in (self.base.slo or {}).items())

    # --- replay: the search's state from the tries so far ----------------------------------

    def _start(self, entries: list[dict[str, Any]]) -> float | None:
        if self.start_qps:
            return float(self.start_qps)
        pilot = next((e for e in entries if e.get("role") == "pilot"), None)
        if pilot is None:
            return None
        return (pilot.get("completed_per_s") or 0.0) if pilot.get("status") == "complete" else 0.0

    def _outcomes(self, entries: list[dict[str, Any]]) -> dict[str, list[bool]]:
        out: dict[str, list[bool]] = {}
        for e in entries:
            if e.get("role") == "try":
                out.setdefault(e["values"]["target_qps"], []).append(verdict(e, self.attainment)[0])
        return out

    def _decided(self, results: list[bool]) -> bool | None:
        if results.count(True) >= self.need:
            return True
        if results.count(False) > self.of - self.need:
            return False
        return None

    def walk(self, entries: list[dict[str, Any]]) -> tuple[str | None, float | None, float | None, str]:
        """(next rate to try or None, highest passing, lowest failing, why it stops)."""
        start = self._start(entries)
        if start is None:
            return None, None, None, "no start"
        if start <= 0:
            return None, None, None, "the pilot measured no throughput"
        outcomes = self._outcomes(entries)
        lo = hi = None
        steps = 0  # bracketing steps so far, all in one direction until lo and hi are both known
        rate = rate_text(start * FIRST)
        while True:
            decided = self._decided(outcomes.get(rate, []))
            if decided is None:
                return rate, lo, hi, "running"
            r = float(rate)
            if decided:
                lo = r if lo is None else max(lo, r)
            else:
                hi = r if hi is None else min(hi, r)
            if lo is None:
                steps += 1
                nxt = hi * DOWN ** _stride(steps)
                if nxt < start * FLOOR:
                    return None, lo, hi, f"no rate passed down to {rate_text(hi)} QPS"
            elif hi is None:
                steps += 1
                nxt = lo * UP ** _stride(steps)
            else:
                if (hi - lo) / lo <= self.precision:
                    return None, lo, hi, "converged"
                nxt = (lo + hi) / 2
            if rate_text(nxt) in (rate_text(lo or -1), rate_text(hi or -1)):
                return None, lo, hi, "converged"  # the bracket is narrower than the rates' 4 digits
            rate = rate_text(nxt)

    # --- the Strategy protocol of harness.run.sweep ----------------------------------------

    def next_point(self, entries: list[dict[str, Any]]) -> tuple[int, dict[str, str], str] | None:
        index = max((e["index"] for e in entries), default=-1) + 1
        if self._start(entries) is None:
            return (0 if not entries else index), pilot_values(self.base), "pilot"
        rate, _, _, _ = self.walk(entries)
        if rate is None:
            return None
        values = {"target_qps": rate}
        repeat = len(self._outcomes(entries).get(rate, []))
        if repeat:
            # A repeat with LoadGen's same schedule seed replays the same arrivals: it would
            # catch a noisy machine but never arrival luck. New arrival times make it a sample.
            values["schedule_rng_seed"] = str((self.base.schedule_rng_seed or 0) + repeat)
        return index, values, "try"

    def planned(self, entries: list[dict[str, Any]]) -> int | None:
        return None

    def stop_reason(self, entries: list[dict[str, Any]], spent_s: float) -> str | None:
        crashes = sum(1 for e in entries if e.get("status") == "crashed")
        if crashes >= self.max_crashes:
            return f"{crashes} runs crashed"
        if self.budget_s is not None and spent_s >= self.budget_s:
            return f"the time budget ({self.budget_s:g} s) is spent"
        return None

    def summarize(self, entries: list[dict[str, Any]], state: str) -> dict[str, Any]:
        tries = [e for e in entries if e.get("role") == "try"]
        spent = sum(float(e.get("elapsed_s") or 0.0) for e in entries)
        rate, lo, hi, why = self.walk(entries)
        if rate is not None:  # it did not finish: the reason is outside the replay
            why = self.stop_reason(entries, spent) or state
        per_rate = []
        for r, results in sorted(self._outcomes(entries).items(), key=lambda kv: float(kv[0])):
            per_rate.append({"target_qps": float(r), "passed": results.count(True), "failed": results.count(False),
                             "decided": self._decided(results)})
        at_hi = [e for e in tries if hi is not None and float(e["values"]["target_qps"]) == hi]
        bounds = Counter(b for e in at_hi for ok, b in [verdict(e, self.attainment)] if not ok and b)
        at_lo = [e for e in tries if lo is not None and float(e["values"]["target_qps"]) == lo]
        p99 = [e["metrics"].get("latency_p99") for e in at_lo if (e.get("metrics") or {}).get("latency_p99")]
        done = [e.get("completed_per_s") for e in at_lo if e.get("completed_per_s")]
        pilot = next((e for e in entries if e.get("role") == "pilot"), None)
        return {
            "capacity_qps": lo,
            "bracket_qps": [lo, hi],
            "bracket_width": (hi - lo) / lo if lo and hi else None,
            "precision": self.precision,
            "converged": why == "converged",
            "stop_reason": why,
            "rule": self.rule,
            "criterion": "slo attainment" if self.attainment is not None else "LoadGen VALID",
            "settings": self.settings(),
            "start_qps": self._start(entries),
            "start_from": "start_qps" if self.start_qps else ("Offline pilot" if pilot else None),
            "bound_by": bounds.most_common(1)[0][0] if bounds else None,
            "tries": len(tries),
            "time_s": round(spent, 1),
            "per_rate": per_rate,
            "mixed_rates": [p["target_qps"] for p in per_rate if p["passed"] and p["failed"]],
            "at_capacity": {
                "tries": len(at_lo),
                "completed_per_s": [min(done), max(done)] if done else None,
                "latency_p99_ms": [min(p99), max(p99)] if p99 else None,
            },
        }
