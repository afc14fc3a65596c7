"""Reference maths for section VII, retrieval (Karpukhin et al. 2020, Guu et al. 2020, Lewis et
al. 2020), in ``autograd.numpy``: the references of the specs in
``minitorch_nlp/testing/equation_specs/retrieval.py``.

Written from the papers one query at a time: inner products are sums over coordinates, and
each probability is an exponential divided by its normaliser (shifted by the row's maximum for
stability), never a library softmax.
"""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from autograd.tracer import getval


def _inner(u, v):
    return sum(u[k] * v[k] for k in range(u.shape[0]))


def eq83_dpr_retriever(query_vectors, passage_vectors):
    """log p_eta(z | x) with p_eta(z | x) proportional to exp(d(z)^T q(x)), normalised over the
    given passages: (queries, passages)."""
    rows = []
    for q in query_vectors:
        scores = anp.stack([_inner(q, d) for d in passage_vectors])
        top = anp.max(scores)
        normaliser = sum(anp.exp(s - top) for s in scores)
        rows.append(anp.stack([s - top - anp.log(normaliser) for s in scores]))
    return anp.stack(rows)


def eq84_dpr_nll(question_vectors, passage_vectors):
    """The mean over questions i of -log e^{sim(q_i, p_i+)} / (e^{sim(q_i, p_i+)} +
    sum_j e^{sim(q_i, p_j-)}), where passage i is question i's positive and every other
    passage one of its negatives."""
    total = 0.0
    for i, q in enumerate(question_vectors):
        positive = _inner(q, passage_vectors[i])
        negatives = [_inner(q, p) for j, p in enumerate(passage_vectors) if j != i]
        shift = anp.max(anp.stack([positive] + negatives))
        denominator = anp.exp(positive - shift) + sum(anp.exp(n - shift) for n in negatives)
        total = total - (positive - shift - anp.log(denominator))
    return total / len(question_vectors)


def _log_of_sum_of_exps(terms):
    """log sum exp over ``terms``, shifted by the largest finite one; -inf (log 0) when every
    term is -inf or there is none."""
    finite = [t for t in terms if getval(t) > -anp.inf]
    if not finite:
        return -anp.inf
    top = max(getval(t) for t in finite)
    return top + anp.log(sum(anp.exp(t - top) for t in finite))


def eq73_realm_marginal(doc_log_probs, answer_log_probs):
    """log p(y | x) = log sum_z p(y | z, x) p(z | x), one question at a time: (batch,)."""
    return anp.stack([_log_of_sum_of_exps([doc_log_probs[b, z] + answer_log_probs[b, z]
                                           for z in range(doc_log_probs.shape[1])])
                      for b in range(doc_log_probs.shape[0])])


def _real_positions(target_mask, batch, time):
    """The target mask, every position real when it is None."""
    return np.ones((batch, time), dtype=bool) if target_mask is None else target_mask


def eq81_rag_sequence(doc_log_probs, token_log_probs, target_mask=None):
    """log sum_z p(z | x) prod_i p(y_i | x, z, y_<i): the product over the real positions in
    log space (a sum of logs, so that log-probabilities of -1e4 do not underflow), then the sum
    over documents, per question."""
    batch, k, time = token_log_probs.shape
    real = _real_positions(target_mask, batch, time)
    out = []
    for b in range(batch):
        per_document = []
        for z in range(k):
            log_product = doc_log_probs[b, z]
            for i in range(time):
                if real[b, i]:
                    log_product = log_product + token_log_probs[b, z, i]
            per_document.append(log_product)
        out.append(_log_of_sum_of_exps(per_document))
    return anp.stack(out)


def eq82_rag_token(doc_log_probs, token_log_probs, target_mask=None):
    """log prod_i sum_z p(z | x) p(y_i | x, z, y_<i) over the real positions, per question."""
    batch, k, time = token_log_probs.shape
    real = _real_positions(target_mask, batch, time)
    out = []
    for b in range(batch):
        total = 0.0
        for i in range(time):
            if real[b, i]:
                total = total + _log_of_sum_of_exps([doc_log_probs[b, z] + token_log_probs[b, z, i]
                                                     for z in range(k)])
        out.append(total)
    return anp.stack(out)


