"""The figures every renderer shows, as rows of text, so terminal, Markdown and HTML agree.

Each function returns (header, rows); a renderer only decides how a table looks.
"""

from __future__ import annotations

import math
from typing import Any

from harness.results import metrics
from harness.results.schedule import schedule_words, timed_from_dispatch
from harness.results.stats import PERCENTILE_KEYS
from harness.results.summary import harness_rejected, success_rate_failed

Table = tuple[list[str], list[list[str]]]

LATENCY_KEYS = PERCENTILE_KEYS + ("mean", "min", "max")


def ms_text(v: float) -> str:
    """3,493 or 1.05 or 0.0123: plain digits, never 3.49e+03."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def numeric_columns(spec: Table) -> list[bool]:
    """Which columns hold only figures (right-aligned); text columns read better left-aligned."""
    header, rows = spec

    def is_num(cell: str) -> bool:
        head = cell.strip()[:1]
        return head == "" or head.isdigit() or head in "-—"

    return [i > 0 and all(is_num(r[i]) for r in rows if i < len(r)) for i in range(len(header))]


def ms(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def num(v: float | None, digits: int = 1) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


def rate(v: float | None) -> str:
    """A rate to 3 significant figures (0.148, 12.3, 457), whole numbers from 1,000 up: one
    decimal would print a 0.15/s target and LoadGen's 0.14 alike as 0.1."""
    if v is None:
        return "—"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if v == 0:
        return "0"
    return f"{v:.{max(0, 2 - math.floor(math.log10(abs(v))))}f}"


def cut_middle(text: str, limit: int) -> str:
    """`text` cut to `limit` characters in the middle: two hashes, URLs or paths differ at
    their ends as often as at their starts (a port, a file name)."""
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    return text[:head] + "…" + text[len(text) - (limit - 1 - head):]


def pct(v: float | None) -> str:
    return "—" if v is None else f"{v * 100:.2f}%"


def money(v: float | None, currency: str) -> str:
    if v is None:
        return "—"
    # Small per-request amounts need significant digits, not two decimals.
    text = f"{v:,.2f}" if abs(v) >= 100 else f"{v:.4g}"
    return f"{text} {currency}"


def label(key: str) -> str:
    return key.replace("_", ".") if key.startswith("p") and key[1:2].isdigit() else key


def verdict(summary: dict[str, Any]) -> str:
    run = summary["run"]
    if harness_rejected(summary):
        return "INVALID"  # LoadGen's VALID speaks of latencies only, and trusts the wall clock
    result = summary["validity"].get("result")
    if result:
        return str(result)
    return "ACCURACY" if run.get("mode") == "AccuracyOnly" else "NO RESULT"


#: the harness's p99 is shown beside LoadGen's (the headline) when they differ by more
HEADLINE_TOLERANCE = 0.10


#: a headline line's most characters: the terminal indents it by 2 in 80 columns
HEADLINE_WIDTH = 78


def token_lines(summary: dict[str, Any], official: dict[str, Any]) -> list[str]:
    """What a token run is about, LoadGen's figures (token latencies, tokens/s): each p99
    beside the bound LoadGen judged it by (Server, Interactive), and each bound it broke named
    on a line of its own. One line while it fits the headline's width, else TPOT on its own."""
    bounds = ((summary.get("tokens") or {}).get("loadgen") or {})
    over = []

    def part(name: str, key: str) -> str:
        p50, p99, bound = official.get(f"{key}_p50"), official.get(f"{key}_p99"), bounds.get(f"{key}_bound_ms")
        text = f"{name} p50/p99 {ms(p50)}/{ms(p99)} ms"
        if bound:
            text += f" (bound {bound:g} ms)"
            if p99 is not None and p99 >= bound:
                over.append(f"{name} p99 {ms(p99)} ms is over its {bound:g} ms bound")
        return text

    parts = [part("TTFT", "ttft")]
    if official.get("tpot_p50") is not None:
        parts.append(part("TPOT", "tpot"))
    if official.get("output_tokens_per_s"):
        parts.append(f"LoadGen {rate(official['output_tokens_per_s'])} tok/s")
    joined = " · ".join(parts)
    # the headline is printed indented by 2 in 80 columns: a longer line wraps mid-figure
    fits = len(joined) <= HEADLINE_WIDTH or len(parts) == 1
    lines = [joined] if fits else [" · ".join(parts[:1] + parts[2:]), parts[1]]
    return lines + [f"OVER: {o}" for o in over]


def issue_lines(summary: dict[str, Any]) -> list[str]:
    """On a schedule the harness owns: the headline is timed from dispatch, said so, and
    LoadGen's issue-based figures follow, labelled apart (they include the backlog). Packed
    into the headline's width, a figure never cut."""
    issue = metrics.from_summary(summary, "loadgen")
    words = schedule_words(summary)
    lines = [f"timed from dispatch: a {words}, the harness holds the backlog" if words else "timed from dispatch"]
    parts = [f"p50/p99 {ms(issue['latency_p50'])}/{ms(issue['latency_p99'])} ms"]
    if summary.get("tokens") and issue.get("ttft_p50") is not None:
        parts.append(f"TTFT p50/p99 {ms(issue['ttft_p50'])}/{ms(issue['ttft_p99'])} ms")
    # Offline logs no TTFT: the one from issue is the harness's stamp of LoadGen's issue
    return lines + pack(f"from LoadGen's {summary['run']['scenario']} issue (includes the backlog):", parts)


def pack(label: str, parts: list[str], sep: str = " · ") -> list[str]:
    """`label` then `parts`, as few lines of HEADLINE_WIDTH as hold them; a part never splits
    and a continued line is indented by 2."""
    lines = [label]
    for part in parts:
        joint = " " if lines[-1] == label else sep
        if len(lines[-1]) + len(joint) + len(part) <= HEADLINE_WIDTH:
            lines[-1] += joint + part
        else:
            lines.append("  " + part)
    return lines


def unwrapped(lines: list[str]) -> list[str]:
    """The headline for a page, where lines are bullets that wrap themselves: a line `pack`
    continued (indented by 2) joins the one before it instead of becoming a bullet of its own."""
    out: list[str] = []
    for line in lines:
        if line.startswith("  ") and out:
            out[-1] += " " + line.strip()
        else:
            out.append(line)
    return out


