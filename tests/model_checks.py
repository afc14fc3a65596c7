"""The checks every model runs, one shared suite per concern as ``backend_checks.py`` is for the
kernels (and as HuggingFace's shared model tester is for its models).

A model describes itself once, in a :class:`ModelSpec`: how to build a tiny instance, how to run
it on a batch of token ids and a padding mask, and, where they exist, its causal outputs, the
same outputs fed piece by piece through its key/value cache (or recurrent state), its decoding
with and without that cache, its HuggingFace format, and the loss it overfits. A test module
opts in with two lines, and pytest collects one test per check::

    from tests.model_checks import ModelChecks, ModelSpec

    class TestGPT2Checks(ModelChecks):
        spec = ModelSpec(name="GPT2LMHeadModel", build=..., forward=..., ...)

The checks (float64 unless said; tiny models, a few seconds each):

* ``causal``: changing the tokens after t leaves every output at <= t unchanged, and changes
  the output at t + 1 (so the check would see a model that ignores its input);
* ``padding_right`` / ``padding_left``: each row of a padded batch (padding holding random ids,
  or ``pad_filler``) gives what the row gives alone;
* ``cached_steps``: the causal outputs fed a piece at a time through the model's cache or state
  equal those of the whole sequence (compared as log-probabilities);
* ``cached_decoding``: greedy decoding with the cache gives the same ids as without it;
* ``state_dict_round_trip``: a model built from another seed and loaded with the state dict,
  saved to disk and read back by ``minitorch_nlp.io``, gives identical outputs;
* ``hf_round_trip``: ``save_pretrained`` then ``from_pretrained`` (the HuggingFace key map in
  both directions) gives the same class, the same config and identical outputs (float32);
* ``learns``: the loss on a tiny batch falls by ``Learning.factor`` within ``Learning.steps``
  AdamW steps (float32), then ``Learning.after`` checks what the model learnt;
* ``float32_and_float64_agree``: the same weights in both dtypes give outputs of that dtype
  that agree within float32 rounding;
* ``numpy_and_numba_agree``: outputs and every parameter's gradient agree on both backends;
* ``dropout_in_training_only``: with dropout, two forward passes differ in training mode and
  are identical in eval mode.

A check that does not apply to a model (an encoder is not causal, an RNN has no key/value cache
to switch off, a model without a HuggingFace architecture has no HuggingFace round trip) is
named in ``ModelSpec.skips`` with the reason, and is then not collected; ``ModelSpec`` refuses a
spec that leaves a check's hook out without a reason, or gives a reason for a check it can run.

The module also holds the helpers the per-model equation tests share (``overfit``,
``randomize`` and the parameter-tree helpers, and the GPT language model's reference check), so
that no test module imports another.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Mapping

import autograd
import numpy as np
import pytest
from hypothesis import strategies as st

import minitorch_nlp as mt
from minitorch_nlp import optim
from minitorch_nlp.io import load, save
from minitorch_nlp.models.gpt import GPTConfig
from minitorch_nlp.testing import strategies as S
from minitorch_nlp.testing.reference import gpt as gpt_reference

TIGHT = dict(rtol=1e-9, atol=1e-10)          # float64, the same maths in another order
DTYPES = dict(rtol=1e-4, atol=1e-4)          # float32 against float64
BACKENDS = dict(rtol=1e-7, atol=1e-9)        # float64, fused kernels against NumPy
REFERENCE = dict(rtol=1e-7, atol=1e-10)      # float64 against the autograd.numpy references
PADDED_LENGTHS = (6, 4, 2)


@dataclass(frozen=True)
class Learning:
    """``loss(model, batch())`` falls below its first value / ``factor`` within ``steps`` AdamW
    steps at learning rate ``lr``; ``after(model, batch)`` (optional) then checks what the model
    learnt, e.g. that decoding gives the targets back."""

    batch: Callable[[], Any]
    loss: Callable[[Any, Any], Any]
    steps: int
    factor: float
    lr: float = 3e-3
    after: Callable[[Any, Any], None] | None = None


# check name -> the spec field it needs
OPTIONAL_CHECKS = {"causal": "causal", "padding_left": "padding_left",
                   "cached_steps": "incremental", "cached_decoding": "decode",
                   "hf_round_trip": "hf", "learns": "learning"}


@dataclass(frozen=True)
class ModelSpec:
    """What the shared checks need to know about one model.

    ``build(dropout=0.0)``: a tiny model, its weights drawn from ``mt``'s seed (the checks seed
    it), every dropout probability set to ``dropout``.
    ``forward(model, ids, mask)``: the outputs compared (a Tensor, batch first) for token ids
    (batch, time) and a bool padding mask (True on real tokens). ``outputs_follow_ids``: output
    position t belongs to input position t (so the padding check compares the real positions
    only); False when the outputs are over something else (a fixed target, say).
    ``vocab``: ids are drawn from ``range(*vocab)``, which must leave out the special ids.
    ``pad_filler``: what padded positions hold (None: random ids, so the mask alone must hide
    them). ``padding_left``: the model supports left padding (as fed by ``forward``).
    ``causal(model, ids)``: outputs (batch, time, vocab) of a causal model at every position.
    ``incremental(model, ids)``: the same fed a piece at a time through the model's cache or
    state (logits or log-probabilities). ``decode(model, ids, use_cache)``: greedy ids.
    ``hf``: ``save_pretrained`` / ``from_pretrained`` support the model. ``learning``: see
    :class:`Learning`. ``skips``: check name -> why it does not apply.
    """

    name: str
    build: Callable[..., Any]
    forward: Callable[[Any, np.ndarray, np.ndarray], Any]
    vocab: tuple[int, int]
    outputs_follow_ids: bool = True
    pad_filler: int | None = None
    padding_left: bool = False
    causal: Callable[[Any, np.ndarray], Any] | None = None
    incremental: Callable[[Any, np.ndarray], Any] | None = None
    decode: Callable[[Any, np.ndarray, bool], np.ndarray] | None = None
    hf: bool = False
    learning: Learning | None = None
    skips: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        for check, hook in OPTIONAL_CHECKS.items():
            given = bool(getattr(self, hook))
            if given == (check in self.skips):
                raise ValueError(
                    f"ModelSpec {self.name}: "
                    + (f"skips {check!r} although it sets {hook}; drop the reason"
                       if given else f"sets no {hook} for the {check!r} check; set it, or "
                                     f"say in skips why {check!r} does not apply"))
        unknown = set(self.skips) - set(OPTIONAL_CHECKS)
        if unknown:
            raise ValueError(f"ModelSpec {self.name}: skips names unknown checks "
                             f"{sorted(unknown)}; the optional checks are "
                             f"{sorted(OPTIONAL_CHECKS)}")
        if self.incremental is not None and self.causal is None:
            raise ValueError(f"ModelSpec {self.name}: incremental outputs are compared with the "
                             "causal ones; set causal too")


# ---- helpers the checks and the per-model tests share -------------------------------------------
def positions_from_mask(mask):
    """Position ids that count real tokens only (0 on left padding): what a model with absolute
    learned positions needs to read a left-padded row as it reads the row alone."""
    return np.maximum(np.cumsum(mask, axis=1) - 1, 0)


def overfit(model, loss_fn, steps, lr=3e-3):
    """``steps`` AdamW steps (no weight decay) on ``loss_fn()``; returns every step's loss."""
    optimizer = optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    for _ in range(steps):
        loss = loss_fn()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def feed_one_at_a_time(step, state, ids):
    """The outputs (batch, time, vocab) of ``step(tokens, state) -> (outputs, state)`` (a
    decoding step function, ``minitorch_nlp.decoding``'s convention) fed the columns of ``ids``
    one at a time."""
    steps = []
    for t in range(ids.shape[1]):
        out, state = step(ids[:, t], state)
        steps.append(numpy_of(out))
    return np.stack(steps, axis=1)


