"""Section VIII-A: the deep character Transformer (Al-Rfou et al., 2019), eq 85.

The training objective (eq 85's conditionals at every position, from the intermediate layers on
the paper's schedule, for the next two characters) against
``minitorch_nlp/testing/reference/char_transformer.py``, values and float64 gradients; the
schedule's numbers; the model is GPT-2's with a position table before every layer (equal to
``GPT2LMHeadModel`` when that and every auxiliary loss are off); the losses it trains on in each
phase; ``train char_transformer`` follows the schedule and resumes exactly; bad input. Causality,
padding, the cache, round trips, learning, dtypes and backends are the shared checks of
``tests/model_checks.py``.
"""
from __future__ import annotations

import autograd
import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
from minitorch_nlp import training
from minitorch_nlp.models import registry
from minitorch_nlp.models.char_transformer import (CharTransformerConfig,
                                                   CharTransformerLMHeadModel,
                                                   CharTransformerModel, deep_char_loss,
                                                   intermediate_layer_weights)
from minitorch_nlp.models.gpt import GPT2LMHeadModel, GPTConfig, causal_lm_loss
from minitorch_nlp.testing import strategies as S
from minitorch_nlp.testing.reference import char_transformer as reference
from tests.model_checks import (REFERENCE, TIGHT, ModelChecks, causal_lm_spec,
                                check_train_resume_generate)

pytestmark = pytest.mark.sec8


def tiny(**overrides):
    return CharTransformerConfig.tiny(**{"n_layer": 3, **overrides})


# ---- the objective (eq 85 and the auxiliary losses) ---------------------------------------------
@st.composite
def loss_cases(draw):
    layers, targets, batch = (draw(st.integers(1, 3)) for _ in range(3))
    time, vocab = draw(st.integers(targets + 1, targets + 4)), draw(st.integers(2, 5))
    labels = np.asarray(draw(S.arrays((batch, time), 0, vocab - 1)).round(), dtype=np.int64)
    labels[:, -1] = np.where(draw(st.booleans()), -100, labels[:, -1])
    return dict(logits=draw(S.arrays((layers, targets, batch, time, vocab))), labels=labels,
                progress=draw(st.floats(0.0, 1.0)), all_positions=draw(st.booleans()),
                intermediate_stop=draw(st.sampled_from([0.5, 0.3, 1.0])),
                extra_target_weight=draw(st.sampled_from([0.5, 0.0, 2.0])))


@pytest.mark.eq(85)
@given(loss_cases(), S.seeds())
def test_eq85_deep_char_loss_matches_reference_values_and_gradients(case, seed):
    logits = case.pop("logits")
    x = mt.tensor(logits, dtype=mt.float64, requires_grad=True)
    loss = deep_char_loss(x, **case)
    expected = reference.deep_char_loss(logits, **case)
    np.testing.assert_allclose(loss.item(), expected, **REFERENCE)
    loss.backward()
    expected_grad = autograd.grad(lambda a: reference.deep_char_loss(a, **case))(logits)
    np.testing.assert_allclose(x.grad.numpy(), expected_grad, **REFERENCE)


@pytest.mark.eq(85)
def test_eq85_one_layer_one_target_every_position_is_the_segments_log_probability():
    """-(1/L) log P(t_{1:L} | t_0): eq 85's product of conditionals, which is GPT's loss."""
    rng = np.random.default_rng(0)
    logits, labels = rng.standard_normal((1, 1, 2, 7, 5)), rng.integers(0, 5, (2, 7))
    loss = deep_char_loss(mt.tensor(logits), labels).item()
    log_p = sum(reference.eq85_log_probability(logits[0, 0, b], labels[b])[0] for b in range(2))
    np.testing.assert_allclose(loss, -log_p / 12, rtol=1e-12)
    np.testing.assert_allclose(loss, causal_lm_loss(mt.tensor(logits[0, 0]), labels).item(),
                               rtol=1e-12)


