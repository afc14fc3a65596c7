"""Specs of Transformer-XL (the survey's section VIII-B): the language model's joint over a
segment with a memory (eq 86), the extended context (eq 87), the attention over it (eq 88), the
layer (eq 89) and the relative-position attention (eq 91).

Eq 86, 88, 89 and 91 are computed by modules (``TransfoXLLMHeadModel``, ``TransformerXLLayer``,
``RelativePositionAttention``); their specs take the weights as arguments, and the library's
side is the module run with them (``nn.replaced_tensors``). A layer's weights are a dict in the
reference's names (``LAYER_WEIGHTS``), in ``Linear``'s (out, in) layout."""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from autograd.tracer import getval
from hypothesis import strategies as st

import minitorch_nlp as mt
from minitorch_nlp import nn
from minitorch_nlp.models.transformer_xl import (RelativePositionAttention, TransfoXLConfig,
                                                 TransfoXLLMHeadModel, TransformerXLLayer,
                                                 extended_context, relative_position_encoding)

from .. import strategies as S
from ..reference import transformer_xl as reference
from ..spec import Spec

# The reference's names of one layer's weights -> TransformerXLLayer's and XLNetLayer's
# (LayerNorms: (gain, bias)).
LAYER_WEIGHTS = {"q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight",
          "v": "self_attn.v_proj.weight", "o": "self_attn.out_proj.weight",
          "r": "self_attn.core.position_proj.weight", "u": "self_attn.core.content_bias",
          "v_bias": "self_attn.core.position_bias", "ln1": ("norm1.weight", "norm1.bias"),
          "ln2": ("norm2.weight", "norm2.bias"), "w1": "feed_forward.linear1.weight",
          "b1": "feed_forward.linear1.bias", "w2": "feed_forward.linear2.weight",
          "b2": "feed_forward.linear2.bias"}
_ATTENTION = ("q", "k", "v", "o", "r", "u", "v_bias")
_ATTENTION_PARAMS = ("q, k, v: (heads d_k, d_model), W_q, W_k, W_v; o: (d_model, heads d_k), "
                     "W_o; r: (heads d_k, d_model), W_R; u, v_bias: (heads, d_k)")
_LAYER_PARAMS = (_ATTENTION_PARAMS + "; ln1, ln2: (gain, bias) pairs of (d_model,) arrays; w1: "
                 "(d_inner, d_model), b1: (d_inner,), w2: (d_model, d_inner), b2: (d_model,)")


def layer_tensors(params, dtype, prefix=""):
    """The library's names -> tensors of a layer's ``params`` (the reference's names)."""
    weights = {}
    for name, array in params.items():
        target = LAYER_WEIGHTS[name]
        pairs = zip(target, array) if isinstance(target, tuple) else [(target, array)]
        weights.update({prefix + key: mt.tensor(value, dtype=dtype) for key, value in pairs})
    return weights


def stack_tensors(layers, dtype, prefix=""):
    """``layer_tensors`` of every layer of a stack, named ``{prefix}layers.{i}.``."""
    weights = {}
    for i, layer in enumerate(layers):
        weights.update(layer_tensors(layer, dtype, f"{prefix}layers.{i}."))
    return weights


def _layer(params, n_head, pre_ln=False):
    """A TransformerXLLayer of the shapes of ``params``."""
    d_model, d_head = params["q"].shape[1], params["u"].shape[1]
    d_inner = params["w1"].shape[0] if "w1" in params else 1
    return TransformerXLLayer(d_model, n_head, d_head, d_inner, pre_lnorm=pre_ln)


def _positions(k_time, d_model, dtype, clamp_len=0):
    return relative_position_encoding(k_time, d_model, clamp_len, dtype)


