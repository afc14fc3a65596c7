"""Section VIII-B: Transformer-XL (Dai et al., 2019), eq 86-91.

The relative shift against a naive loop over (query, key); the relative-attention core (eq 91),
the layer over a memory (eq 87-89) and the whole language model with adaptive input and softmax
(eq 86) against ``minitorch_nlp/testing/reference/transformer_xl.py``, values and float64
gradients; the properties (no gradient reaches a previous segment, an empty memory is a causal
Transformer with relative attention, a memory of the whole past gives the outputs of the whole
sequence); the memory lengths of training and evaluation; HuggingFace (transformers 4.35)
checkpoints; bad input. Causality, padding, cached decoding, round trips, learning, dtypes and
backends are the shared checks of ``tests/model_checks.py``.
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
from minitorch_nlp import checks, nn, training
from minitorch_nlp.io import load
from minitorch_nlp.models.transformer_xl import (RelativePositionAttention, TransfoXLConfig,
                                                 TransfoXLLMHeadModel, TransformerXLLayer,
                                                 relative_position_encoding, relative_shift)
from minitorch_nlp.testing import strategies as S
from minitorch_nlp.testing.reference import transformer_xl as reference
from minitorch_nlp.models.gpt import causal_lm_loss
from tests.model_checks import (REFERENCE, TIGHT, Learning, ModelChecks, ModelSpec,
                                assert_saves_fixture_tensors, assert_trees_close,
                                check_train_resume_generate, grads_of, randomize, to_numpy)

pytestmark = pytest.mark.sec8
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"


def as_tensor(array, grad=True):
    return mt.tensor(array, dtype=mt.float64, requires_grad=grad)


# ---- the relative shift and the attention core (eq 91) -------------------------------------------
@pytest.mark.eq(91)
@given(st.integers(1, 5), st.integers(0, 4), st.booleans(), S.seeds())
def test_relative_shift_matches_a_loop_over_query_and_key(q_time, memory, both_ways, seed):
    """Scores by distance (k_time, k_time - 1, ..., down to 1 - q_time with ``both_ways`` as
    XLNet, to 0 as Transformer-XL) land at distance memory + i - j of every (i, j) covered."""
    k_time = q_time + memory
    lowest = 1 - q_time if both_ways else 0
    distances = np.arange(k_time, lowest - 1, -1)
    by_distance = np.random.default_rng(seed).standard_normal((2, q_time, len(distances)))
    shifted = relative_shift(mt.tensor(by_distance), k_time).numpy()
    assert shifted.shape == (2, q_time, k_time)
    for i in range(q_time):
        for j in range(k_time):
            distance = memory + i - j
            if distance >= lowest:   # (Transformer-XL's later keys are masked)
                column = int(np.flatnonzero(distances == distance)[0])
                assert shifted[:, i, j].tolist() == by_distance[:, i, column].tolist()


@pytest.mark.eq(91)
def test_relative_position_encoding_is_the_sinusoid_of_each_distance_largest_first():
    table = relative_position_encoding(6, 8, clamp_len=3).numpy()
    for m in range(6):
        np.testing.assert_allclose(table[m], reference.sinusoid(min(5 - m, 3), 8), atol=1e-6)


@pytest.mark.eq(91)
@given(st.integers(1, 3), st.integers(0, 3), st.sampled_from([1, 2]), st.sampled_from([0, 2]),
       S.seeds())
def test_eq91_relative_attention_core_matches_the_four_terms(q_time, memory, heads, clamp,
                                                             seed):
    rng = np.random.default_rng(seed)
    d_model, d_k, k_time = 4, 3, q_time + memory
    core = randomize(RelativePositionAttention(d_model, heads, d_k), seed)
    q, k, v = (rng.standard_normal((1, heads, n, d_k)) for n in (q_time, k_time, k_time))
    positions = relative_position_encoding(k_time, d_model, clamp, mt.float64)
    tq, tk, tv = as_tensor(q), as_tensor(k), as_tensor(v)
    z, _ = core(tq, tk, tv, causal=True, relative_positions=positions)
    params = {"r": core.position_proj.weight, "u": core.content_bias, "v": core.position_bias}
    arrays = to_numpy(params)

    def expected(q, k, v, p):
        return anp.stack([reference.relative_attention(
            q[0, h], k[0, h], v[0, h], p["r"][h * d_k:(h + 1) * d_k], p["u"][h], p["v"][h],
            memory, clamp) for h in range(heads)])[None]

    np.testing.assert_allclose(z.numpy(), expected(q, k, v, arrays), **REFERENCE)
    cotangent = rng.standard_normal(z.shape)
    (z * mt.tensor(cotangent)).sum().backward()
    grads = autograd.grad(lambda q, k, v, p: anp.sum(expected(q, k, v, p) * cotangent),
                          (0, 1, 2, 3))(q, k, v, arrays)
    for tensor_, grad in zip((tq, tk, tv), grads[:3]):
        np.testing.assert_allclose(tensor_.grad.numpy(), grad, **REFERENCE)
    assert_trees_close(grads_of(params), grads[3])


# ---- the layer over a memory (eq 87-89) ----------------------------------------------------------
def layer_params(layer):
    attention, ff = layer.self_attn, layer.feed_forward
    return {"q": attention.q_proj.weight, "k": attention.k_proj.weight,
            "v": attention.v_proj.weight, "o": attention.out_proj.weight,
            "r": attention.core.position_proj.weight, "u": attention.core.content_bias,
            "v_bias": attention.core.position_bias,
            "ln1": (layer.norm1.weight, layer.norm1.bias),
            "ln2": (layer.norm2.weight, layer.norm2.bias),
            "w1": ff.linear1.weight, "b1": ff.linear1.bias, "w2": ff.linear2.weight,
            "b2": ff.linear2.bias}


@pytest.mark.eq(87, 88, 89)
@given(st.integers(1, 3), st.integers(0, 3), st.booleans(), S.seeds())
def test_eq87_to_89_layer_over_a_memory_matches_reference(time, memory_time, pre_ln, seed):
    rng = np.random.default_rng(seed)
    d_model, heads, d_k = 4, 2, 3
    layer = randomize(TransformerXLLayer(d_model, heads, d_k, 5, pre_lnorm=pre_ln), seed,
                      norm_gain_mean=1.0)
    h = rng.standard_normal((2, time, d_model))
    memory = rng.standard_normal((2, memory_time, d_model))
    th, tm = as_tensor(h), as_tensor(memory)
    positions = relative_position_encoding(time + memory_time, d_model, 0, mt.float64)
    out = layer(th, tm if memory_time else None, relative_positions=positions)
    params = layer_params(layer)
    arrays = to_numpy(params)

    def expected(h, p):
        return anp.stack([reference.eq89_layer(h[b], memory[b] if memory_time else None, p,
                                               heads, d_k, pre_ln) for b in range(2)])

    np.testing.assert_allclose(out.numpy(), expected(h, arrays), **REFERENCE)
    cotangent = rng.standard_normal(out.shape)
    (out * mt.tensor(cotangent)).sum().backward()
    grad_h, grad_p = autograd.grad(lambda h, p: anp.sum(expected(h, p) * cotangent),
                                   (0, 1))(h, arrays)
    np.testing.assert_allclose(th.grad.numpy(), grad_h, **REFERENCE)
    assert_trees_close(grads_of(params), grad_p)
    assert tm.grad is None                              # eq 87: SG, nothing flows into the memory


@pytest.mark.eq(87, 89)
def test_an_empty_memory_is_a_causal_transformer_layer_with_relative_attention():
    mt.manual_seed(0)
    layer = randomize(TransformerXLLayer(8, 2, 4, 16), 0, norm_gain_mean=1.0)
    x = mt.tensor(np.random.default_rng(1).standard_normal((2, 5, 8)))
    positions = relative_position_encoding(5, 8, 0, mt.float64)
    xl = layer(x, None, relative_positions=positions).numpy()
    toolkit = nn.TransformerLayer.forward(layer, x, causal=True,
                                          relative_positions=positions).numpy()
    np.testing.assert_array_equal(xl, toolkit)


# ---- the language model (eq 86) ------------------------------------------------------------------
def model_params(model):
    """The LM's parameters in the reference's layout (each parameter once: the softmax's tied
    weights and projections are the embedding's, as the reference reuses them)."""
    embedding, crit = model.transformer.word_emb, model.crit
    params = {"tables": [t.weight for t in embedding.embeddings],
              "emb_projs": {i: p.weight for i, p in enumerate(embedding.projections)},
              "own_projs": {int(i): p.weight for i, p in crit.projections.items()},
              "layers": [layer_params(layer) for layer in model.transformer.layers]}
    if model.config.div_val == 1:
        params["bias"] = crit.bias
    else:
        params["biases"] = [b.bias for b in crit.biases]
    if model.config.cutoffs:
        params.update(cluster_weight=crit.cluster_weight, cluster_bias=crit.cluster_bias)
    return params


@st.composite
def xl_cases(draw):
    """A tiny config (with or without clusters, div_val 1 or 2, pre- or post-LN, clamped or not),
    two segments of ids, a seed."""
    clusters = draw(st.sampled_from([[], [4], [3, 6]]))
    div_val = draw(st.sampled_from([1, 2]))
    config = TransfoXLConfig.tiny(
        vocab_size=8, cutoffs=clusters, d_model=4, d_embed=draw(st.sampled_from([4, 6])),
        n_head=2, d_head=2, d_inner=5, div_val=div_val, n_layer=draw(st.integers(1, 2)),
        mem_len=draw(st.integers(1, 4)), clamp_len=draw(st.sampled_from([0, 2])),
        pre_lnorm=draw(st.booleans()),
        tie_projs=[draw(st.booleans()) for _ in range(len(clusters) + 1)])
    times = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(S.seeds()))
    return config, [rng.integers(0, 8, (2, t)) for t in times], draw(S.seeds())


