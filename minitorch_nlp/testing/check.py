"""``check_equation``: property-test anyone's implementation of a numbered equation against the
reference maths in :mod:`minitorch_nlp.testing.reference`.

Every equation that can be checked has a :class:`Spec`: the function a candidate implements, its
arguments (names, shapes, dtypes), how hypothesis draws them, the reference, and the library's
own implementation. ``check_equation(n, candidate)`` draws float64 inputs, compares the
candidate's values with the reference's and its gradients (of ``<output, cotangent>`` for a
random cotangent) with HIPS autograd's gradients of the reference. When they differ, hypothesis
shrinks the inputs to a small counter-example and :class:`EquationMismatch` shows it with a
readable diff.

A candidate is written with minitorch_nlp tensors (``inputs="tensors"``, the default): its
differentiable arguments arrive as float64 ``Tensor``\\ s with ``requires_grad=True``, in the
order the spec lists them, the other arguments (integer ids, boolean masks, flags) by keyword as
NumPy arrays or Python values; it returns a ``Tensor`` and the engine computes its gradients. A
candidate written with ``autograd.numpy`` (``inputs="numpy"``) receives float64 arrays in the
same places; HIPS autograd differentiates it.

The project's own tests go through this same function for their reference comparisons.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

import autograd
import autograd.numpy as anp
import numpy as np
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

import minitorch_nlp as mt

from . import strategies as S
from .reference import gpt as reference_gpt
from .reference import seq2seq as reference_seq2seq
from .reference import transformer as reference_transformer

__all__ = ["EquationMismatch", "Spec", "TaskNotDone", "check_equation", "load_candidate",
           "specs"]

FORWARD = dict(rtol=1e-9, atol=1e-11)
GRADIENT = dict(rtol=1e-7, atol=1e-10)
INPUT_KINDS = ("tensors", "numpy")


class EquationMismatch(AssertionError):
    """A candidate differs from the reference (or fails) on a hypothesis-shrunk example.

    ``inputs`` holds the shrunk example (argument name -> value); the message shows it with a
    diff of the values or gradients that differ."""

    def __init__(self, message, inputs):
        super().__init__(message)
        self.inputs = inputs


class TaskNotDone(Exception):
    """Raised by the stubs of a course workspace (``minitorch-nlp course new``): the student has
    not implemented this equation yet."""


@dataclass(frozen=True)
class Spec:
    """What a candidate implementation of equation ``number`` must look like.

    ``arguments`` lists (name, description) in call order; the names in ``differentiable`` come
    first and are passed positionally, the rest by keyword. ``cases`` is a hypothesis strategy of
    dicts (argument name -> value); ``reference(**case)`` computes the expected output with
    ``autograd.numpy``; ``library`` (``"module:function"``) is the library's own implementation.
    """

    number: int
    function: str
    arguments: tuple[tuple[str, str], ...]
    returns: str
    differentiable: tuple[str, ...]
    cases: Callable[[], st.SearchStrategy]
    reference: Callable[..., np.ndarray]
    library: str
    notes: str = field(default="")

    @property
    def signature(self) -> str:
        names = [name for name, _ in self.arguments]
        static = [name for name in names if name not in self.differentiable]
        keyword = f", *, {', '.join(static)}" if static else ""
        return f"{self.function}({', '.join(self.differentiable)}{keyword})"

    def describe(self) -> str:
        """The contract in words: signature, arguments, result, notes."""
        lines = [f"eq {self.number}: {self.signature}", "", "Arguments:"]
        lines += [f"  {name}: {what}" for name, what in self.arguments]
        lines += ["", f"Returns: {self.returns}"]
        if self.notes:
            lines += ["", self.notes]
        return "\n".join(lines)

    def library_function(self) -> Callable:
        return load_candidate(self.library)


# ---- the specs -----------------------------------------------------------------------------------
def _per_head(reference, key_mask, causal, *arrays):
    """A one-head reference applied to every (batch, head) pair, stacked."""
    batch, heads = arrays[0].shape[:2]
    return anp.stack([
        anp.stack([reference(*(a[b, h] for a in arrays),
                             key_mask_row=None if key_mask is None else key_mask[b],
                             causal=causal)
                   for h in range(heads)])
        for b in range(batch)])


@st.composite
def _attention_cases(draw, with_values):
    batch, heads = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    n_q, n_k, d_k = (draw(st.integers(1, 4)) for _ in range(3))
    case = {"q": draw(S.arrays((batch, heads, n_q, d_k))),
            "k": draw(S.arrays((batch, heads, n_k, d_k)))}
    if with_values:
        case["v"] = draw(S.arrays((batch, heads, n_k, d_k)))
    case["causal"] = draw(st.booleans())
    case["key_mask"] = draw(st.none() | S.bool_masks((batch, n_k)))
    return case


@st.composite
def _logits_and_ids(draw, ids_name, low):
    batch, time, vocab = (draw(st.integers(1, 4)) for _ in range(3))
    ids = draw(S.arrays((batch, time), low, vocab - 1).map(lambda a: np.rint(a).astype(np.int64)))
    return {"logits": draw(S.arrays((batch, time, vocab))), ids_name: ids}


@st.composite
def _scores_and_mask(draw):
    batch, source = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    mask = draw(S.bool_masks((batch, source), all_false_row=False))
    mask[:, 0] = True   # every sentence has at least one real token
    return {"scores": draw(S.arrays((batch, source))), "mask": mask}


@st.composite
def _weights_and_memory(draw):
    batch, source, dim = (draw(st.integers(1, 4)) for _ in range(3))
    return {"weights": draw(S.arrays((batch, source), 0.0, 1.0)),
            "memory": draw(S.arrays((batch, source, dim)))}


def _causal_lm_reference(logits, labels):
    """The mean of -log P over the counted predictions: eq 18 (negated, averaged) per sequence."""
    total, count = 0.0, 0
    for b in range(logits.shape[0]):
        counted = labels[b] != -100
        total = total + reference_gpt.eq18_lm_objective(
            reference_gpt.softmax_rows(logits[b]), np.where(counted, labels[b], 0), counted)
        count += int(counted[1:].sum())
    return -total / count if count else 0.0 * anp.sum(logits)


_ATTENTION_ARGS = (
    ("q", "queries, float64 (batch, heads, n_q, d_k)"),
    ("k", "keys, float64 (batch, heads, n_k, d_k)"),
)
_MASK_ARGS = (
    ("causal", "bool: query i sees only keys j <= i + (n_k - n_q)"),
    ("key_mask", "None or bool (batch, n_k), False on padded keys; a query that sees no key "
                 "gets a row of zeros"),
)

_SPECS = (
    Spec(2, "sequence_log_prob",
         (("logits", "float64 (batch, T, V), teacher-forced scores of the next token"),
          ("targets", "int64 (batch, T), the target tokens; positions holding pad_id count "
                      "for nothing"),
          ("pad_id", "int, the padding id (0)")),
         "float64 (batch,): log P(y | x) = sum_t log softmax(logits[b, t])[y_t]",
         ("logits",),
         lambda: _logits_and_ids("targets", 0).map(lambda case: {**case, "pad_id": 0}),
         reference_seq2seq.eq02_sequence_log_prob,
         "minitorch_nlp.decoding:sequence_log_prob"),
    Spec(9, "alignment_weights",
         (("scores", "float64 (batch, S), the alignment scores e_j"),
          ("mask", "bool (batch, S), True at real source tokens (at least one per row)")),
         "float64 (batch, S): alpha_j = exp(e_j) / sum_k exp(e_k) over the real tokens, 0 on "
         "padding",
         ("scores",),
         _scores_and_mask,
         lambda scores, mask: anp.stack([reference_seq2seq.eq09_attention_weights(s, m)
                                         for s, m in zip(scores, mask)]),
         "minitorch_nlp.models.seq2seq:alignment_weights"),
    Spec(10, "context_vector",
         (("weights", "float64 (batch, S), the attention weights alpha_j"),
          ("memory", "float64 (batch, S, D), the encoder states h_j")),
         "float64 (batch, D): c = sum_j alpha_j h_j",
         ("weights", "memory"),
         _weights_and_memory,
         lambda weights, memory: anp.stack([reference_seq2seq.eq10_context_vector(w, m)
                                            for w, m in zip(weights, memory)]),
         "minitorch_nlp.models.seq2seq:context_vector"),
    Spec(11, "attention_weights",
         _ATTENTION_ARGS + _MASK_ARGS,
         "float64 (batch, heads, n_q, n_k): W_SM = softmax(Q K^T / sqrt(d_k)) over the keys",
         ("q", "k"),
         lambda: _attention_cases(False),
         lambda q, k, causal, key_mask: _per_head(reference_transformer.eq11_attention_weights,
                                                  key_mask, causal, q, k),
         "minitorch_nlp.functional:attention_weights",
         "The survey's eq 11 omits the 1/sqrt(d_k) scale; Vaswani et al. (2017, eq. 1) have it, "
         "and so must the candidate."),
    Spec(12, "scaled_dot_product_attention",
         _ATTENTION_ARGS + (("v", "values, float64 (batch, heads, n_k, d_k)"),) + _MASK_ARGS,
         "float64 (batch, heads, n_q, d_k): Z = softmax(Q K^T / sqrt(d_k)) V",
         ("q", "k", "v"),
         lambda: _attention_cases(True),
         lambda q, k, v, causal, key_mask: _per_head(
             reference_transformer.eq12_scaled_dot_product_attention, key_mask, causal, q, k, v),
         "minitorch_nlp.functional:scaled_dot_product_attention",
         "The library registers MultiHeadAttention for eq 12; this is its core, one call for "
         "all heads. The survey omits the 1/sqrt(d_k) scale (see eq 11)."),
    Spec(18, "causal_lm_loss",
         (("logits", "float64 (batch, T, V): position t predicts token t + 1"),
          ("labels", "int64 (batch, T), the token ids; -100 marks positions not predicted")),
         "float64 (): -L_1 / (number of predictions), labels shifted inside (position t is "
         "scored on labels[:, t + 1])",
         ("logits",),
         lambda: _logits_and_ids("labels", -1).map(
             lambda case: {**case, "labels": np.where(case["labels"] < 0, -100,
                                                      case["labels"])}),
         _causal_lm_reference,
         "minitorch_nlp.models.gpt:causal_lm_loss"),
)

specs: dict[int, Spec] = {spec.number: spec for spec in _SPECS}
"""The checkable equations, by number."""


# ---- running a check -----------------------------------------------------------------------------
def load_candidate(text: str) -> Callable:
    """The function named ``"package.module:function"`` (``function`` may be dotted)."""
    module_name, sep, attribute = text.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"check: name the candidate as 'package.module:function', got {text!r}")
    target = importlib.import_module(module_name)
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(f"check: {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"check: {text!r} is a {type(target).__name__}, not a function")
    return target


def _spec(number) -> Spec:
    from minitorch_nlp import cookbook

    number = cookbook._check_number(number)
    if number not in specs:
        raise ValueError(f"check: equation {number} ({cookbook.EQUATIONS[number].description}) "
                         f"has no spec yet; checkable equations: {sorted(specs)}")
    return specs[number]


def _show(value) -> str:
    if isinstance(value, np.ndarray):
        body = np.array2string(value, precision=6, separator=", ", threshold=200)
        return f"{value.dtype} {value.shape}\n      " + body.replace("\n", "\n      ")
    return repr(value)


def _diff(what, got, expected, tolerance) -> str | None:
    """None when ``got`` matches ``expected`` within ``tolerance``, else a readable report."""
    got, expected = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if got.shape != expected.shape:
        return f"{what}: shape {got.shape}, expected {expected.shape}"
    bad = ~np.isclose(got, expected, **tolerance) | (np.isnan(got) != np.isnan(expected))
    if not bad.any():
        return None
    worst = np.unravel_index(int(np.argmax(np.where(bad, np.abs(got - expected), -1))),
                             got.shape)
    return (f"{what}: {int(bad.sum())} of {bad.size} entries differ; worst at "
            f"{list(map(int, worst))}: got {got[worst]:.10g}, expected {expected[worst]:.10g}\n"
            f"    got      {_show(got)}\n    expected {_show(expected)}")


def _run_candidate(spec, candidate, case, cotangent_seed, inputs):
    """(output, gradients by name) of ``candidate`` on ``case``, with the cotangent drawn
    from ``cotangent_seed`` once the output's shape is known."""
    static = {name: case[name] for name, _ in spec.arguments if name not in spec.differentiable}
    arrays = [case[name] for name in spec.differentiable]
    if inputs == "numpy":
        vjp, out = autograd.make_vjp(lambda xs: candidate(*xs, **static))(tuple(arrays))
        out = np.asarray(out, dtype=np.float64)
        cotangent = np.random.default_rng(cotangent_seed).standard_normal(out.shape)
        return out, cotangent, dict(zip(spec.differentiable, vjp(cotangent)))
    tensors = [mt.tensor(a, dtype=mt.float64, requires_grad=True) for a in arrays]
    out = candidate(*tensors, **static)
    if not isinstance(out, mt.Tensor):
        raise TypeError(f"the candidate returned a {type(out).__name__}, not a minitorch_nlp "
                        "Tensor (pass inputs='numpy' for an autograd.numpy candidate)")
    cotangent = np.random.default_rng(cotangent_seed).standard_normal(out.shape)
    grads = mt.grad(out, tensors, grad_outputs=mt.tensor(cotangent, dtype=out.dtype),
                    allow_unused=True) if out.requires_grad else [None] * len(tensors)
    return out.numpy(), cotangent, {
        name: np.zeros(t.shape) if g is None else g.numpy()
        for name, t, g in zip(spec.differentiable, tensors, grads)}