def eq62_query_span(start_logits, end_logits, starts, ends, allowed):
    """log p(q_k = span) under GoldEn's query generator: for each row, the start token's and the
    end token's probabilities, each an exponential over the sum of the exponentials of the
    allowed tokens' logits: (batch,)."""
    out = []
    for b in range(start_logits.shape[0]):
        total = 0.0
        for logits, position in ((start_logits[b], starts[b]), (end_logits[b], ends[b])):
            candidates = [logits[t] for t in range(logits.shape[0]) if allowed[b, t]]
            total = total + logits[position] - _log_of_sum_of_exps(candidates)
        out.append(total)
    return anp.stack(out)


def eq63_context_concatenation(context, passages, scores, n):
    """C_{k+1} = C_k concat IR_n(q_k), one row at a time: the context's passages, then the n
    passages of highest score, found by n rounds of "the best passage not yet taken"."""
    rows = []
    for b in range(context.shape[0]):
        taken = []
        for _ in range(n):
            best = max((p for p in range(passages.shape[0]) if p not in taken),
                       key=lambda p: scores[b, p])
            taken.append(best)
        rows.append(anp.concatenate([context[b], anp.stack([passages[p] for p in taken])]))
    return anp.stack(rows)


def eq66_retrieval_score(query_vectors, block_vectors):
    """S_retr(b, q) = h_q^T h_b of each query with each of its own blocks: (batch, k)."""
    return anp.stack([anp.stack([_inner(query_vectors[b], block)
                                 for block in block_vectors[b]])
                      for b in range(query_vectors.shape[0])])


def eq69_span_read_score(hidden, W1, b1, W2, b2, starts, ends):
    """MLP([h_start; h_end]) for each span: one hidden layer (W1 h + b1, then max(., 0)) and a
    scalar output W2 . a + b2, one span at a time: (rows, spans)."""
    rows = []
    for r in range(hidden.shape[0]):
        scores = []
        for start, end in zip(starts[r], ends[r]):
            h = anp.concatenate([hidden[r, start], hidden[r, end]])
            units = [_inner(W1[u], h) + b1[u] for u in range(W1.shape[0])]
            active = anp.stack([u * (u > 0) for u in units])
            scores.append(_inner(W2[0], active) + b2[0])
        rows.append(anp.stack(scores))
    return anp.stack(rows)


def eq70_ict(query_vectors, passage_vectors):
    """log P_ICT(b | q) = log exp(S_retr(b, q)) / sum_{b' in BATCH} exp(S_retr(b', q)) for
    every pseudo-question q and block b of the batch: (queries, blocks)."""
    out = []
    for q in query_vectors:
        scores = [_inner(q, block) for block in passage_vectors]
        normaliser = _log_of_sum_of_exps(scores)
        out.append(anp.stack([s - normaliser for s in scores]))
    return anp.stack(out)


def eq71_answer_derivation(retrieval_scores, reader_scores, span_mask, answer_mask):
    """log of the sum of P_learn(b, s | q) over the correct derivations, P_learn the
    exponential of S_retr(b, q) + S_read(b, s, q) over its sum over every real span of every
    block: (batch,)."""
    out = []
    for b in range(retrieval_scores.shape[0]):
        every, correct = [], []
        for z in range(retrieval_scores.shape[1]):
            for s in range(reader_scores.shape[2]):
                if span_mask[b, z, s]:
                    every.append(retrieval_scores[b, z] + reader_scores[b, z, s])
                if answer_mask[b, z, s]:
                    correct.append(retrieval_scores[b, z] + reader_scores[b, z, s])
        out.append(_log_of_sum_of_exps(correct) - _log_of_sum_of_exps(every))
    return anp.stack(out)


def eq72_realm_retrieval(query_vectors, passage_vectors):
    """log p(z | x) = log exp f(x, z) / sum_z' exp f(x, z'), f(x, z) = Embed_input(x)^T
    Embed_doc(z), written with the normaliser outside the logarithm's argument: (queries,
    documents)."""
    out = []
    for x in query_vectors:
        f = [_inner(x, z) for z in passage_vectors]
        top = max(getval(v) for v in f)   # exp(f - top) <= 1: no overflow at scores of 1e4
        normaliser = sum(anp.exp(w - top) for w in f)
        out.append(anp.stack([(v - top) - anp.log(normaliser) for v in f]))
    return anp.stack(out)


