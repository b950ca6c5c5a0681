"""ROUGE scoring speed: the harness's scorer beside plain rouge-score, on one core.

    python benchmarks/bench_rouge.py [--samples 13368] [--ref-chars 3000] [--pred-chars 1200]
                                     [--baseline-samples 1000|all] [--seed 0]

The goal (issue 31): 13,368 samples shaped like CNN-DailyMail scored in <= 20 s on one core,
with per-sample scores equal to rouge-score's to 1e-9. The texts are made here from a fixed
seed: a list of common English words plus seeded pseudo-words (20,000 types), drawn with
Zipf weights so that words, and the word pairs around sentence ends, repeat about as they do
in prose; sentences of 8-28 words with abbreviations (Mr., U.S., p.m.), numbers, percentages,
quotes and ? and ! endings. Nothing is downloaded.

Both sides do the whole of MLCommons' pipeline: strip, split into sentences, join with "\\n",
score each pair, average. "ours" is `harness.results.scoring.score_rouge` (nltk's Punkt
algorithm with nltk 3.8.1's `re` patterns, rouge-score-rs). "plain" is nltk's stock
PunktSentenceTokenizer (as `nltk.sent_tokenize` runs it, same English model) and Google's
rouge-score, as `evaluate.load("rouge")` calls it. Plain rouge-score takes ~70 ms a pair
here, so by default it runs on the first 1,000 samples and its time is scaled to all; the
equality check covers the samples it ran (`--baseline-samples all` runs every one).
Everything runs in this process, one pair after another: no threads, no processes.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.results.scoring.punkt import english_parameters, english_splitter  # noqa: E402
from harness.results.scoring.rouge import ROUGE_TYPES, postprocess_text, score_rouge  # noqa: E402

WORDS = """the a of to and in that is was he for it with as his on be at by had are but from or have an
they which one you were her all she there would their we him been has when who will more no if out so said
what up its about into than them can only other new some could time these two may then do first any my now
such like our over man me even most made after also did many before must through back years where much your
way well down should because each just those people how too little state good very make world still own see
men work long get here between both life being under never day same another know while last might us great
old year off come since against go came right used take three officials reported running happiness
government president minister police investigators company markets shares economy announced according
statement spokesman hospital children families students researchers scientists discovered analysis
election campaign voters candidates parliament senators congressional administration international
national security military forces attacks killed injured arrested charged court judge trial evidence
witnesses prosecutors lawyers testified convicted sentenced prison weeks months yesterday tomorrow
organization relationship development management environmental traditional generally beautifully""".split()
SYLLABLES = "ba ri ton mel sar ka lo ven dis pra ter mon cul fi gra ho zen tra quel bor".split()
SUFFIXES = ["", "", "", "s", "ed", "ing", "ly", "tion", "ness", "ment", "er", "ies"]
ABBREVIATIONS = ["Mr.", "Mrs.", "Dr.", "U.S.", "Jan.", "Sen.", "Gov.", "St.", "Corp.", "Inc.", "p.m.", "a.m."]


def make_texts(samples: int, ref_chars: int, pred_chars: int, seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    vocab = list(dict.fromkeys(WORDS))
    while len(vocab) < 20_000:
        vocab.append("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) + rng.choice(SUFFIXES))
    weights = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(vocab))))

    def word() -> str:
        return rng.choices(vocab, cum_weights=weights)[0]

    def sentence() -> str:
        words = [word() for _ in range(rng.randint(8, 28))]
        for _ in range(rng.randint(0, 2)):
            at, kind = rng.randrange(1, len(words)), rng.random()
            if kind < 0.4:
                words[at] = f"{rng.choice(ABBREVIATIONS)} {word().capitalize()}"
            elif kind < 0.7:
                words[at] = str(rng.randint(1, 2000))
            elif kind < 0.85:
                words[at] = f"{rng.randint(1, 99)}.{rng.randint(0, 9)}%"
            else:
                words[at] += ","
        text = " ".join(words)
        text = text[0].upper() + text[1:] + rng.choices([".", "?", "!"], [0.9, 0.05, 0.05])[0]
        return f'"{text}"' if rng.random() < 0.1 else text

    def passage(chars: int) -> str:
        out: list[str] = []
        while sum(len(s) + 1 for s in out) < chars:
            out.append(sentence())
        return " ".join(out)

    pairs = [(passage(ref_chars), passage(pred_chars)) for _ in range(samples)]
    return [r for r, _ in pairs], [p for _, p in pairs]


def plain(refs: list[str], preds: list[str]) -> tuple[float, list[tuple[float, ...]]]:
    """MLCommons' pipeline with stock nltk Punkt and Google's rouge-score: seconds and per-pair scores."""
    from nltk.tokenize.punkt import PunktSentenceTokenizer
    from rouge_score import rouge_scorer

    start = time.perf_counter()
    split = PunktSentenceTokenizer(english_parameters()).tokenize
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)
    scores = []
    for ref, pred in zip(postprocess_text(refs, split), postprocess_text(preds, split)):
        s = scorer.score(ref, pred)
        scores.append(tuple(s[t].fmeasure for t in ROUGE_TYPES))
    return time.perf_counter() - start, scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=13_368)
    parser.add_argument("--ref-chars", type=int, default=3_000)
    parser.add_argument("--pred-chars", type=int, default=1_200)
    parser.add_argument("--baseline-samples", default="1000", help="how many samples plain rouge-score scores, or all")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    baseline_n = args.samples if args.baseline_samples == "all" else min(int(args.baseline_samples), args.samples)

    refs, preds = make_texts(args.samples, args.ref_chars, args.pred_chars, args.seed)
    mean_ref = sum(map(len, refs)) / len(refs)
    mean_pred = sum(map(len, preds)) / len(preds)
    print(f"{args.samples} samples, seed {args.seed}: references {mean_ref:,.0f} chars, predictions {mean_pred:,.0f} chars (mean)")

    start = time.perf_counter()
    ours = score_rouge(preds, refs)
    ours_s = time.perf_counter() - start
    print(f"ours   {ours_s:7.2f} s for {args.samples} samples  ({ours_s / args.samples * 1e3:.2f} ms a sample)  {ours.figures()}")

    split = english_splitter()
    start = time.perf_counter()
    postprocess_text(refs, split), postprocess_text(preds, split)
    split_s = time.perf_counter() - start
    print(f"         of which sentence splitting {split_s:.2f} s (measured again alone), ROUGE {ours_s - split_s:.2f} s")

    plain_s, plain_scores = plain(refs[:baseline_n], preds[:baseline_n])
    scaled = plain_s / baseline_n * args.samples
    print(f"plain  {plain_s:7.2f} s for {baseline_n} samples  ({plain_s / baseline_n * 1e3:.2f} ms a sample)"
          f" -> {scaled:,.0f} s for {args.samples}  ({scaled / ours_s:.0f}x ours)")

    worst = 0.0
    for i, expected in enumerate(plain_scores):
        for t, value in zip(ROUGE_TYPES, expected):
            worst = max(worst, abs(ours.per_sample[t][i] - value))
    verdict = "equal to 1e-9" if worst <= 1e-9 else "NOT EQUAL"
    print(f"per-sample scores, ours vs rouge-score, first {baseline_n} samples: largest difference {worst:.3g} ({verdict})")
    if baseline_n == args.samples:
        same = {t: round(sum(s[k] for s in plain_scores) / len(plain_scores) * 100, 4) for k, t in enumerate(ROUGE_TYPES)}
        print(f"figures (plain means, Python round): {same}")
    print(f"goal <= 20 s on one core: {'met' if ours_s <= 20 else 'NOT met'} ({ours_s:.1f} s)")


if __name__ == "__main__":
    main()
