"""Exact-match scoring: MLPerf's answer-extraction rules, and extractors for users' own data.

MLPerf's rules, reimplemented from the reference scripts as read at mlcommons/inference
commit b66003e10e2db4b8c36a448b0545ec90fcc6e9e9 (behaviour mirrored, code not copied):

- `language/deepseek-r1/eval_accuracy.py` (DeepSeek-R1): the dataset name picks the rule by
  substring, first match in the order gpqa, mmlu_pro, math500, aime, livecodebench. The
  score is the mean over samples of 100 (correct) or 0 (wrong, or nothing extracted).
- `language/gpt-oss-120b/eval_accuracy.py` with `eval_mlperf_accuracy.py` (gpt-oss-120b):
  the same rules, but the text is decoded with special tokens kept, multiple choice reads the
  harmony `final` channel first, `mmlu` is a sixth rule, nothing is de-duplicated, and the
  score weights each dataset by its repeats (aime25: 8, gpqa_diamond: 5,
  livecodebench_v6: 3): 100 x sum(correct / repeats) / sum(total / repeats).

Not reimplemented, and refused with that reason rather than guessed: math500's grading
(PRM800K's grader: MATH normalisation and sympy equivalence) and livecodebench's (it runs
the extracted program against test cases). Their extraction rules are here.

Every scorer says in its docstring what it compares. A scorer takes (output, reference) and
returns whether the sample is right; `extract_*` functions return what was compared.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from harness.errors import ConfigError

Family = Literal["deepseek-r1", "gpt-oss"]

#: scorers whose script scores every accuracy-log entry, repeats included (the others keep
#: the first entry of each qsl_idx): gpt-oss-120b's eval_mlperf_accuracy.py
SCORES_EVERY_ENTRY = frozenset({"gpt-oss"})
#: gpt-oss-120b's eval_mlperf_accuracy.py DATASET_REPEATS (others count once)
GPT_OSS_REPEATS = MappingProxyType({"aime25": 8, "gpqa_diamond": 5, "livecodebench_v6": 3})

UNGRADED = MappingProxyType({
    "math500": "math500 is graded by PRM800K's grader (MATH normalisation and sympy equivalence), which is not reimplemented here",
    "livecodebench": "livecodebench is graded by running the extracted program against its test cases, which is not done here",
})


def _text(value: Any) -> str:
    """The scripts' validate_text_input: None (or NaN) is "", anything else str() and stripped."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return str(value).strip()


def _unescape(text: str) -> str:
    # outputs logged through repr() carry literal "\n" and "\'"; both scripts undo that
    return text.replace(r"\n", "\n").replace(r"\'", "'")


def _strip_list_artifact(text: str) -> str:
    if text.startswith(("['", '["')) and text.endswith(("']", '"]')):
        return text[2:-2].strip()
    return text


def _answer_pattern(last: str) -> re.Pattern[str]:
    return re.compile(
        rf"\b(?:ANSWER|FINAL\s*ANSWER)\b\s*[:=]?\s*(?:\(?\s*([A-{last}])\s*\)?)(?:\s*$|[^A-Za-z])", re.IGNORECASE
    )


def extract_choice_deepseek(output: Any, last: str = "D") -> str | None:
    """DeepSeek-R1's multiple-choice letter: the last "ANSWER: X" / "FINAL ANSWER: (X)" (any case),
    letters A..`last`; for A-J (MMLU-Pro) else the last standalone letter A-J."""
    text = _text(output)
    if not text:
        return None
    text = _unescape(_strip_list_artifact(text))
    matches = list(_answer_pattern(last).finditer(text))
    if matches:
        return matches[-1].group(1).upper()
    if last == "J":
        letters = list(re.finditer(r"\b([A-J])\b", text, re.IGNORECASE))
        if letters:
            return letters[-1].group(1).upper()
    return None


def final_channel(text: str) -> str:
    """gpt-oss's harmony `final` channel (its markers may carry junk before <|message|>), else the text."""
    match = re.search(r"<\|channel\|>final[^<]*<\|message\|>(.*?)(?:<\|return\|>|$)", text, re.DOTALL)
    return match.group(1).strip() if match else text


def extract_choice_gpt_oss(output: Any, last: str = "D") -> str | None:
    """gpt-oss's multiple-choice letter, first rule that finds one, letters A..`last`:
    in the final channel with **bold** removed, a letter leading it (after non-letters), then
    "Answer: X" there; then DeepSeek's last "ANSWER: X" over the whole text; for A-J, the last
    standalone letter of the final channel."""
    text = _text(output)
    if not text:
        return None
    final = re.sub(r"\*\*([^*]+)\*\*", r"\1", final_channel(text))
    final = _unescape(_strip_list_artifact(final))
    leading = re.match(rf"^[^a-zA-Z]*([A-{last}])(?:[^a-zA-Z]|$)", final.strip(), re.IGNORECASE)
    if leading:
        return leading.group(1).upper()
    labelled = re.search(rf"\b(?:Answer|ANSWER)\s*[:.]?\s*([A-{last}])\b", final, re.IGNORECASE)
    if labelled:
        return labelled.group(1).upper()
    matches = list(_answer_pattern(last).finditer(_unescape(text)))
    if matches:
        return matches[-1].group(1).upper()
    if last == "J":
        letters = list(re.finditer(r"\b([A-J])\b", final, re.IGNORECASE))
        if letters:
            return letters[-1].group(1).upper()
    return None


