"""Accuracy of generated text, scored as MLCommons' evaluation scripts score it.

    rouge          ROUGE-1/2/L/Lsum, gen_len, gen_num, tokens_per_sample (llama3.1-8b, llama2-70b)
    punkt          nltk's English Punkt with nltk 3.8.1's rules, the model from a package
    exact_match    DeepSeek-R1 and gpt-oss answer extraction; users' exact/choice/regex/JSON field
    accuracy_log   mlperf_log_accuracy.json entries, token ids, de-duplication by qsl_idx
    detokenize     ids back to text with the tokenizer a run recorded (.gguf or HF folder)

Pure functions of texts and parsed files: nothing here reads a results folder. The heavy
dependencies (nltk, rouge-score-rs, the Punkt model) are imported on first use, and their
absence is a ConfigError that names the extra to install.
"""

from harness.results.scoring.accuracy_log import (
    LogEntry,
    check_in_range,
    dedup_entries,
    first_per_qsl_idx,
    parse_entries,
    token_ids_from_hex,
)
from harness.results.scoring.exact_match import (
    ExactMatchResult,
    judge_mlperf,
    score_deepseek_r1,
    score_exact,
    score_gpt_oss,
    scorer_for,
)
from harness.results.scoring.rouge import ROUGE_TYPES, RougeResult, postprocess_text, score_rouge

__all__ = [
    "ROUGE_TYPES",
    "ExactMatchResult",
    "LogEntry",
    "RougeResult",
    "check_in_range",
    "dedup_entries",
    "first_per_qsl_idx",
    "judge_mlperf",
    "parse_entries",
    "postprocess_text",
    "score_deepseek_r1",
    "score_exact",
    "score_gpt_oss",
    "score_rouge",
    "scorer_for",
    "token_ids_from_hex",
]
