"""The table of each elementwise operation's value and gradient at 0, +-inf and nan
(``minitorch_nlp.testing.special_values``) holds for the engine on the NumPy and Numba
backends, and docs/engine.md shows exactly that table."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp.testing.special_values import (
    POINTS,
    SPECIAL_VALUES,
    page_with_table,
)

ENGINE_PAGE = Path(__file__).resolve().parents[1] / "docs" / "engine.md"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("backend", [
    "numpy", pytest.param("numba", marks=pytest.mark.skipif(
        importlib.util.find_spec("numba") is None, reason="needs numba"))])
@pytest.mark.parametrize("row", SPECIAL_VALUES, ids=[row.name for row in SPECIAL_VALUES])
def test_value_and_gradient_at_special_points(backend, row):
    with mt.backend(backend):
        x = mt.tensor(np.array(POINTS), dtype=mt.float64, requires_grad=True)
        y = row.call(x)
        (g,) = mt.grad(y.sum(), x)
    np.testing.assert_allclose(y.numpy(), row.value, rtol=1e-12, err_msg=f"{row.name} value")
    np.testing.assert_allclose(g.numpy(), row.gradient, rtol=1e-12,
                               err_msg=f"{row.name} gradient")


def test_the_engine_page_shows_the_registry():
    text = ENGINE_PAGE.read_text()
    assert page_with_table(text) == text, (
        "docs/engine.md's table is stale: run python -m minitorch_nlp.testing.special_values "
        "docs/engine.md")