def extract_boxed(output: Any) -> str | None:
    """The content of the last \\boxed{...}, braces balanced, stripped (math500's extraction)."""
    text = _text(output)
    start = text.rfind(r"\boxed{")
    if start == -1:
        return None
    depth = 0
    for i in range(start + 7, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            if depth == 0:
                return text[start + 7:i].strip()
            depth -= 1
    return None


def extract_aime(output: Any) -> int | None:
    """AIME's integer: the last \\boxed{digits}, else the last "Answer: digits" (not followed by
    a period); None unless 0..999."""
    text = _text(output)
    if not text:
        return None
    boxed = list(re.finditer(r"\\boxed{\s*(\d+)\s*}", text))
    if boxed:
        digits = boxed[-1].group(1)
    else:
        labelled = list(re.finditer(r"Answer:\s*(\d+)(?!\.)\b", text, re.IGNORECASE | re.MULTILINE))
        if not labelled:
            return None
        digits = labelled[-1].group(1)
    value = int(digits)
    return value if 0 <= value <= 999 else None


def extract_code_deepseek(output: Any) -> str | None:
    """DeepSeek-R1's program: the first ```python block, stripped (livecodebench's extraction)."""
    match = re.search(r"```python(.*?)```", _text(output), re.DOTALL)
    return match.group(1).strip() if match else None


def extract_code_gpt_oss(output: Any) -> str | None:
    """gpt-oss's program: in the final channel (when there is one) the last ```python block,
    else the last ``` block without its python/py tag; then the same over the whole text."""
    text = _text(output)
    if not text:
        return None

    def last_block(body: str) -> str | None:
        python = list(re.finditer(r"```python(.*?)```", body, re.DOTALL))
        if python:
            return python[-1].group(1).strip()
        plain = list(re.finditer(r"```(.*?)```", body, re.DOTALL))
        if plain:
            return re.sub(r"^(?:python|py)\s*\n", "", plain[-1].group(1).strip(), flags=re.IGNORECASE)
        return None

    final = final_channel(text)
    if final != text:
        found = last_block(final)
        if found is not None:
            return found
    return last_block(text)


def _choice_right(parsed: str | None, reference: Any, letters: str) -> bool:
    # the reference is compared as stored: upper-cased, not stripped (evaluate_multiple_choice)
    if not parsed or not isinstance(reference, str) or not reference:
        return False
    return parsed.upper() in letters and parsed.upper() == reference.upper()


def _aime_right(parsed: int | None, reference: Any) -> bool:
    if parsed is None:
        return False
    try:
        return parsed == int(reference)
    except (TypeError, ValueError):
        return False


@dataclass(frozen=True)
class Rule:
    """One dataset's rule: what is extracted from the output and how it is judged."""

    key: str
    extract: Callable[[Any], Any]
    judge: Callable[[Any, Any], bool] | None  # None: not reimplemented (UNGRADED says why)


def _rules(family: Family) -> tuple[Rule, ...]:
    choice = extract_choice_deepseek if family == "deepseek-r1" else extract_choice_gpt_oss
    code = extract_code_deepseek if family == "deepseek-r1" else extract_code_gpt_oss
    rules = [
        Rule("gpqa", lambda o: choice(o, "D"), lambda p, r: _choice_right(p, r, "ABCD")),
        Rule("mmlu_pro", lambda o: choice(o, "J"), lambda p, r: _choice_right(p, r, "ABCDEFGHIJ")),
        Rule("math500", extract_boxed, None),
        Rule("aime", extract_aime, _aime_right),
        Rule("livecodebench", code, None),
    ]
    if family == "gpt-oss":
        rules.append(Rule("mmlu", lambda o: choice(o, "J"), lambda p, r: _choice_right(p, r, "ABCDEFGHIJ")))
    return tuple(rules)


def rule_for(dataset: Any, family: Family = "deepseek-r1") -> Rule:
    """The rule a dataset name selects: the first key contained in the lowercased name."""
    if family not in ("deepseek-r1", "gpt-oss"):
        raise ConfigError(f"unknown MLPerf exact-match family {family!r}: known are deepseek-r1, gpt-oss")
    name = _text(dataset).lower()
    if not name:
        raise ConfigError("a sample has no dataset name, so no MLPerf rule applies to it")
    for rule in _rules(family):
        if rule.key in name:
            return rule
    keys = ", ".join(r.key for r in _rules(family))
    raise ConfigError(f"no {family} rule for dataset {dataset!r}: the name must contain one of {keys}")


def judge_mlperf(output: Any, reference: Any, dataset: Any, family: Family = "deepseek-r1") -> tuple[bool, Any]:
    """(right, extracted) for one sample under the official rule of its dataset."""
    rule = rule_for(dataset, family)
    if rule.judge is None:
        raise ConfigError(UNGRADED[rule.key])
    extracted = rule.extract(output)
    missing = reference is None or (isinstance(reference, float) and reference != reference)
    return (extracted is not None and not missing and rule.judge(extracted, reference)), extracted


@dataclass(frozen=True)
class ExactMatchResult:
    """`exact_match` (percent) as the script prints it, with `tokens_per_sample` when token counts are given."""

    exact_match: float
    num_samples: int
    correct: int
    tokens_per_sample: float | None = None
    per_sample: tuple[bool, ...] = ()

    def figures(self) -> dict[str, float | int]:
        out: dict[str, float | int] = {"exact_match": self.exact_match, "num-samples": self.num_samples}
        if self.tokens_per_sample is not None:
            out["tokens_per_sample"] = self.tokens_per_sample
        return out


def score_deepseek_r1(outputs: Sequence[Any], references: Sequence[Any], datasets: Sequence[Any],
                      token_counts: Sequence[int] | None = None) -> ExactMatchResult:
    """DeepSeek-R1's `exact_match`: the mean of 100/0 per sample (de-duplicated by qsl_idx
    beforehand), and `tokens_per_sample`, the mean of the generated token counts."""
    verdicts = tuple(judge_mlperf(o, r, d, "deepseek-r1")[0] for o, r, d in zip(outputs, references, datasets, strict=True))
    if not verdicts:
        raise ConfigError("exact match of no samples")
    tokens = None
    if token_counts is not None:
        if len(token_counts) != len(verdicts):
            raise ConfigError(f"token_counts has {len(token_counts)} entries for {len(verdicts)} samples")
        tokens = float(sum(token_counts) / len(token_counts))
    return ExactMatchResult(exact_match=float(100.0 * sum(verdicts) / len(verdicts)), num_samples=len(verdicts),
                            correct=sum(verdicts), tokens_per_sample=tokens, per_sample=verdicts)


def score_gpt_oss(outputs: Sequence[Any], references: Sequence[Any], datasets: Sequence[Any],
                  token_counts: Sequence[int] | None = None) -> ExactMatchResult:
    """gpt-oss-120b's `exact_match`: every log entry counts (no de-duplication); per dataset
    (lowercased name) correct/repeats over total/repeats, in percent, unrounded (the script
    prints it with 3 decimals)."""
    verdicts = tuple(judge_mlperf(o, r, d, "gpt-oss")[0] for o, r, d in zip(outputs, references, datasets, strict=True))
    if not verdicts:
        raise ConfigError("exact match of no samples")
    correct: dict[str, int] = {}
    total: dict[str, int] = {}
    for verdict, dataset in zip(verdicts, datasets):
        name = _text(dataset).lower()
        total[name] = total.get(name, 0) + 1
        correct[name] = correct.get(name, 0) + int(verdict)
    score = sum(correct[d] / GPT_OSS_REPEATS.get(d, 1) for d in total)
    best = sum(total[d] / GPT_OSS_REPEATS.get(d, 1) for d in total)
    tokens = None
    if token_counts is not None:
        if len(token_counts) != len(verdicts):
            raise ConfigError(f"token_counts has {len(token_counts)} entries for {len(verdicts)} samples")
        tokens = float(sum(token_counts) / len(token_counts))
    return ExactMatchResult(exact_match=float(score / best * 100), num_samples=len(verdicts),
                            correct=sum(verdicts), tokens_per_sample=tokens, per_sample=verdicts)


#: the MLPerf exact-match scorers by the name a benchmark record's `scorer` (and its rows'
#: metric) gives them (harness.data.benchmarks.Scorer)
MLPERF_SCORERS: Mapping[str, Callable[..., ExactMatchResult]] = MappingProxyType({
    "deepseek-r1": score_deepseek_r1, "gpt-oss": score_gpt_oss,
})


# -- users' own data ----------------------------------------------------------------------


def normalize(text: Any) -> str:
    """The stated normalisation of user exact match: Unicode NFKC, casefolded, runs of
    whitespace made one space, surrounding whitespace removed. Punctuation is kept."""
    return " ".join(unicodedata.normalize("NFKC", _text(text)).casefold().split())


def exact(output: Any, reference: Any) -> bool:
    """The whole output equals the reference after `normalize` on both."""
    return normalize(output) == normalize(reference) and reference is not None


def extract_letter(output: Any, letters: str = "ABCD") -> str | None:
    """The answer letter among `letters` (contiguous from A), by gpt-oss's multiple-choice rules
    (which also read DeepSeek's "ANSWER: X"; a harmony final channel is read first if present)."""
    if not letters or letters != "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:len(letters)]:
        raise ConfigError(f"choice letters must run from A without gaps, found {letters!r}")
    return extract_choice_gpt_oss(output, letters[-1])


def choice(output: Any, reference: Any, letters: str = "ABCD") -> bool:
    """The extracted letter (`extract_letter`) equals the reference letter, case-insensitively."""
    found = extract_letter(output, letters)
    return found is not None and found == _text(reference).upper()


def regex_extractor(pattern: str) -> Callable[[Any], str | None]:
    """An extractor: the last match of `pattern` in the output; its first group if it has one."""
    try:
        compiled = re.compile(pattern)
    except re.error as e:
        raise ConfigError(f"extraction pattern {pattern!r} is not a valid regular expression ({e})") from e

    def extract(output: Any) -> str | None:
        matches = list(compiled.finditer(_text(output)))
        if not matches:
            return None
        last = matches[-1]
        return last.group(1) if compiled.groups else last.group(0)

    return extract


def _json_value(text: str) -> Any:
    fence = re.search(r"```(?:json)?\s*(.*?)\s*```", text, re.DOTALL)
    body = fence.group(1) if fence else text
    try:
        return json.loads(body)
    except ValueError:
        pass
    start = body.find("{")
    if start == -1:
        raise ValueError("no JSON object")
    value, _ = json.JSONDecoder().raw_decode(body[start:])
    return value


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))


