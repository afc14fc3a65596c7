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

A values-only spec (no differentiable arguments: a search, a table of probabilities, a
quantiser) passes every argument by keyword and compares values alone; its candidate may return
NumPy arrays, a ``Tensor``, or a tuple of them (each part compared with the reference's).

The project's own tests go through this same function for their reference comparisons.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from collections.abc import Callable

import autograd
import autograd.numpy as anp
import numpy as np
from hypothesis import HealthCheck, Phase, given, settings

import minitorch_nlp as mt

from . import equation_specs
from . import strategies as S
from .spec import Spec, load_candidate

__all__ = ["EquationMismatch", "Spec", "TaskNotDone", "candidate_name", "check_equation",
           "load_candidate", "specs"]

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


specs: dict[int, Spec] = equation_specs.collect()
"""The checkable equations, by number (from :mod:`minitorch_nlp.testing.equation_specs`)."""


# ---- running a check -----------------------------------------------------------------------------
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


def _where(index) -> str:
    return str(list(map(int, index)))


def _mismatch(got, expected, tolerance) -> str | None:
    """None when ``got`` matches ``expected`` within ``tolerance``, else one line: how many
    entries differ, and the largest absolute and relative errors and where they are."""
    bad = ~np.isclose(got, expected, **tolerance) | (np.isnan(got) != np.isnan(expected))
    if not bad.any():
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        error = np.abs(got - expected)
        relative = error / np.abs(expected)
    error = np.where(np.isnan(error), np.inf, error)
    relative = np.where(np.isnan(relative), np.inf, relative)
    worst = np.unravel_index(int(np.argmax(np.where(bad, error, -1))), got.shape)
    worst_relative = np.unravel_index(int(np.argmax(np.where(bad, relative, -1))), got.shape)
    return (f"{int(bad.sum())} of {bad.size} entries differ; max abs error "
            f"{error[worst]:.3g} at {_where(worst)} (got {got[worst]:.10g}, expected "
            f"{expected[worst]:.10g}), max rel error {relative[worst_relative]:.3g} at "
            f"{_where(worst_relative)}")


def _diff(what, got, expected, tolerance) -> str | None:
    """None when ``got`` matches ``expected`` within ``tolerance``, else a readable report."""
    got, expected = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if got.shape != expected.shape:
        return f"{what}: shape {got.shape}, expected {expected.shape}"
    summary = _mismatch(got, expected, tolerance)
    if summary is None:
        return None
    return f"{what}: {summary}\n    got      {_show(got)}\n    expected {_show(expected)}"


def _factor_name(factor, case) -> str:
    """`` (= sqrt(2))`` when ``factor`` is a familiar function of a size in ``case``."""
    sizes = sorted({size for value in case.values() if isinstance(value, np.ndarray)
                    for size in value.shape if size > 1})
    for size in sizes:
        for name, candidate in ((f"sqrt({size})", np.sqrt(size)),
                                (f"1/sqrt({size})", 1 / np.sqrt(size)),
                                (f"{size}", size), (f"1/{size}", 1 / size)):
            if np.isclose(factor, candidate, rtol=1e-6):
                return f" (= {name})"
    return ""


def _gradient_hint(arg, got, expected, case) -> str:
    """What a gradient that differs while the values agree usually means, read from how the
    two differ."""
    tiny = 1e-12
    if np.all(np.abs(got) <= tiny):
        return (f"no gradient reaches {arg}: a detached path (.detach(), maths on .numpy() "
                f"or .data, a no_grad block), or {arg} not used at all")
    if np.allclose(got, -expected, rtol=1e-6, atol=tiny):
        return (f"the gradient with respect to {arg} has the opposite sign: a difference or a "
                "direction reversed where the value is the same at this example (KL(q || p) for "
                "KL(p || q), a - b for b - a)")
    nonzero = np.abs(expected) > tiny
    if nonzero.any() and np.all(np.abs(got[~nonzero]) <= tiny):
        ratios = got[nonzero] / expected[nonzero]
        if np.allclose(ratios, ratios[0], rtol=1e-6):
            return (f"the gradient with respect to {arg} is {ratios[0]:.6g}"
                    f"{_factor_name(ratios[0], case)} times the reference's: a missing or extra "
                    "constant factor (the 1/sqrt(d_k) scale, a temperature, 1/(1-p), a mean for "
                    "a sum) that the values do not show at this example")
    if got.ndim >= 2 and got.shape[-1] == got.shape[-2] and \
            np.allclose(got, np.swapaxes(expected, -1, -2), rtol=1e-6, atol=tiny):
        return (f"the gradient with respect to {arg} is the reference's transposed: a "
                "transposed product (x @ W for x @ W.T, k^T q for q k^T)")
    return ("the values agree here but the gradient does not: part of the computation is "
            "hidden from the engine (maths on .numpy() or .data, a detached normaliser), a "
            "custom backward is wrong, or the formula coincides with the right one only at this "
            "example (a missing scale, a reversed direction, a transposed product)")


def _gradient_report(case, grads, wanted, cotangent, differentiable) -> str | None:
    """None when every gradient agrees, else which inputs' gradients differ, by how much, what
    that usually means, and the first differing one in full."""
    lines, first = [], None
    for arg, want in zip(differentiable, wanted):
        got, want = np.asarray(grads[arg], dtype=np.float64), np.asarray(want, np.float64)
        if got.shape != want.shape:
            summary = f"shape {got.shape}, expected {want.shape}"
        else:
            summary = _mismatch(got, want, GRADIENT)
        lines.append(f"  with respect to {arg}: {summary or 'agrees'}")
        if summary is not None and first is None:
            first = (arg, got, want)
    if first is None:
        return None
    arg, got, want = first
    report = ["the values agree with the reference; the gradient (of <output, cotangent>) "
              "differs:", *lines]
    if got.shape == want.shape:
        report += [f"hint: {_gradient_hint(arg, got, want, case)}",
                   f"gradient with respect to {arg}:", f"    got      {_show(got)}",
                   f"    expected {_show(want)}"]
    report.append(f"    cotangent {_show(cotangent)}")
    return "\n".join(report)


def _as_values(out):
    """A values-only candidate's output as NumPy: a tuple part by part."""
    if isinstance(out, tuple):
        return tuple(_as_values(part) for part in out)
    return out.numpy() if isinstance(out, mt.Tensor) else np.asarray(out)


def _diff_parts(got, expected) -> str | None:
    """``_diff`` of each part of a values-only spec's tuple output."""
    if not isinstance(got, tuple) or len(got) != len(expected):
        length = len(got) if isinstance(got, tuple) else "not a tuple"
        return f"value: a tuple of {len(expected)} arrays expected, got {length}"
    for i, (part, want) in enumerate(zip(got, expected)):
        problem = _diff(f"value[{i}]", part, want, FORWARD)
        if problem is not None:
            return problem
    return None


def _run_candidate(spec, candidate, case, cotangent_seed, inputs):
    """(output, cotangent, gradients by name) of ``candidate`` on ``case``, with the cotangent
    drawn from ``cotangent_seed`` once the output's shape is known."""
    static = {name: case[name] for name, _ in spec.arguments if name not in spec.differentiable}
    if not spec.differentiable:
        return _as_values(candidate(**static)), None, {}
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
    if isinstance(expected, tuple):
        problem = _diff_parts(got, expected)
    else:
        problem = _diff("value", got, expected, FORWARD)
    if problem is None and spec.differentiable:
        def loss(*arrays):
            full = dict(case, **dict(zip(spec.differentiable, arrays)))
            return anp.sum(spec.reference(**full) * cotangent)

        with warnings.catch_warnings():   # a reference that ignores an input (an all-masked
            warnings.filterwarnings(      # row, lm_coef = 0) has a zero gradient: expected
                "ignore", "Output seems independent of input", UserWarning)
            wanted = autograd.grad(loss, tuple(range(len(spec.differentiable))))(   # one pass
                *(case[a] for a in spec.differentiable))
        problem = _gradient_report(case, grads, wanted, cotangent, spec.differentiable)
    if problem is not None:
        raise EquationMismatch(f"eq {spec.number}: {name} differs from the reference "
                               f"{spec.signature}\n{_shown(case)}\n{problem}", case)


@dataclass(frozen=True)
class CheckResult:
    """A passed check: the equation and how many examples agreed."""

    number: int
    examples: int


def candidate_name(candidate: Callable) -> str:
    """``module:function``, the name the ``check`` command takes."""
    qualname = getattr(candidate, "__qualname__", None)
    module = getattr(candidate, "__module__", None)
    if qualname is None:
        return repr(candidate)
    return f"{module}:{qualname}" if module else qualname


def check_equation(n: int, candidate: Callable, *, max_examples: int | None = None,
                   inputs: str = "tensors", name: str | None = None) -> CheckResult:
    """Property-test ``candidate`` as an implementation of equation ``n`` (see ``specs[n]`` for
    the signature it must have).

    Draws float64 inputs with hypothesis (``max_examples`` of them; default: the active
    hypothesis profile's), compares the values (rtol 1e-9) and the gradients of
    ``<output, cotangent>`` for a random cotangent (rtol 1e-7) with HIPS autograd's on the
    reference. ``inputs`` is ``"tensors"`` (the candidate uses minitorch_nlp Tensors) or
    ``"numpy"`` (it uses ``autograd.numpy`` on arrays). Returns a :class:`CheckResult`; raises
    :class:`EquationMismatch` with the shrunk counter-example and a diff when they differ, and
    lets :class:`TaskNotDone` from a course stub through. The messages call the candidate
    ``name`` (default: ``module:function``, as the ``check`` command names it).
    """
    spec = _spec(n)
    if inputs not in INPUT_KINDS:
        raise ValueError(f"check_equation: inputs must be one of {INPUT_KINDS}, got {inputs!r}")
    if not callable(candidate):
        raise TypeError(f"check_equation: the candidate must be callable, got "
                        f"{type(candidate).__name__}")
    name = name or candidate_name(candidate)
    examples = 0
    not_done = []

    def run(count):
        @settings(max_examples=count, deadline=None, database=None, report_multiple_bugs=False,
                  print_blob=False, phases=[phase for phase in Phase if phase is not Phase.explain],
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(spec.cases(), S.seeds())
        def one(case, seed):
            nonlocal examples
            if not_done:
                return
            examples += 1
            try:
                _compare(spec, candidate, name, case, seed, inputs)
            except TaskNotDone as error:
                not_done.append(error)

        one()
        if not_done:
            raise not_done[0]

    # a stub fails on every input: one example first reports it at once, instead of drawing
    # (and, for a model-level spec, building) every case of the full run
    total = max_examples or settings().max_examples
    run(1)
    if total > 1:
        run(total - 1)
    return CheckResult(spec.number, examples)
