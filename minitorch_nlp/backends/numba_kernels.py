"""The compiled kernels behind the numba backend (``numba_backend.py`` calls them).

Every kernel works on C-contiguous arrays that the caller has already shaped (rows x columns, or
(batch*heads, T, D)) and writes into output arrays the caller allocated, so that a kernel never
makes a temporary. Independent rows run in parallel with ``prange``.

Numerics. Sums accumulate in float64 (float32 inputs included), except that a sum sharing its loop
with ``exp`` adds blocks of 1024 terms in the input's dtype first. ``exp`` is a polynomial
written here (``fast_exp``) rather than the C library's: LLVM can vectorise it, and it is within
1 ulp (float32) / 2 ulp (float64) of the exact value over the whole range, with ``exp(-inf) = 0``,
``exp(inf) = inf`` and NaN kept. Kernels are compiled with only the ``contract`` (fused
multiply-add) and ``reassoc`` (vectorised sums) fast-math flags: infinities and NaN keep their
IEEE meaning, which the masked softmax relies on. ``erf`` (the exact GELU) is ``fast_erf``, the
polynomials of ``erf.py`` (within 3 ulp, vectorisable) rather than the scalar ``math.erf``; the
backward shares exp(-x^2 / 2) between erf and the normal density. The tanh form of GELU uses
0.5 * (1 + tanh(u)) = sigmoid(2u), evaluated in float64 for every input dtype, so no ``tanh``
call (a slow scalar libm call with PyPI's llvmlite) is needed and float32 results are within a
few float32 ulp of the exact value on [-10, 10].

Threading. Importing this module (or calling ``set_num_threads``) selects Numba's ``workqueue``
threading layer, unless the user chose one (``NUMBA_THREADING_LAYER`` or
``numba.config.THREADING_LAYER``) or Numba's threads already started in this process. The OpenMP
layer's threads spin after a parallel kernel while OpenBLAS threads spin after a matmul, and on a
machine with few cores the two pools slow each other down (measured on 2 cores: a 512 x 512
matmul right after a kernel took 1.5x its time alone with OpenMP, 1.08x with ``workqueue``, and a
kernel right after a matmul 2x). ``workqueue`` threads sleep between kernels. It must not be
entered by two Python threads at once, so the backend serialises its parallel kernel calls with
one lock. Inputs under 2^19 elements, and every input when Numba has one thread, run on the
calling thread (each kernel has a ``parallel`` switch): waking the workqueue threads costs 70-85
microseconds at every kernel start, and on one thread the workqueue layer would still hand the
loop to a worker and wait for it. GNU OpenMP with a short spin (``GOMP_SPINCOUNT=1000``, read when
libgomp loads) starts a kernel in 2-10 microseconds and made the GPT training step on two threads
10% faster, but PyTorch loads a libgomp of the same name, shares it when imported later, and its
GPT training step on two threads then took 116 ms, and 636 ms once Numba's threads had started,
against 95 ms on its own libgomp: not a setting a library may make for its users.

Compile cache. Every kernel is ``cache=True``: the first call of each signature (dtype) compiles
it (about a second each) and stores the machine code; later processes load it in milliseconds.
Numba stores the cache in ``__pycache__`` next to this file when that directory is writable, and
otherwise in a per-user directory (``~/.cache/numba`` or the platform's equivalent, under a path
derived from this file's location). ``NUMBA_CACHE_DIR=/some/dir`` overrides both; set it when the
package lives on a read-only file system shared by several users, or to start from an empty cache.
The cache is keyed on a hash of this file's contents and on the CPU, so editing the file or moving
to another kind of machine recompiles.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic, overload, register_jitable
from numba.np.unsafe.ndarray import to_fixed_tuple

from . import erf as erf_coefficients
from .threads import choose_numba_threading_layer

choose_numba_threading_layer()

_FASTMATH = {"contract", "reassoc"}
# Division by zero gives inf or NaN as in NumPy, instead of Numba's default Python model, which
# tests every divisor and raises ZeroDivisionError: that test in a loop keeps LLVM from
# vectorising it. The Adam update (a division per element) took 2.5 ns an element so, 4.7x the
# time it takes now, twice the NumPy update's; the kernels divide only by numbers they know are
# not zero.
_ERROR_MODEL = "numpy"


def _kernel(fn):
    """A parallel, disk-cached kernel. It releases the GIL, so that its serial form can run in
    several Python threads at once (the attention blocks of ``numba_backend._in_threads``)."""
    return njit(cache=True, parallel=True, nogil=True, fastmath=_FASTMATH,
                error_model=_ERROR_MODEL)(fn)


# ---- scalar helpers ---------------------------------------------------------------------------
@intrinsic
def _f32_from_bits(typingctx, bits):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


@intrinsic
def _f64_from_bits(typingctx, bits):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@intrinsic
def _popcount(typingctx, word):
    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])
    return types.uint64(types.uint64), codegen


@register_jitable
def _polynomial(coefficients, u):
    result = coefficients[len(coefficients) - 1]
    for i in range(len(coefficients) - 2, -1, -1):
        result = result * u + coefficients[i]
    return result


# The float32 exponential's constants, shared by ``_exp_f32`` and ``_shifted_exp_f32_given``:
# exp(r) = 1 + r + r^2 P(r) on |r| <= ln(2) / 2 (P's coefficients from the constant term up), and
# ln 2 in two parts (Cody-Waite) so that r = v - n ln 2 keeps its low bits.
_EXP32_POLYNOMIAL = tuple(np.float32(c) for c in (5.0000001201e-1, 1.6666665459e-1,
                                                   4.1665795894e-2, 8.3334519073e-3,
                                                   1.3981999507e-3, 1.9875691500e-4))
_LOG2_E32 = np.float32(1.4426950408889634)
_LN2_HIGH32, _LN2_LOW32 = np.float32(0.693145751953125), np.float32(1.428606765330187e-06)


@register_jitable
def _exp_f32(v):
    # exp(v) = 2^n * exp(r), n = round(v / ln 2), |r| <= ln(2) / 2 (Cody-Waite split of ln 2);
    # 2^n is applied in two halves so that subnormal results come out right. Below the
    # underflow the result is 0 whatever is computed: computing exp(0) there keeps subnormal
    # products (a microcode assist each, ~100 cycles) to the v whose exp is subnormal, which
    # made tanh-GELU on N(0, 10^2) inputs twice as slow as on N(0, 1).
    c = min(v, np.float32(89.0)) if v >= np.float32(-103.97) else np.float32(0.0)
    t = c * _LOG2_E32
    n_int = np.int32(t + np.float32(0.5) if t >= 0 else t - np.float32(0.5))
    n = np.float32(n_int)
    r = c - n * _LN2_HIGH32 - n * _LN2_LOW32
    p = _polynomial(_EXP32_POLYNOMIAL, r) * r * r + r + np.float32(1.0)
    half = np.int32(n_int >> np.int32(1))
    result = (p * _f32_from_bits(np.int32((half + np.int32(127)) << np.int32(23)))
              * _f32_from_bits(np.int32((n_int - half + np.int32(127)) << np.int32(23))))
    if v < np.float32(-103.97):
        result = np.float32(0.0)
    if v > np.float32(88.72284):
        result = np.float32(np.inf)
    if v != v:
        result = v
    return result


@register_jitable
def _exp_f64(v):
    c = min(v, 710.0) if v >= -745.14 else 0.0   # as in _exp_f32
    t = c * 1.4426950408889634
    n_int = np.int32(t + 0.5 if t >= 0 else t - 0.5)
    n = np.float64(n_int)
    r = c - n * 0.6931471803691238 - n * 1.9082149292705877e-10
    p = 1.0 / 6227020800.0
    p = p * r + 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r * r + r + 1.0
    half = np.int64(n_int >> np.int32(1))
    rest = np.int64(n_int) - half
    result = (p * _f64_from_bits(np.int64((half + np.int64(1023)) << np.int64(52)))
              * _f64_from_bits(np.int64((rest + np.int64(1023)) << np.int64(52))))
    if v < -745.14:
        result = 0.0
    if v > 709.7827:
        result = np.inf
    if v != v:
        result = v
    return result


@intrinsic
def _bits_from_f32(typingctx, value):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.int32(types.float32), codegen


_ROUND_MAGIC = 12582912.0  # 1.5 * 2^23: adding it rounds a float32 below 2^22 to an integer


# ``_shifted_exp_f32_given``'s constants: (lowest exponent, 1 / ln 2, rounding magic, ln 2 in two
# parts, 1, the polynomial's coefficients). Compiled in, or, in a loop with more constants than
# registers, read from an argument (see ``gelu_constants``).
_SHIFTED_EXP32 = (np.float32(-87.0), _LOG2_E32, np.float32(_ROUND_MAGIC), _LN2_HIGH32, _LN2_LOW32,
                  np.float32(1.0), _EXP32_POLYNOMIAL)


@register_jitable(inline="always")
def _shifted_exp_f32_given(v, constants):
    """exp(v) for the v <= 0 of a softmax shifted by its maximum, branch-free so that a loop of
    it vectorises: n = round(v / ln 2) by the magic-number trick (the integer lands in the low
    bits of v / ln 2 + 1.5 * 2^23), 2^n built from n's bits. 0 below -87, where exp(v) < 2e-38
    would vanish next to the row's largest term, 1, anyway."""
    lowest, log2_e, magic, ln2_high, ln2_low, one, coefficients = constants
    c = max(v, lowest)
    shifted = c * log2_e + magic
    n = shifted - magic
    n_int = _bits_from_f32(shifted) - np.int32(0x4B400000)
    r = c - n * ln2_high - n * ln2_low
    p = _polynomial(coefficients, r) * r * r + r + one
    e = p * _f32_from_bits((n_int + np.int32(127)) << np.int32(23))
    return e if v >= lowest else np.float32(0.0)


