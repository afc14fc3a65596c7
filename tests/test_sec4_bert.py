"""Section IV-C: BERT (Devlin et al., 2019).

The whole pretraining model (embeddings, post-LN encoder, pooler, MLM head tied to the word
embeddings, NSP) against a float64 reference written out in autograd.numpy from the paper, values
and gradients of every parameter; the masked-LM objective (eq 25); then what holds by
construction: segments matter, the decoder is the embedding matrix; the fine-tuning heads and the
span decoder; clear errors; and every model learns a tiny batch. Padding, dropout, round trips,
dtypes and backends are the shared checks of ``tests/model_checks.py``. Equality with
HuggingFace's models is in ``tests/test_hf_bert.py``.
"""
from __future__ import annotations

import dataclasses

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from autograd.scipy.special import erf
from hypothesis import given, settings, strategies as st

import minitorch_nlp as mt
from minitorch_nlp.models.bert import (BertConfig, BertForMaskedLM, BertForPreTraining,
                                       BertForQuestionAnswering, BertForSequenceClassification,
                                       BertForTokenClassification, BertModel, best_span,
                                       masked_lm_loss, mean_pool)
from minitorch_nlp.testing import strategies as S
from minitorch_nlp.testing.reference import transformer as R
from tests.model_checks import (Learning, ModelChecks, assert_trees_close,
                                encoder_spec, grads_of, layer_parameters, overfit, randomize,
                                to_numpy)

pytestmark = pytest.mark.sec4

TOL = dict(rtol=1e-7, atol=1e-10)
TINY = dict(vocab_size=23, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=12, max_position_embeddings=10, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)


def tiny_config(**overrides):
    return BertConfig(**{**TINY, **overrides})


def build(model_class, seed=0, **overrides):
    mt.manual_seed(seed)
    return model_class(tiny_config(**overrides))