def eq76_realm_mlm(logits, labels):
    """log p(y | z, x) = sum over the masked positions j of log p(y_j | z, x), each the
    exponential of the label's logit over the sum of every word's: (rows,)."""
    out = []
    for r in range(logits.shape[0]):
        total = 0.0
        for t in range(logits.shape[1]):
            if labels[r, t] >= 0:
                words = [logits[r, t, v] for v in range(logits.shape[2])]
                total = total + logits[r, t, labels[r, t]] - _log_of_sum_of_exps(words)
        out.append(total)
    return anp.stack(out)


def eq78_realm_span(reader_scores, span_mask, answer_mask):
    """log p(y | z, x): the log of the sum of exp(score) over the spans matching y, minus that
    over every real span of z, one document at a time; -inf, independent of the scores, for a
    document without the answer: (batch, k)."""
    rows = []
    for b in range(reader_scores.shape[0]):
        docs = []
        for z in range(reader_scores.shape[1]):
            spans = range(reader_scores.shape[2])
            correct = [reader_scores[b, z, s] for s in spans if answer_mask[b, z, s]]
            every = [reader_scores[b, z, s] for s in spans if span_mask[b, z, s]]
            if correct:
                docs.append(_log_of_sum_of_exps(correct) - _log_of_sum_of_exps(every))
            else:   # p(y | z, x) = 0 whatever the scores: log 0, a constant
                docs.append(-anp.inf)
        rows.append(anp.stack(docs))
    return anp.stack(rows)


def eq64_cls_projection(hidden, W, b):
    """W BERT(x)[CLS] + b: the first token's vector of each row, projected one output
    coordinate at a time: (batch, d). ORQA's question (eq 64) and block (eq 65) encoders."""
    return anp.stack([anp.stack([_inner(W[o], hidden[r, 0]) + b[o] for o in range(W.shape[0])])
                      for r in range(hidden.shape[0])])


def _span_boundary(hidden, positions):
    return anp.stack([anp.stack([hidden[r, p] for p in positions[r]])
                      for r in range(hidden.shape[0])])


def eq67_span_start(hidden, starts, ends):
    """h_start = BERT_R(q, b)[START(s)], the token vector at each span's first position:
    (rows, spans, H); ``ends`` plays no part."""
    return _span_boundary(hidden, starts)


def eq68_span_end(hidden, starts, ends):
    """h_end = BERT_R(q, b)[END(s)], the token vector at each span's last position:
    (rows, spans, H); ``starts`` plays no part."""
    return _span_boundary(hidden, ends)


def eq74_join_single(first_ids, cls_id, sep_id):
    """join_BERT(x) = [CLS] x [SEP]: the ids, and the token types (segment 0 throughout)."""
    ids = anp.array([cls_id] + list(first_ids) + [sep_id])
    return ids, anp.zeros(len(ids), dtype=int)


def eq75_join_pair(first_ids, second_ids, cls_id, sep_id):
    """join_BERT(x1, x2) = [CLS] x1 [SEP] x2 [SEP]: the ids, and the token types (0 up to the
    first [SEP], 1 after it)."""
    head, _ = eq74_join_single(first_ids, cls_id, sep_id)
    ids = anp.array(list(head) + list(second_ids) + [sep_id])
    types = anp.array([0 if p < len(head) else 1 for p in range(len(ids))])
    return ids, types


def eq77_masked_token(hidden, word_embeddings, labels):
    """log p(y_j | z, x) at every masked position j (labels >= 0): the exponential of
    w_{y_j}^T h_j over its sum over every word w of the vocabulary; 0 (log 1) at the other
    positions: (rows, time)."""
    rows = []
    for r in range(hidden.shape[0]):
        row = []
        for t in range(hidden.shape[1]):
            if labels[r, t] < 0:
                row.append(0.0 * hidden[r, t, 0])
                continue
            scores = [_inner(w, hidden[r, t]) for w in word_embeddings]
            row.append(scores[labels[r, t]] - _log_of_sum_of_exps(scores))
        rows.append(anp.stack(row))
    return anp.stack(rows)