@pytest.mark.eq(85)
def test_the_paper_schedule_drops_layer_l_of_n_after_l_over_2n_of_training():
    """4 layers: layer 1 counts until 1/8 of the run, layer 2 until 2/8, layer 3 until 3/8; the
    top layer always."""
    assert intermediate_layer_weights(4, 0.0) == [1, 1, 1, 1]
    assert intermediate_layer_weights(4, 0.124) == [1, 1, 1, 1]
    assert intermediate_layer_weights(4, 0.125) == [0, 1, 1, 1]
    assert intermediate_layer_weights(4, 0.3) == [0, 0, 1, 1]
    assert intermediate_layer_weights(4, 0.375) == [0, 0, 0, 1]
    assert intermediate_layer_weights(4, 1.0) == [0, 0, 0, 1]
    assert intermediate_layer_weights(4, 0.6, intermediate_stop=1.0) == [0, 0, 1, 1]
    assert intermediate_layer_weights(1, 0.0) == [1]


@pytest.mark.eq(85)
def test_extra_targets_are_weighted_and_scored_k_steps_ahead():
    """Target 2 at position i is scored on t_{i+2}, weighted by extra_target_weight."""
    rng = np.random.default_rng(1)
    logits, labels = rng.standard_normal((1, 2, 1, 6, 4)), rng.integers(0, 4, (1, 6))
    x = mt.tensor(logits)
    next_char = causal_lm_loss(mt.tensor(logits[0, 0]), labels).item()
    second = mt.functional.cross_entropy(mt.tensor(logits[0, 1, :, :4]), labels[:, 2:]).item()
    np.testing.assert_allclose(deep_char_loss(x, labels).item(), next_char + 0.5 * second)
    np.testing.assert_allclose(deep_char_loss(x, labels, extra_target_weight=2.0).item(),
                               next_char + 2.0 * second)


# ---- the model ----------------------------------------------------------------------------------
def test_per_layer_positions_are_added_before_every_layer():
    """The hidden states are GPT-2's blocks run by hand with table i added before layer i."""
    mt.manual_seed(0)
    model = CharTransformerModel(tiny()).to(mt.float64).eval()
    ids = np.random.default_rng(0).integers(0, 100, (2, 9))
    out = model(ids)
    tables = [model.wpe.table] + [p.table for p in model.layer_positions]
    x = model.wte(ids)
    for layer, table in zip(model.blocks.layers, tables):
        x = layer(x + table[:9])
        expected = model.blocks.norm(x).numpy()
    np.testing.assert_allclose(out.last_hidden_state.numpy(), expected, **TIGHT)
    assert len(out.hidden_states) == 3 and out.hidden_states[-1] is out.last_hidden_state


def test_with_the_paper_options_off_it_is_gpt2():
    """No per-layer positions, one target, no intermediate losses: GPT-2's logits and loss."""
    config = tiny(per_layer_positions=False, intermediate_losses=False, num_targets=1)
    mt.manual_seed(0)
    ours = CharTransformerLMHeadModel(config).to(mt.float64).train()
    gpt = GPT2LMHeadModel(GPTConfig.tiny(n_layer=3)).to(mt.float64).train()
    gpt.load_state_dict(ours.state_dict())
    ids = np.random.default_rng(0).integers(0, 100, (2, 11))
    a, b = ours(ids, labels=ids), gpt(ids, labels=ids)
    np.testing.assert_allclose(a.logits.numpy(), b.logits.numpy(), **TIGHT)
    np.testing.assert_allclose(a.loss.item(), b.loss.item(), **TIGHT)


def layer_losses(model, ids):
    """Each layer's next-character loss plus half its second-character loss, by hand."""
    states = model.transformer(ids).hidden_states
    losses = []
    for h in states:
        logits = model.target_logits(h)
        losses.append(causal_lm_loss(logits[0], ids).item() + 0.5 * mt.functional.cross_entropy(
            logits[1][:, :-2], ids[:, 2:]).item())
    return losses


@pytest.mark.eq(85)
def test_training_loss_follows_the_schedule_and_evaluation_scores_the_next_character():
    mt.manual_seed(0)
    model = CharTransformerLMHeadModel(tiny()).to(mt.float64)
    ids = np.random.default_rng(2).integers(0, 100, (2, 10))
    per_layer = layer_losses(model, ids)
    for progress, counted in ((0.0, [0, 1, 2]), (0.2, [1, 2]), (0.34, [2]), (0.9, [2])):
        model.set_training_progress(progress)
        np.testing.assert_allclose(model(ids, labels=ids).loss.item(),
                                   sum(per_layer[i] for i in counted), rtol=1e-10)
    model.eval()
    out = model(ids, labels=ids)
    np.testing.assert_allclose(out.loss.item(), causal_lm_loss(out.logits, ids).item(), **TIGHT)


