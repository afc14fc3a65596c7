"""REALM, Retrieval-Augmented Language Model pre-training (Guu et al., 2020), the survey's section
VII-C, eq 72-80.

A knowledge retriever picks documents z for the input x and a knowledge-augmented encoder reads
x joined with each z; z is latent and marginalised (eq 73,
:func:`~minitorch_nlp.retrieval.rag.marginal_log_likelihood`):

    f(x, z) = Embed_input(x)^T Embed_doc(z),  p(z | x) = softmax_z f(x, z)      (eq 72)
    join_BERT(x) = [CLS] x [SEP],  join_BERT(x1, x2) = [CLS] x1 [SEP] x2 [SEP]  (eq 74-75)
    pre-training:  p(y | z, x) = prod_j p(y_j | z, x),
                   p(y_j | z, x) proportional to exp(w_j^T BERT_MASK(j)(join(x, z_body)))
                                                                                (eq 76-77)
    fine-tuning:   p(y | z, x) proportional to sum over spans S of z matching y of
                   exp(MLP([h_START(S); h_END(S)]))                             (eq 78-80)

The embeddings are DPR's encoders (:class:`~minitorch_nlp.retrieval.DenseRetriever`; REALM
projects BERT's [CLS] to 128 dimensions, Guu section 3.2). The sum over Z is taken over the top
k documents of a MIPS index (section 3.4), which holds the documents' embeddings under an older
Embed_doc: the index only *selects* the k documents, and f(x, z) is recomputed for them with the
current parameters, so the gradient reaches both embeddings (a document that helps the prediction
gains score: d log p(y | x) / d f(x, z) = p(z | y, x) - p(z | x)). The index is refreshed "every
several hundred steps" by a background job that re-encodes the corpus with a snapshot of
Embed_doc while training continues (:class:`IndexRefresher`).

Pre-training details (section 3.4): salient spans (names and dates) are masked, one per example;
a null document with an empty body is always among the candidates, for predictions that need no
retrieval; the document an example was taken from may be excluded (a trivial candidate).
Fine-tuning (section 3.2) reads the top k documents (no null document) with
:class:`~minitorch_nlp.retrieval.SpanReader` and keeps the document embeddings and index fixed.
"""
from __future__ import annotations

import copy
import re
import threading

import numpy as np

from .. import checks, cookbook
from .. import functional as F
from ..autograd import Tensor, no_grad
from ..nn import Module
from .dpr import retrieval_scores
from .index import DenseIndex
from .orqa import answer_span_mask, best_answers, read_spans, span_masks
from .rag import marginal_log_likelihood

__all__ = ["REALM", "IndexRefresher", "join_bert", "masked_lm_log_likelihood",
           "salient_span_masking", "salient_spans", "span_answer_log_probs"]

IGNORE_INDEX = -100
_SALIENT = re.compile(r"\b(?:[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*|\d+)\b")


def salient_spans(text):
    """The salient spans of ``text`` as (start, end) character offsets: runs of capitalised
    words (names) and numbers (dates). REALM finds them with a named-entity tagger and a date
    regular expression (Guu section 3.4); this is the regular-expression stand-in."""
    return [match.span() for match in _SALIENT.finditer(text)]


def salient_span_masking(texts, tokenizer, rng):
    """REALM's masking (Guu section 3.4): in each text, one salient span chosen at random is
    replaced by one [MASK] per WordPiece of it. Texts without a salient span are left out.

    Returns ``(masked_texts, targets, sources)``: the texts with their span masked, each span's
    token ids (y_1 .. y_J, eq 76), and the index in ``texts`` each example came from."""
    masked, targets, sources = [], [], []
    for source, text in enumerate(texts):
        spans = salient_spans(text)
        if not spans:
            continue
        start, end = spans[int(rng.integers(len(spans)))]
        pieces = tokenizer.tokenize(text[start:end])
        masked.append(f"{text[:start]}{' '.join([tokenizer.mask_token] * len(pieces))}"
                      f"{text[end:]}")
        targets.append(tokenizer.convert_tokens_to_ids(pieces))
        sources.append(source)
    if not masked:
        raise ValueError("salient_span_masking: no text holds a salient span (a capitalised name "
                         "or a number)")
    return masked, targets, np.asarray(sources, dtype=np.int64)


