"""Specs of section VII's equations: GoldEn's query generator (eq 62) and context concatenation
(eq 63), ORQA's question and block encoders (eq 64-65, the [CLS] row of BERT's output and its
projection), retrieval score (eq 66), the reader's start and end vectors (eq 67-68) and span
score (eq 69, the reader's MLP run with the candidate's weights), ICT distribution (eq 70) and
answer derivations (eq 71), REALM's retrieval distribution (eq 72), marginal (eq 73), BERT
joins (eq 74-75, on token ids), masked-LM likelihood (eq 76) and masked-token probability
(eq 77), span answer probability (eq 78) and start and end vectors (eq 79-80), RAG-Sequence and
RAG-Token (eq 81-82), DPR's retriever (eq 83) and loss (eq 84).

Where the survey's equation applies a whole BERT, the spec takes BERT's output (its last hidden
states) as the differentiable input and checks the part the equation defines: the library's
module runs with BERT's output replaced by the given states (a forward hook)."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from minitorch_nlp import functional as F
from minitorch_nlp import nn
from minitorch_nlp.models.dpr import DPRConfig, DPREncoder
from minitorch_nlp.nn.outputs import ModelOutput
from minitorch_nlp.retrieval.orqa import SpanScorer
from minitorch_nlp.retrieval.realm import masked_lm_log_likelihood

from .. import strategies as S
from ..reference import retrieval as reference
from ..spec import Spec


@st.composite
def _queries_and_passages(draw, at_least_queries):
    queries, width = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    passages = draw(st.integers(queries if at_least_queries else 1, 5))
    scale = draw(S.magnitudes())          # scores from near-equal to +-1e4 apart
    return {"query_vectors": draw(S.arrays((queries, width))) * scale,
            "passage_vectors": draw(S.arrays((passages, width)))}


def _renamed(case):
    return {"question_vectors": case["query_vectors"], "passage_vectors": case["passage_vectors"]}


@st.composite
def _marginal_cases(draw, with_tokens):
    """Log-probabilities with documents of zero retrieval probability (-inf, never all of a
    row's) and vanishing ones (-1e4); token log-probabilities down to -1e4 (a product of
    probabilities outside log space underflows); the target mask None (every position
    counts), with padding, or with a row of padding only."""
    batch, k = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    case = {"doc_log_probs": draw(S.log_probability_arrays((batch, k), low=-4.0))}
    if not with_tokens:
        answer = draw(S.log_probability_arrays((batch, k)))
        for b in range(batch):    # p(y | x) > 0: some document is retrieved and has the answer
            if not np.isfinite(case["doc_log_probs"][b] + answer[b]).any():
                answer[b, np.flatnonzero(np.isfinite(case["doc_log_probs"][b]))[0]] = -1.0
        case["answer_log_probs"] = answer
        return case
    time = draw(st.integers(1, 4))
    case["token_log_probs"] = draw(S.log_probability_arrays((batch, k, time), low=-3.0,
                                                            zero_probabilities=False))
    case["target_mask"] = draw(st.one_of(st.none(), S.bool_masks((batch, time))))
    return case


@st.composite
def _query_span_cases(draw):
    batch, time = draw(st.integers(1, 3)), draw(st.integers(1, 5))
    allowed = draw(S.bool_masks((batch, time), all_false_row=False))
    for row in allowed:   # a query needs at least one word
        row[draw(st.integers(0, time - 1))] = True
    starts, ends = (np.array([draw(st.sampled_from(np.flatnonzero(row).tolist()))
                              for row in allowed]) for _ in range(2))
    scale, offset = draw(S.magnitudes()), draw(S.score_offsets())
    return {"start_logits": draw(S.arrays((batch, time))) * scale + offset,
            "end_logits": draw(S.arrays((batch, time))) * scale + offset,
            "starts": starts, "ends": ends, "allowed": allowed}


@st.composite
def _context_cases(draw):
    batch, m, corpus, width = (draw(st.integers(lo, 4)) for lo in (1, 0, 1, 1))
    return {"context": draw(S.arrays((batch, m, width))),
            "passages": draw(S.arrays((corpus, width))),
            "scores": draw(S.distinct_arrays((batch, corpus))),
            "n": draw(st.integers(1, corpus))}


def span_read_scores(hidden, W1, b1, W2, b2, *, starts, ends):
    """S_read = MLP([h_start; h_end]) (eq 67-69): ``hidden`` (rows, time, H), the MLP's
    ``W1`` (H, 2H), ``b1`` (H,), ``W2`` (1, H), ``b2`` (1,), ``starts``, ``ends`` int (rows,
    spans). The library's :class:`~minitorch_nlp.retrieval.SpanScorer` run with these weights."""
    scorer = SpanScorer(hidden.shape[2])
    weights = {"hidden.weight": W1, "hidden.bias": b1, "output.weight": W2, "output.bias": b2}
    with nn.replaced_tensors(scorer, weights):
        return scorer(hidden, starts, ends)