def batch(seed=0, batch_size=3, time=7, vocab=23, pad=0):
    """Random ids (>= 4) with [CLS] = 2 first, rows padded to lengths time, time - 2, 3; token
    types 0 then 1; the attention mask."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, vocab, (batch_size, time))
    ids[:, 0] = 2
    lengths = np.array([time, time - 2, 3][:batch_size])
    mask = np.arange(time)[None, :] < lengths[:, None]
    ids[~mask] = pad
    types = (np.arange(time)[None, :] >= lengths[:, None] // 2) & mask
    return ids, mask, types.astype(np.int64)


# ---- the reference: BERT written out from the paper (float64, autograd.numpy) -------------------
def one_hot(ids, n):
    return np.eye(n)[ids]


def gelu(x):
    """x Phi(x) with the exact normal CDF (Hendrycks & Gimpel; Devlin section 3.1)."""
    return x * 0.5 * (1.0 + erf(x / np.sqrt(2.0)))


def reference_bert(ids, types, key_mask, p, num_heads, labels, nsp_labels, pad_row):
    """Devlin et al.'s pretraining model: E = LN(token + segment + position embeddings) (section
    3.2), post-LN encoder layers, C = tanh(W h_[CLS] + b), MLM logits LN(gelu(W h + b)) E^T + b',
    NSP logits W C + b; loss = mean MLM cross-entropy over labelled positions + mean NSP
    cross-entropy (appendix A.2). Lookups are one-hot products, losses textbook log-softmax.

    Padding tokens (id 0) embed to ``pad_row``, a constant: the padding row of the word
    embeddings gets no gradient from the lookup (``padding_idx``, as in HuggingFace's BERT),
    only from the tied decoder."""
    time = ids.shape[1]
    vocab = p["word"].shape[0]
    padding = (ids == 0)[..., None]
    x = (anp.dot(one_hot(ids, vocab) * ~padding, p["word"]) + padding * pad_row
         + anp.dot(one_hot(types, 2), p["type"]) + p["position"][:time])
    x = R.layer_norm(x, *p["embed_norm"])
    for layer in p["layers"]:
        x = R.encoder_layer(x, layer, num_heads, key_mask=key_mask, activation="gelu")
    pooled = anp.tanh(anp.dot(x[:, 0], p["pool_w"].T) + p["pool_b"])
    h = R.layer_norm(gelu(anp.dot(x, p["mlm_w"].T) + p["mlm_b"]), *p["mlm_norm"])
    logits = anp.dot(h, p["word"].T) + p["mlm_bias"]
    nsp = anp.dot(pooled, p["nsp_w"].T) + p["nsp_b"]

    def cross_entropy(scores, targets):
        log_probs = scores - anp.log(anp.sum(anp.exp(scores), axis=-1, keepdims=True))
        return -anp.sum(log_probs * one_hot(np.maximum(targets, 0), scores.shape[-1])
                        * (targets >= 0)[..., None]) / np.sum(targets >= 0)

    loss = cross_entropy(logits, labels) + cross_entropy(nsp, nsp_labels)
    return logits, nsp, loss


def parameter_tree(model):
    """The model's parameters (Tensors) in the reference's layout."""
    bert, embed = model.bert, model.bert.embeddings
    return {"word": embed.word_embeddings.weight, "type": embed.token_type_embeddings.weight,
            "position": embed.position_embeddings.table,
            "embed_norm": (embed.norm.weight, embed.norm.bias),
            "layers": tuple(layer_parameters(layer) for layer in bert.encoder.layers),
            "pool_w": bert.pooler.dense.weight, "pool_b": bert.pooler.dense.bias,
            "mlm_w": model.mlm.dense.weight, "mlm_b": model.mlm.dense.bias,
            "mlm_norm": (model.mlm.norm.weight, model.mlm.norm.bias), "mlm_bias": model.mlm.bias,
            "nsp_w": model.nsp.weight, "nsp_b": model.nsp.bias}


@settings(max_examples=5)
@given(S.seeds())
def test_pretraining_model_matches_the_reference(seed):
    # the reference's LayerNorm has eps 1e-5; BERT's 1e-12 changes nothing else
    model = randomize(build(BertForPreTraining, layer_norm_eps=1e-5), seed, norm_gain_mean=1.0)
    ids, mask, types = batch(seed)
    labels = np.where(np.random.default_rng(seed).random(ids.shape) < 0.4, ids, -100)
    labels[:, 1] = ids[:, 1]
    nsp_labels = np.array([0, 1, 1])
    params = parameter_tree(model)
    out = model(ids, attention_mask=mask, token_type_ids=types, labels=labels,
                next_sentence_label=nsp_labels)
    pad_row = params["word"].numpy()[0]
    logits, nsp, loss = reference_bert(ids, types, mask, to_numpy(params), 2, labels, nsp_labels,
                                       pad_row)
    np.testing.assert_allclose(out.prediction_logits.numpy(), logits, **TOL)
    np.testing.assert_allclose(out.seq_relationship_logits.numpy(), nsp, **TOL)
    np.testing.assert_allclose(out.loss.item(), loss, **TOL)

    out.loss.backward()
    expected = autograd.grad(lambda p: reference_bert(ids, types, mask, p, 2, labels,
                                                      nsp_labels, pad_row)[2])(to_numpy(params))
    assert_trees_close(grads_of(params), expected)


@pytest.mark.eq(25)
@given(st.integers(1, 3), st.integers(1, 5), st.integers(2, 6), S.seeds())
def test_eq25_gradient_flows_only_through_the_chosen_positions(batch_size, time, vocab, seed):
    """The values and gradients of eq 25 are checked by ``check_equation(25, ...)``
    (tests/test_check.py); here: positions not chosen (-100) get no gradient at all."""
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((batch_size, time, vocab))
    labels = np.where(rng.random((batch_size, time)) < 0.5,
                      rng.integers(0, vocab, logits.shape[:2]), -100)
    labels[0, 0] = rng.integers(vocab)
    x = mt.tensor(logits, dtype=mt.float64, requires_grad=True)
    masked_lm_loss(x, labels).backward()
    assert np.all(x.grad.numpy()[labels == -100] == 0)
    assert np.any(x.grad.numpy()[labels != -100] != 0)


# ---- properties ---------------------------------------------------------------------------------
def test_segments_and_positions_change_the_output():
    model = build(BertModel).eval()
    ids, _, types = batch(2)
    base = model(ids, token_type_ids=types).last_hidden_state.numpy()
    assert not np.allclose(model(ids).last_hidden_state.numpy(), base)
    shifted = model(ids, token_type_ids=types,
                    position_ids=np.arange(1, 8)[None].repeat(3, 0)).last_hidden_state.numpy()
    assert not np.allclose(shifted, base)
    out = model(ids, token_type_ids=types)
    out.last_hidden_state.sum().backward()
    table = model.embeddings.token_type_embeddings.weight.grad.numpy()
    assert np.abs(table).min(axis=1).max() > 0 and np.all(np.abs(table).sum(axis=1) > 0)


def test_the_decoder_is_the_word_embedding_matrix():
    model = build(BertForMaskedLM)
    embedding = model.bert.embeddings.word_embeddings.weight
    assert model.word_embeddings is embedding
    assert [n for n, p in model.named_parameters() if p.shape == embedding.shape] == [
        "bert.embeddings.word_embeddings.weight"]
    ids, mask, _ = batch(3)
    out = model(ids, attention_mask=mask)
    hidden = model.bert(ids, attention_mask=mask).last_hidden_state
    transformed = model.mlm.norm(mt.gelu(model.mlm.dense(hidden)))
    np.testing.assert_allclose(out.logits.numpy(), (transformed @ embedding.T + model.mlm.bias)
                               .numpy(), atol=1e-5)
    with mt.no_grad():  # an in-place op of the engine (out's graph holds the array read-only)
        embedding[5] = embedding[5] + 1.0
    changed = model(ids, attention_mask=mask).logits.numpy()
    assert not np.allclose(changed[..., 5], out.logits.numpy()[..., 5])


def test_bert_initialisation_and_dropout_settings():
    config = tiny_config(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.2,
                         vocab_size=4000, hidden_size=64, num_attention_heads=4)
    model = BertForPreTraining(config)
    words = model.bert.embeddings.word_embeddings.weight.numpy()
    # N(0, 0.02^2) cut at two standard deviations has a standard deviation of 0.0176
    assert np.all(words[0] == 0) and abs(words[1:].std() - 0.0176) < 0.002
    assert np.abs(words).max() <= 0.04
    layer = model.bert.encoder.layers[0]
    assert np.all(layer.self_attn.q_proj.bias.numpy() == 0)
    assert layer.self_attn.core.dropout.p == 0.2 and layer.dropout.p == 0.1
    assert layer.feed_forward.dropout.p == 0.0 and not layer.norm_first
    assert layer.norm1.eps == 1e-12 and layer.feed_forward.activation == "gelu"


@pytest.mark.parametrize("inputs", [lambda t: t, mt.tensor, lambda t: t.tolist()],
                         ids=["numpy", "tensor", "lists"])
def test_inputs_may_be_arrays_tensors_or_lists(inputs):
    model = build(BertModel).eval()
    ids, mask, types = batch(5)
    expected = model(ids, attention_mask=mask, token_type_ids=types).last_hidden_state.numpy()
    got = model(input_ids=inputs(ids), attention_mask=inputs(mask.astype(np.int64)),
                token_type_ids=inputs(types)).last_hidden_state.numpy()
    np.testing.assert_array_equal(got, expected)


def test_mean_pool_averages_real_tokens_and_normalises():
    hidden = mt.tensor(np.random.default_rng(6).standard_normal((2, 4, 3)), dtype=mt.float64)
    mask = np.array([[1, 1, 1, 0], [1, 0, 0, 0]])
    pooled = mean_pool(hidden, mask).numpy()
    np.testing.assert_allclose(pooled[0], hidden.numpy()[0, :3].mean(0), **TOL)
    np.testing.assert_allclose(pooled[1], hidden.numpy()[1, 0], **TOL)
    unit = mean_pool(hidden, mask, normalize=True).numpy()
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, **TOL)
    np.testing.assert_allclose(unit[0], pooled[0] / np.linalg.norm(pooled[0]), **TOL)
    with pytest.raises(ValueError, match="mean_pool: attention_mask"):
        mean_pool(hidden, mask[:, :3])


# ---- fine-tuning heads ---------------------------------------------------------------------------
def test_question_answering_loss_ignores_positions_outside_the_sequence():
    model = build(BertForQuestionAnswering).eval()
    ids, mask, types = batch(7)
    out = model(ids, attention_mask=mask, token_type_ids=types, start_positions=[1, 2, 30],
                end_positions=[3, 2, 4])
    start, end = out.start_logits.numpy(), out.end_logits.numpy()

    def nll(scores, positions):
        log_probs = scores - np.log(np.exp(scores).sum(-1, keepdims=True))
        return -np.mean([log_probs[b, t] for b, t in enumerate(positions) if t < scores.shape[1]])

    np.testing.assert_allclose(out.loss.item(), (nll(start, [1, 2, 30]) + nll(end, [3, 2, 4])) / 2,
                               rtol=1e-5)


@given(st.integers(1, 3), st.integers(1, 6), st.integers(1, 4), S.seeds())
def test_best_span_is_the_best_allowed_pair(batch_size, time, max_length, seed):
    rng = np.random.default_rng(seed)
    start, end = rng.standard_normal((2, batch_size, time))
    allowed = rng.random((batch_size, time)) < 0.7
    allowed[:, -1] = True
    starts, ends, scores = best_span(start, end, max_length, allowed)
    for b in range(batch_size):
        candidates = [(start[b, i] + end[b, j], i, j) for i in range(time)
                      for j in range(i, min(time, i + max_length))
                      if allowed[b, i] and allowed[b, j]]
        best = max(candidates)
        assert (scores[b], starts[b], ends[b]) == pytest.approx(best)
        assert starts[b] <= ends[b] < starts[b] + max_length


def test_sequence_classification_and_regression_losses():
    ids, mask, types = batch(8)
    model = build(BertForSequenceClassification, num_labels=3).eval()
    out = model(ids, attention_mask=mask, token_type_ids=types, labels=np.array([0, 2, 1]))
    logits = out.logits.numpy()
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(out.loss.item(), -log_probs[[0, 1, 2], [0, 2, 1]].mean(), rtol=1e-5)
    model = build(BertForSequenceClassification, num_labels=1).eval()
    out = model(ids, attention_mask=mask, labels=[0.5, -1.0, 2.0])
    assert out.logits.shape == (3, 1)
    squared_errors = (out.logits.numpy()[:, 0] - [0.5, -1.0, 2.0]) ** 2
    np.testing.assert_allclose(out.loss.item(), squared_errors.mean(), rtol=1e-5)


# ---- errors --------------------------------------------------------------------------------------
def test_bad_inputs_are_named():
    model = build(BertForMaskedLM)
    ids, mask, types = batch(9)
    with pytest.raises(ValueError,
                       match=r"BertModel: input_ids holds 23, outside the vocabulary "
                             r"\[0, vocab_size=23\)"):
        model(np.where(ids == ids[0, 1], 23, ids))
    with pytest.raises(ValueError, match=r"BertModel: input_ids holds -1"):
        model(np.where(ids == ids[0, 1], -1, ids))
    with pytest.raises(ValueError, match="sequence length 11 exceeds the 10 positions"):
        model(np.full((1, 11), 5))
    with pytest.raises(ValueError,
                       match=r"token_type_ids holds 2, outside \[0, type_vocab_size=2\)"):
        model(ids, token_type_ids=types * 2)
    with pytest.raises(ValueError, match=r"token_type_ids must be integer ids of shape \(3, 7\)"):
        model(ids, token_type_ids=types[:, :3])
    with pytest.raises(ValueError, match="attention_mask of shape"):
        model(ids, attention_mask=mask[:2])
    with pytest.raises(ValueError, match="input_ids must be integer ids"):
        model(ids.astype(float))
    with pytest.raises(ValueError, match="input_ids must be integer ids"):
        model(ids[0])
    with pytest.raises(TypeError, match="config must be a BertConfig"):
        BertModel(dict(TINY))


@pytest.mark.parametrize("field, value, message", [
    ("hidden_size", 9, "num_attention_heads=2 does not divide hidden_size=9"),
    ("num_hidden_layers", 0, "num_hidden_layers must be a positive int"),
    ("vocab_size", 2.5, "vocab_size must be a positive int"),
    ("hidden_act", "relu", "hidden_act must be one of"),
    ("hidden_dropout_prob", 1.0, r"hidden_dropout_prob must be a finite number in \[0, 1\)"),
    ("layer_norm_eps", 0.0, "layer_norm_eps must be a finite number > 0, got 0.0"),
    ("pad_token_id", -1, "pad_token_id must be an int >= 0, got -1"),
])
def test_bad_config_is_named(field, value, message):
    with pytest.raises(ValueError, match=f"BertConfig: {message}"):
        tiny_config(**{field: value})


def test_a_padding_id_outside_the_vocabulary_is_refused_where_the_embedding_uses_it():
    with pytest.warns(UserWarning, match=r"BertConfig: pad_token_id=23 is outside the "
                                         r"vocabulary \[0, 23\)"):
        config = tiny_config(pad_token_id=23)
    with pytest.raises(ValueError, match=r"Embedding: padding_idx 23 is outside \[-23, 23\)"):
        BertModel(config)


def test_config_round_trips_through_huggingface_fields():
    config = tiny_config(num_labels=3, classifier_dropout=0.2)
    hf = config.to_hf()
    assert hf["id2label"] == {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}
    assert hf["hidden_size"] == 8 and hf["position_embedding_type"] == "absolute"
    assert BertConfig.from_hf({**hf, "transformers_version": "5.0", "use_cache": True}) == config
    assert dataclasses.asdict(BertConfig()) == dataclasses.asdict(BertConfig.from_hf({}))
    for unsupported in ({"position_embedding_type": "relative_key"}, {"is_decoder": True},
                        {"tie_word_embeddings": False}):
        with pytest.raises(ValueError, match="BertConfig: .* not implemented|only absolute"):
            BertConfig.from_hf({**hf, **unsupported})


# ---- the shared checks; every model learns -------------------------------------------------------
def mlm_batch(seed=10, vocab=23):
    ids, mask, types = batch(seed, batch_size=3, time=8, vocab=vocab)
    labels = np.where((np.arange(8) % 3 == 1) & mask, ids, -100)
    masked = np.where(labels != -100, 3, ids)                  # 3 = [MASK]
    return dict(input_ids=masked, attention_mask=mask, token_type_ids=types, labels=labels)


def build_with_dropout(model_class):
    def build(dropout=0.0):
        return model_class(tiny_config(hidden_dropout_prob=dropout,
                                       attention_probs_dropout_prob=dropout))
    return build


class TestBertForMaskedLMChecks(ModelChecks):
    """Right padding (holding random ids of segment 1), round trips, learning (the loss falls
    20-fold in 100 steps), dtypes, backends, dropout: ``tests/model_checks.py``. BERT's positions
    count from the first column, so a left-padded row reads differently (as in HuggingFace)."""

    spec = encoder_spec(
        "BertForMaskedLM", build_with_dropout(BertForMaskedLM), vocab=(4, 23),
        padding_token_type=1,
        learning=Learning(mlm_batch, lambda model, inputs: model(**inputs).loss, steps=100,
                          factor=20, lr=1e-2),
        skips={"padding_left": "BERT's absolute positions count from the first column"})


class TestBertModelChecks(ModelChecks):
    """The encoder's last hidden states under the shared checks (the pooler reads the first
    position's state, so it follows)."""

    spec = encoder_spec(
        "BertModel", build_with_dropout(BertModel), vocab=(4, 23), output="last_hidden_state",
        padding_token_type=1,
        skips={"padding_left": TestBertForMaskedLMChecks.spec.skips["padding_left"],
               "learns": "no objective of its own; its heads (BertForMaskedLM, ...) learn"})


def test_pretraining_learns_masked_lm_and_next_sentence_together():
    inputs = dict(mlm_batch(11), next_sentence_label=np.array([0, 1, 0]))
    model = build(BertForPreTraining, max_position_embeddings=8)
    losses = overfit(model, lambda: model(**inputs).loss, 60, lr=1e-2)
    assert losses[-1] < losses[0] / 20, (losses[0], losses[-1])
    out = model.eval()(**inputs)
    np.testing.assert_array_equal(out.seq_relationship_logits.numpy().argmax(-1), [0, 1, 0])


@pytest.mark.parametrize("model_class, labels", [
    (BertForSequenceClassification, dict(labels=np.array([1, 0, 1]))),
    (BertForTokenClassification, dict(labels=np.where(batch(12)[1], batch(12)[0] % 2, -100))),
    (BertForQuestionAnswering, dict(start_positions=np.array([1, 3, 0]),
                                    end_positions=np.array([4, 3, 2]))),
], ids=["sequence", "token", "qa"])
def test_fine_tuning_heads_learn(model_class, labels):
    ids, mask, types = batch(12)
    model = build(model_class)
    inputs = dict(input_ids=ids, attention_mask=mask, token_type_ids=types, **labels)
    losses = overfit(model, lambda: model(**inputs).loss, 40, lr=1e-2)
    assert losses[-1] < losses[0] / 10, (losses[0], losses[-1])