def extended_attention(h, memory, *, params, n_head):
    """Concat_heads(RelAttn(q, k, v)) W_o^T (eq 88) with q = h W_q^T from the segment ``h``
    (batch, n, d_model) and k = h~ W_k^T, v = h~ W_v^T from the extended context h~ = [SG(memory)
    o h] (eq 87), ``memory`` (batch, m, d_model); causal relative attention (eq 91), query i at
    position m + i. ``params``: q, k, v (heads d_k, d_model), o (d_model, heads d_k), r W_R
    (heads d_k, d_model), u, v_bias (heads, d_k). Returns (batch, n, d_model).

    The library's ``TransformerXLLayer.self_attn`` computes it with these weights."""
    attention = _layer(params, n_head).self_attn
    weights = {key.removeprefix("self_attn."): value
               for key, value in layer_tensors(params, h.dtype).items()}
    context = extended_context(memory, h)
    with nn.replaced_tensors(attention, weights):
        return attention(h, key=context, causal=True,
                         relative_positions=_positions(context.shape[1], h.shape[-1], h.dtype))


def transformer_xl_layer(h, memory, *, params, n_head, pre_ln):
    """One Transformer-XL layer (eq 87-89) over the segment ``h`` (batch, n, d_model) and the
    previous segment's ``memory`` (batch, m, d_model): relative attention from h over [SG(memory)
    o h], then the ReLU feed-forward network, each in a residual connection with LayerNorm after
    it (``pre_ln``: before it), eps 1e-5. ``params`` as ``extended_attention``'s plus ln1, ln2
    ((gain, bias), each (d_model,)), w1 (d_inner, d_model), b1 (d_inner,), w2 (d_model, d_inner),
    b2 (d_model,). Returns (batch, n, d_model); no gradient reaches ``memory``.

    The library's ``TransformerXLLayer`` computes it with these weights."""
    layer = _layer(params, n_head, pre_ln)
    positions = _positions(memory.shape[1] + h.shape[1], h.shape[-1], h.dtype)
    with nn.replaced_tensors(layer, layer_tensors(params, h.dtype)):
        return layer(h, memory, relative_positions=positions)


def relative_attention(q, k, v, W_R, u, v_bias, *, clamp_len):
    """softmax(A^rel / sqrt(d_k)) V (eq 91) for every (batch, head), with the four-term scores
    A^rel_ij = q_i . k_j + q_i . W_R R_{i-j} + u . k_j + v . W_R R_{i-j}: ``q`` (batch, heads,
    n, d_k) the segment's queries, ``k``, ``v`` (batch, heads, m + n, d_k) over memory and
    segment (query i sits at position m + i and sees keys 0 .. m + i), ``W_R`` (heads d_k,
    d_model) with d_model even, ``u``, ``v_bias`` (heads, d_k); R_d the sinusoid of distance d
    (sines then cosines), distances clamped to ``clamp_len`` when > 0. Returns (batch, heads, n,
    d_k).

    The library's ``RelativePositionAttention`` computes it with these W_R, u, v."""
    heads, d_k = u.shape
    core = RelativePositionAttention(W_R.shape[1], heads, d_k)
    positions = _positions(k.shape[2], W_R.shape[1], q.dtype, clamp_len)
    with nn.replaced_tensors(core, {"position_proj.weight": W_R, "content_bias": u,
                                    "position_bias": v_bias}):
        output, _ = core(q, k, v, causal=True, relative_positions=positions)
    return output


def _config(vocab_size, d_model, layers, n_head, pre_ln):
    return TransfoXLConfig.tiny(vocab_size=vocab_size, cutoffs=[], d_model=d_model,
                                d_embed=d_model, n_head=n_head, d_head=layers[0]["u"].shape[1],
                                d_inner=layers[0]["w1"].shape[0], div_val=1,
                                n_layer=len(layers), pre_lnorm=pre_ln)