@st.composite
def _span_read_cases(draw):
    rows, time, width, spans = (draw(st.integers(1, 3)) for _ in range(4))
    positions = st.integers(0, time - 1)
    return {"hidden": draw(S.arrays((rows, time, width))),
            "W1": draw(S.arrays((width, 2 * width))), "b1": draw(S.arrays((width,))),
            "W2": draw(S.arrays((1, width))), "b2": draw(S.arrays((1,))),
            "starts": np.array([[draw(positions) for _ in range(spans)] for _ in range(rows)]),
            "ends": np.array([[draw(positions) for _ in range(spans)] for _ in range(rows)])}


@st.composite
def _retrieval_score_cases(draw):
    batch, k, width = (draw(st.integers(1, 3)) for _ in range(3))
    return {"query_vectors": draw(S.arrays((batch, width))),
            "block_vectors": draw(S.arrays((batch, k, width)))}


@st.composite
def _derivation_cases(draw):
    batch, k, spans = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 4))
    span_mask = draw(S.bool_masks((batch, k, spans), all_false_row=False))
    answer_mask = span_mask & draw(S.bool_masks((batch, k, spans), all_false_row=False))
    for b in range(batch):   # every question has a correct derivation, which is a real span
        z, s = draw(st.integers(0, k - 1)), draw(st.integers(0, spans - 1))
        span_mask[b, z, s] = answer_mask[b, z, s] = True
    scale, offset = draw(S.magnitudes()), draw(S.score_offsets())
    return {"retrieval_scores": draw(S.arrays((batch, k))) * scale,
            "reader_scores": draw(S.arrays((batch, k, spans))) * scale + offset,
            "span_mask": span_mask, "answer_mask": answer_mask}


@st.composite
def _masked_lm_cases(draw):
    rows, time, vocab = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 5))
    labels = np.array([[draw(st.integers(0, vocab - 1)) if draw(st.booleans()) else -100
                        for _ in range(time)] for _ in range(rows)])
    if draw(st.booleans()):                   # a row without a masked token: log 1 = 0
        labels[draw(st.integers(0, rows - 1))] = -100
    logits = draw(S.scaled_arrays((rows, time, vocab))) + draw(S.score_offsets())
    return {"logits": logits, "labels": labels}


@st.composite
def _span_answer_cases(draw):
    """Every document has a real span; most have the answer, some not (log 0 = -inf)."""
    case = draw(_derivation_cases())
    batch, k, _ = case["reader_scores"].shape
    for b in range(batch):
        for z in range(k):
            s = draw(st.integers(0, case["span_mask"].shape[2] - 1))
            case["span_mask"][b, z, s] = True
            if draw(st.integers(0, 3)):
                case["answer_mask"][b, z, s] = True
            else:
                case["answer_mask"][b, z] = False
    del case["retrieval_scores"]
    return case


