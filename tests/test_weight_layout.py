"""Column-major weights (``nn.column_major_``): ``Linear`` stores its weight as the transpose of a
contiguous (in, out) array and GPT stores its tied ``wte`` so. Everything that writes parameters
must keep working for both layouts: each test runs the same work on a model whose weights are
column-major (the library's choice) and on a copy whose weights were made row-major, and compares
the two. Where only the BLAS product order differs (``x @ W^T`` is an NN product on one layout and
an NT product on the other) the comparison is to float64 rounding; element-wise work (optimizer
updates, clipping, quantisation) must agree bit for bit.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp import nn, optim
from minitorch_nlp.backends import get_backend
from minitorch_nlp.backends.numpy_backend import NumpyBackend
from minitorch_nlp.compress import hard_concrete, pruning
from minitorch_nlp.compress.hessian import quantize_weights_
from minitorch_nlp.distributed import ColumnParallelLinear, RowParallelLinear, SingleProcess
from minitorch_nlp.io import checkpoint
from minitorch_nlp.models.bert import BertConfig, BertModel
from minitorch_nlp.models.gpt import GPT2LMHeadModel, GPTConfig

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
BLAS_ORDER = dict(rtol=1e-12, atol=1e-12)   # the same maths, products summed in another order


def is_column_major(array):
    return array.flags.f_contiguous and not array.flags.c_contiguous


def mlp(seed=0):
    mt.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 6, dtype=mt.float64), nn.Tanh(),   # widens: column-major
                         nn.Linear(6, 3, dtype=mt.float64))              # narrows: row-major


def row_major_copy(model):
    """``model``'s twin (same values) whose every parameter is row-major."""
    twin = mlp()
    twin.load_state_dict(model.state_dict())
    for param in twin.parameters():
        param.data = np.ascontiguousarray(param.data)
    return twin


def batch(seed=1):
    rng = np.random.default_rng(seed)
    return mt.tensor(rng.normal(size=(7, 4))), mt.tensor(rng.normal(size=(7, 3)))


def train(model, steps=3, clip=None, make_optimizer=None):
    opt = (make_optimizer or (lambda p: optim.AdamW(p, lr=0.05, weight_decay=0.1)))(
        list(model.parameters()))
    x, y = batch()
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        if clip is not None:
            optim.clip_grad_norm_(model.parameters(), clip)
        opt.step()
    return opt


def assert_same_values(a, b, **tolerance):
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        if tolerance:
            np.testing.assert_allclose(p.numpy(), q.numpy(), err_msg=name, **tolerance)
        else:
            np.testing.assert_array_equal(p.numpy(), q.numpy(), err_msg=name)


@pytest.mark.parametrize("n_in, n_out, column_major", [(3, 4, True), (4, 4, True), (4, 3, False)])
def test_linear_stores_a_widening_weight_column_major_with_pytorchs_shape_and_values(
        n_in, n_out, column_major):
    mt.manual_seed(3)
    layer = nn.Linear(n_in, n_out, dtype=mt.float64)
    mt.manual_seed(3)
    row_major = nn.init.kaiming_uniform_(nn.Parameter(mt.zeros(n_out, n_in, dtype=mt.float64)),
                                         a=np.sqrt(5))
    assert layer.weight.shape == (n_out, n_in)
    assert is_column_major(layer.weight.data) == column_major
    np.testing.assert_array_equal(layer.weight.numpy(), row_major.numpy())


def test_column_major_keeps_values_shape_and_moves_the_version():
    param = nn.Parameter(mt.tensor(np.arange(6.0).reshape(2, 3)))
    version = param._version[0]
    assert nn.column_major_(param) is param
    assert is_column_major(param.data)
    np.testing.assert_array_equal(param.numpy(), np.arange(6.0).reshape(2, 3))
    assert param._version[0] > version


def follows_the_layout_rule(layer):
    """A ``Linear``'s weight is column-major exactly when its product widens."""
    out_features, in_features = layer.weight.shape
    flags = layer.weight.data.flags
    return flags.f_contiguous if out_features >= in_features else flags.c_contiguous


@pytest.mark.parametrize("n_in, n_out", [(3, 4), (4, 4), (4, 3)])
def test_a_replaced_linear_weight_takes_the_layout_rule_again(n_in, n_out):
    layer = nn.Linear(n_in, n_out, dtype=mt.float64)
    for order in ("C", "F"):
        values = np.arange(n_in * n_out, dtype=np.float64).reshape(n_out, n_in)
        layer.weight = nn.Parameter(mt.tensor(np.asarray(values, order=order)))
        assert layer.choose_weight_layout_() is layer
        assert follows_the_layout_rule(layer)
        np.testing.assert_array_equal(layer.weight.numpy(), values)


