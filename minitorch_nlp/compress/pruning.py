"""Pruning a trained Transformer (the survey's section VI-B): attention heads and whole layers.

Heads (Michel et al., 2019, "Are Sixteen Heads Really Better than One?", eq 53-55):

* the head mask xi_h of eq 53 is ``MultiHeadAttention``'s ``head_mask`` (``TransformerStack``
  and BERT take one row per layer): MH(x) = sum_h xi_h Att_h(x) W^O_h;
* ``head_importance`` scores each head by I_h = E_x |dL(x)/dxi_h| (eq 54), the mask injected into
  every layer's attention by forward pre-hooks; ``head_importance_from_outputs`` computes the same
  score from the heads' outputs, I_h = E_x |Att_h(x)^T dL(x)/dAtt_h(x)| (eq 55), captured by
  forward hooks on the attention cores;
* ``least_important_heads`` picks the heads to prune next (never the last head of a layer), and
  ``prune_heads`` removes them from the weights: q/k/v lose the heads' rows and the output
  projection their columns, so the model is smaller, not masked.

Layers:

* ``LayerDrop`` (Fan et al., 2020, "Reducing Transformer Depth on Demand with Structured
  Dropout"): while training, each layer is skipped with probability p; at inference
  ``layerdrop_layers_to_drop`` gives the paper's every-other-layer sub-network;
* ``poor_mans_layers_to_drop`` (Sajjad et al., 2020, "Poor Man's BERT"): the dropping strategies
  of the survey's figure 16 (top, bottom, even- and odd-alternate, symmetric, contribution-based,
  the last scored by ``layer_contributions``);
* ``drop_layers`` removes layers from a model (a shallower model, config updated).

Layer and head indices are 0-based here; the papers count layers from 1 (layer 1 at the bottom),
as the docstrings say where it matters.
"""
from __future__ import annotations

import contextlib

import numpy as np

from .. import checks, cookbook
from ..autograd import grad, tensor
from ..nn import Linear, MultiHeadAttention, Parameter, TransformerStack

__all__ = ["LayerDrop", "POOR_MANS_STRATEGIES", "attention_layers", "drop_layers",
           "head_importance", "head_importance_from_outputs", "layer_contributions",
           "layerdrop_layers_to_drop", "least_important_heads", "poor_mans_layers_to_drop",
           "prune_heads", "transformer_stack"]


def transformer_stack(model):
    """The one ``TransformerStack`` of ``model`` (or ``model`` itself if it is one); a model
    with none or several (an encoder-decoder) is an error asking for the stack itself."""
    if isinstance(model, TransformerStack):
        return model
    stacks = [m for m in model.modules() if isinstance(m, TransformerStack)]
    if len(stacks) != 1:
        raise ValueError(f"pruning: {type(model).__name__} has {len(stacks)} TransformerStacks; "
                         "pass the stack to prune (e.g. model.encoder) instead of the model")
    return stacks[0]


def attention_layers(model):
    """The self-attention (``MultiHeadAttention``) of every layer of ``model``'s stack."""
    attentions = [layer.self_attn for layer in transformer_stack(model).layers]
    for i, attention in enumerate(attentions):
        if not isinstance(attention, MultiHeadAttention):
            raise TypeError(f"pruning: layer {i}'s self_attn is a {type(attention).__name__}, "
                            "not a MultiHeadAttention")
    return attentions


def _mask_rows(head_mask, attentions, op):
    """``head_mask`` (layers, heads) as one float row per layer (ones when None)."""
    if head_mask is None:
        return [np.ones(a.num_heads) for a in attentions]
    rows = [np.asarray(row, dtype=np.float64) for row in head_mask]
    shapes = [row.shape for row in rows]
    if shapes != [(a.num_heads,) for a in attentions]:
        raise ValueError(f"{op}: head_mask must have one row per layer with that layer's number "
                         f"of heads {[a.num_heads for a in attentions]}, got rows of shapes "
                         f"{shapes}")
    return rows


