"""A synthetic knowledge base for open-domain question answering (section VII), no download needed.

Invented people and cities, each described by one encyclopaedia-like passage::

    Velora Danmik is a painter who was born in Tashkor in 1843. Velora Danmik is known for work
    on glass.
    Tashkor is a city in Qumeria on the Lisso river. Tashkor was founded in 1120.

and questions whose answers are spans of those passages:

* single-hop: "Where was Velora Danmik born?" -> "Tashkor" (in the person's passage), "In which
  country is Tashkor?" -> "Qumeria" (in the city's passage) ...;
* two-hop: "In which country was Velora Danmik born?" -> "Qumeria": the person's passage names
  the city (the *bridge*), and only the city's passage holds the answer, so a retriever that
  searches once with the question (which never names the city) tends to miss it. This is what
  GoldEn Retriever's iterative queries are for (eq 62-63).

Every name is made of random syllables, so nothing can be answered from a pretrained model's
memory, and everything is deterministic given ``seed``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import checks

__all__ = ["KnowledgeBase", "Passage", "Question", "knowledge_base", "split_passages"]

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "th", "sh")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "io")
_CODAS = ("", "", "n", "r", "s", "l", "m", "k")
OCCUPATIONS = ("painter", "chemist", "sailor", "composer", "architect", "poet", "astronomer",
               "weaver", "surgeon", "botanist", "cartographer", "engineer")
TOPICS = ("glass", "tides", "bridges", "orchids", "comets", "maps", "bells", "lenses", "silk",
          "clocks", "salt", "violins")


@dataclass(frozen=True)
class Passage:
    """One passage of the corpus: its ``id`` (position in ``KnowledgeBase.passages``), the
    entity it describes (``title``) and its ``text``."""

    id: int
    title: str
    text: str


@dataclass(frozen=True)
class Question:
    """A question with its answer: ``answer`` is ``text[answer_start:answer_start +
    len(answer)]`` of the passage ``passage_ids[-1]``. ``passage_ids`` are the gold passages in
    the order a reader needs them (one for single-hop, two for two-hop questions); ``bridge``
    is the entity that links the two hops (None for single-hop)."""

    text: str
    answer: str
    passage_ids: tuple[int, ...]
    answer_start: int
    bridge: str | None = None

    @property
    def hops(self):
        return len(self.passage_ids)


@dataclass(frozen=True)
class KnowledgeBase:
    """The passages and the questions about them."""

    passages: tuple[Passage, ...]
    questions: tuple[Question, ...]

    @property
    def texts(self):
        """The passages' texts, in id order (what an index is built from)."""
        return [passage.text for passage in self.passages]

    def questions_with(self, hops):
        """The questions that need ``hops`` passages (1 or 2)."""
        return [question for question in self.questions if question.hops == hops]


def _names(rng, count, used, syllables, suffix=""):
    """``count`` new capitalised names of ``syllables`` random syllables each; none is part of
    a name in ``used`` or holds one (so each answer occurs once in its passage), and they are
    added to ``used``."""
    names = []
    while len(names) < count:
        name = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                       for _ in range(syllables)).capitalize() + suffix
        if not any(name in other or other in name for other in used):
            used.add(name)
            names.append(name)
    return names


def _question(text, answer, passages, *ids, bridge=None):
    return Question(text, answer, tuple(ids), passages[ids[-1]].text.index(answer), bridge)


def knowledge_base(n_people=40, n_cities=12, seed=0):
    """A :class:`KnowledgeBase` of ``n_people`` people (born in one of ``n_cities`` cities) and
    the cities: ``n_people + n_cities`` passages (people first), five questions per person
    (three single-hop, two two-hop) and two per city."""
    n_people = checks.positive_int(n_people, "n_people", "knowledge_base")
    n_cities = checks.positive_int(n_cities, "n_cities", "knowledge_base")
    rng = np.random.default_rng(seed)
    used = set()
    countries = _names(rng, max(2, n_cities // 3), used, 2, "ia")
    cities = _names(rng, n_cities, used, 2)
    rivers = _names(rng, n_cities, used, 2)
    first, last = _names(rng, n_people, used, 2), _names(rng, n_people, used, 2)
    city_country = rng.choice(countries, size=n_cities)
    founded = rng.integers(800, 1700, size=n_cities)

    passages, questions = [], []
    for i in range(n_people):
        name, city = f"{first[i]} {last[i]}", int(rng.integers(n_cities))
        occupation, topic = rng.choice(OCCUPATIONS), rng.choice(TOPICS)
        year = int(rng.integers(1750, 1990))
        passages.append(Passage(i, name, f"{name} is a {occupation} who was born in "
                                f"{cities[city]} in {year}. {name} is known for work on {topic}."))
        person, place = i, n_people + city
        questions += [
            (f"Where was {name} born?", cities[city], (person,), None),
            (f"In what year was {name} born?", str(year), (person,), None),
            (f"What is the occupation of {name}?", occupation, (person,), None),
            (f"In which country was {name} born?", city_country[city], (person, place),
             cities[city]),
            (f"On which river was {name} born?", rivers[city], (person, place), cities[city]),
        ]
    for c, city in enumerate(cities):
        passages.append(Passage(n_people + c, city, f"{city} is a city in {city_country[c]} on "
                                f"the {rivers[c]} river. {city} was founded in {founded[c]}."))
        questions += [(f"In which country is {city}?", city_country[c], (n_people + c,), None),
                      (f"On which river is {city}?", rivers[c], (n_people + c,), None)]
    return KnowledgeBase(tuple(passages), tuple(
        _question(text, str(answer), passages, *ids, bridge=bridge)
        for text, answer, ids, bridge in questions))


def split_passages(text, words_per_passage=100):
    """``text`` cut into passages of ``words_per_passage`` whitespace-separated words (the last
    may be shorter), as DPR cuts Wikipedia into 100-word passages; e.g. the standard library's
    docstrings, ``split_passages(data.stdlib_corpus())``, or a file of your own."""
    words_per_passage = checks.positive_int(words_per_passage, "words_per_passage",
                                            "split_passages")
    if not isinstance(text, str):
        raise TypeError(f"split_passages: expected a str, got {type(text).__name__}")
    words = text.split()
    return [" ".join(words[i:i + words_per_passage])
            for i in range(0, len(words), words_per_passage)]
