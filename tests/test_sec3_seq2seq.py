"""Section III: the RNN encoder-decoder, greedy and beam decoding, Bahdanau and Luong attention
(eq 1-10), and the recurrent layers underneath.

Forward values and gradients (float64) against the autograd.numpy references in
``minitorch_nlp/testing/reference/seq2seq.py``; then what holds by construction: a bidirectional
layer with lengths gives each sequence what it gets alone, padding changes nothing, PyTorch's
weights give PyTorch's numbers, beam 1 equals greedy, a wide beam is the exhaustive argmax and beats
greedy where greedy is short-sighted. Every encoder-decoder also runs the shared checks of
``tests/model_checks.py``: the decoder is causal, source padding changes nothing, teacher forcing
equals step-by-step decoding, round trips, dtypes, backends, dropout, and it learns.
"""
from __future__ import annotations

from functools import partial

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import minitorch_nlp as mt
from minitorch_nlp import cookbook, decoding, nn
from minitorch_nlp.models.seq2seq import (BahdanauAttention, BahdanauDecoder, EncoderOutput,
                                          LuongAttention, LuongDecoder, RNNDecoder, RNNEncoder,
                                          Seq2Seq)
from minitorch_nlp.testing import check_equation, strategies as S
from tests.model_checks import Learning, ModelChecks, ModelSpec, feed_one_at_a_time
from minitorch_nlp.testing.reference import seq2seq as R

pytestmark = [pytest.mark.sec3,
              pytest.mark.filterwarnings("ignore:Output seems independent of input")]

FORWARD = dict(rtol=1e-9, atol=1e-11)
GRADIENT = dict(rtol=1e-7, atol=1e-10)
small = settings(max_examples=10)
sizes = st.integers(1, 4)


# ---- helpers -------------------------------------------------------------------------------------
def weights(data, shape, bound=1.0):
    return data.draw(S.arrays(shape, -bound, bound))


def leaf(array):
    return mt.tensor(array, dtype=mt.float64, requires_grad=True)


def load(module, arrays):
    """``module`` in float64 holding ``arrays`` (name -> array) as its parameters."""
    module.to(mt.float64)
    module.load_state_dict(arrays, strict=False)
    params = dict(module.named_parameters())
    return [params[name] for name in arrays]


def assert_matches(outputs, reference, arrays, tensors, seed):
    """``outputs`` (a Tensor or a list of them) equal ``reference(*arrays)`` (an array or a
    tuple), and the gradients that reach ``tensors`` under a random cotangent equal autograd's
    gradients of the reference with respect to ``arrays``."""
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    expected = reference(*arrays)
    expected = expected if isinstance(expected, tuple) else (expected,)
    rng = np.random.default_rng(seed)
    cotangents = [rng.standard_normal(np.shape(e)) for e in expected]
    for out, want in zip(outputs, expected):
        np.testing.assert_allclose(out.numpy(), want, **FORWARD)
    total = sum((out * mt.tensor(c, dtype=mt.float64)).sum() for out, c in zip(outputs, cotangents))
    total.backward()

    def loss(*args):
        results = reference(*args)
        results = results if isinstance(results, tuple) else (results,)
        return sum(anp.sum(r * c) for r, c in zip(results, cotangents))

    for i, t in enumerate(tensors):
        want = autograd.grad(loss, i)(*arrays)
        got = np.zeros(t.shape) if t.grad is None else t.grad.numpy()
        np.testing.assert_allclose(got, want, **GRADIENT, err_msg=f"gradient of input {i}")


@st.composite
def padded_batches(draw, vocab_size=7, max_batch=3, max_len=5):
    return draw(S.token_batches(vocab_size=vocab_size, max_batch=max_batch, max_len=max_len))


# ---- eq 3 and the cells: recurrent layers --------------------------------------------------------
@pytest.mark.eq(3)
@small
@given(st.data())
def test_eq03_rnn_layer_matches_reference(data):
    batch, time, inputs, hidden = (data.draw(sizes) for _ in range(4))
    x, h0 = data.draw(S.arrays((batch, time, inputs))), weights(data, (batch, hidden))
    U, W = weights(data, (hidden, inputs)), weights(data, (hidden, hidden))
    b_ih, b_hh = weights(data, (hidden,)), weights(data, (hidden,))
    rnn = nn.RNN(inputs, hidden, batch_first=True)
    params = load(rnn, {"weight_ih_l0": U, "weight_hh_l0": W, "bias_ih_l0": b_ih,
                        "bias_hh_l0": b_hh})
    tx, th0 = leaf(x), leaf(h0)
    out, h_n = rnn(tx, th0.unsqueeze(0))
    np.testing.assert_allclose(h_n.numpy()[0], out.numpy()[:, -1], **FORWARD)

    def reference(x, h0, U, W, b_ih, b_hh):
        return anp.stack([R.eq03_rnn_hidden_states(x[b], h0[b], U, W, b_ih + b_hh)
                          for b in range(batch)])

    assert_matches(out, reference, [x, h0, U, W, b_ih, b_hh], [tx, th0, *params],
                   data.draw(S.seeds()))


