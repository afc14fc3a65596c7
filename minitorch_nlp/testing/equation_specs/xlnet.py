"""Specs of XLNet (the survey's section IV-D): the permutation objective over the targets of a
factorisation order (eq 26), the masks and targets that encode the order (eq 27), the
next-token softmax (eq 28) and the target-aware query stream g(x_{z_<t}, z_t) (eq 29).

Eq 26, 28 and 29 are computed by modules (``XLNetLMHeadModel``, ``XLNetModel``); their specs
take the weights as arguments, and the library's side is the module run with them
(``nn.replaced_tensors``). A layer's weights are a dict in the reference's names
(``transformer_xl.LAYER_WEIGHTS``: XLNet's layers name them as Transformer-XL's do), in
``Linear``'s (out, in) layout."""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from hypothesis import strategies as st

from minitorch_nlp import functional as F
from minitorch_nlp import nn
from minitorch_nlp.models.xlnet import (XLNetConfig, XLNetLMHeadModel, XLNetModel,
                                        permutation_inputs, permutation_lm_loss)

from .. import strategies as S
from ..reference import xlnet as reference
from ..spec import Spec
from .transformer_xl import stack_tensors

_LAYERS = ("a list with one dict of float64 arrays per layer: q, k, v: (heads d_k, d_model), "
           "W_q, W_k, W_v; o: (d_model, heads d_k), W_o; r: (heads d_k, d_model), W_R; u, "
           "v_bias: (heads, d_k); ln1, ln2: (gain, bias) pairs of (d_model,) arrays; w1: "
           "(d_inner, d_model), b1: (d_inner,), w2: (d_model, d_inner), b2: (d_model,)")
_ORDER_ARGS = (("ids", "int64 (batch, T), the tokens x"),
               ("orders", "int64 (batch, T), each row a permutation z of range(T)"),
               ("num_predict", "int in [1, T]: the last num_predict steps of each order are "
                               "predicted (partial prediction)"),
               ("layers", _LAYERS), ("n_head", "int, the number of heads"))


def _config(vocab_size, d_model, layers, n_head):
    return XLNetConfig.tiny(vocab_size=vocab_size, d_model=d_model, n_layer=len(layers),
                            n_head=n_head, d_head=layers[0]["u"].shape[1],
                            d_inner=layers[0]["w1"].shape[0])


def permutation_objective(embedding, mask_emb, lm_bias, *, ids, orders, num_predict, layers,
                          n_head):
    """-1/(batch num_predict) sum_b sum_{t > T - num_predict} log p(x_{z_t} | x_{z_<t}) (eq 26
    for the given orders z): an XLNet whose word embeddings ``embedding`` (vocab, d_model) are
    tied to the softmax (bias ``lm_bias`` (vocab,)), with the query stream started from
    ``mask_emb`` (1, 1, d_model), two-stream relative attention, GELU feed-forward, post-LN
    (eps 1e-12). Returns a float64 scalar.

    The library's ``permutation_lm_loss`` computes it with an ``XLNetLMHeadModel`` of these
    weights."""
    model = XLNetLMHeadModel(_config(*embedding.shape, layers, n_head))
    weights = {"transformer.word_embedding.weight": embedding, "transformer.mask_emb": mask_emb,
               "lm_bias": lm_bias, **stack_tensors(layers, embedding.dtype, "transformer.")}
    with nn.replaced_tensors(model, weights):
        return permutation_lm_loss(model, ids, num_predict, orders=orders).loss


def query_stream(embedding, mask_emb, *, ids, orders, num_predict, layers, n_head):
    """g(x_{z_<t}, z_t) (eq 29) at every predicted step of the given orders: the last layer's
    query stream, which sees the content of the tokens before z_t in the order and the position
    z_t but not x_{z_t}, started from ``mask_emb`` (1, 1, d_model) over word embeddings
    ``embedding`` (vocab, d_model). Returns (batch, num_predict, d_model), row n for the target
    z_{T - num_predict + n}.

    The library's ``XLNetModel`` (with ``perm_mask`` and ``target_mapping`` from
    ``permutation_inputs``) computes it with these weights."""
    model = XLNetModel(_config(*embedding.shape, layers, n_head))
    weights = {"word_embedding.weight": embedding, "mask_emb": mask_emb,
               **stack_tensors(layers, embedding.dtype)}
    perm_mask, target_mapping, _ = permutation_inputs(orders, num_predict)
    with nn.replaced_tensors(model, weights):
        return model(ids, perm_mask=perm_mask, target_mapping=target_mapping).last_hidden_state


