"""Specs of GPT-1's equations: the language-modelling objective (eq 18), the stack of blocks
(eq 19), the input embedding h_0 (eq 20), the tied output distribution (eq 21) and the
fine-tuning classifier and objectives (eq 22-24).

Eq 19-22 are computed inside modules (``GPTModel``, ``SequenceSummary``); their specs take the
weights as arguments, and the library's side is the module run with them
(``nn.replaced_tensors``)."""
from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from minitorch_nlp import functional as F
from minitorch_nlp import nn
import minitorch_nlp as mt
from minitorch_nlp.models.gpt import GPTConfig, GPTModel, SequenceSummary

from .. import strategies as S

from ..reference import gpt as reference
from ..spec import Spec
from .seq2seq import logits_and_ids


def _causal_lm_reference(logits, labels):
    """The mean of -log P over the counted predictions: eq 18 (negated, averaged) per sequence."""
    total, count = 0.0, 0
    for b in range(logits.shape[0]):
        counted = labels[b] != -100
        total = total + reference.eq18_lm_objective_of_logits(
            logits[b], np.where(counted, labels[b], 0), counted)
        count += int(counted[1:].sum())
    return -total / count if count else 0.0 * anp.sum(logits)


def _gpt(vocab_size, n_positions, n_embd, n_head=1):
    """A GPT-1 (post-LN) ``GPTModel`` with one block and no dropout."""
    return GPTModel(GPTConfig(vocab_size=vocab_size, n_positions=n_positions, n_embd=n_embd,
                              n_layer=1, n_head=n_head, resid_pdrop=0.0, embd_pdrop=0.0,
                              attn_pdrop=0.0, variant="gpt1"))


# The reference's names of one block's weights -> the library's (GPTModel.blocks.layers.0).
_BLOCK = {"q_w": "self_attn.q_proj.weight", "q_b": "self_attn.q_proj.bias",
          "k_w": "self_attn.k_proj.weight", "k_b": "self_attn.k_proj.bias",
          "v_w": "self_attn.v_proj.weight", "v_b": "self_attn.v_proj.bias",
          "o_w": "self_attn.out_proj.weight", "o_b": "self_attn.out_proj.bias",
          "ln1_g": "norm1.weight", "ln1_b": "norm1.bias", "ln2_g": "norm2.weight",
          "ln2_b": "norm2.bias", "fc_w": "feed_forward.linear1.weight",
          "fc_b": "feed_forward.linear1.bias", "proj_w": "feed_forward.linear2.weight",
          "proj_b": "feed_forward.linear2.bias"}


def transformer_blocks(h0, *, params, n_head):
    """h_l = transformer_block(h_{l-1}) (eq 19) for GPT-1's post-LN blocks: masked multi-head
    self-attention then the GELU (tanh form) feed-forward, each added to its input and
    layer-normalised (eps 1e-5). ``h0`` (batch, T, d); ``params["layers"]`` a list of dicts of
    float64 arrays, one per block (``q_w`` (d, d), ``q_b`` (d,), likewise ``k``, ``v``, ``o``;
    ``ln1_g``, ``ln1_b``, ``ln2_g``, ``ln2_b`` (d,); ``fc_w`` (d_ff, d), ``fc_b`` (d_ff,),
    ``proj_w`` (d, d_ff), ``proj_b`` (d,)). Returns h_n (batch, T, d).

    The library's ``GPTModel`` blocks compute it with these weights."""
    layers = params["layers"]
    d = h0.shape[-1]
    config = GPTConfig(vocab_size=1, n_positions=h0.shape[1], n_embd=d, n_layer=len(layers),
                       n_head=n_head, n_inner=layers[0]["fc_w"].shape[0], resid_pdrop=0.0,
                       embd_pdrop=0.0, attn_pdrop=0.0, variant="gpt1")
    blocks = GPTModel(config).blocks
    weights = {f"layers.{i}.{_BLOCK[name]}": mt.tensor(array, dtype=h0.dtype)
               for i, layer in enumerate(layers) for name, array in layer.items()}
    with nn.replaced_tensors(blocks, weights):
        return blocks(h0).last_hidden_state


def label_distribution(h, W_y, b_y):
    """P(y | x^1 .. x^m) = softmax(h_l^m W_y + b_y) (eq 22) for the extract tokens' states
    ``h`` (batch, n_embd): (batch, num_labels). ``W_y`` is (num_labels, n_embd), as a Linear
    layer stores it.

    The library's classifier head (``SequenceSummary``, whose output ``GPTForFineTuning``
    feeds to its softmax) computes the scores with these W_y, b_y."""
    head = SequenceSummary(W_y.shape[1], W_y.shape[0], dropout=0.0)
    scores = nn.functional_call(head, {"summary.weight": W_y, "summary.bias": b_y}, h)
    return F.softmax(scores, axis=-1)