def numpy_of(output):
    """A Tensor's values, or an array as it is."""
    return output if isinstance(output, np.ndarray) else np.asarray(output.numpy())


def log_softmax(x):
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def build(spec, dtype=mt.float64, seed=0, **overrides):
    """``spec``'s tiny model from ``seed``, cast to ``dtype``, in eval mode."""
    mt.manual_seed(seed)
    return spec.build(**overrides).to(dtype).eval()


def random_ids(spec, shape, seed):
    return np.random.default_rng(seed).integers(*spec.vocab, shape)


def padded_batch(spec, side="right", seed=0):
    """Rows of lengths ``PADDED_LENGTHS`` padded to the longest on ``side``: (ids, mask)."""
    time = max(PADDED_LENGTHS)
    rng = np.random.default_rng(seed)
    ids = rng.integers(*spec.vocab, (len(PADDED_LENGTHS), time))
    real = np.arange(time)[None, :] < np.array(PADDED_LENGTHS)[:, None]
    mask = real if side == "right" else real[:, ::-1]
    filler = (rng.integers(*spec.vocab, ids.shape) if spec.pad_filler is None
              else np.full(ids.shape, spec.pad_filler))
    return np.where(mask, ids, filler), mask.copy()


# ---- the checks ----------------------------------------------------------------------------------
class ModelChecks:
    """Subclass as ``TestXxx`` with ``spec = ModelSpec(...)``; the checks named in
    ``spec.skips`` are removed from the subclass, the others collected."""

    spec: ModelSpec

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for check in cls.spec.skips:
            setattr(cls, f"test_{check}", None)   # pytest collects only callables

    def outputs(self, model, ids, mask):
        return numpy_of(self.spec.forward(model, ids, mask))

    def test_causal(self):
        spec, time = self.spec, 6
        model = build(spec)
        ids = random_ids(spec, (2, time), seed=1)
        base = numpy_of(spec.causal(model, ids))
        low, high = spec.vocab
        for t in range(time - 1):
            changed = ids.copy()
            changed[:, t + 1:] = low + (changed[:, t + 1:] - low + 1) % (high - low)
            out = numpy_of(spec.causal(model, changed))
            np.testing.assert_allclose(out[:, :t + 1], base[:, :t + 1], **TIGHT,
                                       err_msg=f"a change at {t + 1} reached position <= {t}")
            assert not np.allclose(out[:, t + 1], base[:, t + 1]), \
                f"{spec.name}: the output at {t + 1} ignores the token there"

    def check_padding(self, side):
        model = build(self.spec)
        ids, mask = padded_batch(self.spec, side)
        padded = self.outputs(model, ids, mask)
        for row, real in enumerate(mask):
            alone = self.outputs(model, ids[row:row + 1, real], np.ones((1, real.sum()), bool))
            got = padded[row][real] if self.spec.outputs_follow_ids else padded[row]
            np.testing.assert_allclose(got, alone[0], **TIGHT, err_msg=f"{side} padding, row {row}")

    def test_padding_right(self):
        self.check_padding("right")

    def test_padding_left(self):
        self.check_padding("left")

    def test_cached_steps(self):
        model = build(self.spec)
        ids = random_ids(self.spec, (2, 7), seed=2)
        whole = log_softmax(numpy_of(self.spec.causal(model, ids)))
        steps = log_softmax(numpy_of(self.spec.incremental(model, ids)))
        np.testing.assert_allclose(steps, whole, **TIGHT)

    def test_cached_decoding(self):
        model = build(self.spec)
        prompts = random_ids(self.spec, (3, 4), seed=3)
        cached = self.spec.decode(model, prompts, True)
        np.testing.assert_array_equal(self.spec.decode(model, prompts, False), cached)

    def test_state_dict_round_trip(self, tmp_path):
        model = build(self.spec)
        ids, mask = padded_batch(self.spec)
        other = build(self.spec, seed=1)
        assert not np.allclose(self.outputs(other, ids, mask), self.outputs(model, ids, mask))
        save(model.state_dict(), tmp_path / "state.npz")
        other.load_state_dict(load(tmp_path / "state.npz"))
        np.testing.assert_array_equal(self.outputs(other, ids, mask),
                                      self.outputs(model, ids, mask))

    def test_hf_round_trip(self, tmp_path):
        pytest.importorskip("safetensors")
        model = build(self.spec, dtype=mt.float32)
        mt.save_pretrained(model, tmp_path)
        again = mt.from_pretrained(tmp_path)
        assert type(again) is type(model) and again.config == model.config
        ids, mask = padded_batch(self.spec)
        np.testing.assert_array_equal(self.outputs(again, ids, mask),
                                      self.outputs(model, ids, mask))

    def test_learns(self):
        learning = self.spec.learning
        mt.manual_seed(0)
        model = self.spec.build()
        batch = learning.batch()
        losses = overfit(model, lambda: learning.loss(model, batch), learning.steps, learning.lr)
        assert losses[-1] < losses[0] / learning.factor, (losses[0], losses[-1])
        if learning.after is not None:
            learning.after(model.eval(), batch)

    def test_float32_and_float64_agree(self):
        ids, mask = padded_batch(self.spec)
        single = self.outputs(build(self.spec, dtype=mt.float32), ids, mask)
        double = self.outputs(build(self.spec, dtype=mt.float64), ids, mask)
        assert single.dtype == np.float32 and double.dtype == np.float64
        np.testing.assert_allclose(single, double, **DTYPES)

    def test_numpy_and_numba_agree(self):
        pytest.importorskip("numba")
        ids, mask = padded_batch(self.spec)

        def outputs_and_gradients(model):
            out = self.spec.forward(model, ids, mask)
            cotangent = np.random.default_rng(4).standard_normal(out.shape)
            (out * mt.tensor(cotangent, dtype=mt.float64)).sum().backward()
            return numpy_of(out), {name: np.zeros(p.shape) if p.grad is None else p.grad.numpy()
                                   for name, p in model.named_parameters()}

        expected, expected_grads = outputs_and_gradients(build(self.spec))
        mt.set_backend("numba")
        got, grads = outputs_and_gradients(build(self.spec).to("numba"))
        np.testing.assert_allclose(got, expected, **BACKENDS)
        assert grads.keys() == expected_grads.keys()
        for name, grad in grads.items():
            np.testing.assert_allclose(grad, expected_grads[name], **BACKENDS,
                                       err_msg=f"gradient of {name}")

    def test_dropout_in_training_only(self):
        model = build(self.spec, dropout=0.3)
        ids, mask = padded_batch(self.spec)
        model.train()
        assert not np.allclose(self.outputs(model, ids, mask), self.outputs(model, ids, mask))
        model.eval()
        np.testing.assert_array_equal(self.outputs(model, ids, mask),
                                      self.outputs(model, ids, mask))


