"""Ranking scores, shared by the retrieval indexes (``DenseIndex``, ``BM25``) and GoldEn: how
many results a search can return, and the ``k`` best of each row."""
from __future__ import annotations

import warnings

import numpy as np

from .. import checks

__all__ = ["clamp_k", "top_k"]


def clamp_k(k, size, where):
    checks.positive_int(k, "k", where)
    if size == 0:
        raise ValueError(f"{where}: the index is empty; add vectors before searching")
    if k > size:
        warnings.warn(f"{where}: k={k} is larger than the index ({size} vectors); returning "
                      f"all {size}", stacklevel=3)
    return min(k, size)


def top_k(scores, k, xp=np):
    """The ``k`` largest entries of each row of ``scores`` (rows, n), best first: ``(values,
    indices)``, both (rows, k). ``xp`` is the array namespace
    (``numpy`` or ``cupy``) that holds ``scores``."""
    n = scores.shape[1]
    if k < n:
        part = xp.argpartition(-scores, k - 1, axis=1)[:, :k]
    else:
        part = xp.broadcast_to(xp.arange(n), scores.shape)
    values = xp.take_along_axis(scores, part, axis=1)
    order = xp.argsort(-values, axis=1, kind="stable")
    return xp.take_along_axis(values, order, axis=1), xp.take_along_axis(part, order, axis=1)