def cls_projection(hidden, W, b):
    """W BERT(x)[CLS] + b (eq 64-65): ``hidden`` (batch, time, H) BERT's last hidden states
    (row 0 is [CLS]), ``W`` (d, H) and ``b`` (d,) the projection. Returns (batch, d).

    The library's :class:`~minitorch_nlp.models.dpr.DPREncoder` (``projection_dim=d``) run with
    this projection, its BERT's output replaced by ``hidden``."""
    batch, time, width = hidden.shape
    encoder = DPREncoder(DPRConfig.tiny(2, hidden_size=width, num_hidden_layers=1,
                                        num_attention_heads=1, intermediate_size=1,
                                        projection_dim=W.shape[0]))
    handle = encoder.bert_model.register_forward_hook(
        lambda module, args, output: ModelOutput(last_hidden_state=hidden))
    try:
        with nn.replaced_tensors(encoder, {"encode_proj.weight": W, "encode_proj.bias": b}):
            return encoder(np.zeros((batch, time), dtype=np.int64)).pooler_output
    finally:
        handle.remove()


@st.composite
def _cls_cases(draw):
    batch, time, width, d = (draw(st.integers(1, 3)) for _ in range(4))
    return {"hidden": draw(S.arrays((batch, time, width))), "W": draw(S.arrays((d, width))),
            "b": draw(S.arrays((d,)))}


def _span_vectors(hidden, starts, ends):
    """[h_start; h_end] (rows, spans, 2H): what the library's SpanScorer feeds its MLP."""
    scorer = SpanScorer(hidden.shape[2])
    fed = []
    handle = scorer.hidden.register_forward_pre_hook(lambda module, args: fed.append(args[0]))
    try:
        scorer(hidden, starts, ends)
    finally:
        handle.remove()
    return fed[0]


def span_start_vectors(hidden, *, starts, ends):
    """h_start = hidden[START(s)] (eq 67, 79): ``hidden`` (rows, time, H) BERT's token vectors,
    ``starts``, ``ends`` int (rows, spans) positions. Returns (rows, spans, H): the first half
    of what the library's :class:`~minitorch_nlp.retrieval.SpanScorer` feeds its MLP."""
    return _span_vectors(hidden, starts, ends)[..., :hidden.shape[2]]


def span_end_vectors(hidden, *, starts, ends):
    """h_end = hidden[END(s)] (eq 68, 80): as :func:`span_start_vectors`, the second half."""
    return _span_vectors(hidden, starts, ends)[..., hidden.shape[2]:]


@st.composite
def _span_vector_cases(draw):
    case = draw(_span_read_cases())
    return {name: case[name] for name in ("hidden", "starts", "ends")}


def masked_token_log_probs(hidden, word_embeddings, *, labels):
    """log p(y_j | z, x), p(y_j | z, x) proportional to exp(w_{y_j}^T h_j) (eq 77):
    ``hidden`` (rows, time, H) BERT's output vectors, ``word_embeddings`` (vocab, H), ``labels``
    int (rows, time), y_j at the masked positions and -100 elsewhere. Returns (rows, time), 0
    at the positions not masked.

    The scores are ``F.linear`` of the vectors with the word embeddings; the library's
    :func:`~minitorch_nlp.retrieval.realm.masked_lm_log_likelihood` is run on each position
    alone (eq 76's product over one masked token)."""
    rows, time, _ = hidden.shape
    logits = F.linear(hidden, word_embeddings).reshape(rows * time, 1, word_embeddings.shape[0])
    return masked_lm_log_likelihood(logits, labels=labels.reshape(rows * time, 1)) \
        .reshape(rows, time)


@st.composite
def _masked_token_cases(draw):
    case = draw(_masked_lm_cases())
    rows, time, vocab = case.pop("logits").shape
    width = draw(st.integers(1, 3))
    case.update(hidden=draw(S.scaled_arrays((rows, time, width), scales=(1.0, 1e-4, 1e2))),
                word_embeddings=draw(S.arrays((vocab, width))))
    return case


_TOKEN_IDS = st.lists(st.integers(0, 20), max_size=4)


