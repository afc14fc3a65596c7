"""GoldEn Retriever (Qi et al., 2019, "Answering Complex Open-domain Questions Through Iterative
Query Generation"), the survey's section VII-A, eq 62-63.

A multi-hop question ("In which country was Velora Danmik born?") needs a passage that the
question never names (the city's). GoldEn retrieves in hops, each with a query it generates:

    q_k = G_k(q, C_k)                 (eq 62: a span of the question and the context so far)
    C_{k+1} = C_k concat IR_n(q_k)    (eq 63: the top n passages of the search engine for q_k)

with C_1 empty and a plain search engine, BM25 as in the paper. G_k is a span reader (Qi
section 3.2 uses DrQA's; here BERT's, :class:`~minitorch_nlp.models.bert.BertForQuestionAnswering`)
over "[CLS] question [SEP] context [SEP]", trained on **oracle queries** (section 3.1): the span
of the question and context whose search ranks the next gold passage best.

Words are :func:`~minitorch_nlp.retrieval.bm25.tokenize`'s (lower-cased runs of letters and
digits), so that a query span is exactly words BM25 reads.
"""
from __future__ import annotations

import numpy as np

from .. import checks, cookbook
from ..autograd import Tensor, concatenate
from ..models.bert import best_span
from .bm25 import tokenize
from .ranking import top_k

__all__ = ["QueryGenerator", "extend_context", "golden_retrieve", "oracle_query",
           "query_span_log_likelihood"]


def _rank_of(bm25, query, gold):
    """The 0-based rank of passage ``gold`` for ``query`` (ties count against it)."""
    scores = bm25.scores(query)
    return int((scores >= scores[gold]).sum()) - 1 if scores[gold] > 0 else len(scores)


def oracle_query(bm25, question, context, gold, max_words=4):
    """The oracle query of one hop (Qi section 3.1): among the spans of at most ``max_words``
    words of the question followed by the context, the one whose BM25 search ranks passage
    ``gold`` best; ties go to the higher BM25 score of ``gold``, then to the shorter, earlier
    span. Returns ``(start, end)`` word indices (inclusive) into ``tokenize(question) +
    tokenize(context)``, and the rank reached."""
    checks.positive_int(max_words, "max_words", "oracle_query")
    words = tokenize(question) + tokenize(context)
    if not words:
        raise ValueError("oracle_query: the question and the context hold no words")
    best, best_key = None, None
    for start in range(len(words)):
        for end in range(start, min(start + max_words, len(words))):
            span = words[start:end + 1]
            key = (_rank_of(bm25, span, gold), -bm25.scores(span)[gold], end - start, start)
            if best_key is None or key < best_key:
                best, best_key = (start, end), key
    return best, best_key[0]


@cookbook.equation(62)
def query_span_log_likelihood(start_logits, end_logits, *, starts, ends, allowed):
    """log p(q_k = the span starts..ends | q, C_k) under G_k (eq 62), what the query generator
    maximises on the oracle queries (Qi section 3.2).

    G_k picks the query's first and last token independently, each by a softmax over the
    ``allowed`` tokens (those of the question and the context; not [CLS], [SEP] or padding)::

        log p = log softmax_allowed(start_logits)[start] + log softmax_allowed(end_logits)[end]

    ``start_logits``, ``end_logits``: Tensors (batch, time); ``starts``, ``ends``: int (batch,)
    token positions, each on an allowed token; ``allowed``: bool (batch, time). Returns
    (batch,)."""
    where = "query_span_log_likelihood"
    if not isinstance(start_logits, Tensor) or not isinstance(end_logits, Tensor) \
            or start_logits.ndim != 2 or end_logits.shape != start_logits.shape:
        raise ValueError(f"{where}: start_logits and end_logits must be Tensors of one shape "
                         f"(batch, time), got {getattr(start_logits, 'shape', None)} and "
                         f"{getattr(end_logits, 'shape', None)}")
    batch, time = start_logits.shape
    allowed = np.asarray(allowed)
    if allowed.shape != (batch, time) or allowed.dtype != bool:
        raise ValueError(f"{where}: allowed must be bool {(batch, time)}, got {allowed.dtype} "
                         f"{allowed.shape}")
    rows = np.arange(batch)
    picked = []
    for name, positions, logits in (("starts", starts, start_logits),
                                    ("ends", ends, end_logits)):
        positions = checks.ids_array(positions, name, where, shape=(batch,), axes="(batch)")
        outside = (positions < 0) | (positions >= time)
        if outside.any() or not allowed[rows, np.clip(positions, 0, time - 1)].all():
            bad = int(np.flatnonzero(outside | ~allowed[rows, np.clip(positions, 0, time - 1)])[0])
            raise ValueError(f"{where}: {name}[{bad}] = {int(positions[bad])} is not an allowed "
                             "token of its row; a query is a span of the question and context")
        log_probs = logits.masked_fill(~allowed, -np.inf).log_softmax(axis=-1)
        picked.append(log_probs[rows, positions])
    return picked[0] + picked[1]