def headline(summary: dict[str, Any], cost: dict[str, Any] | None) -> list[str]:
    """One line each: validity, speed, reliability, cost — the glance a reader needs."""
    run, ours, lg = summary["run"], summary["harness"], summary["loadgen"]
    lines = [f"{verdict(summary)} · {run['scenario']} {run['mode']} · {run['backend']} · {run['name']}"]
    if summary.get("status") != "complete":
        lines.append(f"INCOMPLETE: {summary.get('incomplete_reason')}")
    # LoadGen's figures lead (the official record; on a harness-owned schedule its latencies
    # follow, labelled, after those from dispatch); the harness's own follow, named as such
    speed = f"LoadGen {rate(lg.get('throughput_per_s'))}/s"
    # The same figure `harness compare` calls latency_p99: per query in MultiStream, as LoadGen's;
    # from dispatch on a schedule the harness owns (a closed loop), where Offline has one too.
    official = metrics.from_summary(summary)
    lat = official["latency_p99"]
    ours_lat = metrics.from_summary(summary, "harness")["latency_p99"]
    from_dispatch = timed_from_dispatch(summary)
    if (run["scenario"] != "Offline" or from_dispatch) and lat is not None:
        per_query = " per query" if run["scenario"] == "MultiStream" else ""
        speed += f", p99{per_query} {ms(lat)} ms" + (" from dispatch" if from_dispatch else "")
    speed += f" · harness {rate(ours.get('throughput_per_s'))}/s succeeded"
    lines.append(speed)
    if summary.get("tokens") and official.get("ttft_p50") is not None:
        lines += token_lines(summary, official)
    if from_dispatch:
        lines += issue_lines(summary)
    elif run["scenario"] != "Offline" and lat and ours_lat and abs(ours_lat / lat - 1) > HEADLINE_TOLERANCE:
        # the official figure leads; ours is said for what it is, with the likely cause
        delay = (summary.get("agreement") or {}).get("issue_delay_ms")
        if (summary["validity"].get("harness") or {}).get("clock_ok") is False:
            cause = "LoadGen's is void: the clock was stepped"
        elif ours.get("failed"):
            cause = "successes only; LoadGen times failed samples too"
        else:
            cause = "its callback" + (f"; LoadGen adds its issue delay, {delay:.2g} ms mean"
                                      if isinstance(delay, (int, float)) and delay > 0 else "")
        lines.append(f"harness p99 {ms(ours_lat)} ms ({cause})")
    tput_ratio = (summary.get("agreement") or {}).get("throughput")
    delay = (summary.get("agreement") or {}).get("issue_delay_ms")
    if (run["scenario"] == "Offline" and tput_ratio and abs(tput_ratio - 1) > HEADLINE_TOLERANCE
            and isinstance(delay, (int, float)) and delay > 0 and not ours.get("failed")):
        # the rates differ by where the clock starts, and LoadGen's start is the right one
        lines.append(f"harness times from its callback; LoadGen from {num(delay / 1e3, 2)} s before (query hand-over)")
    peak = summary.get("find_peak")
    if peak:
        lines.append(
            f"FindPeak: {rate(peak['peak_qps'])} QPS after {peak['round_count']} rounds · "
            f"figures: the reported round, {peak['samples_final_round'] or 0:,} of {peak['samples_all_rounds']:,} samples"
        )
    if ours.get("samples"):
        lines.append(
            f"success {pct(ours['success_rate'])} ({ours['succeeded']:,} of {ours['samples']:,})"
            + (f" · failures: {', '.join(f'{k} {v}' for k, v in ours['failures_by_reason'].items())}" if ours["failed"] else "")
            + (f" · below min_success_rate {summary['validity']['harness']['min_success_rate'] * 100:g}%"
               if success_rate_failed(summary) else "")
        )
    client = (summary.get("telemetry") or {}).get("client") or {}
    if client.get("saturated"):
        lines.append(f"CLIENT SATURATED: the load generator may have limited this result ({'; '.join(client['signals'])});"
                     " send from more client processes (distribute.client_processes) or a faster machine")
    answers = answers_line(summary.get("text_accuracy"))
    if answers:
        lines.append(answers)
    checked = checks_line(summary)
    if checked:
        lines.append(checked)
    setup = setup_line(summary)
    if setup:
        lines.append(setup)
    if cost:
        c = cost["currency"]
        lines.append(
            f"cost {money(cost['per_request'], c)} per request · {money(cost['per_successful_task'], c)} per successful task"
            f" · total {money(cost['total'], c)}"
        )
    return lines


#: the words of summary.json's text_accuracy figures
ACCURACY_LABELS = {"rouge1": "ROUGE-1", "rouge2": "ROUGE-2", "rougeL": "ROUGE-L", "rougeLsum": "ROUGE-Lsum",
                   "exact_match": "exact match (%)"}


def _ci(ci: list[float] | None) -> str:
    return f"{ci[0]:.2f}–{ci[1]:.2f}" if ci else "—"


def validation(summary: dict[str, Any]) -> dict[str, Any] | None:
    v = (summary.get("tokens") or {}).get("validation")
    return v if isinstance(v, dict) and v.get("checked") else None


def what_was_checked(summary: dict[str, Any]) -> str:
    """"schema-valid" when every check was a schema's, else "valid"."""
    ds = summary.get("dataset") or {}
    return "schema-valid" if ds.get("with_schema") and not ds.get("validators") else "valid"


def checks_line(summary: dict[str, Any]) -> str | None:
    """The headline's line: the valid rate, of how many, and the rejected ones by reason."""
    v = validation(summary)
    if v is None:
        return None
    line = f"answers {what_was_checked(summary)} {pct(v['rate'])} ({v['valid']:,} of {v['checked']:,} checked)"
    reasons = v.get("invalid_by_reason") or {}
    if reasons:
        line += " · invalid: " + ", ".join(f"{k} {n:,}" for k, n in reasons.items())
    return cut_middle(line, HEADLINE_WIDTH)


def answers_line(section: dict[str, Any] | None) -> str | None:
    """The answers' headline score, beside speed: a faster run that answers worse is not better."""
    if not isinstance(section, dict):
        return None
    if section.get("error"):
        return f"answers not scored: {section['error']}"
    failed = f" · {section['failed']} failed" if section.get("failed") else ""
    if r := section.get("rouge"):
        return (f"answers: ROUGE-1 {r['rouge1']:.2f} (95% CI {_ci(r['ci95'].get('rouge1'))}), "
                f"ROUGE-L {r['rougeL']:.2f} · n={r['samples']}{failed}")
    if e := section.get("exact_match"):
        return (f"answers: exact match {e['exact_match']:.2f}% (95% CI {_ci(e.get('ci95'))}) · "
                f"{e['correct']} of {e['samples']} right{failed}")
    if w := section.get("wer"):
        return (f"transcripts: WER {w['wer']:.2f}% (95% CI {_ci(w.get('ci95'))}) · n={w['samples']} · "
                f"{w['wrong_answers']} wrong{failed}")
    return None


