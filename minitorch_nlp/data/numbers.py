"""Numbers written out in words, and the number-translation task built on them.

``number_words(4071, "en")`` is ``"four thousand seventy-one"``. Every language covers
0 .. 999 999 (``MAX_NUMBER``) and writes the cardinal number (masculine where the language has
genders). The conventions, chosen once so that every number has exactly one spelling:

- **English** (``"en"``): American style, no "and": 105 -> "one hundred five",
  4071 -> "four thousand seventy-one"; tens and units joined by a hyphen (21 -> "twenty-one").
- **French** (``"fr"``): the traditional spelling (before the 1990 reform), the one most print
  uses: hyphens only inside the numbers below 100 that are not joined by "et"
  (17 -> "dix-sept", 21 -> "vingt et un", 71 -> "soixante et onze", 81 -> "quatre-vingt-un",
  91 -> "quatre-vingt-onze"), spaces around "cent" and "mille" (203 -> "deux cent trois").
  "vingt" and "cent" take an "s" only when multiplied and last: 80 -> "quatre-vingts",
  200 -> "deux cents", but 80 000 -> "quatre-vingt mille", 200 000 -> "deux cent mille"
  (mille is an adjective, not a noun). "mille" never takes an "s" and never "un" before it
  (1000 -> "mille", 2000 -> "deux mille", 1001 -> "mille un").
- **German** (``"de"``): the standard written form, one word: 4071 -> "viertausendeinundsiebzig".
  100 and 1000 are written "einhundert" and "eintausend" (the form used on cheques, equally
  correct as "hundert"/"tausend"); a final 1 is "eins" (101 -> "einhunderteins"), otherwise "ein".
  As TOKENS (:func:`number_tokens`) the word is split into its number morphemes,
  ["vier", "tausend", "ein", "und", "siebzig"], so a word-level model sees the structure that
  English and French show with spaces; joining the morphemes gives the written form back.
- **Spanish** (``"es"``): 4071 -> "cuatro mil setenta y uno", 21 -> "veintiuno" (one word, with
  written accents: "veintidós", "dieciséis"), 100 -> "cien" but 101 -> "ciento uno",
  500 -> "quinientos"; "uno"/"veintiuno" shorten before "mil" (21 000 -> "veintiún mil",
  31 000 -> "treinta y un mil"); 1000 -> "mil".

Tokens (:func:`number_tokens`): words split on spaces, each hyphen kept as its own token "-"
("quatre-vingt-un" -> ["quatre", "-", "vingt", "-", "un"]); German morphemes as above; the
``"digits"`` side is one token per digit (4071 -> ["4", "0", "7", "1"]).
"""
from __future__ import annotations

import numbers as _numbers
from collections.abc import Iterable

import numpy as np

LANGUAGES = ("en", "fr", "de", "es")
MAX_NUMBER = 999_999

_HYPHEN = "-"

# --- English -----------------------------------------------------------------------------------
_EN_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
            "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_EN_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")


def _en_below_100(n: int) -> list[str]:
    if n < 20:
        return [_EN_ONES[n]]
    tens, unit = divmod(n, 10)
    return [_EN_TENS[tens]] + ([_HYPHEN, _EN_ONES[unit]] if unit else [])


def _en_below_1000(n: int) -> list[str]:
    hundreds, rest = divmod(n, 100)
    words = [_EN_ONES[hundreds], "hundred"] if hundreds else []
    return words + (_en_below_100(rest) if rest else [])


def _en(n: int) -> list[str]:
    if n == 0:
        return ["zero"]
    thousands, rest = divmod(n, 1000)
    words = _en_below_1000(thousands) + ["thousand"] if thousands else []
    return words + (_en_below_1000(rest) if rest else [])


# --- French (traditional spelling) ----------------------------------------------------------------
_FR_UNITS = ("zéro un deux trois quatre cinq six sept huit neuf dix onze douze treize quatorze "
             "quinze seize").split()
_FR_TENS = {2: "vingt", 3: "trente", 4: "quarante", 5: "cinquante", 6: "soixante"}


def _fr_below_100(n: int, last: bool) -> list[str]:
    """``last``: nothing follows (so "quatre-vingts" takes its s)."""
    if n <= 16:
        return [_FR_UNITS[n]]
    if n < 20:
        return ["dix", _HYPHEN, _FR_UNITS[n - 10]]
    if n < 70:
        tens, unit = divmod(n, 10)
        if unit == 0:
            return [_FR_TENS[tens]]
        if unit == 1:
            return [_FR_TENS[tens], "et", "un"]
        return [_FR_TENS[tens], _HYPHEN, _FR_UNITS[unit]]
    if n < 80:  # 70-79: soixante + 10..19
        if n == 71:
            return ["soixante", "et", "onze"]
        return ["soixante", _HYPHEN] + _fr_below_100(n - 60, last)
    if n == 80:  # 80-99: quatre-vingt(s) + 0..19, never "et"
        return ["quatre", _HYPHEN, "vingts" if last else "vingt"]
    return ["quatre", _HYPHEN, "vingt", _HYPHEN] + _fr_below_100(n - 80, last)


