"""Section IV-B: GPT-1 (Radford et al., 2018), eq 18-24.

Forward values and float64 gradients of the input embedding (eq 20), the block stack (eq 19),
the tied output distribution (eq 21), the LM objective (eq 18) and the fine-tuning objectives
with the paper's input transformations (eq 22-24) against the autograd.numpy references in
``minitorch_nlp/testing/reference/gpt.py``; then tied weights, the initialisation, the errors, and
that the fine-tuning models learn. Causality, padding, the key/value cache, round trips and learning
the language model are the shared checks of ``tests/model_checks.py``.
"""
from __future__ import annotations

from functools import partial

import autograd
import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
from minitorch_nlp import cookbook
from minitorch_nlp.models.gpt import (GPTConfig, GPTDoubleHeadsModel, GPTForFineTuning,
                                      GPTLMHeadModel, GPTModel, TaskFormatter, causal_lm_loss)
from minitorch_nlp.testing import strategies as S
from tests.model_checks import (ModelChecks, assert_trees_close, causal_lm_spec,
                                check_gpt_lm_against_reference, gpt_lm_case, gpt_reference_params,
                                grads_of, overfit, randomize, to_numpy)
from minitorch_nlp.testing.reference import gpt as R

pytestmark = [pytest.mark.sec4,
              pytest.mark.filterwarnings("ignore:Output seems independent of input")]

TOL = dict(rtol=1e-7, atol=1e-10)


# ---- eq 18-21: the language model ------------------------------------------------------------
@pytest.mark.eq(20)
@given(st.data())
def test_eq20_input_embedding_matches_reference(data):
    config, ids, _, seed = data.draw(gpt_lm_case("gpt1"))
    model = randomize(GPTModel(config), seed)
    h0 = model.wpe(model.wte(ids))
    np.testing.assert_allclose(
        h0.numpy(), np.stack([R.eq20_input_embedding(row, model.wte.weight.numpy(),
                                                     model.wpe.table.numpy()) for row in ids]),
        **TOL)
    cotangent = np.random.default_rng(seed).standard_normal(h0.shape)
    (h0 * mt.tensor(cotangent)).sum().backward()
    expected = autograd.grad(lambda we, wp: sum(
        autograd.numpy.sum(R.eq20_input_embedding(row, we, wp) * c)
        for row, c in zip(ids, cotangent)), (0, 1))(model.wte.weight.numpy(),
                                                    model.wpe.table.numpy())
    np.testing.assert_allclose(model.wte.weight.grad.numpy(), expected[0], **TOL)
    np.testing.assert_allclose(model.wpe.table.grad.numpy(), expected[1], **TOL)


@pytest.mark.eq(20)
@pytest.mark.parametrize("variant", ["gpt1", "gpt2"])
@pytest.mark.parametrize("chunks", [(1, 1, 1, 1, 1), (2, 3), (4, 1)])
def test_eq20_with_a_cache_positions_continue_where_the_cache_ends(variant, chunks):
    """Fed in chunks with a key/value cache, the chunk starting at s embeds its tokens with W_p
    rows s, s+1, ... (eq 20 of the whole sequence, sliced), and the hidden states equal those of
    the whole sequence fed at once: a cache that restarts the positions at 0 fails both."""
    config = GPTConfig.tiny(variant, vocab_size=9, n_positions=8, n_embd=4, n_layer=2, n_head=2)
    model = randomize(GPTModel(config), 3)
    ids = np.random.default_rng(4).integers(0, 9, (2, sum(chunks)))
    w_e, w_p = model.wte.weight.numpy(), model.wpe.table.numpy()
    whole = model(ids).last_hidden_state.numpy()
    cache, start, steps = model.new_cache(), 0, []
    for size in chunks:
        chunk = ids[:, start:start + size]
        expected_h0 = np.stack([R.eq20_input_embedding(row, w_e, w_p)[start:start + size]
                                for row in ids])
        np.testing.assert_allclose(model.wpe(model.wte(chunk), start=start).numpy(),
                                   expected_h0, **TOL)
        steps.append(model(chunk, cache=cache).last_hidden_state.numpy())
        start += size
    np.testing.assert_allclose(np.concatenate(steps, axis=1), whole, **TOL)


@pytest.mark.eq(18, 19, 20, 21)
@given(st.data())
def test_eq18_to_21_gpt1_language_model_matches_reference(data):
    check_gpt_lm_against_reference(GPTLMHeadModel, data.draw(gpt_lm_case("gpt1")))