@pytest.mark.eq(3)
@small
@given(st.data())
def test_lstm_step_matches_hochreiter_schmidhuber_gers(data):
    batch, inputs, hidden = (data.draw(sizes) for _ in range(3))
    x, h, c = (data.draw(S.arrays(shape)) for shape in
               [(batch, inputs), (batch, hidden), (batch, hidden)])
    names = {"weight_ih": (4 * hidden, inputs), "weight_hh": (4 * hidden, hidden),
             "bias_ih": (4 * hidden,), "bias_hh": (4 * hidden,)}
    arrays = {name: weights(data, shape) for name, shape in names.items()}
    cell = nn.LSTMCell(inputs, hidden)
    params = load(cell, arrays)
    tx, th, tc = leaf(x), leaf(h), leaf(c)
    h_new, c_new = cell(tx, (th, tc))

    def reference(x, h, c, *p):
        steps = [R.lstm_step(x[b], h[b], c[b], *p) for b in range(batch)]
        return anp.stack([s[0] for s in steps]), anp.stack([s[1] for s in steps])

    assert_matches([h_new, c_new], reference, [x, h, c, *arrays.values()], [tx, th, tc, *params],
                   data.draw(S.seeds()))


@pytest.mark.eq(3)
@pytest.mark.parametrize("reset_after", [True, False], ids=["pytorch", "cho2014"])
@small
@given(data=st.data())
def test_gru_step_matches_cho_et_al(reset_after, data):
    batch, inputs, hidden = (data.draw(sizes) for _ in range(3))
    x, h = data.draw(S.arrays((batch, inputs))), data.draw(S.arrays((batch, hidden)))
    names = {"weight_ih": (3 * hidden, inputs), "weight_hh": (3 * hidden, hidden),
             "bias_ih": (3 * hidden,), "bias_hh": (3 * hidden,)}
    arrays = {name: weights(data, shape) for name, shape in names.items()}
    cell = nn.GRUCell(inputs, hidden, reset_after=reset_after)
    params = load(cell, arrays)
    tx, th = leaf(x), leaf(h)

    def reference(x, h, *p):
        return anp.stack([R.gru_step(x[b], h[b], *p, reset_after=reset_after)
                          for b in range(batch)])

    assert_matches(cell(tx, th), reference, [x, h, *arrays.values()], [tx, th, *params],
                   data.draw(S.seeds()))


@pytest.mark.eq(3)
@pytest.mark.parametrize("layer", [nn.RNN, nn.GRU, nn.LSTM])
@small
@given(data=st.data())
def test_bidirectional_with_lengths_equals_each_sequence_alone(layer, data):
    batch, time = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 5))
    lengths = np.array(data.draw(st.lists(st.integers(1, time), min_size=batch,
                                          max_size=batch)))
    x = data.draw(S.arrays((batch, time, 3)))
    mt.manual_seed(data.draw(st.integers(0, 100)))
    rnn = layer(3, 4, num_layers=2, batch_first=True, bidirectional=True).to(mt.float64)
    out, h_n = rnn(mt.tensor(x), lengths=lengths)
    h_n = h_n[0] if isinstance(h_n, tuple) else h_n
    for b, n in enumerate(lengths):
        alone, h_alone = rnn(mt.tensor(x[b:b + 1, :n]))
        h_alone = h_alone[0] if isinstance(h_alone, tuple) else h_alone
        np.testing.assert_allclose(out.numpy()[b, :n], alone.numpy()[0], **FORWARD)
        np.testing.assert_allclose(h_n.numpy()[:, b], h_alone.numpy()[:, 0], **FORWARD)
        assert np.all(out.numpy()[b, n:] == 0)


@pytest.mark.eq(3)
@pytest.mark.parametrize("layer", [nn.GRU, nn.LSTM])
@small
@given(data=st.data())
def test_padded_steps_change_nothing_and_get_no_gradient(layer, data):
    batch, time = data.draw(st.integers(1, 3)), data.draw(st.integers(2, 5))
    lengths = np.array(data.draw(st.lists(st.integers(1, time), min_size=batch,
                                          max_size=batch)))
    x, noise = data.draw(S.arrays((batch, time, 2))), data.draw(S.arrays((batch, time, 2)))
    padded = np.arange(time)[None, :, None] >= lengths[:, None, None]
    rnn = layer(2, 3, bidirectional=True).to(mt.float64)  # time-major
    tx = leaf(x.transpose(1, 0, 2))
    out, _ = rnn(tx, lengths=lengths)
    noisy, _ = rnn(mt.tensor(np.where(padded, noise, x).transpose(1, 0, 2)), lengths=lengths)
    np.testing.assert_array_equal(out.numpy(), noisy.numpy())
    out.sum().backward()
    assert np.all(tx.grad.numpy().transpose(1, 0, 2)[np.broadcast_to(padded, x.shape)] == 0)


@pytest.mark.parametrize("layer", ["RNN", "GRU", "LSTM"])
def test_pytorch_weights_give_pytorch_outputs(layer):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    theirs = getattr(torch.nn, layer)(5, 6, num_layers=2, batch_first=True,
                                      bidirectional=True).double()
    ours = getattr(nn, layer)(5, 6, num_layers=2, batch_first=True, bidirectional=True)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.to(mt.float64).load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((3, 7, 5))
    lengths = np.array([7, 2, 5])
    packed = torch.nn.utils.rnn.pack_padded_sequence(torch.tensor(x), torch.tensor(lengths),
                                                     batch_first=True, enforce_sorted=False)
    out_t, h_t = theirs(packed)
    out_t, _ = torch.nn.utils.rnn.pad_packed_sequence(out_t, batch_first=True, total_length=7)
    tx = leaf(x)
    out, h = ours(tx, lengths=lengths)
    h_t, h = (h_t, h) if layer == "LSTM" else ((h_t,), (h,))
    np.testing.assert_allclose(out.numpy(), out_t.detach().numpy(), **FORWARD)
    for mine, torchs in zip(h, h_t):
        np.testing.assert_allclose(mine.numpy(), torchs.detach().numpy(), **FORWARD)
    out.sum().backward()
    out_t.sum().backward()
    torch_params = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), torch_params[name].grad.numpy(), **GRADIENT)


