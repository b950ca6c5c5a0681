"""The report's sections, in the one order the terminal, Markdown and HTML all follow.

    SECTIONS           each: a title, when a run calls for it, what it holds, in which formats
    shown(view, fmt)   the sections one run has in one format, each with its blocks

A section holds format-neutral blocks: a table (its rows from figures.py), a note, plots,
preformatted text. A renderer only decides how a block looks (terminal.py, markdown.py,
html.py) and never chooses or orders sections, so adding a section is one entry in SECTIONS.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

from harness.analysis.run_data import RunData
from harness.report import answer_checks
from harness.report import figures as fig
from harness.report.schedule_view import FROM_ISSUE_NOTE, schedule_table, timed
from harness.report.vector_figures import vector_latency_table, vector_rates_table
from harness.results.schedule import timed_from_dispatch

TERMINAL, MARKDOWN, HTML = "terminal", "md", "html"
EVERY = frozenset({TERMINAL, MARKDOWN, HTML})
FILES = frozenset({MARKDOWN, HTML})  # the formats written to a file, read later and in full


@dataclass(frozen=True)
class View:
    """What a section is drawn from. `data` is None where the terminal has a bare summary and
    no folder; `details` asks for every figure (report --details; the files always)."""

    summary: dict[str, Any]
    data: RunData | None
    details: bool


@dataclass(frozen=True)
class Table:
    spec: fig.Table
    title: str | None = None  # None: titled by its section


@dataclass(frozen=True)
class Note:
    """A sentence beside the tables, led by its `label` ("note", "telemetry") when it has one."""

    text: str
    label: str | None = None
    alarm: bool = False  # an error, drawn as one


@dataclass(frozen=True)
class Figures:
    """Plots and the notes on those not drawn. Only HTML shows images, and it draws them on
    demand: matplotlib would cost every terminal report a second on 2 cores."""

    draw: Callable[[], tuple[list[tuple[str, str]], list[str]]]  # ([(caption, data URI)], notes)


@dataclass(frozen=True)
class Pre:
    """Text shown as is (a config, LoadGen's settings); only HTML has room for it."""

    text: str


Block = Union[Table, Note, Figures, Pre]


@dataclass(frozen=True)
class Section:
    key: str
    title: str | Callable[[View], str]
    shows: Callable[[View], bool]  # what the run must have for the section to appear
    blocks: Callable[[View], list[Block]]
    formats: frozenset[str] = EVERY

    def heading(self, view: View) -> str:
        return self.title(view) if callable(self.title) else self.title


def shown(view: View, fmt: str) -> list[tuple[Section, list[Block]]]:
    """The sections of this run in `fmt`, in SECTIONS' order; one with nothing to show is left out."""
    out = []
    for section in SECTIONS:
        if fmt in section.formats and section.shows(view):
            blocks = section.blocks(view)
            if blocks:
                out.append((section, blocks))
    return out


# --- each section's content -----------------------------------------------------------------

def _always(v: View) -> bool:
    return True


def _folder(v: View) -> bool:
    return v.data is not None


def _samples(v: View) -> bool:
    return bool(v.summary["harness"].get("samples"))


def _answers_scored(v: View) -> bool:
    section = v.summary.get("text_accuracy")
    return isinstance(section, dict) and not section.get("error")  # an error is in the headline


def _answers(v: View) -> list[Block]:
    section = v.summary["text_accuracy"]
    notes = [Note(line) for line in fig.text_accuracy_source(section)]
    if v.details:  # a long sentence: the terminal's default view keeps to 80 columns
        notes.append(Note(f"95% CI: {section['ci_method']}"))
    return [Table(fig.text_accuracy_table(section)), *notes]


def _answers_checked(v: View) -> bool:
    return answer_checks.validation(v.summary) is not None


def _checks(v: View) -> list[Block]:
    return [Table(answer_checks.checks_table(v.summary)), *(Note(n) for n in answer_checks.example_lines(v.summary))]


def _accuracy_scored(v: View) -> bool:
    acc = v.summary.get("accuracy")
    return bool(acc and acc.get("metric"))


def _accuracy(v: View) -> list[Block]:
    acc = v.summary["accuracy"]
    return [Note(f"accuracy {acc['metric']}: {acc['value'] * 100:.2f}% of {acc['scored_samples']:,} samples")]


def _rerank(v: View) -> list[Block]:
    from harness.report.rerank_view import rerank_notes, rerank_table

    section = v.summary["rerank"]
    return [Table(rerank_table(section)), *(Note(n) for n in rerank_notes(section))]


def _latency_timed(v: View) -> bool:
    return _samples(v) and v.summary["run"]["scenario"] != "Offline"


def _latency(v: View) -> list[Block]:
    return [Table(fig.latency_table(v.summary, fig.LATENCY_KEYS if v.details else fig.BRIEF_LATENCY_KEYS))]


def _breakdown_title(v: View) -> str:
    bd = v.data.breakdown if v.data is not None else None
    if not bd:
        return "breakdown"
    dominant = bd["dominant"]
    if not dominant:
        return "where the time went"
    share = bd["stages"][dominant]["share"]
    return f"where the time went: {fig.stage_name(bd, dominant)} dominates ({fig.pct(share)} of mean latency)"


def _breakdown_known(v: View) -> bool:
    return bool(v.data is not None and v.data.breakdown) or _samples(v)


def _breakdown(v: View) -> list[Block]:
    if v.data is not None and v.data.breakdown:
        return [Table(fig.breakdown_table(v.data.breakdown))]
    # no records: the summary's own queue and service percentiles
    s = v.summary
    queue = "backlog" if timed_from_dispatch(s) else "queue"  # a closed loop's is its own
    rows = [[f"{queue if k == 'queue' else k} {p} (ms)", fig.ms(s["harness"][f"{k}_ms"][p])]
            for k in ("queue", "service") for p in ("p50", "p99")]
    return [Table((["stage", "harness"], rows))]


def _targeted(v: View) -> bool:
    return v.data is not None and v.data.rates["target_per_s"] is not None


def _rates(v: View) -> list[Block]:
    if v.data is None:
        return []
    r = v.data.rates
    return [Table(fig.rate_table(r)), *(Note(n, "note") for n in r["notes"])]


def _scheduled(v: View) -> bool:
    return timed(v.summary.get("schedule"))  # a timed harness-owned schedule: was it kept?


def _schedule(v: View) -> list[Block]:
    sched = v.summary["schedule"]

    def draw() -> tuple[list[tuple[str, str]], list[str]]:
        from harness.report.schedule_view import schedule_plot

        return [("offered vs dispatched load", schedule_plot(sched))], []

    return [Table(schedule_table(sched)), Note(FROM_ISSUE_NOTE, "note"), Figures(draw)]


def _has(key: str) -> Callable[[View], bool]:
    return lambda v: isinstance(v.summary.get(key), dict)


def _tokens(v: View) -> list[Block]:
    # the default terminal view has the figures a token run is about; --details every one
    specs = fig.llm_tables(v.summary["tokens"], details=v.details, from_dispatch=timed_from_dispatch(v.summary))
    return [Table(spec) for spec in specs]


def _vectors(v: View) -> list[Block]:
    vectors = v.summary["vectors"]
    note = Note("per request: dispatch to answer; per input: issue to answer", "note")
    return [Table(vector_rates_table(vectors)), Table(vector_latency_table(vectors), "vectors: latency"), note]


def _media(v: View) -> list[Block]:
    from harness.report.media_view import media_lines, media_table

    section = v.summary["media"]
    return [Table(media_table(section)), *(Note(line) for line in media_lines(section))]


def _transcription(v: View) -> list[Block]:
    from harness.report.transcription_view import NOTE, transcription_table

    return [Table(transcription_table(v.summary["transcription"])), *([Note(NOTE)] if v.details else [])]


def _sessions(v: View) -> list[Block]:
    s = v.summary

    def draw() -> tuple[list[tuple[str, str]], list[str]]:
        from harness.report.session_plot import turns_plot

        return [("TTFT and input tokens by turn", turns_plot(s["sessions"]))], []

    return [*(Table(spec, title) for title, spec in fig.session_tables(s)),
            *(Note(line) for line in fig.session_lines(s)), Figures(draw)]


def _telemetry(v: View) -> list[Block]:
    """What the server, the host and the GPUs said over the window; then the same over time
    beside the client's own in-flight count."""
    tel = v.summary["telemetry"]
    blocks: list[Block] = [Note(n, "telemetry") for n in tel.get("notes") or []]
    blocks += [Table(spec, title) for title, spec in fig.telemetry_tables(tel)]
    data = v.data
    if data is not None:
        def draw() -> tuple[list[tuple[str, str]], list[str]]:
            from harness.report.telemetry_plots import telemetry_plots

            plots = telemetry_plots(data.telemetry_entries, data.columns, data.child.get("threads") or {},
                                    data.child.get("loop_lag_ms"))
            return plots.figures, plots.notes

        blocks.append(Figures(draw))
    return blocks


def _scaled_out(v: View) -> bool:
    return bool(fig.distribute_tables(v.summary))


def _scale_out(v: View) -> list[Block]:
    return [Table(spec, title) for title, spec in fig.distribute_tables(v.summary)]


def _priced(v: View) -> bool:
    return v.data is not None and bool(v.data.cost)


def _cost_title(v: View) -> str:
    return f"cost ({(v.data.cost or {}).get('currency')})" if v.data is not None else "cost"


def _cost(v: View) -> list[Block]:
    cost = v.data.cost if v.data is not None else None
    return [Table(fig.cost_table(cost)), Table(fig.cost_unit_table(cost), "cost per unit")] if cost else []


def _loadgen_failed(v: View) -> bool:
    return bool(v.summary["loadgen"].get("errors"))


def _loadgen_errors(v: View) -> list[Block]:
    return [Note("; ".join(v.summary["loadgen"]["errors"]), "LoadGen errors", alarm=True)]


def itl(data: RunData) -> tuple[Any, Any] | None:
    """Per-token inter-token latencies of the successful streamed requests (the summary's
    ITL, same rule), or None when the run kept no chunk times."""
    from harness.results.token_metrics import itl_samples, read_token_entries

    entries = [e for e in read_token_entries(data.run_dir) if e.get("status") == "ok"]
    return itl_samples(entries) if entries else None


def _plots(v: View) -> list[Block]:
    data = v.data
    if data is None:
        return []
    if data.columns is None or not len(data.columns["issue_ns"]):
        return [Note("no records.parquet in the results folder: no per-request plots")]

    def draw() -> tuple[list[tuple[str, str]], list[str]]:
        from harness.report.plots import all_plots

        plots = all_plots(data.columns, data.breakdown, data.rates["target_per_s"], itl(data))
        return plots.figures, plots.notes

    return [Figures(draw)]


def _config(v: View) -> list[Block]:
    import yaml

    return [Pre(yaml.safe_dump(v.data.config, sort_keys=False))] if v.data is not None else []


def _system(v: View) -> list[Block]:
    return [Table((["item", "value"], fig.system_rows(v.data)))] if v.data is not None else []


def _versions(v: View) -> list[Block]:
    return [Table((["component", "version"], fig.versions(v.data)))] if v.data is not None else []


def _settings(v: View) -> list[Block]:
    return [Pre(json.dumps(v.summary["loadgen"].get("effective_settings") or {}, indent=1))]


#: The one order. It is the terminal's, the view read most (verdict, speed, why, then the
#: detail), with one exception: the answers' scores and checks come right after throughput, where the
#: HTML page had them, because a faster run that answers worse is not better. Validity and
#: reliability are the files' only: the terminal's headline already says each check that
#: failed, why, the fix and the failures by reason. HTML alone has room for plots, the config
#: and LoadGen's settings; the system and versions are the files', read later and elsewhere.
SECTIONS: tuple[Section, ...] = (
    Section("throughput", "throughput", _always, lambda v: [Table(fig.throughput_table(v.summary))]),
    Section("answers", "answers' accuracy", _answers_scored, _answers),
    Section("checks", "answers' checks", _answers_checked, _checks),
    Section("accuracy", "accuracy", _accuracy_scored, _accuracy),
    Section("rerank", "rerank", _has("rerank"), _rerank),
    Section("latency", "latency", _latency_timed, _latency),
    Section("validity", "validity", _always, lambda v: [Table(fig.validity_table(v.summary))], FILES),
    Section("reliability", "reliability", _always, lambda v: [Table(fig.reliability_table(v.summary))], FILES),
    Section("breakdown", _breakdown_title, _breakdown_known, _breakdown),
    Section("rates", "achieved vs target rate", _targeted, _rates),
    Section("schedule", "arrival schedule", _scheduled, _schedule),
    Section("tokens", "tokens", _has("tokens"), _tokens),
    Section("vectors", "vectors (inputs batched per request)", _has("vectors"), _vectors),
    Section("media", "images and video", _has("media"), _media),
    Section("transcription", "speech to text", _has("transcription"), _transcription),
    Section("sessions", "sessions", _has("sessions"), _sessions),
    Section("telemetry", "system under test (telemetry)", _has("telemetry"), _telemetry),
    Section("scale-out", "scale-out", _scaled_out, _scale_out),
    Section("cost", _cost_title, _priced, _cost),
    Section("loadgen-errors", "LoadGen errors", _loadgen_failed, _loadgen_errors),
    Section("plots", "plots", _folder, _plots, frozenset({HTML})),
    Section("config", "config (run.yaml)", _folder, _config, frozenset({HTML})),
    Section("system", "system", _folder, _system, FILES),
    Section("versions", "versions", _folder, _versions, FILES),
    Section("settings", "LoadGen effective settings", _always, _settings, frozenset({HTML})),
)