@pytest.mark.eq(21)
def test_eq21_output_layer_is_the_embedding_parameter_itself():
    model = GPTLMHeadModel(GPTConfig.tiny("gpt1"))
    names = [name for name, _ in model.named_parameters()]
    assert not any("lm_head" in name for name in names)
    ids = np.array([[1, 2, 3]])
    model(ids, labels=ids).loss.backward()
    grad_from_both_uses = model.transformer.wte.weight.grad.numpy()
    assert np.abs(grad_from_both_uses[[0, 4, 5]]).max() > 0   # tokens never input: output use only


@pytest.mark.eq(18)
def test_eq18_labels_are_shifted_inside_and_minus_100_is_ignored():
    mt.manual_seed(0)
    logits = mt.randn(2, 4, 5, dtype=mt.float64)
    labels = np.array([[1, 2, 3, 4], [0, -100, 2, -100]])
    log_p = logits.log_softmax(axis=-1).numpy()
    picked = [log_p[0, 0, 2], log_p[0, 1, 3], log_p[0, 2, 4], log_p[1, 1, 2]]
    np.testing.assert_allclose(causal_lm_loss(logits, labels).item(), -np.mean(picked), **TOL)
    with pytest.raises(ValueError, match="labels of shape"):
        causal_lm_loss(logits, labels[:, :3])


# ---- eq 22-24: fine-tuning ---------------------------------------------------------------------
TOKENS = (5, 6, 7)          # start, delimiter, extract: the last ids of a vocabulary of 8


@st.composite
def task_case(draw):
    task = draw(st.sampled_from(["classification", "entailment", "similarity",
                                 "multiple_choice"]))
    text = st.lists(st.integers(0, 4), min_size=1, max_size=2)
    batch = draw(st.integers(1, 2))
    if task == "classification":
        examples = [draw(text) for _ in range(batch)]
    elif task == "multiple_choice":
        choices = draw(st.integers(2, 3))
        examples = [(draw(text), [draw(text) for _ in range(choices)]) for _ in range(batch)]
    else:
        examples = [(draw(text), draw(text)) for _ in range(batch)]
    num_labels = draw(st.integers(2, 3))
    labels = [draw(st.integers(0, (len(examples[0][1]) if task == "multiple_choice"
                                   else num_labels) - 1)) for _ in range(batch)]
    return task, examples, np.array(labels), num_labels, draw(S.seeds())


@pytest.mark.eq(22, 23, 24)
@given(task_case())
def test_eq22_to_24_fine_tuning_matches_reference(case):
    task, examples, labels, num_labels, seed = case
    config = GPTConfig.tiny("gpt1", vocab_size=8, n_positions=12, n_embd=4, n_layer=1, n_head=2)
    model = randomize(GPTForFineTuning(GPTModel(config), task, num_labels=num_labels,
                                       lm_coef=0.5), seed, scale=0.4)
    batch = TaskFormatter(task, *TOKENS)(examples)
    out = model(**batch, labels=labels)
    params = gpt_reference_params(model)
    arrays = to_numpy(params)
    l2, l1, l3, scores = R.fine_tuning_objectives(arrays, task, examples, labels, config.n_head,
                                                  TOKENS, lam=0.5)
    np.testing.assert_allclose(out.logits.numpy(), scores, **TOL)                   # eq 22
    np.testing.assert_allclose(out.task_loss.item(), -l2, **TOL)                    # eq 23
    np.testing.assert_allclose(out.lm_loss.item(), -l1, **TOL)                      # eq 18 on C
    np.testing.assert_allclose(out.loss.item(), -l3, **TOL)                         # eq 24
    out.loss.backward()
    expected = autograd.grad(lambda p: -R.fine_tuning_objectives(
        p, task, examples, labels, config.n_head, TOKENS, lam=0.5)[2])(arrays)
    assert_trees_close(grads_of(params), expected)


