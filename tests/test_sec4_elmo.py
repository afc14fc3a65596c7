"""ELMo (Peters et al., 2018; the survey's section IV-B, eq 13-17): the biLM's two language models,
its layer representations and the task's scalar mix, against the reference maths in
``minitorch_nlp/testing/reference/elmo.py``; causality, padding and freezing properties; and a biLM
that learns."""
import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_nlp as mt
from minitorch_nlp import optim
from minitorch_nlp.models import elmo
from minitorch_nlp.testing import strategies as S
from minitorch_nlp.testing.reference import elmo as ref

pytestmark = pytest.mark.sec4

MAX_CHARS = 6
VOCAB = 7
TOKENS = st.text(alphabet="ab_é", min_size=1, max_size=6)   # é: two UTF-8 bytes; > 4 bytes: cut


@st.composite
def sentences(draw, min_len=2, max_len=5, max_batch=3):
    """A batch of tokenised sentences with word ids: (list of token lists, (B, T) ids, lengths)."""
    lengths = draw(st.lists(st.integers(min_len, max_len), min_size=1, max_size=max_batch))
    tokens = [draw(st.lists(TOKENS, min_size=n, max_size=n)) for n in lengths]
    ids = np.zeros((len(lengths), max(lengths)), dtype=np.int64)
    for b, n in enumerate(lengths):
        ids[b, :n] = draw(st.lists(st.integers(0, VOCAB - 1), min_size=n, max_size=n))
    return tokens, ids, np.array(lengths)


def small_bilm(seed, num_layers=2, residual=True):
    """A float64 biLM small enough for the loop-by-loop reference."""
    mt.manual_seed(seed)
    mt.set_default_dtype(mt.float64)
    config = elmo.BiLMConfig(vocab_size=VOCAB, dim=3, num_layers=num_layers, char_dim=3,
                             filters=((1, 2), (2, 3)), highway_layers=1, residual=residual)
    return elmo.BiLM(config)


@st.composite
def models(draw):
    return small_bilm(draw(S.seeds()), draw(st.integers(1, 2)), draw(st.booleans()))


def parameters_of(model):
    return {name: p.numpy() for name, p in model.named_parameters()}


def reference_sentences(tokens, ids, lengths):
    chars = elmo.encode_characters(tokens, MAX_CHARS)
    return [(chars[b, :n], ids[b, :n]) for b, n in enumerate(lengths)]


def weighted_sum(values, cotangent):
    return anp.sum(values * cotangent)


def assert_gradients_match(model, expected):
    """The library's .grad of every parameter equals autograd's (no .grad: a zero gradient,
    e.g. the backward LSTMs under the forward LM alone)."""
    for name, p in model.named_parameters():
        got = np.zeros(p.shape) if p.grad is None else p.grad.numpy()
        np.testing.assert_allclose(got, expected[name], rtol=1e-7, atol=1e-10, err_msg=name)


# ---- eq 13-14: the two language models and their joint objective ---------------------------------
@pytest.mark.eq(13)
@settings(max_examples=10)
@given(models(), sentences(), S.seeds())
def test_eq13_forward_lm_matches_reference(model, batch, seed):
    tokens, ids, lengths = batch
    chars = elmo.encode_characters(tokens, MAX_CHARS)
    log_probs = model.forward_log_probs(model(chars, lengths), ids)
    cotangent = np.random.default_rng(seed).standard_normal(ids.shape)
    (log_probs * mt.tensor(cotangent)).sum().backward()

    residual = model.config.residual
    pieces = reference_sentences(tokens, ids, lengths)
    for b, (c, i) in enumerate(pieces):
        n = lengths[b]
        np.testing.assert_allclose(log_probs.numpy()[b, 1:n], ref.eq13_forward_lm(
            parameters_of(model), c, i, residual), rtol=1e-9, atol=1e-12)
    assert not log_probs.numpy()[:, 0].any()
    assert not log_probs.numpy()[np.arange(ids.shape[1]) >= lengths[:, None]].any()

    def loss(params):
        return sum(weighted_sum(ref.eq13_forward_lm(params, c, i, residual),
                                cotangent[b, 1:lengths[b]]) for b, (c, i) in enumerate(pieces))
    assert_gradients_match(model, autograd.grad(loss)(parameters_of(model)))