def text_accuracy_table(section: dict[str, Any]) -> Table:
    """summary.json's text_accuracy: each score with its interval and count, then the answers' length."""
    rows: list[list[str]] = []
    if r := section.get("rouge"):
        rows += [[ACCURACY_LABELS[k], f"{r[k]:.4f}", _ci(r["ci95"].get(k)), str(r["samples"])]
                 for k in ("rouge1", "rouge2", "rougeL", "rougeLsum")]
        rows.append(["generated characters (gen_len)", str(r["gen_len"]), "", str(r["gen_num"])])
        if r.get("tokens_per_sample") is not None:
            rows.append(["tokens per sample", num(r["tokens_per_sample"]), "", str(r["gen_num"])])
    if e := section.get("exact_match"):
        rows.append([ACCURACY_LABELS["exact_match"], f"{e['exact_match']:.4f}", _ci(e.get("ci95")), str(e["samples"])])
        if e.get("tokens_per_sample") is not None:
            rows.append(["tokens per sample", num(e["tokens_per_sample"]), "", str(e["samples"])])
    if w := section.get("wer"):
        rows.append(["word error rate (%)", f"{w['wer']:.4f}", _ci(w.get("ci95")), str(w["samples"])])
        rows.append(["accuracy, 100 - WER (%)", f"{w['accuracy']:.4f}", "", str(w["samples"])])
        rows.append(["word errors / reference words", f"{w['errors']} / {w['words']}", "", str(w["samples"])])
        rows.append([f"wrong transcripts (WER > {w['wrong_above']:g}%)", str(w["wrong_answers"]), "", str(w["samples"])])
    rows.append(["answers failed (scored as wrong)", str(section["failed"]), "", str(section["answers"])])
    return ["figure", "value", "95% CI", "n"], rows


def text_accuracy_source(section: dict[str, Any]) -> list[str]:
    """Where the scored answers came from, and the tokenizer that decoded them (its file name)."""
    out = [f"scored: the answers in {section['source']}"]
    if decoded := section.get("decoded_with"):
        out.append(f"ids decoded with {decoded.replace(chr(92), '/').rsplit('/', 1)[-1]}")
    return out


def setup_line(summary: dict[str, Any]) -> str | None:
    """Load, compile and warm-up happen before LoadGen starts: shown, never in the figures."""
    t = summary.get("timings_s") or {}
    backend = summary.get("backend") or {}
    parts = []
    if t.get("load_s") is not None:
        # a compiling backend compiles while it loads (at the max_batch shape)
        compiled = f" (compile {backend['compile_s']:.2f} s)" if backend.get("compile_s") is not None else ""
        parts.append(f"load {t['load_s']:.2f} s{compiled}")
    if t.get("warmup_s") is not None:
        parts.append(f"warm-up {t['warmup_s']:.2f} s")
    if not parts:
        return None
    test = f" · timed test {t['test_s']:.2f} s" if t.get("test_s") is not None else ""
    return "setup before LoadGen started: " + ", ".join(parts) + test


def throughput_table(summary: dict[str, Any]) -> Table:
    ours, lg, agree = summary["harness"], summary["loadgen"], summary.get("agreement") or {}
    rows = [["throughput (samples/s)", rate(lg.get("throughput_per_s")), rate(ours.get("throughput_per_s"))]]
    if agree.get("throughput") is not None:
        rows.append(["harness / LoadGen", "", f"{agree['throughput']:.4f}"])
    if lg.get("scheduled_samples_per_s") is not None:
        rows.append(["scheduled by LoadGen (samples/s)", rate(lg["scheduled_samples_per_s"]), ""])
    if lg.get("query_count") is not None or ours.get("samples"):
        # LoadGen counts queries (Offline: one query of many samples), the harness samples.
        rows.append(["queries (LoadGen) / samples (harness)", num(lg.get("query_count"), 0), num(ours.get("samples"), 0)])
    if ours.get("mean_batch_size") is not None:
        rows.append(["mean batch size", "", num(ours["mean_batch_size"], 2)])
    return ["figure", "LoadGen", "harness"], rows


#: the latency rows of the default terminal view; --details (and every file format) has all
BRIEF_LATENCY_KEYS = ("p50", "p90", "p99", "mean", "max")


def latency_table(summary: dict[str, Any], keys: tuple[str, ...] = LATENCY_KEYS) -> Table:
    run, ours, lg = summary["run"], summary["harness"], summary["loadgen"]
    per_query = run["scenario"] == "MultiStream"
    mine = ours.get("query_latency_ms" if per_query else "latency_ms") or {}
    name = "query latency" if per_query else "latency"
    rows = [[f"{name} {label(k)} (ms)", ms(lg["latency_ms"].get(k)), ms(mine.get(k))] for k in keys]
    es = lg.get("early_stopping_latency_ms") or {}
    # 0 is LoadGen's "not computed" (e.g. a Server run), not a measurement
    if es.get("single_stream") and run["scenario"] == "SingleStream":
        rows.append(["early-stopping p90 estimate (ms)", ms(es["single_stream"]), ""])
    if es.get("multi_stream") and per_query:
        rows.append(["early-stopping p99 estimate (ms)", ms(es["multi_stream"]), ""])
    if (summary.get("agreement") or {}).get("issue_delay_ms") is not None:
        rows.append(["LoadGen issue delay, mean (ms)", "", ms(summary["agreement"]["issue_delay_ms"])])
    split = (summary.get("agreement") or {}).get("latency_split")
    if split:  # from LoadGen's trace: whose time the delay is
        rows.append(["  LoadGen late to issue, mean/p99", "", f"{ms(split['loadgen_issue_lateness']['mean'])}/"
                     f"{ms(split['loadgen_issue_lateness']['p99'])}"])
        rows.append(["  harness hand-over, mean/p99", "", f"{ms(split['handover']['mean'])}/{ms(split['handover']['p99'])}"])
    return ["figure", "LoadGen", "harness"], rows