@cookbook.equation(63)
def extend_context(context, passages, scores, *, n):
    """C_{k+1} = C_k concat IR_n(q_k) (eq 63) with the context held as vectors, one row per
    passage (:func:`golden_retrieve` does the same with texts).

    ``context``: Tensor (batch, m, d), the passages of C_k (m may be 0); ``passages``: Tensor
    (P, d), every passage of the corpus; ``scores``: array (batch, P), the search engine's
    scores of each row's query q_k; ``n``: how many passages a hop adds. Returns (batch, m + n,
    d): the context followed by the ``n`` best-scored passages, best first."""
    where = "extend_context"
    checks.positive_int(n, "n", where)
    if not isinstance(context, Tensor) or context.ndim != 3 or not isinstance(passages, Tensor) \
            or passages.ndim != 2 or passages.shape[1] != context.shape[2]:
        raise ValueError(f"{where}: context must be a Tensor (batch, m, d) and passages a Tensor "
                         f"(P, d) of the same width, got {getattr(context, 'shape', None)} and "
                         f"{getattr(passages, 'shape', None)}")
    scores = np.asarray(scores)
    if scores.shape != (context.shape[0], passages.shape[0]):
        raise ValueError(f"{where}: scores {scores.shape} must be (batch, P) = "
                         f"{(context.shape[0], passages.shape[0])}")
    if n > passages.shape[0]:
        raise ValueError(f"{where}: n={n} is larger than the corpus ({passages.shape[0]} "
                         "passages)")
    _, retrieved = top_k(scores, n)
    return concatenate([context, passages[retrieved]], axis=1)