def json_field_extractor(path: str) -> Callable[[Any], str | None]:
    """An extractor: the JSON in the output (a ```json fence's body, else the whole text, else the
    first {...} object), then the field at a dotted `path` (list items by index: `items.0.name`);
    a string as is, any other value as compact JSON with sorted keys. None when absent."""
    keys = [k for k in path.split(".") if k]
    if not keys:
        raise ConfigError("a JSON-field extractor needs a field path, such as answer or result.value")

    def extract(output: Any) -> str | None:
        try:
            value = _json_value(_text(output))
        except ValueError:
            return None
        for key in keys:
            if isinstance(value, dict) and key in value:
                value = value[key]
            elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
                value = value[int(key)]
            else:
                return None
        return _as_text(value)

    return extract


def reference_text(reference: Any) -> str:
    """A reference as extracted values are rendered: a JSON text is re-rendered compactly, so
    `{"a": 1}` and `{"a":1}` compare equal; other text stays as it is."""
    text = _text(reference)
    try:
        return _as_text(json.loads(text))
    except ValueError:
        return text


def extracted_match(extract: Callable[[Any], str | None]) -> Callable[[Any, Any], bool]:
    """A scorer: the extracted text equals the reference after `normalize` (no extraction: wrong)."""

    def judge(output: Any, reference: Any) -> bool:
        found = extract(output)
        return found is not None and reference is not None and normalize(found) == normalize(reference_text(reference))

    return judge