@cookbook.equation(74, 75)
def join_bert(first_ids, second_ids=None, *, cls_id, sep_id):
    """join_BERT(x) = [CLS] x [SEP] (eq 74) and join_BERT(x1, x2) = [CLS] x1 [SEP] x2 [SEP]
    (eq 75) on token ids: ``(input_ids, token_type_ids)`` lists, the second segment of type 1."""
    ids, types = [cls_id, *first_ids, sep_id], [0] * (len(first_ids) + 2)
    if second_ids is not None:
        ids += [*second_ids, sep_id]
        types += [1] * (len(second_ids) + 1)
    return ids, types


@cookbook.equation(76, 77)
def masked_lm_log_likelihood(logits, *, labels):
    """log p(y | z, x) = sum_j log p(y_j | z, x) (eq 76), p(y_j | z, x) the softmax of the
    output-embedding scores w^T BERT_MASK(j) (eq 77, ``logits``): ``logits`` (rows, time,
    vocab) Tensor, ``labels`` int (rows, time), the token y_j at the masked positions and -100
    elsewhere. Returns (rows,)."""
    if not isinstance(logits, Tensor) or logits.ndim != 3:
        raise ValueError(f"masked_lm_log_likelihood: logits must be a Tensor (rows, time, vocab), "
                         f"got {getattr(logits, 'shape', type(logits).__name__)}")
    labels = checks.ids_array(labels, "labels", "masked_lm_log_likelihood",
                              shape=logits.shape[:2])
    return -F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX,
                            reduction="none").sum(axis=-1)


@cookbook.equation(78)
def span_answer_log_probs(reader_scores, *, span_mask, answer_mask):
    """log p(y | z, x) of fine-tuning (eq 78): the scores MLP([h_START(S); h_END(S)])
    (eq 79-80, :class:`~minitorch_nlp.retrieval.SpanScorer`) of the spans S of z that match y,
    log-sum-exp'd, minus that over every span of z. ``reader_scores`` (batch, k, spans) Tensor,
    ``span_mask`` and ``answer_mask`` bool of its shape (the answer's spans among the real
    ones). Returns (batch, k), -inf for a document without the answer."""
    where = "span_answer_log_probs"
    if not isinstance(reader_scores, Tensor) or reader_scores.ndim != 3:
        raise ValueError(f"{where}: reader_scores must be a Tensor (batch, k, spans), got "
                         f"{getattr(reader_scores, 'shape', type(reader_scores).__name__)}")
    span_mask, answer_mask = span_masks(span_mask, answer_mask, reader_scores.shape, where)
    empty = ~span_mask.any(axis=-1)
    if empty.any():
        b, z = (int(i[0]) for i in np.nonzero(empty))
        raise ValueError(f"{where}: document {z} of row {b} has no real span")
    found = answer_mask.any(axis=-1)
    # a document without the answer gets log 0 = -inf, computed from a finite stand-in (all its
    # spans) so that no -inf - (-inf) reaches the gradient
    correct = answer_mask | (~found[..., None] & span_mask)
    value = reader_scores.masked_fill(~correct, -np.inf).logsumexp(axis=-1) - \
        reader_scores.masked_fill(~span_mask, -np.inf).logsumexp(axis=-1)
    return value.masked_fill(~found, -np.inf)