@pytest.mark.eq(86, 87, 88, 89, 91)
@given(xl_cases())
def test_eq86_language_model_over_two_segments_matches_reference(case):
    config, (first, second), seed = case
    model = randomize(TransfoXLLMHeadModel(config), seed, norm_gain_mean=1.0).eval()
    params = model_params(model)
    arrays = to_numpy(params)
    out1 = model(first)
    out2 = model(second, mems=out1.mems, labels=second)
    expected_mems = []
    for b in range(2):
        log_probs, inputs = reference.eq86_log_probs(first[b], arrays, config)
        np.testing.assert_allclose(out1.logits.numpy()[b], log_probs, **REFERENCE)
        expected_mems.append([x[-config.mem_len:] for x in inputs])
    for n, memory in enumerate(out1.mems):
        np.testing.assert_allclose(memory.numpy(), np.stack([m[n] for m in expected_mems]),
                                   **REFERENCE)
        assert not memory.requires_grad

    def loss(p):
        total = 0.0
        for b in range(2):
            log_probs, _ = reference.eq86_log_probs(second[b], p, config, expected_mems[b])
            total = total - sum(log_probs[t, second[b, t + 1]] for t in range(len(second[b]) - 1))
        return total / max(second.size - 2, 1)

    if second.shape[1] > 1:
        np.testing.assert_allclose(out2.loss.item(), loss(arrays), **REFERENCE)
        out2.loss.backward()
        assert_trees_close(grads_of(params), autograd.grad(loss)(arrays))