def validity_table(summary: dict[str, Any]) -> Table:
    v = summary["validity"]
    # a check LoadGen did not make (Offline has no latency constraint) is left out, not "None"
    checks = (("min duration met", "min_duration_met"), ("min queries met", "min_queries_met"),
              ("performance constraints met", "perf_constraints_met"), ("early stopping met", "early_stopping_met"))
    rows = [["result", str(v.get("result") or "—")]]
    rows += [[name, str(v[key])] for name, key in checks if v.get(key) is not None]
    harness = v.get("harness")
    if isinstance(harness, dict) and harness.get("success_rate_ok") is not None:
        rows.append([f"success rate ≥ {harness['min_success_rate'] * 100:g}% (harness)", str(harness["success_rate_ok"])])
    if v.get("early_stopping_result"):
        rows.append(["early stopping", str(v["early_stopping_result"])])
    if v.get("loadgen_invalid_reason"):
        rows.append(["LoadGen's reason", str(v["loadgen_invalid_reason"]).strip()])
    rows += [["why", r] for r in v.get("reasons") or []]
    rows += [["fix", f] for f in v.get("fixes") or []]
    return ["check", "value"], rows


def reliability_table(summary: dict[str, Any]) -> Table:
    ours = summary["harness"]
    if not ours.get("samples"):
        return ["figure", "value"], [["samples", "0"]]
    rows = [
        ["success rate", pct(ours["success_rate"])],
        ["succeeded", f"{ours['succeeded']:,}"],
        ["failed", f"{ours['failed']:,}"],
    ]
    rows += [[f"failed: {reason}", f"{count:,}"] for reason, count in (ours.get("failures_by_reason") or {}).items()]
    return ["figure", "value"], rows


def stage_name(bd: dict[str, Any], name: str | None) -> str | None:
    """A breakdown stage as the views name it: a harness-owned schedule's queue is its backlog."""
    return (bd.get("labels") or {}).get(name, name) if name else name


def breakdown_table(bd: dict[str, Any]) -> Table:
    rows = []
    for name, st in bd["stages"].items():
        if name == "generation" and bd["service_ends_at"] == "completion":
            continue  # nothing streams: the stage is zero by construction
        mark = " ◀ dominant" if name == bd["dominant"] else ""
        rows.append([f"{stage_name(bd, name)}{mark}", ms(st["mean_ms"]), ms(st["p50_ms"]), ms(st["p99_ms"]), pct(st["share"])])
    e2e = bd["e2e"]
    rows.append(["end to end", ms(e2e["mean_ms"]), ms(e2e["p50_ms"]), ms(e2e["p99_ms"]), pct(1.0 if e2e["mean_ms"] else None)])
    for name, st in (bd.get("backend_stages") or {}).items():
        rows.append([f"  backend: {name}", ms(st["mean_ms"]), "", ms(st["p99_ms"]), ""])
    return ["stage", "mean (ms)", "p50 (ms)", "p99 (ms)", "share of mean"], rows


def rate_table(r: dict[str, Any]) -> Table:
    rows = [
        ["target (samples/s)", rate(r["target_per_s"])],
        ["offered by LoadGen (samples/s)", rate(r["offered_per_s"])],
        ["completed (samples/s)", rate(r["completed_per_s"])],
        ["succeeded (samples/s)", rate(r["succeeded_per_s"])],
    ]
    if r["achieved_ratio"] is not None:
        rows.append(["completed / target", pct(r["achieved_ratio"])])
    return ["rate", "value"], rows  # r["notes"] are sentences: renderers print them below


def _is_stats(v: Any) -> bool:
    return isinstance(v, dict) and "p50" in v


def _scalar(v: Any) -> str:
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return str(v)
    return num(v, 3 if isinstance(v, float) and abs(v) < 10 else (1 if isinstance(v, float) else 0))


#: the client's wait for a free slot is shown (TTFT from dispatch) once it is this share of TTFT
CLIENT_QUEUE_SHOWN = 0.05


def _issue_rows(tokens: dict[str, Any], lg: dict[str, Any], add: Any, details: bool) -> None:
    """The latency rows of a run on LoadGen's schedule: timed from its issue."""
    add("TTFT (LoadGen)", lg.get("ttft_ms"))
    add("TTFT", tokens.get("ttft_ms"))
    add("TTFO (answer)", tokens.get("ttfo_ms"))  # a reasoning model's first answer token
    add("reasoning time", tokens.get("reasoning_time_ms"))  # first token to first answer token
    issue, dispatch = tokens.get("ttft_ms") or {}, tokens.get("ttft_from_dispatch_ms") or {}
    if details or (issue.get("mean") and dispatch.get("mean") is not None and
                   (issue["mean"] - dispatch["mean"]) > CLIENT_QUEUE_SHOWN * issue["mean"]):
        add("TTFT from dispatch", dispatch)  # without the wait for a free in-flight slot
    add("TPOT (LoadGen)", lg.get("tpot_ms"))
    add("TPOT", tokens.get("tpot_ms"))
    add("ITL", tokens.get("itl_ms"))
    add("E2E", tokens.get("e2e_ms"))


#: the latency columns of the token table: the default view's, and --details' and the
#: files' (six ms columns and the row's name fit 80 columns)
LLM_COLUMNS = ("p50", "p90", "p99", "mean")
LLM_DETAIL_COLUMNS = ("p50", "p90", "p99", "p99_9", "mean", "max")


_SLO_NAMES = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "E2E"}