def test_recurrent_layers_reject_bad_shapes_and_lengths():
    lstm = nn.LSTM(3, 4, num_layers=2, batch_first=True)
    with pytest.raises(ValueError, match=r"input_size=3.*\(2, 5, 7\)"):
        lstm(mt.randn(2, 5, 7))
    with pytest.raises(ValueError, match=r"\(batch, time, input_size\).*\(5, 3\)"):
        lstm(mt.randn(5, 3))
    with pytest.raises(ValueError, match="longer than the sequence"):
        lstm(mt.randn(2, 5, 3), lengths=[5, 6])
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        lstm(mt.randn(2, 5, 3), lengths=[5, 5, 5])
    with pytest.raises(ValueError, match=r"\(2, 2, 4\), got \(1, 2, 4\)"):
        lstm(mt.randn(2, 5, 3), (mt.zeros(1, 2, 4), mt.zeros(1, 2, 4)))
    with pytest.raises(ValueError, match=r"\(2, 2, 4\), got \(2, 2, 5\)"):
        nn.GRU(3, 4, num_layers=2)(mt.randn(5, 2, 3), mt.zeros(2, 2, 5))
    with pytest.raises(ValueError, match=r"\(batch, input_size=3\), got \(2, 4\)"):
        nn.GRUCell(3, 4)(mt.randn(2, 4))
    with pytest.raises(ValueError, match=r"hidden_size\) = \(2, 4\), got \(2, 5\)"):
        nn.RNNCell(3, 4)(mt.randn(2, 3), mt.zeros(2, 5))


# ---- eq 4-6: the encoder-decoder -----------------------------------------------------------------
@pytest.mark.eq(4)
@small
@given(batch=padded_batches(), data=st.data())
def test_eq04_encoder_summary_matches_reference(batch, data):
    vocab, embed, hidden, summary = 7, 2, 3, data.draw(sizes)
    shapes = {"embed.weight": (vocab, embed)}
    for suffix in ("", "_reverse"):
        shapes.update({f"rnn.weight_ih_l0{suffix}": (hidden, embed),
                       f"rnn.weight_hh_l0{suffix}": (hidden, hidden),
                       f"rnn.bias_ih_l0{suffix}": (hidden,), f"rnn.bias_hh_l0{suffix}": (hidden,)})
    shapes.update({"summarize.weight": (summary, 2 * hidden), "summarize.bias": (summary,)})
    arrays = {name: weights(data, shape) for name, shape in shapes.items()}
    encoder = RNNEncoder(vocab, embed, hidden, cell="rnn", bidirectional=True,
                         summary_size=summary)
    params = load(encoder, arrays)
    encoded = encoder(batch.ids, batch.lengths)
    assert encoded.mask.tolist() == batch.mask.tolist()

    def reference(emb, U_f, W_f, bi_f, bh_f, U_b, W_b, bi_b, bh_b, V, b):
        rows = []
        for ids, n in zip(batch.ids, batch.lengths):
            xs = R.embed(emb, ids[:n])
            h0 = np.zeros(hidden)
            forward = R.eq03_rnn_hidden_states(xs, h0, U_f, W_f, bi_f + bh_f)[-1]
            backward = R.eq03_rnn_hidden_states(xs[::-1], h0, U_b, W_b, bi_b + bh_b)[-1]
            rows.append(R.eq04_encoder_summary(anp.concatenate([forward, backward]), V, b))
        return anp.stack(rows)

    assert_matches(encoded.summary[0], reference, list(arrays.values()), params,
                   data.draw(S.seeds()))


def _rnn_decoder(data, vocab, embed, hidden):
    shapes = {"embed.weight": (vocab, embed), "rnn.weight_ih_l0": (hidden, embed + hidden),
              "rnn.weight_hh_l0": (hidden, hidden), "rnn.bias_ih_l0": (hidden,),
              "rnn.bias_hh_l0": (hidden,), "out.weight": (vocab, hidden), "out.bias": (vocab,)}
    arrays = {name: weights(data, shape) for name, shape in shapes.items()}
    decoder = RNNDecoder(vocab, embed, hidden, cell="rnn")
    return decoder, arrays, load(decoder, arrays)


def _reference_decoder_states(tgt, E, emb, W_ih, W_hh, b_ih, b_hh, embed, pad_row):
    return [R.eq05_decoder_hidden_states(R.embed(emb, ids, 0, pad_row), E[b], E[b],
                                         W_ih[:, :embed],
                                         W_ih[:, embed:], W_hh, b_ih + b_hh)
            for b, ids in enumerate(tgt)]


