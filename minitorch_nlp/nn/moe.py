"""GShard's mixture of experts (Lepikhin et al., 2020, "GShard: Scaling Giant Models with
Conditional Computation and Automatic Sharding"): the survey's section V-G, equations 32-34.

A position-wise feed-forward layer is replaced by E experts FFN_1 .. FFN_E and a gate that sends
each token to at most two of them:

* G_{s,E} = GATE(x_s)                                   (eq 32, ``route`` / ``gshard_gating``)
* FFN_e(x_s) = wo_e . ReLU(wi_e . x_s)                   (eq 33, ``expert_ffn``, ``Experts``)
* y_s = sum_e G_{s,e} . FFN_e(x_s)                       (eq 34, ``mixture_of_experts``)

``MixtureOfExperts`` is the layer (gate W_g, experts, aux loss) that takes a Transformer's
feed-forward place.

GATE is the paper's Algorithm 1 (top-2 gating) for one group of S tokens:

1. gates = softmax(x_s W_g) over the E experts;
2. the first expert e1 = argmax gates, the second e2 = argmax of the rest; their weights
   g1, g2 are normalised to g1 + g2 = 1;
3. each expert takes at most ``capacity`` tokens (the paper's 2S/E: ``capacity_factor`` 1 with
   k = 2). First choices are placed first, in token order, then second choices after them; a
   token whose expert is full is not sent there, and a token sent nowhere gets y_s = 0, so that
   the residual connection around the layer carries it through unchanged;
4. random routing: the second expert is used only with probability proportional to its weight,
   when 2 g2 > u for u ~ U[0, 1) (always when the two gates tie); ``draws`` are the u's;
5. the auxiliary load-balancing loss l_aux = E sum_e (c_e / S) m_e, with c_e the number of
   tokens whose first choice is e and m_e the mean gate of e; it is 1 under uniform routing.

``k=1`` is Switch Transformer's routing (Fedus et al., 2021): one expert per token, weighted by
its raw gate p_e (not renormalised), capacity ``capacity_factor * S / E``, the same auxiliary
loss (Switch's alpha N sum_i f_i P_i without alpha).

All tokens of one call form one group, or, with ``group_size``, each run of ``group_size``
tokens is a group routed alone (GShard's groups; ``"sequence"``: each sequence, so that a
sequence's routing does not depend on the rest of the batch); dense (S, E, C) dispatch and
combine tensors and einsums follow the paper's formulation. Tokens are routed in the order
they are flattened (batch-major), so a token's expert may depend on the other tokens of its
group -- as in GShard.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from .. import checks, cookbook
from .. import functional as F
from ..autograd import Generator, Tensor, concatenate, einsum, empty, tensor, zeros
from ..autograd.random import rng
from . import init
from .layers import Linear
from .transformer import FeedForward
from .module import Module
from .parameter import Parameter

__all__ = ["Experts", "MixtureOfExperts", "Routing", "aux_losses", "expert_capacity",
           "dispatch_and_combine", "expert_ffn", "gshard_gating", "load_balancing_loss",
           "mixture_every_other_layer", "mixture_of_experts", "route"]

SECOND_EXPERT_POLICIES = ("random", "all")


def expert_capacity(tokens: int, num_experts: int, k: int = 2,
                    capacity_factor: float = 1.0) -> int:
    """Tokens one expert may take from a group of ``tokens``: ceil(capacity_factor * k * S / E)
    (GShard's 2S/E for k = 2 and factor 1; Switch's factor * S / E for k = 1)."""
    tokens = checks.positive_int(tokens, "tokens", "expert_capacity")
    num_experts = checks.positive_int(num_experts, "num_experts", "expert_capacity")
    if isinstance(capacity_factor, bool) or not isinstance(capacity_factor, numbers.Real) \
            or not capacity_factor > 0:
        raise ValueError(f"expert_capacity: capacity_factor must be a number > 0, got "
                         f"{capacity_factor!r}")
    return max(1, math.ceil(capacity_factor * k * tokens / num_experts))


@dataclass(frozen=True)
class Routing:
    """Where one group's tokens go. ``combine`` (S, E, C) holds G_{s,e} in the slot c that token
    s takes in expert e's buffer (eq 32-34); ``dispatch`` is the same pattern as a 0/1 backend
    array; ``aux_loss`` is the load-balancing loss (a scalar Tensor); ``tokens_per_expert`` (E,)
    counts the slots used."""

    combine: Tensor
    dispatch: object
    aux_loss: Tensor
    tokens_per_expert: np.ndarray


def load_balancing_loss(gates: Tensor, first_choice: np.ndarray) -> Tensor:
    """GShard's auxiliary loss l_aux = E sum_e (c_e / S) m_e (Algorithm 1; Switch's
    N sum_i f_i P_i): ``gates`` (S, E) the softmax probabilities (a Tensor), ``first_choice`` (S,)
    each token's top expert. c_e / S is a fraction of tokens, not differentiable; the gradient
    flows through m_e, the mean gate. Equal to 1 under uniform routing."""
    num_experts = gates.shape[-1]
    xp = gates.backend.xp
    first_choice = xp.asarray(first_choice)
    fraction = (first_choice[:, None] == xp.arange(num_experts)[None, :]).mean(axis=0)
    fraction = tensor(fraction.astype(gates.dtype), backend=gates.backend)
    return (gates.mean(axis=0) * fraction).sum() * num_experts


def _check_routing(logits, k, capacity, draws):
    where = "route"
    if not isinstance(logits, Tensor) or logits.ndim != 2:
        shape = logits.shape if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(f"{where}: logits must be a Tensor of shape (tokens, num_experts), got "
                         f"{shape}")
    num_experts = logits.shape[1]
    if k not in (1, 2) or isinstance(k, bool):
        raise ValueError(f"{where}: k must be 1 (Switch) or 2 (GShard), got {k!r}")
    if k > num_experts:
        raise ValueError(f"{where}: k={k} experts per token needs at least {k} experts, got "
                         f"logits for {num_experts}")
    checks.positive_int(capacity, "capacity", where)
    if draws is not None:
        draws = np.asarray(draws)
        if draws.shape != (logits.shape[0],) or not ((draws >= 0) & (draws < 1)).all():
            raise ValueError(f"{where}: draws must be uniform numbers in [0, 1), one per token, "
                             f"shape ({logits.shape[0]},), got shape {draws.shape}")
    return draws


def _slots(choice, offset):
    """Each token's position in its expert's buffer: how many earlier tokens chose the same
    expert, plus ``offset`` (E,) slots already taken. ``choice`` is a 0/1 (S, E) array."""
    return ((choice.cumsum(axis=0) - choice + offset[None, :]) * choice).sum(axis=1)


def _placement(xp, expert, slot, kept, num_experts, capacity, dtype):
    """The (S, E, C) 0/1 array with a one at (s, expert[s], slot[s]) for the kept tokens."""
    by_expert = expert[:, None] == xp.arange(num_experts)[None, :]
    by_slot = xp.where(kept, slot, -1)[:, None] == xp.arange(capacity)[None, :]
    return (by_expert[:, :, None] & by_slot[:, None, :]).astype(dtype)


def route(logits: Tensor, *, k: int = 2, capacity: int,
          draws: np.ndarray | None = None) -> Routing:
    """GShard's top-2 gating (``k=2``) or Switch's top-1 gating (``k=1``) of one group of tokens
    with ``capacity`` slots per expert (see the module docstring). ``logits`` (S, E) are
    x_s W_g; ``draws`` (S,) the uniform numbers of random routing, None to use every second
    expert that fits. Returns a :class:`Routing`."""
    draws = _check_routing(logits, k, capacity, draws)
    xp = logits.backend.xp
    num_tokens, num_experts = logits.shape
    gates = F.softmax(logits, axis=-1)
    probabilities = gates.data

    first = probabilities.argmax(axis=-1)
    first_choice = (first[:, None] == xp.arange(num_experts)[None, :]).astype(np.int64)
    aux_loss = load_balancing_loss(gates, first)
    slot1 = _slots(first_choice, xp.zeros(num_experts, dtype=np.int64))
    kept1 = slot1 < capacity
    gate1 = (gates * tensor(first_choice.astype(gates.dtype), backend=gates.backend)).sum(axis=-1)
    if k == 1:
        weights = [gate1]
        placements = [_placement(xp, first, slot1, kept1, num_experts, capacity, gates.dtype)]
    else:
        second = xp.where(first_choice.astype(bool), -xp.inf, probabilities).argmax(axis=-1)
        second_choice = (second[:, None] == xp.arange(num_experts)[None, :]).astype(np.int64)
        gate2 = (gates * tensor(second_choice.astype(gates.dtype), backend=gates.backend)).sum(-1)
        total = gate1 + gate2
        gate1, gate2 = gate1 / total, gate2 / total
        wanted2 = xp.ones(num_tokens, dtype=bool) if draws is None \
            else xp.asarray(draws) < 2 * gate2.data
        second_choice = second_choice * wanted2[:, None]
        slot2 = _slots(second_choice, (first_choice * kept1[:, None]).sum(axis=0))
        kept2 = wanted2 & (slot2 < capacity)
        weights = [gate1, gate2]
        placements = [_placement(xp, first, slot1, kept1, num_experts, capacity, gates.dtype),
                      _placement(xp, second, slot2, kept2, num_experts, capacity, gates.dtype)]
    dispatch = sum(placements)
    combine = sum(weight[:, None, None] * tensor(placement, backend=gates.backend)
                  for weight, placement in zip(weights, placements))
    counts = logits.backend.to_numpy(dispatch.sum(axis=(0, 2)))
    return Routing(combine, dispatch, aux_loss, counts.astype(np.int64))


@cookbook.equation(32)
def gshard_gating(logits, *, k=2, capacity, draws=None):
    """G_{s,E} = GATE(x_s) (eq 32): the combine weights (S, E, C) of :func:`route` alone, zero
    except at the (expert, slot) each token was sent to, where it holds the token's normalised
    gate (``k=2``) or raw gate (``k=1``)."""
    return route(logits, k=k, capacity=capacity, draws=draws).combine


def _check_experts(x, wi, wo, where, x_axes):
    for name, value in (("x", x), ("wi", wi), ("wo", wo)):
        if not isinstance(value, Tensor):
            raise TypeError(f"{where}: {name} must be a Tensor, got {type(value).__name__}")
    if wi.ndim != 3 or wo.shape != (wi.shape[0], wi.shape[2], wi.shape[1]):
        raise ValueError(f"{where}: wi must be (num_experts, d_model, d_ff) and wo (num_experts, "
                         f"d_ff, d_model), got {wi.shape} and {wo.shape}")
    if x.ndim != len(x_axes) + 1 or x.shape[-1] != wi.shape[1] \
            or (x_axes[0] == "num_experts" and x.shape[0] != wi.shape[0]):
        axes = ", ".join(f"{a}={wi.shape[0]}" if a == "num_experts" else a for a in x_axes)
        raise ValueError(f"{where}: x must be ({axes}, d_model={wi.shape[1]}), got {x.shape}")


@cookbook.equation(33)
def expert_ffn(x, wi, wo):
    """FFN_e(x) = wo_e . ReLU(wi_e . x) for every expert at once (eq 33): ``x`` (E, C, d_model)
    holds each expert's buffer of C tokens, ``wi`` (E, d_model, d_ff), ``wo`` (E, d_ff, d_model);
    returns (E, C, d_model)."""
    _check_experts(x, wi, wo, "expert_ffn", ("num_experts", "capacity"))
    return einsum("ech,ehm->ecm", F.relu(einsum("ecm,emh->ech", x, wi)), wo)


@cookbook.equation(34)
def mixture_of_experts(x, wi, wo, *, combine, dispatch=None):
    """y_s = sum_e G_{s,e} FFN_e(x_s) (eq 34), computed as GShard does: ``dispatch`` (S, E, C)
    0/1 gathers each expert's buffer, expert_inputs[e, c] = sum_s dispatch[s, e, c] x_s, the
    experts run on their buffers (eq 33) and ``combine`` (S, E, C), the gate weights G of eq 32
    in each token's slot, mixes the outputs back: y_s = sum_{e,c} combine[s, e, c]
    FFN_e(expert_inputs)[e, c]. ``x`` is (S, d_model); ``dispatch`` defaults to combine != 0;
    a token in no slot gets zeros."""
    _check_experts(x, wi, wo, "mixture_of_experts", ("tokens",))
    combine = combine if isinstance(combine, Tensor) \
        else tensor(combine, dtype=x.dtype, backend=x.backend)
    expected = (x.shape[0], wi.shape[0])
    if combine.ndim != 3 or combine.shape[:2] != expected:
        raise ValueError(f"mixture_of_experts: combine must be (tokens, num_experts, capacity) "
                         f"= {expected + ('C',)}, got {combine.shape}")
    dispatch = combine.data != 0 if dispatch is None else dispatch
    if tuple(dispatch.shape) != combine.shape:
        raise ValueError(f"mixture_of_experts: dispatch {tuple(dispatch.shape)} must have "
                         f"combine's shape {combine.shape}")
    return dispatch_and_combine(x, combine, dispatch, lambda inputs: expert_ffn(inputs, wi, wo))


def dispatch_and_combine(x: Tensor, combine: Tensor, dispatch,
                         run_experts: Callable[[Tensor], Tensor]) -> Tensor:
    """GShard's einsums around the experts: tokens ``x`` (S, d_model) gathered into the
    experts' buffers by ``dispatch`` (S, E, C), ``run_experts`` (E, C, d_model) -> (E, C,
    d_model) applied, and the outputs mixed back with ``combine`` (S, E, C)."""
    dispatch = tensor(x.backend.xp.asarray(dispatch), dtype=x.dtype, backend=x.backend)
    expert_inputs = einsum("sec,sm->ecm", dispatch, x)
    return einsum("sec,ecm->sm", combine.astype(x.dtype), run_experts(expert_inputs))


class Experts(Module):
    """E position-wise feed-forward networks without biases, applied to their own buffers
    (eq 33, :func:`expert_ffn`)::

        FFN_e(x) = wo_e . ReLU(wi_e . x)

    ``wi`` (E, d_model, d_ff) and ``wo`` (E, d_ff, d_model); ``forward`` maps (E, C, d_model) ->
    (E, C, d_model). Initialised as ``Linear``: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    """

    def __init__(self, num_experts: int, d_model: int, d_ff: int,
                 generator: Generator | None = None) -> None:
        super().__init__()
        where = "Experts"
        self.num_experts = checks.positive_int(num_experts, "num_experts", where)
        self.d_model = checks.positive_int(d_model, "d_model", where)
        self.d_ff = checks.positive_int(d_ff, "d_ff", where)
        self.wi = Parameter(empty(num_experts, d_model, d_ff))
        self.wo = Parameter(empty(num_experts, d_ff, d_model))
        self.reset_parameters(generator)

    def reset_parameters(self, generator: Generator | None = None) -> None:
        for weight, fan_in in ((self.wi, self.d_model), (self.wo, self.d_ff)):
            init.uniform_(weight, -1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in),
                          generator=generator)

    def forward(self, x: Tensor) -> Tensor:
        return expert_ffn(x, self.wi, self.wo)

    def extra_repr(self):
        return f"num_experts={self.num_experts}, d_model={self.d_model}, d_ff={self.d_ff}"


class MixtureOfExperts(Module):
    """GShard's MoE layer, in place of a Transformer's feed-forward network (eq 32-34)::

        G = GATE(x W_g)                                 (eq 32, :func:`route`)
        expert_inputs[e, c] = sum_s dispatch[s, e, c] x_s
        y_s = sum_{e, c} G[s, e, c] FFN_e(expert_inputs)[e, c]     (eq 33-34)

    ``forward`` maps (batch, time, d_model) -> (batch, time, d_model); every token of the call is
    one group with ``expert_capacity(batch * time, E, k, capacity_factor)`` slots per expert, or,
    with ``group_size``, each run of ``group_size`` tokens (batch-major; ``"sequence"``: the
    input's time axis, -2) is a group with ``expert_capacity(group_size, ...)`` slots of its own
    per expert. A
    token over capacity gets zeros, so ``TransformerLayer``'s residual carries it. After each
    call, ``aux_loss`` holds the load-balancing loss (add ``aux_losses(model)`` times a weight,
    GShard's 0.01, to the training loss) and ``routing`` the last :class:`Routing`.

    ``k=2`` is GShard (``second_expert="random"``: the second expert used with probability
    2 g2 while training, every second expert that fits in evaluation; ``"all"``: always);
    ``k=1`` is Switch Transformer.
    """

    def __init__(self, d_model: int, d_ff: int, num_experts: int, *, k: int = 2,
                 capacity_factor: float = 1.0, second_expert: str = "random",
                 group_size: int | str | None = None, generator: Generator | None = None) -> None:
        super().__init__()
        where = "MixtureOfExperts"
        self.d_model = checks.positive_int(d_model, "d_model", where)
        num_experts = checks.positive_int(num_experts, "num_experts", where)
        if k not in (1, 2) or isinstance(k, bool) or k > num_experts:
            raise ValueError(f"{where}: k must be 1 (Switch) or 2 (GShard) and at most "
                             f"num_experts={num_experts}, got {k!r}")
        if second_expert not in SECOND_EXPERT_POLICIES:
            raise ValueError(f"{where}: second_expert must be one of {SECOND_EXPERT_POLICIES}, "
                             f"got {second_expert!r}")
        expert_capacity(1, num_experts, k, capacity_factor)
        self.group_size = group_size if group_size in (None, "sequence") else \
            checks.positive_int(group_size, "group_size", where)
        self.num_experts = num_experts
        self.k, self.capacity_factor, self.second_expert = k, capacity_factor, second_expert
        self.generator = generator
        self.gate = Linear(d_model, num_experts, bias=False, generator=generator)   # W_g
        self.experts = Experts(num_experts, d_model, d_ff, generator=generator)
        self.aux_loss = None
        self.routing = None

    def forward(self, x: Tensor) -> Tensor:
        checks.features(x, self.d_model, "x", "MixtureOfExperts")
        tokens = x.reshape(-1, self.d_model)                                    # (S, M)
        count = tokens.shape[0]
        size = {None: count, "sequence": x.shape[-2] if x.ndim > 1 else count}.get(
            self.group_size, self.group_size)
        if count % size:
            raise ValueError(f"MixtureOfExperts: {count} tokens do not split into groups of "
                             f"group_size={size}")
        capacity = expert_capacity(size, self.num_experts, self.k, self.capacity_factor)
        random_routing = self.k == 2 and self.second_expert == "random" and self.training
        draws = rng(self.generator).random(count) if random_routing else None
        logits = self.gate(tokens)
        routing = _one_routing([route(logits[start:start + size], k=self.k, capacity=capacity,
                                      draws=None if draws is None else draws[start:start + size])
                                for start in range(0, count, size)])                  # eq 32
        y = dispatch_and_combine(tokens, routing.combine, routing.dispatch,            # eq 33-34
                                 self.run_experts)
        self.aux_loss, self.routing = routing.aux_loss, routing
        return y.reshape(x.shape)

    def run_experts(self, expert_inputs: Tensor) -> Tensor:
        """FFN_e of every expert's buffer (E, C, d_model) (eq 33); an expert-parallel layer
        overrides this to send the buffers to the ranks that hold the experts."""
        return self.experts(expert_inputs)

    def extra_repr(self):
        return (f"k={self.k}, capacity_factor={self.capacity_factor}, "
                f"second_expert={self.second_expert!r}")


def _one_routing(groups):
    """The routings of groups routed alone as one: group g's tokens take slots g C ...
    (g + 1) C - 1 of each expert's buffer (G C slots in all, so the experts run once); the
    auxiliary loss is the groups' mean."""
    if len(groups) == 1:
        return groups[0]
    first = groups[0].combine
    xp, dtype = first.backend.xp, first.dtype
    tokens, experts, capacity = first.shape
    width = len(groups) * capacity
    def empty_slots(count):
        return zeros(tokens, experts, count, dtype=dtype, backend=first.backend)
    combine = concatenate([concatenate(
        [part for part in (empty_slots(g * capacity), routing.combine,
                           empty_slots(width - (g + 1) * capacity)) if part.shape[2]], axis=2)
        for g, routing in enumerate(groups)], axis=0)
    dispatch = xp.zeros((tokens * len(groups), experts, width), dtype=groups[0].dispatch.dtype)
    for g, routing in enumerate(groups):
        dispatch[g * tokens:(g + 1) * tokens, :, g * capacity:(g + 1) * capacity] = \
            routing.dispatch
    aux_loss = sum((routing.aux_loss for routing in groups[1:]), groups[0].aux_loss) \
        / len(groups)
    return Routing(combine, dispatch, aux_loss,
                   sum(routing.tokens_per_expert for routing in groups))


def mixture_every_other_layer(layers: Iterable[Module], num_experts: int,
                              **options) -> list[MixtureOfExperts]:
    """GShard's Transformer (section 2.1): the feed-forward network of every other layer (1, 3,
    5 ...) of ``layers`` (``TransformerLayer``s, e.g. ``model.transformer.blocks.layers``)
    replaced, in place, by a ``MixtureOfExperts`` of ``num_experts`` experts as wide as it;
    ``options`` go to ``MixtureOfExperts`` (``k``, ``capacity_factor`` ...). Returns the new
    layers. Routing shares each expert's capacity among all the tokens of a batch, so a token's
    output can depend on later tokens: an MoE decoder is not strictly causal."""
    replaced = []
    for layer in list(layers)[1::2]:
        dense = layer.feed_forward
        if not isinstance(dense, FeedForward):
            raise TypeError(f"mixture_every_other_layer: a layer's feed_forward is a "
                            f"{type(dense).__name__}, not an nn.FeedForward")
        layer.feed_forward = MixtureOfExperts(dense.linear1.in_features,
                                              dense.linear1.out_features, num_experts, **options)
        replaced.append(layer.feed_forward)
    return replaced


def aux_losses(model: Module) -> Tensor:
    """The sum of the load-balancing losses of every ``MixtureOfExperts`` in ``model`` from its
    last forward (a scalar Tensor), to add to the training loss with a small weight."""
    losses = [m.aux_loss for m in model.modules() if isinstance(m, MixtureOfExperts)]
    if not losses or any(loss is None for loss in losses):
        raise ValueError("aux_losses: the model has no MixtureOfExperts layer that has run a "
                         "forward pass; call the model first")
    return sum(losses[1:], losses[0])
