"""The numba.cuda kernels of the CuPy backend, run on the CPU by the CUDA simulator.

Run with the simulator switched on before Python starts (CI does, in its own pytest run)::

    NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/test_backend_cuda.py -m cudasim

Without it every test here is skipped. The tests themselves are in ``backend_checks.py`` (shared
with ``test_backend_cupy.py``, which runs them on a GPU); here ``gpu_backend`` is a
``CupyBackend`` whose array module is NumPy, so its launchers hand NumPy arrays to the simulator.
"""
from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given
from numba import cuda

from minitorch_nlp.backends import cuda_kernels
from tests.backend_checks import *  # noqa: F401,F403 - the shared tests, collected here
from tests.backend_checks import FEW, ERF_ULPS, erf_arguments, erf_grid, erf_ulp_errors
from tests.kernel_checks import SIMULATOR, gpu_backend  # noqa: F401 - the fixture


pytestmark = [
    pytest.mark.cudasim,
    pytest.mark.skipif(not SIMULATOR, reason="needs the CUDA simulator: NUMBA_ENABLE_CUDASIM=1 "
                                             "set before Python starts"),
]


# ---- the kernels' own erf (their GELU's), against math.erf ---------------------------------------
@cuda.jit
def _erf_kernel(x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = cuda_kernels._erf(x[i])


def _device_erf(x):
    """``cuda_kernels._erf`` of each element of ``x``, in a kernel of one thread per element."""
    out = np.empty_like(x)
    threads = cuda_kernels.THREADS_PER_BLOCK
    _erf_kernel[(x.shape[0] + threads - 1) // threads, threads](x, out)
    return out


def test_the_kernels_erf_is_within_a_few_ulp_of_math_erf():
    """Every kind of float (a thinned ``erf_grid``: the simulator runs one Python thread per
    element), in float32 and float64: the float64 polynomials rounded to the input's dtype."""
    for dtype in (np.float32, np.float64):
        grid = erf_grid(dtype)
        x = np.concatenate([grid[:-9:17], grid[-9:]])  # every 17th, and all the edge values
        got = _device_erf(x)
        assert got.dtype == dtype
        assert erf_ulp_errors(got, x).max() <= ERF_ULPS
        assert np.signbit(got[x == 0]).tolist() == np.signbit(x[x == 0]).tolist()


@FEW
@given(x32=erf_arguments(np.float32), x64=erf_arguments(np.float64))
def test_the_kernels_erf_of_drawn_floats_is_within_a_few_ulp(x32, x64):
    for x in (x32, x64):
        assert erf_ulp_errors(_device_erf(x), x).max() <= ERF_ULPS
