"""Each elementwise operation's value and gradient at 0, +inf, -inf and nan: the registry that the
table in docs/engine.md is generated from, and that ``tests/test_special_values.py`` checks
against the engine (float64, the gradient d/dx of the output at that point).

Where the chain rule would multiply 0 by an infinity at a point where the maths has a value,
the engine takes it (d/dx x^0 = 0 everywhere, xlogy(0, y) = 0); elsewhere IEEE arithmetic decides,
as in NumPy and PyTorch (x sigmoid(x) at -inf is -inf * 0 = nan).

``python -m minitorch_nlp.testing.special_values docs/engine.md`` rewrites the table between the
page's markers.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from .. import functional as F
from ..autograd import ops_elementwise as ew

INF, NAN = math.inf, math.nan
LOG2 = math.log(2.0)
HALF_PI = math.pi / 2
TWO_BY_SQRT_PI = 2.0 / math.sqrt(math.pi)
SELU_ALPHA, SELU_SCALE = F.SELU_ALPHA, F.SELU_SCALE
POINTS = (0.0, INF, -INF, NAN)
BEGIN = "<!-- special-values:begin -->"
END = "<!-- special-values:end -->"


class Row(NamedTuple):
    name: str
    call: Callable
    value: tuple      # at each of POINTS
    gradient: tuple   # d/dx at each of POINTS


SPECIAL_VALUES = [
    Row("exp", ew.exp,
        (1, INF, 0, NAN),
        (1, INF, 0, NAN)),
    Row("expm1", ew.expm1,
        (0, INF, -1, NAN),
        (1, INF, 0, NAN)),
    Row("exp2", ew.exp2,
        (1, INF, 0, NAN),
        (LOG2, INF, 0, NAN)),
    Row("log", ew.log,
        (-INF, INF, NAN, NAN),
        (INF, 0, 0, NAN)),
    Row("log1p", ew.log1p,
        (0, INF, NAN, NAN),
        (1, 0, 0, NAN)),
    Row("log2", ew.log2,
        (-INF, INF, NAN, NAN),
        (INF, 0, 0, NAN)),
    Row("log10", ew.log10,
        (-INF, INF, NAN, NAN),
        (INF, 0, 0, NAN)),
    Row("sqrt", ew.sqrt,
        (0, INF, NAN, NAN),
        (INF, 0, NAN, NAN)),
    Row("rsqrt", ew.rsqrt,
        (INF, 0, NAN, NAN),
        (-INF, 0, NAN, NAN)),
    Row("sin", ew.sin,
        (0, NAN, NAN, NAN),
        (1, NAN, NAN, NAN)),
    Row("cos", ew.cos,
        (1, NAN, NAN, NAN),
        (0, NAN, NAN, NAN)),
    Row("tan", ew.tan,
        (0, NAN, NAN, NAN),
        (1, NAN, NAN, NAN)),
    Row("asin", ew.arcsin,
        (0, NAN, NAN, NAN),
        (1, NAN, NAN, NAN)),
    Row("acos", ew.arccos,
        (HALF_PI, NAN, NAN, NAN),
        (-1, NAN, NAN, NAN)),
    Row("atan", ew.arctan,
        (0, HALF_PI, -HALF_PI, NAN),
        (1, 0, 0, NAN)),
    Row("sinh", ew.sinh,
        (0, INF, -INF, NAN),
        (1, INF, INF, NAN)),
    Row("cosh", ew.cosh,
        (1, INF, INF, NAN),
        (0, INF, -INF, NAN)),
    Row("tanh", ew.tanh,
        (0, 1, -1, NAN),
        (1, 0, 0, NAN)),
    Row("asinh", ew.arcsinh,
        (0, INF, -INF, NAN),
        (1, 0, 0, NAN)),
    Row("acosh", ew.arccosh,
        (NAN, INF, NAN, NAN),
        (NAN, 0, 0, NAN)),
    Row("atanh", ew.arctanh,
        (0, NAN, NAN, NAN),
        (1, 0, 0, NAN)),
    Row("sigmoid", ew.sigmoid,
        (0.5, 1, 0, NAN),
        (0.25, 0, 0, NAN)),
    Row("softplus", ew.softplus,
        (LOG2, INF, 0, NAN),
        (0.5, 1, 0, NAN)),
    Row("erf", ew.erf,
        (0, 1, -1, NAN),
        (TWO_BY_SQRT_PI, 0, 0, NAN)),
    Row("abs", ew.abs,
        (0, INF, INF, NAN),
        (0, 1, -1, NAN)),
    Row("sign", ew.sign,
        (0, 1, -1, NAN),
        (0, 0, 0, 0)),
    Row("floor", ew.floor,
        (0, INF, -INF, NAN),
        (0, 0, 0, 0)),
    Row("round", ew.round,
        (0, INF, -INF, NAN),
        (0, 0, 0, 0)),
    Row("relu", ew.relu,
        (0, INF, 0, NAN),
        (0, 1, 0, 0)),
    Row("F.gelu", lambda x: F.gelu(x),
        (0, INF, NAN, NAN),
        (0.5, NAN, NAN, NAN)),
    Row("F.gelu(approximate='tanh')", lambda x: F.gelu(x, approximate="tanh"),
        (0, INF, NAN, NAN),
        (0.5, NAN, NAN, NAN)),
    Row("F.quick_gelu", lambda x: F.quick_gelu(x),
        (0, INF, NAN, NAN),
        (0.5, NAN, NAN, NAN)),
    Row("F.silu", lambda x: F.silu(x),
        (0, INF, NAN, NAN),
        (0.5, NAN, NAN, NAN)),
    Row("F.mish", lambda x: F.mish(x),
        (0, INF, NAN, NAN),
        (0.6, NAN, NAN, NAN)),
    Row("F.logsigmoid", lambda x: F.logsigmoid(x),
        (-LOG2, 0, -INF, NAN),
        (0.5, 0, 1, NAN)),
    Row("F.elu", lambda x: F.elu(x),
        (0, INF, -1, NAN),
        (1, 1, 0, NAN)),
    Row("F.celu", lambda x: F.celu(x),
        (0, INF, -1, NAN),
        (1, 1, 0, NAN)),
    Row("F.selu", lambda x: F.selu(x),
        (0, INF, -SELU_SCALE * SELU_ALPHA, NAN),
        (SELU_SCALE * SELU_ALPHA, SELU_SCALE, 0, NAN)),
    Row("F.leaky_relu", lambda x: F.leaky_relu(x),
        (0, INF, -INF, NAN),
        (0.01, 1, 0.01, 0.01)),
    Row("F.softsign", lambda x: F.softsign(x),
        (0, NAN, NAN, NAN),
        (1, NAN, NAN, NAN)),
    Row("F.hardtanh", lambda x: F.hardtanh(x),
        (0, 1, -1, NAN),
        (1, 0, 0, 0)),
    Row("F.hardsigmoid", lambda x: F.hardsigmoid(x),
        (0.5, 1, 0, NAN),
        (1 / 6, 0, 0, 0)),
    Row("F.hardswish", lambda x: F.hardswish(x),
        (0, INF, NAN, NAN),
        (0.5, NAN, NAN, NAN)),
    Row("x**2", lambda x: x ** 2,
        (0, INF, INF, NAN),
        (0, INF, -INF, NAN)),
    Row("x**0", lambda x: x ** 0,
        (1, 1, 1, 1),
        (0, 0, 0, 0)),
    Row("x**0.5", lambda x: x ** 0.5,
        (0, INF, NAN, NAN),
        (INF, 0, 0, NAN)),
    Row("x**-1", lambda x: x ** -1,
        (INF, 0, 0, NAN),
        (-INF, 0, 0, NAN)),
    Row("2**x", lambda x: 2.0 ** x,
        (1, INF, 0, NAN),
        (LOG2, INF, 0, NAN)),
    Row("1/x", lambda x: 1.0 / x,
        (INF, 0, 0, NAN),
        (-INF, 0, 0, NAN)),
    Row("xlogy(x, x)", lambda x: ew.xlogy(x, x),
        (0, INF, NAN, NAN),
        (0, NAN, NAN, NAN)),
]


def _cell(number):
    if math.isnan(number):
        return "nan"
    if math.isinf(number):
        return "inf" if number > 0 else "-inf"
    return f"{number:.4g}" if number != 0 else "0"


def markdown_table():
    """The registry as a Markdown table: one row per operation, "value / gradient" per point."""
    lines = ["| operation | x = 0 | x = inf | x = -inf | x = nan |", "|---|---|---|---|---|"]
    for row in SPECIAL_VALUES:
        cells = [f"{_cell(v)} / {_cell(g)}" for v, g in zip(row.value, row.gradient)]
        lines.append(f"| `{row.name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def page_with_table(text):
    """``text`` with the table between its markers replaced by ``markdown_table()``."""
    head, found, rest = text.partition(BEGIN)
    if not found or END not in rest:
        raise ValueError(f"special_values: the page has no {BEGIN} ... {END} block")
    return head + BEGIN + "\n" + markdown_table() + "\n" + END + rest.partition(END)[2]


if __name__ == "__main__":
    page = Path(sys.argv[1])
    page.write_text(page_with_table(page.read_text()))
