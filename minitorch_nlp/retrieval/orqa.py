"""ORQA, the Open-Retrieval Question Answering system (Lee et al., 2019, "Latent Retrieval for
Weakly Supervised Open Domain Question Answering"), the survey's section VII-B, eq 64-71.

Evidence blocks are retrieved from the whole corpus by a learned dense retriever, and the block
is a latent variable: only the answer string supervises the retriever and the reader.

    h_q = W_q BERT_Q(q)[CLS]                     (eq 64)   DPR's encoder with a 128-d projection
    h_b = W_b BERT_B(b)[CLS]                     (eq 65)   (:class:`~minitorch_nlp.models.dpr`)
    S_retr(b, q) = h_q^T h_b                     (eq 66)   :func:`retrieval_scores`
    h_start, h_end = BERT_R(q, b)[START(s)], [END(s)]   (eq 67-68)
    S_read(b, s, q) = MLP([h_start; h_end])      (eq 69)   :class:`SpanScorer`
    P_ICT(b | q) = softmax over the batch of S_retr     (eq 70)   :func:`inverse_cloze_task`
    P_learn(b, s | q) = exp S(b, s, q) / sum over TOP(k) and their spans   (eq 71)

with S(b, s, q) = S_retr(b, q) + S_read(b, s, q) (Lee section 3.3). The retriever is first
pretrained with the Inverse Cloze Task (section 4): a sentence of a block is a pseudo-question
and the rest of its block the evidence to find among the batch's blocks; the sentence stays in
its block 10% of the time, so that word matching is learnt too. After ICT the block encoder is
frozen and the blocks are indexed once; fine-tuning (section 5) trains the question encoder and
the reader on the answer derivations of the top k blocks (eq 71), plus the "early update" of the
retriever alone over a larger top ``early_k`` (section 5: P_early(b | q) over TOP(c), for which
eq 73's marginal is reused).
"""
from __future__ import annotations

import re

import numpy as np

from .. import checks, cookbook
from .. import functional as F
from ..autograd import Tensor, concatenate, no_grad, tensor
from ..models.bert import BertModel
from ..nn import Linear, Module
from .index import DenseIndex
from .rag import marginal_log_likelihood

__all__ = ["ORQA", "SpanReader", "SpanScorer", "answer_derivation_log_likelihood",
           "answer_span_mask", "best_answers", "inverse_cloze_task", "read_spans",
           "span_masks", "split_sentences"]


def split_sentences(text):
    """The sentences of ``text``: split after '.', '!' or '?' followed by white space."""
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


@cookbook.equation(70)
def inverse_cloze_task(blocks, rng, keep_probability=0.1):
    """The Inverse Cloze Task's examples (Lee section 4): for each block of at least two
    sentences, a random sentence is the pseudo-question q and the block b is its evidence, with
    the sentence removed except with probability ``keep_probability`` (the paper's 10%).

    ``blocks``: texts; ``rng``: a ``numpy.random.Generator``. Returns ``(questions, evidence,
    kept)``: lists of strings and a bool array, True where the sentence stayed in its block.
    Training maximises P_ICT(b | q) over the batch's blocks (eq 70), which is
    :meth:`~minitorch_nlp.retrieval.DenseRetriever.loss` with no hard negatives."""
    if not 0.0 <= keep_probability <= 1.0:
        raise ValueError(f"inverse_cloze_task: keep_probability must lie in [0, 1], got "
                         f"{keep_probability}")
    questions, evidence, kept = [], [], []
    for block in blocks:
        sentences = split_sentences(block)
        if len(sentences) < 2:
            continue
        chosen = int(rng.integers(len(sentences)))
        keep = bool(rng.random() < keep_probability)
        questions.append(sentences[chosen])
        evidence.append(" ".join(s for i, s in enumerate(sentences) if keep or i != chosen))
        kept.append(keep)
    if not questions:
        raise ValueError("inverse_cloze_task: no block has two sentences; a pseudo-question is "
                         "one sentence of a block and its evidence the others")
    return questions, evidence, np.asarray(kept)