def next_token_distribution(h, embedding, lm_bias):
    """p(X_t = x | h) = softmax_x(e(x)^T h + b_x) (eq 28, and eq 29 with g in place of h) for
    states ``h`` (batch, n, d_model), the output layer tied to the word embeddings ``embedding``
    (vocab, d_model) with bias ``lm_bias`` (vocab,). Returns (batch, n, vocab).

    The library's ``XLNetLMHeadModel.lm_logits`` computes the scores with these weights."""
    config = XLNetConfig.tiny(vocab_size=embedding.shape[0], d_model=embedding.shape[1],
                              n_layer=1, n_head=1, d_inner=1)
    model = XLNetLMHeadModel(config)
    with nn.replaced_tensors(model, {"transformer.word_embedding.weight": embedding,
                                     "lm_bias": lm_bias}):
        return F.softmax(model.lm_logits(h), axis=-1)


# ---- inputs --------------------------------------------------------------------------------------
@st.composite
def _orders(draw, max_time=3):
    time, batch = draw(st.integers(1, max_time)), draw(st.integers(1, 2))
    orders = np.stack([draw(st.permutations(range(time))) for _ in range(batch)])
    return orders.astype(np.int64), draw(st.integers(1, time))


@st.composite
def _model_cases(draw, max_depth=1):
    (orders, num_predict), vocab = draw(_orders()), draw(st.integers(2, 3))
    n_head, d_head, d_inner = (draw(st.integers(1, 2)) for _ in range(3))
    d_model = 2 * draw(st.integers(1, 2))            # even: the sinusoids' sines and cosines
    width = n_head * d_head
    shapes = {"q": (width, d_model), "k": (width, d_model), "v": (width, d_model),
              "o": (d_model, width), "r": (width, d_model), "u": (n_head, d_head),
              "v_bias": (n_head, d_head), "w1": (d_inner, d_model), "b1": (d_inner,),
              "w2": (d_model, d_inner), "b2": (d_model,)}
    rng = np.random.default_rng(draw(S.seeds()))     # the weights: many arrays, drawn fast
    layers = []
    for _ in range(draw(st.integers(1, max_depth))):
        layer = {name: rng.uniform(-1.0, 1.0, shape) for name, shape in shapes.items()}
        layer.update({norm: (rng.uniform(0.5, 1.5, d_model), rng.uniform(-1.0, 1.0, d_model))
                      for norm in ("ln1", "ln2")})
        layers.append(layer)
    ids = draw(S.arrays(orders.shape, 0, vocab - 1).map(lambda a: np.rint(a).astype(np.int64)))
    # distinct values: no LayerNorm input is constant, where eps = 1e-12 would magnify rounding
    return {"embedding": draw(S.distinct_arrays((vocab, d_model))),
            "mask_emb": draw(S.distinct_arrays((1, 1, d_model), offset=0.05)),
            "lm_bias": draw(S.stress_arrays((vocab,))),     # ±1e4: logits that overflow exp
            "ids": ids, "orders": orders, "num_predict": num_predict, "layers": layers,
            "n_head": n_head}


@st.composite
def _order_cases(draw):
    orders, num_predict = draw(_orders(max_time=5))
    return {"orders": orders, "num_predict": num_predict}


@st.composite
def _softmax_cases(draw):
    batch, time, vocab, d_model = (draw(st.integers(1, 3)) for _ in range(4))
    return {"h": draw(S.arrays((batch, time, d_model))),
            "embedding": draw(S.arrays((vocab, d_model))),
            "lm_bias": draw(S.stress_arrays((vocab,)))}    # ±1e4: logits that overflow exp


# ---- references ----------------------------------------------------------------------------------
def _per_sequence(embedding, mask_emb, lm_bias, ids, orders, num_predict, layers, n_head,
                  function):
    """``function``'s result for each sequence, from the masks of its order."""
    config = _config(*embedding.shape, layers, n_head)
    params = {"embedding": embedding, "mask_emb": mask_emb, "lm_bias": lm_bias, "layers": layers}
    results = []
    for row, order in zip(ids, orders):
        query, content = reference.permutation_masks(order, num_predict)
        targets = order[len(order) - num_predict:]
        result, _ = function(row, targets, params, config, query, content)
        results.append((result, row, targets))
    return results