@contextlib.contextmanager
def _head_masks(attentions, masks):
    """While open, each attention layer's forward gets ``head_mask=masks[i]`` (forward
    pre-hooks), whatever its caller passed."""
    def inject(mask):
        def hook(module, args, kwargs):
            return args, dict(kwargs, head_mask=mask)
        return hook

    handles = [attention.register_forward_pre_hook(inject(mask), with_kwargs=True)
               for attention, mask in zip(attentions, masks)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _output_recorder(outputs, i):
    """A forward hook that keeps the first output of the module it is on in ``outputs[i]``."""
    def hook(module, args, output):
        outputs[i] = output[0]
    return hook


def _like_parameters(values, attention, requires_grad=False):
    weight = attention.q_proj.weight
    return tensor(values, dtype=weight.dtype, backend=weight.backend,
                  requires_grad=requires_grad)


@cookbook.equation(54)
def head_importance(model, batches, loss_fn, head_mask=None):
    r"""Michel et al.'s head importance (eq 54), one score per head of every layer::

        I_h = E_{x ~ X} | dL(x) / d xi_h |

    the expectation taken over ``batches`` (each batch one draw x, as in Michel et al.'s code).
    ``loss_fn(model, batch)`` returns the scalar loss of a batch; it must not pass a head mask of
    its own: forward pre-hooks give every self-attention layer the mask xi = ``head_mask``
    (layers, heads) (ones when None: the gradient at the unpruned model; a head already masked
    with 0 scores 0). Returns a list with one array (heads,) per layer.
    """
    attentions = attention_layers(model)
    rows = _mask_rows(head_mask, attentions, "head_importance")
    total = [np.zeros(a.num_heads) for a in attentions]
    count = 0
    for batch in batches:
        xi = [_like_parameters(np.ones(a.num_heads), a, requires_grad=True) for a in attentions]
        masks = [x * _like_parameters(row, a) for x, row, a in zip(xi, rows, attentions)]
        with _head_masks(attentions, masks):
            loss = loss_fn(model, batch)
        for i, g in enumerate(grad(loss, xi, allow_unused=True)):
            if g is not None:
                total[i] += np.abs(g.numpy())
        count += 1
    if not count:
        raise ValueError("head_importance: batches is empty; give at least one batch")
    return [t / count for t in total]


@cookbook.equation(55)
def head_importance_from_outputs(model, batches, loss_fn, head_mask=None):
    r"""Head importance from the heads' outputs (Michel et al., eq 55)::

        I_h = E_{x ~ X} | Att_h(x)^T dL(x) / d Att_h(x) |

    Att_h(x) is head h's output (batch, time, d_k) before the output projection, captured by a
    forward hook on every layer's attention core; the product sums over all its entries. Since
    MH(x) = sum_h xi_h Att_h(x) W^O_h, dL/dxi_h = Att_h^T dL/d(xi_h Att_h): at xi = 1 this equals
    ``head_importance`` (eq 54). Arguments and result as there.
    """
    attentions = attention_layers(model)
    rows = _mask_rows(head_mask, attentions, "head_importance_from_outputs")
    total = [np.zeros(a.num_heads) for a in attentions]
    count = 0
    for batch in batches:
        outputs = [None] * len(attentions)
        handles = [a.core.register_forward_hook(_output_recorder(outputs, i))
                   for i, a in enumerate(attentions)]
        try:
            with _head_masks(attentions, [_like_parameters(row, a)
                                          for row, a in zip(rows, attentions)]):
                loss = loss_fn(model, batch)
        finally:
            for handle in handles:
                handle.remove()
        grads = grad(loss, outputs, allow_unused=True)
        for i, (z, g) in enumerate(zip(outputs, grads)):
            if g is not None:
                total[i] += np.abs(np.einsum("bhtd,bhtd->h", z.numpy(), g.numpy()))
        count += 1
    if not count:
        raise ValueError("head_importance_from_outputs: batches is empty; give at least one "
                         "batch")
    return [t / count for t in total]


def least_important_heads(importance, count, head_mask=None):
    """The ``count`` heads of lowest ``importance`` (one array per layer) among those not yet
    masked in ``head_mask``, as ``{layer: [heads]}``; the last remaining head of a layer is never
    chosen (a layer keeps at least one head; drop the layer with ``drop_layers`` instead).
    Michel et al. (section 4) prune this way, by global order of I_h, a few heads at a time."""
    rows = [np.ones(len(row)) if head_mask is None else np.asarray(head_mask[i], dtype=float)
            for i, row in enumerate(importance)]
    count = checks.int_at_least(count, 0, "count", "least_important_heads")
    candidates = sorted((float(score), layer, head)
                        for layer, row in enumerate(importance)
                        for head, score in enumerate(row) if rows[layer][head] != 0)
    remaining = [int(np.count_nonzero(row)) for row in rows]
    prunable = sum(max(r - 1, 0) for r in remaining)
    if count > prunable:
        raise ValueError(f"least_important_heads: only {prunable} heads can be pruned without "
                         f"emptying a layer, asked for {count}")
    chosen, taken = {}, 0
    for _, layer, head in candidates:
        if taken == count:
            break
        if remaining[layer] > 1:
            chosen.setdefault(layer, []).append(head)
            remaining[layer] -= 1
            taken += 1
    return {layer: sorted(heads) for layer, heads in sorted(chosen.items())}


def _sliced_linear(layer, rows=None, columns=None):
    """A new ``Linear`` holding ``layer``'s weight restricted to ``rows`` (outputs) and
    ``columns`` (inputs), and the bias restricted to ``rows``."""
    weight = layer.weight.numpy()
    weight = weight if rows is None else weight[rows]
    weight = weight if columns is None else weight[:, columns]
    out_features, in_features = weight.shape
    new = Linear(in_features, out_features, bias=layer.bias is not None)
    new.weight = Parameter(tensor(weight, dtype=layer.weight.dtype, backend=layer.weight.backend))
    new.choose_weight_layout_()
    if layer.bias is not None:
        bias = layer.bias.numpy()
        new.bias = Parameter(tensor(bias if rows is None else bias[rows],
                                    dtype=layer.bias.dtype, backend=layer.bias.backend))
    return new.train(layer.training)


def _remove_heads(attention, heads, layer):
    if attention.num_kv_heads != attention.num_heads:
        raise ValueError(f"prune_heads: layer {layer} shares key/value heads (num_kv_heads="
                         f"{attention.num_kv_heads} < num_heads={attention.num_heads}); only "
                         "attention with one key/value head per query head can be pruned")
    heads = sorted(set(heads))
    for head in heads:
        if isinstance(head, bool) or not isinstance(head, (int, np.integer)) \
                or not 0 <= head < attention.num_heads:
            raise ValueError(f"prune_heads: head {head!r} of layer {layer} is out of range "
                             f"[0, {attention.num_heads})")
    keep = [h for h in range(attention.num_heads) if h not in heads]
    if not keep:
        raise ValueError(f"prune_heads: pruning every head of layer {layer} "
                         f"({attention.num_heads}) is refused; keep at least one, or remove the "
                         "layer with drop_layers")
    d = attention.head_dim
    features = np.concatenate([np.arange(h * d, (h + 1) * d) for h in keep])
    attention.q_proj = _sliced_linear(attention.q_proj, rows=features)
    attention.k_proj = _sliced_linear(attention.k_proj, rows=features)
    attention.v_proj = _sliced_linear(attention.v_proj, rows=features)
    attention.out_proj = _sliced_linear(attention.out_proj, columns=features)
    attention.num_heads = attention.num_kv_heads = len(keep)


def prune_heads(model, heads):
    """Remove attention heads from the weights (Michel et al.; Voita et al. prune the same way):
    ``heads`` maps a layer index to the heads to remove there. Each layer's query, key and value
    projections lose the heads' rows and the output projection the matching columns, so the
    model computes exactly what the head mask with zeros at those heads computes, with fewer
    weights and less work. Indices refer to the model as it is now (after earlier pruning, a
    layer's heads are renumbered 0 .. remaining - 1). Returns ``model`` (pruned in place)."""
    attentions = attention_layers(model)
    for layer in heads:
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) \
                or not 0 <= layer < len(attentions):
            raise ValueError(f"prune_heads: layer {layer!r} is out of range "
                             f"[0, {len(attentions)})")
    for layer, layer_heads in heads.items():
        if len(layer_heads):
            _remove_heads(attentions[layer], list(layer_heads), layer)
    return model


