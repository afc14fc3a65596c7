"""The spec of the deep character Transformer's equation (Al-Rfou et al., 2019; the survey's
section VIII-A): eq 85, the autoregressive factorisation of a segment's probability, as the
paper trains it: -log of its factors at every position, from every layer on the paper's
schedule, for the next character and the ones after it."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from .. import strategies as S
from ..reference import char_transformer as reference
from ..spec import Spec


@st.composite
def _loss_cases(draw):
    """Logits from near-uniform to +-1e4 and shifted by +-1e5; progress on a layer's exact
    stopping point (stop l / n is exact in binary for the stops drawn) as well as between."""
    layers, targets, batch = (draw(st.integers(1, 3)) for _ in range(3))
    time, vocab = draw(st.integers(targets + 1, targets + 4)), draw(st.integers(1, 4))
    labels = draw(S.arrays((batch, time), 0, vocab - 1).map(lambda a: np.rint(a).astype(np.int64)))
    ignored = draw(S.bool_masks((batch, time)))
    intermediate_stop = draw(st.sampled_from([0.5, 0.25, 1.0]))
    progress = draw(st.one_of(
        st.sampled_from([0.0, 0.1, 0.2, 0.3, 0.45, 0.5, 0.9, 1.0]),
        st.integers(1, layers).map(lambda layer: intermediate_stop * layer / layers)))
    logits = draw(S.scaled_arrays((layers, targets, batch, time, vocab)))
    return {"logits": logits + draw(S.score_offsets()),
            "labels": np.where(ignored, -100, labels),
            "progress": progress,
            "all_positions": draw(st.booleans()),
            "intermediate_stop": intermediate_stop,
            "extra_target_weight": draw(st.sampled_from([0.5, 0.0, 1.0]))}


SPECS = (
    Spec(85, "deep_char_loss",
         (("logits", "float64 (layers, targets, batch, T, V): layer l's scores (the last layer "
                     "last) of the character k = 1 .. targets steps after each position"),
          ("labels", "int64 (batch, T): the segment's characters (-100: not predicted); "
                     "position i is scored on labels[:, i + k] for target k"),
          ("progress", "float in [0, 1]: the fraction of training done"),
          ("all_positions", "bool: every position predicts (False: the last one with a "
                            "target only)"),
          ("intermediate_stop", "float in (0, 1]: layer l of n stops counting after "
                                "l / n * intermediate_stop of the training (the paper: 0.5)"),
          ("extra_target_weight", "float: the weight of the targets after the next character "
                                  "(the paper: 0.5)")),
         "float64 (): the sum over the counted layers of the mean -log P(t_{i+1} | t_{0:i}) "
         "plus extra_target_weight times the mean -log P(t_{i+k} | t_{0:i}) for each k >= 2",
         ("logits",),
         _loss_cases,
         reference.deep_char_loss,
         "minitorch_nlp.models.char_transformer:deep_char_loss",
         "Eq 85 is P(t_{0:L}) = P(t_0) prod_i P(t_i | t_{0:i-1}); the model has no start symbol, "
         "so a segment's loss is -(1/L) log P(t_{1:L} | t_0). A mean with no counted position "
         "is 0."),
)