def input_embedding(W_e, W_p, *, ids, position_ids):
    """h_0 = U W_e + W_p (eq 20): the token embeddings of ``ids`` (batch, T) plus the position
    embeddings of positions 0 .. T-1, or of ``position_ids`` (batch, T) when given (left
    padding): (batch, T, n_embd).

    The library's ``GPTModel`` computes it (its ``hidden_states[0]``) with these W_e, W_p."""
    model = _gpt(W_e.shape[0], W_p.shape[0], W_e.shape[1])
    with nn.replaced_tensors(model, {"wte.weight": W_e, "wpe.table": W_p}):
        return model(ids, position_ids=position_ids, output_hidden_states=True).hidden_states[0]


def tied_output_distribution(h, W_e):
    """P(u) = softmax(h_n W_e^T) (eq 21) for the final states ``h`` (batch, T, n_embd): the
    output layer is the token embedding matrix W_e (vocab, n_embd); (batch, T, vocab).

    The library's ``GPTModel.lm_logits`` computes the logits with this W_e."""
    model = _gpt(W_e.shape[0], 1, W_e.shape[1])
    with nn.replaced_tensors(model, {"wte.weight": W_e}):
        return F.softmax(model.lm_logits(h), axis=-1)


@st.composite
def _embedding_cases(draw):
    batch, time, vocab, dim = (draw(st.integers(1, 4)) for _ in range(4))
    positions = time + draw(st.integers(0, 2))
    ids = draw(S.arrays((batch, time), 0, vocab - 1).map(lambda a: np.rint(a).astype(np.int64)))
    position_ids = draw(st.none() | hnp.arrays(np.int64, (batch, time),
                                               elements=st.integers(0, positions - 1)))
    return {"W_e": draw(S.arrays((vocab, dim))), "W_p": draw(S.arrays((positions, dim))),
            "ids": ids, "position_ids": position_ids}


@st.composite
def _block_cases(draw):
    batch, n_head, d_k, d_ff, depth = (draw(st.integers(1, 2)) for _ in range(5))
    time = draw(st.integers(1, 4))     # the causal mask matters from two positions on
    d = n_head * d_k
    shapes = {"q_w": (d, d), "k_w": (d, d), "v_w": (d, d), "o_w": (d, d), "fc_w": (d_ff, d),
              "proj_w": (d, d_ff), "q_b": (d,), "k_b": (d,), "v_b": (d,), "o_b": (d,),
              "fc_b": (d_ff,), "proj_b": (d,), "ln1_b": (d,), "ln2_b": (d,)}
    layers = []
    for _ in range(depth):
        layer = {name: draw(S.arrays(shape)) for name, shape in shapes.items()}
        layer.update({name: draw(S.arrays((d,), 0.5, 1.5)) for name in ("ln1_g", "ln2_g")})
        layers.append(layer)
    return {"h0": draw(S.arrays((batch, time, d))), "params": {"layers": layers},
            "n_head": n_head}


@st.composite
def _classifier_cases(draw):
    batch, labels, dim = draw(st.integers(1, 3)), draw(st.integers(2, 4)), draw(st.integers(1, 4))
    return {"h": draw(S.arrays((batch, dim))), "W_y": draw(S.arrays((labels, dim))),
            "b_y": draw(S.stress_arrays((labels,)))}   # biases of ±1e4: logits that overflow exp


@st.composite
def _task_cases(draw):
    batch, labels = draw(st.integers(1, 4)), draw(st.integers(2, 4))
    ids = draw(S.arrays((batch,), 0, labels - 1).map(lambda a: np.rint(a).astype(np.int64)))
    return {"logits": draw(S.stress_arrays((batch, labels))), "labels": ids}


@st.composite
def _objective_cases(draw):
    return {"task_loss": draw(S.stress_arrays(())), "lm_loss": draw(S.stress_arrays(())),
            "lm_coef": draw(st.sampled_from([0.0, 0.5, 1.0, 2.5]) | st.floats(0.0, 4.0))}


@st.composite
def _output_cases(draw):
    batch, time, vocab, dim = (draw(st.integers(1, 4)) for _ in range(4))
    # states of up to 100: logits of about ±1e3 that overflow exp without the max subtraction
    return {"h": draw(S.stress_arrays((batch, time, dim), kinds=("large", "tiny"), large=100.0)),
            "W_e": draw(S.arrays((vocab, dim)))}


