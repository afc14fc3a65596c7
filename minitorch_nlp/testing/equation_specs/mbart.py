"""Specs of mBART's function-level equations: the language sampling ratio (eq 30) and the
multilingual denoising objective (eq 31)."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from .. import strategies as S
from ..reference import mbart as reference
from ..spec import Spec
from .seq2seq import logits_and_ids


def _sizes():
    """Sizes from 0.1 to 50 (and sometimes one 2e4 times larger), alpha varied: 0.7 (mBART's),
    1 (no smoothing: every ratio is 1), 1e-3 (nearly uniform over languages) and others."""
    sizes = st.integers(1, 5).flatmap(lambda k: S.arrays((k,), 0.1, 50.0))
    huge = sizes.map(lambda a: a * np.where(np.arange(len(a)) == 0, 2e4, 1.0))
    alphas = st.sampled_from((0.7, 1.0, 1e-3)) | st.floats(0.05, 1.5)
    return st.tuples(sizes | huge, alphas).map(
        lambda pair: {"sizes": pair[0], "alpha": pair[1]})


SPECS = (
    Spec(30, "language_sampling_ratios",
         (("sizes", "float64 (K,), each language's amount of data (> 0)"),
          ("alpha", "float > 0, the smoothing exponent (mBART's 0.7)")),
         "float64 (K,): lambda_i = (1 / p_i) * p_i^alpha / sum_j p_j^alpha, p_i = sizes_i / "
         "sum_j sizes_j",
         ("sizes",),
         _sizes,
         reference.eq30_language_sampling_ratios,
         "minitorch_nlp.data.multilingual:language_sampling_ratios",
         "p_i lambda_i = p_i^alpha / sum_j p_j^alpha is the probability of drawing a text of "
         "language i."),
    Spec(31, "multilingual_denoising_log_likelihood",
         (("logits", "float64 (batch, T, V), the decoder's teacher-forced scores reading g(X)"),
          ("targets", "int64 (batch, T), the original texts X; pad_id positions count for "
                      "nothing"),
          ("pad_id", "int, the padding id (0 by default)")),
         "float64 (): L = sum over texts of log P(X | g(X))",
         ("logits",),
         lambda: st.tuples(logits_and_ids("targets", 0), st.sampled_from((0, 1))).map(
             lambda pair: {**pair[0], "pad_id": pair[1]}),
         reference.eq31_multilingual_denoising_log_likelihood,
         "minitorch_nlp.data.multilingual:multilingual_denoising_log_likelihood"),
)
