"""Reproducible random numbers: ``manual_seed`` and ``Generator``.

Random tensors are drawn on the CPU with NumPy's PCG64 and then moved to the tensor's backend, so
the same seed gives the same numbers on every backend (which is what lets the backends be tested
against each other).
"""
from __future__ import annotations

import numpy as np


class Generator:
    """A seeded source of random numbers; pass one as ``generator=`` for a private stream."""

    def __init__(self, seed: int | None = None):
        self.manual_seed(seed)

    def manual_seed(self, seed: int | None):
        if seed is not None and (not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ValueError(f"manual_seed: the seed must be a non-negative int, got {seed!r}")
        self.initial_seed = seed
        self.numpy_rng = np.random.Generator(np.random.PCG64(seed))
        return self

    def get_state(self) -> dict:
        return self.numpy_rng.bit_generator.state

    def set_state(self, state: dict) -> None:
        self.numpy_rng.bit_generator.state = state


_default = Generator(0)


def default_generator() -> Generator:
    return _default


def manual_seed(seed: int) -> Generator:
    """Reseed the default generator (used by ``rand``, ``randn``, dropout and initialisers)."""
    return _default.manual_seed(seed)


def rng(generator: Generator | None = None) -> np.random.Generator:
    return (generator or _default).numpy_rng