SPECS = (
    Spec(18, "causal_lm_loss",
         (("logits", "float64 (batch, T, V): position t predicts token t + 1"),
          ("labels", "int64 (batch, T), the token ids; -100 marks positions not predicted")),
         "float64 (): -L_1 / (number of predictions), labels shifted inside (position t is "
         "scored on labels[:, t + 1])",
         ("logits",),
         lambda: logits_and_ids("labels", -1, target_shift=1).map(
             lambda case: {**case, "labels": np.where(case["labels"] < 0, -100,
                                                      case["labels"])}),
         _causal_lm_reference,
         "minitorch_nlp.models.gpt:causal_lm_loss"),
    Spec(20, "input_embedding",
         (("W_e", "float64 (vocab, n_embd), the token embedding matrix"),
          ("W_p", "float64 (n_positions, n_embd), the position embedding matrix"),
          ("ids", "int64 (batch, T), the context tokens U, T <= n_positions"),
          ("position_ids", "None (positions 0 .. T-1) or int64 (batch, T), each token's "
                           "position")),
         "float64 (batch, T, n_embd): h_0 = U W_e + W_p (the rows of the positions)",
         ("W_e", "W_p"),
         _embedding_cases,
         lambda W_e, W_p, ids, position_ids: anp.stack([
             reference.eq20_input_embedding(row, W_e, W_p,
                                            None if position_ids is None else position_ids[i])
             for i, row in enumerate(ids)]),
         "minitorch_nlp.testing.equation_specs.gpt:input_embedding",
         "The library's side is GPTModel's embedding (its hidden_states[0]) with these weights."),
    Spec(21, "tied_output_distribution",
         (("h", "float64 (batch, T, n_embd), the last block's states h_n"),
          ("W_e", "float64 (vocab, n_embd), the token embedding matrix")),
         "float64 (batch, T, vocab): P(u) = softmax(h_n W_e^T) over the vocabulary",
         ("h", "W_e"),
         _output_cases,
         lambda h, W_e: anp.stack([reference.eq21_output_distribution(row, W_e) for row in h]),
         "minitorch_nlp.testing.equation_specs.gpt:tied_output_distribution",
         "The library's side is GPTModel.lm_logits (the tied output layer) and a softmax."),
    Spec(19, "transformer_blocks",
         (("h0", "float64 (batch, T, d), the input embeddings h_0"),
          ("params", "{'layers': [dict of float64 arrays per block]}: q_w, k_w, v_w, o_w (d, d) "
                     "and their biases q_b ... (d,); ln1_g, ln1_b, ln2_g, ln2_b (d,); fc_w "
                     "(d_ff, d), fc_b (d_ff,); proj_w (d, d_ff), proj_b (d,)"),
          ("n_head", "int, the number of heads (d divisible by it)")),
         "float64 (batch, T, d): h_n after GPT-1's post-LN blocks (causal self-attention, "
         "tanh-GELU feed-forward, residuals, LayerNorm eps 1e-5)",
         ("h0",),
         _block_cases,
         lambda h0, params, n_head: anp.stack([
             reference.eq19_transformer_blocks(row, params, n_head) for row in h0]),
         "minitorch_nlp.testing.equation_specs.gpt:transformer_blocks",
         "The survey's eq 19 writes the index as 'for all i in [1, n]'; it is the block index l. "
         "The weights are given (not differentiated here): eq 12's spec checks attention's "
         "gradients. The library's side is GPTModel's blocks with these weights."),
    Spec(22, "label_distribution",
         (("h", "float64 (batch, n_embd), the extract token's final state h_l^m"),
          ("W_y", "float64 (num_labels, n_embd)"), ("b_y", "float64 (num_labels,)")),
         "float64 (batch, num_labels): softmax(h W_y^T + b_y)",
         ("h", "W_y", "b_y"),
         _classifier_cases,
         lambda h, W_y, b_y: reference.eq22_label_distribution(h, W_y, b_y),
         "minitorch_nlp.testing.equation_specs.gpt:label_distribution",
         "Radford et al. write softmax(h W_y); OpenAI's code (and the library) add a bias."),
    Spec(23, "task_objective",
         (("logits", "float64 (batch, labels), the task scores (eq 22 before its softmax)"),
          ("labels", "int64 (batch,), the correct labels")),
         "float64 (): -L_2 / batch, L_2 = sum over the examples of log P(y | x)",
         ("logits",),
         _task_cases,
         lambda logits, labels: -sum(
             reference.eq23_task_objective_of_logits(row, label)
             for row, label in zip(logits, labels)) / len(labels),
         "minitorch_nlp.models.gpt:task_objective",
         "The loss is L_2 negated and averaged over the batch, as it is minimised."),
    Spec(24, "auxiliary_objective",
         (("task_loss", "float64 (), -L_2 (a mean)"), ("lm_loss", "float64 (), -L_1 (a mean)"),
          ("lm_coef", "float, lambda (the paper's 0.5)")),
         "float64 (): -L_3 = -L_2 + lambda (-L_1)",
         ("task_loss", "lm_loss"),
         _objective_cases,
         lambda task_loss, lm_loss, lm_coef: reference.eq24_auxiliary_objective(
             task_loss, lm_loss, lm_coef),
         "minitorch_nlp.models.gpt:auxiliary_objective"),
)
