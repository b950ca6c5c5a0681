"""What a run cost, itemized, and what one *successful* task cost.

A price sheet (YAML, flat, every key optional, per-unit prices; see docs/cost.md) times
what the results folder says was used. Per request and per successful task are always
computed side by side, because a setup that is cheaper per request but fails more often
can cost more per task that actually got done: every failed attempt was paid for and
has to be done again.

Quantities come from the folder alone: requests sent, successes and token counts from
records.parquet, the run time from summary.json, cached input tokens from the summary's
`tokens` section when a backend reports them.

An answer that its dataset's validator or JSON Schema rejected (summary.json
`tokens.validation`, e.g. schema_invalid) is not a successful task either: such a check
sets the tokens section's goodput, whose requests are then the successes.

Where the answers were scored against references with a verdict per answer (summary.json
`text_accuracy.exact_match`), a wrong answer is not a successful task: the answers judged
wrong are taken off the successes, and `success_criterion` says so. ROUGE gives no answer
a verdict (it is a mean overlap), so a ROUGE-scored run's successes stay the requests that
completed, and the criterion says that too.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.errors import ConfigError, OutputError, ResultsError
from harness.results import folder
from harness.results.records import read_records, records_path
from harness.results.token_metrics import count_retries, read_token_entries

COST_SCHEMA_VERSION = 1


class CostSheet(BaseModel):
    """Prices per unit. Unknown keys and negative prices are errors, never ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    currency: str = Field("cost unit", min_length=1, description="any label: USD, EUR, credits")
    device_hourly: float = Field(0.0, ge=0, description="price of one device for one hour")
    devices: float = Field(1.0, ge=0, description="devices billed while the run lasts")
    device_share: float = Field(
        1.0, gt=0, le=1, description="fraction of the devices' time billed to this workload (shared devices)"
    )
    energy_per_kwh: float = Field(
        0.0, ge=0, description="electricity: the GPUs' energy over the timed window, as NVML measured it (--telemetry gpu)"
    )
    per_request: float = Field(0.0, ge=0, description="fee per request sent, failed attempts included")
    input_per_1m_tokens: float = Field(0.0, ge=0, description="uncached prompt tokens")
    cached_input_per_1m_tokens: float = Field(0.0, ge=0)
    output_per_1m_tokens: float = Field(0.0, ge=0)
    per_tool_call: float = Field(0.0, ge=0, description="tool or retrieval call")
    tool_calls_per_request: float = Field(
        0.0, ge=0, description="assumed calls per request when the backend reports none"
    )
    review_per_task: float | None = Field(None, ge=0, description="human review of one successful task")
    review_minutes_per_task: float | None = Field(None, ge=0)
    reviewer_hourly: float | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _one_review_price(self) -> CostSheet:
        minutes, hourly = self.review_minutes_per_task, self.reviewer_hourly
        if self.review_per_task is not None and (minutes is not None or hourly is not None):
            raise ValueError(
                "review_per_task and review_minutes_per_task/reviewer_hourly both set: give one review price"
            )
        if (minutes is None) != (hourly is None):
            raise ValueError("review_minutes_per_task and reviewer_hourly go together: set both or neither")
        return self

    def review_price(self) -> float:
        if self.review_per_task is not None:
            return self.review_per_task
        if self.review_minutes_per_task is not None and self.reviewer_hourly is not None:
            return self.review_minutes_per_task / 60 * self.reviewer_hourly
        return 0.0


def parse_sheet(data: Any, source: str) -> CostSheet:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a price sheet is a flat mapping of key: price (see docs/cost.md)")
    try:
        return CostSheet(**data)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            match = difflib.get_close_matches(key, list(CostSheet.model_fields), n=1, cutoff=0.5)
            hint = f" (did you mean {match[0]!r}?)" if match else ""
            raise ConfigError(f"{source}: unknown cost key {key!r}{hint}; see docs/cost.md") from e
        if not key:
            raise ConfigError(f"{source}: {err['msg'].removeprefix('Value error, ')}") from e
        raise ConfigError(f"{source}: cost key {key!r}: {err['msg']} (got {err.get('input')!r})") from e