@cookbook.equation(67, 68, 69, 79, 80)
class SpanScorer(Module):
    """S_read(b, s, q) = MLP([h_start; h_end]) (eq 69) of spans s with h_start = h[START(s)]
    (eq 67) and h_end = h[END(s)] (eq 68), the MLP one hidden layer of ``hidden_size`` units with
    ReLU (Lee section 3.2)."""

    def __init__(self, hidden_size):
        super().__init__()
        self.hidden_size = checks.positive_int(hidden_size, "hidden_size", "SpanScorer")
        self.hidden = Linear(2 * hidden_size, hidden_size)
        self.output = Linear(hidden_size, 1)

    def forward(self, hidden, starts, ends):
        """``hidden`` (rows, time, hidden_size) token vectors; ``starts``, ``ends`` int (rows,
        spans) token positions; returns the spans' scores (rows, spans)."""
        where = "SpanScorer"
        if not isinstance(hidden, Tensor) or hidden.ndim != 3 \
                or hidden.shape[2] != self.hidden_size:
            raise ValueError(f"{where}: hidden must be a Tensor (rows, time, {self.hidden_size}), "
                             f"got {getattr(hidden, 'shape', type(hidden).__name__)}")
        rows, time = hidden.shape[:2]
        positions = []
        for name, value in (("starts", starts), ("ends", ends)):
            value = checks.ids_array(value, name, where, axes="(rows, spans)")
            if value.shape[0] != rows or ((value < 0) | (value >= time)).any():
                raise ValueError(f"{where}: {name} {value.shape} must be (rows={rows}, spans) "
                                 f"positions in [0, {time})")
            positions.append(value)
        if positions[0].shape != positions[1].shape:
            raise ValueError(f"{where}: starts {positions[0].shape} and ends "
                             f"{positions[1].shape} differ")
        row = np.arange(rows)[:, None]
        joined = concatenate([hidden[row, positions[0]], hidden[row, positions[1]]], axis=-1)
        return self.output(F.relu(self.hidden(joined)))[..., 0]


class SpanReader(Module):
    """ORQA's reader (Lee section 3.2, eq 67-69): BERT_R reads "[CLS] q [SEP] b [SEP]" and
    ``span_scorer`` (a :class:`SpanScorer`) scores the block's spans from its token vectors.
    REALM's span reader (eq 78-80) is the same."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=False)
        self.span_scorer = SpanScorer(config.hidden_size)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        """BERT_R's token vectors (batch, time, hidden) of the joined question and block."""
        return self.bert(input_ids, attention_mask, token_type_ids).last_hidden_state


def read_spans(reader, tokenizer, questions, blocks, max_length, max_span_length):
    """The reader over every (question, block) pair, "[CLS] q [SEP] b [SEP]" (eq 75's join):
    ``blocks`` holds k texts per question. Every span of at most ``max_span_length`` block
    tokens is a candidate. Returns the spans' scores (batch, k, spans) Tensor, ``span_mask``
    (batch, k, spans) True on real spans, ``ends`` (batch, k, spans, 2) their first and last
    token positions, and the joined ``input_ids`` (batch, k, time)."""
    batch, k = len(blocks), len(blocks[0])
    pairs = tokenizer([q for q in questions for _ in range(k)], [b for row in blocks for b in row],
                      padding=True, truncation="only_second", max_length=max_length,
                      return_tensors="np", return_special_tokens_mask=True)
    in_block = (pairs["token_type_ids"] == 1) & (pairs["special_tokens_mask"] == 0) & \
        (pairs["attention_mask"] == 1)
    spans = []
    for row in in_block:
        tokens = np.flatnonzero(row)
        spans.append([(i, j) for a, i in enumerate(tokens) for j in tokens[a:a + max_span_length]])
    width = max(len(row) for row in spans)
    if width == 0:
        raise ValueError(f"read_spans: no block token survives max_length={max_length}; raise it")
    ends = np.zeros((batch * k, width, 2), dtype=np.int64)
    span_mask = np.zeros((batch * k, width), dtype=bool)
    for r, row in enumerate(spans):
        if row:
            ends[r, :len(row)], span_mask[r, :len(row)] = row, True
    hidden = reader(pairs["input_ids"], pairs["attention_mask"], pairs["token_type_ids"])
    scores = reader.span_scorer(hidden, ends[..., 0], ends[..., 1])
    return (scores.reshape(batch, k, width), span_mask.reshape(batch, k, width),
            ends.reshape(batch, k, width, 2), pairs["input_ids"].reshape(batch, k, -1))


