"""Section IX-D: ELECTRA (Clark et al., 2020), eq 107-110.

The losses (eq 107, 108, 110) are checked against their references through ``check_equation``
in ``tests/test_check.py``; here: the generator's softmax over the tied embeddings (eq 109)
against a reference, its samples' frequencies within binomial bounds, the discriminator's labels
(a sample equal to the original is "original"), no gradient from the discriminator's loss into
the generator, shared token and position embeddings, clear errors, and learning. Padding,
dropout, round trips, dtypes and backends are the shared checks of ``tests/model_checks.py``;
equality with HuggingFace's models is in ``tests/test_hf_albert_electra.py``.
"""
from __future__ import annotations

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp import functional as F
from minitorch_nlp.models.electra import (ElectraConfig, ElectraForMaskedLM,
                                          ElectraForPreTraining, ElectraModel,
                                          ElectraPretraining, discriminator_loss, electra_loss,
                                          sample_replacements)
from minitorch_nlp.testing.reference import electra as R
from tests.model_checks import (Learning, ModelChecks, check_train_resume_generate, encoder_spec,
                                overfit, randomize)

pytestmark = pytest.mark.sec9

TINY = dict(vocab_size=23, embedding_size=6, hidden_size=8, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=12, max_position_embeddings=10,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
MASK = 3


def build(model_class, seed=0, **overrides):
    mt.manual_seed(seed)
    return model_class(ElectraConfig(**{**TINY, **overrides}))


def masked_batch(seed=10):
    """Ids >= 4 with [CLS] = 2 first, rows of 8, 6 and 3 real tokens, every third real token
    masked; the attention mask and the labels."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, 23, (3, 8))
    ids[:, 0] = 2
    mask = np.arange(8)[None, :] < np.array([8, 6, 3])[:, None]
    labels = np.where((np.arange(8) % 3 == 1) & mask, ids, -100)
    return dict(input_ids=np.where(labels != -100, MASK, ids), attention_mask=mask,
                labels=labels)


# ---- eq 109: the generator's softmax and its samples ---------------------------------------------
@pytest.mark.eq(109)
def test_eq109_generator_softmax_over_the_tied_embeddings():
    generator = randomize(build(ElectraForMaskedLM), seed=1, norm_gain_mean=1.0)
    ids = np.random.default_rng(2).integers(4, 23, (1, 7))
    out = generator(ids, output_hidden_states=True)
    head = generator.mlm
    h_g = head.norm(F.gelu(head.dense(out.hidden_states[-1]), approximate="none"))
    expected = R.eq109_generator_probabilities(h_g.numpy()[0], generator.word_embeddings.numpy(),
                                               head.bias.numpy())
    np.testing.assert_allclose(F.softmax(out.logits, axis=-1).numpy()[0], expected, rtol=1e-10,
                               atol=1e-13)


@pytest.mark.eq(109)
def test_replacements_are_sampled_with_the_generators_probabilities():
    """30 000 draws at one masked position: each token's frequency lies within 4.5 binomial
    standard deviations of its softmax probability."""
    logits = mt.tensor(np.array([[[2.0, 0.5, -1.0, 1.0, 0.0]]]), dtype=mt.float64)
    probabilities = np.exp(logits.numpy()[0, 0]) / np.exp(logits.numpy()[0, 0]).sum()
    rng = np.random.default_rng(0)
    draws = [sample_replacements(logits, [[4]], [[1]], rng)[0][0, 0] for _ in range(30000)]
    frequencies = np.bincount(draws, minlength=5) / len(draws)
    sigma = np.sqrt(probabilities * (1 - probabilities) / len(draws))
    assert np.all(np.abs(frequencies - probabilities) < 4.5 * sigma), (frequencies, probabilities)


@pytest.mark.eq(108)
def test_a_sample_equal_to_the_original_is_labelled_original():
    # all the generator's mass on token 3 at every position
    logits = mt.tensor(np.where(np.arange(6) == 3, 50.0, -50.0)[None, None].repeat(4, 1))
    ids = np.array([[MASK, MASK, 5, 2]])
    labels = np.array([[3, 4, -100, -100]])             # originals: 3 (sampled back), 4, 5, 2
    corrupted, replaced = sample_replacements(logits, ids, labels, np.random.default_rng(0))
    np.testing.assert_array_equal(corrupted, [[3, 3, 5, 2]])
    np.testing.assert_array_equal(replaced, [[0, 1, 0, 0]])
    np.testing.assert_array_equal(replaced, R.replaced_labels(corrupted, [[3, 4, 5, 2]]))


# ---- the pair ------------------------------------------------------------------------------------
def build_pair(seed=0, fraction=0.5, **overrides):
    mt.manual_seed(seed)
    config = ElectraConfig(**{**TINY, **overrides})
    return ElectraPretraining(config, config.generator(fraction))


def test_generator_and_discriminator_share_token_and_position_embeddings_only():
    pair = build_pair()
    generator, discriminator = pair.generator.bert.embeddings, pair.discriminator.bert.embeddings
    assert generator.word_embeddings is discriminator.word_embeddings
    assert generator.position_embeddings is discriminator.position_embeddings
    assert generator.token_type_embeddings is not discriminator.token_type_embeddings
    assert pair.generator.config.hidden_size == 4 and pair.discriminator.config.hidden_size == 8
    assert pair.num_parameters() < (pair.generator.num_parameters()
                                    + pair.discriminator.num_parameters())


@pytest.mark.eq(107, 108, 110)
def test_no_gradient_of_the_discriminator_loss_reaches_the_generator():
    pair = build_pair()
    out = pair(**masked_batch(), rng=np.random.default_rng(0))
    assert out.replaced.sum() > 0                                    # something was replaced
    out.discriminator_loss.backward()
    shared = {id(p) for p in pair.discriminator.bert.embeddings.parameters()}
    for name, param in pair.generator.named_parameters():
        if id(param) not in shared:
            assert param.grad is None or not np.any(param.grad.numpy()), name
    assert np.any(pair.discriminator.bert.embeddings.word_embeddings.weight.grad.numpy())
    # and the total is eq 110 of the two parts, lambda = 50
    np.testing.assert_allclose(out.loss.item(), out.generator_loss.item()
                               + 50 * out.discriminator_loss.item(), rtol=1e-6)
    replaced_again = electra_loss(out.logits, out.discriminator_logits,
                                  mlm_labels=masked_batch()["labels"], replaced=out.replaced,
                                  attention_mask=masked_batch()["attention_mask"])
    np.testing.assert_allclose(replaced_again.item(), out.loss.item(), rtol=1e-6)


@pytest.mark.eq(108)
def test_discriminator_reads_the_corrupted_ids_and_labels_every_real_token():
    pair = build_pair()
    batch = masked_batch()
    out = pair.eval()(**batch)
    masked = batch["labels"] != -100
    np.testing.assert_array_equal(out.corrupted_ids[~masked], batch["input_ids"][~masked])
    original = np.where(masked, batch["labels"], batch["input_ids"])
    np.testing.assert_array_equal(out.replaced, out.corrupted_ids != original)
    direct = pair.discriminator(out.corrupted_ids, batch["attention_mask"])
    np.testing.assert_allclose(out.discriminator_logits.numpy(), direct.logits.numpy())
    # evaluation draws from a fixed stream: the same corruption twice
    np.testing.assert_array_equal(pair(**batch).corrupted_ids, out.corrupted_ids)


# ---- errors --------------------------------------------------------------------------------------
def test_errors_name_electra_limits():
    config = ElectraConfig(**TINY)
    with pytest.raises(ValueError, match="the generator's hidden_size=16 is larger than the "
                                         "discriminator's 8; .* use a smaller generator"):
        ElectraPretraining(config, ElectraConfig(**{**TINY, "hidden_size": 16}))
    with pytest.raises(ValueError, match="the generator's vocab_size=30 differs from the "
                                         "discriminator's 23; the two share"):
        ElectraPretraining(config, ElectraConfig(**{**TINY, "vocab_size": 30}))
    with pytest.raises(ValueError, match=r"ElectraConfig.generator: fraction must be in \(0, 1\]"):
        config.generator(2.0)
    with pytest.raises(TypeError, match="generator_config must be an ElectraConfig"):
        ElectraPretraining(config, {"hidden_size": 4})
    with pytest.raises(ValueError, match="ElectraConfig: embedding_size must be a positive int"):
        ElectraConfig(**{**TINY, "embedding_size": 0})
    with pytest.raises(ValueError, match=r"discriminator_loss: attention_mask \(2,\) must have "):
        discriminator_loss(mt.zeros(1, 2), np.zeros((1, 2)), np.ones(2))


# ---- the shared checks and learning --------------------------------------------------------------
def build_with_dropout(model_class, **overrides):
    def build_model(dropout=0.0):
        return model_class(ElectraConfig(**{**TINY, "hidden_dropout_prob": dropout,
                                            "attention_probs_dropout_prob": dropout,
                                            **overrides}))
    return build_model


def replaced_batch():
    batch = masked_batch(12)
    replaced = (np.arange(8) % 4 == 2) & batch["attention_mask"]
    ids = np.where(replaced, (batch["input_ids"] + 7) % 19 + 4, masked_batch(12)["input_ids"])
    return dict(input_ids=ids, attention_mask=batch["attention_mask"],
                labels=replaced.astype(np.int64))


SKIP_LEFT = {"padding_left": "ELECTRA's absolute positions count from the first column"}


class TestElectraForPreTrainingChecks(ModelChecks):
    """The discriminator: right padding, round trips, learning to spot replaced tokens (the loss
    falls 20-fold in 100 steps), dtypes, backends, dropout."""

    spec = encoder_spec(
        "ElectraForPreTraining", build_with_dropout(ElectraForPreTraining), vocab=(4, 23),
        padding_token_type=1, skips=SKIP_LEFT,
        learning=Learning(replaced_batch, lambda model, inputs: model(**inputs).loss,
                          steps=100, factor=20, lr=1e-2))


class TestElectraForMaskedLMChecks(ModelChecks):
    """The generator, wider embeddings than hidden states (E = 12 > H = 8, so the embeddings are
    projected, as HuggingFace's small generators are)."""

    spec = encoder_spec(
        "ElectraForMaskedLM", build_with_dropout(ElectraForMaskedLM, embedding_size=12),
        vocab=(4, 23), padding_token_type=1, skips=SKIP_LEFT,
        learning=Learning(masked_batch, lambda model, inputs: model(**inputs).loss, steps=100,
                          factor=20, lr=1e-2))


class TestElectraModelChecks(ModelChecks):
    spec = encoder_spec(
        "ElectraModel", build_with_dropout(ElectraModel, embedding_size=8), vocab=(4, 23),
        output="last_hidden_state", padding_token_type=1,
        skips={**SKIP_LEFT, "learns": "no objective of its own; its heads learn"})


@pytest.mark.eq(110)
def test_pretraining_pair_learns_replaced_token_detection():
    """Both parts learn: the generator's loss falls 3-fold and the discriminator's halves (each
    step samples new replacements, so the total is noisy; compared in eval mode, which samples
    from a fixed stream)."""
    pair = build_pair(fraction=0.5)
    batch = masked_batch(13)
    before = pair.eval()(**batch)
    overfit(pair.train(), lambda: pair(**batch).loss, 100, lr=1e-2)
    after = pair.eval()(**batch)
    assert after.generator_loss.item() < before.generator_loss.item() / 3
    assert after.discriminator_loss.item() < before.discriminator_loss.item() / 2


def test_train_electra_resumes_exactly_and_fills_masks(tmp_path, capsys):
    """``minitorch-nlp train electra`` trains the generator-discriminator pair (eq 110) with the
    run machinery of ``train bert``: a run stopped and resumed gives the weights of an
    uninterrupted one (the generator's samples come from the run's saved streams), and
    ``generate`` answers from the run's folder."""
    check_train_resume_generate("electra", tmp_path, capsys,
                                "discriminator.discriminator.dense_prediction.weight",
                                prompt="the [MASK] fox")