def _shown(case) -> str:
    return "inputs (shrunk by hypothesis):\n" + "\n".join(
        f"  {key} = {_show(value)}" for key, value in case.items())


def _compare(spec, candidate, name, case, seed, inputs):
    try:
        got, cotangent, grads = _run_candidate(spec, candidate, case, seed, inputs)
    except TaskNotDone:
        raise
    except Exception as error:   # noqa: BLE001 - any failure of the candidate is reported
        raise EquationMismatch(f"eq {spec.number}: {name} raised {type(error).__name__}: "
                               f"{error}\n{_shown(case)}", case) from error
    expected = spec.reference(**case)
    problem = _diff("value", got, expected, FORWARD)
    if problem is None:
        def loss(*arrays):
            full = dict(case, **dict(zip(spec.differentiable, arrays)))
            return anp.sum(spec.reference(**full) * cotangent)

        for i, arg in enumerate(spec.differentiable):
            want = autograd.grad(loss, i)(*(case[a] for a in spec.differentiable))
            problem = _diff(f"gradient with respect to {arg} (of <output, cotangent>)",
                            grads[arg], want, GRADIENT)
            if problem is not None:
                problem += f"\n    cotangent {_show(cotangent)}"
                break
    if problem is not None:
        raise EquationMismatch(f"eq {spec.number}: {name} differs from the reference "
                               f"{spec.signature}\n{_shown(case)}\n{problem}", case)