def answer_span_mask(tokenizer, answers, ends, input_ids, span_mask):
    """True on the candidate spans (of :func:`read_spans`) whose tokens are the answer's."""
    mask = np.zeros(span_mask.shape, dtype=bool)
    for b, answer in enumerate(answers):
        target = tokenizer.encode(answer, add_special_tokens=False)
        for z in range(span_mask.shape[1]):
            for s in np.flatnonzero(span_mask[b, z]):
                i, j = ends[b, z, s]
                mask[b, z, s] = input_ids[b, z, i:j + 1].tolist() == target
    return mask


def best_answers(tokenizer, scores, span_mask, ends, input_ids):
    """The text of the real span with the largest ``scores`` (batch, k, spans) per question."""
    flat = np.where(span_mask, scores, -np.inf).reshape(len(scores), -1)
    answers = []
    for b, best in enumerate(flat.argmax(axis=1)):
        z, s = divmod(int(best), span_mask.shape[2])
        i, j = ends[b, z, s]
        answers.append(tokenizer.decode(input_ids[b, z, i:j + 1].tolist(),
                                        skip_special_tokens=True))
    return answers


def span_masks(span_mask, answer_mask, shape, where):
    """``span_mask`` (the real candidate spans) and ``answer_mask`` (those whose text is the
    answer) as bool arrays of ``shape``, checked: the answer's spans are real ones."""
    masks = []
    for name, mask in (("span_mask", span_mask), ("answer_mask", answer_mask)):
        mask = np.asarray(mask)
        if mask.shape != tuple(shape) or mask.dtype != bool:
            raise ValueError(f"{where}: {name} must be bool {tuple(shape)}, got {mask.dtype} "
                             f"{mask.shape}")
        masks.append(mask)
    if (masks[1] & ~masks[0]).any():
        raise ValueError(f"{where}: answer_mask marks a span that span_mask leaves out")
    return masks


@cookbook.equation(71)
def answer_derivation_log_likelihood(retrieval_scores, reader_scores, *, span_mask,
                                     answer_mask):
    """log sum over the correct derivations (b, s) of P_learn(b, s | q) (eq 71), with
    S(b, s, q) = S_retr(b, q) + S_read(b, s, q) normalised over every span of every block of
    the top k (Lee section 5: the answer string is the only supervision).

    ``retrieval_scores`` (batch, k) Tensor; ``reader_scores`` (batch, k, spans) Tensor;
    ``span_mask`` bool (batch, k, spans), True on real candidate spans; ``answer_mask`` bool, the
    same shape, True on spans whose text is the answer (at least one per row, each a real
    span). Returns (batch,)."""
    where = "answer_derivation_log_likelihood"
    if not isinstance(retrieval_scores, Tensor) or retrieval_scores.ndim != 2 \
            or not isinstance(reader_scores, Tensor) or reader_scores.ndim != 3 \
            or reader_scores.shape[:2] != retrieval_scores.shape:
        raise ValueError(f"{where}: retrieval_scores must be a Tensor (batch, k) and "
                         f"reader_scores a Tensor (batch, k, spans), got "
                         f"{getattr(retrieval_scores, 'shape', None)} and "
                         f"{getattr(reader_scores, 'shape', None)}")
    span_mask, answer_mask = span_masks(span_mask, answer_mask, reader_scores.shape, where)
    missing = ~answer_mask.reshape(len(answer_mask), -1).any(axis=1)
    if missing.any():
        raise ValueError(f"{where}: row {int(np.flatnonzero(missing)[0])} has no correct "
                         "derivation; leave out questions whose answer is not in the top k")
    batch, k, spans = reader_scores.shape
    joint = (retrieval_scores.reshape(batch, k, 1) + reader_scores).reshape(batch, k * spans)
    flat = (span_mask.reshape(batch, -1), answer_mask.reshape(batch, -1))
    return joint.masked_fill(~flat[1], -np.inf).logsumexp(axis=-1) - \
        joint.masked_fill(~flat[0], -np.inf).logsumexp(axis=-1)