def _fr_below_1000(n: int, last: bool) -> list[str]:
    hundreds, rest = divmod(n, 100)
    if hundreds == 0:
        return _fr_below_100(rest, last)
    if hundreds == 1:
        words = ["cent"]
    else:
        words = [_FR_UNITS[hundreds], "cents" if rest == 0 and last else "cent"]
    return words + (_fr_below_100(rest, last) if rest else [])


def _fr(n: int) -> list[str]:
    if n == 0:
        return ["zéro"]
    thousands, rest = divmod(n, 1000)
    words = []
    if thousands == 1:
        words = ["mille"]
    elif thousands:
        words = _fr_below_1000(thousands, last=False) + ["mille"]
    return words + (_fr_below_1000(rest, last=True) if rest else [])


# --- German (morphemes of the one-word written form) --------------------------------------------
_DE_UNITS = ("null eins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf dreizehn "
             "vierzehn fünfzehn sechzehn siebzehn achtzehn neunzehn").split()
_DE_TENS = ("", "", "zwanzig", "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig", "achtzig",
            "neunzig")


def _de_unit(n: int, last: bool) -> str:
    return ("eins" if last else "ein") if n == 1 else _DE_UNITS[n]


def _de_below_100(n: int, last: bool) -> list[str]:
    """``last``: nothing follows (so 1 is "eins", not "ein")."""
    if n < 20:
        return [_de_unit(n, last)]
    tens, unit = divmod(n, 10)
    return ([_de_unit(unit, False), "und"] if unit else []) + [_DE_TENS[tens]]


def _de_below_1000(n: int, last: bool) -> list[str]:
    hundreds, rest = divmod(n, 100)
    words = [_de_unit(hundreds, False), "hundert"] if hundreds else []
    return words + (_de_below_100(rest, last) if rest else [])


def _de(n: int) -> list[str]:
    if n == 0:
        return ["null"]
    thousands, rest = divmod(n, 1000)
    words = _de_below_1000(thousands, last=False) + ["tausend"] if thousands else []
    return words + (_de_below_1000(rest, last=True) if rest else [])


# --- Spanish -------------------------------------------------------------------------------------
_ES_UNITS = ("cero uno dos tres cuatro cinco seis siete ocho nueve diez once doce trece catorce "
             "quince dieciséis diecisiete dieciocho diecinueve veinte veintiuno veintidós "
             "veintitrés veinticuatro veinticinco veintiséis veintisiete veintiocho "
             "veintinueve").split()
_ES_TENS = ("", "", "", "treinta", "cuarenta", "cincuenta", "sesenta", "setenta", "ochenta",
            "noventa")
_ES_HUNDREDS = ("", "ciento", "doscientos", "trescientos", "cuatrocientos", "quinientos",
                "seiscientos", "setecientos", "ochocientos", "novecientos")
_ES_SHORT = {"uno": "un", "veintiuno": "veintiún"}  # before "mil"


def _es_unit(n: int, before_mil: bool) -> str:
    word = _ES_UNITS[n]
    return _ES_SHORT.get(word, word) if before_mil else word


def _es_below_100(n: int, before_mil: bool) -> list[str]:
    if n < 30:
        return [_es_unit(n, before_mil)]
    tens, unit = divmod(n, 10)
    return [_ES_TENS[tens]] + (["y", _es_unit(unit, before_mil)] if unit else [])


def _es_below_1000(n: int, before_mil: bool) -> list[str]:
    hundreds, rest = divmod(n, 100)
    if hundreds == 1 and rest == 0:
        return ["cien"]
    words = [_ES_HUNDREDS[hundreds]] if hundreds else []
    return words + (_es_below_100(rest, before_mil) if rest else [])


def _es(n: int) -> list[str]:
    if n == 0:
        return ["cero"]
    thousands, rest = divmod(n, 1000)
    words = []
    if thousands == 1:
        words = ["mil"]
    elif thousands:
        words = _es_below_1000(thousands, before_mil=True) + ["mil"]
    return words + (_es_below_1000(rest, before_mil=False) if rest else [])


_SPELLERS = {"en": _en, "fr": _fr, "de": _de, "es": _es}


def _check_language(lang: str, allowed: tuple[str, ...], where: str) -> None:
    if lang not in allowed:
        raise ValueError(f"{where}: unknown language {lang!r}; choose one of "
                         f"{', '.join(repr(name) for name in allowed)}")


