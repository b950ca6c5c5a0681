"""The headline figures' names: one name per figure, used by `--fail-if`, compare tables,
repeat aggregates (aggregate.json) and audits.

summary.json keeps its own keys (its schema is versioned); `from_summary` is the one
place that maps them to these names. Names used before this vocabulary existed stay
accepted as aliases, so existing CI gates (`--fail-if "p99_latency > +10%"`) keep working.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.results.schedule import timed_from_dispatch


@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    unit: str
    higher_is_better: bool
    aliases: tuple[str, ...] = ()

    @property
    def heading(self) -> str:
        """The figure's row title in tables: label and unit."""
        return f"{self.label} ({self.unit})" if self.unit else self.label


METRICS: tuple[Metric, ...] = (
    Metric("throughput", "throughput", "samples/s", True, ("throughput_per_s",)),
    Metric("latency_p50", "latency p50", "ms", False, ("p50_latency",)),
    Metric("latency_p90", "latency p90", "ms", False, ("p90_latency", "latency_p90_ms")),
    Metric("latency_p99", "latency p99", "ms", False, ("p99_latency", "latency_p99_ms")),
    Metric("success_rate", "success rate", "%", True),
    Metric("ttft_p50", "TTFT p50", "ms", False),
    Metric("ttft_p99", "TTFT p99", "ms", False),
    Metric("tpot_p50", "TPOT p50", "ms", False),
    Metric("tpot_p99", "TPOT p99", "ms", False),
    Metric("output_tokens_per_s", "output tokens/s", "tokens/s", True),
    Metric("cost_per_success", "cost per successful task", "", False),
    # answers' accuracy: the text score against the dataset's references (summary.json
    # text_accuracy: exact match in percent), else a tensor run's top-1 (accuracy x 100)
    Metric("accuracy", "accuracy", "%", True),
    # ROUGE of generated text, as MLPerf prints it (mean f-measure x 100): "pt" gates points
    Metric("rouge1", "ROUGE-1", "", True),
    Metric("rouge2", "ROUGE-2", "", True),
    Metric("rougeL", "ROUGE-L", "", True),
    Metric("rougeLsum", "ROUGE-Lsum", "", True),
    # transcripts' word error rate (summary.json text_accuracy.wer), percent: lower is better
    Metric("wer", "WER", "%", False),
)
NAMES: tuple[str, ...] = tuple(m.name for m in METRICS)
BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}
ALIASES: dict[str, str] = {alias: m.name for m in METRICS for alias in m.aliases}


def canonical(name: str) -> str | None:
    """The vocabulary's name for `name` (itself or an old alias); None when it names no figure."""
    return name if name in BY_NAME else ALIASES.get(name)


def from_summary(summary: dict[str, Any], source: str = "headline") -> dict[str, float | None]:
    """Every headline figure summary.json holds, by name (None where the run has none).

    `source="headline"` (the default: the headline, compare, the gate, repeats, audits,
    sweep points) is `"loadgen"` on a schedule LoadGen owns, and `"dispatch"` on one the
    harness owns (harness.results.schedule: a closed loop), where LoadGen's issue is not a
    user's request. `"loadgen"` takes LoadGen's figure wherever LoadGen has one (throughput,
    latency percentiles, TTFT, TPOT, output tokens/s: the official record, from LoadGen's
    issue stamp, failed samples timed like any other) and the harness's where it has none
    (success rate; Offline TTFT, from the harness's stamp of that issue). `"dispatch"` takes
    latency (E2E), TTFT and TPOT from dispatch, the request leaving the harness (successful
    samples), and everything else as `"loadgen"`. `"harness"` takes the harness's own:
    successful samples only, timed from its callback. Latency is per query in MultiStream,
    as LoadGen's is. cost_per_success lives in cost.json.
    """
    ours = _ours(summary)
    if source == "harness":
        return ours
    lg = summary.get("loadgen") or {}
    lat = lg.get("latency_ms") or {}
    lg_tokens = ((summary.get("tokens") or {}).get("loadgen") or {})
    official = {
        "throughput": lg.get("throughput_per_s"),
        "latency_p50": lat.get("p50"),
        "latency_p90": lat.get("p90"),
        "latency_p99": lat.get("p99"),
        "ttft_p50": (lg_tokens.get("ttft_ms") or {}).get("p50"),
        "ttft_p99": (lg_tokens.get("ttft_ms") or {}).get("p99"),
        "tpot_p50": (lg_tokens.get("tpot_ms") or {}).get("p50"),
        "tpot_p99": (lg_tokens.get("tpot_ms") or {}).get("p99"),
        "output_tokens_per_s": lg_tokens.get("output_tokens_per_s"),
    }
    out = {k: official[k] if official.get(k) is not None else v for k, v in ours.items()}
    if source == "dispatch" or (source == "headline" and timed_from_dispatch(summary)):
        out.update(_from_dispatch(summary))
    return out


def _from_dispatch(summary: dict[str, Any]) -> dict[str, float | None]:
    """Latency, TTFT and TPOT from dispatch: what a user of the harness's own schedule sees."""
    service = (summary.get("harness") or {}).get("service_ms") or {}  # complete - dispatch
    tokens = summary.get("tokens") or {}
    ttft = tokens.get("ttft_from_dispatch_ms") or {}
    tpot = tokens.get("tpot_ms") or {}  # the same from issue or dispatch: (E2E - TTFT) / (n - 1)
    out: dict[str, float | None] = {f"latency_{p}": service.get(p) for p in ("p50", "p90", "p99")}
    if tokens:
        out.update(ttft_p50=ttft.get("p50"), ttft_p99=ttft.get("p99"), tpot_p50=tpot.get("p50"), tpot_p99=tpot.get("p99"))
    return out


def _ours(summary: dict[str, Any]) -> dict[str, float | None]:
    h = summary.get("harness") or {}
    per_query = summary["run"]["scenario"] == "MultiStream"
    lat = (h.get("query_latency_ms") if per_query else h.get("latency_ms")) or {}
    rate = h.get("success_rate")
    out: dict[str, float | None] = {
        "throughput": h.get("throughput_per_s"),
        "latency_p50": lat.get("p50"),
        "latency_p90": lat.get("p90"),
        "latency_p99": lat.get("p99"),
        "success_rate": rate * 100 if rate is not None else None,  # percent, so "pt" means points
    }
    tokens = summary.get("tokens") or {}
    for part in ("ttft", "tpot"):
        section = tokens.get(f"{part}_ms") or {}
        out[f"{part}_p50"] = section.get("p50")
        out[f"{part}_p99"] = section.get("p99")
    out["output_tokens_per_s"] = tokens.get("output_tokens_per_s")
    out.update(_accuracy_figures(summary))
    return out


def _accuracy_figures(summary: dict[str, Any]) -> dict[str, float | None]:
    """accuracy and ROUGE by name: the text score when the run has one, else top-1."""
    text = summary.get("text_accuracy") or {}
    rouge = text.get("rouge") or {}
    exact = text.get("exact_match") or {}
    top1 = (summary.get("accuracy") or {}).get("value")
    out: dict[str, float | None] = {k: rouge.get(k) for k in ("rouge1", "rouge2", "rougeL", "rougeLsum")}
    out["accuracy"] = exact.get("exact_match") if exact else (top1 * 100 if isinstance(top1, (int, float)) else None)
    out["wer"] = (text.get("wer") or {}).get("wer")
    return out