def segment_log_likelihood(embedding, bias, *, ids, mems, layers, n_head, pre_ln):
    """log P(x_2 .. x_T | x_1, memory) = sum_t log P(x_{t+1} | x_<=t, memory) (eq 86) of each
    segment ``ids`` (batch, T), T >= 2, under a Transformer-XL language model: the embedding
    (vocab, d_model) scaled by sqrt(d_model) in, the layers of eq 87-89 over ``mems`` (one
    (batch, m, d_model) array per layer, or None), the softmax tied to the embedding with its
    ``bias`` (vocab,) out. ``layers``: one dict per layer as ``transformer_xl_layer``'s
    ``params``. Returns (batch,).

    The library's ``TransfoXLLMHeadModel`` (no clusters: one table, one softmax) computes it with
    these weights."""
    vocab_size, d_model = embedding.shape
    model = TransfoXLLMHeadModel(_config(vocab_size, d_model, layers, n_head, pre_ln))
    weights = {"transformer.word_emb.embeddings.0.weight": embedding, "crit.bias": bias,
               **stack_tensors(layers, embedding.dtype, "transformer.")}
    memory = None if mems is None else [mt.tensor(m, dtype=embedding.dtype) for m in mems]
    with nn.replaced_tensors(model, weights):
        log_probs = model(ids, mems=memory).logits
    following = np.eye(vocab_size)[ids[:, 1:]]                   # one-hot x_{t+1}
    return (log_probs[:, :-1] * mt.tensor(following, dtype=log_probs.dtype)).sum(axis=(1, 2))


# ---- inputs --------------------------------------------------------------------------------------
def _draw_params(draw, d_model, n_head, d_head, d_inner, names):
    """One layer's weights, from a drawn seed (many arrays: drawn fast)."""
    rng = np.random.default_rng(draw(S.seeds()))
    width = n_head * d_head
    shapes = {"q": (width, d_model), "k": (width, d_model), "v": (width, d_model),
              "o": (d_model, width), "r": (width, d_model), "u": (n_head, d_head),
              "v_bias": (n_head, d_head), "w1": (d_inner, d_model), "b1": (d_inner,),
              "w2": (d_model, d_inner), "b2": (d_model,)}
    params = {name: rng.uniform(-1.0, 1.0, shapes[name]) for name in names if name in shapes}
    for norm in ("ln1", "ln2"):
        if norm in names:
            params[norm] = (rng.uniform(0.5, 1.5, d_model), rng.uniform(-1.0, 1.0, d_model))
    return params


def _sizes(draw):
    """d_model (even: sines and cosines), heads, d_k, d_inner, batch, n, m; sometimes a long
    segment and memory (a position offset by the memory's length shows there)."""
    long = draw(st.integers(0, 3)) == 0
    return (2 * draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 2)),
            draw(st.integers(1, 3)), draw(st.integers(1, 2)),
            draw(st.integers(5, 7) if long else st.integers(1, 3)),
            draw(st.integers(3, 5) if long else st.integers(1, 2)))


@st.composite
def _context_cases(draw):
    batch, time, memory, d_model = (draw(st.integers(1, 3)) for _ in range(4))
    return {"memory": draw(S.arrays((batch, memory, d_model))),
            "h": draw(S.arrays((batch, time, d_model)))}


@st.composite
def _attention_cases(draw):
    d_model, heads, d_k, _, batch, time, memory = _sizes(draw)
    params = _draw_params(draw, d_model, heads, d_k, 1, _ATTENTION)
    params["q"] = params["q"] * draw(S.magnitudes((1.0, 1e-3, 30.0)))   # flat to saturated
    return {"h": draw(S.arrays((batch, time, d_model))),
            "memory": draw(S.arrays((batch, memory, d_model))),
            "params": params, "n_head": heads}


@st.composite
def _layer_cases(draw):
    d_model, heads, d_k, d_inner, batch, time, memory = _sizes(draw)
    return {"h": draw(S.arrays((batch, time, d_model))),
            "memory": draw(S.arrays((batch, memory, d_model))),
            "params": _draw_params(draw, d_model, heads, d_k, d_inner, tuple(LAYER_WEIGHTS)),
            "n_head": heads, "pre_ln": draw(st.booleans())}