def _check_number(number, where: str) -> int:
    if isinstance(number, bool) or not isinstance(number, _numbers.Integral):
        raise TypeError(f"{where}: number must be an int, got {type(number).__name__} {number!r}")
    number = int(number)
    if not 0 <= number <= MAX_NUMBER:
        raise ValueError(f"{where}: number must be in the range 0..{MAX_NUMBER}, got {number}")
    return number


def number_tokens(number: int, lang: str) -> list[str]:
    """The tokens of ``number`` in ``lang`` ("digits", "en", "fr", "de" or "es"); see the module
    docstring for the conventions."""
    _check_language(lang, ("digits",) + LANGUAGES, "number_tokens")
    number = _check_number(number, "number_tokens")
    if lang == "digits":
        return list(str(number))
    return _SPELLERS[lang](number)


def number_words(number: int, lang: str) -> str:
    """``number`` (0 .. 999 999) written in words in ``lang`` ("en", "fr", "de" or "es").

    >>> number_words(4071, "en"), number_words(4071, "fr")
    ('four thousand seventy-one', 'quatre mille soixante et onze')
    >>> number_words(4071, "de"), number_words(4071, "es")
    ('viertausendeinundsiebzig', 'cuatro mil setenta y uno')
    """
    _check_language(lang, LANGUAGES, "number_words")
    tokens = _SPELLERS[lang](_check_number(number, "number_words"))
    if lang == "de":
        return "".join(tokens)
    text = tokens[0]
    for previous, token in zip(tokens, tokens[1:]):
        text += token if _HYPHEN in (previous, token) else " " + token
    return text


def _check_range(low: int, high: int, where: str) -> None:
    if not 0 <= low < high <= MAX_NUMBER + 1:
        raise ValueError(f"{where}: need 0 <= low < high <= {MAX_NUMBER + 1} (numbers are drawn "
                         f"from low .. high-1, within 0..{MAX_NUMBER}), got low={low}, high={high}")


def train_test_split_numbers(low: int, high: int, test_fraction: float = 0.1,
                             seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Split the numbers ``low .. high-1`` into disjoint sorted ``np.int64`` arrays
    ``(train_numbers, test_numbers)``, about ``test_fraction`` of them held out for testing.

    Pass ``exclude=train_numbers`` (or ``test_numbers``) to :func:`number_translation_task` so that
    held-out numbers never appear in training.
    """
    _check_range(low, high, "train_test_split_numbers")
    size = high - low
    if not 0 < test_fraction < 1 or size < 2:
        raise ValueError("train_test_split_numbers: need 0 < test_fraction < 1 and at least 2 "
                         f"numbers, got test_fraction={test_fraction}, {size} numbers")
    n_test = min(max(int(round(test_fraction * size)), 1), size - 1)
    shuffled = np.random.default_rng(seed).permutation(np.arange(low, high, dtype=np.int64))
    return np.sort(shuffled[n_test:]), np.sort(shuffled[:n_test])


def number_translation_pairs(numbers: Iterable[int], src: str = "digits",
                             tgt: str = "en") -> list[tuple[list[str], list[str]]]:
    """``(source_tokens, target_tokens)`` for each of the given numbers, in their order."""
    return [(number_tokens(number, src), number_tokens(number, tgt)) for number in numbers]


def number_translation_task(n: int, src: str = "digits", tgt: str = "en", low: int = 0,
                            high: int = 10_000, seed: int = 0,
                            exclude: Iterable[int] | None = None
                            ) -> list[tuple[list[str], list[str]]]:
    """``n`` pairs translating numbers from ``src`` to ``tgt`` (each "digits", "en", "fr", "de" or
    "es", any direction), numbers drawn from ``low .. high-1`` minus ``exclude``.

    Deterministic given ``seed``. The numbers are drawn without replacement while ``n`` is at most
    the number of candidates; a larger ``n`` goes through shuffled copies of all the candidates,
    so each number appears equally often (give or take one).
    """
    for lang in (src, tgt):
        _check_language(lang, ("digits",) + LANGUAGES, "number_translation_task")
    _check_range(low, high, "number_translation_task")
    if n < 0:
        raise ValueError(f"number_translation_task: n must be >= 0, got {n}")
    candidates = np.arange(low, high, dtype=np.int64)
    if exclude is not None:
        candidates = np.setdiff1d(candidates, np.fromiter(exclude, dtype=np.int64))
    if candidates.size == 0:
        raise ValueError(f"number_translation_task: no numbers left in {low}..{high - 1} after "
                         "removing `exclude`")
    rng = np.random.default_rng(seed)
    rounds = -(-n // candidates.size)
    drawn = np.concatenate([rng.permutation(candidates) for _ in range(rounds)] or
                           [candidates[:0]])[:n]
    return number_translation_pairs(drawn.tolist(), src, tgt)