@register_jitable
def _shifted_exp_f32(v):
    return _shifted_exp_f32_given(v, _SHIFTED_EXP32)


def _in_precision(f32_exp):
    """An overload that compiles exp of a float32 to ``f32_exp`` and of a float64 to
    ``_exp_f64``."""
    def choose(x):
        if x == types.float32:
            return lambda x: f32_exp(x)
        if x == types.float64:
            return lambda x: _exp_f64(x)
        return None
    return choose


def fast_exp(x):
    """exp(x) in the precision of x; compiled code gets the vectorisable polynomials above."""
    return math.exp(x)


def shifted_exp(x):
    """exp(x) for x <= 0 (a softmax's exponent after subtracting the maximum)."""
    return math.exp(x)


def shifted_exp_given(x, constants):
    """``shifted_exp(x)``, a float32 x's with the constants ``_SHIFTED_EXP32`` read from
    ``constants`` (float64 ignores them)."""
    return math.exp(x)


overload(fast_exp)(_in_precision(_exp_f32))
overload(shifted_exp)(_in_precision(_shifted_exp_f32))


@overload(shifted_exp_given, inline="always")
def _shifted_exp_given_overload(x, constants):
    if x == types.float32:
        return lambda x, constants: _shifted_exp_f32_given(x, constants)
    if x == types.float64:
        return lambda x, constants: _exp_f64(x)
    return None


@register_jitable
def _select(condition, if_true, if_false):
    """``if_true if condition else if_false``, as a call that LLVM inlines into a select: written
    inline in ``_erf_given_exp``, whose callers Numba inlines in turn, the conditional expression
    left a variable out of scope in Numba's IR (a NumbaIRAssumptionWarning at compile time)."""
    return if_true if condition else if_false


# Inlined by Numba: as a call, each element would pass the coefficient tuples by value.
@register_jitable(inline="always")
def _erf_given_exp(z, exp_neg_z2, small, tail, split, centre, end, one):
    """erf(z) by the two forms of ``erf.py``, given exp(-z^2) (GELU's backward needs that
    exponential too); both forms are computed and one selected, so that a loop vectorises."""
    az = abs(z)
    near = min(az, split)
    near_zero = near * _polynomial(small, near * near)
    # Numba's min and max return NaN for NaN, so NaN reaches the result through ``far``.
    far = one - exp_neg_z2 * _polynomial(tail, min(max(az, split), end) - centre)
    return math.copysign(_select(az < split, near_zero, far), z)


def fast_erf(z):
    """erf(z) in the precision of z; compiled code gets ``erf.py``'s polynomials, which
    vectorise (``math.erf`` is a scalar libm call). The erf-GELU loops compute the same with the
    constants read from an argument (``gelu_constants``)."""
    return math.erf(z)


_ERF32, _ERF64 = erf_coefficients.FLOAT32, erf_coefficients.FLOAT64


@overload(fast_erf, inline="always")
def _fast_erf_overload(z):
    if z in (types.float32, types.float64):
        erf, one = (_ERF32, np.float32(1.0)) if z == types.float32 else (_ERF64, 1.0)
        small, tail = tuple(erf.small), tuple(erf.tail)
        split, centre, end = erf.split, erf.centre, erf.end
        # -z^2 <= 0: the branch-free exp of the softmax kernels (0 below -87 in float32)
        return lambda z: _erf_given_exp(z, shifted_exp(-(z * z)), small, tail, split, centre,
                                        end, one)
    return None