# ---- layers --------------------------------------------------------------------------------------
def _check_rate(p, op):
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"{op}: the drop rate p must be in [0, 1), got {p!r}")
    return float(p)


class LayerDrop:
    """LayerDrop (Fan et al., 2020): while the model trains, each layer of its stack is skipped
    (its output replaced by its input) with probability ``p``, independently per layer and per
    forward pass, so that the trained model tolerates having layers removed at inference.

    ``LayerDrop(model, p=0.2, seed=0)`` sets the stack's ``skip_layer``; ``remove()`` unsets it.
    A skipped layer is not evaluated at all, so its weights get no gradient and the step is
    cheaper by the skipped layers' share: the paper's speed-up, not only its maths. In eval mode
    nothing is dropped. ``dropped`` lists the index of every layer skipped so far.
    """

    def __init__(self, model, p, seed=None):
        self.p = _check_rate(p, "LayerDrop")
        self.rng = np.random.default_rng(seed)
        self.dropped = []
        self.stack = transformer_stack(model)
        if self.stack.skip_layer is not None:
            raise ValueError("LayerDrop: the model's stack already skips layers (another "
                             "LayerDrop is attached); call its remove() first")
        self.stack.skip_layer = self._skip

    def _skip(self, index):
        if self.stack.training and self.rng.random() < self.p:
            self.dropped.append(index)
            return True
        return False

    def remove(self):
        if self.stack.skip_layer == self._skip:
            del self.stack.skip_layer