def scorer_for(metric: str) -> Callable[[Any, Any], bool]:
    """The scorer a dataset row names: `exact_match`, `choice[:LETTERS]` (default ABCD),
    `regex:PATTERN` or `json_field:PATH`."""
    kind, _, argument = metric.partition(":")
    if kind == "exact_match" and not argument:
        return exact
    if kind == "choice":
        letters = argument or "ABCD"
        extract_letter("", letters)  # checks the letters now, not at the first sample
        return lambda output, reference: choice(output, reference, letters)
    if kind == "regex" and argument:
        return extracted_match(regex_extractor(argument))
    if kind == "json_field" and argument:
        return extracted_match(json_field_extractor(argument))
    raise ConfigError(
        f"unknown exact-match metric {metric!r}: use exact_match, choice[:LETTERS], regex:PATTERN or json_field:PATH"
    )


def score_exact(outputs: Iterable[Any], references: Iterable[Any], metrics: Iterable[str]) -> ExactMatchResult:
    """Users' data: each sample judged by its own metric (`scorer_for`); the percent right."""
    cache: dict[str, Callable[[Any, Any], bool]] = {}
    verdicts = []
    for output, reference, metric in zip(outputs, references, metrics, strict=True):
        judge = cache.get(metric) or cache.setdefault(metric, scorer_for(metric))
        verdicts.append(bool(judge(output, reference)))
    if not verdicts:
        raise ConfigError("exact match of no samples")
    return ExactMatchResult(exact_match=100.0 * sum(verdicts) / len(verdicts), num_samples=len(verdicts),
                            correct=sum(verdicts), per_sample=tuple(verdicts))