def _rows(fn):
    """The body of a kernel's loop, ``fn(*arrays, r)`` for one row (or block) ``r``, or
    ``fn(*arrays, first, end)`` for the rows ``first`` .. ``end`` where rows are short (see
    ``_CHUNKS``).

    Each kernel takes ``parallel`` first and runs the same body under ``prange`` or, for small
    inputs, on the calling thread (starting the threads costs more than the work)."""
    return register_jitable(fastmath=_FASTMATH, error_model=_ERROR_MODEL)(fn)


@register_jitable
def _row_shift(x, r, cols):
    """The maximum of row ``r`` (``_row_max``), or 0 when it is not finite (an all ``-inf``
    row)."""
    peak = _row_max(x[r], cols, x.dtype.type(-np.inf))
    if not math.isfinite(peak):
        peak = x.dtype.type(0)
    return peak


# Sums that share a loop with ``fast_exp`` are accumulated in the input's dtype over blocks of this
# many elements (so that the loop vectorises), and the block sums in float64. Loops that LLVM
# should vectorise run over views from index 0: with a loop variable that may be negative, Numba's
# wrap-around indexing keeps LLVM from proving that a load and a store touch the same element.
_BLOCK = 1024


# ---- softmax and log-softmax over the last axis ----------------------------------------------
# Kernels whose rows are short run a chunk of rows per call of their row function rather than
# one row: each call passes every array's fields again and hoists nothing out of the row loop,
# about 33 ns a row (the layer norm's (2048, 128) forward took 200 against 106 us so). In
# parallel they split the rows into this many chunks, enough to balance any thread count here.
_CHUNKS = 64


@register_jitable
def _chunk_bounds(rows, c):
    """(first, end) of chunk ``c`` of ``_CHUNKS`` near-equal chunks of ``rows`` rows."""
    return c * rows // _CHUNKS, (c + 1) * rows // _CHUNKS


@register_jitable(fastmath=_FASTMATH, inline="always")
def _sum_of_exps(line, shift):
    """The sum of exp(line[j] - shift), accumulated in the line's dtype over blocks of
    ``_BLOCK`` (so that the loop vectorises) and the block sums in float64: log-softmax's and
    cross-entropy's normaliser."""
    total = 0.0
    for j0 in range(0, line.shape[0], _BLOCK):
        block = line[j0:j0 + _BLOCK]
        part = line.dtype.type(0)
        for j in range(block.shape[0]):
            part += fast_exp(block[j] - shift)
        total += part
    return total


@_rows
def _softmax_chunk(x, out, log, first, end):
    cols = x.shape[1]
    for r in range(first, end):
        x_row, out_row = x[r], out[r]
        shift = _row_shift(x, r, cols)
        if log:
            total = _sum_of_exps(x_row, shift)
        else:
            total = 0.0
            for j0 in range(0, cols, _BLOCK):
                x_blk = x_row[j0:j0 + _BLOCK]
                out_blk = out_row[j0:j0 + _BLOCK]
                part = x.dtype.type(0)
                for j in range(x_blk.shape[0]):
                    e = fast_exp(x_blk[j] - shift)
                    out_blk[j] = e
                    part += e
                total += part
        if total == 0.0:
            total = 1.0
        if log:
            log_total = x.dtype.type(math.log(total))
            for j in range(cols):
                out_row[j] = (x_row[j] - shift) - log_total
        else:
            inv = x.dtype.type(1.0 / total)
            for j in range(cols):
                out_row[j] *= inv


@_kernel
def softmax_rows(parallel, x, out, log):
    """Softmax (log-softmax when ``log``) of each row of ``x`` (rows, cols) into ``out``.

    An all ``-inf`` row gives zeros (log-softmax: ``-inf``), never NaN."""
    rows = x.shape[0]
    if parallel:
        for c in prange(_CHUNKS):
            first, end = _chunk_bounds(rows, c)
            _softmax_chunk(x, out, log, first, end)
    else:
        _softmax_chunk(x, out, log, 0, rows)


@_rows
def _softmax_backward_chunk(y, grad, out, log, first, end):
    cols = y.shape[1]
    for r in range(first, end):
        y_row, g_row, out_row = y[r], grad[r], out[r]
        total = 0.0
        if log:
            for j in range(cols):
                total += g_row[j]
            s = y.dtype.type(total)
            for j in range(cols):
                out_row[j] = g_row[j] - fast_exp(y_row[j]) * s
        else:
            for j in range(cols):
                total += g_row[j] * y_row[j]
            dot = y.dtype.type(total)
            for j in range(cols):
                out_row[j] = (g_row[j] - dot) * y_row[j]


@_kernel
def softmax_backward_rows(parallel, y, grad, out, log):
    """Vector-Jacobian product of ``softmax_rows`` given its output ``y``:
    softmax: (g - sum(g y)) y;  log-softmax: g - exp(y) sum(g)."""
    rows = y.shape[0]
    if parallel:
        for c in prange(_CHUNKS):
            first, end = _chunk_bounds(rows, c)
            _softmax_backward_chunk(y, grad, out, log, first, end)
    else:
        _softmax_backward_chunk(y, grad, out, log, 0, rows)


# ---- layer norm over the last axis ------------------------------------------------------------
@_rows
def _layer_norm_chunk(x, weight, bias, eps, y, mean, rstd, first, end):
    # rows ``first`` .. ``end`` in one call (see _chunk_bounds)
    cols = x.shape[1]
    for r in range(first, end):
        x_row, y_row = x[r], y[r]
        total = 0.0
        for j in range(cols):
            total += x_row[j]
        centre = x.dtype.type(total / cols)
        squares = 0.0
        for j in range(cols):
            centred = x_row[j] - centre
            squares += centred * centred
        inv_std = x.dtype.type(1.0 / math.sqrt(x.dtype.type(squares / cols) + eps))
        mean[r] = centre
        rstd[r] = inv_std
        for j in range(cols):
            y_row[j] = (x_row[j] - centre) * inv_std * weight[j] + bias[j]


@_kernel
def layer_norm_rows(parallel, x, weight, bias, eps, y, mean, rstd):
    """y = (x - mean) * rstd * weight + bias with rstd = 1 / sqrt(var + eps), per row; ``eps``
    has the dtype of ``x`` (ones / zeros stand for a missing weight / bias). Saves each row's
    mean and rstd, from which the backward recomputes the normalised row: keeping it instead
    would write a third array as large as x."""
    rows = x.shape[0]
    if parallel:
        for c in prange(_CHUNKS):
            first, end = _chunk_bounds(rows, c)
            _layer_norm_chunk(x, weight, bias, eps, y, mean, rstd, first, end)
    else:
        _layer_norm_chunk(x, weight, bias, eps, y, mean, rstd, 0, rows)