@pytest.mark.eq(86, 87)
def test_no_gradient_reaches_the_previous_segment():
    mt.manual_seed(0)
    model = TransfoXLLMHeadModel(TransfoXLConfig.tiny()).to(mt.float64)
    ids = np.random.default_rng(0).integers(0, 30, (2, 12))
    first = model(ids[:, :6])
    hidden_first = first.mems
    model(ids[:, 6:], mems=hidden_first, labels=ids[:, 6:]).loss.backward()
    with_memory = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    model.zero_grad()
    constants = [mt.tensor(m.numpy()) for m in hidden_first]
    model(ids[:, 6:], mems=constants, labels=ids[:, 6:]).loss.backward()
    for name, p in model.named_parameters():     # the first segment's graph added nothing
        np.testing.assert_array_equal(p.grad.numpy(), with_memory[name], err_msg=name)
    assert all(not m.requires_grad and m.grad_fn is None for m in hidden_first)


@pytest.mark.eq(86, 87, 88, 91)
def test_a_memory_of_the_whole_past_gives_the_outputs_of_the_whole_sequence():
    mt.manual_seed(0)
    model = TransfoXLLMHeadModel(TransfoXLConfig.tiny(mem_len=12)).to(mt.float64).eval()
    ids = np.random.default_rng(0).integers(0, 30, (2, 12))
    whole = model(ids).logits.numpy()
    mems, pieces = None, []
    for a, b in ((0, 5), (5, 6), (6, 12)):
        out = model(ids[:, a:b], mems=mems)
        mems = out.mems
        pieces.append(out.logits.numpy())
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), whole, rtol=1e-10, atol=1e-12)