def llm_tables(tokens: dict[str, Any], details: bool = False, from_dispatch: bool = False) -> list[Table]:
    """A token run's figures, every row named in words, and the one source of them for the
    terminal, Markdown and HTML: the latencies (LoadGen's first where it has them), then
    rates, counts and checks. A row with no data is left out, never printed as None.
    `details` (report --details, and the files) adds the totals, the count checks, the
    prompt and KV caches, LoadGen's bounds and early stopping, and the harness/LoadGen
    ratios; the default view fits 80 columns. `from_dispatch` (a schedule the harness owns,
    harness.results.schedule): the latencies from dispatch first, those from issue after,
    named for the backlog they hold."""
    lg = tokens.get("loadgen") if isinstance(tokens.get("loadgen"), dict) else {}
    cols = LLM_DETAIL_COLUMNS if details else LLM_COLUMNS
    lat: list[list[str]] = []

    def add(name: str, block: Any) -> None:
        if _is_stats(block) and any(block.get(c) is not None for c in cols):
            lat.append([name, *[ms(block.get(c)) for c in cols]])

    if from_dispatch:
        add("TTFT from dispatch", tokens.get("ttft_from_dispatch_ms"))
        add("TTFO (answer)", tokens.get("ttfo_ms"))  # from dispatch too here (token_metrics)
        add("reasoning time", tokens.get("reasoning_time_ms"))
        add("TPOT", tokens.get("tpot_ms"))
        add("ITL", tokens.get("itl_ms"))
        add("E2E from dispatch", tokens.get("e2e_from_dispatch_ms"))
        add("TTFT (LoadGen, +backlog)", lg.get("ttft_ms"))
        add("TTFT from issue, +backlog", tokens.get("ttft_ms"))
        add("E2E from issue, +backlog", tokens.get("e2e_ms"))
    else:
        _issue_rows(tokens, lg, add, details)
    tables: list[Table] = [(["latency (ms)", *[label(c) for c in cols]], lat)] if lat else []
    rows: list[list[str]] = []

    def row(name: str, value: Any, text: str | None = None) -> None:
        if value is not None:
            rows.append([name, text if text is not None else _scalar(value)])

    row("requests", tokens.get("requests"))
    if details:
        row("output tokens", tokens.get("output_tokens"))
        row("input tokens", tokens.get("input_tokens"))
    row("output tokens/s, total", tokens.get("output_tokens_per_s"), rate(tokens.get("output_tokens_per_s")))
    row("output tokens/s, LoadGen", lg.get("output_tokens_per_s"), rate(lg.get("output_tokens_per_s")))
    per_req = tokens.get("request_output_tokens_per_s") or {}
    row("output tokens/s per request (p50)", per_req.get("p50"), rate(per_req.get("p50")))
    if details:
        row("output tokens/s per request (p99)", per_req.get("p99"), rate(per_req.get("p99")))
    row("output tokens per request (mean)", tokens.get("output_tokens_per_request_mean"),
        num(tokens.get("output_tokens_per_request_mean")))
    row("input tokens/s", tokens.get("input_tokens_per_s"), rate(tokens.get("input_tokens_per_s")))
    good = tokens.get("goodput") or {}
    if good.get("requests") is not None:
        per_s = f"{rate(good['per_s'])}/s, " if good.get("per_s") is not None else ""
        share = f"{pct(good['rate'])}, " if good.get("rate") is not None else ""
        row("goodput", good["requests"], f"{per_s}{share}{good['requests']:,} requests ({good.get('criterion')})")
    for key, a in ((tokens.get("slo") or {}).get("attainment") or {}).items():
        name = _SLO_NAMES.get(key, key)  # the config's slo.ttft_ms, in words
        row(f"SLO {name} <= {a.get('target'):g} ms", a.get("rate"), pct(a.get("rate")))
    v = tokens.get("validation") or {}
    if v:
        row("answers valid", v.get("rate"), f"{pct(v.get('rate'))} of {v.get('checked'):,} checked")
    row("cached input tokens", tokens.get("cached_input_tokens"))
    if details:
        _cache_rows(tokens, row)
    rep = tokens.get("repeated_prompts") or {}
    if rep.get("repeats"):
        row("repeated prompts", rep["repeats"],
            f"{rep['repeats']:,} of {rep['requests']:,} requests sent a prompt sent before (a prompt cache may serve them)")
    src = tokens.get("token_count_source") or {}
    row("output counted from", ", ".join(f"{k} {n:,}" for k, n in src.items()) or None)
    src = tokens.get("input_token_count_source") or {}
    row("input counted from", ", ".join(f"{k} {n:,}" for k, n in src.items()) or None)
    src = tokens.get("output_ids_source") or {}
    row("output ids logged from", ", ".join(f"{k} {n:,}" for k, n in src.items()) or None)
    mm = tokens.get("mismatch") or {}
    if details:
        row("client's own count", tokens.get("client_count_method"))
    if mm.get("requests_differing") or (details and mm.get("requests_compared")):
        ratio = mm.get("server_over_client")
        row("server/client count differ", mm["requests_differing"],
            f"{mm['requests_differing']:,} of {mm['requests_compared']:,} requests"
            + (f" (x{ratio:.3f})" if ratio is not None else ""))
    if details and mm.get("requests_compared"):
        row("server/client tokens", mm.get("server_tokens"), f"{mm['server_tokens']:,} / {mm['client_tokens']:,}")
    rs = tokens.get("reasoning") or {}
    if rs.get("reasoning_tokens") is not None:
        share = f" ({pct(rs['reasoning_share'])} reasoning)" if rs.get("reasoning_share") is not None else ""
        row("reasoning / answer tokens", rs["reasoning_tokens"], f"{rs['reasoning_tokens']:,} / {rs.get('answer_tokens') or 0:,}{share}")
        per_req = (rs.get("reasoning_tokens_per_request_mean"), rs.get("answer_tokens_per_request_mean"))
        if None not in per_req:
            row("  per request (mean)", per_req[0], f"{num(per_req[0])} / {num(per_req[1])}")
    rm = tokens.get("reasoning_mismatch") or {}
    if rm.get("requests_differing"):
        row("server/client reasoning differ", rm["requests_differing"],
            f"{rm['requests_differing']:,} of {rm['requests_compared']:,} requests (x{rm.get('server_over_client') or 0:.3f})")
    if tokens.get("tool_calls") is not None and tokens.get("tool_call_requests") is not None:
        bad = f", {tokens['tool_calls_not_json']:,} not JSON" if tokens.get("tool_calls_not_json") else ""
        row("tool calls", tokens["tool_calls"],
            f"{tokens['tool_calls']:,} in {tokens['tool_call_requests']:,} requests, {tokens.get('tool_call_tokens') or 0:,} tokens{bad}")
    if tokens.get("requests_retried") or (details and tokens.get("retries") is not None):
        row("requests retried", tokens.get("requests_retried"),
            f"{tokens.get('requests_retried') or 0:,} ({tokens.get('retries') or 0:,} retries)")
    if details:
        _loadgen_rows(lg, tokens.get("agreement") or {}, row)
    if rows:
        tables.append((["figure", "value"], rows))
    return tables