@_rows
def _layer_norm_backward_chunk(grad, x, mean, rstd, weight, dx, dweight_parts, dbias_parts, c):
    rows, cols = grad.shape
    chunks = dbias_parts.shape[0]
    dweight_sum, dbias_sum = dweight_parts[c], dbias_parts[c]   # row views, as the forward
    for j in range(cols):
        dweight_sum[j] = 0
        dbias_sum[j] = 0
    for r in range(c * rows // chunks, (c + 1) * rows // chunks):
        g, x_row, d_row = grad[r], x[r], dx[r]
        centre, inv_std = mean[r], rstd[r]
        sum_d = 0.0
        sum_dx = 0.0
        for j in range(cols):
            normed = (x_row[j] - centre) * inv_std   # xhat, recomputed
            dbias_sum[j] += g[j]
            dweight_sum[j] += g[j] * normed
            d = g[j] * weight[j]
            sum_d += d
            sum_dx += d * normed
        mean_d = x.dtype.type(sum_d / cols)
        mean_dx = x.dtype.type(sum_dx / cols)
        for j in range(cols):
            normed = (x_row[j] - centre) * inv_std
            d_row[j] = (g[j] * weight[j] - mean_d - normed * mean_dx) * inv_std


@_kernel
def layer_norm_backward_rows(parallel, grad, x, mean, rstd, weight, dx, dweight_parts,
                             dbias_parts):
    """dx of ``layer_norm_rows`` from its input ``x`` and saved ``mean`` and ``rstd`` (``weight``
    ones when there is none), and the weight and bias gradients summed over each of
    ``len(dbias_parts)`` chunks of rows (the caller adds them)."""
    if parallel:
        for c in prange(dbias_parts.shape[0]):
            _layer_norm_backward_chunk(grad, x, mean, rstd, weight, dx, dweight_parts,
                                       dbias_parts, c)
    else:
        for c in range(dbias_parts.shape[0]):
            _layer_norm_backward_chunk(grad, x, mean, rstd, weight, dx, dweight_parts,
                                       dbias_parts, c)


# ---- GELU, with a bias added first ------------------------------------------------------------
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_GELU_TANH_C = 0.044715


@register_jitable
def _gelu_tanh(v, one, k, c):
    """0.5 v (1 + tanh(u)) = v sigmoid(2u), u = k (v + c v^3), k = sqrt(2/pi), in the precision
    of v (``one``, ``k``, ``c`` come in v's dtype): float32 math with the float32 exp vectorises,
    and its rounding error (a few ulp) is that of a float32 result anyway."""
    u = k * (v + c * v * v * v)
    return v / (one + fast_exp(-(one + one) * u))


@register_jitable
def _gelu_tanh_grad(v, one, k, c):
    """d/dv v sigmoid(2u) = s + 2 v s (1 - s) u'(v), u'(v) = k (1 + 3 c v^2)."""
    u = k * (v + c * v * v * v)
    s = one / (one + fast_exp(-(one + one) * u))
    return s + (one + one) * v * s * (one - s) * k * (one + (one + one + one) * c * v * v)


def gelu_constants(dtype):
    """The erf-GELU loops' constants in ``dtype`` as one array, which ``gelu_erf_rows`` takes as an
    argument: erf's (small, tail, split, centre, end) of ``erf.py``, (1/2, 1, 1/sqrt 2,
    1/sqrt(2 pi)), and for float32 the exponential's ``_SHIFTED_EXP32``.

    Why an argument: the loops use about 30 constants, more than AVX2's 16 vector registers, and
    compiled-in constants are reloaded in every iteration, each in two instructions (Numba's JIT
    addresses its constant pool absolutely). The forward ran 133 instructions per 8 elements, 60
    of them reloading constants. Read from an argument, they are broadcast once before the loop
    and reloaded, when they must be, in one instruction: 82 instructions, 27% less time. (An
    array, not tuples: a parallel loop takes arrays and scalars; ``_unpack_gelu_constants``
    makes the tuples inside it.)"""
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        erf, exp = _ERF32, _SHIFTED_EXP32[:-1] + _SHIFTED_EXP32[-1]
    else:
        erf, exp = _ERF64, ()
    numbers = (0.5, 1.0, _INV_SQRT_2, _INV_SQRT_2PI)
    return np.array(erf.small + erf.tail + (erf.split, erf.centre, erf.end) + numbers + exp,
                    dtype=dtype)


def _gelu_layout(erf):
    """Where ``gelu_constants`` puts things: (length of erf's small polynomial, of its tail
    polynomial, index of split (centre, end and the four numbers follow), index of the exp's
    constants, length of the exp's polynomial)."""
    small, tail = len(erf.small), len(erf.tail)
    return small, tail, small + tail, small + tail + 7, len(_SHIFTED_EXP32[-1])


def _unpack_gelu_constants(constants):
    """``gelu_constants``'s array as the tuples the loops read: ((small, tail, split, centre,
    end), (1/2, 1, 1/sqrt 2, 1/sqrt(2 pi)), the exp's constants (empty for float64))."""
    c = constants.tolist()
    small, tail, at, exp_at, exp_polynomial = _gelu_layout(
        _ERF32 if constants.dtype == np.float32 else _ERF64)
    exp = () if constants.dtype != np.float32 else \
        tuple(c[exp_at:exp_at + 6]) + (tuple(c[exp_at + 6:exp_at + 6 + exp_polynomial]),)
    erf = (tuple(c[:small]), tuple(c[small:at])) + tuple(c[at:at + 3])
    return erf, tuple(c[at + 3:at + 7]), exp


@overload(_unpack_gelu_constants, inline="always")
def _unpack_gelu_constants_overload(constants):
    small, tail, at, exp_at, exp_polynomial = _gelu_layout(
        _ERF32 if constants.dtype == types.float32 else _ERF64)

    @register_jitable(inline="always")
    def erf_and_numbers(c):
        return ((to_fixed_tuple(c[:small], small), to_fixed_tuple(c[small:at], tail), c[at],
                 c[at + 1], c[at + 2]),
                (c[at + 3], c[at + 4], c[at + 5], c[at + 6]))

    def with_exp(constants):
        c = constants
        return erf_and_numbers(c) + ((
            c[exp_at], c[exp_at + 1], c[exp_at + 2], c[exp_at + 3], c[exp_at + 4], c[exp_at + 5],
            to_fixed_tuple(c[exp_at + 6:exp_at + 6 + exp_polynomial], exp_polynomial)),)

    if constants.dtype == types.float64:
        return lambda constants: erf_and_numbers(constants) + ((),)
    return with_exp


# The two GELUs are two kernels, so that a run compiles only the one its model uses (the erf
# form's constants and polynomials made the single kernel of both take about 10 s to compile).
# Each row body is inlined by Numba itself: left to LLVM, a branching body stayed a call in the
# plain (one-thread) loop, whose element loops then ran 7x slower, unvectorised.
@register_jitable(fastmath=_FASTMATH, inline="always")
def _gelu_tanh_row(x, bias, grad, out, backward, r):
    cols = bias.shape[0]
    x_blk = x[r * cols:(r + 1) * cols]
    grad_blk = grad[r * cols:(r + 1) * cols]
    out_blk = out[r * cols:(r + 1) * cols]
    dtype = x.dtype.type
    one, k, c = dtype(1.0), dtype(_SQRT_2_OVER_PI), dtype(_GELU_TANH_C)
    if not backward:
        for i in range(x_blk.shape[0]):
            out_blk[i] = _gelu_tanh(x_blk[i] + bias[i], one, k, c)
    else:
        for i in range(x_blk.shape[0]):
            out_blk[i] = _gelu_tanh_grad(x_blk[i] + bias[i], one, k, c) * grad_blk[i]


@register_jitable(fastmath=_FASTMATH, inline="always")
def _gelu_erf_row(x, bias, grad, out, backward, constants, r):
    cols = bias.shape[0]
    x_blk = x[r * cols:(r + 1) * cols]
    grad_blk = grad[r * cols:(r + 1) * cols]
    out_blk = out[r * cols:(r + 1) * cols]
    (small, tail, split, centre, end), numbers, exp_constants = _unpack_gelu_constants(constants)
    half, one, inv_sqrt_2, inv_sqrt_2pi = numbers
    if not backward:
        for i in range(x_blk.shape[0]):
            v = x_blk[i] + bias[i]
            z = v * inv_sqrt_2
            erf = _erf_given_exp(z, shifted_exp_given(-(z * z), exp_constants), small, tail,
                                 split, centre, end, one)
            out_blk[i] = half * v * (one + erf)
    else:
        for i in range(x_blk.shape[0]):
            v = x_blk[i] + bias[i]
            z = v * inv_sqrt_2
            gauss = shifted_exp_given(-(z * z), exp_constants)  # exp(-v^2 / 2): cdf and pdf
            cdf = half * (one + _erf_given_exp(z, gauss, small, tail, split, centre, end, one))
            out_blk[i] = (cdf + v * (gauss * inv_sqrt_2pi)) * grad_blk[i]


@_kernel
def gelu_tanh_rows(parallel, x, bias, grad, out, backward):
    """out = gelu(x + bias) in its tanh form, or its derivative times ``grad`` when
    ``backward``, on flat arrays: ``bias`` repeats every ``len(bias)`` elements (zeros for a
    plain GELU); such a row is the unit of work of a thread. ``grad`` is not read in the
    forward."""
    rows = (x.shape[0] + bias.shape[0] - 1) // bias.shape[0]
    if parallel:
        for r in prange(rows):
            _gelu_tanh_row(x, bias, grad, out, backward, r)
    else:
        for r in range(rows):
            _gelu_tanh_row(x, bias, grad, out, backward, r)


@_kernel
def gelu_erf_rows(parallel, x, bias, grad, out, backward, constants):
    """``gelu_tanh_rows`` for the exact GELU, x Phi(x) (erf); ``constants`` are
    ``gelu_constants``'s for x's dtype."""
    rows = (x.shape[0] + bias.shape[0] - 1) // bias.shape[0]
    if parallel:
        for r in prange(rows):
            _gelu_erf_row(x, bias, grad, out, backward, constants, r)
    else:
        for r in range(rows):
            _gelu_erf_row(x, bias, grad, out, backward, constants, r)


# ---- Adam / AdamW update, in place ------------------------------------------------------------
@_rows
def _adam_block(theta, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, amsgrad, decay, l2, beta1,
                beta2, step_size, eps_hat, block, b):
    # over views from index 0, so that LLVM vectorises the loop (see _BLOCK)
    lo, hi = b * block, min(theta.shape[0], (b + 1) * block)
    t, g_in, m_out, v_out = theta[lo:hi], grad[lo:hi], exp_avg[lo:hi], exp_avg_sq[lo:hi]
    v_max = max_exp_avg_sq[lo:hi]
    one = theta.dtype.type(1.0)
    for i in range(t.shape[0]):
        g = g_in[i] + l2 * t[i]
        m = beta1 * m_out[i] + (one - beta1) * g
        v = beta2 * v_out[i] + (one - beta2) * (g * g)
        m_out[i] = m
        v_out[i] = v
        if amsgrad:
            v = max(v_max[i], v)
            v_max[i] = v
        t[i] = decay * t[i] - step_size * m / (math.sqrt(v) + eps_hat)


@_kernel
def adam_update(parallel, theta, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, amsgrad, decay, l2,
                beta1, beta2, step_size, eps_hat, block):
    """One Adam step over flat arrays in one pass (the NumPy update makes about ten): theta's
    decay factor (AdamW), the L2 coefficient added to the gradient (Adam), the moments, and
    theta -= step_size m / (sqrt(v) + eps_hat) with the bias corrections folded into step_size
    and eps_hat. ``max_exp_avg_sq`` is read and written only when ``amsgrad``."""
    blocks = (theta.shape[0] + block - 1) // block
    if parallel:
        for b in prange(blocks):
            _adam_block(theta, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, amsgrad, decay, l2,
                        beta1, beta2, step_size, eps_hat, block, b)
    else:
        for b in range(blocks):
            _adam_block(theta, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, amsgrad, decay, l2,
                        beta1, beta2, step_size, eps_hat, block, b)


# ---- scatter-add of rows (the gradient of an embedding lookup) ---------------------------------
@_rows
def _scatter_add_columns(index, src, out, block, b):
    c0 = b * block
    c1 = min(src.shape[1], c0 + block)
    for k in range(src.shape[0]):
        out_blk = out[index[k], c0:c1]
        src_blk = src[k, c0:c1]
        for j in range(out_blk.shape[0]):
            out_blk[j] += src_blk[j]


@_kernel
def scatter_add_rows(parallel, index, src, out, block):
    """out[index[k]] += src[k] for every k in order (``out`` holds what it adds to). Threads own
    blocks of ``block`` columns, so no two write the same element and the sums are
    deterministic."""
    blocks = (src.shape[1] + block - 1) // block
    if parallel:
        for b in prange(blocks):
            _scatter_add_columns(index, src, out, block, b)
    else:
        for b in range(blocks):
            _scatter_add_columns(index, src, out, block, b)


# ---- cross-entropy from logits, fused with its gradient ---------------------------------------
@_rows
def _cross_entropy_chunk(x, target, keep_weight, smoothing, loss, shift, log_total, first, end):
    cols = x.shape[1]
    for r in range(first, end):
        x_row = x[r]
        s = _row_shift(x, r, cols)
        total = _sum_of_exps(x_row, s)
        if total == 0.0:
            total = 1.0
        lt = x.dtype.type(math.log(total))
        shift[r] = s
        log_total[r] = lt
        t = target[r]
        if t < 0:
            loss[r] = 0
        else:
            nll = -((x_row[t] - s) - lt)
            if smoothing != 0:
                total = 0.0
                for j in range(cols):
                    total += (x_row[j] - s) - lt
                loss[r] = keep_weight * nll - smoothing * x.dtype.type(total / cols)
            else:
                loss[r] = nll


@_kernel
def cross_entropy_rows(parallel, x, target, keep_weight, smoothing, loss, shift, log_total):
    """Per-row loss (1 - eps) * -log p[t] + eps * mean_c(-log p[c]) of logits ``x`` (rows, C), 0
    where ``target`` is -1 (ignored); saves the row shift and log of the sum of exponentials, from
    which the backward recomputes log p = (x - shift) - log_total. ``keep_weight`` = 1 - eps and
    ``smoothing`` = eps have the dtype of ``x``."""
    rows = x.shape[0]
    if parallel:
        for c in prange(_CHUNKS):
            first, end = _chunk_bounds(rows, c)
            _cross_entropy_chunk(x, target, keep_weight, smoothing, loss, shift, log_total,
                                 first, end)
    else:
        _cross_entropy_chunk(x, target, keep_weight, smoothing, loss, shift, log_total, 0, rows)


@_rows
def _cross_entropy_backward_chunk(x, target, shift, log_total, grad_rows, keep_weight, uniform,
                                  out, first, end):
    cols = x.shape[1]
    for r in range(first, end):
        x_row, out_row = x[r], out[r]
        t = target[r]
        if t < 0:
            for j in range(cols):
                out_row[j] = 0
        else:
            g = grad_rows[r]
            s = shift[r]
            lt = log_total[r]
            for j in range(cols):
                out_row[j] = (fast_exp((x_row[j] - s) - lt) - uniform) * g
            out_row[t] = (fast_exp((x_row[t] - s) - lt) - uniform - keep_weight) * g


@_kernel
def cross_entropy_backward_rows(parallel, x, target, shift, log_total, grad_rows, keep_weight,
                                uniform, out):
    """d loss_r / d x_r = (p_r - eps / C - (1 - eps) onehot(t_r)) * grad_r; 0 on ignored rows
    (target -1). ``uniform`` = eps / C and ``keep_weight`` = 1 - eps have the dtype of ``x``."""
    rows = x.shape[0]
    if parallel:
        for c in prange(_CHUNKS):
            first, end = _chunk_bounds(rows, c)
            _cross_entropy_backward_chunk(x, target, shift, log_total, grad_rows, keep_weight,
                                          uniform, out, first, end)
    else:
        _cross_entropy_backward_chunk(x, target, shift, log_total, grad_rows, keep_weight,
                                      uniform, out, 0, rows)


# ---- attention: the masked softmax between two matmuls ----------------------------------------
@register_jitable(fastmath=_FASTMATH, inline="always")
def _exponentiate(line, top):
    """In place, ``line[j]`` -> exp(line[j] - top) for ``top`` the line's maximum (every exponent
    <= 0: ``shifted_exp``; -inf gives 0); returns their sum, accumulated in the line's dtype over
    blocks of ``_BLOCK`` (so that the loop vectorises) and the block sums in float64. The
    softmax step of attention, banded and grouped attention."""
    total = 0.0
    for j0 in range(0, line.shape[0], _BLOCK):
        block = line[j0:j0 + _BLOCK]
        part = line.dtype.type(0)
        for j in range(block.shape[0]):
            e = shifted_exp(block[j] - top)
            block[j] = e
            part += e
        total += part
    return total


@register_jitable
def _attention_row(scores, causal, heads, first_pair, first_query, tq, tk, row):
    """(block index, row in the block, pair, query, batch, end): keys j < end are causally
    allowed (queries are the last tq of tk positions) and present in the block."""
    rows, cols = scores.shape[1], scores.shape[2]
    h = row // rows
    r = row % rows
    pair = first_pair + h
    i = first_query + r
    end = min(cols, max(0, i + tk - tq + 1)) if causal else cols
    return h, r, pair, i, pair // heads, end


@register_jitable
def _row_max(line, end, minus_inf):
    """max(line[:end]) with four running maxima: a single one is a chain of dependent compares
    that the CPU cannot overlap (and a float max is no reduction LLVM vectorises)."""
    m0 = m1 = m2 = m3 = minus_inf
    j = 0
    while j + 4 <= end:
        m0 = line[j] if line[j] > m0 else m0
        m1 = line[j + 1] if line[j + 1] > m1 else m1
        m2 = line[j + 2] if line[j + 2] > m2 else m2
        m3 = line[j + 3] if line[j + 3] > m3 else m3
        j += 4
    for k in range(j, end):
        m0 = line[k] if line[k] > m0 else m0
    m0 = m1 if m1 > m0 else m0
    m2 = m3 if m3 > m2 else m2
    return m2 if m2 > m0 else m0


@register_jitable
def _add_bias(line, bias, use_bias, heads, pair, b, i, end):
    """line[:end] += the bias row of query i of pair (batch b, head pair % heads), when
    ``use_bias``; ``bias`` is broadcast to (batch, heads, tq, tk)."""
    if use_bias:
        added = bias[b, pair - b * heads, i]
        for j in range(end):
            line[j] += added[j]


@_rows
def _attention_probs_rows(scores, key_mask, use_mask, bias, use_bias, causal, heads, first_pair,
                          first_query, tq, tk, peak, inv_total, scale, first_row, end_row):
    # rows ``first_row`` .. ``end_row`` of the block in one call (see _chunk_bounds)
    minus_inf = scores.dtype.type(-np.inf)
    for row in range(first_row, end_row):
        h, r, pair, i, b, end = _attention_row(scores, causal, heads, first_pair, first_query,
                                               tq, tk, row)
        line, allowed = scores[h, r], key_mask[b]   # 1-D views: loops LLVM can vectorise
        if scale != 1:
            for j in range(end):
                line[j] *= scale
        _add_bias(line, bias, use_bias, heads, pair, b, i, end)
        if use_mask:
            for j in range(end):
                line[j] = line[j] if allowed[j] else minus_inf
        top = _row_max(line, end, minus_inf)
        if not math.isfinite(top):
            top = scores.dtype.type(0)
        total = _exponentiate(line[:end], top)
        for j in range(end, line.shape[0]):
            line[j] = 0
        if total == 0.0:
            total = 1.0
        inv = scores.dtype.type(1.0 / total)
        for j in range(end):
            line[j] *= inv
        peak[pair, i] = top
        inv_total[pair, i] = inv


@_kernel
def attention_probs(parallel, scores, key_mask, use_mask, bias, use_bias, causal, heads,
                    first_pair, first_query, tq, tk, peak, inv_total, scale):
    """In place: the scores q k^T of a block (pairs, queries, keys), times ``scale`` (of the
    scores' dtype), become their softmax with, when ``use_bias``, the score bias (broadcast to
    (batch, heads, tq, tk)) added, the causal mask and, when ``use_mask``, the key mask
    (batch, tk; True = real token) applied. The block holds
    the (batch * head) pairs from ``first_pair`` and the queries from ``first_query`` of
    (pairs, tq, tk) attention, and possibly only the first keys (when the others are causally
    masked for every query of the block). Saves each row's shift and 1 / sum of
    exponentials in ``peak`` / ``inv_total`` (pairs, tq). A row with no allowed key becomes 0."""
    rows = scores.shape[0] * scores.shape[1]
    if parallel:
        for c in prange(_CHUNKS):
            first, end = _chunk_bounds(rows, c)
            _attention_probs_rows(scores, key_mask, use_mask, bias, use_bias, causal, heads,
                                  first_pair, first_query, tq, tk, peak, inv_total, scale,
                                  first, end)
    else:
        _attention_probs_rows(scores, key_mask, use_mask, bias, use_bias, causal, heads,
                              first_pair, first_query, tq, tk, peak, inv_total, scale, 0, rows)


@_rows
def _attention_probs_backward_rows(scores, dprobs, key_mask, bias, use_bias, causal, heads,
                                   first_pair, first_query, tq, tk, peak, inv_total, recompute,
                                   scale, first_row, end_row):
    # rows ``first_row`` .. ``end_row`` of the block in one call (see _chunk_bounds)
    zero = scores.dtype.type(0)
    for row in range(first_row, end_row):
        h, r, pair, i, b, end = _attention_row(scores, causal, heads, first_pair, first_query,
                                               tq, tk, row)
        if recompute:
            line = scores[h, r]
            if scale != 1:
                for j in range(end):
                    line[j] *= scale
            _add_bias(line, bias, use_bias, heads, pair, b, i, end)
        top = peak[pair, i]
        inv = inv_total[pair, i]
        dot = 0.0
        for j0 in range(0, end, _BLOCK):
            j1 = min(end, j0 + _BLOCK)
            p_blk = scores[h, r, j0:j1]
            dp_blk = dprobs[h, r, j0:j1]
            mask_blk = key_mask[b, j0:j1]
            part = zero
            if recompute:
                for j in range(p_blk.shape[0]):
                    p = shifted_exp(p_blk[j] - top) * inv if mask_blk[j] else zero
                    p_blk[j] = p
                    part += p * dp_blk[j]
            else:
                for j in range(p_blk.shape[0]):
                    part += p_blk[j] * dp_blk[j]
            dot += part
        for j in range(end, scores.shape[2]):
            if recompute:
                scores[h, r, j] = 0
            dprobs[h, r, j] = 0
        d = scores.dtype.type(dot)
        for j in range(end):
            dprobs[h, r, j] = (dprobs[h, r, j] - d) * scores[h, r, j]


@_kernel
def attention_probs_backward(parallel, scores, dprobs, key_mask, bias, use_bias, causal, heads,
                             first_pair, first_query, tq, tk, peak, inv_total, recompute, scale):
    """On a block laid out as in ``attention_probs``: dprobs = g v^T becomes, in place,
    dscores = (dprobs - sum(dprobs p)) p, the gradient of the scaled scores (and of the bias),
    where p is ``scores`` itself (the saved probabilities) or, when ``recompute``, the forward's
    probabilities computed again in place from the scores q k^T times ``scale``, the bias and
    the saved shift and 1 / sum."""
    rows = scores.shape[0] * scores.shape[1]
    if parallel:
        for c in prange(_CHUNKS):
            first, end = _chunk_bounds(rows, c)
            _attention_probs_backward_rows(scores, dprobs, key_mask, bias, use_bias, causal,
                                           heads, first_pair, first_query, tq, tk, peak,
                                           inv_total, recompute, scale, first, end)
    else:
        _attention_probs_backward_rows(scores, dprobs, key_mask, bias, use_bias, causal, heads,
                                       first_pair, first_query, tq, tk, peak, inv_total,
                                       recompute, scale, 0, rows)


# ---- banded (sliding-window, dilated) self-attention -------------------------------------------
@_rows
def _banded_row(q, k, v, offsets, key_mask, heads, scale, probs, out, row):
    n, d = q.shape[1], q.shape[2]
    h = row // n
    i = row % n
    b = h // heads
    minus_inf = q.dtype.type(-np.inf)
    top = minus_inf
    for o in range(offsets.shape[0]):
        j = i + offsets[o]
        s = minus_inf
        if j >= 0 and j < n and key_mask[b, j]:
            acc = q.dtype.type(0)
            for e in range(d):
                acc += q[h, i, e] * k[h, j, e]
            s = acc * scale
        probs[h, i, o] = s
        top = max(top, s)
    if not math.isfinite(top):
        top = q.dtype.type(0)
    total = _exponentiate(probs[h, i], top)
    if total == 0.0:
        total = 1.0
    inv = q.dtype.type(1.0 / total)
    for e in range(v.shape[2]):
        out[h, i, e] = 0
    for o in range(offsets.shape[0]):
        p = probs[h, i, o] * inv
        probs[h, i, o] = p
        j = i + offsets[o]
        if p != 0 and j >= 0 and j < n:
            for e in range(v.shape[2]):
                out[h, i, e] += p * v[h, j, e]


@_kernel
def banded_attention_rows(parallel, q, k, v, offsets, key_mask, heads, scale, probs, out):
    """Query i of pair h attends keys i + offsets[o] that exist and are real tokens (``key_mask``
    (batch, n)); q, k, v are (batch*heads, n, d). Writes probs (pairs, n, len(offsets)) and out;
    no n x n array anywhere."""
    rows = q.shape[0] * q.shape[1]
    if parallel:
        for row in prange(rows):
            _banded_row(q, k, v, offsets, key_mask, heads, scale, probs, out, row)
    else:
        for row in range(rows):
            _banded_row(q, k, v, offsets, key_mask, heads, scale, probs, out, row)


@_rows
def _banded_backward_query_row(grad, k, v, offsets, probs, scale, dscores, dq, row):
    n, d = k.shape[1], k.shape[2]
    h = row // n
    i = row % n
    dot = 0.0
    for o in range(offsets.shape[0]):
        j = i + offsets[o]
        p = probs[h, i, o]
        dp = k.dtype.type(0)
        if p != 0 and j >= 0 and j < n:
            for e in range(v.shape[2]):
                dp += grad[h, i, e] * v[h, j, e]
        dscores[h, i, o] = dp
        dot += p * dp
    dt = k.dtype.type(dot)
    for e in range(d):
        dq[h, i, e] = 0
    for o in range(offsets.shape[0]):
        ds = (dscores[h, i, o] - dt) * probs[h, i, o] * scale
        dscores[h, i, o] = ds
        j = i + offsets[o]
        if ds != 0 and j >= 0 and j < n:
            for e in range(d):
                dq[h, i, e] += ds * k[h, j, e]


@_kernel
def banded_attention_backward_queries(parallel, grad, k, v, offsets, probs, scale, dscores, dq):
    """dscores = (g.v_j - sum_o p g.v_j) p * scale for each band slot, and dq = sum_o ds k_j."""
    rows = k.shape[0] * k.shape[1]
    if parallel:
        for row in prange(rows):
            _banded_backward_query_row(grad, k, v, offsets, probs, scale, dscores, dq, row)
    else:
        for row in range(rows):
            _banded_backward_query_row(grad, k, v, offsets, probs, scale, dscores, dq, row)


@_rows
def _banded_backward_key_row(grad, q, offsets, probs, dscores, dk, dv, row):
    n = q.shape[1]
    h = row // n
    j = row % n
    for e in range(q.shape[2]):
        dk[h, j, e] = 0
    for e in range(grad.shape[2]):
        dv[h, j, e] = 0
    for o in range(offsets.shape[0]):
        i = j - offsets[o]
        if i >= 0 and i < n:
            ds = dscores[h, i, o]
            if ds != 0:
                for e in range(q.shape[2]):
                    dk[h, j, e] += ds * q[h, i, e]
            p = probs[h, i, o]
            if p != 0:
                for e in range(grad.shape[2]):
                    dv[h, j, e] += p * grad[h, i, e]


@_kernel
def banded_attention_backward_keys(parallel, grad, q, offsets, probs, dscores, dk, dv):
    """dk_j = sum_o ds[i, o] q_i and dv_j = sum_o p[i, o] g_i over the queries i = j - offsets[o]
    that see key j: a gather, so that every thread writes its own rows."""
    rows = q.shape[0] * q.shape[1]
    if parallel:
        for row in prange(rows):
            _banded_backward_key_row(grad, q, offsets, probs, dscores, dk, dv, row)
    else:
        for row in range(rows):
            _banded_backward_key_row(grad, q, offsets, probs, dscores, dk, dv, row)


# ---- low-precision matrix products --------------------------------------------------------------
_INT8_ROW_BLOCK = 4  # rows of ``a`` that share each pass over a row of ``b``


@_rows
def _matmul_int8_rows(a, b, out, blk):
    i0 = blk * _INT8_ROW_BLOCK
    i1 = min(a.shape[0], i0 + _INT8_ROW_BLOCK)
    for i in range(i0, i1):
        for j in range(b.shape[1]):
            out[i, j] = 0
    for p in range(a.shape[1]):
        for i in range(i0, i1):
            a_ip = np.int32(a[i, p])
            if a_ip != 0:
                for j in range(b.shape[1]):
                    out[i, j] += np.int32(a_ip * np.int32(b[p, j]))


@_kernel
def matmul_int8(parallel, a, b, out):
    """out = a @ b for int8 a (M, K), b (K, N), accumulated in int32 (wrapping like NumPy's)."""
    blocks = (a.shape[0] + _INT8_ROW_BLOCK - 1) // _INT8_ROW_BLOCK
    if parallel:
        for blk in prange(blocks):
            _matmul_int8_rows(a, b, out, blk)
    else:
        for blk in range(blocks):
            _matmul_int8_rows(a, b, out, blk)


@_rows
def _binary_matmul_row(a_words, b_words, k, out, i):
    for j in range(b_words.shape[0]):
        differing = np.uint64(0)
        for w in range(a_words.shape[1]):
            differing += _popcount(a_words[i, w] ^ b_words[j, w])
        out[i, j] = np.int32(k - 2 * np.int64(differing))


@_kernel
def binary_matmul(parallel, a_words, b_words, k, out):
    """{-1,+1} products from packed signs as uint64 words: a.b = k - 2 popcount(a xor b)."""
    if parallel:
        for i in prange(a_words.shape[0]):
            _binary_matmul_row(a_words, b_words, k, out, i)
    else:
        for i in range(a_words.shape[0]):
            _binary_matmul_row(a_words, b_words, k, out, i)


# ---- running top-k of score blocks (exact maximum inner product search) -----------------------
@_rows
def _merge_top_k_row(best_scores, best_ids, scores, offset, r):
    k = best_scores.shape[1]
    row_scores, row_ids = best_scores[r], best_ids[r]
    for j in range(scores.shape[1]):
        s = scores[r, j]
        if s > row_scores[k - 1]:
            p = k - 1
            while p > 0 and row_scores[p - 1] < s:   # equal scores keep the earlier id first
                row_scores[p] = row_scores[p - 1]
                row_ids[p] = row_ids[p - 1]
                p -= 1
            row_scores[p] = s
            row_ids[p] = offset + j


@_kernel
def merge_top_k(parallel, best_scores, best_ids, scores, offset):
    """Merge the score block ``scores`` (rows, n), whose column j is id ``offset + j``, into each
    row's best ``k`` so far (``best_scores`` descending and ``best_ids``, (rows, k), in place):
    one pass over the block and an insertion when a score beats the k-th best."""
    if parallel:
        for r in prange(scores.shape[0]):
            _merge_top_k_row(best_scores, best_ids, scores, offset, r)
    else:
        for r in range(scores.shape[0]):
            _merge_top_k_row(best_scores, best_ids, scores, offset, r)