@pytest.mark.eq(87)
def test_memory_length_differs_between_training_and_evaluation():
    model = TransfoXLLMHeadModel(TransfoXLConfig.tiny(mem_len=3, eval_mem_len=10))
    ids = np.zeros((1, 7), dtype=np.int64)
    assert model.train()(ids).mems[0].shape == (1, 3, 16)
    assert model.eval()(ids).mems[0].shape == (1, 7, 16)
    assert model(ids, mems=model(ids).mems).mems[0].shape == (1, 10, 16)
    assert TransfoXLLMHeadModel(TransfoXLConfig.tiny(mem_len=0))(ids).mems is None


@pytest.mark.eq(86)
def test_adaptive_softmax_is_a_distribution_and_plain_without_cutoffs():
    mt.manual_seed(0)
    for cutoffs in ([], [10], [10, 20]):
        model = TransfoXLLMHeadModel(TransfoXLConfig.tiny(cutoffs=cutoffs)).to(mt.float64)
        log_probs = model(np.arange(30)[None] % 30).logits.numpy()
        np.testing.assert_allclose(np.exp(log_probs).sum(-1), 1.0, rtol=1e-12)
    hidden = model.transformer(np.arange(5)[None]).last_hidden_state
    plain = TransfoXLLMHeadModel(TransfoXLConfig.tiny(cutoffs=[], div_val=1))
    assert len(plain.crit.projections) == 0 and len(plain.transformer.word_emb.projections) == 0
    weight = plain.transformer.word_emb.embeddings[0].weight
    hidden = plain.transformer(np.arange(5)[None]).last_hidden_state
    np.testing.assert_allclose(plain.crit(hidden, plain.transformer.word_emb).numpy(),
                               (hidden @ weight.T + plain.crit.bias).log_softmax().numpy(),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.eq(86)
@given(st.sampled_from([[], [10], [10, 20]]), st.integers(1, 2), S.seeds())
def test_the_loss_scores_only_the_targets_and_equals_the_full_distributions(cutoffs, div_val,
                                                                             seed):
    """The target-only loss and its gradients equal causal_lm_loss of the full log-probs."""
    config = TransfoXLConfig.tiny(cutoffs=cutoffs, div_val=div_val)
    model = randomize(TransfoXLLMHeadModel(config), seed, norm_gain_mean=1.0)
    ids = np.random.default_rng(seed).integers(0, config.vocab_size, (2, 7))
    labels = ids.copy()
    labels[0, 3] = -100
    out = model(ids, labels=labels)
    assert out.logits is None
    out.loss.backward()
    targeted = {name: p.grad.numpy() for name, p in model.named_parameters()
                if p.grad is not None}
    model.zero_grad()
    full = model(ids, output_logits=True)
    expected = causal_lm_loss(full.logits, labels)
    expected.backward()
    np.testing.assert_allclose(out.loss.item(), expected.item(), **TIGHT)
    for name, p in model.named_parameters():
        if p.grad is not None and np.abs(p.grad.numpy()).max() > 0:
            np.testing.assert_allclose(targeted[name], p.grad.numpy(), **TIGHT, err_msg=name)


@pytest.mark.eq(86)
def test_tail_clusters_are_computed_only_where_a_target_lies_in_them():
    """Inputs and targets all in the head: the tail clusters get no gradient (they were never
    scored); the full distribution scores them."""
    config = TransfoXLConfig.tiny(cutoffs=[10, 20], div_val=2)
    model = TransfoXLLMHeadModel(config).to(mt.float64)
    ids = np.random.default_rng(0).integers(0, 10, (2, 6))
    model(ids, labels=ids).loss.backward()
    tail_tables = [table.weight for table in model.transformer.word_emb.embeddings[1:]]
    assert all(table.grad is None or not np.abs(table.grad.numpy()).any()
               for table in tail_tables)                 # (the inputs too are head tokens)
    assert model.crit.cluster_weight.grad is not None       # the head scores the clusters
    model.zero_grad()
    causal_lm_loss(model(ids, output_logits=True).logits, ids).backward()
    assert all(np.abs(table.grad.numpy()).max() > 0 for table in tail_tables)
    hidden = mt.zeros(2, 6, 16, dtype=mt.float64)
    with pytest.raises(ValueError, match=r"targets of shape \(2, 5\) must be \(2, 6\)"):
        model.crit.target_log_probs(hidden, model.transformer.word_emb, ids[:, 1:])
    with pytest.raises(ValueError, match=r"target ids must lie in \[0, 30\) or be -100"):
        model.crit.target_log_probs(hidden, model.transformer.word_emb, ids + 30)


# ---- HuggingFace checkpoints ---------------------------------------------------------------------
HF_FIXTURES = ("TransfoXLLMHeadModel", "TransfoXLLMHeadModel-plain")


@pytest.mark.parametrize("name", HF_FIXTURES)
def test_huggingface_checkpoint_gives_huggingface_outputs_over_two_segments(name):
    pytest.importorskip("safetensors")
    model = mt.from_pretrained(FIXTURES / name)
    with np.load(FIXTURES / name / "expected.npz") as arrays:
        expected = dict(arrays)
    config = model.config
    zeros = [mt.zeros(2, config.mem_len, config.d_model) for _ in range(config.n_layer)]
    first = model(expected["first"], mems=zeros)          # HuggingFace's initial memory: zeros
    second = model(expected["second"], mems=first.mems, labels=expected["second"],
                   output_logits=True)
    scale = max(np.abs(expected["log_probs1"]).max(), 1.0)
    np.testing.assert_allclose(first.logits.numpy(), expected["log_probs1"], rtol=0,
                               atol=1e-4 * scale)
    for i, memory in enumerate(first.mems):
        np.testing.assert_allclose(memory.numpy(), expected[f"mems{i}"], rtol=0, atol=1e-4)
    np.testing.assert_allclose(second.logits.numpy(), expected["log_probs2"], rtol=0,
                               atol=1e-4 * scale)
    np.testing.assert_allclose(second.loss.item(), expected["loss2"], rtol=1e-5)


@pytest.mark.parametrize("name", HF_FIXTURES)
def test_save_pretrained_writes_huggingface_keys_and_shapes(name, tmp_path):
    pytest.importorskip("safetensors.numpy")

    def unsaved(key):   # HuggingFace's buffer, and the output layers tied to the adaptive input
        return (key == "transformer.pos_emb.inv_freq" or ".out_layers." in key
                and key.endswith("weight") or key.startswith("crit.out_projs."))

    hf_config = assert_saves_fixture_tensors(mt.from_pretrained(FIXTURES / name),
                                             FIXTURES / name, tmp_path, unsaved)
    assert TransfoXLConfig.from_hf(hf_config) == TransfoXLConfig.from_hf(
        json.loads((FIXTURES / name / "config.json").read_text()))


def test_a_checkpoint_that_does_not_fit_names_the_key(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    directory = tmp_path / "broken"
    shutil.copytree(FIXTURES / "TransfoXLLMHeadModel", directory)
    state = safetensors_numpy.load_file(str(directory / "model.safetensors"))
    del state["transformer.layers.1.dec_attn.r_r_bias"]
    safetensors_numpy.save_file(state, str(directory / "model.safetensors"))
    with pytest.raises(ValueError,
                       match=r"missing keys: transformer\.layers\.1\.dec_attn\.r_r_bias"):
        mt.from_pretrained(directory)


# ---- bad input -----------------------------------------------------------------------------------
def test_bad_memories_and_positions_are_clear_errors():
    model = TransfoXLLMHeadModel(TransfoXLConfig.tiny())
    ids = np.zeros((2, 3), dtype=np.int64)
    mems = model(ids).mems
    with pytest.raises(ValueError, match=r"mems must be a list of 2 Tensors .* of 1"):
        model(ids, mems=mems[:1])
    with pytest.raises(ValueError, match=r"mems\[1\] must be a Tensor \(batch=2, mem_time, "
                                         r"d_model=16\), got \(2, 3, 5\)"):
        model(ids, mems=[mems[0], mt.zeros(2, 3, 5)])
    with pytest.raises(ValueError, match=r"mems\[0\] is float64 but the model is float32"):
        model(ids, mems=[m.double() for m in mems])
    with pytest.raises(ValueError, match=r"the same length, got \[2, 3\]"):
        model(ids, mems=[mems[0], mems[1][:, 1:]])
    with pytest.raises(ValueError, match="input_ids"):
        model(np.full((2, 3), 30))
    core = RelativePositionAttention(4, 2, 2)
    q = mt.zeros(1, 2, 3, 2)
    with pytest.raises(ValueError, match=r"relative_positions must have shape \(\[batch,\] "
                                         r"rows, d_model\), rows k_time = 3, k_time \+ 1 or "
                                         r"k_time \+ q_time = 6, d_model = 4, batch = 1; got "
                                         r"\(2, 4\)"):
        core(q, q, q, relative_positions=mt.zeros(2, 4))
    with pytest.raises(ValueError, match=r"batch = 1; got \(2, 6, 4\)"):
        core(q, q, q, relative_positions=mt.zeros(2, 6, 4))


@pytest.mark.parametrize("overrides, message", [
    (dict(cutoffs=[20, 10]), r"cutoffs \[20, 10\] must increase strictly inside \(0, "
                             r"vocab_size=30\)"),
    (dict(cutoffs=[10, 30]), "must increase strictly"),
    (dict(div_val=16), "leaves the last cluster no features"),
    (dict(tie_projs=[True]), "tie_projs needs one entry per cluster, 3, got 1"),
    (dict(mem_len=-1), "mem_len must be an int >= 0"),
    (dict(dropout=1.0), r"dropout must be a finite number in \[0, 1\)"),
])
def test_config_refuses_what_cannot_work(overrides, message):
    with pytest.raises(ValueError, match=message):
        TransfoXLConfig.tiny(**overrides)


def test_config_round_trips_and_refuses_unsupported_huggingface_settings():
    config = TransfoXLConfig.tiny(eval_mem_len=20)
    assert TransfoXLConfig.from_hf(config.to_hf()) == config
    assert TransfoXLConfig() .tie_projs == [False, True, True, True]
    for key, value in (("same_length", True), ("untie_r", False), ("attn_type", 1),
                       ("tie_word_embeddings", False)):
        with pytest.raises(ValueError, match=f"{key}={value!r} is not supported"):
            TransfoXLConfig.from_hf({**config.to_hf(), key: value})
    with pytest.raises(ValueError, match="model_type must be 'transfo-xl'"):
        TransfoXLConfig.from_hf({"model_type": "gpt2"})


# ---- the shared model checks ---------------------------------------------------------------------
def _build(dropout=0.0, **overrides):
    return TransfoXLLMHeadModel(TransfoXLConfig.tiny(
        **{"mem_len": 16, "dropout": dropout, "dropatt": dropout, **overrides}))


def _incremental(model, ids):
    mems, pieces = None, []
    for a, b in [(0, 3)] + [(t, t + 1) for t in range(3, ids.shape[1])]:
        out = model(ids[:, a:b], mems=mems)
        mems = out.mems
        pieces.append(out.logits)
    return mt.cat(pieces, axis=1)


def _lm_batch():
    return np.random.default_rng(0).integers(0, 30, (4, 12))


class TestTransformerXLChecks(ModelChecks):
    """Causality, right padding, the memory as a cache, cached decoding, round trips, learning,
    dtypes, backends, dropout: ``tests/model_checks.py``."""

    spec = ModelSpec(
        name="TransfoXLLMHeadModel", build=_build,
        forward=lambda model, ids, mask: model(ids).logits, vocab=(0, 30),
        causal=lambda model, ids: model(ids).logits, incremental=_incremental,
        decode=lambda model, ids, use_cache: model.generate(ids, 6, use_cache=use_cache),
        hf=True,
        learning=Learning(_lm_batch, lambda model, ids: model(ids, labels=ids).loss, steps=60,
                          factor=4, lr=1e-2),
        skips={"padding_left": "Transformer-XL takes no attention mask (as HuggingFace's): it "
                               "reads every earlier position, so only right padding is "
                               "invisible to the real tokens"})


# ---- the command line ----------------------------------------------------------------------------
def test_train_xl_resumes_exactly_and_generates(tmp_path, capsys):
    """The memory and the stream position are in the checkpoint, so the resumed run carries on
    from the same memory (its weights would differ otherwise)."""
    check_train_resume_generate("xl", tmp_path, capsys,
                                "transformer.layers.0.self_attn.core.content_bias")
    whole, resumed = (load(tmp_path / name / "checkpoint.npz") for name in ("whole", "run"))
    assert whole["segment"] == resumed["segment"] == 6 and len(whole["memory"]) == 1
    np.testing.assert_array_equal(resumed["memory"][0], whole["memory"][0])
    assert whole["memory"][0].shape == (4, 12, 16)


def xl_run(text, batch_size=2, block_size=8):
    config = training.TrainConfig(model="xl", n_layer=2, n_head=2, n_embd=8,
                                  block_size=block_size, batch_size=batch_size, steps=20,
                                  eval_every=20, warmup_steps=1, backend="numpy")
    return training.LanguageModelRun(config, text=text)


def test_train_xl_reads_consecutive_segments_and_carries_the_memory():
    """Step k feeds segment k of each of batch_size streams of the training text with the
    memory the previous step returned; when the streams are used up, it starts again from
    their beginnings with an empty memory."""
    run = xl_run("abcdefghij" * 12)
    streams = len(run.train_ids) // 2
    rows = run.train_ids[:2 * streams].reshape(2, streams)
    calls, forward = [], run.model.forward

    def recording(input_ids, mems=None, labels=None, **kwargs):
        out = forward(input_ids, mems=mems, labels=labels, **kwargs)
        if run.model.training:                       # not the validation batches
            calls.append((input_ids.numpy().copy(), mems, out.mems))
        return out

    run.model.forward = recording
    segments = streams // 8
    run.train(segments + 1, progress=False)
    assert len(calls) == segments + 1
    for k, (ids, mems, _) in enumerate(calls[:segments]):
        np.testing.assert_array_equal(ids, rows[:, 8 * k:8 * k + 8])
        assert (mems is None) if k == 0 else (mems is calls[k - 1][2])
    ids, mems, _ = calls[segments]
    np.testing.assert_array_equal(ids, rows[:, :8])
    assert mems is None and run.segment == 1
    assert [tuple(m.shape) for m in run.memory] == [(2, 8, 8)] * 2


def test_train_xl_refuses_streams_shorter_than_a_segment():
    with pytest.raises(checks.SettingError, match="batch_size=40 cuts the training text"):
        xl_run("abcdefghij" * 30, batch_size=40)