def _cache_rows(tokens: dict[str, Any], row: Any) -> None:
    """The prompt cache (what the dataset's prefixes allow, what the server reported) and the
    KV cache (a backend's measured bytes per token beside the estimate), in words."""
    pc = tokens.get("prompt_cache") or {}
    row("prompt cache: reusable (dataset, upper bound)", pc.get("expected_reusable_fraction"),
        pct(pc.get("expected_reusable_fraction")))
    row("prompt cache: cached (server)", pc.get("observed_cached_fraction"), pct(pc.get("observed_cached_fraction")))
    by = pc.get("ttft_ms_by_cache") or {}
    hit, miss = by.get("hit") or {}, by.get("miss") or {}
    if hit.get("p50") is not None or miss.get("p50") is not None:
        row("TTFT p50, cache hit/miss (ms)", by.get("hit_requests"),
            f"{ms(hit.get('p50'))}/{ms(miss.get('p50'))} ({by.get('hit_requests', 0):,}/{by.get('miss_requests', 0):,} requests)")
    kv = tokens.get("kv_cache") or {}
    row("KV cache bytes/token, measured", kv.get("measured_bytes_per_token"), num(kv.get("measured_bytes_per_token"), 0))
    row("KV cache bytes/token, estimate", kv.get("estimate_bytes_per_token"), num(kv.get("estimate_bytes_per_token"), 0))


def _loadgen_rows(lg: dict[str, Any], agreement: dict[str, Any], row: Any) -> None:
    """LoadGen's token bounds and early-stopping verdicts, and the harness/LoadGen ratios."""
    for name in ("TTFT", "TPOT"):
        key = name.lower()
        bound = lg.get(f"{key}_bound_ms")
        row(f"{name} bound (LoadGen)", bound, f"{bound:g} ms" if bound is not None else None)
        stop = lg.get(f"{key}_early_stopping")
        row(f"{name} early stopping (LoadGen)", stop, " ".join(str(stop).replace("*", " ").split()) if stop else None)
        ratios = [agreement.get(f"{key}_{p}") for p in ("p50", "p90", "p99")]
        if any(r is not None for r in ratios):
            row(f"{name} harness/LoadGen, p50/p90/p99", ratios[0],
                "/".join("—" if r is None else f"{r:.3f}" for r in ratios))
    ratio = agreement.get("output_tokens_per_s")
    row("output tokens/s harness/LoadGen", ratio, f"{ratio:.4f}" if ratio is not None else None)


def tokens_tables(tokens: dict[str, Any], from_dispatch: bool = False) -> list[Table]:
    """Every named figure of a token run (`llm_tables` with details): report --details and
    the Markdown and HTML reports."""
    return llm_tables(tokens, details=True, from_dispatch=from_dispatch)


def cost_table(cost: dict[str, Any]) -> Table:
    c = cost["currency"]
    rows = [
        [i["item"], f"{i['quantity']:,.6g} {i['unit']}", money(i["unit_price"], c), money(i["amount"], c), money(i["failed_attempts"], c)]
        for i in cost["items"]
    ]
    rows.append(["total", "", "", money(cost["total"], c), money(cost["failed_attempts_total"], c)])
    return ["item", "quantity", "unit price", "amount", "spent on failed attempts"], rows


def cost_unit_table(cost: dict[str, Any]) -> Table:
    c = cost["currency"]
    parts = cost["per_successful_task_parts"]
    rows = [
        ["per request", money(cost["per_request"], c), ", ".join(cost["per_request_includes"]) or "nothing priced"],
        ["per successful task", money(cost["per_successful_task"], c),
         ", ".join(cost["per_successful_task_includes"]) or "nothing priced"],
        ["  of which serving", money(parts["serving"], c), ""],
        ["  of which failed attempts", money(parts["failed_attempts"], c), ""],
        ["  of which review", money(parts["review"], c), ""],
        ["per 1k requests", money(cost["per_1k_requests"], c), ""],
        ["per 1M output tokens", money(cost["per_1m_output_tokens"], c), ""],
        ["success criterion", cost["success_criterion"], ""],
    ]
    return ["figure", "amount", "includes"], rows


def versions(data: Any) -> list[list[str]]:
    s = data.summary
    rows = [
        ["harness", str(data.manifest.get("harness_version", "—"))],
        ["harness git commit", str(data.system.get("harness_git_commit", "—"))],
        ["LoadGen", str(s["loadgen"].get("version") or "—")],
    ]
    rows += [[k, str(v)] for k, v in (data.system.get("packages") or {}).items()]
    return rows


def system_rows(data: Any) -> list[list[str]]:
    sysd = data.system
    rows = [[k, str(sysd[k])] for k in ("hostname", "cpu_model", "cpu_cores", "cpu_affinity") if k in sysd]
    if sysd.get("memory_bytes"):
        rows.append(["memory", f"{sysd['memory_bytes'] / 2**30:,.1f} GiB ({sysd['memory_bytes']:,} bytes)"])
    rows += [[k, str(sysd[k])] for k in ("os", "python") if k in sysd]
    rows.append(["accelerators", ", ".join(sysd.get("accelerators") or []) or "none"])
    backend = data.summary.get("backend") or {}
    rows += [[f"backend.{k}", str(v)] for k, v in backend.items()]
    sut = data.summary.get("sut") or {}
    rows += [[f"sut.{k}", str(v)] for k, v in sut.items()]
    return rows


# --- telemetry: the system under test seen from inside (docs/telemetry.md) ------------------

#: how each server concept is shown: its label and the unit its figures are printed in
_GAUGE_LABELS = {"queue_depth": "waiting (queue depth)", "running": "running", "kv_cache_usage": "KV-cache usage",
                 "prefix_cache_hit_rate": "prefix-cache hit rate"}
_FRACTIONS = ("kv_cache_usage", "prefix_cache_hit_rate")  # gauges that are shares, shown in %
_HIST_LABELS = {"server_queue_time": "queue time", "server_prefill_time": "prefill", "server_decode_time": "decode",
                "server_ttft": "TTFT", "server_itl": "inter-token latency", "server_e2e": "end to end"}


def _level(v: float | None, fraction: bool) -> str:
    return pct(v) if fraction else num(v, 2)


def _bucketed(figures: dict[str, Any], key: str) -> str:
    """An interpolated percentile with the bucket it fell in: vLLM's first queue-time
    bucket spans 0 to 300 ms, and a figure inside it says little more than that."""
    v, bucket = figures.get(f"{key}_s"), figures.get(f"{key}_bucket_s")
    if v is None:
        return "—"
    if not bucket:
        return ms(v * 1e3)
    hi = "inf" if bucket[1] is None else f"{bucket[1] * 1e3:g}"
    return f"{v * 1e3:.1f} ({bucket[0] * 1e3:g}–{hi})"


