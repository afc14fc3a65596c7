"""ETC as a model (``models/extended_transformer.py``): the encoder whose layers attend with
``ETCAttention``, its masked-LM head, the global input made of fixed blocks, the shared model
checks, and ``minitorch-nlp train etc`` with exact resume. (The attention itself, against a dense
reference with the pattern as a mask, is tested in ``test_sec8_extended_transformer.py``.)
"""
from __future__ import annotations

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp.models.extended_transformer import (ETCConfig, ETCForMaskedLM, ETCModel,
                                      blocks_as_global_input, cpc_loss)
from tests.model_checks import (ENCODER_SKIPS, Learning, ModelChecks, ModelSpec,
                                check_train_resume_generate, masked_lm_batch, overfit,
                                randomize)

pytestmark = [pytest.mark.sec8]

TINY = dict(vocab_size=23, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=32, local_radius=2, max_distance=2, long_per_global=3)


def build(model_class=ETCForMaskedLM, seed=0, **overrides):
    mt.manual_seed(seed)
    return model_class(ETCConfig(**{**TINY, "hidden_dropout_prob": 0.0,
                                    "attention_probs_dropout_prob": 0.0, **overrides}))


def build_with_dropout(dropout=0.0):
    return ETCForMaskedLM(ETCConfig(**TINY, hidden_dropout_prob=dropout,
                                    attention_probs_dropout_prob=dropout))


class TestETCForMaskedLMChecks(ModelChecks):
    """Right padding (its blocks' global tokens are padding too), round trips, learning, dtypes,
    backends, dropout."""

    spec = ModelSpec(
        name="ETCForMaskedLM", build=build_with_dropout,
        forward=lambda model, ids, mask: model(ids, attention_mask=mask).logits, vocab=(4, 23),
        learning=Learning(masked_lm_batch, lambda model, batch: model(
            batch["input_ids"], batch["attention_mask"], labels=batch["labels"]).loss,
            steps=100, factor=10, lr=1e-2),
        skips={**ENCODER_SKIPS,
               "padding_left": "the global tokens' blocks are counted from the first column, so "
                               "left padding moves every block boundary",
               "hf_round_trip": "HuggingFace has no ETC model"})


