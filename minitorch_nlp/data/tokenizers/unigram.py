"""The Unigram language-model tokenizer (Kudo 2018), the SentencePiece model of T5, mBART, XLNet
and ALBERT.

Kudo, "Subword Regularization: Improving Neural Network Translation Models with Multiple Subword
Candidates" (ACL 2018), models a text as a sequence of pieces drawn independently from one
distribution ``p(piece)``; the score of a piece is ``log p(piece)``. Among all the ways of cutting
a text into pieces of the vocabulary, encoding takes the likeliest one, the cut whose scores sum
highest, found by the Viterbi algorithm over the *lattice* of every piece that starts at every
position (``viterbi``). *Subword regularization* instead draws a cut with probability proportional
to ``exp(alpha * sum of scores)`` (``sample``; forward-filtering, backward-sampling), so that a
model trained on such cuts sees the many segmentations of a word.

Before segmentation the text is normalized as sentencepiece does (``sentencepiece_model.py``):
each space becomes ``▁``, and a ``▁`` goes in front, so that "world" in "hello world" and at the
start of a text give the same pieces. A character no piece covers becomes the unknown token (runs
of them one token, as sentencepiece does; its score is the lowest piece score minus 10), or with
``byte_fallback`` its UTF-8 bytes, tokens ``<0x00>`` .. ``<0xFF>``.

Training (``train_unigram``, Kudo's section 3.2 as sentencepiece implements it): start from a
large seed vocabulary (every character, and the most frequent substrings of the words, ranked by
frequency times length), then alternate

1. EM: the E-step computes each piece's expected count over the lattices of the words
   (forward-backward), the M-step re-estimates ``log p`` from them (sentencepiece's Bayesian
   variant: ``digamma(count) - digamma(total)``), dropping pieces expected less than half a time;
2. pruning: for each piece, the loss of likelihood if it were removed and its occurrences
   re-segmented by its best cut without it; keep the pieces whose removal costs most (75 % of the
   vocabulary at each round), and always the single characters (which the M-step keeps too,
   with an expected count of at least one half),

until the vocabulary is 10 % above the size asked for; the final vocabulary is every character
plus the best-scored pieces.
"""
from __future__ import annotations

import base64
import functools
import itertools
import math
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from .base import (PLAIN_TEMPLATE, Tokenizer, WordCache, hf_model_max_length,
                   read_hf_special_tokens, read_json, roles_in)
from .hf_pipeline import HFPipeline
from .sentencepiece_model import SPACE_SYMBOL, Normalizer, read_sentencepiece_model
from .training import texts_between

UNK_PENALTY = 10.0          # the unknown token's score: the lowest piece score minus this
EXPECTED_COUNT_FLOOR = 0.5  # the M-step drops pieces expected fewer times than this
FILE_NAME = "unigram_tokenizer.json"
T5_SPECIALS = {"pad": "<pad>", "eos": "</s>", "unk": "<unk>"}
T5_TEMPLATE = {"single": "$A </s>", "pair": "$A </s> $B </s>"}
BYTE_TOKEN = re.compile(r"<0x([0-9A-F]{2})>")


def _byte_tokens(text: str) -> list[str]:
    return [f"<0x{byte:02X}>" for byte in text.encode("utf-8")]