@pytest.mark.eq(5)
@small
@given(batch=padded_batches(), data=st.data())
def test_eq05_decoder_hidden_states_match_reference(batch, data):
    vocab, embed, hidden = 7, 2, data.draw(sizes)
    decoder, arrays, params = _rnn_decoder(data, vocab, embed, hidden)
    E = weights(data, (len(batch.ids), hidden))
    tE = leaf(E)
    states, _ = decoder.hidden_states(batch.ids, {"h": tE.unsqueeze(1), "context": tE})
    names = ["embed.weight", "rnn.weight_ih_l0", "rnn.weight_hh_l0", "rnn.bias_ih_l0",
             "rnn.bias_hh_l0"]

    def reference(E, *p):
        return anp.stack(_reference_decoder_states(batch.ids, E, *p, embed,
                                                   arrays["embed.weight"][0]))

    assert_matches(states, reference, [E] + [arrays[n] for n in names], [tE] + params[:5],
                   data.draw(S.seeds()))


@pytest.mark.eq(6)
@small
@given(batch=padded_batches(), data=st.data())
def test_eq06_output_distribution_matches_reference(batch, data):
    vocab, embed, hidden = 7, 2, data.draw(sizes)
    decoder, arrays, params = _rnn_decoder(data, vocab, embed, hidden)
    E = weights(data, (len(batch.ids), hidden))
    tE = leaf(E)
    logits, weights_, _ = decoder(batch.ids, {"h": tE.unsqueeze(1), "context": tE})
    assert weights_ is None

    def reference(E, *p):
        states = _reference_decoder_states(batch.ids, E, *p[:5], embed,
                                           arrays["embed.weight"][0])
        return anp.stack([R.eq06_output_distribution(h, p[5], p[6]) for h in states])

    assert_matches(logits.softmax(axis=-1), reference, [E, *arrays.values()], [tE, *params],
                   data.draw(S.seeds()))


# ---- eq 7-10: attention --------------------------------------------------------------------------
@pytest.mark.eq(7)
@pytest.mark.parametrize("kind", ["dot", "general", "concat"])
@small
@given(data=st.data())
def test_eq07_luong_scores_match_reference(kind, data):
    batch, time, query = (data.draw(sizes) for _ in range(3))
    key = query if kind == "dot" else data.draw(sizes)
    h_t, hs = data.draw(S.arrays((batch, query))), data.draw(S.arrays((batch, time, key)))
    attention = LuongAttention(query, key, score=kind)
    if kind == "general":
        arrays = {"key_proj.weight": weights(data, (query, key))}
    elif kind == "concat":
        arrays = {"query_proj.weight": weights(data, (query, query)),
                  "key_proj.weight": weights(data, (query, key)),
                  "v.weight": weights(data, (1, query))}
    else:
        arrays = {}
    params = load(attention, arrays)
    tq, tm = leaf(h_t), leaf(hs)
    scores = attention.score(tq, attention.project_keys(tm))

    def reference(h_t, hs, *p):
        W_a = p[0] if kind == "general" else anp.concatenate(p[:2], axis=1) if p else None
        v_a = p[2][0] if kind == "concat" else None
        return anp.stack([R.eq07_alignment_scores(h_t[b], hs[b], kind, W_a, v_a)
                          for b in range(batch)])

    assert_matches(scores, reference, [h_t, hs, *arrays.values()], [tq, tm, *params],
                   data.draw(S.seeds()))


def _bahdanau(data, query, key, size):
    arrays = {"query_proj.weight": weights(data, (size, query)),
              "key_proj.weight": weights(data, (size, key)), "v.weight": weights(data, (1, size))}
    attention = BahdanauAttention(query, key, size)
    return attention, arrays, load(attention, arrays)


@pytest.mark.eq(7, 8)
@small
@given(data=st.data())
def test_eq08_bahdanau_additive_scores_match_reference(data):
    batch, time, query, key, size = (data.draw(sizes) for _ in range(5))
    s_prev, hs = data.draw(S.arrays((batch, query))), data.draw(S.arrays((batch, time, key)))
    attention, arrays, params = _bahdanau(data, query, key, size)
    tq, tm = leaf(s_prev), leaf(hs)
    scores = attention.score(tq, attention.project_keys(tm))

    def reference(s_prev, hs, W, U, v):
        return anp.stack([R.eq08_additive_scores(s_prev[b], hs[b], W, U, v[0])
                          for b in range(batch)])

    assert_matches(scores, reference, [s_prev, hs, *arrays.values()], [tq, tm, *params],
                   data.draw(S.seeds()))


@pytest.mark.eq(9, 10)
@small
@given(data=st.data())
def test_eq09_eq10_bahdanau_weights_and_context_match_reference(data):
    batch, time, query, key, size = (data.draw(sizes) for _ in range(5))
    lengths = np.array(data.draw(st.lists(st.integers(1, time), min_size=batch, max_size=batch)))
    mask = np.arange(time)[None, :] < lengths[:, None]
    s_prev, hs = data.draw(S.arrays((batch, query))), data.draw(S.arrays((batch, time, key)))
    attention, arrays, params = _bahdanau(data, query, key, size)
    tq, tm = leaf(s_prev), leaf(hs)
    context, alpha = attention(tq, tm, mask)
    assert np.all(alpha.numpy()[~mask] == 0)

    def reference(s_prev, hs, W, U, v):
        alphas = [R.eq09_attention_weights(R.eq08_additive_scores(s_prev[b], hs[b], W, U, v[0]),
                                           mask[b]) for b in range(batch)]
        contexts = [R.eq10_context_vector(a, hs[b]) for b, a in enumerate(alphas)]
        return anp.stack(contexts), anp.stack(alphas)

    assert_matches([context, alpha], reference, [s_prev, hs, *arrays.values()],
                   [tq, tm, *params], data.draw(S.seeds()))


