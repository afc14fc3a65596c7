"""The shared strategies deliver what they promise (a harness that silently draws only
contiguous arrays, or ties, would make every test that uses it weaker)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import find, given, settings, strategies as st

from minitorch_nlp.testing import strategies as S


@given(S.broadcastable_shapes(3))
def test_broadcastable_shapes_broadcast(shapes):
    assert len(shapes) == 3
    np.broadcast_shapes(*shapes)


@given(st.data())
def test_broadcast_targets_are_targets(data):
    shape = data.draw(S.shapes())
    target = data.draw(S.broadcast_targets(shape))
    assert np.broadcast_shapes(shape, target) == target


@given(S.arrays(S.shapes(), -2.0, 2.0))
def test_arrays_are_finite_and_bounded(a):
    assert a.dtype == np.float64
    assert np.isfinite(a).all() and (np.abs(a) <= 2.0).all()
    assert ((a == 0) | (np.abs(a) >= S.TINY)).all()


@given(S.arrays((3,), dtype=np.float32))
def test_float32_arrays(a):
    assert a.dtype == np.float32


@given(S.positive_arrays(), S.nonzero_arrays())
def test_safe_domains(positive, nonzero):
    assert (positive >= 0.1).all()
    assert (np.abs(nonzero) >= 0.5).all()


@given(S.distinct_arrays(S.shapes(max_side=4)), S.distinct_arrays((5,), offset=0.05))
def test_distinct_arrays_have_no_ties_and_no_zeros(a, b):
    assert len(np.unique(a)) == a.size
    assert (np.abs(a) >= 0.04).all()
    assert not np.isin(np.round(a, 6), np.round(b, 6)).any()


@pytest.mark.parametrize("layout", S.LAYOUTS)
@given(a=S.arrays(S.shapes(min_dims=1, min_side=2)))
def test_relayout_keeps_values_and_breaks_contiguity(layout, a):
    view = S.relayout(a, layout)
    np.testing.assert_array_equal(view, a)
    assert not view.flags.c_contiguous


@given(S.transposed_views((2, 3)))
def test_transposed_views(a):
    assert a.shape == (2, 3) and a.flags.f_contiguous and not a.flags.c_contiguous


@given(st.data())
def test_index_arrays_are_valid_and_may_repeat(data):
    size = data.draw(st.integers(1, 4))
    idx = data.draw(S.index_arrays(size))
    assert idx.dtype == np.int64 and ((-size <= idx) & (idx < size)).all()
    shape = data.draw(S.shapes(min_dims=1))
    axis = data.draw(st.integers(0, len(shape) - 1))
    gather = data.draw(S.index_arrays_for(shape, axis))
    np.take_along_axis(np.zeros(shape), gather, axis)  # valid for NumPy as well


def test_index_arrays_can_repeat_an_index():
    @given(S.index_arrays(3, shape=(6,)))
    def check(idx):
        check.repeated = getattr(check, "repeated", False) or len(np.unique(idx % 3)) < 6

    check()
    assert check.repeated


@given(S.bool_masks((3, 4), all_false_row=True))
def test_bool_masks_with_an_all_false_row(mask):
    assert mask.dtype == np.bool_ and (~mask.any(axis=1)).any()


@given(S.token_batches(vocab_size=7, max_batch=3, max_len=5))
def test_token_batches(batch):
    ids, lengths, mask = batch
    b, n = ids.shape
    assert lengths.shape == (b,) and mask.shape == (b, n) and lengths.max() == n
    np.testing.assert_array_equal(mask.sum(axis=1), lengths)
    assert ((ids[mask] > 0) & (ids[mask] < 7)).all()
    assert (ids[~mask] == 0).all()


# ---- stress strategies ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind, holds", [
    ("shifted", lambda a: np.abs(a).min() >= 97),              # shifted by ±large
    ("large", lambda a: 50 < np.abs(a).max() <= 100),           # up to large=100
    ("tiny", lambda a: 0 < np.abs(a).max() <= 3e-6),            # scaled by 1e-6
    ("plain", lambda a: 0.5 < np.abs(a).max() <= 3)])
def test_stress_arrays_draw_each_kind(kind, holds):
    strategy = S.stress_arrays((3,), kinds=(kind,), large=100.0)
    assert holds(find(strategy, holds, settings=settings(max_examples=500, database=None)))


@given(st.data())
def test_masked_logits_leave_one_entry_per_row_unless_asked(data):
    shape = data.draw(S.shapes(min_dims=1, max_dims=3))
    all_masked = data.draw(st.booleans())
    logits, masked = data.draw(S.masked_logits(shape, all_masked_rows=all_masked))
    assert logits.shape == masked.shape == shape
    rows, hidden = logits.reshape(-1, shape[-1]), masked.reshape(-1, shape[-1])
    values = set(rows[hidden].tolist())
    assert len(values) <= 1 and values <= set(S.MASKING_VALUES)
    assert np.isfinite(rows[~hidden]).all()
    fully = hidden.all(axis=1)
    assert fully.sum() <= (1 if all_masked else 0)


# ---- stress strategies of eq 56-111's specs ------------------------------------------------------
def test_the_stress_strategies_reach_their_extremes():
    """Each drawn often enough to matter in a 25-example run: 1e4 scales, +-1e5 offsets and
    -1e4 / -1e9 / -inf masking values."""
    seen = {"scales": set(), "offsets": set(), "masks": set()}

    @given(S.magnitudes(), S.score_offsets(), S.masking_values())
    def draw(scale, offset, mask):
        seen["scales"].add(scale)
        seen["offsets"].add(offset)
        seen["masks"].add(mask)

    draw()
    assert seen == {"scales": set(S.MAGNITUDES), "offsets": {0.0, 1e5, -1e5},
                    "masks": {-1e4, -1e9, -np.inf}}


@given(st.data())
def test_scaled_arrays_are_arrays_times_one_scale(data):
    a = data.draw(S.scaled_arrays((2, 3), scales=(1e4,)))
    assert a.shape == (2, 3) and np.all(np.abs(a) <= 3e4)


@given(st.integers(0, 2), st.data())
def test_log_probability_arrays_keep_a_finite_entry_along_their_axis(axis, data):
    values = data.draw(S.log_probability_arrays((2, 3, 2), keep_axis=axis))
    assert values.shape == (2, 3, 2) and np.all(values <= 0) and not np.isnan(values).any()
    assert np.isfinite(values).any(axis=axis).all()
    vanishing = data.draw(S.log_probability_arrays((4,), zero_probabilities=False))
    assert np.isfinite(vanishing).all()