def layerdrop_layers_to_drop(num_layers, p=None, keep=None):
    """The layers Fan et al. (section 4) prune at inference after LayerDrop with rate ``p``:
    every layer at depth d (counted from 1) with d = 0 mod floor(1/p). Give either ``p`` or the
    number of layers to ``keep``, r; the latter sets p* = 1 - r / N. Returns 0-based indices."""
    num_layers = checks.positive_int(num_layers, "num_layers", "layerdrop_layers_to_drop")
    if (p is None) == (keep is None):
        raise ValueError("layerdrop_layers_to_drop: give exactly one of p and keep")
    if keep is not None:
        keep = checks.int_at_least(keep, 1, "keep", "layerdrop_layers_to_drop")
        if keep > num_layers:
            raise ValueError(f"layerdrop_layers_to_drop: keep={keep} exceeds num_layers="
                             f"{num_layers}")
        p = 1.0 - keep / num_layers
    p = _check_rate(p, "layerdrop_layers_to_drop")
    if p == 0.0:
        return []
    period = int(np.floor(1.0 / p + 1e-9))
    return [d - 1 for d in range(1, num_layers + 1) if d % period == 0]


POOR_MANS_STRATEGIES = ("top", "bottom", "even-alternate", "odd-alternate", "symmetric",
                        "contribution")