@st.composite
def _core_cases(draw):
    d_model, heads, d_k, _, batch, time, memory = _sizes(draw)
    memory -= 1                                       # the core also runs without a memory
    scale = draw(S.magnitudes((1.0, 1e-3, 1e2)))      # scores from flat to +-1e4
    q = draw(S.arrays((batch, heads, time, d_k))) * scale
    k, v = (draw(S.arrays((batch, heads, memory + time, d_k))) for _ in range(2))
    return {"q": q, "k": k, "v": v, "W_R": draw(S.arrays((heads * d_k, d_model), -1.0, 1.0)),
            "u": draw(S.arrays((heads, d_k))) * scale, "v_bias": draw(S.arrays((heads, d_k))),
            "clamp_len": draw(st.sampled_from([0, 1, 2, memory + time + 1]))}


@st.composite
def _model_cases(draw):
    d_model, heads, d_k, d_inner, batch, _, memory = _sizes(draw)
    vocab, time, depth = draw(st.integers(2, 4)), draw(st.integers(2, 3)), draw(st.integers(1, 2))
    memory -= 1
    ids = draw(S.arrays((batch, time), 0, vocab - 1).map(lambda a: np.rint(a).astype(np.int64)))
    return {"embedding": draw(S.arrays((vocab, d_model), -1.0, 1.0)),
            "bias": draw(S.scaled_arrays((vocab,), scales=(1.0, 1e4))), "ids": ids,
            "mems": None if not memory else [draw(S.arrays((batch, memory, d_model)))
                                             for _ in range(depth)],
            "layers": [_draw_params(draw, d_model, heads, d_k, d_inner, tuple(LAYER_WEIGHTS))
                       for _ in range(depth)],
            "n_head": heads, "pre_ln": draw(st.booleans())}


# ---- references ----------------------------------------------------------------------------------
def _layer_reference(h, memory, params, n_head, pre_ln):
    d_head = params["u"].shape[1]
    return anp.stack([reference.eq89_layer(h[b], getval(memory[b]), params, n_head, d_head,
                                           pre_ln) for b in range(h.shape[0])])


def _attention_reference(h, memory, params, n_head):
    d_head, m = params["u"].shape[1], memory.shape[1]
    return anp.stack([reference.eq88_attention(
        h[b], reference.eq87_extended_context(memory[b], h[b]), params, n_head, d_head, m)
        for b in range(h.shape[0])])


def _core_reference(q, k, v, W_R, u, v_bias, clamp_len):
    heads, d_k = u.shape
    memory = k.shape[2] - q.shape[2]
    return anp.stack([anp.stack([
        reference.relative_attention(q[b, h], k[b, h], v[b, h], W_R[h * d_k:(h + 1) * d_k],
                                     u[h], v_bias[h], memory, clamp_len)
        for h in range(heads)]) for b in range(q.shape[0])])


def _model_reference(embedding, bias, ids, mems, layers, n_head, pre_ln):
    config = _config(*embedding.shape, layers, n_head, pre_ln)
    params = {"tables": [embedding], "emb_projs": {}, "own_projs": {}, "bias": bias,
              "layers": layers}
    rows = []
    for b, row in enumerate(ids):
        log_probs, _ = reference.eq86_log_probs(row, params, config,
                                                None if mems is None else [m[b] for m in mems])
        rows.append(sum(log_probs[t, row[t + 1]] for t in range(len(row) - 1)))
    return anp.stack(rows)


