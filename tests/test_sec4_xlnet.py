"""Section IV-D: XLNet (Yang et al., 2019), eq 25-29.

The masks and targets of a factorisation order against a brute-force construction (and against
``attention.permutation_mask`` when every position is predicted); the two-stream model (eq 29)
and the permutation objective (eq 26-27) against ``minitorch_nlp/testing/reference/xlnet.py``,
values and float64 gradients; the properties (the query stream at z_t ignores x_{z_t}, the
content stream does not; with the identity order the prediction of token t uses exactly the
tokens before t); HuggingFace checkpoints (``XLNetModel``, ``XLNetLMHeadModel``, with and
without ``perm_mask`` + ``target_mapping``, segments, padding and memories); bad input; the shared
model checks. Eq 25 (BERT's objective, whose spec is in ``testing/equation_specs/bert.py``) and
the specs of eq 26-29 (``testing/equation_specs/xlnet.py``) are checked in ``tests/test_check.py``.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
from minitorch_nlp.attention import permutation_mask
from minitorch_nlp.models.xlnet import (XLNetConfig, XLNetLMHeadModel,
                                        permutation_inputs, permutation_lm_loss, sample_orders,
                                        span_mask, span_orders)
from minitorch_nlp.testing import strategies as S
from minitorch_nlp.testing.reference import xlnet as reference
from tests.model_checks import (ENCODER_SKIPS, REFERENCE, TIGHT, Learning, ModelChecks, ModelSpec,
                                assert_saves_fixture_tensors, assert_trees_close,
                                check_train_resume_generate, grads_of, randomize, to_numpy)

pytestmark = pytest.mark.sec4
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"


@st.composite
def orders_and_predictions(draw, max_time=6):
    time = draw(st.integers(1, max_time))
    batch = draw(st.integers(1, 3))
    orders = np.stack([draw(st.permutations(range(time))) for _ in range(batch)])
    return orders, draw(st.integers(1, time))


# ---- masks and targets (eq 27) -------------------------------------------------------------------
@pytest.mark.eq(27)
@given(orders_and_predictions())
def test_permutation_masks_match_a_brute_force_construction(case):
    orders, num_predict = case
    perm_mask, target_mapping, targets = permutation_inputs(orders, num_predict)
    time = orders.shape[1]
    assert perm_mask.dtype == target_mapping.dtype == np.float32
    for b, order in enumerate(orders):
        query, _ = reference.permutation_masks(order, num_predict)
        np.testing.assert_array_equal(perm_mask[b] == 0, query)
        np.testing.assert_array_equal(targets[b], order[time - num_predict:])
        expected = np.zeros((num_predict, time))
        expected[np.arange(num_predict), order[time - num_predict:]] = 1
        np.testing.assert_array_equal(target_mapping[b], expected)
    if num_predict == time:    # every position predicted: XLNet's plain permutation masks
        np.testing.assert_array_equal(perm_mask == 0, permutation_mask(orders).query[:, 0])


def test_sampled_orders_are_permutations_drawn_from_the_generator():
    orders = sample_orders(50, 7, mt.Generator(3))
    assert (np.sort(orders, axis=1) == np.arange(7)).all()
    np.testing.assert_array_equal(orders, sample_orders(50, 7, mt.Generator(3)))
    assert len({tuple(o) for o in orders}) > 40


# ---- the model against the reference (eq 26-29) --------------------------------------------------
def layer_params(layer):
    attention, core, ff = layer.self_attn, layer.self_attn.core, layer.feed_forward
    return {"q": attention.q_proj.weight, "k": attention.k_proj.weight,
            "v": attention.v_proj.weight, "o": attention.out_proj.weight,
            "r": core.position_proj.weight, "u": core.content_bias, "v_bias": core.position_bias,
            "s_bias": core.segment_bias, "seg": core.segment_embedding,
            "ln1": (layer.norm1.weight, layer.norm1.bias),
            "ln2": (layer.norm2.weight, layer.norm2.bias),
            "w1": ff.linear1.weight, "b1": ff.linear1.bias, "w2": ff.linear2.weight,
            "b2": ff.linear2.bias}


def model_params(model):
    body = model.transformer
    return {"embedding": body.word_embedding.weight, "mask_emb": body.mask_emb,
            "lm_bias": model.lm_bias, "layers": [layer_params(layer) for layer in body.layers]}


@st.composite
def xlnet_cases(draw):
    config = XLNetConfig.tiny(vocab_size=7, d_model=4, n_head=2, d_inner=5,
                              n_layer=draw(st.integers(1, 2)),
                              clamp_len=draw(st.sampled_from([-1, 2])))
    orders, num_predict = draw(orders_and_predictions(max_time=4))
    batch, time = orders.shape
    rng = np.random.default_rng(draw(S.seeds()))
    ids = rng.integers(0, 7, (batch, time))
    types = rng.integers(0, 2, (batch, time)) if draw(st.booleans()) else None
    memory = draw(st.integers(0, 2))
    return config, orders, num_predict, ids, types, memory, draw(S.seeds())


@pytest.mark.slow
@pytest.mark.eq(26, 27, 29)
@given(xlnet_cases())
def test_eq26_to_29_two_stream_model_and_objective_match_reference(case):
    config, orders, num_predict, ids, types, memory_time, seed = case
    model = randomize(XLNetLMHeadModel(config), seed, norm_gain_mean=1.0).eval()
    rng = np.random.default_rng(seed)
    mems = None
    if memory_time:
        mems = model.transformer(rng.integers(0, 7, (len(ids), memory_time)),
                                 use_mems=True).mems
    params = model_params(model)
    arrays = to_numpy(params)
    out = model(ids, mems=mems, **dict(zip(("perm_mask", "target_mapping"),
                                           permutation_inputs(orders, num_predict)[:2])),
                token_type_ids=types)
    loss = permutation_lm_loss(model, ids, num_predict, orders=orders, token_type_ids=types,
                               mems=mems)
    loss_mems = None if mems is None else [m.numpy() for m in mems]

    def expected(p):
        rows, total = [], 0.0
        for b, order in enumerate(orders):
            query, content = reference.permutation_masks(order, num_predict)
            pad = np.ones((len(order), memory_time), dtype=bool)
            targets = order[len(order) - num_predict:]
            log_probs, _ = reference.eq26_target_log_probs(
                ids[b], targets, p, config, np.concatenate([pad, query], 1),
                np.concatenate([pad, content], 1), None if types is None else types[b],
                None if loss_mems is None else [m[b] for m in loss_mems])
            rows.append(log_probs)
            total = total - sum(log_probs[n, ids[b, t]] for n, t in enumerate(targets))
        return anp.stack(rows), total / (len(orders) * num_predict)

    log_probs, objective = expected(arrays)
    np.testing.assert_allclose(out.logits.log_softmax().numpy(), log_probs, **REFERENCE)
    np.testing.assert_allclose(loss.loss.item(), objective, **REFERENCE)
    loss.loss.backward()
    assert_trees_close(grads_of(params), autograd.grad(lambda p: expected(p)[1])(arrays))


# ---- properties ----------------------------------------------------------------------------------
def tiny_model(seed=0, **overrides):
    mt.manual_seed(seed)
    return XLNetLMHeadModel(XLNetConfig.tiny(**overrides)).to(mt.float64).eval()


@pytest.mark.eq(29)
@given(orders_and_predictions(max_time=6), S.seeds())
def test_the_query_stream_ignores_its_own_token_and_the_content_stream_does_not(case, seed):
    orders, num_predict = case
    model = tiny_model()
    ids = np.random.default_rng(seed).integers(0, 32, orders.shape)
    perm_mask, target_mapping, targets = permutation_inputs(orders, num_predict)
    query = model(ids, perm_mask=perm_mask, target_mapping=target_mapping).logits.numpy()
    content = model.transformer(ids, perm_mask=perm_mask).last_hidden_state.numpy()
    for n in range(num_predict):
        rows = np.arange(len(ids))
        changed = ids.copy()
        changed[rows, targets[:, n]] = (changed[rows, targets[:, n]] + 1) % 32
        query_after = model(changed, perm_mask=perm_mask,
                            target_mapping=target_mapping).logits.numpy()
        np.testing.assert_allclose(query_after[:, n], query[:, n], rtol=1e-12, atol=1e-12)
        content_after = model.transformer(changed, perm_mask=perm_mask).last_hidden_state.numpy()
        assert not np.allclose(content_after[rows, targets[:, n]], content[rows, targets[:, n]])


@pytest.mark.eq(26, 29)
def test_with_the_identity_order_the_prediction_of_token_t_uses_exactly_the_tokens_before_t():
    model = tiny_model()
    time = 6
    ids = np.random.default_rng(0).integers(0, 32, (1, time))
    perm_mask, target_mapping, _ = permutation_inputs(np.arange(time)[None], time)
    base = model(ids, perm_mask=perm_mask, target_mapping=target_mapping).logits.numpy()[0]
    for s in range(time):
        changed = ids.copy()
        changed[0, s] = (changed[0, s] + 1) % 32
        after = model(changed, perm_mask=perm_mask, target_mapping=target_mapping).logits
        after = after.numpy()[0]
        for t in range(time):
            moved = not np.allclose(after[t], base[t], rtol=1e-12, atol=1e-12)
            assert moved == (s < t), (s, t)


def test_memories_carry_the_content_stream_without_gradient():
    model = tiny_model(mem_len=3)
    ids = np.random.default_rng(0).integers(0, 32, (2, 5))
    mems = model.transformer(ids, use_mems=True).mems
    assert [m.shape for m in mems] == [(2, 3, 16)] * 2 and not mems[0].requires_grad
    model.train()
    assert model.transformer(ids).mems is None          # use_mems_train=False, as HuggingFace
    out = model(ids[:, :2], mems=[m.detach() for m in mems], labels=ids[:, :2])
    out.loss.backward()
    assert mems[0].grad is None


# ---- span-based prediction -----------------------------------------------------------------------
def runs(mask):
    """The lengths of the runs of True in a bool row."""
    edges = np.diff(np.r_[0, mask.astype(int), 0])
    return np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)


@pytest.mark.eq(26)
def test_spans_have_lengths_proportional_to_one_over_n_and_unpredicted_gaps():
    """Span lengths 1 .. 5 with probability (1/n) / H_5; spans never touch (each sits in its own
    stretch of context), so without fill-ins every run is one span."""
    generator = mt.Generator(0)
    first = []
    for _ in range(2000):
        mask = span_mask(80, 10, generator=generator)
        assert mask.sum() == 10
        lengths = runs(mask)
        first.append(lengths[0])
    frequencies = np.bincount(first, minlength=6)[1:] / len(first)
    expected = (1 / np.arange(1, 6)) / (1 / np.arange(1, 6)).sum()
    np.testing.assert_allclose(frequencies, expected, atol=0.04)
    spread = span_mask(400, 20, generator=generator)      # room for every span: no fill-ins
    assert spread.sum() == 20 and runs(spread).max() <= 5 and len(runs(spread)) < 20
    single = span_mask(30, 4, max_span=1, context_ratio=0, generator=mt.Generator(1))
    assert single.sum() == 4 and runs(single).max() >= 1


@pytest.mark.eq(26, 27)
def test_span_orders_predict_the_spans_after_the_context():
    orders = span_orders(3, 24, 6, max_span=3, generator=mt.Generator(2))
    assert (np.sort(orders, axis=1) == np.arange(24)).all()
    perm_mask, target_mapping, targets = permutation_inputs(orders, 6)
    for b in range(3):
        predicted = np.zeros(24, dtype=bool)
        predicted[targets[b]] = True
        assert runs(predicted).max() <= 3
        context = np.flatnonzero(~predicted)
        assert not perm_mask[b][:, context].any()          # every query sees the context
        assert perm_mask[b][np.ix_(context, targets[b])].all()   # context sees no target


def test_span_max_len_makes_the_objective_predict_spans():
    model = tiny_model(permutation_k=4, span_max_len=3)
    ids = np.random.default_rng(4).integers(3, 32, (2, 12))
    mt.manual_seed(7)
    loss = model(ids, labels=ids).loss.item()
    mt.manual_seed(7)
    orders = span_orders(2, 12, 3, 3)
    assert loss == permutation_lm_loss(model, ids, 3, orders=orders).loss.item()
    with pytest.raises(ValueError, match="span_mask: num_predict=5 is more than the 4 "):
        span_mask(4, 5)
    with pytest.raises(ValueError, match="span_max_len must be a positive int"):
        XLNetConfig.tiny(span_max_len=0)


# ---- HuggingFace checkpoints ---------------------------------------------------------------------
def expected(name):
    with np.load(FIXTURES / name / "expected.npz") as arrays:
        return dict(arrays)


TOL = dict(rtol=0, atol=1e-4)


def test_huggingface_xlnet_model_gives_huggingface_states():
    pytest.importorskip("safetensors")
    model, e = mt.from_pretrained(FIXTURES / "XLNetModel"), expected("XLNetModel")
    first = model(e["input_ids"])
    np.testing.assert_allclose(first.last_hidden_state.numpy(), e["hidden"], **TOL)
    for i, memory in enumerate(first.mems):
        np.testing.assert_allclose(memory.numpy(), e[f"mems{i}"], **TOL)
    segments = model(e["input_ids"], token_type_ids=e["token_type_ids"],
                     attention_mask=e["attention_mask"], perm_mask=e["perm_mask"])
    np.testing.assert_allclose(segments.last_hidden_state.numpy(), e["hidden_segments"], **TOL)
    following = model(e["next_ids"], mems=first.mems)
    np.testing.assert_allclose(following.last_hidden_state.numpy(), e["hidden_next"], **TOL)


@pytest.mark.parametrize("name", ["XLNetModel-uni", "XLNetModel-bidata"])
def test_huggingface_pretraining_options_give_huggingface_states_and_memories(name):
    """``attn_type="uni"`` with ``same_length`` and ``reuse_len=3``; ``bi_data``: states and
    memories over two segments (and, for bi_data, with padding and a perm_mask)."""
    pytest.importorskip("safetensors")
    model, e = mt.from_pretrained(FIXTURES / name), expected(name)
    first = model(e["input_ids"])
    np.testing.assert_allclose(first.last_hidden_state.numpy(), e["hidden"], **TOL)
    following = model(e["next_ids"], mems=first.mems)
    np.testing.assert_allclose(following.last_hidden_state.numpy(), e["hidden_next"], **TOL)
    for i in range(2):
        np.testing.assert_allclose(first.mems[i].numpy(), e[f"mems{i}"], **TOL)
        np.testing.assert_allclose(following.mems[i].numpy(), e[f"next_mems{i}"], **TOL)
    if "hidden_masked" in e:
        masked = model(e["input_ids"], attention_mask=e["attention_mask"],
                       perm_mask=e["perm_mask"])
        np.testing.assert_allclose(masked.last_hidden_state.numpy(), e["hidden_masked"], **TOL)


def test_one_way_attention_is_causal_and_same_length_sees_as_many_keys_everywhere():
    model = tiny_model(attn_type="uni", mem_len=3)
    ids = np.random.default_rng(0).integers(3, 32, (1, 6))
    changed = ids.copy()
    changed[0, 4] = (ids[0, 4] + 1) % 29 + 3
    a, b = (model.transformer(x).last_hidden_state.numpy() for x in (ids, changed))
    np.testing.assert_array_equal(a[:, :4], b[:, :4])
    assert np.abs(a[:, 4] - b[:, 4]).max() > 1e-6
    same = tiny_model(attn_type="uni", same_length=True).transformer
    visible = same.one_way_mask(4, 3)
    assert visible.sum(axis=1).tolist() == [4, 4, 4, 4]
    assert visible[2].tolist() == [False, False, True, True, True, True, False]
    content, query = same.masks(1, 4, 3, None, np.eye(4)[None], "test")
    assert not query[0, 0, 0, 3] and content[0, 0, 0, 3] and not content[0, 0, 0, 4]


def test_reuse_len_keeps_the_first_positions_and_bi_data_reads_half_the_batch_backwards():
    model = tiny_model(reuse_len=2, mem_len=3)
    ids = np.random.default_rng(1).integers(3, 32, (2, 5))
    mems = model.transformer(ids, use_mems=True).mems
    np.testing.assert_array_equal(mems[0].numpy(),
                                  model.transformer.word_embedding(ids[:, :2]).numpy())
    following = model.transformer(ids, mems=mems, use_mems=True).mems
    assert following[0].shape == (2, 3, 16)            # mem_len=3 of the 2 + 2 kept
    np.testing.assert_array_equal(following[0].numpy(), np.concatenate(
        [mems[0].numpy()[:, 1:], mems[0].numpy()], axis=1))
    forwards, both = tiny_model().transformer, tiny_model(bi_data=True).transformer   # same seed
    twice = np.concatenate([ids[:1], ids[:1]])
    out = both(twice).last_hidden_state.numpy()
    np.testing.assert_allclose(out[0], forwards(ids[:1]).last_hidden_state.numpy()[0],
                               **TIGHT)
    assert np.abs(out[0] - out[1]).max() > 1e-6
    with pytest.raises(ValueError, match="bi_data reads half of the batch forwards and half "
                                         "backwards, so the batch must be even, got 1"):
        both(ids[:1])


@pytest.mark.eq(28, 29)
def test_huggingface_xlnet_lm_gives_huggingface_logits_with_and_without_permutation():
    pytest.importorskip("safetensors")
    model, e = mt.from_pretrained(FIXTURES / "XLNetLMHeadModel"), expected("XLNetLMHeadModel")
    scale = max(1.0, np.abs(e["logits"]).max())
    np.testing.assert_allclose(model(e["input_ids"]).logits.numpy(), e["logits"], rtol=0,
                               atol=1e-4 * scale)
    out = model(e["input_ids"], perm_mask=e["perm_mask"], target_mapping=e["target_mapping"],
                labels=e["labels_perm"])
    np.testing.assert_allclose(out.logits.numpy(), e["logits_perm"], rtol=0, atol=1e-4 * scale)
    np.testing.assert_allclose(out.loss.item(), e["loss_perm"], rtol=1e-5)


@pytest.mark.parametrize("name", ["XLNetModel", "XLNetLMHeadModel", "XLNetModel-uni",
                                  "XLNetModel-bidata"])
def test_save_pretrained_writes_huggingface_keys_and_shapes(name, tmp_path):
    pytest.importorskip("safetensors.numpy")
    written = assert_saves_fixture_tensors(mt.from_pretrained(FIXTURES / name), FIXTURES / name,
                                           tmp_path, unsaved=lambda key: key == "lm_loss.weight")
    assert XLNetConfig.from_hf(written) == XLNetConfig.from_hf(
        json.loads((FIXTURES / name / "config.json").read_text()))


def test_a_checkpoint_that_does_not_fit_names_the_key(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    directory = tmp_path / "broken"
    shutil.copytree(FIXTURES / "XLNetLMHeadModel", directory)
    state = safetensors_numpy.load_file(str(directory / "model.safetensors"))
    state["transformer.layer.0.rel_attn.seg_embed"] = np.zeros((3, 2, 8), np.float32)
    safetensors_numpy.save_file(state, str(directory / "model.safetensors"))
    with pytest.raises(ValueError, match=r"mis-shaped keys: transformer\.layer\.0\.rel_attn\."
                                         r"seg_embed \(3, 2, 8\)"):
        mt.from_pretrained(directory)


# ---- bad input -----------------------------------------------------------------------------------
def test_bad_masks_orders_and_memories_are_clear_errors():
    model = tiny_model()
    ids = np.zeros((2, 4), dtype=np.int64)
    with pytest.raises(ValueError, match=r"perm_mask must have shape \(2, 4, 4\), got \(2, 4\)"):
        model(ids, perm_mask=np.zeros((2, 4)))
    with pytest.raises(ValueError, match="perm_mask must hold only 0 and 1"):
        model(ids, perm_mask=np.full((2, 4, 4), 0.5))
    with pytest.raises(ValueError, match=r"target_mapping must have shape \(batch, num_predict, "
                                         r"time\) = \(2, num_predict, 4\), got \(2, 4\)"):
        model(ids, target_mapping=np.zeros((2, 4)))
    with pytest.raises(ValueError, match="each order must be a permutation of range\\(4\\)"):
        permutation_inputs(np.array([[0, 1, 1, 3]]), 2)
    with pytest.raises(ValueError, match="num_predict=5 is more than the 4 positions"):
        permutation_inputs(np.array([[0, 1, 2, 3]]), 5)
    with pytest.raises(ValueError, match=r"orders of shape \(1, 4\) must match input_ids"):
        permutation_lm_loss(model, ids, 2, orders=np.array([[0, 1, 2, 3]]))
    mems = model.transformer(ids, use_mems=True).mems
    with pytest.raises(ValueError, match=r"mems\[0\] must be a Tensor \(batch=2, mem_time, "
                                         r"d_model=16\)"):
        model(ids, mems=[mt.zeros(2, 3, 8, dtype=mt.float64), mems[1]])
    with pytest.raises(ValueError, match=r"mems\[0\] is float32 but the model is float64"):
        model(ids, mems=[m.float() for m in mems])


def test_config_round_trips_and_refuses_unsupported_huggingface_settings():
    config = XLNetConfig.tiny(mem_len=4, clamp_len=3, ff_activation="gelu_new")
    assert XLNetConfig.from_hf({**config.to_hf(), "model_type": "xlnet"}) == config
    options = XLNetConfig.tiny(attn_type="uni", same_length=True, reuse_len=2, bi_data=True)
    assert XLNetConfig.from_hf({**options.to_hf(), "model_type": "xlnet"}) == options
    with pytest.raises(ValueError, match="tie_word_embeddings=False is not supported"):
        XLNetConfig.from_hf({**config.to_hf(), "model_type": "xlnet",
                             "tie_word_embeddings": False})
    with pytest.raises(ValueError, match=r"attn_type must be one of \('bi', 'uni'\), got 'left'"):
        XLNetConfig.tiny(attn_type="left")
    with pytest.raises(ValueError, match="reuse_len must be an int >= 0"):
        XLNetConfig.tiny(reuse_len=-1)
    with pytest.raises(ValueError, match="ff_activation must be one of"):
        XLNetConfig.tiny(ff_activation="swish")
    with pytest.raises(ValueError, match="n_head=3 does not divide d_model=16"):
        XLNetConfig.tiny(n_head=3)


# ---- the shared model checks ---------------------------------------------------------------------
def _build(dropout=0.0, **overrides):
    return XLNetLMHeadModel(XLNetConfig.tiny(**{"dropout": dropout, **overrides}))


def _learning_batch():
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 20, (4, 12))
    return ids, sample_orders(4, 12, mt.Generator(1))


class TestXLNetChecks(ModelChecks):
    """Padding on both sides, round trips, learning the permutation objective, dtypes, backends,
    dropout: ``tests/model_checks.py``."""

    spec = ModelSpec(
        name="XLNetLMHeadModel", build=_build,
        forward=lambda model, ids, mask: model(ids, attention_mask=mask).logits, vocab=(3, 32),
        padding_left=True, hf=True,
        learning=Learning(_learning_batch,
                          lambda model, batch: permutation_lm_loss(model, batch[0], 4,
                                                                   orders=batch[1]).loss,
                          steps=60, factor=4, lr=1e-2),
        skips={**ENCODER_SKIPS,
               "causal": "XLNet's content stream is bidirectional; the order-respecting query "
                         "stream is tested by the perturbation and identity-order tests here",
               "cached_steps": "mems are the previous segment's states, not a key/value cache "
                               "of the same text (tested against HuggingFace here)",
               "cached_decoding": "generate recomputes the sequence each step, as HuggingFace's "
                                  "does without mems"})


# ---- the command line ----------------------------------------------------------------------------
def test_train_xlnet_resumes_exactly_and_generates(tmp_path, capsys):
    check_train_resume_generate("xlnet", tmp_path, capsys, "transformer.mask_emb")


def test_permutation_lm_trainer_draws_orders_from_the_library_generator():
    mt.manual_seed(0)
    model = XLNetLMHeadModel(XLNetConfig.tiny(permutation_k=3))
    ids = np.random.default_rng(0).integers(0, 32, (2, 6))
    mt.manual_seed(5)
    first = model(ids, labels=ids).loss.item()
    mt.manual_seed(5)
    assert model(ids, labels=ids).loss.item() == first
    mt.manual_seed(5)
    orders = sample_orders(2, 6)
    assert permutation_lm_loss(model, ids, 2, orders=orders).loss.item() == first