@cookbook.equation(62)
class QueryGenerator:
    """G_k of eq 62: a BERT span reader that picks a query span from question + context.

    ``reader``: a :class:`~minitorch_nlp.models.bert.BertForQuestionAnswering`; ``tokenizer``: its
    WordPiece tokenizer; ``max_length``: tokens of the joined input kept (the context is cut)."""

    def __init__(self, reader, tokenizer, max_length=128):
        self.reader, self.tokenizer, self.max_length = reader, tokenizer, max_length

    def encode(self, question, context):
        """The reader's input for one (question, context): ``ids``, ``token_type_ids`` (1-D)
        and ``word_of`` (the word index of every token, -1 on [CLS] / [SEP] and past the cut)."""
        tok = self.tokenizer
        ids, types, word_of = [tok.cls_token_id], [0], [-1]
        words = tokenize(question) + tokenize(context)
        n_question = len(tokenize(question))
        for segment, (first, last) in enumerate(((0, n_question), (n_question, len(words)))):
            for w in range(first, last):
                pieces = tok.convert_tokens_to_ids(tok.tokenize(words[w]))
                ids += pieces
                types += [segment] * len(pieces)
                word_of += [w] * len(pieces)
            ids.append(tok.sep_token_id)
            types.append(segment)
            word_of.append(-1)
        cut = min(len(ids), self.max_length)
        word_of = np.asarray(word_of[:cut])
        return np.asarray(ids[:cut]), np.asarray(types[:cut]), word_of, words

    def batch(self, questions, contexts, spans=None):
        """Padded reader inputs for many (question, context) pairs; with ``spans`` (word
        (start, end) per pair) also the token ``start_positions`` / ``end_positions`` (first
        token of the start word, last token of the end word)."""
        rows = [self.encode(q, c) for q, c in zip(questions, contexts)]
        time = max(len(r[0]) for r in rows)
        ids = np.full((len(rows), time), self.tokenizer.pad_token_id, dtype=np.int64)
        types, mask = np.zeros_like(ids), np.zeros_like(ids)
        word_of = np.full((len(rows), time), -1)
        for r, (row_ids, row_types, row_words, _) in enumerate(rows):
            n = len(row_ids)
            ids[r, :n], types[r, :n], mask[r, :n], word_of[r, :n] = row_ids, row_types, 1, \
                row_words
        inputs = dict(input_ids=ids, attention_mask=mask, token_type_ids=types)
        if spans is not None:
            starts, ends = [], []
            for r, (start, end) in enumerate(spans):
                on_start, on_end = np.flatnonzero(word_of[r] == start), \
                    np.flatnonzero(word_of[r] == end)
                # a span cut off by max_length is ignored by the loss (position = time)
                starts.append(on_start[0] if len(on_start) else time)
                ends.append(on_end[-1] if len(on_end) else time)
            inputs.update(start_positions=np.asarray(starts), end_positions=np.asarray(ends))
        return inputs, word_of, [r[3] for r in rows]

    def loss(self, questions, contexts, spans):
        """-log p(oracle span) (:func:`query_span_log_likelihood`, eq 62), the mean over the
        pairs whose oracle query ``spans`` survive the cut to ``max_length``."""
        inputs, word_of, _ = self.batch(questions, contexts, spans)
        starts, ends = inputs.pop("start_positions"), inputs.pop("end_positions")
        kept = np.flatnonzero((starts < word_of.shape[1]) & (ends < word_of.shape[1]))
        if not len(kept):
            raise ValueError(f"QueryGenerator.loss: every oracle span lies past max_length="
                             f"{self.max_length}; raise max_length")
        out = self.reader(**inputs)
        return -query_span_log_likelihood(
            out.start_logits[kept], out.end_logits[kept], starts=starts[kept], ends=ends[kept],
            allowed=word_of[kept] >= 0).mean()

    def __call__(self, questions, contexts, max_words=4):
        """q_k = G_k(q, C_k) (eq 62) for each (question, context): the query strings."""
        inputs, word_of, words = self.batch(questions, contexts)
        with self.reader.inference():
            out = self.reader(**inputs)
        starts, ends, _ = best_span(out.start_logits, out.end_logits, max_answer_length=16,
                                    allowed=word_of >= 0)
        queries = []
        for r, (s, e) in enumerate(zip(starts, ends)):
            first, last = word_of[r, s], min(word_of[r, e], word_of[r, s] + max_words - 1)
            queries.append(" ".join(words[r][first:last + 1]))
        return queries


@cookbook.equation(63)
def golden_retrieve(questions, query_generator, bm25, passages, hops=2, n=1):
    """Iterative retrieval (eq 62-63): ``hops`` times, generate q_k = G_k(q, C_k) and append the
    top ``n`` BM25 passages for it, C_{k+1} = C_k concat IR_n(q_k) (C_1 empty).

    ``query_generator(questions, contexts) -> queries`` (a :class:`QueryGenerator`, or any
    function of that form); ``passages`` the texts ``bm25`` indexes. Returns ``(ids, queries)``:
    per question, the retrieved passage ids in order (hops * n of them) and the queries."""
    checks.positive_int(hops, "hops", "golden_retrieve")
    checks.positive_int(n, "n", "golden_retrieve")
    if len(passages) != len(bm25):
        raise ValueError(f"golden_retrieve: {len(passages)} passages but the BM25 index holds "
                         f"{len(bm25)}")
    ids = [[] for _ in questions]
    queries = [[] for _ in questions]
    contexts = ["" for _ in questions]
    for _ in range(hops):
        hop_queries = query_generator(list(questions), contexts)
        _, found = bm25.search(hop_queries, min(n, len(bm25)))
        for r, (query, row) in enumerate(zip(hop_queries, found)):
            queries[r].append(query)
            ids[r] += [int(i) for i in row]
            contexts[r] = " ".join([contexts[r], *(passages[i] for i in row)]).strip()
    return ids, queries