@pytest.mark.eq(22)
def test_eq22_input_transformations_follow_figure_1():
    s, d, e = TOKENS
    assert TaskFormatter("classification", s, d, e).transform([1, 2]) == [[s, 1, 2, e]]
    assert TaskFormatter("entailment", s, d, e).transform(([1], [2, 3])) == [[s, 1, d, 2, 3, e]]
    assert TaskFormatter("similarity", s, d, e).transform(([1], [2])) == [[s, 1, d, 2, e],
                                                                           [s, 2, d, 1, e]]
    assert TaskFormatter("multiple_choice", s, d, e).transform(([1], [[2], [3, 4]])) == [
        [s, 1, d, 2, e], [s, 1, d, 3, 4, e]]
    batch = TaskFormatter("multiple_choice", s, d, e, pad=0)([([1], [[2], [3, 4]])])
    np.testing.assert_array_equal(batch["input_ids"], [[[s, 1, d, 2, e, 0], [s, 1, d, 3, 4, e]]])
    np.testing.assert_array_equal(batch["attention_mask"], [[[1, 1, 1, 1, 1, 0], [1] * 6]])
    np.testing.assert_array_equal(batch["extract_positions"], [[4, 5]])


@pytest.mark.eq(22)
def test_eq22_similarity_is_symmetric_in_its_two_texts():
    model = GPTForFineTuning(GPTModel(GPTConfig.tiny("gpt1", vocab_size=8)), "similarity")
    formatter = TaskFormatter("similarity", *TOKENS)
    ab = model(**formatter([([1, 2], [3])])).logits.numpy()
    ba = model(**formatter([([3], [1, 2])])).logits.numpy()
    np.testing.assert_allclose(ab, ba, rtol=1e-5, atol=1e-6)


@pytest.mark.eq(24)
def test_eq24_lm_coef_zero_leaves_only_the_task_loss():
    model = GPTForFineTuning(GPTModel(GPTConfig.tiny("gpt1", vocab_size=8)), "classification",
                             lm_coef=0.0)
    out = model(**TaskFormatter("classification", *TOKENS)([[1, 2], [3]]), labels=[0, 1])
    assert out.loss.item() == pytest.approx(out.task_loss.item())
    assert out.lm_loss.item() > 0


# ---- what holds by construction -------------------------------------------------------------
class TestGPT1Checks(ModelChecks):
    """Causality, right and left padding, the cache, round trips, learning, dtypes, backends,
    dropout: ``tests/model_checks.py``."""

    spec = causal_lm_spec("GPTLMHeadModel", GPTLMHeadModel, partial(GPTConfig.tiny, "gpt1"))


def test_gpt1_init_is_normal_002_and_post_ln():
    config = GPTConfig.gpt1(n_embd=64, n_head=4, n_layer=2, vocab_size=500, n_positions=64)
    model = GPTModel(config)
    assert model.blocks.norm is None and not model.blocks.layers[0].norm_first
    for weight in (model.wte.weight, model.blocks.layers[1].self_attn.out_proj.weight,
                   model.blocks.layers[0].feed_forward.linear2.weight):
        assert weight.numpy().std() == pytest.approx(0.02, rel=0.1)
    assert not model.blocks.layers[0].feed_forward.linear1.bias.numpy().any()


def test_equations_are_registered():
    for number in range(18, 25):
        assert any("models.gpt" in name for name in cookbook.implementations(number)), number


# ---- the double-heads model (HuggingFace's OpenAIGPTDoubleHeadsModel) -------------------------
@pytest.mark.eq(21, 22)
def test_double_heads_equals_fine_tuning_multiple_choice_with_the_same_weights():
    config = GPTConfig.tiny("gpt1", vocab_size=8)
    double = GPTDoubleHeadsModel(config)
    tuned = GPTForFineTuning(double.transformer, "multiple_choice")
    tuned.head.load_state_dict(double.multiple_choice_head.state_dict())
    batch = TaskFormatter("multiple_choice", *TOKENS)([([1, 2], [[3], [4, 1]]),
                                                       ([2], [[1, 1], [0]])])
    ids = batch["input_ids"]
    labels = np.where(batch["attention_mask"] == 1, ids, -100)
    out = double(ids, mc_token_ids=batch["extract_positions"],
                 attention_mask=batch["attention_mask"], labels=labels, mc_labels=[1, 0])
    reference = tuned(**batch, labels=np.array([1, 0]))
    np.testing.assert_allclose(out.mc_logits.numpy(), reference.logits.numpy(), rtol=1e-6)
    np.testing.assert_allclose(out.mc_loss.item(), reference.task_loss.item(), rtol=1e-6)
    np.testing.assert_allclose(out.loss.item(), reference.lm_loss.item(), rtol=1e-6)
    default = double(ids).mc_logits.numpy()                        # the last token by default
    last = double(ids, mc_token_ids=np.full((2, 2), ids.shape[2] - 1)).mc_logits.numpy()
    np.testing.assert_array_equal(default, last)