class Lattice:
    """Every way of cutting ``text`` into the pieces of ``scores`` (piece -> score): for each end
    position, the (start, piece, score) of the pieces ending there. A position that no
    one-character piece starts from gets an unknown node (piece None) of ``unk_score`` over its
    character, so that every text has a cut. Nodes are listed in sentencepiece's order (by start,
    then by length), which decides ties. ``skip_whole`` leaves out the piece that is the whole
    text (pruning asks for the best cut of a piece without itself). ``prefixes`` (the proper
    prefixes of the pieces) lets the search for pieces at a position stop at the first substring
    that starts no piece."""

    def __init__(self, text: str, scores: dict, max_length: int, unk_score: float,
                 skip_whole: bool = False, prefixes: set | None = None):
        self.text, self.scores, self.max_length = text, scores, max_length
        self.unk_score, self.skip_whole, self.prefixes = unk_score, skip_whole, prefixes

    def _nodes(self):
        """(start, end, piece or None, score) of every node, in sentencepiece's order."""
        text, get, prefixes, length = self.text, self.scores.get, self.prefixes, len(self.text)
        whole = length if self.skip_whole else -1  # the length of the one piece left out
        for start in range(length):
            single = False
            for end in range(start + 1, min(length, start + self.max_length) + 1):
                piece = text[start:end]
                score = get(piece)
                if score is None:
                    if prefixes is not None and piece not in prefixes:
                        break
                elif end - start != whole:
                    yield start, end, piece, score
                    single = single or end == start + 1
            if not single:
                yield start, start + 1, None, self.unk_score

    @functools.cached_property
    def ending(self) -> list[list[tuple[int, str | None, float]]]:
        """For each end position, the (start, piece, score) of the nodes ending there."""
        ending = [[] for _ in range(len(self.text) + 1)]
        for start, end, piece, score in self._nodes():
            ending[end].append((start, piece, score))
        return ending

    def viterbi(self) -> list[tuple[int, str | None]]:
        """The best cut, as (start, piece or None) nodes in text order. Scores add left to
        right, each node offered to its end position as the nodes come (by start); a later node
        replaces the best so far only when strictly better, as in sentencepiece."""
        best, back = [0.0] + [-math.inf] * (len(self.text)), [None] * (len(self.text) + 1)
        for start, end, piece, score in self._nodes():
            if best[start] + score > best[end]:
                best[end], back[end] = best[start] + score, (start, piece)
        return self._path(back)

    def _path(self, back):
        nodes, end = [], len(self.text)
        while end > 0:
            nodes.append(back[end])
            end = back[end][0]
        return nodes[::-1]

    def forward(self, theta: float = 1.0) -> list[float]:
        """log of the summed ``exp(theta * score)`` of all cuts of each prefix."""
        alpha = [0.0] + [-math.inf] * len(self.text)
        for end in range(1, len(self.text) + 1):
            alpha[end] = _logsumexp([alpha[start] + theta * score
                                     for start, _, score in self.ending[end]])
        return alpha

    def sample(self, theta: float, rng: np.random.Generator) -> list[tuple[int, str | None]]:
        """A cut drawn with probability ``exp(theta * its score) / Z``: the forward sums, then
        from the end backwards, each node with probability proportional to
        ``exp(alpha[its start] + theta * its score)``."""
        alpha, back, end = self.forward(theta), [None] * (len(self.text) + 1), len(self.text)
        while end > 0:
            nodes = self.ending[end]
            weights = np.exp(np.array([alpha[s] + theta * score for s, _, score in nodes])
                             - alpha[end])
            start, piece, _ = nodes[rng.choice(len(nodes), p=weights / weights.sum())]
            back[end] = (start, piece)
            end = start
        return self._path(back)

    def marginals(self) -> tuple[float, list[tuple[str | None, float]]]:
        """(log Z, the probability of each node under p(cut) = exp(score) / Z), for EM."""
        alpha = self.forward()
        beta = [-math.inf] * len(self.text) + [0.0]
        starting = [[] for _ in range(len(self.text) + 1)]
        for end, nodes in enumerate(self.ending):
            for start, piece, score in nodes:
                starting[start].append((end, piece, score))
        for start in range(len(self.text) - 1, -1, -1):
            beta[start] = _logsumexp([score + beta[end] for end, _, score in starting[start]])
        log_z = alpha[-1]
        return log_z, [(piece, math.exp(alpha[start] + score + beta[end] - log_z))
                       for end, nodes in enumerate(self.ending) for start, piece, score in nodes]


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    return top if top == -math.inf else top + math.log(sum(math.exp(v - top) for v in values))