@pytest.mark.eq(9, 10)
@small
@given(data=st.data())
def test_luong_local_p_attention_matches_reference(data):
    batch, time, query, window = (data.draw(st.integers(1, 5)) for _ in range(4))
    lengths = np.array(data.draw(st.lists(st.integers(1, time), min_size=batch, max_size=batch)))
    mask = np.arange(time)[None, :] < lengths[:, None]
    h_t, hs = data.draw(S.arrays((batch, query))), data.draw(S.arrays((batch, time, query)))
    attention = LuongAttention(query, query, score="dot", window=window)
    arrays = {"position_proj.weight": weights(data, (query, query)),
              "position_v.weight": weights(data, (1, query))}
    params = load(attention, arrays)
    tq, tm = leaf(h_t), leaf(hs)
    context, alpha = attention(tq, tm, mask)
    centre = attention.predicted_position(tq, lengths).numpy()
    outside = np.abs(np.arange(time)[None, :] - centre[:, None]) > window
    assert np.all(alpha.numpy()[outside | ~mask] == 0)
    assert np.all((0 <= centre) & (centre <= lengths - 1))

    def reference(h_t, hs, W_p, v_p):
        rows = [R.luong_local_p(h_t[b], hs[b], mask[b], "dot", window, W_p, v_p[0])
                for b in range(batch)]
        return anp.stack([r[0] for r in rows]), anp.stack([r[1] for r in rows])

    assert_matches([context, alpha], reference, [h_t, hs, *arrays.values()], [tq, tm, *params],
                   data.draw(S.seeds()))


@pytest.mark.eq(9, 10)
def test_local_p_with_a_window_covering_the_source_and_a_flat_gaussian_is_global():
    attention = LuongAttention(3, 3, score="general", window=50)
    global_ = LuongAttention(3, 3, score="general")
    global_.load_state_dict(attention.state_dict(), strict=False)
    h_t, hs = mt.randn(2, 3), mt.randn(2, 4, 3)
    local_context, local_alpha = attention(h_t, hs)
    context, alpha = global_(h_t, hs)
    # sigma = 25: the Gaussian factor is within 1e-3 of 1 over four positions
    np.testing.assert_allclose(local_alpha.numpy(), alpha.numpy(), rtol=2e-3)


def test_attention_rejects_mismatched_sizes():
    with pytest.raises(ValueError, match="dot score needs .* size 4 and encoder state size 6"):
        LuongAttention(4, 6, score="dot")
    with pytest.raises(ValueError, match="score must be one of"):
        LuongAttention(4, 4, score="bilinear")
    with pytest.raises(ValueError, match=r"query .* shape \(batch, 4\), got \(2, 5\)"):
        BahdanauAttention(4, 6)(mt.randn(2, 5), mt.randn(2, 3, 6))
    with pytest.raises(ValueError, match=r"\(batch=2, source_len, 6\), got \(2, 3, 5\)"):
        LuongAttention(4, 6)(mt.randn(2, 4), mt.randn(2, 3, 5))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 4\).*\(2, 3\)"):
        BahdanauAttention(4, 6)(mt.randn(2, 4), mt.randn(2, 3, 6), np.ones((2, 4), bool))


# ---- whole decoders against the references -------------------------------------------------------
def _encoded(data, batch, time, key, hidden):
    lengths = np.array(data.draw(st.lists(st.integers(1, time), min_size=batch, max_size=batch)))
    memory, summary = data.draw(S.arrays((batch, time, key))), weights(data, (1, batch, hidden))
    tm, ts = leaf(memory), leaf(summary)
    mask = np.arange(time)[None, :] < lengths[:, None]
    return EncoderOutput(tm, ts, mask, lengths), memory, summary, mask


def _decoder_arrays(data, decoder):
    arrays = {name: weights(data, p.shape) for name, p in decoder.named_parameters()}
    return arrays, load(decoder, arrays)


@pytest.mark.eq(8, 9, 10)
@small
@given(data=st.data())
def test_bahdanau_decoder_steps_match_reference(data):
    batch, time, steps = data.draw(sizes), data.draw(sizes), data.draw(st.integers(1, 3))
    vocab, embed, hidden, key = 5, 2, 3, 4
    decoder = BahdanauDecoder(vocab, embed, hidden, key, attention_size=2, output_size=2)
    arrays, params = _decoder_arrays(data, decoder)
    encoded, memory, summary, mask = _encoded(data, batch, time, key, hidden)
    tokens = data.draw(S.arrays((batch, steps), 0, vocab - 1).map(lambda a: a.astype(np.int64)))
    logits, alpha, _ = decoder(tokens, decoder.init_state(encoded))
    names = list(arrays)

    def reference(memory, summary, *p):
        p = dict(zip(names, p))
        all_logits, all_alphas = [], []
        for b in range(batch):
            s = summary[0, b]
            ys = R.embed(p["embed.weight"], tokens[b], 0, arrays["embed.weight"][0])
            row_logits, row_alphas = [], []
            for y in ys:
                e = R.eq08_additive_scores(s, memory[b], p["attention.query_proj.weight"],
                                           p["attention.key_proj.weight"],
                                           p["attention.v.weight"][0])
                alpha = R.eq09_attention_weights(e, mask[b])
                c = R.eq10_context_vector(alpha, memory[b])
                deep = anp.dot(p["deep_output.weight"], anp.concatenate([s, y, c])) + \
                    p["deep_output.bias"]
                t = anp.maximum(deep[0::2], deep[1::2])  # maxout over pairs
                row_logits.append(anp.dot(p["out.weight"], t) + p["out.bias"])
                row_alphas.append(alpha)
                s = R.gru_step(anp.concatenate([y, c]), s, p["cells.0.weight_ih"],
                               p["cells.0.weight_hh"], p["cells.0.bias_ih"], p["cells.0.bias_hh"])
            all_logits.append(anp.stack(row_logits))
            all_alphas.append(anp.stack(row_alphas))
        return anp.stack(all_logits), anp.stack(all_alphas)

    assert_matches([logits, alpha], reference, [memory, summary, *arrays.values()],
                   [encoded.memory, encoded.summary, *params], data.draw(S.seeds()))


