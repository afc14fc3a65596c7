"""Section VIII-E: BigBird as a model (Zaheer et al., 2020) with HuggingFace's checkpoints.

``BigBirdBlockSparseAttention`` against a position-by-position reference that lists each
query's keys with their multiplicity (``minitorch_nlp/testing/reference/big_bird.py``; float64
values and gradients), in evaluation (every random
block is block 0, counted r + 1 times, as HuggingFace) and in training (HuggingFace's seeded
plan); ``random_block_plan`` against the plans HuggingFace draws; the tiny HuggingFace models of
``tests/fixtures/hf/make_big_bird_fixtures.py`` (block-sparse on 45 positions padded to 12 blocks
of 4, in evaluation and in training; full attention on a short input; ``original_full``) give
HuggingFace's outputs within 1e-4 x their scale; ``save_pretrained`` writes HuggingFace's
tensors; the shared model checks; ``minitorch-nlp train big_bird``; the errors.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import autograd
import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
from minitorch_nlp.attention.big_bird import (BigBirdBlockSparseAttention, random_block_plan,
                                             sparse_threshold)
from minitorch_nlp.models.big_bird import (BigBirdConfig, BigBirdForMaskedLM,
                                           BigBirdForPreTraining, BigBirdModel)
from minitorch_nlp.testing import strategies as S
from minitorch_nlp.testing.reference import big_bird as R
from tests.model_checks import (Learning, ModelChecks, assert_saves_fixture_tensors,
                                check_train_resume_generate, close_to_fixture, encoder_spec)

pytestmark = pytest.mark.sec8

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
INPUTS = ("input_ids", "attention_mask", "token_type_ids", "labels", "next_sentence_label")
TOL = dict(rtol=1e-7, atol=1e-9)


# ---- the attention core against a reference with explicit key lists -----------------------------
@pytest.mark.slow
@pytest.mark.parametrize("training", [False, True])
@given(data=st.data())
def test_the_core_matches_the_reference_with_repeated_blocks(training, data):
    block, r = data.draw(st.sampled_from([1, 2])), data.draw(st.integers(0, 2))
    blocks = 2 * r + 6 + data.draw(st.integers(0, 1))
    time = block * blocks - data.draw(st.integers(0, block - 1))      # padded to a multiple
    heads, d = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3))
    core = BigBirdBlockSparseAttention(block, r, seed=data.draw(st.integers(0, 9)),
                                       max_positions=64).train(training)
    q, k, v = (data.draw(S.arrays((2, heads, time, d))) for _ in range(3))
    real = np.ones((2, time), dtype=bool)
    real[1, data.draw(st.integers(1, time - 1)):] = False
    padded_time = block * blocks
    plan = (random_block_plan(padded_time, block, r, heads, core.seed, max_positions=64)
            if training else np.zeros((heads, blocks - 2, r), dtype=np.int64))
    lists = [[[j for j in keys if j < time] for keys in rows[:time]]
             for rows in R.bigbird_key_lists(padded_time, block, plan)]
    cotangent = np.random.default_rng(data.draw(S.seeds())).standard_normal(q.shape)
    tensors = [mt.tensor(a, dtype=mt.float64, requires_grad=True) for a in (q, k, v)]
    out, _ = core(*tensors, key_mask=real)
    (out * mt.tensor(cotangent)).sum().backward()

    def reference(q, k, v):
        return R.attend_key_lists(q, k, v, lists, real)

    vjp, expected = autograd.make_vjp(lambda qkv: reference(*qkv))((q, k, v))
    np.testing.assert_allclose(out.numpy(), expected, **TOL)
    for t, grad in zip(tensors, vjp(cotangent)):
        np.testing.assert_allclose(t.grad.numpy(), grad, **TOL)


@pytest.mark.parametrize("training", [False, True])
def test_the_dense_weights_count_repeated_blocks_as_the_sparse_path_does(training):
    core = BigBirdBlockSparseAttention(2, 2, seed=3, max_positions=64).train(training)
    q, k, v = (mt.tensor(a) for a in np.random.default_rng(0).standard_normal((3, 2, 2, 20, 4)))
    sparse, _ = core(q, k, v)
    dense, weights = core(q, k, v, need_weights=True)
    np.testing.assert_allclose(dense.numpy(), sparse.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(weights.numpy().sum(-1), 1.0, rtol=1e-6)
    counts, _ = core.block_counts(20, 2)
    if not training:     # block 0 counted r + 1 = 3 times by every row but the global ones
        assert counts[:, 1:-1, 0].tolist() == [[3] * 8] * 2


def test_short_sequences_get_full_attention():
    core = BigBirdBlockSparseAttention(2, 1, seed=0, max_positions=64)
    time = sparse_threshold(2, 1)                                       # 14: still full
    q, k, v = (mt.tensor(a) for a in np.random.default_rng(1).standard_normal((3, 1, 2, time, 4)))
    full = mt.functional.scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(core(q, k, v)[0].numpy(), full.numpy(), rtol=1e-6, atol=1e-7)


# ---- HuggingFace's random blocks -----------------------------------------------------------------
PLANS = json.loads((FIXTURES / "BigBirdModel" / "random_block_plans.json").read_text())


@pytest.mark.parametrize("case", PLANS, ids=lambda c: f"{c['time']}-{c['block']}-{c['seed']}")
def test_random_block_plans_are_huggingfaces(case):
    args = (case["time"], case["block"], case["num_random_blocks"], case["heads"], case["seed"])
    if case["plan"] is None:        # HuggingFace fails too: too few blocks to draw from
        with pytest.raises(ValueError, match="random_block_plan: query block .* use fewer"):
            random_block_plan(*args, max_positions=case["max_positions"])
        return
    np.testing.assert_array_equal(
        random_block_plan(*args, max_positions=case["max_positions"]), case["plan"])


# ---- HuggingFace checkpoints ---------------------------------------------------------------------
CASES = [("BigBirdModel", "expected.npz", False), ("BigBirdModel", "expected_train.npz", True),
         ("BigBirdModel", "expected_short.npz", False),
         ("BigBirdForPreTraining", "expected.npz", False),
         ("BigBirdForMaskedLM", "expected.npz", False)]


def fixture(name, arrays_file):
    arrays = dict(np.load(FIXTURES / name / arrays_file))
    return {key: arrays.pop(key) for key in INPUTS if key in arrays}, arrays


@pytest.mark.parametrize("name, arrays_file, training", CASES)
def test_huggingface_checkpoints_give_huggingfaces_outputs(name, arrays_file, training):
    model = mt.from_pretrained(FIXTURES / name).train(training)
    inputs, expected = fixture(name, arrays_file)
    out = model(**inputs)
    for key, value in expected.items():
        close_to_fixture(np.asarray(out[key].numpy()), value, f"{name} {arrays_file} {key}")


def test_the_fixtures_use_the_sparse_pattern_and_its_random_blocks():
    model = mt.from_pretrained(FIXTURES / "BigBirdModel")
    inputs, _ = fixture("BigBirdModel", "expected.npz")
    config = model.config
    time = inputs["input_ids"].shape[1]
    assert config.attention_type == "block_sparse" and time % config.block_size
    assert time > sparse_threshold(config.block_size, config.num_random_blocks)
    _, evaluation = fixture("BigBirdModel", "expected.npz")
    _, training = fixture("BigBirdModel", "expected_train.npz")
    assert np.abs(evaluation["last_hidden_state"] - training["last_hidden_state"]).max() > 0.1
    full = mt.from_pretrained(FIXTURES / "BigBirdForMaskedLM").config
    assert full.attention_type == "original_full"


@pytest.mark.parametrize("name", ["BigBirdModel", "BigBirdForPreTraining", "BigBirdForMaskedLM"])
def test_save_pretrained_writes_huggingfaces_tensors_and_config(name, tmp_path):
    model = mt.from_pretrained(FIXTURES / name)
    config = assert_saves_fixture_tensors(
        model, FIXTURES / name, tmp_path,
        unsaved=lambda key: key.startswith("cls.predictions.decoder."))
    theirs = json.loads((FIXTURES / name / "config.json").read_text())
    for field in ("attention_type", "block_size", "num_random_blocks", "hidden_act",
                  "max_position_embeddings", "rescale_embeddings", "use_bias"):
        assert config[field] == theirs[field], field
    assert "position_embedding_type" not in config
    again = mt.from_pretrained(tmp_path)
    assert type(again) is type(model) and again.config == model.config


# ---- the shared checks: every input padded to 16 positions, 8 blocks of 2 (sparse) -------------
TINY = dict(vocab_size=23, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=12, max_position_embeddings=20, block_size=2, num_random_blocks=1)
SPARSE_TIME = 16


def build_with_dropout(model_class, **overrides):
    def build_model(dropout=0.0):
        return model_class(BigBirdConfig(**{**TINY, "hidden_dropout_prob": dropout,
                                            "attention_probs_dropout_prob": dropout,
                                            **overrides}))
    return build_model


def sparse_forward(output):
    """The model's ``output`` for ids padded (mask False) to SPARSE_TIME positions, cut back, so
    that every batch of the shared checks is attended block-sparsely."""
    def forward(model, ids, mask):
        padding = ((0, 0), (0, SPARSE_TIME - ids.shape[1]))
        out = getattr(model(np.pad(ids, padding), attention_mask=np.pad(mask, padding)), output)
        return out[:, :ids.shape[1]]
    return forward


def masked_batch(seed=10):
    """Three rows of 16 ids >= 4 after [CLS] = 2, 16, 12 and 7 real tokens, every third real
    token masked ([MASK] = 3)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, 23, (3, SPARSE_TIME))
    ids[:, 0] = 2
    mask = np.arange(SPARSE_TIME)[None, :] < np.array([16, 12, 7])[:, None]
    labels = np.where((np.arange(SPARSE_TIME) % 3 == 1) & mask, ids, -100)
    return dict(input_ids=np.where(labels != -100, 3, ids), attention_mask=mask, labels=labels)


