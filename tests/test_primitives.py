"""Every primitive of the engine against its NumPy expression, differentiated by HIPS autograd.

One table, ``CASES``, lists each operation as (name, engine call, reference in
``minitorch_nlp/testing/reference/primitives.py``, input strategy). The input strategy draws float64
arrays (in the operation's safe domain, sometimes as non-contiguous views) and the static arguments,
which are passed to both sides as keywords. Three properties are checked for every row:

* forward: the engine's output equals the reference's (bit for bit for pure data movement);
* first order: ``backward`` with a random cotangent u equals ``autograd.make_vjp`` of the
  reference applied to u (float64, rtol 1e-7, or exactly for data movement);
* second order: for L = sum(u * y * y) (so that the gradient flowing into the operation's backward
  itself depends on x), ``mt.grad(mt.grad(L, create_graph=True) . v)`` equals autograd's
  Hessian-vector product of L.

Broadcast pairs, a tensor used twice, and transposed / strided inputs are rows of their own or
come from the strategies.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Callable

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from autograd.tracer import getval
from hypothesis import given, strategies as st

import minitorch_nlp as mt
import minitorch_nlp.functional as F
from minitorch_nlp.autograd.ops_fused import LayerNorm
from minitorch_nlp.testing import strategies as S
from minitorch_nlp.testing.reference import primitives as P

RTOL = 1e-7
ATOL = 1e-10
HVP_RTOL = 1e-7
HVP_ATOL = 1e-9


@dataclass
class Case:
    name: str
    engine: Callable      # (*tensors, **static) -> Tensor or tuple of Tensors
    reference: Callable   # (*arrays, **static) -> array or tuple of arrays, in autograd.numpy
    inputs: st.SearchStrategy  # draws (tuple of float64 arrays, dict of static arguments)
    exact: bool = False   # data movement only: values and gradients equal bit for bit


# ---- input strategies ----------------------------------------------------------------------------
def lay(strategy):
    return S.maybe_noncontiguous(strategy)


@st.composite
def unary(draw, domain=S.arrays, shapes=None):
    shape = draw(shapes if shapes is not None else S.shapes())
    return (draw(lay(domain(shape))),), {}


@st.composite
def binary(draw, domain_a=S.arrays, domain_b=S.arrays, max_dims=3):
    shape_a, shape_b = draw(S.broadcastable_shapes(2, max_dims=max_dims))
    return (draw(lay(domain_a(shape_a))), draw(lay(domain_b(shape_b)))), {}


@st.composite
def with_constant(draw, domain=S.arrays):
    """x and a NumPy constant ``c`` that broadcasts with it."""
    shape_x, shape_c = draw(S.broadcastable_shapes(2))
    return (draw(lay(domain(shape_x))),), {"c": draw(S.arrays(shape_c))}


@st.composite
def reduction(draw, domain=S.arrays, ddof=False, shapes=None):
    shape = draw(shapes if shapes is not None else S.shapes())
    x = draw(lay(domain(shape)))
    static = {"axis": draw(S.axes(len(shape))), "keepdims": draw(st.booleans())}
    if ddof:
        axes = P._axes(static["axis"], len(shape))
        count = int(np.prod([shape[a] for a in axes], dtype=np.int64))
        static["ddof"] = draw(st.integers(0, 1)) if count > 1 else 0
    return (x,), static


@st.composite
def along_axis(draw, domain=S.arrays, min_dims=1, min_side=1, allow_none=False):
    shape = draw(S.shapes(min_dims=min_dims, min_side=min_side))
    x = draw(lay(domain(shape)))
    axis = draw(st.none() | S.axis(len(shape)) if allow_none else S.axis(len(shape)))
    return (x,), {"axis": axis}


@st.composite
def with_zeros(draw, shape):
    x = draw(S.arrays(shape, -2.0, 2.0))
    zeros = draw(S.bool_masks(shape, all_false_row=False))
    return np.where(zeros, 0.0, x)


@st.composite
def layer_norm_inputs(draw):
    shape = draw(S.shapes(min_dims=1))
    d = shape[-1]
    x = draw(lay(S.arrays(shape)))
    weight = draw(lay(S.arrays((d,))))
    bias = draw(S.arrays((d,)))
    return (x, weight, bias), {"eps": draw(st.sampled_from([1e-5, 1e-3]))}


@st.composite
def reshape_inputs(draw):
    shape = draw(S.shapes())
    size = int(np.prod(shape, dtype=np.int64))
    target = draw(st.sampled_from([
        (size,), (-1,), tuple(reversed(shape)), shape + (1,), (1,) + shape,
        tuple(-1 if i == 0 else n for i, n in enumerate(shape)) or (1,),
    ]))
    return (draw(lay(S.arrays(shape))),), {"shape": target}


@st.composite
def permutation_inputs(draw):
    shape = draw(S.shapes(min_dims=1))
    perm = tuple(draw(st.permutations(range(len(shape)))))
    return (draw(lay(S.arrays(shape))),), {"axes": perm}


@st.composite
def two_axes_inputs(draw):
    shape = draw(S.shapes(min_dims=1))
    return (draw(lay(S.arrays(shape))),), {"axis1": draw(S.axis(len(shape))),
                                           "axis2": draw(S.axis(len(shape)))}


@st.composite
def squeeze_inputs(draw):
    shape = list(draw(S.shapes(min_dims=1)))
    position = draw(st.integers(0, len(shape) - 1))
    shape[position] = 1
    axis = draw(st.sampled_from([None, position, position - len(shape)]))
    return (draw(lay(S.arrays(tuple(shape)))),), {"axis": axis}


@st.composite
def unsqueeze_inputs(draw):
    shape = draw(S.shapes())
    return (draw(lay(S.arrays(shape))),), {"axis": draw(st.integers(-len(shape) - 1, len(shape)))}


@st.composite
def broadcast_inputs(draw):
    shape = draw(S.shapes())
    target = draw(S.broadcast_targets(shape))
    return (draw(lay(S.arrays(shape))),), {"shape": target}


@st.composite
def concatenate_inputs(draw):
    shape = draw(S.shapes(min_dims=1))
    axis = draw(S.axis(len(shape)))
    count = draw(st.integers(1, 3))
    xs = []
    for _ in range(count):
        piece = list(shape)
        piece[axis] = draw(st.integers(1, 3))
        xs.append(draw(lay(S.arrays(tuple(piece)))))
    return tuple(xs), {"axis": axis}


@st.composite
def stack_inputs(draw):
    shape = draw(S.shapes())
    count = draw(st.integers(1, 3))
    xs = tuple(draw(lay(S.arrays(shape))) for _ in range(count))
    return xs, {"axis": draw(st.integers(-len(shape) - 1, len(shape)))}


@st.composite
def split_inputs(draw, as_list):
    shape = draw(S.shapes(min_dims=1))
    axis = draw(S.axis(len(shape)))
    n = shape[axis]
    if as_list:
        cuts = sorted(draw(st.lists(st.integers(0, n), max_size=3)))
        sections = [b - a for a, b in zip([0] + cuts, cuts + [n])]
    else:
        sections = draw(st.integers(1, n))
    return (draw(lay(S.arrays(shape))),), {"sections": sections, "axis": axis}


@st.composite
def unbind_inputs(draw):
    shape = draw(S.shapes(min_dims=1))
    return (draw(lay(S.arrays(shape))),), {"axis": draw(S.axis(len(shape)))}


@st.composite
def pad_inputs(draw):
    shape = draw(S.shapes(min_dims=1))
    widths = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
    return (draw(lay(S.arrays(shape))),), {"pad_width": widths,
                                           "value": draw(st.sampled_from([0.0, -1.5]))}


@st.composite
def flip_inputs(draw):
    shape = draw(S.shapes(min_dims=1))
    return (draw(lay(S.arrays(shape))),), {"axis": draw(S.axes(len(shape)))}


@st.composite
def roll_inputs(draw):
    shape = draw(S.shapes(min_dims=1))
    kind = draw(st.sampled_from(["flat", "one", "several"]))
    if kind == "flat":
        static = {"shift": draw(st.integers(-5, 5)), "axis": None}
    elif kind == "one":
        static = {"shift": draw(st.integers(-5, 5)), "axis": draw(S.axis(len(shape)))}
    else:
        axes = tuple(draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True)))
        static = {"shift": tuple(draw(st.integers(-5, 5)) for _ in axes), "axis": axes}
    return (draw(lay(S.arrays(shape))),), static


@st.composite
def triangle_inputs(draw):
    shape = draw(S.shapes(min_dims=2))
    return (draw(lay(S.arrays(shape))),), {"k": draw(st.integers(-2, 2))}


@st.composite
def where_inputs(draw):
    shape_a, shape_b, shape_c = draw(S.broadcastable_shapes(3))
    return ((draw(lay(S.arrays(shape_a))), draw(lay(S.arrays(shape_b)))),
            {"condition": draw(S.bool_masks(shape_c))})


@st.composite
def masked_fill_inputs(draw):
    shape = draw(S.shapes())
    mask_shape = shape[draw(st.integers(0, len(shape))):]  # a trailing part broadcasts
    return ((draw(lay(S.arrays(shape))),),
            {"mask": draw(S.bool_masks(mask_shape)), "value": draw(st.sampled_from([0.0, -1e4]))})


@st.composite
def basic_index_inputs(draw):
    shape = draw(S.shapes(min_dims=1))
    parts = []
    for n in shape:
        parts.append(draw(st.one_of(
            st.integers(-n, n - 1),
            st.builds(slice, st.none() | st.integers(-n, n), st.none() | st.integers(-n, n),
                      st.none() | st.sampled_from([1, 2, -1, -2])),
        )))
    if draw(st.booleans()):
        parts.insert(draw(st.integers(0, len(parts))), None)
    if draw(st.booleans()) and len(parts) > 1:
        parts = parts[:1] + [Ellipsis]
    return (draw(lay(S.arrays(shape))),), {"index": tuple(parts)}


@st.composite
def int_array_index_inputs(draw):
    """One integer array (with repeats, negatives) on one axis, slices elsewhere, or two arrays
    that broadcast together."""
    shape = draw(S.shapes(min_dims=1))
    kind = draw(st.sampled_from(["first", "other", "two"] if len(shape) > 1 else ["first"]))
    if kind == "first":
        index = draw(S.index_arrays(shape[0], shape=S.shapes(min_dims=1, max_dims=2)))
    elif kind == "other":
        ax = draw(st.integers(1, len(shape) - 1))
        index = (slice(None),) * ax + (draw(S.index_arrays(shape[ax])),)
    else:
        length = draw(st.integers(1, 4))
        index = (draw(S.index_arrays(shape[0], shape=(length,))),
                 draw(S.index_arrays(shape[1], shape=st.sampled_from([(length,), (1,)]))))
    return (draw(lay(S.arrays(shape))),), {"index": index}


@st.composite
def bool_index_inputs(draw):
    shape = draw(S.shapes(min_dims=1))
    k = draw(st.integers(1, len(shape)))
    mask = draw(S.bool_masks(shape[:k]))
    tail = (slice(None, None, draw(st.sampled_from([1, 2]))),) if k < len(shape) else ()
    return (draw(lay(S.arrays(shape))),), {"index": (mask,) + tail}


@st.composite
def mixed_index_inputs(draw):
    """Slices mixed with an integer array: x[1:, idx], x[idx, ::-1], x[None, idx, 0]."""
    shape = draw(S.shapes(min_dims=2))
    idx = draw(S.index_arrays(shape[1]))
    first = draw(S.index_arrays(shape[0]))
    index = draw(st.sampled_from([
        (slice(1, None), idx), (first, slice(None, None, -1)), (None, first, 0),
        (Ellipsis, idx) if len(shape) == 2 else (slice(None), idx, slice(None, 2)),
    ]))
    return (draw(lay(S.arrays(shape))),), {"index": index}


@st.composite
def take_along_inputs(draw):
    shape = draw(S.shapes(min_dims=1))
    axis = draw(st.integers(0, len(shape) - 1))
    index = draw(S.index_arrays_for(shape, axis))
    return (draw(lay(S.arrays(shape))),), {"index": index, "axis": axis}


@st.composite
def scatter_add_inputs(draw):
    shape = draw(S.shapes(min_dims=1))
    axis = draw(st.integers(0, len(shape) - 1))
    index = draw(S.index_arrays_for(shape, axis))
    return (draw(lay(S.arrays(shape))), draw(lay(S.arrays(index.shape)))), \
        {"index": index, "axis": axis}


@st.composite
def scatter_reduce_inputs(draw):
    shape = draw(S.shapes(min_dims=1))
    axis = draw(st.integers(0, len(shape) - 1))
    index = draw(S.index_arrays_for(shape, axis))
    return (draw(lay(distinct(shape))), draw(lay(shifted(index.shape)))), \
        {"index": index, "axis": axis,
         "reduce": draw(st.sampled_from(["sum", "prod", "mean", "amax", "amin"])),
         "include_self": draw(st.booleans())}


@st.composite
def scatter_inputs(draw):
    """One write per position at most: the index has size 1 along the axis."""
    shape = draw(S.shapes(min_dims=1))
    axis = draw(st.integers(0, len(shape) - 1))
    index_shape = shape[:axis] + (1,) + shape[axis + 1:]
    index = draw(S.index_arrays(shape[axis], shape=index_shape))
    return (draw(lay(S.arrays(shape))), draw(lay(S.arrays(index_shape)))), \
        {"index": index, "axis": axis}


@st.composite
def index_select_inputs(draw):
    shape = draw(S.shapes(min_dims=1))
    axis = draw(st.integers(0, len(shape) - 1))
    return (draw(lay(S.arrays(shape))),), {"index": draw(S.index_arrays(shape[axis])),
                                           "axis": axis}


@st.composite
def sort_inputs(draw, topk=False):
    shape = draw(S.shapes(min_dims=1))
    axis = draw(S.axis(len(shape)))
    static = {"axis": axis}
    if topk:
        static["k"] = draw(st.integers(0, shape[axis]))
        static["largest"] = draw(st.booleans())
    else:
        static["descending"] = draw(st.booleans())
    return (draw(lay(S.distinct_arrays(shape))),), static


@st.composite
def matmul_inputs(draw):
    n, k, m = (draw(st.integers(1, 4)) for _ in range(3))
    kind = draw(st.sampled_from(["1@1", "1@2", "2@1", "2@2", "batched", "3@2", "2@3", "1@3",
                                 "3@1"]))
    batch_a, batch_b = draw(S.broadcastable_shapes(2, min_dims=1, max_dims=2, max_side=3))
    shape_a, shape_b = {
        "1@1": ((k,), (k,)), "1@2": ((k,), (k, m)), "2@1": ((n, k), (k,)),
        "2@2": ((n, k), (k, m)), "batched": (batch_a + (n, k), batch_b + (k, m)),
        "3@2": ((2, n, k), (k, m)), "2@3": ((n, k), (2, k, m)),
        "1@3": ((k,), (2, k, m)), "3@1": ((2, n, k), (k,)),
    }[kind]
    return (draw(lay(S.arrays(shape_a))), draw(lay(S.arrays(shape_b)))), {}


def sized(*letters):
    """Inputs for an einsum whose operands have the given letter strings: one size per letter."""
    @st.composite
    def draw_inputs(draw):
        sizes = {}
        arrays = []
        for term in letters:
            shape = []
            for c in term:
                if c == ".":
                    continue
                sizes.setdefault(c, draw(st.integers(1, 3)))
                shape.append(sizes[c])
            if "..." in term:
                shape = list(draw(S.shapes(max_dims=2, max_side=2))) + shape
            arrays.append(draw(lay(S.arrays(tuple(shape)))))
        return tuple(arrays), {}
    return draw_inputs()


SPELLINGS = ["tuple", "list", "array", "tensor", "tuple_axis1", "list_axis1", "tensor_axis1",
             "tuple_pair", "list_and_tuple", "tensor_and_list", "ellipsis_tuple", "none_tuple"]


@st.composite
def repeated_index_inputs(draw):
    """Positions with repeats, spelled every way an index can be written (issue 11: a tuple of
    positions used to lose its repeats in the backward)."""
    n0, n1 = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    first = tuple(draw(st.lists(st.integers(-n0, n0 - 1), min_size=1, max_size=5)))
    second = tuple(draw(st.lists(st.integers(-n1, n1 - 1), min_size=len(first),
                                 max_size=len(first))))
    spelling = draw(st.sampled_from(SPELLINGS))
    return (draw(lay(S.arrays((n0, n1)))),), {"positions": (first, second), "spelling": spelling}


def spelled_index(positions, spelling):
    """The index the engine gets, in the chosen spelling."""
    first, second = positions
    return {
        "tuple": (first,), "list": list(first), "array": np.array(first),
        "tensor": mt.tensor(list(first)), "tuple_axis1": (slice(None), second),
        "list_axis1": (slice(None), list(second)), "tensor_axis1": (slice(None), mt.tensor(second)),
        "tuple_pair": (first, second), "list_and_tuple": (list(first), second),
        "tensor_and_list": (mt.tensor(first), list(second)),
        "ellipsis_tuple": (Ellipsis, second), "none_tuple": (None, first),
    }[spelling]


def numpy_index(positions, spelling):
    """The same selection for the reference, every position list as an integer array."""
    index = spelled_index(positions, spelling)

    def convert(i):
        return np.asarray(i) if isinstance(i, (tuple, list, mt.Tensor)) else i

    return tuple(convert(i) for i in index) if isinstance(index, tuple) else convert(index)


@st.composite
def index_select_spellings(draw):
    shape = draw(S.shapes(min_dims=1))
    axis = draw(st.integers(0, len(shape) - 1))
    positions = draw(st.lists(st.integers(0, shape[axis] - 1), min_size=1, max_size=5))
    return (draw(lay(S.arrays(shape))),), {"index": positions, "axis": axis,
                                           "spelling": draw(st.sampled_from([tuple, list]))}


@st.composite
def norm_inputs(draw):
    shape = draw(S.shapes(min_dims=1))
    p = draw(st.sampled_from([1, 2, 3, math.inf, "fro"]))
    x = draw(lay((S.distinct_arrays if p == math.inf else S.nonzero_arrays)(shape)))
    return (x,), {"p": p, "axis": draw(S.axes(len(shape))), "keepdims": draw(st.booleans())}


@st.composite
def tile_inputs(draw):
    shape = draw(S.shapes(max_side=3))
    reps = tuple(draw(st.lists(st.integers(0, 2), min_size=0, max_size=3)))
    return (draw(lay(S.arrays(shape))),), {"reps": reps}


@st.composite
def repeat_interleave_inputs(draw):
    shape = draw(S.shapes(min_dims=1, max_side=3))
    axis = draw(st.integers(0, len(shape) - 1))
    repeats = draw(st.integers(0, 3) | st.lists(st.integers(0, 2), min_size=shape[axis],
                                                max_size=shape[axis]))
    return (draw(lay(S.arrays(shape))),), {"repeats": repeats, "axis": axis}


@st.composite
def diagonal_inputs(draw):
    shape = draw(S.shapes(min_dims=2))
    axis1, axis2 = draw(st.permutations(range(len(shape))))[:2]
    return (draw(lay(S.arrays(shape))),), {"offset": draw(st.integers(-2, 2)), "axis1": axis1,
                                           "axis2": axis2}


@st.composite
def masked_select_inputs(draw):
    shape_x, shape_mask = draw(S.broadcastable_shapes(2))
    return (draw(lay(S.arrays(shape_x))),), {"mask": draw(S.bool_masks(shape_mask))}


@st.composite
def unfold_inputs(draw):
    shape = draw(S.shapes(min_dims=1))
    axis = draw(st.integers(0, len(shape) - 1))
    size = draw(st.integers(0, shape[axis]))
    return (draw(lay(S.arrays(shape))),), {"axis": axis, "size": size,
                                           "step": draw(st.integers(1, 3))}


@st.composite
def pad_mode_inputs(draw):
    shape = draw(S.shapes(min_dims=1, min_side=2))
    mode = draw(st.sampled_from(["replicate", "reflect", "circular"]))
    limit = {"reflect": -1, "replicate": 2, "circular": 0}[mode]
    # replicate takes any width, wider than the axis too (PyTorch's rule)
    widths = tuple((draw(st.integers(0, min(2, n + limit) if mode != "replicate" else n + 3)),
                    draw(st.integers(0, min(2, n + limit) if mode != "replicate" else n + 3)))
                   for n in shape)
    return (draw(lay(S.arrays(shape))),), {"pad_width": widths, "mode": mode}


@st.composite
def crop_and_pad_inputs(draw):
    """One side of an axis cropped, the other padded (mirrors and wraps about the whole axis)."""
    (x,), static = draw(pad_mode_inputs())
    widths = []
    for (before, after), n in zip(static["pad_width"], x.shape):
        crop = draw(st.integers(0, n - 1))
        widths.append((-crop, after) if draw(st.booleans()) else (before, -crop))
    return (x,), {"pad_width": tuple(widths), "mode": static["mode"]}


def padded_then_cropped(x, pad_width, mode):
    grown = P.pad_mode(x, [(max(b, 0), max(a, 0)) for b, a in pad_width], mode)
    return grown[tuple(slice(-min(b, 0), grown.shape[i] + min(a, 0))
                       for i, (b, a) in enumerate(pad_width))]


@st.composite
def halves_inputs(draw):
    shape = list(draw(S.shapes(min_dims=1)))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    shape[axis] = 2 * draw(st.integers(1, 2))
    return (draw(lay(S.arrays(tuple(shape)))),), {"axis": axis}


@st.composite
def softplus_beta_inputs(draw):
    shape = draw(S.shapes())
    return (draw(lay(shifted(shape))),), {"beta": draw(st.sampled_from([0.5, 1.0, 2.0])),
                                          "threshold": draw(st.sampled_from([None, 1.0, 20.0]))}


@st.composite
def normalize_inputs(draw):
    shape = draw(S.shapes(min_dims=1))
    return (draw(lay(S.nonzero_arrays(shape))),), {"p": draw(st.sampled_from([1.0, 2.0, 3.0])),
                                                   "axis": draw(S.axis(len(shape)))}


@st.composite
def nonnegative_axis_inputs(draw):
    shape = draw(S.shapes(min_dims=1))
    return (draw(lay(S.arrays(shape))),), {"axis": draw(st.integers(0, len(shape) - 1))}


@st.composite
def unary_with(draw, shapes, **statics):
    shape = draw(shapes)
    return (draw(lay(S.arrays(shape))),), {k: draw(v) for k, v in statics.items()}


@st.composite
def binary_vectors(draw):
    first, second = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    return (draw(S.arrays((first,))), draw(S.arrays((second,)))), {}


@st.composite
def probabilities_and_targets(draw):
    shape = draw(S.shapes())
    return (draw(lay(S.arrays(shape, 0.05, 0.95))), draw(S.arrays(shape, 0.0, 1.0))), {}


# ---- the table -----------------------------------------------------------------------------------
def C(name, engine, reference, inputs, exact=False):
    return pytest.param(Case(name, engine, reference, inputs, exact), id=name)


nonzero = S.nonzero_arrays
positive = S.positive_arrays
distinct = S.distinct_arrays


def shifted(shape):
    return S.distinct_arrays(shape, offset=0.05)


# references of the ops added for issue 39, written from their definitions
def ref_quick_gelu(x):
    return x / (1.0 + anp.exp(-1.702 * x))


def ref_softmin(x, axis):
    e = anp.exp(-x)
    return e / anp.sum(e, axis=axis, keepdims=True)


def ref_celu(x, alpha):
    return anp.maximum(0.0, x) + anp.minimum(0.0, alpha * (anp.exp(x / alpha) - 1.0))


def ref_copysign(a, b):
    return anp.abs(a) * np.where(np.signbit(getval(b)), -1.0, 1.0)


@st.composite
def with_zero_signs(draw):
    """Broadcast pairs whose entries are often +-0.0 (copysign reads the sign bit)."""
    shape_a, shape_b = draw(S.broadcastable_shapes(2))
    signed_zeros = st.sampled_from([0.0, -0.0])
    a = np.where(draw(S.bool_masks(shape_a, all_false_row=False)), draw(S.arrays(shape_a)), 0.0)
    b = draw(S.arrays(shape_b))
    b = np.where(b == 0, draw(signed_zeros), b)
    return (a, b), {}


CASES = [
    # arithmetic, broadcast pairs
    C("add", lambda a, b: a + b, P.add, binary()),
    C("sub", lambda a, b: a - b, P.sub, binary()),
    C("mul", lambda a, b: a * b, P.mul, binary()),
    C("div", lambda a, b: a / b, P.div, binary(S.arrays, nonzero)),
    C("pow", lambda a, b: a ** b, P.power,
      binary(positive, lambda s: S.arrays(s, -2.0, 2.0))),
    C("maximum", mt.maximum, P.maximum, binary(distinct, shifted)),
    C("minimum", lambda a, b: a.minimum(b), P.minimum, binary(distinct, shifted)),
    # with Python scalars and NumPy constants
    C("add_scalar", lambda x: x + 2.5, lambda x: P.add(x, 2.5), unary()),
    C("rsub_scalar", lambda x: 2.5 - x, lambda x: P.sub(2.5, x), unary()),
    C("rmul_scalar", lambda x: 3.0 * x, lambda x: P.mul(3.0, x), unary()),
    C("div_scalar", lambda x: x / 4.0, lambda x: P.div(x, 4.0), unary()),
    C("rdiv_scalar", lambda x: 2.0 / x, lambda x: P.div(2.0, x), unary(nonzero)),
    C("pow_int", lambda x: x ** 3, lambda x: P.power_const(x, 3), unary()),
    C("pow_half", lambda x: x ** 0.5, lambda x: P.power_const(x, 0.5), unary(positive)),
    C("pow_negative", lambda x: x ** -2, lambda x: P.power_const(x, -2.0), unary(nonzero)),
    C("rpow_scalar", lambda x: 2.0 ** x, lambda x: P.power(2.0, x), unary()),
    C("radd_ndarray", lambda x, c: c + x, lambda x, c: P.add(c, x), with_constant()),
    C("mul_ndarray", lambda x, c: x * c, lambda x, c: P.mul(x, c), with_constant()),
    # one tensor used twice (gradients accumulate)
    C("x_times_x", lambda x: x * x, lambda x: P.mul(x, x), unary()),
    C("x_plus_x", lambda x: x + x, lambda x: P.add(x, x), unary()),
    C("x_minus_x", lambda x: x - x, lambda x: P.sub(x, x), unary()),
    C("exp_plus_sin", lambda x: x.exp() + mt.sin(x), lambda x: P.exp(x) + P.sin(x), unary()),
    C("x_matmul_xT", lambda x: x @ x.mT, lambda x: P.matmul(x, anp.swapaxes(x, -1, -2)),
      unary(shapes=S.shapes(min_dims=2))),
    C("maximum_x_x", lambda x: mt.maximum(x, x), lambda x: P.maximum(x, x), unary()),
    # elementwise
    C("neg", lambda x: -x, P.neg, unary(), exact=True),
    C("negative", mt.negative, P.neg, unary(), exact=True),
    C("abs", mt.abs, P.abs, unary(distinct)),
    C("exp", mt.exp, P.exp, unary()),
    C("log", lambda x: x.log(), P.log, unary(positive)),
    C("log1p", mt.log1p, P.log1p, unary(lambda s: S.arrays(s, -0.9, 3.0))),
    C("sqrt", lambda x: x.sqrt(), P.sqrt, unary(positive)),
    C("rsqrt", mt.rsqrt, P.rsqrt, unary(positive)),
    C("sin", mt.sin, P.sin, unary()),
    C("cos", lambda x: x.cos(), P.cos, unary()),
    C("tanh", mt.tanh, P.tanh, unary()),
    C("sigmoid", lambda x: x.sigmoid(), P.sigmoid, unary()),
    C("relu", mt.relu, P.relu, unary(distinct)),
    C("gelu_erf", mt.gelu, P.gelu, unary()),
    C("gelu_tanh", lambda x: x.gelu(approximate="tanh"),
      lambda x: P.gelu(x, approximate="tanh"), unary()),
    C("softplus", mt.softplus, P.softplus, unary(lambda s: S.arrays(s, -10.0, 10.0))),
    C("erf", mt.erf, P.erf, unary()),
    C("clip", lambda x: mt.clip(x, -1.0, 0.5), lambda x: P.clip(x, -1.0, 0.5), unary(distinct)),
    C("clip_low", lambda x: x.clip(low=0.0), lambda x: P.clip(x, low=0.0), unary(distinct)),
    C("clamp_high", lambda x: x.clamp(high=0.3), lambda x: P.clip(x, high=0.3), unary(distinct)),
    C("where", lambda a, b, condition: mt.where(mt.tensor(condition), a, b), P.where,
      where_inputs()),
    C("masked_fill", lambda x, mask, value: x.masked_fill(mt.tensor(mask), value),
      P.masked_fill, masked_fill_inputs()),
    C("clone", lambda x: x.clone(), lambda x: x, unary(), exact=True),
    # reductions
    C("sum", lambda x, **kw: x.sum(**kw), P.sum, reduction()),
    C("mean", lambda x, **kw: mt.mean(x, **kw), P.mean, reduction()),
    C("var", lambda x, **kw: x.var(**kw), P.var, reduction(ddof=True)),
    C("std", lambda x, **kw: mt.std(x, **kw), P.std,
      reduction(distinct, ddof=True, shapes=S.shapes(min_dims=1, min_side=2))),
    C("prod", lambda x, **kw: x.prod(**kw), P.prod,
      reduction(lambda s: S.arrays(s, -2.0, 2.0), shapes=S.shapes(max_side=3))),
    C("prod_with_zeros", lambda x, **kw: mt.prod(x, **kw), P.prod,
      reduction(with_zeros, shapes=S.shapes(max_side=3))),
    C("max", lambda x, **kw: x.max(**kw), P.max, reduction(distinct)),
    C("min", lambda x, **kw: mt.min(x, **kw), P.min, reduction(distinct)),
    C("logsumexp", lambda x, **kw: x.logsumexp(**kw), P.logsumexp, reduction()),
    C("cumsum", lambda x, axis: x.cumsum(axis=axis), P.cumsum, along_axis(allow_none=True)),
    C("softmax", lambda x, axis: x.softmax(axis=axis), P.softmax, along_axis()),
    C("log_softmax", lambda x, axis: mt.log_softmax(x, axis), P.log_softmax, along_axis()),
    C("layer_norm", lambda x, w, b, eps: LayerNorm.apply(x, w, b, eps=eps), P.layer_norm,
      layer_norm_inputs()),
    # shape
    C("reshape", lambda x, shape: x.reshape(shape), P.reshape, reshape_inputs(), exact=True),
    C("reshape_varargs", lambda x, shape: mt.reshape(x, *shape), P.reshape, reshape_inputs(),
      exact=True),
    C("T", lambda x: x.T, P.transpose, unary(), exact=True),
    C("transpose", lambda x, axes: x.transpose(axes), P.transpose, permutation_inputs(),
      exact=True),
    C("permute", lambda x, axes: mt.permute(x, axes), P.transpose, permutation_inputs(),
      exact=True),
    C("swapaxes", lambda x, axis1, axis2: x.swapaxes(axis1, axis2), P.swapaxes,
      two_axes_inputs(), exact=True),
    C("mT", lambda x: x.mT, lambda x: P.swapaxes(x, -1, -2), unary(shapes=S.shapes(min_dims=2)),
      exact=True),
    C("squeeze", lambda x, axis: x.squeeze(axis), P.squeeze, squeeze_inputs(), exact=True),
    C("unsqueeze", lambda x, axis: mt.unsqueeze(x, axis), P.unsqueeze, unsqueeze_inputs(),
      exact=True),
    C("broadcast_to", lambda x, shape: mt.broadcast_to(x, shape), P.broadcast_to,
      broadcast_inputs()),
    C("expand", lambda x, shape: x.expand(*_expand_args(x.shape, shape)),
      P.broadcast_to, broadcast_inputs()),
    C("concatenate", lambda *xs, axis: mt.concatenate(xs, axis=axis), P.concatenate,
      concatenate_inputs(), exact=True),
    C("stack", lambda *xs, axis: mt.stack(list(xs), axis=axis), P.stack, stack_inputs(),
      exact=True),
    C("split_size", lambda x, sections, axis: x.split(sections, axis=axis),
      lambda x, sections, axis: P.split(x, [sections] * (x.shape[axis] // sections) +
                                        ([x.shape[axis] % sections] if x.shape[axis] % sections
                                         else []), axis),
      split_inputs(as_list=False), exact=True),
    C("split_sections", lambda x, sections, axis: mt.split(x, sections, axis=axis),
      lambda x, sections, axis: P.split(x, sections, axis), split_inputs(as_list=True),
      exact=True),
    C("chunk", lambda x, sections, axis: x.chunk(sections, axis=axis),
      lambda x, sections, axis: P.split(
          x, _chunk_sizes(x.shape[axis], sections), axis), split_inputs(as_list=False),
      exact=True),
    C("unbind", lambda x, axis: x.unbind(axis), P.unbind, unbind_inputs(), exact=True),
    C("pad", lambda x, pad_width, value: mt.pad(x, pad_width, value=value), P.pad, pad_inputs(),
      exact=True),
    C("flip", lambda x, axis: x.flip(axis), P.flip, flip_inputs(), exact=True),
    C("roll", lambda x, shift, axis: x.roll(shift, axis), P.roll, roll_inputs(), exact=True),
    C("tril", lambda x, k: x.tril(k), P.tril, triangle_inputs(), exact=True),
    C("triu", lambda x, k: mt.triu(x, k), P.triu, triangle_inputs(), exact=True),
    # indexing
    C("getitem_basic", lambda x, index: x[index], P.getitem, basic_index_inputs(), exact=True),
    C("getitem_int_arrays", lambda x, index: x[index], P.getitem, int_array_index_inputs()),
    C("getitem_int_tensor", lambda x, index: x[_as_tensor_index(index)], P.getitem,
      int_array_index_inputs()),
    C("getitem_bool_mask", lambda x, index: x[(mt.tensor(index[0]),) + index[1:]], P.getitem,
      bool_index_inputs(), exact=True),
    C("getitem_mixed", lambda x, index: x[index], P.getitem, mixed_index_inputs()),
    C("take_along_axis", lambda x, index, axis: mt.take_along_axis(x, mt.tensor(index), axis),
      P.take_along_axis, take_along_inputs()),
    C("gather", lambda x, index, axis: x.gather(axis, mt.tensor(index)), P.take_along_axis,
      take_along_inputs()),
    C("scatter_add", lambda x, src, index, axis: mt.scatter_add(x, axis, mt.tensor(index), src),
      P.scatter_add, scatter_add_inputs()),
    C("scatter_reduce", lambda x, src, index, axis, reduce, include_self: x.scatter_reduce(
        axis, mt.tensor(index), src, reduce, include_self=include_self), P.scatter_reduce,
      scatter_reduce_inputs()),
    C("scatter", lambda x, src, index, axis: mt.scatter(x, axis, mt.tensor(index), src),
      P.scatter, scatter_inputs()),
    C("index_select", lambda x, index, axis: mt.index_select(x, axis, mt.tensor(index)),
      P.index_select, index_select_inputs()),
    C("getitem_repeated_spellings",
      lambda x, positions, spelling: x[spelled_index(positions, spelling)],
      lambda x, positions, spelling: P.getitem(x, numpy_index(positions, spelling)),
      repeated_index_inputs()),
    C("index_select_spellings",
      lambda x, index, axis, spelling: x.index_select(axis, spelling(index)),
      lambda x, index, axis, spelling: P.index_select(x, index, axis), index_select_spellings()),
    C("sort", lambda x, axis, descending: mt.sort(x, axis, descending=descending)[0], P.sort,
      sort_inputs()),
    C("topk", lambda x, k, axis, largest: mt.topk(x, k, axis=axis, largest=largest)[0], P.topk,
      sort_inputs(topk=True)),
    # elementwise functions added for issue 11
    C("expm1", mt.expm1, P.expm1, unary()),
    C("exp2", mt.exp2, P.exp2, unary()),
    C("log2", mt.log2, P.log2, unary(positive)),
    C("log10", mt.log10, P.log10, unary(positive)),
    C("tan", mt.tan, P.tan, unary(lambda s: S.arrays(s, -1.2, 1.2))),
    C("arcsin", mt.asin, P.arcsin, unary(lambda s: S.arrays(s, -0.9, 0.9))),
    C("arccos", mt.arccos, P.arccos, unary(lambda s: S.arrays(s, -0.9, 0.9))),
    C("arctan", mt.atan, P.arctan, unary()),
    C("sinh", mt.sinh, P.sinh, unary()),
    C("cosh", mt.cosh, P.cosh, unary()),
    C("arcsinh", mt.asinh, P.arcsinh, unary()),
    C("arccosh", mt.acosh, P.arccosh, unary(lambda s: S.arrays(s, 1.1, 3.0))),
    C("arctanh", mt.atanh, P.arctanh, unary(lambda s: S.arrays(s, -0.9, 0.9))),
    C("xlogy", mt.xlogy, P.xlogy, binary(S.arrays, positive)),
    C("logaddexp", mt.logaddexp, P.logaddexp, binary(distinct, shifted)),
    C("lerp", lambda a, b: mt.lerp(a, b, 0.3), lambda a, b: P.lerp(a, b, 0.3), binary()),
    C("remainder", mt.remainder, P.remainder, binary(S.arrays, lambda s: S.arrays(s, 0.5, 2.0))),
    C("fmod", mt.fmod, P.fmod, binary(S.arrays, lambda s: S.arrays(s, -2.0, -0.5))),
    C("floor", mt.floor, lambda x: P.rounded(x, "floor"), unary()),
    C("ceil", mt.ceil, lambda x: P.rounded(x, "ceil"), unary()),
    C("round", mt.round, lambda x: P.rounded(x, "round"), unary()),
    C("trunc", mt.trunc, lambda x: P.rounded(x, "trunc"), unary()),
    C("sign", mt.sign, lambda x: P.rounded(x, "sign"), unary()),
    # added for issue 39
    C("quick_gelu", F.quick_gelu, ref_quick_gelu, unary()),
    C("softmin", lambda x, axis: F.softmin(x, axis=axis), ref_softmin, along_axis()),
    C("celu", F.celu, ref_celu,
      unary_with(S.shapes(), alpha=st.sampled_from([1.0, 0.5, 2.0, -1.5]))),
    C("copysign", mt.copysign, ref_copysign, with_zero_signs()),
    C("div_true", lambda a, b: mt.div(a, b), P.div, binary(S.arrays, nonzero)),
    C("div_trunc", lambda a, b: a.div(b, rounding_mode="trunc"),
      lambda a, b: P.rounded(a / b, "trunc"), binary(S.arrays, nonzero)),
    C("div_floor", lambda a, b: mt.div(a, b, rounding_mode="floor"),
      lambda a, b: P.rounded(a / b, "floor"), binary(S.arrays, nonzero)),
    C("floordiv_operator", lambda a, b: a // b, lambda a, b: P.rounded(a / b, "floor"),
      binary(S.arrays, nonzero)),
    # reductions and shapes added for issue 11
    C("norm", lambda x, **kw: x.norm(**kw), P.norm, norm_inputs()),
    C("cumprod", lambda x, axis: mt.cumprod(x, axis), P.cumprod,
      along_axis(lambda s: S.arrays(s, -2.0, 2.0))),
    C("cumprod_with_zeros", lambda x, axis: x.cumprod(axis), P.cumprod,
      along_axis(with_zeros)),
    C("cummax", lambda x, axis: mt.cummax(x, axis)[0], P.cummax, along_axis(distinct)),
    C("cummin", lambda x, axis: x.cummin(axis)[0], P.cummin, along_axis(distinct)),
    C("logcumsumexp", lambda x, axis: mt.logcumsumexp(x, axis), P.logcumsumexp, along_axis()),
    C("tile", lambda x, reps: mt.tile(x, reps), P.tile, tile_inputs()),
    C("repeat", lambda x, reps: x.repeat(*((1,) * (x.ndim - len(reps)) + tuple(reps))),
      lambda x, reps: P.tile(x, (1,) * (x.ndim - len(reps)) + tuple(reps)), tile_inputs()),
    C("repeat_interleave", lambda x, repeats, axis: x.repeat_interleave(repeats, axis),
      P.repeat_interleave, repeat_interleave_inputs()),
    C("unflatten", lambda x, axis: x.unflatten(axis, (1, x.shape[axis], 1)),
      lambda x, axis: P.reshape(x, x.shape[:axis] + (1, x.shape[axis], 1) + x.shape[axis + 1:]),
      nonnegative_axis_inputs(), exact=True),
    C("diagonal", lambda x, offset, axis1, axis2: mt.diagonal(x, offset, axis1, axis2),
      P.diagonal, diagonal_inputs(), exact=True),
    C("diag_of_vector", lambda x, k: mt.diag(x, k), P.diag,
      unary_with(S.shapes(min_dims=1, max_dims=1), k=st.integers(-2, 2)), exact=True),
    C("masked_select", lambda x, mask: x.masked_select(mt.tensor(mask)), P.masked_select,
      masked_select_inputs()),
    C("unfold", lambda x, axis, size, step: x.unfold(axis, size, step), P.unfold,
      unfold_inputs()),
    C("pad_modes", lambda x, pad_width, mode: mt.pad(x, pad_width, mode=mode),
      lambda x, pad_width, mode: P.pad_mode(x, pad_width, mode), pad_mode_inputs()),
    C("pad_crop_and_pad", lambda x, pad_width, mode: mt.pad(x, pad_width, mode=mode),
      padded_then_cropped, crop_and_pad_inputs()),
    C("meshgrid", lambda a, b: mt.meshgrid(a, b),
      lambda a, b: (anp.broadcast_to(a[:, None], (a.shape[0], b.shape[0])),
                    anp.broadcast_to(b[None, :], (a.shape[0], b.shape[0]))),
      binary_vectors(), exact=True),
    # activations and losses of functional.py added for issue 11
    C("silu", F.silu, P.silu, unary()),
    C("mish", F.mish, P.mish, unary()),
    C("logsigmoid", F.logsigmoid, P.logsigmoid, unary()),
    C("leaky_relu", lambda x: F.leaky_relu(x, 0.1), lambda x: P.leaky_relu(x, 0.1),
      unary(shifted)),
    C("elu", F.elu, P.elu, unary(shifted)),
    C("selu", F.selu, P.selu, unary(shifted)),
    C("hardtanh", F.hardtanh, P.hardtanh, unary(shifted)),
    C("relu6", lambda x: F.relu6(x * 3.0), lambda x: P.relu6(x * 3.0), unary(shifted)),
    C("hardsigmoid", F.hardsigmoid, P.hardsigmoid, unary(lambda s: S.arrays(s, -2.9, 2.9))),
    C("hardswish", F.hardswish, P.hardswish, unary(lambda s: S.arrays(s, -2.9, 2.9))),
    C("softsign", F.softsign, P.softsign, unary(nonzero)),
    C("softplus_beta", F.softplus, P.softplus_beta, softplus_beta_inputs()),
    C("glu", F.glu, P.glu, halves_inputs()),
    C("swiglu", F.swiglu, P.swiglu, halves_inputs()),
    C("geglu", F.geglu, P.geglu, halves_inputs()),
    C("normalize", F.normalize, P.normalize, normalize_inputs()),
    C("binary_cross_entropy", F.binary_cross_entropy, P.binary_cross_entropy,
      probabilities_and_targets()),
    # products
    C("matmul", lambda a, b: a @ b, P.matmul, matmul_inputs()),
    C("matmul_fn", mt.matmul, P.matmul, matmul_inputs()),
    C("einsum_ij_jk", lambda a, b: mt.einsum("ij,jk->ik", a, b), P.einsum_matmul,
      sized("ij", "jk")),
    C("einsum_implicit", lambda a, b: mt.einsum("ij,jk", a, b), P.einsum_matmul,
      sized("ij", "jk")),
    C("einsum_ellipsis", lambda a, b: mt.einsum("...ij,...jk->...ik", a, b), P.einsum_batched,
      sized("...ij", "jk")),
    C("einsum_trace", lambda x: mt.einsum("ii->", x), P.einsum_trace, sized("ii")),
    C("einsum_diagonal", lambda x: mt.einsum("ii->i", x), P.einsum_diagonal, sized("ii")),
    C("einsum_outer", lambda a, b: mt.einsum("i,j->ij", a, b), P.einsum_outer, sized("i", "j")),
    C("einsum_row_sums", lambda x: mt.einsum("ij->i", x), P.einsum_row_sums, sized("ij")),
    C("einsum_frobenius", lambda a, b: mt.einsum("ij,ij->", a, b), P.einsum_frobenius,
      sized("ij", "ij")),
    C("einsum_bilinear", lambda x, w, y: mt.einsum("bi,ij,bj->b", x, w, y), P.einsum_bilinear,
      sized("bi", "ij", "bj")),
    C("einsum_heads", lambda q, k: mt.einsum("bhqd,bhkd->bhqk", q, k), P.einsum_heads,
      sized("bhqd", "bhkd")),
]


def _chunk_sizes(n, chunks):
    size = max(-(-n // chunks), 1)
    return [size] * (n // size) + ([n % size] if n % size else [])


def _expand_args(shape, target):
    """PyTorch's expand arguments: -1 wherever the target keeps the input's size."""
    lead = len(target) - len(shape)
    return [-1 if i >= lead and n == shape[i - lead] else n for i, n in enumerate(target)]


def _as_tensor_index(index):
    if isinstance(index, tuple):
        return tuple(mt.tensor(i) if isinstance(i, np.ndarray) else i for i in index)
    return mt.tensor(index)


# ---- the harness ---------------------------------------------------------------------------------
def _outputs(result):
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _leaves(arrays):
    """float64 leaf tensors sharing the (possibly non-contiguous) arrays."""
    return [mt.Tensor(a, dtype=mt.float64, requires_grad=True) for a in arrays]


def _const(array):
    return mt.tensor(np.asarray(array), dtype=mt.float64)


def _assert_close(actual, expected, exact, rtol=RTOL, atol=ATOL, what=""):
    actual, expected = np.asarray(actual), np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if exact:
        np.testing.assert_array_equal(actual, expected, err_msg=what)
    else:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=what)


def _grads_or_zeros(grads, arrays):
    return [np.zeros(a.shape) if g is None else np.asarray(g) for g, a in zip(grads, arrays)]


@pytest.mark.parametrize("case", CASES)
@given(data=st.data())
def test_forward_and_vjp(case, data):
    arrays, static = data.draw(case.inputs, label="inputs")
    rng = np.random.default_rng(data.draw(S.seeds(), label="seed"))

    xs = _leaves(arrays)
    outs = _outputs(case.engine(*xs, **static))
    expected = _outputs(case.reference(*arrays, **static))
    assert len(outs) == len(expected)
    for out, ref in zip(outs, expected):
        assert out.dtype == np.float64, f"{case.name}: output dtype {out.dtype}"
        _assert_close(out.numpy(), ref, case.exact, rtol=1e-10, atol=1e-12, what="forward")

    cotangents = [rng.standard_normal(np.shape(r)) for r in expected]
    mt.backward(outs, [_const(u) for u in cotangents])

    def packed(args):
        return anp.concatenate([anp.ravel(o) for o in _outputs(case.reference(*args, **static))])

    vjp, _ = autograd.make_vjp(packed)(tuple(arrays))
    expected_grads = vjp(np.concatenate([u.ravel() for u in cotangents]))
    for i, (x, g) in enumerate(zip(xs, _grads_or_zeros(expected_grads, arrays))):
        actual = np.zeros(x.shape) if x.grad is None else x.grad.numpy()
        assert x.grad is None or x.grad.dtype == np.float64
        _assert_close(actual, g, case.exact, what=f"gradient of input {i}")


@pytest.mark.parametrize("case", CASES)
@given(data=st.data())
def test_hessian_vector_product(case, data):
    arrays, static = data.draw(case.inputs, label="inputs")
    rng = np.random.default_rng(data.draw(S.seeds(), label="seed"))
    expected_outs = _outputs(case.reference(*arrays, **static))
    cotangents = [rng.standard_normal(np.shape(r)) for r in expected_outs]
    directions = [rng.standard_normal(a.shape) for a in arrays]

    # the engine: grad of (grad(L, create_graph=True) . v)
    xs = _leaves(arrays)
    loss = sum((o * o * _const(u)).sum() for o, u in zip(_outputs(case.engine(*xs, **static)),
                                                         cotangents))
    grads = mt.grad(loss, xs, create_graph=True, allow_unused=True)
    dot = sum((g * _const(v)).sum() for g, v in zip(grads, directions) if g is not None)
    if isinstance(dot, mt.Tensor) and dot.requires_grad:
        hvp = _grads_or_zeros(mt.grad(dot, xs, allow_unused=True), arrays)
    else:
        hvp = [np.zeros(a.shape) for a in arrays]

    # autograd on the reference
    def loss_ref(args):
        return sum(anp.sum(o * o * u) for o, u in zip(_outputs(case.reference(*args, **static)),
                                                      cotangents))

    def dot_ref(args):
        return sum(anp.sum(g * v) for g, v in zip(autograd.grad(loss_ref)(args), directions))

    expected = autograd.grad(dot_ref)(tuple(arrays))
    for i, (actual, want) in enumerate(zip(hvp, _grads_or_zeros(expected, arrays))):
        _assert_close(actual, want, False, rtol=HVP_RTOL, atol=HVP_ATOL,
                      what=f"Hessian-vector product, input {i}")


@pytest.mark.eq(35)
@pytest.mark.sec6
@pytest.mark.parametrize("axis", [0, -1])
def test_softmax_family_is_stable_for_large_logits(axis):
    logits = np.array([[1e4, 0.0, -1e4], [5e3, 5e3, -3.0]])
    x = mt.tensor(logits, dtype=mt.float64, requires_grad=True)
    shifted = logits - logits.max(axis=axis, keepdims=True)
    expected = shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    np.testing.assert_allclose(x.log_softmax(axis=axis).numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(x.softmax(axis=axis).numpy(), np.exp(expected), rtol=1e-12)
    np.testing.assert_allclose(x.logsumexp(axis=axis).numpy(),
                               (logits - expected).mean(axis=axis), rtol=1e-12)
    (grad,) = mt.grad(x.log_softmax(axis=axis)[0, 0], x, create_graph=True)
    assert np.isfinite(grad.numpy()).all()
    (second,) = mt.grad((grad * grad).sum(), x)
    assert np.isfinite(second.numpy()).all()