@pytest.mark.eq(7, 9, 10)
@small
@given(data=st.data())
def test_luong_decoder_attentional_state_and_input_feeding_match_reference(data):
    batch, time, steps = data.draw(sizes), data.draw(sizes), data.draw(st.integers(1, 3))
    vocab, embed, hidden, key = 5, 2, 3, 4
    decoder = LuongDecoder(vocab, embed, hidden, key, score="general")
    arrays, params = _decoder_arrays(data, decoder)
    encoded, memory, summary, mask = _encoded(data, batch, time, key, hidden)
    tokens = data.draw(S.arrays((batch, steps), 0, vocab - 1).map(lambda a: a.astype(np.int64)))
    logits, alpha, _ = decoder(tokens, decoder.init_state(encoded))
    names = list(arrays)

    def reference(memory, summary, *p):
        p = dict(zip(names, p))
        all_logits = []
        for b in range(batch):
            h, c, feed = summary[0, b], np.zeros(hidden), np.zeros(hidden)
            row = []
            for y in R.embed(p["embed.weight"], tokens[b], 0, arrays["embed.weight"][0]):
                h, c = R.lstm_step(anp.concatenate([y, feed]), h, c, p["cells.0.weight_ih"],
                                   p["cells.0.weight_hh"], p["cells.0.bias_ih"],
                                   p["cells.0.bias_hh"])
                e = R.eq07_alignment_scores(h, memory[b], "general",
                                            p["attention.key_proj.weight"])
                context = R.eq10_context_vector(R.eq09_attention_weights(e, mask[b]), memory[b])
                feed = R.luong_attentional_state(context, h, p["combine.weight"])
                row.append(anp.dot(p["out.weight"], feed) + p["out.bias"])
            all_logits.append(anp.stack(row))
        return anp.stack(all_logits)

    assert_matches(logits, reference, [memory, summary, *arrays.values()],
                   [encoded.memory, encoded.summary, *params], data.draw(S.seeds()))


# ---- eq 1-2: the objective and the searches ------------------------------------------------------
@pytest.mark.eq(2)
def test_eq02_sequence_log_prob_matches_reference():
    check_equation(2, decoding.sequence_log_prob, max_examples=10)


VOCAB, PAD, BOS, EOS = 8, 0, 1, 2


def tiny_model(kind, cell=None, dropout=0.0):
    """A small untrained or trainable model of each kind (vocabulary of 8, hidden size 16)."""
    if kind == "plain":
        encoder = RNNEncoder(VOCAB, 8, 16, cell=cell or "gru", dropout=dropout)
        decoder = RNNDecoder(VOCAB, 8, 16, cell=cell or "gru", dropout=dropout)
    elif kind == "bahdanau":
        encoder = RNNEncoder(VOCAB, 8, 16, cell=cell or "gru", bidirectional=True,
                             dropout=dropout)
        decoder = BahdanauDecoder(VOCAB, 8, 16, 32, cell=cell or "gru", dropout=dropout)
    else:  # "luong-<score>", or "luong-local" for local-p with the concat score
        score = kind.split("-")[1]
        window = 2 if score == "local" else None
        encoder = RNNEncoder(VOCAB, 8, 8, cell=cell or "lstm", bidirectional=True,
                             summary_size=16, dropout=dropout)
        decoder = LuongDecoder(VOCAB, 8, 16, 16, score="concat" if window else score,
                               window=window, cell=cell or "lstm", dropout=dropout)
    return Seq2Seq(encoder, decoder, pad_id=PAD)