def test_the_extra_targets_classifier_gets_gradients_only_while_training():
    mt.manual_seed(0)
    model = CharTransformerLMHeadModel(tiny())
    ids = np.random.default_rng(3).integers(0, 100, (2, 8))
    model(ids, labels=ids).loss.backward()
    assert np.abs(model.target_heads[0].weight.grad.numpy()).sum() > 0
    model.zero_grad()
    model.eval()(ids, labels=ids).loss.backward()
    assert model.target_heads[0].weight.grad is None or \
        not np.abs(model.target_heads[0].weight.grad.numpy()).any()


class TestCharTransformerChecks(ModelChecks):
    """Causality, right and left padding, the cache, round trips, learning, dtypes, backends,
    dropout: ``tests/model_checks.py``."""

    spec = causal_lm_spec(
        "CharTransformerLMHeadModel", CharTransformerLMHeadModel, tiny, hf=False,
        skips={"hf_round_trip": "HuggingFace has no model of Al-Rfou et al.'s character "
                                "Transformer"})


# ---- training on the command line ---------------------------------------------------------------
def test_train_char_transformer_resumes_exactly_and_generates(tmp_path, capsys):
    check_train_resume_generate("char_transformer", tmp_path, capsys,
                                "transformer.layer_positions.0.table",
                                options=("--n-layer", "2"))


def test_training_tells_the_model_how_far_the_run_is(tmp_path):
    config = training.TrainConfig(model="char_transformer", n_layer=2, n_head=2, n_embd=16,
                                  block_size=12, batch_size=2, steps=8, eval_every=8,
                                  warmup_steps=1, backend="numpy")
    run = training.LanguageModelRun(config, text="the quick brown fox jumps over it. " * 30)
    seen = []
    original = registry.family("char_transformer").progress

    def record(model, fraction):
        seen.append(fraction)
        original(model, fraction)

    run.family = registry.ModelFamily(**{**run.family.__dict__, "progress": record})
    run.train(progress=False)
    assert seen == [k / 8 for k in range(8)] and run.model.training_progress == 7 / 8


# ---- bad input ----------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, message", [
    ({"variant": "gpt1"}, "variant must be 'gpt2'"),
    ({"num_targets": 0}, "num_targets must be a positive int"),
    ({"num_targets": 32}, "num_targets=32 must be less than n_positions=32"),
    ({"intermediate_stop": 0.0}, r"intermediate_stop must be a number in \(0, 1\]"),
    ({"intermediate_stop": 1.5}, r"intermediate_stop must be a number in \(0, 1\]"),
    ({"extra_target_weight": -0.5}, "extra_target_weight must be a number >= 0"),
])
def test_bad_configs_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny(**overrides)


def test_bad_progress_and_bad_loss_inputs_are_refused():
    model = CharTransformerLMHeadModel(tiny())
    with pytest.raises(ValueError, match=r"set_training_progress: fraction must be a number in "
                                         r"\[0, 1\], got 1.5"):
        model.set_training_progress(1.5)
    logits = mt.zeros(2, 2, 1, 5, 4)
    with pytest.raises(ValueError, match=r"logits must be \(layers, targets, batch, T, V\)"):
        deep_char_loss(logits[0], np.zeros((1, 5), dtype=np.int64))
    with pytest.raises(ValueError, match=r"labels of shape \(1, 4\) must be \(batch, T\) = "
                                         r"\(1, 5\)"):
        deep_char_loss(logits, np.zeros((1, 4), dtype=np.int64))
    with pytest.raises(ValueError, match="a segment of 2 characters has no target 2 steps"):
        deep_char_loss(logits[:, :, :, :2], np.zeros((1, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="progress must be a number in"):
        deep_char_loss(logits, np.zeros((1, 5), dtype=np.int64), progress=-0.1)
