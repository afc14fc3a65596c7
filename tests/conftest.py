"""Shared test set-up: hypothesis profiles, GPU skipping, a plain marker per equation, and a clean
engine per test (the other markers are registered in pyproject.toml).

A test marked ``@pytest.mark.eq(11, 12)`` also carries the plain markers ``eq11`` and ``eq12``, so
that ``pytest -m eq12`` selects equation 12's tests (``-m`` matches marker names, not their
arguments); ``eq1``..``eq111`` are registered here, one per equation of the registry.

Profiles (``HYPOTHESIS_PROFILE=ci|dev|thorough``, default ``ci``):

* ``ci``: derandomized (the same examples on every run), 25 examples, no deadline;
* ``dev``: random, 50 examples, no deadline (finds new counterexamples while you work);
* ``thorough``: random, 500 examples (before a release, or after touching the engine).
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Two workers on two cores: a second BLAS thread per worker only busy-waits against the other
    # worker (a 512x64 @ 64x64 product measured 16 ms instead of 0.2 ms). Must precede numpy.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest
from hypothesis import HealthCheck, settings

import minitorch_nlp as mt
from minitorch_nlp import cookbook

# The section VII fixtures (``kb``, ``tokenizer``) for every test module that takes them.
pytest_plugins = ["tests.retrieval_checks"]

settings.register_profile("ci", derandomize=True, max_examples=25, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow], print_blob=True)
settings.register_profile("dev", max_examples=50, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=500, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

def _gpu_missing_reason():
    """Why ``gpu`` tests cannot run here, or None when cupy sees a GPU."""
    if importlib.util.find_spec("cupy") is None:
        return "needs cupy (pip install -e '.[gpu]')"
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "cupy finds no GPU"
    except Exception as error:  # noqa: BLE001 - any CUDA failure means no usable GPU
        return f"cupy cannot use a GPU: {error}"
    return None


def pytest_configure(config):
    for number in cookbook.EQUATIONS:
        config.addinivalue_line(
            "markers",
            f"eq{number}: checks equation {number} of the paper (added for eq({number}))")


def _add_plain_equation_markers(items):
    for item in items:
        numbers = {number for mark in item.iter_markers("eq") for number in mark.args}
        for number in sorted(numbers):
            item.add_marker(getattr(pytest.mark, f"eq{number}"))


def pytest_collection_modifyitems(config, items):
    _add_plain_equation_markers(items)
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    reason = _gpu_missing_reason()
    if reason is not None:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def clean_engine():
    """Each test starts on the NumPy backend, float32 default dtype, recording on, seed 0, and
    whatever it changes is put back afterwards."""
    mt.set_backend("numpy")
    mt.set_default_dtype(mt.float32)
    mt.set_grad_enabled(True)
    mt.manual_seed(0)
    yield
    mt.set_backend("numpy")
    mt.set_default_dtype(mt.float32)
    mt.set_grad_enabled(True)


ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def run_example(tmp_path):
    """``run_example("elmo.py", "--smoke", ...)`` runs ``examples/elmo.py`` in a fresh interpreter
    that imports this checkout's package, inside ``tmp_path``; returns the completed process after
    checking it exited 0."""
    def run(script, *args, timeout=120):
        paths = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        done = subprocess.run([sys.executable, str(ROOT / "examples" / script), *args],
                              capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)})
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    return run


@pytest.fixture
def text_file(tmp_path):
    """``tests.cli_checks.TEXT`` in a file (a module may define its own ``text_file``)."""
    from tests.cli_checks import TEXT
    path = tmp_path / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path