def _objective_reference(embedding, mask_emb, lm_bias, ids, orders, num_predict, layers,
                         n_head):
    total = 0.0
    for log_probs, row, targets in _per_sequence(embedding, mask_emb, lm_bias, ids, orders,
                                                 num_predict, layers, n_head,
                                                 reference.eq26_target_log_probs):
        total = total - sum(log_probs[n, row[t]] for n, t in enumerate(targets))
    return total / (len(ids) * num_predict)


def _query_stream_reference(embedding, mask_emb, ids, orders, num_predict, layers, n_head):
    return anp.stack([g for g, _, _ in _per_sequence(
        embedding, mask_emb, None, ids, orders, num_predict, layers, n_head,
        reference.eq29_query_stream)])


def _order_reference(orders, num_predict):
    """(perm_mask, target_mapping, targets) from the masks of each order by definition."""
    time = orders.shape[1]
    hidden = np.stack([~reference.permutation_masks(order, num_predict)[0] for order in orders])
    targets = orders[:, time - num_predict:]
    return hidden.astype(np.float32), np.eye(time, dtype=np.float32)[targets], targets


SPECS = (
    Spec(26, "permutation_objective",
         (("embedding", "float64 (vocab, d_model), d_model even: word embeddings tied to the "
                        "softmax"),
          ("mask_emb", "float64 (1, 1, d_model), w: the query stream's first input"),
          ("lm_bias", "float64 (vocab,), the softmax's bias")) + _ORDER_ARGS,
         "float64 (): the mean over sequences and predicted steps of -log p(x_{z_t} | x_{z_<t})",
         ("embedding", "mask_emb", "lm_bias"),
         _model_cases,
         _objective_reference,
         "minitorch_nlp.testing.equation_specs.xlnet:permutation_objective",
         "Yang et al. (2019, eq 3 and section 2.3): one order per sequence is the Monte-Carlo "
         "estimate of eq 27's expectation. The layers' weights are given (not differentiated "
         "here). The library's side is permutation_lm_loss on an XLNetLMHeadModel with these "
         "weights."),
    Spec(27, "permutation_inputs",
         (("orders", "int64 (batch, T), each row a permutation z of range(T)"),
          ("num_predict", "int in [1, T], how many of the last steps of each order are "
                          "predicted")),
         "(perm_mask float32 (batch, T, T), 1 where query i may not see key j in the query "
         "stream; target_mapping float32 (batch, num_predict, T), one-hot rows at the targets; "
         "targets int64 (batch, num_predict), the positions z_t predicted, in order)",
         (),
         _order_cases,
         _order_reference,
         "minitorch_nlp.models.xlnet:permutation_inputs",
         "Values only: the order z is discrete, so eq 27's expectation is checked through what "
         "encodes one order, its masks and targets (a target sees the context and the targets "
         "before it in z; context positions see the context only)."),
    Spec(28, "next_token_distribution",
         (("h", "float64 (batch, n, d_model), the states h_theta(x_{z_<t})"),
          ("embedding", "float64 (vocab, d_model), the word embeddings e(x)"),
          ("lm_bias", "float64 (vocab,), the softmax's bias")),
         "float64 (batch, n, vocab): softmax over x of e(x)^T h + b_x",
         ("h", "embedding", "lm_bias"),
         _softmax_cases,
         lambda h, embedding, lm_bias: anp.stack([anp.stack([
             reference.eq28_next_token_distribution(row, embedding, lm_bias) for row in rows])
             for rows in h]),
         "minitorch_nlp.testing.equation_specs.xlnet:next_token_distribution",
         "The survey writes the softmax without the bias; XLNet's output layer (and "
         "HuggingFace's lm_loss) has one. The library's side is XLNetLMHeadModel.lm_logits."),
    Spec(29, "query_stream",
         (("embedding", "float64 (vocab, d_model), d_model even: the word embeddings"),
          ("mask_emb", "float64 (1, 1, d_model), w: the query stream's first input"))
         + _ORDER_ARGS,
         "float64 (batch, num_predict, d_model): the last layer's query stream g at each target",
         ("embedding", "mask_emb"),
         lambda: _model_cases(max_depth=2).map(
             lambda case: {key: value for key, value in case.items() if key != "lm_bias"}),
         _query_stream_reference,
         "minitorch_nlp.testing.equation_specs.xlnet:query_stream",
         "Two-stream self-attention (Yang et al. section 2.3): g_{z_t} attends to the content "
         "of x_{z_<t}, never to x_{z_t}. The layers' weights are given (not differentiated "
         "here). The library's side is XLNetModel with these weights."),
)