class UnigramTokenizer(Tokenizer):
    """A Unigram-LM tokenizer over ``vocab`` (tokens in id order) and ``scores`` (one per token:
    its log-probability, or None for a token segmentation never produces: special tokens, the
    byte tokens ``<0x..>``, unused pieces).

    ``byte_fallback``: a character no piece covers becomes its UTF-8 byte tokens (which must all
    be in the vocabulary) instead of the unk token. The normalizer's options are sentencepiece's
    (``charsmap``: a compiled character map, bytes or base64 text; ``add_dummy_prefix``,
    ``remove_extra_whitespaces``, ``escape_whitespaces``). ``hf_pipeline`` (the ``normalizer``,
    ``pre_tokenizer`` and ``decoder`` sections of a HuggingFace ``tokenizer.json``, see
    ``hf_pipeline.py``) replaces them: the text is then normalized and cut into words as
    HuggingFace's ``tokenizers`` does. ``decode(encode(text))`` gives back the
    normalized text (``normalize``, with ``▁`` read as a space and the dummy prefix removed) when
    every character is covered. ``special_tokens`` default to T5's (``<pad>``, ``</s>``,
    ``<unk>``) when the vocabulary has them; the template to adding none.
    """

    kind = "unigram"
    file_name = FILE_NAME  # what save writes

    def __init__(self, vocab: Sequence[str], scores: Sequence[float | None], *,
                 special_tokens: dict[str, str] | None = None,
                 extra_special_tokens: Iterable[str] = (), template: dict | None = None,
                 model_max_length: int | None = None, lstrip_tokens: Iterable[str] = (),
                 rstrip_tokens: Iterable[str] = (), byte_fallback: bool = False,
                 charsmap: bytes | str = b"", add_dummy_prefix: bool = True,
                 remove_extra_whitespaces: bool = True, escape_whitespaces: bool = True,
                 hf_pipeline: dict | None = None):
        vocab = list(vocab)
        if special_tokens is None:
            special_tokens = roles_in(T5_SPECIALS, vocab)
        super().__init__(vocab, special_tokens=special_tokens,
                         extra_special_tokens=extra_special_tokens, template=template,
                         model_max_length=model_max_length, lstrip_tokens=lstrip_tokens,
                         rstrip_tokens=rstrip_tokens)
        if len(scores) != len(vocab):
            raise ValueError(f"{self.name}: {len(scores)} scores for a vocabulary of "
                             f"{len(vocab)} tokens; give one per token (None: never a piece)")
        specials = set(self.all_special_tokens)
        self.scores = [None if score is None else float(score) for score in scores]
        self.piece_scores = {token: score for token, score in zip(vocab, self.scores)
                             if score is not None and token not in specials}
        if not self.piece_scores:
            raise ValueError(f"{self.name}: no token has a score, so nothing can be segmented")
        empty = [token for token in self.piece_scores if not token]
        if empty:
            raise ValueError(f"{self.name}: the empty string cannot be a piece")
        self.byte_fallback = bool(byte_fallback)
        if self.byte_fallback:
            missing = [f"<0x{b:02X}>" for b in range(256) if f"<0x{b:02X}>" not in self.vocab]
            if missing:
                raise ValueError(f"{self.name}: byte_fallback needs the 256 byte tokens <0x00> .. "
                                 f"<0xFF> in the vocabulary; {missing[0]} and "
                                 f"{len(missing) - 1} more are missing")
        self._byte_of = {self.vocab[token]: int(match.group(1), 16) for token in self.vocab
                         if (match := BYTE_TOKEN.fullmatch(token)) and self.byte_fallback}
        self.charsmap = base64.b64decode(charsmap) if isinstance(charsmap, str) else bytes(charsmap)
        self.normalizer = Normalizer(self.charsmap, add_dummy_prefix, remove_extra_whitespaces,
                                     escape_whitespaces)
        self.pipeline = None if hf_pipeline is None else HFPipeline(hf_pipeline, self.name)
        self.max_piece_length = max(map(len, self.piece_scores))
        self._prefixes = {piece[:end] for piece in self.piece_scores
                          for end in range(1, len(piece))}
        self.unk_score = min(self.piece_scores.values()) - UNK_PENALTY
        # A text cuts into words at each ▁ when no piece holds a ▁ after its first character:
        # then words can be segmented (and cached) one at a time.
        # (A tokenizer.json's pre-tokenizer says itself where words end.)
        self._word_split = (re.compile(f"(?={SPACE_SYMBOL})") if escape_whitespaces and not any(
            SPACE_SYMBOL in piece[1:] for piece in self.piece_scores) else None)
        self._pieces = WordCache(lambda word: self._tokens(word, self._lattice(word).viterbi()))

    # ---- segmentation --------------------------------------------------------------------------
    def normalize(self, text: str) -> str:
        """The text as segmentation sees it (sentencepiece's ``normalize``; with ``hf_pipeline``,
        the words of the pre-tokenizer joined)."""
        return "".join(self._words(text))

    def _words(self, text: str, first: bool = True) -> list[str]:
        """The pieces of ``text`` that are segmented one at a time (``first``: ``text`` starts the
        input, which a Metaspace pre-tokenizer with prepend_scheme "first" asks)."""
        if self.pipeline is not None:
            return self.pipeline.words(text, first)
        normalized = self.normalizer(text)
        return self._word_split.split(normalized) if self._word_split else [normalized]

    def _lattice(self, normalized: str) -> Lattice:
        return Lattice(normalized, self.piece_scores, self.max_piece_length, self.unk_score,
                       prefixes=self._prefixes)

    def _tokens(self, text: str, nodes: list[tuple[int, str | None]]) -> list[str]:
        """The tokens of a cut of ``text``: each run of unknown characters one unk token (or
        their bytes)."""
        tokens, unknown = [], None
        for start, piece in nodes:
            if piece is None and unknown is None:
                unknown = start
            if piece is not None:
                if unknown is not None:
                    tokens += self._unknown(text[unknown:start])
                    unknown = None
                tokens.append(piece)
        if unknown is not None:
            tokens += self._unknown(text[unknown:])
        return tokens

    def _unknown(self, text: str) -> list[str]:
        if self.byte_fallback:
            return _byte_tokens(text)
        if self.unk_token is None:
            raise ValueError(f"{self.name}: {text!r} is covered by no piece and there is no unk "
                             "token (nor byte_fallback) to stand for it")
        return [self.unk_token]

    def _segment(self, text: str, cut, first: bool = True) -> list[str]:
        tokens = []
        for word in self._words(text, first):
            if word:
                tokens += cut(word)
        return tokens

    def _tokenize_with(self, text: str, cut, where: str) -> list[str]:
        """The tokens of ``text`` around its special tokens, each stretch between them cut into
        words and each word by ``cut``; only the stretch at the very start counts as ``first``."""
        calls = itertools.count()
        return self._tokenize_around_specials(
            text, lambda piece: self._segment(piece, cut, next(calls) == 0
                                              and text.startswith(piece)), where)

    def tokenize(self, text: str) -> list[str]:
        """The tokens of ``text`` (see ``Tokenizer.tokenize``): each word's best cut, cached."""
        return self._tokenize_with(text, self._pieces.__getitem__, "tokenize")

    def sample(self, text: str, alpha: float = 0.1,
               rng: np.random.Generator | int | None = None) -> list[str]:
        """Subword regularization: the tokens of one cut of ``text`` drawn with probability
        proportional to ``exp(alpha * its score)`` (sentencepiece's ``enable_sampling=True,
        nbest_size=-1``); ``alpha`` -> infinity gives ``tokenize``, 0 every cut alike. Special
        tokens in ``text`` are kept whole, as by ``tokenize``."""
        if not (isinstance(alpha, (int, float)) and alpha >= 0 and math.isfinite(alpha)):
            raise ValueError(f"{self.name}.sample: alpha must be a finite number >= 0, "
                             f"got {alpha!r}")
        rng = np.random.default_rng(rng)

        def draw(word):
            return self._tokens(word, self._lattice(word).sample(alpha, rng))
        return self._tokenize_with(text, draw, "sample")

    def _decode(self, ids: list[int]) -> str:
        out = bytearray()
        for index in ids:
            byte = self._byte_of.get(index)
            if byte is None:
                out += self.id_to_token[index].encode("utf-8")
            else:
                out.append(byte)
        text = out.decode("utf-8", "replace")
        if self.pipeline is not None:
            text = text.replace(self.pipeline.replacement, " ")
            return text[1:] if self.pipeline.strips_prefix and text.startswith(" ") else text
        if self.normalizer.escape_whitespaces:
            text = text.replace(SPACE_SYMBOL, " ")
        return text[1:] if self.normalizer.add_dummy_prefix and text.startswith(" ") else text

    # ---- training ------------------------------------------------------------------------------
    @classmethod
    def train(cls, text: str | Iterable[str], vocab_size: int, *,
              special_tokens: dict[str, str] | None = None, template: dict | None = None,
              byte_fallback: bool = False, character_coverage: float = 1.0,
              max_piece_length: int = 16, seed_size: int = 100_000,
              shrinking_factor: float = 0.75, num_sub_iterations: int = 2,
              model_max_length: int | None = None) -> UnigramTokenizer:
        """Learn a vocabulary of ``vocab_size`` tokens from ``text`` (a str or an iterable of
        str) by ``train_unigram``: the special tokens (default T5's ``<pad> </s> <unk>``), the
        byte tokens when ``byte_fallback``, then the pieces by score. The text is read line by
        line, as sentencepiece reads its input file; the normalizer is sentencepiece's default
        less the character map (``identity``)."""
        special_tokens = dict(T5_SPECIALS) if special_tokens is None else special_tokens
        specials = list(dict.fromkeys(special_tokens.values()))
        fixed = specials + ([f"<0x{b:02X}>" for b in range(256)] if byte_fallback else [])
        normalizer = Normalizer()
        words = Counter(word for piece in texts_between(text, specials)
                        for line in piece.split("\n")
                        for word in re.split(f"(?={SPACE_SYMBOL})", normalizer(line)) if word)
        pieces = train_unigram(words, vocab_size - len(fixed),
                               character_coverage=character_coverage,
                               max_piece_length=max_piece_length, seed_size=seed_size,
                               shrinking_factor=shrinking_factor,
                               num_sub_iterations=num_sub_iterations, where=f"{cls.__name__}.train")
        return cls(fixed + [piece for piece, _ in pieces],
                   [None] * len(fixed) + [score for _, score in pieces],
                   special_tokens=special_tokens, template=template, byte_fallback=byte_fallback,
                   model_max_length=model_max_length)

    # ---- files ---------------------------------------------------------------------------------
    def _options(self) -> dict:
        return {"scores": list(self.scores), "byte_fallback": self.byte_fallback,
                "charsmap": base64.b64encode(self.charsmap).decode("ascii"),
                "add_dummy_prefix": self.normalizer.add_dummy_prefix,
                "remove_extra_whitespaces": self.normalizer.remove_extra_whitespaces,
                "escape_whitespaces": self.normalizer.escape_whitespaces,
                "hf_pipeline": None if self.pipeline is None else self.pipeline.spec}

    def save(self, directory: str | os.PathLike) -> None:
        """Write ``unigram_tokenizer.json`` (a subclass: its ``file_name``): the
        ``state_dict()``."""
        self._save_state(directory, self.file_name)

    @classmethod
    def from_file(cls, directory: str | os.PathLike) -> UnigramTokenizer:
        """Read what ``save`` wrote."""
        return cls._from_state_file(directory, cls.file_name)

    @classmethod
    def from_sentencepiece(cls, model: bytes | str | os.PathLike, **options) -> UnigramTokenizer:
        """The tokenizer of a SentencePiece Unigram ``.model`` (a path or its bytes): its pieces
        in its id order, its special ids (unk, bos, eos, pad) as the special tokens, its
        normalizer and byte fallback. ``options`` go to the constructor (``special_tokens`` and
        ``template`` replace the model's)."""
        where = "sentencepiece model" if isinstance(model, bytes) else os.fspath(model)
        if not isinstance(model, bytes):
            with open(model, "rb") as file:
                model = file.read()
        spm = read_sentencepiece_model(model, where)
        if spm.model_type != "unigram":
            raise ValueError(f"{cls.__name__}: {where} is a {spm.model_type} model; "
                             "minitorch_nlp reads SentencePiece Unigram models only")
        odd = [p.piece for p in spm.pieces if p.type == "user_defined"]
        if odd:
            raise ValueError(f"{cls.__name__}: {where} has user-defined symbols ({odd[:3]}), "
                             "which minitorch_nlp does not read")
        if spm.treat_whitespace_as_suffix:
            raise ValueError(f"{cls.__name__}: {where} puts ▁ at the end of words "
                             "(treat_whitespace_as_suffix), which minitorch_nlp does not read")
        vocab = [p.piece for p in spm.pieces]
        options.setdefault("special_tokens", {role: vocab[index] for role, index
                                              in spm.special_ids.items() if index < len(vocab)})
        return cls(vocab, [p.score if p.type == "normal" else None for p in spm.pieces],
                   byte_fallback=spm.byte_fallback, **spm.normalizer, **options)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> UnigramTokenizer:
        """A HuggingFace T5 tokenizer directory: ``spiece.model``, and the ``extra_ids``
        sentinels ``<extra_id_0>`` .. after its pieces in reverse order (``<extra_id_0>`` last,
        as ``T5Tokenizer``; ``tokenizer_config.json``'s ``extra_ids``, default 100), ``</s>``
        after each segment."""
        directory = os.fspath(directory)
        config = read_json(os.path.join(directory, "tokenizer_config.json"), {})
        base = cls.from_sentencepiece(os.path.join(directory, "spiece.model"))
        sentinels = [f"<extra_id_{k}>" for k in reversed(range(int(config.get("extra_ids",
                                                                               100))))]
        vocab = base.id_to_token + [t for t in sentinels if t not in base.vocab]
        found = read_hf_special_tokens(directory, config, roles_in(T5_SPECIALS, vocab))
        extras = list(dict.fromkeys([*sentinels[::-1], *found.extra_special_tokens]))
        vocab += [token for token in extras if token not in vocab]
        state = base.state_dict()
        template = config.get("template") or (T5_TEMPLATE if found.special_tokens.get("eos")
                                              == "</s>" else PLAIN_TEMPLATE)
        return cls(vocab, state["scores"] + [None] * (len(vocab) - len(base)),
                   special_tokens=found.special_tokens, extra_special_tokens=extras,
                   lstrip_tokens=found.lstrip_tokens, rstrip_tokens=found.rstrip_tokens,
                   template=template, model_max_length=hf_model_max_length(config),
                   **{key: state[key] for key in ("byte_fallback", "charsmap", "add_dummy_prefix",
                                                  "remove_extra_whitespaces",
                                                  "escape_whitespaces")})