def server_tables(server: dict[str, Any]) -> list[tuple[str, Table]]:
    """A scraped server's levels, counts and per-request times over the timed window."""
    m = server.get("metrics") or {}
    out: list[tuple[str, Table]] = []
    levels = [[label_, *(_level(f[x], k in _FRACTIONS) for x in ("mean", "p50", "max"))]
              for k, label_ in _GAUGE_LABELS.items() if (f := m.get(k))]
    if levels:
        out.append(("server levels (time-weighted mean)", (["gauge", "mean", "p50", "max"], levels)))
    counts = [[k.replace("_", " "), num(f["delta"], 0), rate(f["rate_per_s"]) + (" (reset)" if f["reset"] else "")]
              for k, f in m.items() if f.get("kind") == "counter"]
    if counts:
        out.append(("server counters (timed window)", (["counter", "delta", "per s"], counts)))
    times = [[label_, num(f["count"], 0), ms(f["mean_s"] * 1e3 if f["mean_s"] is not None else None),
              _bucketed(f, "p50"), _bucketed(f, "p99")]
             for k, label_ in _HIST_LABELS.items() if (f := m.get(k))]
    times += [[k.replace("_", " ").removesuffix(" total"), "", ms(f["mean_per_request_s"] * 1e3), "", ""]
              for k, f in m.items() if f.get("kind") == "sum_us" and f.get("mean_per_request_s") is not None]
    if times:
        out.append(("server times, ms (p50/p99 interpolated in buckets)",
                    (["histogram", "requests", "mean", "p50", "p99"], times)))
    asked = [[name, _scalar(f.get("mean", f.get("delta", f.get("mean_s")))) if "missing" not in f else f["missing"]]
             for name, f in (server.get("series") or {}).items()]
    if asked:
        out.append(("series asked for", (["series", "mean / delta"], asked)))
    return out


def split_table(split: dict[str, Any]) -> Table:
    """The client's mean TTFT, split with the server's view; decode beside the server's."""
    rows = [
        ["client queue", ms(split["client_queue_ms"]), "ours, per request"],
        ["network + HTTP", ms(split["network_and_http_ms"]), "ours − server's"],
        ["server queue", ms(split["server_queue_ms"]), "server window"],
        ["prefill", ms(split["server_prefill_ms"]), "server window"],
    ]
    if split.get("server_other_ms") is not None:
        rows.append(["server other", ms(split["server_other_ms"]), "server TTFT − both"])
    rows.append(["= TTFT", ms(split["client_ttft_ms"]), "ours"])
    rows.append(["decode", ms(split["client_decode_ms"]), "ours"])
    if split.get("server_decode_ms") is not None:
        rows.append(["decode, server's", ms(split["server_decode_ms"]), "server window"])
    return ["part (mean)", "ms", "from"], rows


def prompt_cache_table(pc: dict[str, Any]) -> Table:
    """The dataset's allowance, the server's counters and the client's per-request usage."""
    reporting = pc.get("client_requests_reporting")
    # vLLM sends usage's cached_tokens only with --enable-prompt-tokens-details (docs/telemetry.md)
    client = pct(pc["client_cached_fraction"]) if pc.get("client_cached_fraction") is not None else "— (none sent)"
    return ["prompt tokens", "share"], [
        ["reusable by the dataset's prefixes", pct(pc.get("expected_reusable_fraction"))],
        ["server: prefix-cache hits / queries", pct(pc.get("server_prefix_hit_rate"))],
        ["server: cached / prompt tokens", pct(pc.get("server_cached_fraction"))],
        [f"client: usage cached_tokens ({reporting or 0} requests)", client],
    ]


def host_table(host: dict[str, Any]) -> Table:
    rows = []
    if host.get("process_cores") is not None:
        rows.append(["test process CPU", f"{host['process_cores']:.2f} cores"])
    for t in (host.get("threads") or [])[:4]:
        if t["cores"] >= 0.01:
            rows.append([f"  thread {t['name']}", f"{t['cores']:.2f} cores"])
    if host.get("rss_max_bytes") is not None:
        rows.append(["test process RSS, max", f"{host['rss_max_bytes'] / 2**20:,.0f} MiB"])
    busy = [b for b in host.get("machine_core_busy") or [] if b is not None]
    if busy:
        rows.append(["machine cores busy", " ".join(f"{b:.0%}" for b in busy[:16]) + (" …" if len(busy) > 16 else "")])
    if host.get("mem_available_min_bytes") is not None:
        rows.append(["memory available, min", f"{host['mem_available_min_bytes'] / 2**30:,.1f} GiB"])
    return ["figure", "value"], rows


def gpu_table(gpu: dict[str, Any]) -> Table:
    if not gpu.get("devices"):
        return ["GPU", "value"], [["none", gpu.get("absent") or "no device"]]
    rows = []
    for d in gpu["devices"]:
        util, power, mem = d.get("util_pct") or {}, d.get("power_w") or {}, d.get("mem_used_bytes") or {}
        rows.append([f"{d['index']} {d.get('name') or ''}".strip(), num(util.get("mean"), 0) + " %",
                     num(power.get("mean"), 0) + " W", num((mem.get("max") or 0) / 2**30, 1) + " GiB",
                     num(d.get("energy_j"), 0) + " J"])
    if gpu.get("energy_j_per_success") is not None:
        rows.append(["per successful sample", "", "", "", f"{gpu['energy_j_per_success']:.4g} J"])
    return ["GPU", "util", "power", "memory max", "energy"], rows


