"""Reference maths of ALBERT (Lan et al., 2020), the survey's section IX-C: eq 106."""
from __future__ import annotations

from fractions import Fraction

import numpy as np


def eq106_ngram_length_probabilities(max_n):
    """p(n) = (1/n) / sum_{k=1}^{N} (1/k) for n = 1 .. N (eq 106; the survey prints the sum's
    upper limit as n, Lan et al. section 4.1 sum to N = 3). Exact rational arithmetic, one
    length at a time, converted to float64 at the end."""
    harmonic = sum(Fraction(1, k) for k in range(1, max_n + 1))
    return np.array([float(Fraction(1, n) / harmonic) for n in range(1, max_n + 1)])