# ---- helpers of the equation tests (reference comparisons) --------------------------------------
def randomize(module, seed, scale=0.5, norm_gain_mean=0.0):
    """``module`` in float64 with every parameter redrawn from N(0, scale^2) (LayerNorm gains,
    parameters named ``*norm.weight``, around ``norm_gain_mean``), so that no bias or gain is
    trivially 0 or 1."""
    module.to(mt.float64)
    rng = np.random.default_rng(seed)
    with mt.no_grad():
        for name, p in module.named_parameters():
            mean = norm_gain_mean if name.endswith("norm.weight") else 0.0
            p.data[...] = rng.normal(mean, scale, p.shape)
            p._bump_version()
    return module


def to_numpy(tree):
    """The same nested dicts / lists / tuples with every Tensor replaced by its NumPy array."""
    if isinstance(tree, dict):
        return {key: to_numpy(value) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(to_numpy(value) for value in tree)
    return tree.numpy()


def grads_of(tree):
    """The same tree with every Tensor replaced by its gradient (zeros where none reached it)."""
    if isinstance(tree, dict):
        return {key: grads_of(value) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(grads_of(value) for value in tree)
    return np.zeros(tree.shape) if tree.grad is None else tree.grad.numpy()


def assert_trees_close(actual, expected, path="", tol=REFERENCE):
    if isinstance(expected, dict):
        for key in expected:
            assert_trees_close(actual[key], expected[key], f"{path}.{key}", tol)
    elif isinstance(expected, (list, tuple)):
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_trees_close(a, e, f"{path}[{i}]", tol)
    else:
        np.testing.assert_allclose(actual, expected, **tol, err_msg=f"gradient of {path}")


def attention_parameters(attention):
    return {f"{name}_{kind[0]}": getattr(getattr(attention, f"{name}_proj"), kind)
            for name in ("q", "k", "v", "out") for kind in ("weight", "bias")}


def layer_parameters(layer):
    """A Transformer layer's parameters in the nested layout of
    ``minitorch_nlp/testing/reference/transformer.py`` (Tensors)."""
    ff = layer.feed_forward
    tree = {"attn": attention_parameters(layer.self_attn),
            "ff": {"w1": ff.linear1.weight, "b1": ff.linear1.bias,
                   "w2": ff.linear2.weight, "b2": ff.linear2.bias}}
    for i in (1, 2, 3):
        norm = getattr(layer, f"norm{i}", None)
        if norm is not None:
            tree[f"norm{i}"] = (norm.weight, norm.bias)
    if layer.cross_attn is not None:
        tree["cross"] = attention_parameters(layer.cross_attn)
    return tree


# ---- the GPT language model against testing/reference/gpt.py (GPT-1 and GPT-2) --------------
def gpt_reference_params(module):
    """The parameters of a GPTModel (or of a model holding one as ``transformer``, plus its
    classifier as ``wy_w``, ``wy_b``) in the reference's layout, as Tensors."""
    transformer = getattr(module, "transformer", module)
    layers = []
    for layer in transformer.blocks.layers:
        mlp = layer.feed_forward
        params = {key.replace("out_", "o_"): value
                  for key, value in attention_parameters(layer.self_attn).items()}
        params.update(fc_w=mlp.linear1.weight, fc_b=mlp.linear1.bias, proj_w=mlp.linear2.weight,
                      proj_b=mlp.linear2.bias, ln1_g=layer.norm1.weight, ln1_b=layer.norm1.bias,
                      ln2_g=layer.norm2.weight, ln2_b=layer.norm2.bias)
        layers.append(params)
    params = {"wte": transformer.wte.weight, "wpe": transformer.wpe.table, "layers": layers}
    if transformer.blocks.norm is not None:
        params.update(lnf_g=transformer.blocks.norm.weight, lnf_b=transformer.blocks.norm.bias)
    head = getattr(module, "head", None)
    if head is not None:
        params.update(wy_w=head.summary.weight, wy_b=head.summary.bias)
    return params


@st.composite
def gpt_lm_case(draw, variant):
    """A tiny GPT config, a batch of ids, maybe a padding mask (any pattern, even all padding),
    and a seed for the weights and the cotangent."""
    n_head = draw(st.sampled_from([1, 2]))
    config = GPTConfig.tiny(variant, vocab_size=draw(st.integers(3, 7)), n_positions=6,
                            n_embd=n_head * draw(st.sampled_from([2, 3])),
                            n_layer=draw(st.integers(1, 2)), n_head=n_head,
                            n_inner=draw(st.sampled_from([None, 5])),
                            activation=draw(st.sampled_from(["gelu_tanh", "gelu"])))
    batch, time = draw(st.integers(1, 2)), draw(st.integers(1, 5))
    ids = np.array(draw(st.lists(st.integers(0, config.vocab_size - 1), min_size=batch * time,
                                 max_size=batch * time))).reshape(batch, time)
    mask = draw(st.none() | S.bool_masks((batch, time)))
    return config, ids, mask, draw(S.seeds())


def _reference_gpt_lm(params, config, ids, mask):
    """h_n and P(u) of every sequence of the batch, stacked: (B, T, d), (B, T, V)."""
    outs = [gpt_reference.lm_forward(ids[b], params, config.n_head,
                                     None if mask is None else mask[b], pre_ln=config.pre_ln,
                                     eps=config.layer_norm_epsilon, activation=config.activation)
            for b in range(ids.shape[0])]
    return autograd.numpy.stack([h for h, _ in outs]), autograd.numpy.stack([p for _, p in outs])


def check_gpt_lm_against_reference(model_class, case):
    """A GPT language model's h_n, P(u) and loss against eq 19-21 and eq 18, values and
    gradients of every parameter."""
    config, ids, mask, seed = case
    model = randomize(model_class(config), seed)
    params = gpt_reference_params(model)
    arrays = to_numpy(params)
    counted = np.ones(ids.shape, dtype=bool) if mask is None else mask
    labels = np.where(counted, ids, -100)

    hidden = model.transformer(ids, attention_mask=mask).last_hidden_state
    out = model(ids, attention_mask=mask, labels=labels)
    expected_h, expected_p = _reference_gpt_lm(arrays, config, ids, mask)
    np.testing.assert_allclose(hidden.numpy(), expected_h, **REFERENCE)                 # eq 19-20
    np.testing.assert_allclose(out.logits.softmax(axis=-1).numpy(), expected_p,
                               **REFERENCE)                                           # eq 21

    def objective(p):                                                                   # eq 18
        _, probs = _reference_gpt_lm(p, config, ids, mask)
        l1 = sum(gpt_reference.eq18_lm_objective(probs[b], ids[b], counted[b])
                 for b in range(len(ids)))
        return l1, max(int(counted[:, 1:].sum()), 1)

    l1, predicted = objective(arrays)
    np.testing.assert_allclose(out.loss.item(), -l1 / predicted, **REFERENCE)

    cotangent = np.random.default_rng(seed).standard_normal(out.logits.shape)
    (out.loss + (out.logits.softmax(axis=-1) * mt.tensor(cotangent)).sum()).backward()

    def loss(p):
        l1, n = objective(p)
        return -l1 / n + autograd.numpy.sum(_reference_gpt_lm(p, config, ids, mask)[1]
                                            * cotangent)

    assert_trees_close(grads_of(params), autograd.grad(loss)(arrays))


# ---- families: the hooks that models with the same calling convention share ---------------------
def causal_lm_spec(name, model_class, config, *, learning_vocab=20, **fields):
    """The spec of a HuggingFace-style causal language model ``model_class(config)``: called as
    ``model(input_ids, attention_mask=..., position_ids=..., labels=..., cache=...)``, its cache
    from ``model.transformer.new_cache()``, ``model.generate(ids, n, use_cache=...)``, a
    HuggingFace architecture; it learns to predict a random batch of ``learning_vocab`` tokens
    (the loss falls 5-fold in 60 steps). ``config(**overrides)`` builds its tiny config."""

    def build(dropout=0.0, **overrides):
        return model_class(config(resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
                                  **overrides))

    def forward(model, ids, mask):
        return model(ids, attention_mask=mask, position_ids=positions_from_mask(mask)).logits

    def incremental(model, ids):
        cache = model.transformer.new_cache()
        pieces = [(0, 3)] + [(t, t + 1) for t in range(3, ids.shape[1])]
        return mt.cat([model(ids[:, a:b], cache=cache).logits for a, b in pieces], axis=1)

    def batch():
        return np.random.default_rng(0).integers(0, learning_vocab, (4, 16))

    def lm_loss(model, ids):
        return model(ids, labels=ids).loss

    spec = ModelSpec(
        name=name, build=build, forward=forward, vocab=(0, 100), padding_left=True,
        causal=lambda model, ids: model(ids).logits, incremental=incremental,
        decode=lambda model, ids, use_cache: model.generate(ids, 6, use_cache=use_cache),
        hf=True, learning=Learning(batch, lm_loss, steps=60, factor=5))
    return dataclasses.replace(spec, **fields)


ENCODER_SKIPS = {
    "causal": "a bidirectional encoder: every position attends to every other one",
    "cached_steps": "an encoder reads its whole input at once; it has no key/value cache",
    "cached_decoding": "an encoder does not decode",
}


def encoder_spec(name, build, *, vocab, output="logits", padding_token_type=None, skips=(),
                 **fields):
    """The spec of a HuggingFace-style encoder (BERT and its relatives): called as
    ``model(input_ids, attention_mask=..., token_type_ids=...)``, compared on ``output``
    (``"logits"`` or ``"last_hidden_state"``), with a HuggingFace architecture; not causal, no
    cache. With ``padding_token_type`` the padded positions hold that segment, real ones 0, so the
    padding checks see that segments on padding change nothing."""

    def forward(model, ids, mask):
        types = None if padding_token_type is None else np.where(mask, 0, padding_token_type)
        return getattr(model(ids, attention_mask=mask, token_type_ids=types), output)

    return ModelSpec(name=name, build=build, forward=forward, vocab=vocab, hf=True,
                     skips={**ENCODER_SKIPS, **dict(skips)}, **fields)


# ---- the command line: a registered family trains, resumes exactly and generates ----------------
def check_train_resume_generate(family, tmp_path, capsys, weight, prompt="the ", options=()):
    """``minitorch-nlp train FAMILY`` stopped at step 3 and resumed gives the weights of an
    uninterrupted 6-step run (``weight``, one of the model's state-dict keys, must be there), and
    ``generate`` answers ``prompt`` from the run's folder (continues it, or fills its masks).
    ``options``: more command-line options (a later one overrides the defaults, e.g.
    ``("--n-layer", "2")``)."""
    from minitorch_nlp import cli
    from minitorch_nlp.io import load

    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 60, encoding="utf-8")
    common = ["--text", str(text), "--n-layer", "1", "--n-head", "2", "--n-embd", "16",
              "--block-size", "12", "--batch-size", "4", "--steps", "6", "--warmup-steps", "1",
              "--eval-every", "3", "--backend", "numpy", "--no-progress", *options]
    assert cli.main(["train", family, *common, "--out", str(tmp_path / "whole")]) == 0
    assert cli.main(["train", family, *common, "--out", str(tmp_path / "run"), "--stop-at",
                     "3"]) == 0
    assert cli.main(["train", "--resume", str(tmp_path / "run"), "--no-progress"]) == 0
    whole, resumed = (load(tmp_path / name / "checkpoint.npz")["model"]
                      for name in ("whole", "run"))
    assert weight in whole
    for key in whole:
        np.testing.assert_array_equal(resumed[key], whole[key], err_msg=key)
    capsys.readouterr()
    assert cli.main(["generate", str(tmp_path / "run"), "--prompt", prompt,
                     "--max-new-tokens", "5"]) == 0
    assert capsys.readouterr().out.startswith("the ")


def hf_fixture_difference(model, directory, input_names):
    """max |ours - theirs| / max(1, max |theirs|) over every output a HuggingFace fixture
    (``directory/expected.npz``: the inputs named in ``input_names`` and HuggingFace's outputs)
    holds, for ``model`` run on those inputs; asserts that ``model`` gives exactly those
    outputs."""
    arrays = dict(np.load(directory / "expected.npz"))
    inputs = {key: arrays.pop(key) for key in input_names if key in arrays}
    out = model(**inputs)
    assert set(out) == set(arrays)
    return max(np.abs(np.asarray(out[key].numpy()) - value).max() / max(1.0, np.abs(value).max())
               for key, value in arrays.items())


def close_to_fixture(ours, expected, what):
    """HuggingFace fixture outputs agree within 1e-4 x their scale (float32)."""
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-4 * scale, err_msg=what)