def load_sheet(path: Path) -> CostSheet:
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read cost file {path}: {e.strerror}") from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: invalid YAML: {getattr(e, 'problem', None) or e}") from e
    return parse_sheet(data, str(path))


@dataclass(frozen=True)
class Usage:
    """What the run used, counted from the results folder."""

    requests: int
    succeeded: int
    run_time_s: float
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    failed_input_tokens: int
    failed_output_tokens: int
    tool_calls: float | None  # None: the backend reported none; the sheet's assumption applies
    success_criterion: str
    retries: int = 0  # extra attempts a backend sent itself (tokens.jsonl "retries"), all paid
    energy_kwh: float | None = None  # the GPUs' energy over the window (telemetry); None: not measured
    wrong_answers: int = 0  # answered, but judged wrong against the references: not successes

    @property
    def failed(self) -> int:
        return self.requests - self.succeeded


def usage_from_run(summary: dict[str, Any], columns: dict[str, Any] | None, retries: int = 0) -> Usage:
    """Quantities from summary.json and records.parquet columns (`Records.columns`)."""
    ours = summary.get("harness") or {}
    tokens = summary.get("tokens") or {}
    if columns is not None and len(columns["status"]):
        ok = columns["status"] == "ok"
        requests, succeeded = int(len(ok)), int(ok.sum())
        inp, out = columns["input_tokens"], columns["n_tokens"]
        input_tokens, output_tokens = int(inp.sum()), int(out.sum())
        failed_in, failed_out = int(inp[~ok].sum()), int(out[~ok].sum())
    else:
        requests, succeeded = int(ours.get("samples") or 0), int(ours.get("succeeded") or 0)
        input_tokens = int(tokens.get("input_tokens") or 0)
        output_tokens = int(tokens.get("output_tokens") or 0)
        failed_in = failed_out = 0
    criterion = "sample completed with status ok"
    goodput = tokens.get("goodput") if isinstance(tokens.get("goodput"), dict) else None
    if goodput and goodput.get("requests") is not None:
        # A stricter success: the request also met the run's service-level objective.
        succeeded = int(goodput["requests"])
        criterion = f"status ok and {goodput.get('criterion') or 'the goodput objective met'}"
    text = summary.get("text_accuracy") or {}
    exact = text.get("exact_match") or {}
    wrong = int(exact.get("wrong_answers") or 0)
    if exact:
        # With a goodput objective too, every wrong answer is taken off as if it had met
        # the objective: the successes can only be undercounted, never a wrong one counted.
        succeeded = max(0, succeeded - wrong)
        criterion += f" and the answer right (exact match; {wrong} wrong answers are not successes)"
    wer = text.get("wer") or {}
    if wer:
        # a transcript whose own WER is above the dataset's threshold is a failed task
        bad = int(wer.get("wrong_answers") or 0)
        succeeded = max(0, succeeded - bad)
        wrong += bad
        criterion += (f" and the transcript right (its WER at most {float(wer.get('wrong_above') or 0):g}%; "
                      f"{bad} wrong transcripts are not successes)")
    if text.get("rouge") and not exact:
        criterion += " (answers scored by ROUGE, which judges no single answer wrong: not taken off)"
    return Usage(
        requests=requests,
        succeeded=succeeded,
        run_time_s=float(ours.get("duration_s") or 0.0),
        input_tokens=input_tokens,
        cached_input_tokens=int(tokens.get("cached_input_tokens") or 0),
        output_tokens=output_tokens,
        failed_input_tokens=failed_in,
        failed_output_tokens=failed_out,
        tool_calls=float(tokens["tool_calls"]) if tokens.get("tool_calls") is not None else None,
        success_criterion=criterion,
        retries=retries,
        energy_kwh=_energy_kwh(summary),
        wrong_answers=wrong if exact or wer else 0,
    )