def distribute_tables(summary: dict[str, Any]) -> list[tuple[str, Table]]:
    """The replicas' and the client shards' tables, titled; none for a run in one process."""
    out: list[tuple[str, Table]] = []
    replicas = summary.get("replicas")
    if replicas:
        out.append(("backend replicas (Ray)", (
            ["replica", "where", "samples", "failed", "p50 ms", "p99 ms"],
            [[str(r["replica"]) + (" lost" if r["lost"] else ""), f"{r.get('address') or '—'} pid {r.get('pid') or '—'}",
              f"{r['samples']:,}", f"{r['failed']:,}", ms(r["latency_ms"]["p50"]), ms(r["latency_ms"]["p99"])]
             for r in replicas])))
    shards = summary.get("client_shards")
    if shards:
        def us(d: dict[str, Any] | None, key: str) -> str:
            return "—" if not d or d.get(key) is None else f"{d[key]:,.0f}"

        def clock(c: dict[str, Any]) -> str:
            """The offset applied to the shard's clock and its uncertainty; "same" on this host."""
            if c.get("same_clock"):
                return "same"
            if c.get("applied_us") is None:
                return "—"
            v = c["applied_us"]
            text = next(f"{v / d:+.3g}{unit}" for d, unit in ((1e6, "s"), (1e3, "ms"), (1, "µs")) if abs(v) >= d or d == 1)
            return f"{text} ±{c['uncertainty_us']:,.0f}µs"

        out.append((f"client shards ({shards.get('transport') or 'process'}): hops in µs, lag in ms", (
            ["shard", "samples", "failed", "p50 ms", "to p50", "back p50", "lag p50", "clock"],
            [[str(r["shard"]) + (" lost" if r["lost"] else ""), f"{r['samples']:,}", f"{r['failed']:,}",
              ms(r["latency_ms"]["p50"]), us(r["hop_to_shard_us"], "p50"), us(r["hop_back_us"], "p50"),
              num((r["loop_lag_ms"] or {}).get("p50")), clock(r["clock"])]
             for r in shards["shards"]])))
    return out


def telemetry_tables(tel: dict[str, Any]) -> list[tuple[str, Table]]:
    """Every telemetry table of a run, titled: servers, the TTFT split, host, GPU."""
    out: list[tuple[str, Table]] = []
    for server in tel.get("servers") or []:
        name = server.get("server") or "unknown server"
        gaps = f", {server['gaps']} failed ({'; '.join(server['gap_errors'])})" if server.get("gaps") else ""
        out.append((f"server: {name}", (["endpoint", cut_middle(server["url"], 60)],
                                        [["scrapes", f"{server['scrapes']} answered{gaps}"]])))
        out += server_tables(server)
        if server.get("prompt_cache"):
            out.append(("prompt cache, seen twice", prompt_cache_table(server["prompt_cache"])))
        if server.get("latency_split"):
            out.append(("TTFT split, mean ms", split_table(server["latency_split"])))
    if tel.get("host"):
        out.append(("host (timed window)", host_table(tel["host"])))
    if tel.get("gpu"):
        out.append(("GPU (NVML)", gpu_table(tel["gpu"])))
    return out


def session_tables(summary: dict[str, Any]) -> list[tuple[str, Table]]:
    """A multi-turn run's sessions and its figures by turn index (from dispatch); none for
    another run. Columns short enough for 80 terminal columns."""
    ses = summary.get("sessions")
    if not isinstance(ses, dict):
        return []
    dur, gap = ses["duration_ms"], ses["think_gap_ms"]
    # answer to next dispatch: a think time, or (user-centric) the wait for the user's next tick
    gap_label = "idle min ms" if isinstance(ses.get("pacing"), dict) else "think min ms"
    overview = (["sessions", "done", "failed", "turns ok", "dur p50 ms", "dur p99 ms", gap_label, "open max"],
                [[f"{ses['count']:,}", f"{ses['completed']:,}", f"{len(ses['failed']):,}",
                  f"{ses['turns_completed']:,}/{ses['turns']:,}", ms(dur["p50"]), ms(dur["p99"]), ms(gap["min"]),
                  str(ses["open_max"])]])
    by_turn = (["turn", "ok", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "input", "cached"],
               [[str(r["turn"]), f"{r['succeeded']:,}/{r['requests']:,}", ms(r["ttft_ms"]["p50"]), ms(r["ttft_ms"]["p99"]),
                 ms(r["tpot_ms"]["p50"]), ms(r["tpot_ms"]["p99"]), num(r["input_tokens_mean"]),
                 num(r["cached_tokens_mean"])] for r in ses["by_turn"]])
    out = [("per session", overview), ("by turn (ms from dispatch; tokens: mean a turn)", by_turn)]
    tool = ses.get("tool_steps")  # absent in older folders
    if isinstance(tool, dict) and tool["count"]:
        delay, tgap = tool["delay_ms"], tool["gap_ms"]
        out.append(("tool steps (mocked tool: its delay, then the gap to the next turn)", (
            ["steps", "calls", "delay p50 ms", "delay p99 ms", "gap min ms", "gap p50 ms"],
            [[f"{tool['count']:,}", f"{tool['calls']:,}", ms(delay["p50"]), ms(delay["p99"]), ms(tgap["min"]),
              ms(tgap["p50"])]])))
    pace = ses.get("pacing")  # user-centric runs only; absent in older folders
    if isinstance(pace, dict):
        late = pace["late_ms"]
        out.append(("user-centric pacing (each user's turns a gap apart, start to start)", (
            ["turns/s", "gap ms", "turns", "waited", "late p50", "late p99", "gap min", "achieved/s"],
            [[f"{pace['rate_per_s']:g}", ms(pace["gap_s"] * 1e3), f"{pace['turns']:,}", f"{pace['waited_for_answer']:,}",
              ms(late["p50"]), ms(late["p99"]), ms(pace["start_gap_min_ms"]), rate(pace["achieved_per_s"])]])))
    return out


def session_lines(summary: dict[str, Any], limit: int = 5) -> list[str]:
    """The failed sessions (the first `limit`), each with the turn that failed and why, and
    how LoadGen's latencies differ from the per-turn figures."""
    ses = summary.get("sessions")
    if not isinstance(ses, dict):
        return []
    out = [f"session {f['session']} failed at turn {f['turn']}: {cut_middle(f['reason'], 60)}"
           for f in ses["failed"][:limit]]
    if len(ses["failed"]) > limit:
        out.append(f"... and {len(ses['failed']) - limit:,} more failed sessions (summary.json sessions.failed)")
    pace = ses.get("pacing")
    if isinstance(pace, dict):
        out.append(f"user-centric: {pace['rate_per_s']:g} turns/s over the users, each user's turns "
                   f"{pace['gap_s'] * 1e3:g} ms apart, start to start; waited: turns whose previous answer ended "
                   "after their tick, so sent at the answer (the server's time); late: each turn's dispatch after its "
                   "tick (the harness's own lag)")
    return [*out, ses["loadgen_note"]]