SPECS = (
    Spec(86, "segment_log_likelihood",
         (("embedding", "float64 (vocab, d_model), the token embeddings, tied to the softmax"),
          ("bias", "float64 (vocab,), the softmax's bias"),
          ("ids", "int64 (batch, T), T >= 2, the segment's tokens"),
          ("mems", "None or a list with one float64 (batch, m, d_model) memory per layer"),
          ("layers", "a list with one dict per layer: " + _LAYER_PARAMS),
          ("n_head", "int, the number of heads"),
          ("pre_ln", "bool, LayerNorm before each sub-layer instead of after it")),
         "float64 (batch,): sum_t log P(x_{t+1} | x_<=t, memory)",
         ("embedding", "bias"),
         _model_cases,
         _model_reference,
         "minitorch_nlp.testing.equation_specs.transformer_xl:segment_log_likelihood",
         "Dai et al. (2019): the input is the embedding times sqrt(d_model), as the paper's "
         "adaptive input (one cluster here). The layers' weights are given (not differentiated "
         "here): eq 89's spec checks the layer's gradients. The library's side is "
         "TransfoXLLMHeadModel with these weights."),
    Spec(87, "extended_context",
         (("memory", "float64 (batch, m, d_model), the previous segment's states"),
          ("h", "float64 (batch, n, d_model), the current segment's states")),
         "float64 (batch, m + n, d_model): [SG(memory) o h]; no gradient reaches memory",
         ("memory", "h"),
         _context_cases,
         lambda memory, h: anp.stack([reference.eq87_extended_context(memory[b], h[b])
                                      for b in range(h.shape[0])]),
         "minitorch_nlp.models.transformer_xl:extended_context",
         "SG is the stop-gradient: the memory's gradient must be zero (Tensor.detach)."),
    Spec(88, "extended_attention",
         (("h", "float64 (batch, n, d_model), the current segment"),
          ("memory", "float64 (batch, m, d_model), the previous segment's states"),
          ("params", "dict of float64 arrays: " + _ATTENTION_PARAMS),
          ("n_head", "int, the number of heads")),
         "float64 (batch, n, d_model): Concat_heads(RelAttn(h W_q^T, h~ W_k^T, h~ W_v^T)) W_o^T",
         ("h", "memory"),
         _attention_cases,
         _attention_reference,
         "minitorch_nlp.testing.equation_specs.transformer_xl:extended_attention",
         "The survey's eq 88 takes the queries from the extended context too; Dai et al. (and "
         "the library) take them from the segment only. The library's side is "
         "TransformerXLLayer's attention with these weights."),
    Spec(89, "transformer_xl_layer",
         (("h", "float64 (batch, n, d_model), the current segment"),
          ("memory", "float64 (batch, m, d_model), the previous segment's states"),
          ("params", "dict of float64 arrays: " + _LAYER_PARAMS),
          ("n_head", "int, the number of heads"),
          ("pre_ln", "bool, LayerNorm before each sub-layer instead of after it")),
         "float64 (batch, n, d_model): the layer's output",
         ("h", "memory"),
         _layer_cases,
         _layer_reference,
         "minitorch_nlp.testing.equation_specs.transformer_xl:transformer_xl_layer",
         "The gradient with respect to memory is zero (eq 87's stop-gradient). The weights are "
         "given, not differentiated here. The library's side is TransformerXLLayer."),
    Spec(91, "relative_attention",
         (("q", "float64 (batch, heads, n, d_k), the segment's queries"),
          ("k", "float64 (batch, heads, m + n, d_k), keys of memory and segment"),
          ("v", "float64 (batch, heads, m + n, d_k), values of memory and segment"),
          ("W_R", "float64 (heads d_k, d_model), d_model even: the position projection"),
          ("u", "float64 (heads, d_k), the global content bias"),
          ("v_bias", "float64 (heads, d_k), the global position bias"),
          ("clamp_len", "int >= 0, distances beyond it use R_clamp_len (0: never)")),
         "float64 (batch, heads, n, d_k): softmax(A^rel / sqrt(d_k)) V over the keys up to each "
         "query's position",
         ("q", "k", "v", "W_R", "u", "v_bias"),
         _core_cases,
         _core_reference,
         "minitorch_nlp.testing.equation_specs.transformer_xl:relative_attention",
         "Dai et al. (2019, section 3.3); the 1/sqrt(d_k) scale is the paper's code's. The "
         "library's side is RelativePositionAttention with these W_R, u, v."),
)