def _energy_kwh(summary: dict[str, Any]) -> float | None:
    energy_j = ((summary.get("telemetry") or {}).get("gpu") or {}).get("energy_j")
    return energy_j / 3.6e6 if isinstance(energy_j, (int, float)) else None


def _per(amount: float, count: float, scale: float = 1.0) -> float | None:
    return amount / count * scale if count else None


def compute_cost(sheet: CostSheet, usage: Usage) -> dict[str, Any]:
    """The itemized cost and the per-unit figures, as written to cost.json."""
    n, s, f = usage.requests, usage.succeeded, usage.failed
    sent = n + usage.retries  # a retried attempt is a request sent and paid for
    uncached = max(usage.input_tokens - usage.cached_input_tokens, 0)  # prompt counts include cached ones
    tool_calls = usage.tool_calls if usage.tool_calls is not None else sheet.tool_calls_per_request * n
    device_hours = sheet.devices * sheet.device_share * usage.run_time_s / 3600
    review_price = sheet.review_price()
    if sheet.energy_per_kwh > 0 and usage.energy_kwh is None:
        raise ConfigError("the price sheet sets energy_per_kwh, but this run measured no energy: run with "
                          "--telemetry gpu on a machine with NVIDIA GPUs, or drop energy_per_kwh")
    energy = usage.energy_kwh or 0.0
    # (name, quantity, unit, price per unit, amount, what failed attempts spent of it)
    fail_share = f / n if n else 0.0
    rows: list[tuple[str, float, str, float, float, float]] = [
        ("device", device_hours, "device-hours", sheet.device_hourly, device_hours * sheet.device_hourly,
         device_hours * sheet.device_hourly * fail_share),  # device time split by request count
        ("energy", energy, "kWh", sheet.energy_per_kwh, energy * sheet.energy_per_kwh,
         energy * sheet.energy_per_kwh * fail_share),  # split by request count, as device time
        ("requests", sent, "requests sent", sheet.per_request, sent * sheet.per_request,
         (f + usage.retries) * sheet.per_request),
        ("input_tokens", uncached, "tokens", sheet.input_per_1m_tokens / 1e6,
         uncached * sheet.input_per_1m_tokens / 1e6, usage.failed_input_tokens * sheet.input_per_1m_tokens / 1e6),
        ("cached_input_tokens", usage.cached_input_tokens, "tokens", sheet.cached_input_per_1m_tokens / 1e6,
         usage.cached_input_tokens * sheet.cached_input_per_1m_tokens / 1e6, 0.0),
        ("output_tokens", usage.output_tokens, "tokens", sheet.output_per_1m_tokens / 1e6,
         usage.output_tokens * sheet.output_per_1m_tokens / 1e6,
         usage.failed_output_tokens * sheet.output_per_1m_tokens / 1e6),
        ("tool_calls", tool_calls, "calls", sheet.per_tool_call, tool_calls * sheet.per_tool_call,
         tool_calls * fail_share * sheet.per_tool_call),
        ("review", s, "successful tasks", review_price, s * review_price, 0.0),
    ]
    items = [
        {"item": name, "quantity": qty, "unit": unit, "unit_price": price, "amount": amount, "failed_attempts": wasted}
        for name, qty, unit, price, amount, wasted in rows
        if price > 0
    ]
    total = sum(i["amount"] for i in items)
    review = sum(i["amount"] for i in items if i["item"] == "review")
    serving = total - review
    failed_attempts = sum(i["failed_attempts"] for i in items)
    serving_items = [i["item"] for i in items if i["item"] != "review"]
    return {
        "cost_schema_version": COST_SCHEMA_VERSION,
        "currency": sheet.currency,
        "sheet": sheet.model_dump(exclude_defaults=True),
        "usage": asdict(usage) | {"tool_calls": tool_calls, "tool_calls_assumed": usage.tool_calls is None},
        "items": items,
        "total": total,
        "serving_total": serving,
        "review_total": review,
        "failed_attempts_total": failed_attempts,
        "per_request": _per(serving, n),
        "per_1k_requests": _per(serving, n, 1e3),
        "per_1m_output_tokens": _per(serving, usage.output_tokens, 1e6),
        "per_successful_task": _per(total, s),
        "per_successful_task_parts": {
            "serving": _per(serving - failed_attempts, s),
            "failed_attempts": _per(failed_attempts, s),
            "review": _per(review, s),
        },
        "success_criterion": usage.success_criterion,
        "per_request_includes": serving_items,
        "per_successful_task_includes": serving_items
        + ["failed and retried attempts"] * (failed_attempts > 0)
        + ["review"] * (review > 0),
    }