class IndexRefresher:
    """REALM's asynchronous index refresh (Guu section 3.4): ``start()`` snapshots the document
    encoder and re-encodes the corpus with the snapshot in a background thread while training
    goes on with the live encoder; ``finish(wait=True)`` installs the new vectors into the index
    (``DenseIndex.reset``) once the job is done, and returns whether it did.

    ``retriever``: the :class:`~minitorch_nlp.retrieval.DenseRetriever` whose context encoder is
    Embed_doc; ``documents``: the texts; ``index``: the :class:`DenseIndex` to refresh. Because the
    job encodes with a copy taken at ``start()``, the refreshed vectors do not depend on how many
    training steps ran meanwhile."""

    def __init__(self, retriever, documents, index):
        self.retriever, self.documents, self.index = retriever, list(documents), index
        self._thread, self._vectors, self._error = None, None, None
        self.refreshes = 0

    @property
    def running(self):
        return self._thread is not None

    def start(self):
        if self.running:
            raise RuntimeError("IndexRefresher.start: a refresh is already running; call "
                               "finish() first")
        encoder = copy.deepcopy(self.retriever.context_encoder).requires_grad_(False)
        encoder.eval()
        snapshot = copy.copy(self.retriever)
        snapshot.context_encoder = encoder   # parameters without requires_grad: no graph is built
        self._vectors, self._error = None, None

        def encode():
            try:
                self._vectors = np.concatenate([
                    np.asarray(snapshot.encode_passages(self.documents[i:i + 64]).numpy())
                    for i in range(0, len(self.documents), 64)])
            except Exception as error:   # noqa: BLE001 - re-raised by finish() in the caller
                self._error = error

        self._thread = threading.Thread(target=encode, name="realm-index-refresh", daemon=True)
        self._thread.start()
        return self

    def finish(self, wait=True):
        """Install the refreshed vectors if the job is done (waiting for it when ``wait``);
        True if the index was refreshed, False if the job is still running."""
        if not self.running:
            raise RuntimeError("IndexRefresher.finish: no refresh is running; call start() first")
        self._thread.join(None if wait else 0.0)
        if self._thread.is_alive():
            return False
        self._thread = None
        if self._error is not None:
            raise RuntimeError(f"IndexRefresher: the background refresh failed: "
                               f"{self._error!r}") from self._error
        self.index.reset(self._vectors)
        self.refreshes += 1
        return True


