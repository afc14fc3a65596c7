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
from ..models.bert import best_span
from .bm25 import tokenize

__all__ = ["QueryGenerator", "golden_retrieve", "oracle_query"]


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
        """The reader's span loss on the oracle queries ``spans``."""
        inputs, _, _ = self.batch(questions, contexts, spans)
        return self.reader(**inputs).loss

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