def poor_mans_layers_to_drop(strategy, num_layers, k, contributions=None):
    """The ``k`` layers Sajjad et al. (2020, section 3) drop from a ``num_layers``-layer model,
    layers counted 1 (bottom) .. N (top) in the paper, returned 0-based and sorted:

    * ``top``: the top k layers, N-k+1 .. N;
    * ``bottom``: the bottom k, 1 .. k;
    * ``even-alternate``: every other layer downwards from the highest even layer (N=12, k=4:
      12, 10, 8, 6);
    * ``odd-alternate``: the same from the highest odd layer (N=12, k=4: 11, 9, 7, 5);
    * ``symmetric``: k layers from the middle, keeping the top and bottom (N=12, k=4: 5 .. 8);
    * ``contribution``: the k layers whose output is most similar to their input
      (``contributions``, one cosine similarity per layer, from ``layer_contributions``).
    """
    op = "poor_mans_layers_to_drop"
    if strategy not in POOR_MANS_STRATEGIES:
        raise ValueError(f"{op}: strategy must be one of {POOR_MANS_STRATEGIES}, got "
                         f"{strategy!r}")
    num_layers = checks.positive_int(num_layers, "num_layers", op)
    k = checks.int_at_least(k, 0, "k", op)
    if k >= num_layers:
        raise ValueError(f"{op}: dropping k={k} of {num_layers} layers leaves none; k must be "
                         f"below {num_layers}")
    if strategy == "top":
        depths = range(num_layers - k + 1, num_layers + 1)
    elif strategy == "bottom":
        depths = range(1, k + 1)
    elif strategy in ("even-alternate", "odd-alternate"):
        parity = 0 if strategy == "even-alternate" else 1
        depths = [d for d in range(num_layers, 0, -1) if d % 2 == parity][:k]
        if len(depths) < k:
            raise ValueError(f"{op}: {strategy} has only {len(depths)} layers to drop in a "
                             f"{num_layers}-layer model, asked for k={k}")
    elif strategy == "symmetric":
        start = (num_layers - k) // 2 + 1
        depths = range(start, start + k)
    else:
        if contributions is None or len(contributions) != num_layers:
            raise ValueError(f"{op}: the contribution strategy needs contributions, one "
                             f"similarity per layer ({num_layers}); compute them with "
                             "layer_contributions")
        order = np.argsort(-np.asarray(contributions, dtype=float), kind="stable")
        depths = [int(i) + 1 for i in order[:k]]
    return sorted(d - 1 for d in depths)


def layer_contributions(model, batches, forward):
    """How little each layer changes its input: the mean cosine similarity between a layer's
    input and output token vectors over ``batches`` (Sajjad et al.'s contribution-based
    strategy drops the layers with the highest similarity). ``forward(model, batch)`` runs the
    model and returns the stack's ``hidden_states`` (the embeddings and every layer's output,
    e.g. ``model(..., output_hidden_states=True).hidden_states``). Returns (layers,)."""
    total, count = None, 0
    for batch in batches:
        states = [h.numpy().astype(np.float64) for h in forward(model, batch)]
        similarities = []
        for before, after in zip(states[:-1], states[1:]):
            dot = (before * after).sum(-1)
            norms = np.linalg.norm(before, axis=-1) * np.linalg.norm(after, axis=-1)
            similarities.append(float(np.mean(dot / np.maximum(norms, 1e-12))))
        total = np.array(similarities) if total is None else total + similarities
        count += 1
    if not count:
        raise ValueError("layer_contributions: batches is empty; give at least one batch")
    return total / count


def drop_layers(model, layers):
    """Remove ``layers`` (0-based indices) from the model's stack: a shallower model, the
    remaining layers renumbered in order. A ``config`` with ``num_hidden_layers`` (BERT) or
    ``n_layer`` (GPT) on the model is updated so that a saved model rebuilds with the new depth.
    Dropping no layer changes nothing; dropping every layer is refused. Returns ``model``."""
    stack = transformer_stack(model)
    count = len(stack.layers)
    layers = sorted(set(layers))
    for layer in layers:
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) \
                or not 0 <= layer < count:
            raise ValueError(f"drop_layers: layer {layer!r} is out of range [0, {count})")
    if len(layers) == count:
        raise ValueError(f"drop_layers: dropping all {count} layers is refused; keep at least "
                         "one")
    for layer in reversed(layers):
        del stack.layers[layer]
    config = getattr(model, "config", None)
    for field in ("num_hidden_layers", "n_layer"):
        if config is not None and hasattr(config, field):
            setattr(config, field, len(stack.layers))
    return model