@cookbook.equation(72, 73)
class REALM(Module):
    """The knowledge retriever and the knowledge-augmented encoder::

        index = retriever.index_passages(documents)
        realm = REALM(retriever, index, documents, tokenizer, mlm=BertForMaskedLM(config),
                      reader=SpanReader(config), k=5)
        masked, targets, sources = salient_span_masking(documents, tokenizer, rng)
        loss = realm.mlm_loss(masked, targets, exclude=sources)    # pre-training, eq 72-77
        loss = realm.qa_loss(questions, answers)                   # fine-tuning, eq 72-73, 78-80
        realm.answer(questions)

    ``retriever``: a :class:`~minitorch_nlp.retrieval.DenseRetriever` (Embed_input = its question
    encoder, Embed_doc = its context encoder); ``index``: a :class:`DenseIndex` of the
    ``documents``' Embed_doc (refreshed by :class:`IndexRefresher`); ``mlm``: a
    ``BertForMaskedLM`` for pre-training; ``reader``: a :class:`SpanReader` for fine-tuning
    (either may be None); ``k``: documents retrieved (clamped to the corpus);
    ``max_length``: tokens of join(x, z_body); ``max_span_length``: tokens per answer span.
    ``parameters()`` are both embeddings' and the encoders'."""

    def __init__(self, retriever, index, documents, tokenizer, mlm=None, reader=None, k=5,
                 max_length=96, max_span_length=8):
        super().__init__()
        if not isinstance(index, DenseIndex):
            raise TypeError(f"REALM: index must be a DenseIndex of Embed_doc(z), got "
                            f"{type(index).__name__}")
        if len(index) != len(documents):
            raise ValueError(f"REALM: the index holds {len(index)} vectors but {len(documents)} "
                             "documents were given; index exactly these documents")
        if mlm is None and reader is None:
            raise ValueError("REALM: give an mlm (pre-training) or a reader (fine-tuning), or "
                             "both")
        self.input_encoder = retriever.question_encoder
        self.document_encoder = retriever.context_encoder
        self.mlm, self.reader = mlm, reader
        self.retriever, self.index, self.documents = retriever, index, list(documents)
        self.tokenizer = tokenizer
        self.k = min(checks.positive_int(k, "k", "REALM"), len(index))
        self.max_length = checks.positive_int(max_length, "max_length", "REALM")
        self.max_span_length = checks.positive_int(max_span_length, "max_span_length", "REALM")

    @staticmethod
    def _lists(texts, others, what, where):
        if isinstance(texts, str) or len(texts) != len(others) or not len(texts):
            raise ValueError(f"REALM.{where}: give lists of as many {what} as texts (at least "
                             f"one), got {len(texts)} texts and {len(others)} {what}")

    # ---- the knowledge retriever (eq 72) --------------------------------------------------------
    def retrieve(self, texts, exclude=None, null_document=False):
        """The top ``k`` documents of each text by the index, and f(x, z) for them recomputed
        with the current Embed_input and Embed_doc (eq 72's scores; ``.log_softmax(axis=-1)``
        is p(z | x) over them): ``(ids (batch, k) int64, scores (batch, k) Tensor)``.
        ``exclude``: a document id per text to leave out (the trivial candidate, -1 for none);
        ``null_document``: add the empty document as a last column, id -1."""
        k = self.k if exclude is None else min(self.k + 1, len(self.index))
        queries = self.retriever.encode_questions(texts)
        _, ids = self.index.search(np.asarray(queries.numpy()), k)
        if exclude is not None:
            exclude = checks.ids_array(exclude, "exclude", "REALM.retrieve", shape=(len(texts),),
                                       axes="(batch)")
            ids = np.stack([[i for i in row if i != skip][:self.k]
                            for row, skip in zip(ids, exclude)])
        if null_document:
            ids = np.concatenate([ids, np.full((len(ids), 1), -1)], axis=1)
        unique = sorted(set(ids.ravel().tolist()))
        bodies = [self.documents[i] if i >= 0 else "" for i in unique]
        vectors = self.retriever.encode_passages(bodies)
        position = {doc: p for p, doc in enumerate(unique)}
        rows = np.vectorize(position.get)(ids)
        return ids, retrieval_scores(queries, vectors[rows])

    # ---- pre-training (eq 74-77) ----------------------------------------------------------------
    def _joined(self, texts, targets, doc_ids):
        """join_BERT(x, z_body) for every (x, z) (eq 75), the body cut to fit ``max_length``,
        with the labels y_j at x's [MASK] positions: ids, token types, attention mask and labels
        (batch * k, time)."""
        tok = self.tokenizer
        rows = []
        for text, target, row in zip(texts, targets, doc_ids):
            x = tok.encode(text, add_special_tokens=False)
            masks = [p + 1 for p, i in enumerate(x) if i == tok.mask_token_id]   # after [CLS]
            if len(masks) != len(target):
                raise ValueError(f"REALM.mlm_loss: {text!r} holds {len(masks)} [MASK] tokens but "
                                 f"its target has {len(target)} tokens")
            budget = max(self.max_length - len(x) - 3, 0)
            for doc in row:
                body = tok.encode(self.documents[doc], add_special_tokens=False)[:budget] \
                    if doc >= 0 else []
                ids, types = join_bert(x, body, cls_id=tok.cls_token_id, sep_id=tok.sep_token_id)
                labels = np.full(len(ids), IGNORE_INDEX)
                labels[masks] = target
                rows.append((ids, types, labels))
        time = max(len(ids) for ids, _, _ in rows)
        out = np.zeros((4, len(rows), time), dtype=np.int64)
        out[0].fill(tok.pad_token_id)
        out[3].fill(IGNORE_INDEX)
        for r, (ids, types, labels) in enumerate(rows):
            out[0, r, :len(ids)], out[1, r, :len(ids)] = ids, types
            out[2, r, :len(ids)], out[3, r, :len(ids)] = 1, labels
        return out

    def mlm_log_probs(self, texts, targets, doc_ids):
        """log p(y | z, x) (eq 76-77) of each text's masked tokens under each of its documents
        (id -1: the null document): a Tensor (batch, k)."""
        if self.mlm is None:
            raise ValueError("REALM: pre-training needs an mlm (a BertForMaskedLM)")
        ids, types, mask, labels = self._joined(texts, targets, doc_ids)
        logits = self.mlm(ids, attention_mask=mask, token_type_ids=types).logits
        return masked_lm_log_likelihood(logits, labels=labels).reshape(doc_ids.shape)

    def mlm_log_likelihood(self, texts, targets, exclude=None):
        """log p(y | x) = log sum_z p(y | z, x) p(z | x) (eq 73) over the top k documents and
        the null document: a Tensor (batch,)."""
        self._lists(texts, targets, "targets", "mlm_log_likelihood")
        ids, scores = self.retrieve(texts, exclude=exclude, null_document=True)
        return marginal_log_likelihood(scores.log_softmax(axis=-1),
                                       self.mlm_log_probs(texts, targets, ids))

    def mlm_loss(self, texts, targets, exclude=None):
        """The mean of -log p(y | x) over the masked texts (:func:`salient_span_masking`)."""
        return -self.mlm_log_likelihood(texts, targets, exclude).mean()

    # ---- fine-tuning for open QA (eq 78-80) -----------------------------------------------------
    def _read(self, questions):
        if self.reader is None:
            raise ValueError("REALM: fine-tuning needs a reader (a SpanReader)")
        ids, scores = self.retriever.scored_top_k(questions, self.index, self.k)
        read = read_spans(self.reader, self.tokenizer, questions,
                          [[self.documents[i] for i in row] for row in ids], self.max_length,
                          self.max_span_length)
        return scores, read

    def qa_loss(self, questions, answers):
        """The mean over the questions whose answer is a span of a top-k document of
        -log sum_z p(z | x) p(y | z, x) (eq 73 with eq 78); Embed_doc and the index stay as they
        are (Guu section 3.2). A batch with no answer retrieved is an error."""
        self._lists(questions, answers, "answers", "qa_loss")
        scores, (reader_scores, span_mask, ends, input_ids) = self._read(questions)
        answer_mask = answer_span_mask(self.tokenizer, answers, ends, input_ids, span_mask)
        found = np.flatnonzero(answer_mask.any(axis=(1, 2)))
        if not len(found):
            raise ValueError(f"REALM.qa_loss: no answer of the batch is a span of its top "
                             f"{self.k} documents; nothing to learn from")
        answer_log_probs = span_answer_log_probs(reader_scores[found], span_mask=span_mask[found],
                                                 answer_mask=answer_mask[found])
        return -marginal_log_likelihood(scores[found].log_softmax(axis=-1),
                                        answer_log_probs).sum() / len(questions)

    def answer(self, questions):
        """The answers (strings): the span S of the top ``k`` documents with the largest
        p(z | x) p(S | z, x)."""
        with self.inference(), no_grad():
            scores, (reader_scores, span_mask, ends, input_ids) = self._read(questions)
            reader = np.where(span_mask, np.asarray(reader_scores.numpy()), -np.inf)
            top = reader.max(axis=-1, keepdims=True)
            per_doc = reader - (top + np.log(np.exp(reader - top).sum(axis=-1, keepdims=True)))
            total = np.asarray(scores.log_softmax(axis=-1).numpy())[:, :, None] + per_doc
        return best_answers(self.tokenizer, total, span_mask, ends, input_ids)