# ---- errors -------------------------------------------------------------------------------------
def test_errors_name_the_problem():
    config = GPTConfig.tiny("gpt1")
    model = GPTLMHeadModel(config)
    with pytest.raises(ValueError, match=r"GPTModel: input_ids holds 100, outside the "
                                         r"vocabulary \[0, vocab_size=100\)"):
        model([[1, 100]])
    with pytest.raises(ValueError, match="input_ids holds -1, outside the vocabulary"):
        model([[-1, 2]])
    with pytest.raises(ValueError, match="33 tokens is longer than n_positions=32"):
        model(np.zeros((1, 33), dtype=np.int64))
    with pytest.raises(ValueError, match=r"shape \(batch, time\)"):
        model([1, 2, 3])
    with pytest.raises(ValueError, match="attention_mask of shape"):
        model([[1, 2]], attention_mask=[[1, 1, 1]])
    with pytest.raises(ValueError, match="n_head=5 does not divide n_embd=32"):
        GPTConfig.tiny(n_head=5)
    with pytest.raises(ValueError, match="variant must be one of"):
        GPTConfig(variant="gpt3")
    with pytest.raises(ValueError, match="n_layer must be a positive int"):
        GPTConfig.tiny(n_layer=0)
    with pytest.raises(ValueError, match="eos_token_id must be an int >= 0, got -1"):
        GPTConfig.tiny(eos_token_id=-1)
    double = GPTDoubleHeadsModel(config)
    ids = np.zeros((1, 2, 4), dtype=np.int64)
    with pytest.raises(ValueError, match=r"extract position 4 or 0 is outside the sequence "
                                         r"\[0, 4\)"):
        double(ids, mc_token_ids=[[0, 4]])
    with pytest.raises(ValueError, match=r"must be \(batch, choices\)"):
        double(ids, mc_token_ids=[[0]])
    tuned = GPTForFineTuning(GPTModel(config), "classification")
    with pytest.raises(ValueError, match="a classification example is 1 sequence"):
        tuned(ids, [[1, 1]])
    with pytest.raises(ValueError, match="task must be one of"):
        GPTForFineTuning(GPTModel(config), "translation")
    with pytest.raises(ValueError, match="GPTLMHeadModel is a gpt1 model, but config.variant="):
        GPTLMHeadModel(GPTConfig.tiny("gpt2"))
    with pytest.raises(ValueError, match="same number of choices"):
        TaskFormatter("multiple_choice", *TOKENS)([([1], [[2]]), ([1], [[2], [3]])])


# ---- learning (the language model learns: TestGPT1Checks.test_learns) -------------------------
def test_gpt1_fine_tuning_learns_with_the_auxiliary_loss():
    mt.manual_seed(0)
    model = GPTForFineTuning(GPTModel(GPTConfig.tiny("gpt1", vocab_size=8)), "entailment")
    rng = np.random.default_rng(0)
    examples = [(list(rng.integers(0, 5, 3)), list(rng.integers(0, 5, 3))) for _ in range(8)]
    labels = np.array([int(p[0] == h[0]) for p, h in examples])
    batch = TaskFormatter("entailment", *TOKENS)(examples)
    before = model(**batch, labels=labels).task_loss.item()
    overfit(model, lambda: model(**batch, labels=labels).loss, 40)         # L_3 (eq 24)
    assert model(**batch, labels=labels).task_loss.item() < before / 10
    predictions = model(**batch).logits.numpy().argmax(axis=-1)
    np.testing.assert_array_equal(predictions, labels)


def test_double_heads_model_learns_multiple_choice():
    mt.manual_seed(0)
    model = GPTDoubleHeadsModel(GPTConfig.tiny("gpt1", vocab_size=8))
    batch = TaskFormatter("multiple_choice", *TOKENS)(
        [([1, 2], [[3], [1, 2]]), ([4], [[4], [0, 0]]), ([2, 2], [[1], [2, 2]])])
    mc_labels = np.array([1, 0, 1])          # the answer that repeats the context
    losses = overfit(model, lambda: model(batch["input_ids"], batch["extract_positions"],
                                          batch["attention_mask"], mc_labels=mc_labels).mc_loss,
                     30)
    assert losses[-1] < losses[0] / 10, losses[::10]