@dataclass(frozen=True)
class CheckResult:
    """A passed check: the equation and how many examples agreed."""

    number: int
    examples: int


def check_equation(n: int, candidate: Callable, *, max_examples: int | None = None,
                   inputs: str = "tensors") -> CheckResult:
    """Property-test ``candidate`` as an implementation of equation ``n`` (see ``specs[n]`` for
    the signature it must have).

    Draws float64 inputs with hypothesis (``max_examples`` of them; default: the active
    hypothesis profile's), compares the values (rtol 1e-9) and the gradients of
    ``<output, cotangent>`` for a random cotangent (rtol 1e-7) with HIPS autograd's on the
    reference. ``inputs`` is ``"tensors"`` (the candidate uses minitorch_nlp Tensors) or
    ``"numpy"`` (it uses ``autograd.numpy`` on arrays). Returns a :class:`CheckResult`; raises
    :class:`EquationMismatch` with the shrunk counter-example and a diff when they differ, and
    lets :class:`TaskNotDone` from a course stub through.
    """
    spec = _spec(n)
    if inputs not in INPUT_KINDS:
        raise ValueError(f"check_equation: inputs must be one of {INPUT_KINDS}, got {inputs!r}")
    if not callable(candidate):
        raise TypeError(f"check_equation: the candidate must be callable, got "
                        f"{type(candidate).__name__}")
    name = getattr(candidate, "__qualname__", repr(candidate))
    examples = 0
    not_done = []   # a stub fails on every input: report it at once instead of shrinking

    @settings(max_examples=max_examples or settings().max_examples, deadline=None,
              database=None, report_multiple_bugs=False, print_blob=False,
              phases=[phase for phase in Phase if phase is not Phase.explain],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(spec.cases(), S.seeds())
    def run(case, seed):
        nonlocal examples
        if not_done:
            return
        examples += 1
        try:
            _compare(spec, candidate, name, case, seed, inputs)
        except TaskNotDone as error:
            not_done.append(error)

    run()
    if not_done:
        raise not_done[0]
    return CheckResult(spec.number, examples)
