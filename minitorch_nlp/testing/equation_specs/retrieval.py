"""Specs of section VII's function-level equations: GoldEn's query generator (eq 62) and context
concatenation (eq 63), REALM's marginal (eq 73), RAG-Sequence and RAG-Token (eq 81-82), DPR's
retriever (eq 83) and loss (eq 84)."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from .. import strategies as S
from ..reference import retrieval as reference
from ..spec import Spec


@st.composite
def _queries_and_passages(draw, at_least_queries):
    queries, width = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    passages = draw(st.integers(queries if at_least_queries else 1, 5))
    return {"query_vectors": draw(S.arrays((queries, width))),
            "passage_vectors": draw(S.arrays((passages, width)))}


def _renamed(case):
    return {"question_vectors": case["query_vectors"], "passage_vectors": case["passage_vectors"]}


@st.composite
def _marginal_cases(draw, with_tokens):
    batch, k = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    case = {"doc_log_probs": draw(S.arrays((batch, k), low=-4.0, high=0.0))}
    if not with_tokens:
        case["answer_log_probs"] = draw(S.arrays((batch, k), low=-6.0, high=0.0))
        return case
    time = draw(st.integers(1, 4))
    case["token_log_probs"] = draw(S.arrays((batch, k, time), low=-3.0, high=0.0))
    mask = draw(S.bool_masks((batch, time)))
    mask[:, 0] = True
    case["target_mask"] = mask
    return case


@st.composite
def _query_span_cases(draw):
    batch, time = draw(st.integers(1, 3)), draw(st.integers(1, 5))
    allowed = draw(S.bool_masks((batch, time), all_false_row=False))
    for row in allowed:   # a query needs at least one word
        row[draw(st.integers(0, time - 1))] = True
    starts, ends = (np.array([draw(st.sampled_from(np.flatnonzero(row).tolist()))
                              for row in allowed]) for _ in range(2))
    return {"start_logits": draw(S.arrays((batch, time))),
            "end_logits": draw(S.arrays((batch, time))),
            "starts": starts, "ends": ends, "allowed": allowed}


@st.composite
def _context_cases(draw):
    batch, m, corpus, width = (draw(st.integers(lo, 4)) for lo in (1, 0, 1, 1))
    return {"context": draw(S.arrays((batch, m, width))),
            "passages": draw(S.arrays((corpus, width))),
            "scores": draw(S.distinct_arrays((batch, corpus))),
            "n": draw(st.integers(1, corpus))}


_RAG_ARGS = (("doc_log_probs", "float64 (batch, k): log p_eta(z | x) of the top-k passages"),
             ("token_log_probs", "float64 (batch, k, T): log p_theta(y_i | x, z, y_<i)"),
             ("target_mask", "bool (batch, T): False on padded target positions"))

SPECS = (
    Spec(62, "query_span_log_likelihood",
         (("start_logits", "float64 (batch, time): G_k's score of each token as the query's "
                           "first"),
          ("end_logits", "float64 (batch, time): G_k's score of each token as the query's last"),
          ("starts", "int (batch,): the query's first token, an allowed one"),
          ("ends", "int (batch,): the query's last token, an allowed one"),
          ("allowed", "bool (batch, time): True on the tokens of the question and the context "
                      "(at least one per row)")),
         "float64 (batch,): log p(start) + log p(end), each a softmax over the allowed tokens",
         ("start_logits", "end_logits"),
         _query_span_cases,
         reference.eq62_query_span,
         "minitorch_nlp.retrieval.golden:query_span_log_likelihood",
         "q_k = G_k(q, C_k): Qi et al. (2019, section 3.2) train the query generator as a span "
         "reader on the oracle queries; this is the log-likelihood of one span."),
    Spec(63, "extend_context",
         (("context", "float64 (batch, m, d): C_k, one row per passage (m may be 0)"),
          ("passages", "float64 (P, d): every passage of the corpus"),
          ("scores", "float64 (batch, P): the search engine's score of each passage for q_k "
                     "(no ties)"),
          ("n", "int, 1 <= n <= P: the passages IR_n(q_k) adds")),
         "float64 (batch, m + n, d): C_k followed by the n best-scored passages, best first",
         ("context", "passages"),
         _context_cases,
         reference.eq63_context_concatenation,
         "minitorch_nlp.retrieval.golden:extend_context",
         "C_{k+1} = C_k concat IR_n(q_k) with the context held as vectors; golden_retrieve does "
         "the same with passage texts."),
    Spec(73, "marginal_log_likelihood",
         (("doc_log_probs", "float64 (batch, k): log p(z | x)"),
          ("answer_log_probs", "float64 (batch, k): log p(y | z, x)")),
         "float64 (batch,): log p(y | x) = log sum_z p(y | z, x) p(z | x)",
         ("doc_log_probs", "answer_log_probs"),
         lambda: _marginal_cases(False),
         reference.eq73_realm_marginal,
         "minitorch_nlp.retrieval.rag:marginal_log_likelihood"),
    Spec(81, "rag_sequence_log_likelihood", _RAG_ARGS,
         "float64 (batch,): log sum_z p_eta(z | x) prod_i p_theta(y_i | x, z, y_<i), the "
         "product over the real positions",
         ("doc_log_probs", "token_log_probs"),
         lambda: _marginal_cases(True),
         reference.eq81_rag_sequence,
         "minitorch_nlp.retrieval.rag:rag_sequence_log_likelihood"),
    Spec(82, "rag_token_log_likelihood", _RAG_ARGS,
         "float64 (batch,): log prod_i sum_z p_eta(z | x) p_theta(y_i | x, z, y_<i), the "
         "product over the real positions",
         ("doc_log_probs", "token_log_probs"),
         lambda: _marginal_cases(True),
         reference.eq82_rag_token,
         "minitorch_nlp.retrieval.rag:rag_token_log_likelihood"),
    Spec(83, "retrieval_log_probs",
         (("query_vectors", "float64 (queries, d): q(x), one row per query"),
          ("passage_vectors", "float64 (passages, d): d(z), one row per passage")),
         "float64 (queries, passages): log p_eta(z | x), p_eta(z | x) proportional to "
         "exp(d(z)^T q(x)) and normalised over the given passages",
         ("query_vectors", "passage_vectors"),
         lambda: _queries_and_passages(False),
         reference.eq83_dpr_retriever,
         "minitorch_nlp.retrieval.dpr:retrieval_log_probs",
         "The survey writes exp(d(z), q(x)); the inner product is meant (Lewis et al. 2020, "
         "eq. 1 of section 2.1)."),
    Spec(84, "dpr_loss",
         (("question_vectors", "float64 (B, d): E_Q(q_i)"),
          ("passage_vectors", "float64 (P, d), P >= B: row i is question i's positive, every "
                              "other row a negative for it")),
         "float64 (): the mean over the B questions of eq 84's negative log-likelihood",
         ("question_vectors", "passage_vectors"),
         lambda: _queries_and_passages(True).map(_renamed),
         reference.eq84_dpr_nll,
         "minitorch_nlp.retrieval.dpr:dpr_loss",
         "In-batch negatives: question i's negatives are all passages but its own positive."),
)