def check_seq2seq_fixture(model, expected, **generate_options):
    """An encoder-decoder LM against a fixture's ``expected.npz`` (T5, BART): logits, the
    decoder's and the encoder's last states on padded inputs, and greedy ``generate`` ids."""
    e = expected
    out = model(e["input_ids"], e["attention_mask"], decoder_input_ids=e["decoder_input_ids"],
                decoder_attention_mask=e["decoder_attention_mask"], output_hidden_states=True)
    close_to_fixture(out.logits.numpy(), e["logits"], "logits")
    close_to_fixture(out.decoder_hidden_states[-1].numpy(), e["decoder_last_hidden_state"],
                     "decoder")
    close_to_fixture(out.encoder_last_hidden_state.numpy(), e["encoder_last_hidden_state"],
                     "encoder")
    generated = model.generate(e["input_ids"], e["attention_mask"], max_new_tokens=8,
                               **generate_options)
    np.testing.assert_array_equal(generated, e["generated"])


def seq2seq_spec(name, build, *, source, decoder_start, vocab, hf=True, **fields):
    """The spec of an encoder-decoder LM with ``generate``, ``start_decoding`` and ``step``
    (T5, BART; T5's prefix LM and decoder-only model, ``hf=False``): the outputs compared are
    the logits of a fixed target given the source ids; the causal outputs are the decoder's,
    reading ``source`` (1, time)."""
    def forward(model, ids, mask):
        target = np.array([[decoder_start, 4, 5, 6]] * len(ids))
        return model(ids, mask, decoder_input_ids=target).logits

    def incremental(model, ids):
        state = model.start_decoding(source.repeat(len(ids), 0))
        return feed_one_at_a_time(model.step, state, ids)

    return ModelSpec(
        name=name, build=build, forward=forward, vocab=vocab, outputs_follow_ids=False,
        causal=lambda model, ids: model(source.repeat(len(ids), 0),
                                        decoder_input_ids=ids).logits,
        incremental=incremental,
        decode=lambda model, ids, use_cache: model.generate(ids, max_new_tokens=6,
                                                            use_cache=use_cache),
        hf=hf, **fields)


