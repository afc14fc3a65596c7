"""Specs of section VII's function-level equations: DPR's retriever (eq 83) and loss (eq 84)."""
from __future__ import annotations

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


SPECS = (
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