@pytest.mark.eq(14)
@settings(max_examples=10)
@given(models(), sentences(), S.seeds())
def test_eq14_backward_lm_matches_reference(model, batch, seed):
    tokens, ids, lengths = batch
    chars = elmo.encode_characters(tokens, MAX_CHARS)
    log_probs = model.backward_log_probs(model(chars, lengths), ids)
    cotangent = np.random.default_rng(seed).standard_normal(ids.shape)
    (log_probs * mt.tensor(cotangent)).sum().backward()

    residual = model.config.residual
    pieces = reference_sentences(tokens, ids, lengths)
    for b, (c, i) in enumerate(pieces):
        n = lengths[b]
        np.testing.assert_allclose(log_probs.numpy()[b, :n - 1], ref.eq14_backward_lm(
            parameters_of(model), c, i, residual), rtol=1e-9, atol=1e-12)
        assert not log_probs.numpy()[b, n - 1:].any()

    def loss(params):
        return sum(weighted_sum(ref.eq14_backward_lm(params, c, i, residual),
                                cotangent[b, :lengths[b] - 1]) for b, (c, i) in enumerate(pieces))
    assert_gradients_match(model, autograd.grad(loss)(parameters_of(model)))


@pytest.mark.eq(13, 14)
@settings(max_examples=10)
@given(models(), sentences())
def test_joint_bilm_objective_matches_reference(model, batch):
    tokens, ids, lengths = batch
    loss = model.loss(elmo.encode_characters(tokens, MAX_CHARS), ids, lengths)
    loss.backward()
    pieces = reference_sentences(tokens, ids, lengths)
    residual = model.config.residual
    expected = ref.biLM_objective(parameters_of(model), pieces, residual)
    np.testing.assert_allclose(loss.item(), expected, rtol=1e-10)
    assert_gradients_match(model, autograd.grad(
        lambda p: ref.biLM_objective(p, pieces, residual))(parameters_of(model)))


# ---- eq 15-16: the layer representations ---------------------------------------------------------
@pytest.mark.eq(15, 16)
@settings(max_examples=10)
@given(models(), sentences(min_len=1), S.seeds())
def test_eq15_eq16_layer_representations_match_reference(model, batch, seed):
    tokens, ids, lengths = batch
    layers = model.layer_representations(elmo.encode_characters(tokens, MAX_CHARS), lengths)
    num_layers = model.config.num_layers
    assert layers.shape == (num_layers + 1, len(lengths), ids.shape[1], 2 * model.config.dim)
    cotangent = np.random.default_rng(seed).standard_normal(layers.shape)
    (layers * mt.tensor(cotangent)).sum().backward()

    residual = model.config.residual
    pieces = reference_sentences(tokens, ids, lengths)
    for b, (c, _) in enumerate(pieces):
        n = lengths[b]
        np.testing.assert_allclose(layers.numpy()[:, b, :n], ref.eq15_layer_representations(
            parameters_of(model), c, residual), rtol=1e-9, atol=1e-12)
        assert not layers.numpy()[:, b, n:].any()

    def loss(params):
        return sum(weighted_sum(ref.eq15_layer_representations(params, c, residual),
                           cotangent[:, b, :lengths[b]]) for b, (c, _) in enumerate(pieces))
    assert_gradients_match(model, autograd.grad(loss)(parameters_of(model)))


@pytest.mark.eq(15)
@given(models(), sentences(min_len=1))
def test_layer_zero_is_the_token_vector_twice(model, batch):
    tokens, _, lengths = batch
    chars = elmo.encode_characters(tokens, MAX_CHARS)
    layer0 = model.layer_representations(chars, lengths).numpy()[0]
    x = model.token_encoder(chars).numpy()
    dim = model.config.dim
    real = np.arange(chars.shape[1])[None, :] < lengths[:, None]
    np.testing.assert_array_equal(layer0[..., :dim], layer0[..., dim:])
    np.testing.assert_allclose(layer0[real][:, :dim], x[real], rtol=1e-12)


@pytest.mark.eq(16)
@given(models(), sentences(min_len=1))
def test_layer_j_concatenates_forward_and_backward_states(model, batch):
    tokens, _, lengths = batch
    chars = elmo.encode_characters(tokens, MAX_CHARS)
    states = model(chars, lengths)
    layers = model.layer_representations(chars, lengths).numpy()
    real = states.mask
    dim = model.config.dim
    for j, (fwd, bwd) in enumerate(zip(states.forward, states.backward), start=1):
        np.testing.assert_allclose(layers[j][real][:, :dim], fwd.numpy()[real], rtol=1e-12)
        np.testing.assert_allclose(layers[j][real][:, dim:], bwd.numpy()[real], rtol=1e-12)