class ORQA(Module):
    """The retriever (after ICT) and the reader, trained end to end on question-answer pairs::

        index = retriever.index_passages(blocks)      # BERT_B after ICT, frozen from here on
        orqa = ORQA(retriever, index, blocks, reader, tokenizer, k=5)
        loss = orqa.loss(questions, answers)          # early update + eq 71
        orqa.answer(questions)                         # the best span of the top k blocks

    ``retriever``: a :class:`~minitorch_nlp.retrieval.DenseRetriever` whose encoders project to
    128 dimensions (``DPRConfig(projection_dim=128)``, eq 64-65); only its question encoder is
    trained. ``reader``: a :class:`SpanReader`; ``tokenizer``: the reader's (and retriever's)
    WordPiece tokenizer. ``k``: the blocks read (clamped to the corpus); ``early_k``: the blocks
    of the early update (default: max(k, 4 k), clamped); ``max_span_length``: tokens per
    candidate span; ``max_length``: tokens of the reader's joined input."""

    def __init__(self, retriever, index, blocks, reader, tokenizer, k=5, early_k=None,
                 max_span_length=8, max_length=96):
        super().__init__()
        if not isinstance(index, DenseIndex):
            raise TypeError(f"ORQA: index must be a DenseIndex of the blocks' h_b, got "
                            f"{type(index).__name__}")
        if len(index) != len(blocks):
            raise ValueError(f"ORQA: the index holds {len(index)} vectors but {len(blocks)} "
                             "blocks were given; index exactly these blocks")
        self.question_encoder, self.reader = retriever.question_encoder, reader
        self.retriever, self.index, self.blocks = retriever, index, list(blocks)
        self.tokenizer = tokenizer
        self.k = min(checks.positive_int(k, "k", "ORQA"), len(index))
        early_k = 4 * self.k if early_k is None else checks.positive_int(early_k, "early_k",
                                                                         "ORQA")
        if early_k < self.k:
            raise ValueError(f"ORQA: early_k={early_k} must be at least k={self.k} (the early "
                             "update looks at more blocks than the reader)")
        self.early_k = min(early_k, len(index))
        self.max_span_length = checks.positive_int(max_span_length, "max_span_length", "ORQA")
        self.max_length = checks.positive_int(max_length, "max_length", "ORQA")

    def loss(self, questions, answers):
        """The mean over the batch of L_early + L_full (Lee section 5): -log of the top
        ``early_k`` blocks' retrieval probability of the blocks that contain the answer string,
        and -log of eq 71's probability of the correct derivations in the top ``k``. A question
        whose answer is in none of those blocks (spans) leaves that term out, as in the paper;
        a batch with neither is an error."""
        if isinstance(questions, str) or len(questions) != len(answers) or not len(questions):
            raise ValueError(f"ORQA: give lists of as many answers as questions (at least one), "
                             f"got {len(questions)} questions and {len(answers)} answers")
        ids, scores = self.retriever.scored_top_k(questions, self.index, self.early_k)
        contains = np.array([[answer in self.blocks[i] for i in row]
                             for row, answer in zip(ids, answers)])
        terms = []
        early = np.flatnonzero(contains.any(axis=1))
        if len(early):
            has_answer = tensor(np.where(contains[early], 0.0, -np.inf), dtype=scores.dtype,
                                backend=scores.backend)
            terms.append(-marginal_log_likelihood(scores[early].log_softmax(axis=-1),
                                                  has_answer).sum())
        reader_scores, span_mask, ends, input_ids = self._read(questions, ids[:, :self.k])
        answer_mask = answer_span_mask(self.tokenizer, answers, ends, input_ids, span_mask)
        full = np.flatnonzero(answer_mask.reshape(len(answers), -1).any(axis=1))
        if len(full):
            terms.append(-answer_derivation_log_likelihood(
                scores[full, :self.k], reader_scores[full], span_mask=span_mask[full],
                answer_mask=answer_mask[full]).sum())
        if not terms:
            raise ValueError(f"ORQA.loss: no answer of the batch is in its top "
                             f"{self.early_k} blocks; nothing to learn from")
        return sum(terms[1:], terms[0]) / len(questions)

    def _read(self, questions, block_ids):
        return read_spans(self.reader, self.tokenizer, questions,
                          [[self.blocks[i] for i in row] for row in block_ids], self.max_length,
                          self.max_span_length)

    def answer(self, questions):
        """The answers (strings): the span of the top ``k`` blocks with the largest
        S_retr(b, q) + S_read(b, s, q)."""
        with self.inference(), no_grad():
            ids, scores = self.retriever.scored_top_k(questions, self.index, self.k)
            reader_scores, span_mask, ends, input_ids = self._read(questions, ids)
            total = np.asarray(scores.numpy())[:, :, None] + np.asarray(reader_scores.numpy())
        return best_answers(self.tokenizer, total, span_mask, ends, input_ids)
