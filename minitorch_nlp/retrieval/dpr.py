"""Dense Passage Retrieval (Karpukhin et al., 2020), the survey's eq 83-84: the retrieval
distribution over an index, the training loss with in-batch and BM25 hard negatives, and
:class:`DenseRetriever`, the two encoders of :mod:`minitorch_nlp.models.dpr` put to work on an
index of :mod:`minitorch_nlp.retrieval.index`.

Training (Karpukhin section 3.2): for a batch of B questions with their positive passages and one
hard negative each (the best BM25 passage that does not hold the answer), every question scores
all 2B passages; its own positive is the target and the other 2B - 1 passages, the other
questions' positives ("in-batch negatives") and every hard negative, are its negatives (eq 84).
"""
from __future__ import annotations

import numpy as np

from .. import cookbook
from .. import functional as F
from ..autograd import Tensor, no_grad, tensor
from .index import DenseIndex

__all__ = ["DenseRetriever", "bm25_hard_negatives", "dpr_loss", "retrieval_log_probs",
           "retrieval_scores"]


def _vectors(x, name, where):
    if not isinstance(x, Tensor) or x.ndim != 2:
        shape = x.shape if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{where}: {name} must be a Tensor (rows, d), got {shape}")
    return x


@cookbook.equation(66)
def retrieval_scores(query_vectors, block_vectors):
    """ORQA's S_retr(b, q) = h_q^T h_b (eq 66; DPR's sim(q, p), RAG's d(z)^T q(x)) of each
    query with its own candidate blocks: ``query_vectors`` (batch, d) and ``block_vectors``
    (batch, k, d) Tensors; returns (batch, k)."""
    q = _vectors(query_vectors, "query_vectors", "retrieval_scores")
    if not isinstance(block_vectors, Tensor) or block_vectors.ndim != 3 \
            or block_vectors.shape[0] != q.shape[0] or block_vectors.shape[2] != q.shape[1]:
        raise ValueError(f"retrieval_scores: block_vectors must be a Tensor (batch, k, d) = "
                         f"({q.shape[0]}, k, {q.shape[1]}) for query_vectors {q.shape}, got "
                         f"{getattr(block_vectors, 'shape', type(block_vectors).__name__)}")
    return (q.reshape(q.shape[0], 1, q.shape[1]) * block_vectors).sum(axis=-1)


@cookbook.equation(70, 72, 83)
def retrieval_log_probs(query_vectors, passage_vectors):
    """log p_eta(z | x) = log softmax_z(q(x)^T d(z)) over the given passages (eq 83; ORQA's
    P_ICT(b | q) over a batch of blocks, eq 70, and REALM's p(z | x), eq 72, have the same
    form).

    ``query_vectors`` (queries, d), ``passage_vectors`` (passages, d) Tensors; returns (queries,
    passages). Over the top-k of an index this is the distribution renormalised over those k,
    as RAG uses it (Lewis et al. 2020, section 2.1)."""
    q = _vectors(query_vectors, "query_vectors", "retrieval_log_probs")
    d = _vectors(passage_vectors, "passage_vectors", "retrieval_log_probs")
    if q.shape[1] != d.shape[1]:
        raise ValueError(f"retrieval_log_probs: query vectors of width {q.shape[1]} and passage "
                         f"vectors of width {d.shape[1]} differ")
    return F.log_softmax(q @ d.transpose(), axis=-1)


@cookbook.equation(84)
def dpr_loss(question_vectors, passage_vectors):
    """DPR's loss (eq 84), the mean over the B questions of

        -log e^{sim(q_i, p_i+)} / (e^{sim(q_i, p_i+)} + sum_j e^{sim(q_i, p_ij-)}),

    sim(q, p) = E_Q(q)^T E_P(p). ``question_vectors`` (B, d); ``passage_vectors`` (P, d) with
    P >= B: row i is question i's positive, and every other row is a negative for it (the other
    questions' positives are the in-batch negatives, rows B.. the hard negatives)."""
    q = _vectors(question_vectors, "question_vectors", "dpr_loss")
    p = _vectors(passage_vectors, "passage_vectors", "dpr_loss")
    if p.shape[0] < q.shape[0] or p.shape[1] != q.shape[1]:
        raise ValueError(f"dpr_loss: passage_vectors {p.shape} must have at least as many rows "
                         f"as question_vectors {q.shape} (row i is question i's positive) and "
                         "the same width")
    return F.cross_entropy(q @ p.transpose(), np.arange(q.shape[0]))