# ---- properties of the biLM ----------------------------------------------------------------------
def _perturbed(tokens, position):
    changed = [list(s) for s in tokens]
    changed[0][position] = changed[0][position] + "b" if len(changed[0][position]) < 3 else "a"
    return changed


@pytest.mark.eq(13, 14)
@given(models(), sentences(min_len=2), st.data())
def test_each_direction_sees_only_its_own_side(model, batch, data):
    """Changing token t changes no forward state before t and no backward state after t, so the
    forward LM's prediction of t_k uses only t_<k and the backward LM's only t_>k."""
    tokens, ids, lengths = batch
    t = data.draw(st.integers(0, lengths[0] - 1))
    before = model(elmo.encode_characters(tokens, MAX_CHARS), lengths)
    after = model(elmo.encode_characters(_perturbed(tokens, t), MAX_CHARS), lengths)
    for j in range(model.config.num_layers):
        np.testing.assert_array_equal(before.forward[j].numpy()[0, :t],
                                      after.forward[j].numpy()[0, :t])
        np.testing.assert_array_equal(before.backward[j].numpy()[0, t + 1:],
                                      after.backward[j].numpy()[0, t + 1:])
    if not np.allclose(before.token.numpy()[0, t], after.token.numpy()[0, t]):
        # (max-pooling can map two spellings to one vector) the change reaches both states at t
        assert not np.allclose(before.forward[0].numpy()[0, t], after.forward[0].numpy()[0, t])
        assert not np.allclose(before.backward[0].numpy()[0, t], after.backward[0].numpy()[0, t])
    forward_before = model.forward_log_probs(before, ids).numpy()[0]
    forward_after = model.forward_log_probs(after, ids).numpy()[0]
    np.testing.assert_array_equal(forward_before[:t + 1], forward_after[:t + 1])
    backward_before = model.backward_log_probs(before, ids).numpy()[0]
    backward_after = model.backward_log_probs(after, ids).numpy()[0]
    np.testing.assert_array_equal(backward_before[t:], backward_after[t:])


@pytest.mark.eq(15, 16)
@settings(max_examples=10)
@given(models(), sentences(min_len=1))
def test_padded_batch_equals_each_sentence_alone(model, batch):
    tokens, _, lengths = batch
    layers = model.layer_representations(elmo.encode_characters(tokens, MAX_CHARS), lengths)
    for b, sentence in enumerate(tokens):
        alone = model.layer_representations(elmo.encode_characters([sentence], MAX_CHARS))
        np.testing.assert_allclose(layers.numpy()[:, b, :lengths[b]], alone.numpy()[:, 0],
                                   rtol=1e-10, atol=1e-12)


def test_encode_characters():
    ids = elmo.encode_characters([["ab", "é"], ["abcdefgh"]], max_chars=5)
    assert ids.shape == (2, 2, 5) and ids.dtype == np.int64
    bow, eow = elmo.BEGIN_OF_WORD, elmo.END_OF_WORD
    assert ids[0, 0].tolist() == [bow, ord("a") + 1, ord("b") + 1, eow, 0]
    assert ids[0, 1].tolist() == [bow, 0xC3 + 1, 0xA9 + 1, eow, 0]      # é in UTF-8
    assert ids[1, 0].tolist() == [bow, ord("a") + 1, ord("b") + 1, ord("c") + 1, eow]
    assert not ids[1, 1].any()                                           # padding position


def test_bad_inputs_say_what_to_change():
    model = small_bilm(0)
    chars = elmo.encode_characters([["ab", "b"]], MAX_CHARS)
    with pytest.raises(ValueError, match="lengths"):
        model(chars, [3])
    with pytest.raises(ValueError, match="max_chars"):
        model(elmo.encode_characters([["a"]], 3)[..., :1], None)
    with pytest.raises(ValueError, match="char_ids"):
        model(chars[0])
    with pytest.raises(ValueError, match="layers"):
        elmo.ScalarMix(3)(mt.zeros(2, 4, 5))