def _digamma(x: np.ndarray) -> np.ndarray:
    """digamma(x) for x > 0: the recurrence up to x >= 6, then the asymptotic series (as
    sentencepiece's own, to about 1e-10)."""
    x = np.asarray(x, dtype=np.float64).copy()
    result = np.zeros_like(x)
    while (small := x < 6).any():
        result[small] -= 1 / x[small]
        x[small] += 1
    inverse2 = 1 / (x * x)
    return result + np.log(x) - 0.5 / x - inverse2 * (1 / 12 - inverse2 * (1 / 120 - inverse2
                                                                             / 252))


def train_unigram(words: dict[str, int], num_pieces: int, *, character_coverage: float = 1.0,
                  max_piece_length: int = 16, seed_size: int = 100_000,
                  shrinking_factor: float = 0.75, num_sub_iterations: int = 2,
                  where: str = "train_unigram") -> list[tuple[str, float]]:
    """Kudo's Unigram-LM training (see the module docstring) on ``words`` (normalized word ->
    count; a word is ``▁`` + its characters): ``num_pieces`` (piece, log-probability) pairs, best
    first. The characters that cover ``character_coverage`` of the text are always kept; rarer
    ones are left to the unknown token."""
    if not 0 < character_coverage <= 1:
        raise ValueError(f"{where}: character_coverage must lie in (0, 1], "
                         f"got {character_coverage}")
    if not 0 < shrinking_factor < 1:
        raise ValueError(f"{where}: shrinking_factor must lie in (0, 1), got {shrinking_factor}")
    if max_piece_length < 1 or num_sub_iterations < 1 or seed_size < 1:
        raise ValueError(f"{where}: max_piece_length, num_sub_iterations and seed_size must be "
                         f">= 1, got {max_piece_length}, {num_sub_iterations}, {seed_size}")
    chars = Counter()
    for word, count in words.items():
        for char in word:
            chars[char] += count
    if not chars:
        raise ValueError(f"{where}: the text is empty, there is nothing to learn from")
    kept, covered, total = [], 0, sum(chars.values())
    for char, count in sorted(chars.items(), key=lambda item: (-item[1], item[0])):
        if covered >= character_coverage * total and kept:
            break
        kept.append(char)
        covered += count
    if num_pieces < len(kept):
        raise ValueError(f"{where}: a vocabulary of {num_pieces} pieces cannot hold the "
                         f"{len(kept)} characters of the text; ask for more (or lower "
                         "character_coverage)")
    required = set(kept)
    words = {word: count for word, count in words.items()}
    # The seed: the characters, and the substrings of 2+ characters (no ▁ inside) ranked by
    # frequency x length.
    substrings = Counter()
    for word, count in words.items():
        for start in range(len(word)):
            for end in range(start + 2, min(len(word), start + max_piece_length) + 1):
                if SPACE_SYMBOL in word[start + 1:end]:
                    break
                substrings[word[start:end]] += count
    seed = {char: float(chars[char]) for char in kept}
    for piece, count in sorted(substrings.items(), key=lambda item: (-item[1] * len(item[0]),
                                                                      item[0]))[:seed_size]:
        seed[piece] = float(count * len(piece))
    log_total = math.log(sum(seed.values()))
    scores = {piece: math.log(value) - log_total for piece, value in seed.items()}
    desired = int(num_pieces * 1.1)

    def lattices(scores):
        """word, skip_whole -> its Lattice under ``scores`` (the unknown score found once)."""
        unk_score = min(scores.values()) - UNK_PENALTY
        return lambda word, skip_whole=False: Lattice(word, scores, max_piece_length, unk_score,
                                                      skip_whole)

    while True:
        for _ in range(num_sub_iterations):
            expected, lattice = Counter(), lattices(scores)
            for word, count in words.items():
                _, nodes = lattice(word).marginals()
                for piece, probability in nodes:
                    if piece is not None:
                        expected[piece] += count * probability
            kept_pieces = {piece: value for piece, value in expected.items()
                           if value >= EXPECTED_COUNT_FLOOR}
            for char in required:  # the characters stay, however rarely a cut uses them alone
                kept_pieces[char] = max(expected[char], EXPECTED_COUNT_FLOOR)
            digammas = _digamma(np.array(list(kept_pieces.values()) + [sum(kept_pieces.values())]))
            scores = {piece: float(d - digammas[-1])
                      for piece, d in zip(kept_pieces, digammas[:-1])}
        if len(scores) <= desired:
            break
        pruned = _prune(words, scores, lattices(scores),
                        max(desired, int(shrinking_factor * len(scores))))
        if len(pruned) == len(scores):
            break  # every piece left must stay (characters, pieces without another cut)
        scores = pruned
    lowest = min(scores.values())
    final = {char: scores.get(char, lowest - 1 - 1e-4 * rank)
             for rank, char in enumerate(kept)}
    for piece, score in sorted(scores.items(), key=lambda item: (-item[1], item[0])):
        if len(final) >= num_pieces:
            break
        final.setdefault(piece, score)
    return sorted(final.items(), key=lambda item: (-item[1], item[0]))