def bm25_hard_negatives(bm25, questions, positive_ids, answers, passages, depth=20):
    """For each question, the id of the best BM25 passage that is not its positive and does not
    contain its answer (Karpukhin section 3.2: "top passages returned by BM25 which don't
    contain the answer but match most question tokens"); -1 where none of the ``depth`` best
    qualifies.

    ``bm25`` a fitted :class:`~minitorch_nlp.retrieval.BM25` over ``passages`` (the texts);
    ``questions``, ``positive_ids`` and ``answers`` one per question."""
    if not len(questions) == len(positive_ids) == len(answers):
        raise ValueError(f"bm25_hard_negatives: {len(questions)} questions, "
                         f"{len(positive_ids)} positive ids and {len(answers)} answers must be "
                         "as many")
    if len(passages) != len(bm25):
        raise ValueError(f"bm25_hard_negatives: {len(passages)} passages but the BM25 index "
                         f"holds {len(bm25)}")
    _, ranked = bm25.search(list(questions), min(depth, len(bm25)))
    negatives = []
    for row, positive, answer in zip(ranked, positive_ids, answers):
        found = [int(i) for i in row if i != positive and answer not in passages[i]]
        negatives.append(found[0] if found else -1)
    return np.asarray(negatives, dtype=np.int64)


class DenseRetriever:
    """E_Q and E_P (two :class:`~minitorch_nlp.models.dpr.DPRQuestionEncoder` /
    ``DPRContextEncoder``, or any modules returning ``pooler_output``) with their tokenizer::

        retriever = DenseRetriever(question_encoder, context_encoder, tokenizer)
        index = retriever.index_passages(passages)          # a DenseIndex of E_P(p)
        scores, ids = retriever.retrieve(["Where was Ada born?"], index, k=5)
        loss = retriever.loss(questions, positives, hard_negatives)     # eq 84

    ``max_length``: the tokens kept per text (questions and passages are truncated to it)."""

    def __init__(self, question_encoder, context_encoder, tokenizer, max_length=64):
        self.question_encoder, self.context_encoder = question_encoder, context_encoder
        self.tokenizer, self.max_length = tokenizer, max_length

    def parameters(self):
        """Both encoders' parameters (each once, in case they are shared)."""
        seen, params = set(), []
        for p in [*self.question_encoder.parameters(), *self.context_encoder.parameters()]:
            if id(p) not in seen:
                seen.add(id(p))
                params.append(p)
        return params

    def _encode(self, encoder, texts, where):
        if isinstance(texts, str) or not len(texts):
            raise ValueError(f"DenseRetriever.{where}: expected a non-empty list of texts, got "
                             f"{texts!r}")
        batch = self.tokenizer(list(texts), padding=True, truncation=True,
                               max_length=self.max_length, return_tensors="np")
        return encoder(batch["input_ids"], batch["attention_mask"],
                       batch.get("token_type_ids")).pooler_output

    def encode_questions(self, questions):
        """E_Q(q) for each question: a differentiable Tensor (questions, d)."""
        return self._encode(self.question_encoder, questions, "encode_questions")

    def encode_passages(self, passages):
        """E_P(p) for each passage: a differentiable Tensor (passages, d)."""
        return self._encode(self.context_encoder, passages, "encode_passages")

    def index_passages(self, passages, index=None, batch_size=64):
        """Encode ``passages`` without a graph, ``batch_size`` at a time, into ``index`` (a new
        :class:`DenseIndex` on the active backend when None), which is returned."""
        with no_grad():
            vectors = np.concatenate([
                np.asarray(self.encode_passages(passages[i:i + batch_size]).numpy())
                for i in range(0, len(passages), batch_size)]) if len(passages) else None
        if vectors is None:
            raise ValueError("DenseRetriever.index_passages: the corpus is empty")
        index = DenseIndex(vectors.shape[1]) if index is None else index
        return index.add(vectors)

    def retrieve(self, questions, index, k):
        """The ``k`` passages of ``index`` with the largest E_Q(q)^T E_P(p) for each question:
        ``(scores, ids)`` (questions, k), best first."""
        with no_grad():
            vectors = np.asarray(self.encode_questions(questions).numpy())
        return index.search(vectors, k)

    def scored_top_k(self, questions, index, k):
        """The ``k`` best passages of ``index`` for each question and their scores
        (:func:`retrieval_scores`), differentiable in the question encoder; the passages' vectors
        are the index's, fixed: ``(ids (batch, k) int64, scores (batch, k) Tensor)``."""
        q = self.encode_questions(questions)
        _, ids = index.search(np.asarray(q.numpy()), k)
        blocks = tensor(index.vectors[ids], dtype=q.dtype, backend=q.backend)
        return ids, retrieval_scores(q, blocks)

    def loss(self, questions, positives, hard_negatives=()):
        """Eq 84 for a batch: question i against ``positives`` (one text per question, its
        positive) and ``hard_negatives`` (texts), all of them in-batch negatives of the others.
        A hard negative that is also a positive of the batch is left out: it would be a second
        copy of that question's target, counted as a negative."""
        if len(positives) != len(questions):
            raise ValueError(f"DenseRetriever.loss: {len(questions)} questions but "
                             f"{len(positives)} positive passages; give one per question")
        negatives = [text for text in hard_negatives if text not in set(positives)]
        return dpr_loss(self.encode_questions(questions),
                        self.encode_passages([*positives, *negatives]))