@pytest.mark.eq(13, 14)
def test_bilm_overfits_a_tiny_corpus():
    corpus = [["<bos>", "the", "cat", "sat", "on", "the", "mat", "<eos>"],
              ["<bos>", "a", "dog", "ran", "to", "the", "park", "<eos>"],
              ["<bos>", "the", "dog", "sat", "<eos>"]]
    words = sorted({w for s in corpus for w in s})
    ids = np.zeros((len(corpus), max(map(len, corpus))), dtype=np.int64)
    for b, s in enumerate(corpus):
        ids[b, :len(s)] = [words.index(w) for w in s]
    lengths = np.array([len(s) for s in corpus])
    chars = elmo.encode_characters(corpus, 8)
    mt.manual_seed(0)
    model = elmo.BiLM(elmo.BiLMConfig(vocab_size=len(words), dim=16, num_layers=2))
    optimizer = optim.Adam(model.parameters(), lr=0.03)
    losses = []
    for _ in range(40):
        loss = model.loss(chars, ids, lengths)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    # log 16 = 2.8 at first; what is left is the corpus's own ambiguity ("the" -> cat, mat, park)
    assert losses[-1] < losses[0] / 8, (losses[0], losses[-1])


# ---- eq 17: the scalar mix -----------------------------------------------------------------------
@pytest.mark.eq(17)
@given(st.data())
def test_eq17_scalar_mix_matches_reference(data):
    num_layers, n, dim = (data.draw(st.integers(1, 4)) for _ in range(3))
    layer_norm = data.draw(st.booleans())
    layers = data.draw(S.arrays((num_layers, n, dim)))
    scalars = data.draw(S.arrays((num_layers,)))
    gamma = data.draw(S.arrays((1,), low=0.1, high=2.0))
    cotangent = np.random.default_rng(data.draw(S.seeds())).standard_normal((n, dim))

    mt.set_default_dtype(mt.float64)
    mix = elmo.ScalarMix(num_layers, layer_norm=layer_norm)
    mix.load_state_dict({"scalars": mt.tensor(scalars), "gamma": mt.tensor(gamma)})
    t_layers = mt.tensor(layers, requires_grad=True)
    out = mix(t_layers)
    np.testing.assert_allclose(out.numpy(), ref.eq17_scalar_mix(layers, scalars, gamma,
                                                                layer_norm), rtol=1e-9, atol=1e-12)
    out.backward(mt.tensor(cotangent))

    def loss(layers, scalars, gamma):
        return weighted_sum(ref.eq17_scalar_mix(layers, scalars, gamma, layer_norm), cotangent)
    for i, t in enumerate((t_layers, mix.scalars, mix.gamma)):
        np.testing.assert_allclose(t.grad.numpy(), autograd.grad(loss, i)(layers, scalars, gamma),
                                   rtol=1e-7, atol=1e-10)


@pytest.mark.eq(17)
@given(S.arrays(S.shapes(min_dims=1, max_dims=1), low=-30.0, high=30.0))
def test_scalar_mix_weights_sum_to_one(scalars):
    mix = elmo.ScalarMix(len(scalars))
    mix.load_state_dict({"scalars": mt.tensor(scalars, dtype=mt.float32), "gamma": mt.ones(1)})
    weights = mix.weights().numpy()
    assert (weights >= 0).all()
    np.testing.assert_allclose(weights.sum(), 1.0, rtol=1e-6)


@pytest.mark.eq(17)
def test_scalar_mix_starts_as_the_average_of_the_layers():
    layers = mt.randn(3, 2, 5)
    np.testing.assert_allclose(elmo.ScalarMix(3)(layers).numpy(), layers.numpy().mean(axis=0),
                               rtol=1e-6, atol=1e-6)
    listed = elmo.ScalarMix(3)([layers[0], layers[1], layers[2]])
    np.testing.assert_allclose(listed.numpy(), layers.numpy().mean(axis=0), rtol=1e-6,
                               atol=1e-6)


@pytest.mark.eq(17)
def test_elmo_trains_the_mix_on_a_frozen_bilm():
    model = small_bilm(1)
    features = elmo.ELMo(model, layer_norm=True).train()
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    chars = elmo.encode_characters([["ab", "b", "a"], ["b"]], MAX_CHARS)
    out = features(chars, [3, 1])
    assert out.shape == (2, 3, 2 * model.config.dim)
    expected = features.mix(model.layer_representations(chars, [3, 1]))
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-12)
    out.sum().backward()
    assert features.mix.scalars.grad is not None and features.mix.gamma.grad is not None
    assert all(p.grad is None for p in model.parameters())