def tiny_batch(seed=0, batch=6, source_len=5, target_len=4):
    """Random source sentences (right-padded) and targets y, as (src, lengths, tgt_in, tgt_out)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, source_len + 1, batch)
    lengths[0] = source_len
    src = np.where(np.arange(source_len)[None] < lengths[:, None],
                   rng.integers(3, VOCAB, (batch, source_len)), PAD)
    tgt_lengths = rng.integers(1, target_len, batch)
    y = np.where(np.arange(target_len)[None] < tgt_lengths[:, None],
                 rng.integers(3, VOCAB, (batch, target_len)), PAD)
    tgt_out = np.where(np.arange(target_len)[None] == tgt_lengths[:, None], EOS, y)
    tgt_in = np.concatenate([np.full((batch, 1), BOS), np.where(y == PAD, PAD, y)[:, :-1]], 1)
    return src, lengths, tgt_in, tgt_out


@pytest.mark.eq(9)
def test_attention_gives_padded_source_positions_no_weight():
    for kind in ("bahdanau", "luong-concat"):
        model = tiny_model(kind).to(mt.float64)
        src, lengths, tgt_in, _ = tiny_batch(seed=3)
        _, alpha = model(src, tgt_in, lengths, need_weights=True)
        assert np.all(alpha.numpy()[np.broadcast_to((src == PAD)[:, None], alpha.shape)] == 0)


def markov_step(tables):
    """A step function whose next-token log-probabilities depend on (sentence, position, previous
    token) through ``tables`` (batch, max_len, V, V) of logits."""
    def step_fn(tokens, state):
        logits = tables[state["row"], state["position"], tokens]
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        return mt.tensor(log_probs), {**state, "position": state["position"] + 1}
    return step_fn, {"row": np.arange(len(tables)), "position": np.zeros(len(tables), np.int64)}


def markov_reference(table):
    def log_prob_of_next(prefix):
        logits = table[len(prefix), prefix[-1] if prefix else BOS]
        return logits - np.log(np.exp(logits).sum())
    return log_prob_of_next


@st.composite
def markov_tables(draw, batch=2, max_len=3, vocab=5):
    tables = draw(S.arrays((batch, max_len, vocab, vocab)))
    tables[..., [PAD, BOS]] = -1e3  # never emitted
    return tables


def trim(ids):
    ids = list(ids)
    return tuple(ids[:ids.index(EOS) + 1]) if EOS in ids else tuple(ids)


@pytest.mark.eq(1)
@settings(max_examples=20)
@given(tables=markov_tables(), alpha=st.sampled_from([0.0, 0.6, 1.0]))
def test_eq01_wide_beam_finds_the_exhaustive_argmax_and_beam_1_is_greedy(tables, alpha):
    step_fn, state = markov_step(tables)
    greedy = decoding.greedy_search(step_fn, state, 2, BOS, EOS, max_len=3, pad_id=PAD)
    beam_1, _ = decoding.beam_search(step_fn, state, 2, BOS, EOS, max_len=3, beam_size=1,
                                     length_penalty=alpha, pad_id=PAD)
    np.testing.assert_array_equal(beam_1, greedy)
    wide, scores = decoding.beam_search(step_fn, state, 2, BOS, EOS, max_len=3, beam_size=27,
                                        length_penalty=alpha, pad_id=PAD)
    for b in range(2):
        reference = markov_reference(tables[b])
        assert trim(greedy[b]) == R.greedy_sequence(reference, EOS, 3)
        best, best_score = R.eq01_argmax_sequence(reference, 5, EOS, 3, alpha, (PAD, BOS))
        assert trim(wide[b]) == best
        np.testing.assert_allclose(scores[b], best_score, rtol=1e-12)
        assert all(token == PAD for token in wide[b][len(best):])


@pytest.mark.eq(1)
def test_beam_search_finds_what_greedy_misses():
    """P(a) = 0.6, P(b) = 0.4 first; then P(<eos> | a) = 0.4 but P(<eos> | b) = 0.9. Greedy takes
    a (0.6 * 0.4 = 0.24); the best sentence is b <eos> (0.4 * 0.9 = 0.36)."""
    a, b = 3, 4
    table = np.full((1, 3, 5, 5), 1e-9)
    table[0, 0, BOS, [a, b]] = [0.6, 0.4]
    table[0, 1, a, [EOS, a, b]] = [0.4, 0.3, 0.3]
    table[0, 1, b, [EOS, a, b]] = [0.9, 0.05, 0.05]
    table[0, 2, :, EOS] = 1.0
    step_fn, state = markov_step(np.log(table))
    greedy = decoding.greedy_search(step_fn, state, 1, BOS, EOS, max_len=3, pad_id=PAD)
    beam, score = decoding.beam_search(step_fn, state, 1, BOS, EOS, max_len=3, beam_size=2,
                                       length_penalty=0.0, pad_id=PAD)
    assert greedy.tolist() == [[a, EOS]]
    assert beam.tolist() == [[b, EOS]]
    np.testing.assert_allclose(score, [np.log(0.36)], rtol=1e-6)


@pytest.mark.eq(1)
@pytest.mark.parametrize("kind", ["plain", "bahdanau", "luong-local"])
def test_model_beam_1_equals_greedy_and_beams_reorder_the_state(kind):
    mt.manual_seed(3)
    model = tiny_model(kind).to(mt.float64).eval()
    src, lengths, _, _ = tiny_batch(seed=4)
    greedy = model.translate(src, lengths, bos_id=BOS, eos_id=EOS, max_len=6)
    step_fn, state = model.start(src, lengths)
    beam_1, _ = decoding.beam_search(step_fn, state, len(src), BOS, EOS, 6, beam_size=1)
    np.testing.assert_array_equal(beam_1, greedy)
    # the wide beam's winner scores at least as well as the greedy sentence
    wide, scores = decoding.beam_search(step_fn, state, len(src), BOS, EOS, 6, beam_size=4,
                                        length_penalty=0.0)
    tgt_in = np.concatenate([np.full((len(src), 1), BOS), greedy[:, :-1]], axis=1)
    greedy_scores = model.log_prob(src, np.where(tgt_in == EOS, PAD, tgt_in), greedy,
                                   lengths).numpy()
    assert np.all(scores >= greedy_scores - 1e-9)


def test_state_helpers_reorder_every_leaf():
    state = {"h": mt.tensor([[1.0], [2.0]]), "pair": (np.array([3, 4]), None), "n": 5}
    expanded = decoding.expand_state(state, 2)
    assert expanded["h"].numpy().ravel().tolist() == [1, 1, 2, 2]
    assert expanded["pair"][0].tolist() == [3, 3, 4, 4] and expanded["pair"][1] is None
    assert decoding.reorder_state(expanded, [3, 0])["h"].numpy().ravel().tolist() == [2, 1]
    assert expanded["n"] == 5


# ---- the shared checks; every model learns -------------------------------------------------------
TARGET = np.array([[BOS, 3, 4, 5]])


def seq2seq_spec(kind, cell, steps=30):
    """A ``tiny_model`` under the shared checks: ``forward`` reads ``ids`` as the right-padded
    source (its lengths from the mask) under a fixed target; ``causal`` varies the target under
    a fixed source, and ``incremental`` feeds it one token at a time through ``model.start``'s
    step function (teacher forcing = step-by-step decoding, eq 2); ``steps`` Adam steps on 6
    pairs bring the loss down 10-fold, and greedy decoding then gives the targets back."""

    def build(dropout=0.0):
        return tiny_model(kind, cell, dropout)

    def forward(model, ids, mask):
        return model(ids, TARGET.repeat(len(ids), 0), mask.sum(axis=1))

    def incremental(model, ids):
        return feed_one_at_a_time(*model.start(TARGET.repeat(len(ids), 0)), ids)

    def translates_the_batch(model, batch):
        src, lengths, _, tgt_out = batch
        out = model.translate(src, lengths, bos_id=BOS, eos_id=EOS, max_len=tgt_out.shape[1])
        assert [trim(row) for row in out] == [trim(row) for row in tgt_out]

    return ModelSpec(
        name=f"Seq2Seq({kind}, {cell})", build=build, forward=forward, vocab=(3, VOCAB),
        outputs_follow_ids=False,
        causal=lambda model, ids: model(TARGET.repeat(len(ids), 0), ids),
        incremental=incremental,
        learning=Learning(partial(tiny_batch, seed=5),
                          lambda model, batch: model.loss(batch[0], batch[2], batch[3], batch[1]),
                          steps=steps, factor=10, lr=0.03, after=translates_the_batch),
        skips={"padding_left": "the recurrent layers read a row's first `length` steps",
               "cached_decoding": "decoding carries the recurrent state from step to step; "
                                  "there is no key/value cache to switch off",
               "hf_round_trip": "no HuggingFace architecture"})


class TestPlainGRUChecks(ModelChecks):
    spec = seq2seq_spec("plain", "gru")


class TestPlainLSTMChecks(ModelChecks):
    spec = seq2seq_spec("plain", "lstm")


class TestBahdanauChecks(ModelChecks):
    spec = seq2seq_spec("bahdanau", "gru")


class TestLuongGeneralChecks(ModelChecks):
    spec = seq2seq_spec("luong-general", "lstm")


class TestLuongDotChecks(ModelChecks):
    spec = seq2seq_spec("luong-dot", "lstm", steps=60)


class TestLuongConcatChecks(ModelChecks):
    spec = seq2seq_spec("luong-concat", "lstm")


class TestLuongLocalChecks(ModelChecks):
    spec = seq2seq_spec("luong-local", "gru")


def test_seq2seq_rejects_mismatched_parts():
    with pytest.raises(ValueError, match="summary_size 16 must equal the decoder's hidden_size 8"):
        Seq2Seq(RNNEncoder(VOCAB, 4, 16), RNNDecoder(VOCAB, 4, 8))
    with pytest.raises(ValueError, match="encoder has 2 layers, the decoder 1"):
        Seq2Seq(RNNEncoder(VOCAB, 4, 8, num_layers=2), RNNDecoder(VOCAB, 4, 8))
    with pytest.raises(ValueError, match="states of size 8, the encoder gives 16"):
        Seq2Seq(RNNEncoder(VOCAB, 4, 8, bidirectional=True), BahdanauDecoder(VOCAB, 4, 8, 8))
    model = tiny_model("bahdanau")
    src, lengths, tgt_in, _ = tiny_batch()
    with pytest.raises(ValueError, match=r"tgt_in of shape \(2, 4\) and an encoded batch of 6"):
        model(src, tgt_in[:2], lengths)
    with pytest.raises(ValueError, match="longer than the sequence"):
        model(src, tgt_in, lengths + 5)
    with pytest.raises(ValueError, match=r"shape \(batch, time\), got int64 \(6,\)"):
        model(src[:, 0], tgt_in, lengths)
    with pytest.raises(ValueError, match="cell must be one of"):
        RNNEncoder(VOCAB, 4, 8, cell="transformer")


def test_equations_1_to_10_are_registered():
    cookbook.import_all()
    for number in range(1, 11):
        assert cookbook.implementations(number), f"eq {number} has no registered code"


@pytest.mark.eq(2)
def test_eq02_the_default_padding_id_is_0():
    logits = mt.tensor(np.random.default_rng(0).normal(size=(2, 3, 4)), dtype=mt.float64)
    targets = np.array([[1, 0, 2], [0, 3, 3]])
    log_p = logits.numpy() - np.log(np.exp(logits.numpy()).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_p, targets[..., None], -1)[..., 0]
    np.testing.assert_allclose(decoding.sequence_log_prob(logits, targets).numpy(),
                               np.where(targets == 0, 0.0, picked).sum(-1), rtol=1e-12)