class TestBigBirdForMaskedLMChecks(ModelChecks):
    """Block-sparse (8 blocks of 2, one random block): right padding hidden by the key mask in
    the sparse pattern, round trips, learning the masked tokens with HuggingFace's seeded random
    blocks (training mode), dtypes, backends, dropout."""

    spec = dataclasses.replace(encoder_spec(
        "BigBirdForMaskedLM", build_with_dropout(BigBirdForMaskedLM), vocab=(4, 23),
        skips={"padding_left": "absolute positions count from the first column"},
        learning=Learning(masked_batch, lambda model, inputs: model(**inputs).loss, steps=80,
                          factor=10, lr=1e-2)), forward=sparse_forward("logits"))


class TestBigBirdForPreTrainingChecks(ModelChecks):
    spec = dataclasses.replace(encoder_spec(
        "BigBirdForPreTraining", build_with_dropout(BigBirdForPreTraining), vocab=(4, 23),
        skips={"padding_left": "absolute positions count from the first column",
               "learns": "its masked-LM head learns in TestBigBirdForMaskedLMChecks"}),
        forward=sparse_forward("prediction_logits"))


def test_block_sparse_and_full_attention_share_weights_and_agree_on_short_inputs():
    mt.manual_seed(0)
    sparse = BigBirdModel(BigBirdConfig(**TINY)).eval()
    full = BigBirdModel(BigBirdConfig(**TINY, attention_type="original_full")).eval()
    full.load_state_dict(sparse.state_dict())
    ids = np.random.default_rng(0).integers(4, 23, (2, SPARSE_TIME))
    np.testing.assert_allclose(sparse(ids[:, :14]).last_hidden_state.numpy(),
                               full(ids[:, :14]).last_hidden_state.numpy(), rtol=1e-6)
    assert not np.allclose(sparse(ids).last_hidden_state.numpy(),
                           full(ids).last_hidden_state.numpy(), atol=1e-3)


def test_train_big_bird_resumes_exactly_and_fills_masks(tmp_path, capsys):
    check_train_resume_generate("big_bird", tmp_path, capsys,
                                "bert.encoder.layers.0.self_attn.q_proj.weight",
                                prompt="the [MASK] fox")


# ---- errors --------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, message", [
    (dict(attention_type="sparse"), "attention_type must be one of"),
    (dict(block_size=0), "block_size must be a positive int"),
    (dict(num_random_blocks=-1), "num_random_blocks must be an int >= 0"),
    (dict(use_bias=False), "use_bias=False"),
])
def test_bad_configurations_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        BigBirdConfig(**{**TINY, **overrides})


def test_a_mask_on_a_length_to_pad_is_refused():
    core = BigBirdBlockSparseAttention(2, 1, seed=0, max_positions=64)
    q = mt.randn(1, 1, 17, 4)
    with pytest.raises(ValueError, match="17 is not a multiple of block=2"):
        core(q, q, q, mask=np.ones((17, 17), dtype=bool))
