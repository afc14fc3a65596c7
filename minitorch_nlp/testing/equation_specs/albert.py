"""Spec of ALBERT's n-gram masking (the survey's section IX-C): the probabilities of the n-gram
lengths (eq 106)."""
from __future__ import annotations

from hypothesis import strategies as st

from ..reference import albert as reference
from ..spec import Spec

SPECS = (
    Spec(106, "ngram_length_probabilities",
         (("max_n", "int >= 1, N: the longest n-gram"),),
         "float64 (N,): entry n - 1 holds p(n) = (1/n) / sum_{k=1}^{N} (1/k)",
         (),
         lambda: st.fixed_dictionaries(
             {"max_n": st.integers(1, 12) | st.sampled_from([50, 200])}),   # and long tails
         reference.eq106_ngram_length_probabilities,
         "minitorch_nlp.data.albert:ngram_length_probabilities",
         "Values only: p(n) is a table of the integer N, with no float input. The survey prints "
         "the sum's upper limit as n; Lan et al. (section 4.1) sum to N, which makes p a "
         "distribution (N = 3 in ALBERT: 6/11, 3/11, 2/11)."),
)
