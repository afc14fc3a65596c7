"""The numba.cuda kernels of the CuPy backend, run on the CPU by the CUDA simulator.

Run with the simulator switched on before Python starts (CI does, in its own pytest run)::

    NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/test_backend_cuda.py -m cudasim

Without it every test here is skipped. The tests themselves are in ``backend_checks.py`` (shared
with ``test_backend_cupy.py``, which runs them on a GPU); here ``gpu_backend`` is a
``CupyBackend`` whose array module is NumPy, so its launchers hand NumPy arrays to the simulator.
"""
from __future__ import annotations

import os
import types

import numpy as np
import pytest

from minitorch_nlp.backends.cupy_backend import CupyBackend
from minitorch_nlp.backends.numpy_backend import NumpyBackend
from tests.backend_checks import *  # noqa: F401,F403 - the shared tests, collected here

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"

pytestmark = [
    pytest.mark.cudasim,
    pytest.mark.skipif(not SIMULATOR, reason="needs the CUDA simulator: NUMBA_ENABLE_CUDASIM=1 "
                                             "set before Python starts"),
]


@pytest.fixture(scope="module")
def gpu_backend():
    from minitorch_nlp.backends import cuda_kernels

    numpy_as_cupy = types.SimpleNamespace(**vars(np), asnumpy=np.asarray)  # cupy.asnumpy's role
    return CupyBackend(modules=(numpy_as_cupy, NumpyBackend(), cuda_kernels))