def test_pruned_factorised_and_sharded_linears_follow_the_layout_rule():
    """Pruning heads slices q, k, v (now narrowing) and the output projection (now widening);
    FLOP's export and the tensor-parallel shards build Linears of new shapes."""
    mt.manual_seed(0)
    bert = BertModel(BertConfig(vocab_size=23, hidden_size=12, num_hidden_layers=2,
                                num_attention_heads=3, intermediate_size=16,
                                max_position_embeddings=16))
    pruning.prune_heads(bert, {0: [1], 1: [0, 2]})
    attention = bert.encoder.layers[1].self_attn
    assert attention.q_proj.weight.shape == (4, 12) and attention.out_proj.weight.shape == (12, 4)
    linears = [m for m in bert.modules() if isinstance(m, nn.Linear)]
    exported = hard_concrete.FactorizedLinear.from_linear(nn.Linear(6, 5)).export()
    dense = nn.Linear(4, 6)
    shards = [ColumnParallelLinear.from_dense(dense, SingleProcess()),
              RowParallelLinear.from_dense(dense, SingleProcess())]
    for layer in linears + list(exported) + shards:
        assert follows_the_layout_rule(layer), (layer, layer.weight.data.flags)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_training_with_adamw_matches_row_major_weights(backend):
    with mt.backend(backend):
        model = mlp()
        nn.column_major_(model[0].weight)   # the numba backend's rule keeps it row-major
        twin = row_major_copy(model)
        opt = train(model, clip=0.5)
        train(twin, clip=0.5)
    assert_same_values(model, twin, **BLAS_ORDER)
    weight = model[0].weight
    assert is_column_major(weight.data)
    assert is_column_major(weight.grad.data)   # made in its layout, no transposing copy
    assert is_column_major(opt.state[weight]["exp_avg"])
    assert is_column_major(opt.state[weight]["exp_avg_sq"])
    assert model[2].weight.data.flags.c_contiguous and model[2].weight.grad.data.flags.c_contiguous


def test_sgd_with_momentum_matches_row_major_weights():
    model = mlp()
    twin = row_major_copy(model)
    def sgd(params):
        return optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)

    train(model, make_optimizer=sgd)
    train(twin, make_optimizer=sgd)
    assert_same_values(model, twin, **BLAS_ORDER)
    assert is_column_major(model[0].weight.data)


@pytest.mark.parametrize("amsgrad", [False, True])
def test_numba_adam_kernel_updates_column_major_arrays_in_place(amsgrad, monkeypatch):
    """The fused kernel walks every array in memory order: column-major state gives the same
    bits as row-major state, and a mix of layouts (no common order) takes the NumPy path."""
    numba_backend = get_backend("numba")
    numpy_update = NumpyBackend.adam_update
    fallbacks = []

    def counted(self, *args, **kwargs):
        fallbacks.append(args[0].flags.f_contiguous)
        return numpy_update(self, *args, **kwargs)

    monkeypatch.setattr(NumpyBackend, "adam_update", counted)
    rng = np.random.default_rng(0)
    values = [rng.normal(size=(5, 4)) for _ in range(4)] + [np.abs(rng.normal(size=(5, 4)))]
    values[3] = np.abs(values[3])

    def update(order_of):
        arrays = [np.array(v, order=order_of(i)) for i, v in enumerate(values)]
        theta, grad, m, v, vmax = arrays
        numba_backend.adam_update(theta, grad, m, v, vmax if amsgrad else None,
                                  [np.empty_like(theta), np.empty_like(theta)], step=3, lr=0.01,
                                  beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.1,
                                  decoupled=True)
        return arrays

    rows = update(lambda i: "C")
    columns = update(lambda i: "F")
    assert fallbacks == []                       # both ran in the numba kernel
    mixed = update(lambda i: "F" if i % 2 else "C")
    assert fallbacks == [False]                  # theta row-major, the gradient column-major
    for r, c in zip(rows, columns):
        np.testing.assert_array_equal(r, c)
    for r, x in zip(rows, mixed):
        np.testing.assert_allclose(r, x, rtol=1e-14, atol=1e-15)
    assert not np.array_equal(rows[0], values[0])  # the update happened, in place