@st.composite
def _join_cases(draw, pair):
    cls_id = draw(st.integers(21, 25))
    case = {"first_ids": draw(_TOKEN_IDS), "cls_id": cls_id,
            "sep_id": draw(st.integers(21, 25).filter(lambda v: v != cls_id))}
    if pair:
        case["second_ids"] = draw(_TOKEN_IDS)
    return case


_CLS_ARGS = (("W", "float64 (d, H): the projection (d = 128 in ORQA)"), ("b", "float64 (d,)"))
_SPAN_ARGS = (("hidden", "float64 (rows, time, H): BERT's token vectors of the joined question "
                         "and block"),
              ("starts", "int (rows, spans): START(s), token positions"),
              ("ends", "int (rows, spans): END(s), token positions"))
_SPAN_NOTE = ("The survey's BERT_R(q, b) is given: ``hidden`` is its output, and the spec checks "
              "the row taken at each span's {}. The library's side is SpanScorer's input to its "
              "MLP (eq 69), captured by a forward pre-hook.")
_JOIN_NOTE = ("Token ids, so values only. The library also returns BERT's token types (segment "
              "0, then 1 after the first [SEP]), which the reader and REALM's MLM feed to BERT.")

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
    Spec(64, "cls_projection",
         (("hidden", "float64 (batch, time, H): BERT_Q(q), the question encoder's last hidden "
                     "states, [CLS] first"), *_CLS_ARGS),
         "float64 (batch, d): h_q = W_q BERT_Q(q)[CLS] (+ b)",
         ("hidden", "W", "b"),
         _cls_cases,
         reference.eq64_cls_projection,
         "minitorch_nlp.testing.equation_specs.retrieval:cls_projection",
         "Lee et al. (2019, section 3.1). BERT_Q is given (its output is the argument); the spec "
         "checks the [CLS] row and its projection, with the bias the library's Linear adds. The "
         "library's side is DPREncoder(projection_dim=d) with BERT's output replaced."),
    Spec(65, "cls_projection",
         (("hidden", "float64 (batch, time, H): BERT_B(b), the block encoder's last hidden "
                     "states, [CLS] first"), *_CLS_ARGS),
         "float64 (batch, d): h_b = W_b BERT_B(b)[CLS] (+ b)",
         ("hidden", "W", "b"),
         _cls_cases,
         reference.eq64_cls_projection,
         "minitorch_nlp.testing.equation_specs.retrieval:cls_projection",
         "The same maths as eq 64 with the block encoder's own BERT and projection (ORQA's "
         "retriever has two DPREncoders)."),
    Spec(66, "retrieval_scores",
         (("query_vectors", "float64 (batch, d): h_q, one row per question"),
          ("block_vectors", "float64 (batch, k, d): h_b of each question's k blocks")),
         "float64 (batch, k): S_retr(b, q) = h_q^T h_b",
         ("query_vectors", "block_vectors"),
         _retrieval_score_cases,
         reference.eq66_retrieval_score,
         "minitorch_nlp.retrieval.dpr:retrieval_scores"),
    Spec(67, "span_start_vectors", _SPAN_ARGS,
         "float64 (rows, spans, H): h_start = BERT_R(q, b)[START(s)]",
         ("hidden",),
         _span_vector_cases,
         reference.eq67_span_start,
         "minitorch_nlp.testing.equation_specs.retrieval:span_start_vectors",
         _SPAN_NOTE.format("first token")),
    Spec(68, "span_end_vectors", _SPAN_ARGS,
         "float64 (rows, spans, H): h_end = BERT_R(q, b)[END(s)]",
         ("hidden",),
         _span_vector_cases,
         reference.eq68_span_end,
         "minitorch_nlp.testing.equation_specs.retrieval:span_end_vectors",
         _SPAN_NOTE.format("last token")),
    Spec(69, "span_read_scores",
         (("hidden", "float64 (rows, time, H): BERT_R's token vectors"),
          ("W1", "float64 (H, 2H): the MLP's hidden layer"), ("b1", "float64 (H,)"),
          ("W2", "float64 (1, H): the MLP's output layer"), ("b2", "float64 (1,)"),
          ("starts", "int (rows, spans): START(s), token positions"),
          ("ends", "int (rows, spans): END(s), token positions")),
         "float64 (rows, spans): W2 relu(W1 [h_start; h_end] + b1) + b2, h_start = "
         "hidden[START(s)] (eq 67), h_end = hidden[END(s)] (eq 68)",
         ("hidden", "W1", "b1", "W2", "b2"),
         _span_read_cases,
         reference.eq69_span_read_score,
         "minitorch_nlp.testing.equation_specs.retrieval:span_read_scores",
         "Lee et al. (2019, section 3.2): S_read(b, s, q) = MLP([h_start; h_end]). The "
         "library's side is SpanScorer with these weights."),
    Spec(70, "retrieval_log_probs",
         (("query_vectors", "float64 (queries, d): h_q of each pseudo-question"),
          ("passage_vectors", "float64 (blocks, d): h_b of the batch's blocks")),
         "float64 (queries, blocks): log P_ICT(b | q), the softmax of S_retr(b, q) over BATCH",
         ("query_vectors", "passage_vectors"),
         lambda: _queries_and_passages(False),
         reference.eq70_ict,
         "minitorch_nlp.retrieval.dpr:retrieval_log_probs",
         "The Inverse Cloze Task (Lee et al. 2019, section 4) trains the retriever to pick the "
         "pseudo-question's own block among the batch's; the same function as eq 83's."),
    Spec(71, "answer_derivation_log_likelihood",
         (("retrieval_scores", "float64 (batch, k): S_retr(b, q) of the top k blocks"),
          ("reader_scores", "float64 (batch, k, spans): S_read(b, s, q) of each block's spans"),
          ("span_mask", "bool (batch, k, spans): True on real candidate spans"),
          ("answer_mask", "bool (batch, k, spans): True on the spans whose text is the answer "
                          "(at least one per row, each a real span)")),
         "float64 (batch,): log sum over correct (b, s) of P_learn(b, s | q), P_learn the "
         "softmax of S_retr + S_read over every real span of the top k blocks",
         ("retrieval_scores", "reader_scores"),
         _derivation_cases,
         reference.eq71_answer_derivation,
         "minitorch_nlp.retrieval.orqa:answer_derivation_log_likelihood"),
    Spec(72, "retrieval_log_probs",
         (("query_vectors", "float64 (queries, d): Embed_input(x), one row per input"),
          ("passage_vectors", "float64 (documents, d): Embed_doc(z), one row per document")),
         "float64 (queries, documents): log p(z | x), p(z | x) = exp f(x, z) / sum_z' "
         "exp f(x, z'), f(x, z) = Embed_input(x)^T Embed_doc(z)",
         ("query_vectors", "passage_vectors"),
         lambda: _queries_and_passages(False),
         reference.eq72_realm_retrieval,
         "minitorch_nlp.retrieval.dpr:retrieval_log_probs",
         "Guu et al. (2020, section 3.2); REALM sums over the top k of a MIPS index, "
         "renormalised over them. The same function as eq 83's."),
    Spec(73, "marginal_log_likelihood",
         (("doc_log_probs", "float64 (batch, k): log p(z | x)"),
          ("answer_log_probs", "float64 (batch, k): log p(y | z, x)")),
         "float64 (batch,): log p(y | x) = log sum_z p(y | z, x) p(z | x)",
         ("doc_log_probs", "answer_log_probs"),
         lambda: _marginal_cases(False),
         reference.eq73_realm_marginal,
         "minitorch_nlp.retrieval.rag:marginal_log_likelihood"),
    Spec(74, "join_bert",
         (("first_ids", "list of int: x's token ids (maybe empty)"),
          ("cls_id", "int: the id of [CLS]"), ("sep_id", "int: the id of [SEP]")),
         "(input_ids, token_type_ids): [CLS] x [SEP] and its token types (all 0)",
         (),
         lambda: _join_cases(False),
         reference.eq74_join_single,
         "minitorch_nlp.retrieval.realm:join_bert",
         _JOIN_NOTE),
    Spec(75, "join_bert",
         (("first_ids", "list of int: x1's token ids (maybe empty)"),
          ("second_ids", "list of int: x2's token ids (maybe empty)"),
          ("cls_id", "int: the id of [CLS]"), ("sep_id", "int: the id of [SEP]")),
         "(input_ids, token_type_ids): [CLS] x1 [SEP] x2 [SEP] and its token types (0 through "
         "the first [SEP], 1 after)",
         (),
         lambda: _join_cases(True),
         reference.eq75_join_pair,
         "minitorch_nlp.retrieval.realm:join_bert",
         _JOIN_NOTE),
    Spec(76, "masked_lm_log_likelihood",
         (("logits", "float64 (rows, time, vocab): w^T BERT_MASK(j)(join(x, z_body)) for every "
                     "word w (eq 77)"),
          ("labels", "int (rows, time): y_j at the masked positions, -100 elsewhere")),
         "float64 (rows,): log p(y | z, x) = sum_j log p(y_j | z, x), p(y_j | z, x) the softmax "
         "of the logits (eq 77)",
         ("logits",),
         _masked_lm_cases,
         reference.eq76_realm_mlm,
         "minitorch_nlp.retrieval.realm:masked_lm_log_likelihood"),
    Spec(77, "masked_token_log_probs",
         (("hidden", "float64 (rows, time, H): BERT's output vectors of join_BERT(x, z_body)"),
          ("word_embeddings", "float64 (vocab, H): w, one row per word"),
          ("labels", "int (rows, time): y_j at the masked positions, -100 elsewhere")),
         "float64 (rows, time): log p(y_j | z, x) at the masked positions, p(y_j | z, x) the "
         "softmax over the vocabulary of w^T BERT_MASK(j); 0 elsewhere",
         ("hidden", "word_embeddings"),
         _masked_token_cases,
         reference.eq77_masked_token,
         "minitorch_nlp.testing.equation_specs.retrieval:masked_token_log_probs",
         "Guu et al. (2020, section 3.2). BERT is given (``hidden`` is its output at each "
         "position); the spec checks the masked positions' scores against the word embeddings "
         "and their normalisation. The library's BertForMaskedLM applies a transform (dense, "
         "GELU, LayerNorm) before these scores and adds a bias to them; ``hidden`` stands for "
         "the transform's output. "
         "The sum over time of this output is eq 76."),
    Spec(78, "span_answer_log_probs",
         (("reader_scores", "float64 (batch, k, spans): MLP([h_START(S); h_END(S)]) of each "
                            "span of each document (eq 79-80)"),
          ("span_mask", "bool (batch, k, spans): True on real spans"),
          ("answer_mask", "bool (batch, k, spans): True on the spans matching y (here at least "
                          "one per document, each a real span)")),
         "float64 (batch, k): log p(y | z, x), the spans matching y against every span of z",
         ("reader_scores",),
         _span_answer_cases,
         reference.eq78_realm_span,
         "minitorch_nlp.retrieval.realm:span_answer_log_probs",
         "A document without the answer has p(y | z, x) = 0: -inf there, with a zero gradient."),
    Spec(79, "span_start_vectors", _SPAN_ARGS,
         "float64 (rows, spans, H): h_START(S) = BERT_START(S)(join_BERT(x, z_body))",
         ("hidden",),
         _span_vector_cases,
         reference.eq67_span_start,
         "minitorch_nlp.testing.equation_specs.retrieval:span_start_vectors",
         "REALM's reader (Guu et al. 2020, section 3.4) is ORQA's (eq 67): "
         + _SPAN_NOTE.format("first token")),
    Spec(80, "span_end_vectors", _SPAN_ARGS,
         "float64 (rows, spans, H): h_END(S) = BERT_END(S)(join_BERT(x, z_body))",
         ("hidden",),
         _span_vector_cases,
         reference.eq68_span_end,
         "minitorch_nlp.testing.equation_specs.retrieval:span_end_vectors",
         "REALM's reader is ORQA's (eq 68): " + _SPAN_NOTE.format("last token")),
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