@pytest.mark.parametrize("long_per_global, lengths", [(3, [8, 6, 3]), (4, [8, 1, 5])])
def test_blocks_as_global_input_give_one_global_token_per_block(long_per_global, lengths):
    mask = np.arange(8)[None, :] < np.array(lengths)[:, None]
    ids, segments, global_mask = blocks_as_global_input(3, 8, long_per_global, mask)
    n_global = -(-8 // long_per_global)
    assert ids.shape == (3, n_global) and (ids == 0).all()
    for row, length in enumerate(lengths):
        for j in range(8):
            assert segments[row, j] == j // long_per_global
        for g in range(n_global):   # real when its block holds a real token
            assert global_mask[row, g] == (g * long_per_global < length)


def test_in_one_layer_a_long_token_sees_the_long_tokens_within_the_radius_only():
    """One layer: the long output at i changes when a long token within the local radius
    changes, and not when one further away does (it reaches i only through the global tokens,
    a layer later); every global output changes."""
    model = build(ETCModel, num_hidden_layers=1).to(mt.float64).eval()
    ids = np.random.default_rng(0).integers(4, 23, (1, 9))
    base = model(ids)
    for j in range(9):
        changed = ids.copy()
        changed[0, j] = 4 + (ids[0, j] - 3) % 19
        out = model(changed)
        moved = np.abs(out.last_hidden_state.numpy() - base.last_hidden_state.numpy()).max(-1)[0]
        for i in range(9):
            assert (moved[i] > 1e-9) == (abs(i - j) <= TINY["local_radius"]), (i, j)
        assert (np.abs(out.global_hidden_state.numpy()
                       - base.global_hidden_state.numpy()).max(-1) > 1e-9).all()


def test_a_given_global_input_and_mapping_are_used():
    """Global ids of their own vocabulary and an explicit global-local mapping: the labels
    "own" and "other" differ, so moving a long token to another segment changes the output."""
    model = build(ETCModel, global_vocab_size=3).to(mt.float64).eval()
    ids = np.random.default_rng(1).integers(4, 23, (1, 6))
    segments = np.array([[0, 0, 0, 1, 1, 1]])
    out = model(ids, global_ids=np.array([[1, 2]]), segment_ids=segments)
    assert out.global_hidden_state.shape == (1, 2, 16)
    moved = model(ids, global_ids=np.array([[1, 2]]), segment_ids=np.array([[0, 0, 1, 1, 1, 1]]))
    assert np.abs(moved.last_hidden_state.numpy() - out.last_hidden_state.numpy()).max() > 1e-9
    blocks = model(ids)   # two blocks of 3, global id 0
    assert np.abs(blocks.last_hidden_state.numpy() - out.last_hidden_state.numpy()).max() > 1e-9


# ---- contrastive predictive coding -------------------------------------------------------------
MASK = 3


def cpc_batch():
    """Two rows of three sentences (global id 1) over 9 long tokens, the second row padded after
    7; sentences 0 and 2 of the first row and 1 of the second are masked out."""
    ids = np.random.default_rng(5).integers(4, 23, (2, 9))
    segments = np.repeat(np.arange(3), 3)[None].repeat(2, axis=0)
    attention_mask = np.arange(9)[None, :] < np.array([9, 7])[:, None]
    masked = np.array([[True, False, True], [False, True, False]])
    return ids, np.ones((2, 3), dtype=np.int64), segments, masked, attention_mask


def test_cpc_loss_is_infonce_of_the_masked_segments_against_their_lone_encodings():
    """Recomputed the long way: the masked input through the model, each chosen sentence alone
    (unpadded) through the model, then -log softmax of the dot products, by hand."""
    model = randomize(build(ETCModel), seed=1, scale=0.3).eval()
    ids, global_ids, segments, masked, attention_mask = cpc_batch()
    loss = cpc_loss(model, ids, global_ids, segments, masked, MASK, attention_mask).item()
    chosen = [(0, 0), (0, 2), (1, 1)]
    hidden_input = ids.copy()
    for b, g in chosen:
        hidden_input[b, (segments[b] == g) & attention_mask[b]] = MASK
    states = model(hidden_input, attention_mask, global_ids, segments).global_hidden_state
    predictions = np.stack([states.numpy()[b, g] for b, g in chosen])
    targets = []
    for b, g in chosen:
        sentence = ids[b, (segments[b] == g) & attention_mask[b]][None]
        alone = model(sentence, None, np.array([[1]]), np.zeros_like(sentence))
        targets.append(alone.global_hidden_state.numpy()[0, 0])
    scores = predictions @ np.stack(targets).T
    expected = np.mean([np.log(np.exp(row).sum()) - row[m] for m, row in enumerate(scores)])
    assert abs(loss - expected) < 1e-9 * max(1.0, abs(expected))


def test_cpc_loss_falls_when_trained():
    """From log 3 (three chosen segments, not told apart at the start) to under 0.6 of it in
    40 steps. (On this tiny batch it settles at 0.46: two of row 0's segments collapse onto one
    encoding, since predictions and targets come from the same encoder.)"""
    model = build(ETCModel)
    ids, global_ids, segments, masked, attention_mask = cpc_batch()
    losses = overfit(model, lambda: cpc_loss(model, ids, global_ids, segments, masked, MASK,
                                             attention_mask), 40, lr=3e-3)
    assert abs(losses[0] - np.log(3)) < 1e-3 and losses[-1] < 0.6 * losses[0], losses


def test_cpc_loss_refuses_what_it_cannot_contrast():
    model = build(ETCModel)
    ids, global_ids, segments, masked, attention_mask = cpc_batch()
    with pytest.raises(ValueError, match="masked must be a bool array of shape"):
        cpc_loss(model, ids, global_ids, segments, masked[:, :2], MASK)
    with pytest.raises(ValueError, match="needs at least two chosen segments"):
        cpc_loss(model, ids, global_ids, segments, np.eye(2, 3, dtype=bool)[:1].repeat(2, 0)
                 & np.array([[True], [False]]), MASK)
    with pytest.raises(ValueError, match=r"token counts \[3, 0\]"):
        empty = segments.copy()
        empty[1, 3:6] = 0
        cpc_loss(model, ids, global_ids, empty, masked & np.array([[True], [True]]) &
                 np.array([[True, False, False], [False, True, False]]), MASK)


def test_bad_inputs_and_configurations_are_errors():
    model = build(ETCModel)
    ids = np.array([[4, 5, 6]])
    with pytest.raises(ValueError, match="segment_ids and global_mask describe global_ids"):
        model(ids, segment_ids=np.array([[0, 0, 0]]))
    with pytest.raises(ValueError, match=r"global_ids holds 5, outside \[0, "
                                         r"global_vocab_size=2\)"):
        model(ids, global_ids=np.array([[5]]))
    with pytest.raises(ValueError, match="input_ids holds 99, outside the vocabulary"):
        model(np.array([[99]]))
    with pytest.raises(ValueError, match="ETCConfig: local_radius must be a positive int"):
        ETCConfig(**{**TINY, "local_radius": 0})
    with pytest.raises(ValueError, match="num_attention_heads=3 does not divide "
                                         "hidden_size=16"):
        ETCConfig(**{**TINY, "num_attention_heads": 3})


def test_train_etc_resumes_exactly_and_generate_fills_masks(tmp_path, capsys):
    check_train_resume_generate("etc", tmp_path, capsys, "etc.word_embeddings.weight",
                                prompt="the [MASK] fox")