def assert_saves_fixture_tensors(model, directory, out, unsaved=lambda key: False):
    """``save_pretrained(model, out)`` writes the tensors of the HuggingFace fixture ``directory``
    (the same keys and values), less those HuggingFace keeps and we do not write (``unsaved(key)``
    true: buffers, tied copies); returns the ``config.json`` written, as a dict."""
    import json

    from safetensors.numpy import load_file
    mt.save_pretrained(model, out)
    ours, theirs = load_file(out / "model.safetensors"), load_file(directory / "model.safetensors")
    assert set(ours) <= set(theirs)
    skipped = sorted(set(theirs) - set(ours))
    assert all(unsaved(key) for key in skipped), skipped
    for key, value in ours.items():
        np.testing.assert_array_equal(value, theirs[key], err_msg=key)
    return json.loads((out / "config.json").read_text())


def masked_lm_batch(seed=10):
    """Three rows of ids in [4, 23) after [CLS] = 2, padded to 8, 6 and 3 real tokens, every
    third real token masked ([MASK] = 3) with its label, two segments (the second from
    position 4): the tiny masked-LM batch of the BERT-family tests."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, 23, (3, 8))
    ids[:, 0] = 2
    mask = np.arange(8)[None, :] < np.array([8, 6, 3])[:, None]
    labels = np.where((np.arange(8) % 3 == 1) & mask, ids, -100)
    return dict(input_ids=np.where(labels != -100, 3, ids), attention_mask=mask,
                token_type_ids=(np.arange(8) >= 4)[None].repeat(3, 0).astype(np.int64),
                labels=labels)