def cost_for_run(run_dir: Path, summary: dict[str, Any], sheet: CostSheet) -> dict[str, Any]:
    # Only token counts need the records; without tokens the summary's counts are the same.
    has_records = records_path(run_dir) is not None and bool(summary.get("tokens"))
    columns = read_records(run_dir).columns if has_records else None
    retries, _ = count_retries(read_token_entries(run_dir))  # the rule the tokens section uses
    return compute_cost(sheet, usage_from_run(summary, columns, retries))


def write_cost(run_dir: Path, cost: dict[str, Any]) -> Path:
    path = run_dir / folder.COST
    try:
        path.write_text(json.dumps(cost, indent=2, default=_jsonable))
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror}") from e
    return path


def read_cost(run_dir: Path) -> dict[str, Any] | None:
    """cost.json as the run or `harness cost` wrote it; None when the folder has none."""
    cost = folder.read_json(run_dir, folder.COST)
    if cost is not None and not isinstance(cost.get("cost_schema_version", 0), int):
        raise ResultsError(f"{run_dir / folder.COST} is damaged: cost_schema_version is not a number; recompute it with `harness cost`")
    if cost is not None and cost.get("cost_schema_version", 0) > COST_SCHEMA_VERSION:
        raise ResultsError(f"{run_dir / folder.COST} is from a newer harness (cost_schema_version {cost['cost_schema_version']})")
    problem = cost_problem(cost) if cost is not None else None
    if problem:
        raise ResultsError(f"{run_dir / folder.COST} is damaged: {problem}; recompute it with `harness cost`")
    return cost


_COST_FIGURES = ("total", "serving_total", "review_total", "failed_attempts_total", "per_request", "per_1k_requests",
                 "per_1m_output_tokens", "per_successful_task")
_ITEM_TEXT = ("item", "unit")
_ITEM_FIGURES = ("quantity", "unit_price", "amount", "failed_attempts")


def _is_number(v: Any, optional: bool = True) -> bool:
    return (optional and v is None) or (isinstance(v, (int, float)) and not isinstance(v, bool))


def cost_problem(cost: dict[str, Any]) -> str | None:
    """What in a cost.json the renderers cannot read, in words (a file edited by hand)."""
    if not isinstance(cost.get("currency"), str):
        return "currency is not text"
    for key in _COST_FIGURES:
        if not _is_number(cost.get(key)):
            return f"{key} is not a number"
    parts = cost.get("per_successful_task_parts")
    if not isinstance(parts, dict) or not all(_is_number(v) for v in parts.values()):
        return "per_successful_task_parts is not an object of numbers"
    items = cost.get("items")
    if not isinstance(items, list) or not all(
        isinstance(i, dict) and all(isinstance(i.get(k), str) for k in _ITEM_TEXT)
        and all(_is_number(i.get(k), optional=False) for k in _ITEM_FIGURES) for i in items
    ):
        return "items is not a list of {item, quantity, unit, unit_price, amount, failed_attempts}"
    for key in ("per_request_includes", "per_successful_task_includes"):
        value = cost.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return f"{key} is not a list of text"
    if not isinstance(cost.get("success_criterion"), str):
        return "success_criterion is not text"
    return None


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"{type(v).__name__} is not JSON serializable")
