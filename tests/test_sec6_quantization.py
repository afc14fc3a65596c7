"""Section VI-C.3: Q8BERT (Zafrir et al., 2019; eq 61) of ``minitorch_nlp.compress.quantization``.

Fake quantisation is checked against the element-by-element reference by ``check_equation(61)``
in ``tests/test_check.py``; here the integers against the same reference, and what holds
by construction: the quantise-dequantise error is at most 1/(2S) inside the range and the value
is clamped outside, the straight-through gradient is exactly the incoming one; the int8 GEMM path
equals the float product of the dequantised operands up to the rescale's rounding, on every
backend; a BERT fine-tuned with fake quantisation and converted to int8 gives the fake-quantised
model's outputs; the saved int8 model is about 4x smaller and loads back exactly; clear errors."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
from minitorch_nlp.compress import quantization as Q
from minitorch_nlp.models.bert import BertConfig, BertForMaskedLM
from minitorch_nlp.nn import FeedForward, Linear
from minitorch_nlp.testing import strategies as S
from minitorch_nlp.testing.reference import quantization as R

pytestmark = pytest.mark.sec6

BACKENDS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(
    "numba" not in mt.available_backends(), reason="numba is not installed"))]


@pytest.mark.eq(61)
@given(S.arrays((3, 4), -50, 50), st.floats(0.1, 10), st.integers(2, 16))
def test_eq61_symmetric_quantize_is_clamped_rounding(x, scale, bits):
    got = Q.symmetric_quantize(mt.tensor(x, dtype=mt.float64), scale, bits=bits).numpy()
    np.testing.assert_array_equal(got, R.eq61_symmetric_quantize(x, scale, bits))
    m = 2 ** (bits - 1) - 1
    assert np.all(got == np.round(got)) and np.all(np.abs(got) <= m)


@pytest.mark.eq(61)
@given(S.arrays((5,), -20, 20), st.floats(0.1, 10), st.integers(2, 8))
def test_quantise_dequantise_error_is_half_a_step_inside_and_clamped_outside(x, scale, bits):
    m = 2 ** (bits - 1) - 1
    out = Q.fake_quantize(mt.tensor(x, dtype=mt.float64), scale, bits=bits).numpy()
    inside = np.abs(x) <= m / scale
    assert np.all(np.abs(out - x)[inside] <= 0.5 / scale + 1e-12)
    np.testing.assert_allclose(out[~inside], np.sign(x[~inside]) * m / scale, rtol=1e-12)


@pytest.mark.eq(61)
@given(S.arrays((4, 3)), st.floats(0.1, 10), st.integers(2, 8), S.seeds())
def test_the_straight_through_gradient_is_exactly_the_incoming_one(x, scale, bits, seed):
    incoming = np.random.default_rng(seed).standard_normal(x.shape)
    tx = mt.tensor(x, dtype=mt.float64, requires_grad=True)
    Q.fake_quantize(tx, scale, bits=bits).backward(mt.tensor(incoming, dtype=mt.float64))
    np.testing.assert_array_equal(tx.grad.numpy(), incoming)


def test_weight_scales_per_matrix_and_per_group():
    weight = np.array([[1.0, -2.0], [0.5, 0.25], [0.0, 0.0], [4.0, 1.0]])
    np.testing.assert_allclose(Q.weight_scales(weight), np.full(4, 127 / 4.0))
    np.testing.assert_allclose(Q.weight_scales(weight, groups=2),
                               [127 / 2, 127 / 2, 127 / 4, 127 / 4])
    np.testing.assert_allclose(Q.weight_scales(weight, bits=4, groups=4),
                               [7 / 2, 7 / 0.5, 7.0, 7 / 4])
    with pytest.raises(ValueError, match="groups must be a positive divisor of the 4"):
        Q.weight_scales(weight, groups=3)


@pytest.mark.parametrize("bits", [0, 1, 17, 2.5, True])
def test_bit_widths_outside_2_to_16_are_refused(bits):
    with pytest.raises(ValueError, match=r"bits must be an integer in \[2, 16\]"):
        Q.symmetric_quantize(mt.tensor([1.0]), 1.0, bits=bits)


def test_scale_errors():
    with pytest.raises(ValueError, match="scale S must be finite and > 0"):
        Q.fake_quantize(mt.tensor([1.0]), 0.0)
    with pytest.raises(ValueError, match="scale S must be finite and > 0"):
        Q.symmetric_quantize(mt.tensor([1.0]), np.array([1.0, -1.0]))


# ---- the layers ----------------------------------------------------------------------------------
def trained_quantized_linear(seed=0, groups=1, backend="numpy", batches=3):
    mt.manual_seed(seed)
    layer = Q.QuantizedLinear.from_linear(Linear(16, 6), groups=groups).to(backend)
    rng = np.random.default_rng(seed)
    for _ in range(batches):
        layer(mt.tensor(rng.standard_normal((5, 16)), dtype=mt.float32, backend=backend))
    return layer.eval()


def test_the_input_range_is_an_exponential_moving_average_of_max_abs():
    layer = Q.QuantizedLinear(3, 2, decay=0.9)
    peaks = [2.0, 4.0, 1.0]
    for peak in peaks:
        layer(mt.tensor([[peak, -peak / 2, 0.0]]))
    expected = 0.9 * (0.9 * 2.0 + 0.1 * 4.0) + 0.1 * 1.0
    assert layer.input_range.item() == pytest.approx(expected, rel=1e-6)
    layer.eval()
    layer(mt.tensor([[100.0, 0.0, 0.0]]))
    assert layer.input_range.item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.eq(61)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("groups", [1, 3])
def test_int8_gemm_equals_the_float_product_of_the_dequantised_operands(backend, groups):
    layer = trained_quantized_linear(groups=groups, backend=backend)
    x = np.random.default_rng(9).standard_normal((2, 4, 16)) * 1.5
    int8 = Q.Int8Linear.from_quantized(layer)
    with mt.no_grad():
        got = int8(mt.tensor(x, dtype=mt.float32, backend=backend)).numpy()
        fake = layer(mt.tensor(x, dtype=mt.float32, backend=backend)).numpy()
    s_x = layer.input_scale()
    s_w = Q.weight_scales(layer.weight, 8, groups)
    x_int = np.clip(np.rint(x.astype(np.float32) * np.float32(s_x)), -127, 127)
    w_int = int8.qweight.numpy().astype(np.float64).T
    expected = (x_int / s_x) @ (w_int / s_w[:, None]).T + layer.bias.numpy()
    assert int8.qweight.numpy().dtype == np.int8 and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, fake, rtol=1e-4, atol=1e-4)


def test_a_fine_tuned_bert_converts_to_int8_with_the_same_outputs():
    mt.manual_seed(0)
    config = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=8, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    model = BertForMaskedLM(config)
    ids = np.random.default_rng(1).integers(1, 30, (4, 8))
    with mt.no_grad():
        float_logits = model(ids).logits.numpy()
    Q.prepare_qat(model)
    assert sum(isinstance(m, Q.QuantizedLinear) for m in model.modules()) == 2 * 6 + 1
    optimizer = mt.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(25):
        loss = model(ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]
    model.eval()
    with mt.no_grad():
        fake = model(ids).logits.numpy()
        Q.convert_to_int8(model)
        assert not any(isinstance(m, Linear) for m in model.modules())
        int8 = model(ids).logits.numpy()
    np.testing.assert_allclose(int8, fake, rtol=1e-3, atol=1e-3)
    assert np.abs(fake - float_logits).max() > 1e-3       # it did train


def test_the_saved_int8_model_is_four_times_smaller_and_loads_back(tmp_path):
    mt.manual_seed(0)
    block = FeedForward(128, 512, activation="gelu")
    mt.save(block.state_dict(), tmp_path / "float.npz")
    Q.prepare_qat(block)
    block(mt.tensor(np.random.default_rng(0).standard_normal((3, 5, 128)), dtype=mt.float32))
    Q.convert_to_int8(block.eval())
    mt.save(block.state_dict(), tmp_path / "int8.npz")
    ratio = (tmp_path / "float.npz").stat().st_size / (tmp_path / "int8.npz").stat().st_size
    assert 3.5 < ratio <= 4.0
    x = mt.tensor(np.random.default_rng(1).standard_normal((2, 3, 128)), dtype=mt.float32)
    loaded = Q.int8_skeleton(FeedForward(128, 512, activation="gelu"))
    loaded.load_state_dict(mt.load(tmp_path / "int8.npz"))
    with mt.no_grad():
        np.testing.assert_array_equal(loaded(x).numpy(), block(x).numpy())
    assert loaded.linear1.qweight.dtype == np.int8


def test_layer_errors():
    with pytest.raises(ValueError, match="no input range observed yet"):
        Q.QuantizedLinear(3, 2).eval()(mt.tensor([[1.0, 2.0, 3.0]]))
    with pytest.raises(ValueError, match="only 8-bit layers"):
        Q.Int8Linear.from_quantized(Q.QuantizedLinear(3, 2, bits=4))
    int8 = Q.Int8Linear.from_quantized(trained_quantized_linear())
    with pytest.raises(RuntimeError, match="run the model under mt.no_grad"):
        int8(mt.tensor(np.ones((1, 16)), requires_grad=True))
    with pytest.raises(ValueError, match="must end with in_features=16"):
        int8(mt.tensor(np.ones((1, 15))))
    with pytest.raises(ValueError, match="decay must be in"):
        Q.QuantizedLinear(3, 2, decay=1.0)


def test_calibration_sets_the_ranges_without_training():
    mt.manual_seed(0)
    block = Q.prepare_qat(FeedForward(8, 16, activation="gelu"))
    x = mt.tensor(np.random.default_rng(0).standard_normal((2, 3, 8)), dtype=mt.float32)
    Q.calibrate(block, [x])
    assert not block.training
    assert block.linear1.input_range.item() == pytest.approx(np.abs(x.numpy()).max())
    assert block.linear2.input_range.item() > 0
    with mt.no_grad():
        fake = block(x).numpy()
        Q.convert_to_int8(block)
        np.testing.assert_allclose(block(x).numpy(), fake, rtol=1e-4, atol=1e-5)