def _prune(words, scores, lattice, size):
    """The ``size`` pieces whose removal would cost the corpus most likelihood (Kudo's pruning,
    as sentencepiece computes it from the Viterbi cuts); ``lattice(word, skip_whole=False)``
    gives a word's lattice under ``scores``."""
    frequency = Counter()
    for word, count in words.items():
        for _, piece in lattice(word).viterbi():
            if piece is not None:
                frequency[piece] += count
    total = sum(frequency.values())
    keep, losses = [], []
    for piece, _score in scores.items():
        if len(piece) == 1:
            keep.append(piece)  # a character has no other cut
            continue
        if frequency[piece] == 0:
            continue  # in no best cut: removing it costs nothing
        best = lattice(piece).viterbi()
        if len(best) > 1:
            continue  # its own best cut does not use it
        alternative = [p for _, p in lattice(piece, skip_whole=True).viterbi()]
        if None in alternative:
            keep.append(piece)
            continue
        piece_count = frequency[piece]
        log_piece = math.log(piece_count) - math.log(total)
        log_total_alt = math.log(total + piece_count * (len(alternative) - 1))
        log_alternative = sum(math.log(frequency[p] + piece_count) for p in alternative) \
            - len(alternative) * log_total_alt
        losses.append((piece_count / total * (log_piece - log_alternative), piece))
    losses.sort(key=lambda item: (-item[0], item[1]))
    keep += [piece for _, piece in losses[:max(0, size - len(keep))]]
    return {piece: scores[piece] for piece in keep}