def test_optimizer_state_dict_round_trip_keeps_the_layout_and_the_trajectory():
    model, twin = mlp(), mlp()
    opt = train(model, steps=2)
    train(twin, steps=2)
    resumed_opt = optim.AdamW(list(twin.parameters()), lr=0.05, weight_decay=0.1)
    resumed_opt.load_state_dict(opt.state_dict())
    state = resumed_opt.state[twin[0].weight]
    assert is_column_major(state["exp_avg"]) and is_column_major(state["exp_avg_sq"])
    x, y = batch()
    for m, o in ((model, opt), (twin, resumed_opt)):
        o.zero_grad()
        ((m(x) - y) ** 2).mean().backward()
        o.step()
    assert_same_values(model, twin)


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_checkpoint_round_trip_into_either_layout(tmp_path, suffix):
    model = mlp()
    train(model)
    path = str(tmp_path / f"model{suffix}")
    checkpoint.save(model.state_dict(), path)
    restored = mlp(seed=5)
    restored.load_state_dict(checkpoint.load(path))
    assert is_column_major(restored[0].weight.data)   # loading copies into the layout
    assert_same_values(model, restored)
    row_major = row_major_copy(mlp(seed=5))
    row_major.load_state_dict(checkpoint.load(path))
    assert_same_values(model, row_major)


def test_second_derivatives_through_a_column_major_linear():
    model = mlp()
    twin = row_major_copy(model)
    x, _ = batch()
    results = []
    for m in (model, twin):
        weight = m[0].weight
        (g,) = mt.grad((m(x) ** 2).sum(), [weight], create_graph=True)
        (gg,) = mt.grad((g ** 2).sum(), [weight])
        results.append((g.numpy(), gg.numpy()))
    np.testing.assert_allclose(results[0][0], results[1][0], **BLAS_ORDER)
    np.testing.assert_allclose(results[0][1], results[1][1], **BLAS_ORDER)


def test_quantising_weights_in_place_matches_row_major_weights():
    model = mlp()
    twin = row_major_copy(model)
    quantize_weights_(model, bits=4, groups=1)
    quantize_weights_(twin, bits=4, groups=1)
    assert_same_values(model, twin)
    assert is_column_major(model[0].weight.data)


def tiny_gpt():
    config = GPTConfig(vocab_size=23, n_positions=16, n_embd=8, n_layer=2, n_head=2,
                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    mt.manual_seed(0)
    return GPT2LMHeadModel(config)


def test_gpt_ties_a_column_major_table_and_learns_as_a_row_major_one():
    model = tiny_gpt()
    twin = tiny_gpt()
    for param in twin.parameters():
        param.data = np.ascontiguousarray(param.data)
    assert is_column_major(model.transformer.wte.weight.data)
    ids = np.random.default_rng(0).integers(0, 23, size=(2, 9))
    for m in (model, twin):
        # SGD: the key bias's gradient is zero up to rounding (softmax ignores a shift shared by
        # all keys), and Adam would blow that rounding noise up to a full step
        opt = optim.SGD(list(m.parameters()), lr=0.5, momentum=0.9)
        for _ in range(3):
            opt.zero_grad()
            m(mt.tensor(ids), labels=mt.tensor(ids)).loss.backward()
            opt.step()
    assert is_column_major(model.transformer.wte.weight.grad.data)
    assert_same_values(model, twin, rtol=1e-5, atol=1e-6)   # float32, products in another order


def test_from_pretrained_loads_gpt2_into_the_column_major_layout():
    pytest.importorskip("safetensors.numpy")
    model = mt.from_pretrained(FIXTURES / "GPT2LMHeadModel")
    assert is_column_major(model.transformer.wte.weight.data)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert linears and all(is_column_major(m.weight.data) == (m.out_features >= m.in_features)
                           for m in linears)


def test_gradients_of_a_weight_used_twice_are_summed_in_its_layout():
    weight = nn.column_major_(nn.Parameter(mt.tensor(np.arange(12.0).reshape(3, 4))))
    x = mt.tensor(np.ones((2, 4)))
    (mt.functional.linear(x, weight).sum() + (weight * weight).sum()).backward()
    assert is_column_major(weight.grad.data)
    np.testing.assert_array_equal(weight.grad.numpy(), 2 + 2 * np.arange(12.0).reshape(3, 4))
