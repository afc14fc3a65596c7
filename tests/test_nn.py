"""``minitorch_nlp.nn``: Module bookkeeping (registration, traversal order, modes, state dicts and
their error messages, repr, moving), the layers, the containers and ``nn.init``."""
from __future__ import annotations

import copy
import math
import re
from collections import OrderedDict

import numpy as np
import pytest
import minitorch_nlp as mt
import minitorch_nlp.functional as F
from minitorch_nlp import nn
from minitorch_nlp.nn import init


class Block(nn.Module):
    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.register_buffer("scale", mt.ones(dim))
        self.register_buffer("cache", mt.zeros(2), persistent=False)

    def forward(self, x):
        return self.norm(F.relu(self.fc(x))) * self.scale


class Net(nn.Module):
    """Embedding -> two blocks -> output layer tied to the embedding."""

    def __init__(self, vocab=7, dim=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList([Block(dim), Block(dim)])
        self.drop = nn.Dropout(0.25)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied weights

    def forward(self, ids):
        h = self.embed(ids)
        for block in self.blocks:
            h = self.drop(block(h))
        return self.head(h)


NET_PARAMETERS = ["embed.weight", "blocks.0.fc.weight", "blocks.0.fc.bias", "blocks.0.norm.weight",
                  "blocks.0.norm.bias", "blocks.1.fc.weight", "blocks.1.fc.bias",
                  "blocks.1.norm.weight", "blocks.1.norm.bias"]


# ---- Parameter -----------------------------------------------------------------------------------
def test_parameter_is_a_leaf_that_requires_grad():
    t = mt.randn(2, 3)
    p = nn.Parameter(t)
    assert isinstance(p, mt.Tensor) and p.is_leaf and p.requires_grad
    assert p.data is t.data  # shares memory, as in PyTorch
    assert p.dtype == mt.float32
    assert nn.Parameter(np.zeros(3)).dtype == mt.float64
    assert nn.Parameter([1, 2]).dtype == mt.float32
    frozen = nn.Parameter(mt.zeros(2), requires_grad=False)
    assert not frozen.requires_grad
    with pytest.raises(TypeError, match="only floating-point tensors can require a gradient"):
        nn.Parameter(mt.tensor([1, 2]))
    assert repr(nn.Parameter(mt.tensor([1.0, 2.0]))) == "Parameter([1., 2.])"
    assert repr(nn.Parameter(np.zeros(2), requires_grad=False)) == \
        "Parameter([0., 0.], dtype=float64, requires_grad=False)"


# ---- registration and traversal ------------------------------------------------------------------
def test_named_parameters_order_and_tied_weights_given_once():
    net = Net()
    assert [name for name, _ in net.named_parameters()] == NET_PARAMETERS
    assert len(list(net.parameters())) == len(NET_PARAMETERS)
    assert net.head.weight is net.embed.weight
    with_duplicates = [name for name, _ in net.named_parameters(remove_duplicate=False)]
    assert with_duplicates == NET_PARAMETERS + ["head.weight"]
    assert [n for n, _ in net.blocks[0].named_parameters(prefix="b")] == \
        ["b.fc.weight", "b.fc.bias", "b.norm.weight", "b.norm.bias"]
    assert [n for n, _ in net.blocks[0].named_parameters(recurse=False)] == []
    assert [n for n, _ in net.blocks[0].fc.named_parameters(recurse=False)] == ["weight", "bias"]


def test_modules_children_and_buffers():
    net = Net()
    assert [name for name, _ in net.named_modules()] == [
        "", "embed", "blocks", "blocks.0", "blocks.0.fc", "blocks.0.norm", "blocks.1",
        "blocks.1.fc", "blocks.1.norm", "drop", "head"]
    assert [name for name, _ in net.named_children()] == ["embed", "blocks", "drop", "head"]
    assert list(net.children())[1] is net.blocks
    assert len(list(net.modules())) == 11
    assert [name for name, _ in net.named_buffers()] == [
        "blocks.0.scale", "blocks.0.cache", "blocks.1.scale", "blocks.1.cache"]
    assert len(list(net.buffers())) == 4
    assert net.get_submodule("blocks.1.fc") is net.blocks[1].fc
    assert net.get_submodule("") is net
    with pytest.raises(AttributeError, match=r"blocks.1 has no sub-module 'attn' \(looking for "
                                             r"'blocks.1.attn'\)"):
        net.get_submodule("blocks.1.attn")


def test_reassigning_and_deleting_attributes_keeps_registries_in_step():
    block = Block()
    block.fc = nn.Identity()
    assert [n for n, _ in block.named_parameters()] == ["norm.weight", "norm.bias"]
    block.fc = None
    assert block.fc is None and "fc" in block._modules
    block.extra = nn.Parameter(mt.zeros(3))
    assert "extra" in dict(block.named_parameters())
    del block.extra
    assert "extra" not in dict(block.named_parameters())
    assert not hasattr(block, "extra")
    block.scale = mt.full((4,), 2.0)  # assigning a tensor to a buffer's name replaces the buffer
    assert block.state_dict()["scale"].numpy().tolist() == [2.0] * 4
    block.note = mt.zeros(1)  # a plain tensor attribute is not state
    assert "note" not in block.state_dict()


def test_registration_errors_are_clear():
    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(mt.zeros(1))

    with pytest.raises(AttributeError, match=r"cannot assign parameter 'w' before Early.__init__"
                                             r"\(\) has called super\(\).__init__\(\)"):
        Early()
    lin = nn.Linear(2, 3)
    with pytest.raises(TypeError, match=r"Linear.weight is a parameter: assign a Parameter or "
                                        r"None, not Tensor"):
        lin.weight = mt.zeros(3, 2)
    with pytest.raises(TypeError, match="register_buffer: 'b' must be a Tensor or None"):
        lin.register_buffer("b", np.zeros(2))
    with pytest.raises(KeyError, match=r"buffer name 'a.b' must be non-empty and contain no"):
        lin.register_buffer("a.b", mt.zeros(1))
    with pytest.raises(KeyError, match=r"cannot register buffer 'in_features': an attribute"):
        lin.register_buffer("in_features", mt.zeros(1))
    with pytest.raises(KeyError, match=r"cannot register module 'forward': an attribute"):
        lin.add_module("forward", nn.Identity())
    with pytest.raises(TypeError, match=r"register_parameter: 'p' must be a Parameter or None"):
        lin.register_parameter("p", mt.zeros(1))
    with pytest.raises(TypeError, match="Block2 does not define forward"):
        type("Block2", (nn.Module,), {})()(1)


def test_train_and_eval_reach_every_submodule():
    net = Net()
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    net.blocks.train()
    assert net.blocks[1].norm.training and not net.training and not net.drop.training
    net.train()
    assert all(m.training for m in net.modules())
    with pytest.raises(TypeError, match="mode must be a bool"):
        net.train("eval")


def test_eval_mode_makes_the_network_deterministic():
    net = Net()
    ids = mt.tensor([[1, 2, 3]])
    assert not np.array_equal(net(ids).numpy(), net(ids).numpy())  # dropout in training
    net.eval()
    np.testing.assert_array_equal(net(ids).numpy(), net(ids).numpy())


# ---- state dicts ---------------------------------------------------------------------------------
def test_state_dict_keys_values_and_round_trip():
    mt.manual_seed(1)
    net = Net()
    state = net.state_dict()
    # PyTorch's order: a module's own parameters, then its persistent buffers, then its children
    assert list(state) == ["embed.weight", "blocks.0.scale", "blocks.0.fc.weight",
                           "blocks.0.fc.bias", "blocks.0.norm.weight", "blocks.0.norm.bias",
                           "blocks.1.scale", "blocks.1.fc.weight", "blocks.1.fc.bias",
                           "blocks.1.norm.weight", "blocks.1.norm.bias", "head.weight"]
    assert all(not t.requires_grad and type(t) is mt.Tensor for t in state.values())
    assert np.shares_memory(state["embed.weight"].numpy(), net.embed.weight.numpy())
    assert net.state_dict(keep_vars=True)["head.weight"] is net.embed.weight

    mt.manual_seed(2)
    fresh = Net().eval()
    ids = mt.tensor([[1, 5, 6], [0, 2, 2]])
    assert not np.allclose(fresh(ids).numpy(), net.eval()(ids).numpy())
    result = fresh.load_state_dict({k: v.numpy() for k, v in state.items()})  # arrays work too
    assert result == nn.IncompatibleKeys([], [])
    np.testing.assert_array_equal(fresh(ids).numpy(), net(ids).numpy())
    assert fresh.head.weight is fresh.embed.weight  # still tied after loading
    assert fresh.embed.weight.requires_grad and fresh.embed.weight.is_leaf


def test_load_state_dict_casts_copies_in_place_and_bumps_the_version():
    lin = nn.Linear(3, 2)
    weight = lin.weight
    before = lin.weight._version[0]
    lin.load_state_dict({"weight": np.ones((2, 3), dtype=np.float64),
                         "bias": mt.tensor([1.0, 2.0], dtype=mt.float64)})
    assert lin.weight is weight and lin.weight.dtype == mt.float32
    np.testing.assert_array_equal(lin.weight.numpy(), np.ones((2, 3)))
    assert lin.weight._version[0] > before
    # a graph that saved the old weight refuses to backpropagate through the new one
    lin2 = nn.Linear(3, 2)
    x = mt.randn(4, 3, requires_grad=True)
    out = lin2(x).sum()
    lin2.load_state_dict(lin.state_dict())
    with pytest.raises(RuntimeError, match="modified in place"):
        out.backward()


def test_load_state_dict_errors_name_every_key():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 4)

    model = Model()
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    message = ("load_state_dict: missing keys ['fc.bias']; unexpected keys ['fc.b']; "
               "shape mismatch for fc.weight: checkpoint (3, 4) vs model (4, 3)")
    with pytest.raises(ValueError, match=re.escape(message) + "$"):
        model.load_state_dict({"fc.weight": np.zeros((3, 4)), "fc.b": np.zeros(4)})
    for key, value in model.state_dict().items():  # nothing was half-loaded
        np.testing.assert_array_equal(value.numpy(), before[key])

    with pytest.raises(ValueError, match=re.escape("load_state_dict: missing keys ['fc.weight', "
                                                   "'fc.bias']") + "$"):
        model.load_state_dict({})
    with pytest.raises(ValueError, match=re.escape("load_state_dict: unexpected keys ['extra']")):
        model.load_state_dict({**model.state_dict(), "extra": np.zeros(1)})
    with pytest.raises(ValueError, match=re.escape(
            "load_state_dict: shape mismatch for fc.bias: checkpoint (5,) vs model (4,)") + "$"):
        model.load_state_dict({**model.state_dict(), "fc.bias": np.zeros(5)})
    # strict=False tolerates missing and unexpected keys, never a shape mismatch
    result = model.load_state_dict({"fc.bias": np.ones(4), "other": np.zeros(2)}, strict=False)
    assert result.missing_keys == ["fc.weight"] and result.unexpected_keys == ["other"]
    np.testing.assert_array_equal(model.fc.bias.numpy(), np.ones(4))
    with pytest.raises(ValueError, match=re.escape(
            "load_state_dict: shape mismatch for fc.weight: checkpoint (4, 4) vs model (4, 3)")):
        model.load_state_dict({"fc.weight": np.zeros((4, 4))}, strict=False)
    with pytest.raises(TypeError, match="expected a mapping of names to tensors, got list"):
        model.load_state_dict([np.zeros(3)])
    with pytest.raises(TypeError, match="the value for 'fc.bias' is a str"):
        model.load_state_dict({**model.state_dict(), "fc.bias": "zeros"})


def test_state_dict_survives_a_checkpoint_file(tmp_path):
    from minitorch_nlp.io import load, save

    net = Net()
    save({"model": net.state_dict()}, tmp_path / "net.npz")
    fresh = Net()
    fresh.load_state_dict(load(tmp_path / "net.npz")["model"])
    for (name, a), b in zip(net.state_dict().items(), fresh.state_dict().values()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)


# ---- repr, counting, grads, apply, to ------------------------------------------------------------
def test_repr_is_a_readable_tree():
    assert repr(Net()) == """Net(
  (embed): Embedding(7, 4)
  (blocks): ModuleList(
    (0): Block(
      (fc): Linear(in_features=4, out_features=4, bias=True)
      (norm): LayerNorm((4,), eps=1e-05, elementwise_affine=True)
    )
    (1): Block(
      (fc): Linear(in_features=4, out_features=4, bias=True)
      (norm): LayerNorm((4,), eps=1e-05, elementwise_affine=True)
    )
  )
  (drop): Dropout(p=0.25)
  (head): Linear(in_features=4, out_features=7, bias=False)
)"""
    assert repr(nn.ReLU()) == "ReLU()"
    assert repr(nn.Embedding(5, 2, padding_idx=0)) == "Embedding(5, 2, padding_idx=0)"
    assert repr(nn.GELU("tanh")) == "GELU(approximate='tanh')"
    assert repr(nn.Softmax(dim=1)) == "Softmax(axis=1)"

    class Multi(nn.Module):
        def extra_repr(self):
            return "a=1\nb=2"

    assert repr(Multi()) == "Multi(\n  a=1\n  b=2\n)"


def test_num_parameters_counts_shared_weights_once_and_trainable_only():
    net = Net()
    expected = 7 * 4 + 2 * (4 * 4 + 4 + 4 + 4)
    assert net.num_parameters() == expected
    net.blocks[0].requires_grad_(False)
    assert net.num_parameters(trainable_only=True) == expected - 28
    assert net.num_parameters() == expected


def test_zero_grad():
    lin = nn.Linear(3, 2)
    lin(mt.randn(4, 3)).sum().backward()
    grad = lin.weight.grad
    lin.zero_grad(set_to_none=False)
    assert lin.weight.grad is grad and (grad.numpy() == 0).all()
    lin(mt.randn(4, 3)).sum().backward()
    assert lin.weight.grad is grad and (grad.numpy() != 0).any()  # accumulated into the same array
    lin.zero_grad()
    assert lin.weight.grad is None and lin.bias.grad is None


def test_apply_visits_children_first():
    net = Net()
    seen = []
    assert net.apply(lambda m: seen.append(type(m).__name__)) is net
    assert seen == ["Embedding", "Linear", "LayerNorm", "Block", "Linear", "LayerNorm", "Block",
                    "ModuleList", "Dropout", "Linear", "Net"]

    def zero_linears(module):
        if isinstance(module, nn.Linear):
            init.zeros_(module.weight)

    net.apply(zero_linears)
    assert (net.blocks[1].fc.weight.numpy() == 0).all()


def test_to_casts_and_moves_in_place():
    net = Net()
    params = list(net.parameters())
    net(mt.tensor([1, 2])).sum().backward()
    assert net.to(mt.float64) is net
    assert all(p is q for p, q in zip(net.parameters(), params))
    assert all(p.dtype == mt.float64 and p.grad.dtype == mt.float64 for p in net.parameters())
    assert all(b.dtype == mt.float64 for b in net.buffers())
    assert net(mt.tensor([1, 2])).dtype == mt.float64
    assert net.to("numpy") is net and all(p.backend.name == "numpy" for p in net.parameters())
    with pytest.raises(TypeError, match="cast to a floating dtype, not int64"):
        net.to(mt.int64)
    with pytest.raises(TypeError, match="unknown dtype 'gpu'"):
        net.to("gpu")


def test_to_moves_parameters_buffers_and_grads_to_another_backend(monkeypatch):
    from minitorch_nlp import backends
    from minitorch_nlp.backends import NumpyBackend

    class Elsewhere(NumpyBackend):
        name = "elsewhere"

    monkeypatch.setitem(backends._FACTORIES, "elsewhere", Elsewhere)
    monkeypatch.setitem(backends._INSTANCES, "elsewhere", Elsewhere())
    net = Net().eval()
    ids = mt.tensor([[1, 2, 3]])
    expected = net(ids).numpy()
    net(ids).sum().backward()
    params = list(net.parameters())
    assert net.to("elsewhere") is net
    assert all(p is q for p, q in zip(net.parameters(), params))
    assert all(t.backend.name == "elsewhere" for t in list(net.parameters()) + list(net.buffers()))
    assert all(p.grad.backend.name == "elsewhere" for p in net.parameters())
    with pytest.raises(TypeError, match="inputs live on different backends"):
        net.blocks[0](mt.randn(1, 4))  # a numpy input meets weights that live elsewhere
    with pytest.raises(TypeError, match="the index lives on numpy, the tensor on elsewhere"):
        net(ids)
    np.testing.assert_array_equal(net(ids.to("elsewhere")).numpy(), expected)
    net.to("numpy")
    assert all(t.backend.name == "numpy" for t in net.parameters())


# ---- layers --------------------------------------------------------------------------------------
def test_linear_uses_pytorchs_layout():
    lin = nn.Linear(3, 5)
    assert lin.weight.shape == (5, 3) and lin.bias.shape == (5,)
    x = np.random.default_rng(0).standard_normal((2, 4, 3)).astype(np.float32)
    np.testing.assert_allclose(lin(mt.tensor(x)).numpy(),
                               x @ lin.weight.numpy().T + lin.bias.numpy(), rtol=1e-5, atol=1e-6)
    assert nn.Linear(3, 5, bias=False).bias is None
    assert [n for n, _ in nn.Linear(3, 5, bias=False).named_parameters()] == ["weight"]
    with pytest.raises(ValueError, match="Linear: in_features must be a positive int, got 0"):
        nn.Linear(0, 3)


def test_linear_loads_pytorch_weights_without_transposes():
    torch = pytest.importorskip("torch")
    theirs = torch.nn.Linear(6, 3).double()
    ours = nn.Linear(6, 3).to(mt.float64)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((5, 6))
    np.testing.assert_allclose(ours(mt.tensor(x, dtype=mt.float64)).numpy(),
                               theirs(torch.tensor(x)).detach().numpy(), rtol=1e-12)


@pytest.mark.parametrize("fan_in", [16, 300])
def test_linear_default_init_matches_pytorchs_distribution(fan_in):
    """Weights and biases ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as PyTorch draws them."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    out = 20_000 // fan_in * 10
    ours, theirs = nn.Linear(fan_in, out), torch.nn.Linear(fan_in, out)
    bound = 1 / math.sqrt(fan_in)
    for a, b in [(ours.weight.numpy(), theirs.weight.detach().numpy()),
                 (ours.bias.numpy(), theirs.bias.detach().numpy())]:
        n = a.size
        for sample in (a, b):
            assert np.abs(sample).max() <= bound
            # mean 0 and variance bound^2 / 3, each within 5 standard errors
            assert abs(sample.mean()) < 5 * bound / math.sqrt(3 * n)
            assert abs(sample.var() - bound ** 2 / 3) < 5 * bound ** 2 * math.sqrt(4 / 45 / n)
        # the two samples come from one distribution: compare their deciles
        np.testing.assert_allclose(np.quantile(a, np.linspace(0.1, 0.9, 9)),
                                   np.quantile(b, np.linspace(0.1, 0.9, 9)),
                                   atol=8 * bound / math.sqrt(n))


def test_embedding_padding_row_is_zero_and_gets_no_gradient():
    emb = nn.Embedding(6, 3, padding_idx=-1)
    assert emb.padding_idx == 5
    np.testing.assert_array_equal(emb.weight.numpy()[5], 0)
    assert (emb.weight.numpy()[:5] != 0).all()
    ids = mt.tensor([[5, 1, 1], [2, 5, 0]])
    out = emb(ids)
    np.testing.assert_array_equal(out.numpy(), emb.weight.numpy()[ids.numpy()])
    (out * mt.randn(2, 3, 3)).sum().backward()
    grad = emb.weight.grad.numpy()
    np.testing.assert_array_equal(grad[5], 0)
    assert (grad[[0, 1, 2]] != 0).all() and (grad[[3, 4]] == 0).all()
    with pytest.raises(ValueError, match=r"embedding: token id 6 is outside the vocabulary "
                                         r"\[0, 6\)"):
        emb(mt.tensor([0, 6]))
    with pytest.raises(ValueError, match=r"Embedding: padding_idx 6 is outside \[-6, 6\)"):
        nn.Embedding(6, 3, padding_idx=6)


def test_embedding_from_pretrained():
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    emb = nn.Embedding.from_pretrained(table)
    assert not emb.weight.requires_grad and not np.shares_memory(emb.weight.numpy(), table)
    np.testing.assert_array_equal(emb(mt.tensor([3, 0])).numpy(), table[[3, 0]])
    assert nn.Embedding.from_pretrained(mt.tensor(table), freeze=False).weight.requires_grad


def test_layer_norm_module_matches_torch_and_checks_its_input():
    torch = pytest.importorskip("torch")
    ours, theirs = nn.LayerNorm((2, 3), eps=1e-3), torch.nn.LayerNorm((2, 3), eps=1e-3)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
        theirs.bias.uniform_(-1, 1)
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((4, 2, 3)).astype(np.float32)
    np.testing.assert_allclose(ours(mt.tensor(x)).numpy(),
                               theirs(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-5)
    plain = nn.LayerNorm(3, elementwise_affine=False)
    assert list(plain.parameters()) == [] and plain.weight is None
    assert [n for n, _ in nn.LayerNorm(3, bias=False).named_parameters()] == ["weight"]
    with pytest.raises(ValueError, match=r"input of shape \(4, 3, 2\) does not end with "
                                         r"normalized_shape \(2, 3\)"):
        ours(mt.zeros(4, 3, 2))
    with pytest.raises(ValueError, match="normalized_shape must be a positive int"):
        nn.LayerNorm(0)


def test_dropout_module_statistics_and_eval_identity():
    drop = nn.Dropout(0.3)
    x = mt.ones(100_000)
    y = drop(x).numpy()
    assert abs((y == 0).mean() - 0.3) < 5 * math.sqrt(0.3 * 0.7 / 100_000)
    drop.eval()
    assert drop(x) is x
    with pytest.raises(ValueError, match=r"Dropout: the drop probability p must be a number in "
                                         r"\[0, 1\], got 2"):
        nn.Dropout(2)
    a = nn.Dropout(0.5, generator=mt.Generator(1))(x).numpy()
    b = nn.Dropout(0.5, generator=mt.Generator(1))(x).numpy()
    np.testing.assert_array_equal(a, b)


def test_activation_modules_call_the_functions():
    x = mt.randn(3, 4)
    for module, fn in [(nn.ReLU(), F.relu), (nn.Tanh(), F.tanh), (nn.Sigmoid(), F.sigmoid),
                       (nn.GELU(), F.gelu), (nn.GELU("tanh"), lambda t: F.gelu(t, "tanh")),
                       (nn.Softmax(0), lambda t: F.softmax(t, 0)), (nn.Identity(), lambda t: t)]:
        np.testing.assert_array_equal(module(x).numpy(), fn(x).numpy())
    with pytest.raises(ValueError, match="GELU: approximate must be 'none' or 'tanh'"):
        nn.GELU("erf")


# ---- containers ----------------------------------------------------------------------------------
def test_sequential():
    a, b, c = nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)
    seq = nn.Sequential(a, b, c)
    assert len(seq) == 3 and list(seq) == [a, b, c] and seq[0] is a and seq[-1] is c
    x = mt.randn(5, 2)
    np.testing.assert_array_equal(seq(x).numpy(), c(b(a(x))).numpy())
    head = seq[:2]
    assert isinstance(head, nn.Sequential) and list(head) == [a, b]
    assert [n for n, _ in seq.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    named = nn.Sequential(OrderedDict([("fc", a), ("act", b)]))
    assert [n for n, _ in named.named_children()] == ["fc", "act"] and named.fc is a
    assert list(named[1:]._modules) == ["act"]
    seq.append(nn.Tanh())
    assert len(seq) == 4 and isinstance(seq[3], nn.Tanh)
    with pytest.raises(IndexError, match="Sequential index 4 is out of range for 4 modules"):
        seq[4]


def test_module_list():
    layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(2)])
    layers.append(nn.ReLU())
    layers.extend([nn.Tanh()])
    layers.insert(1, nn.Identity())
    assert [type(m).__name__ for m in layers] == ["Linear", "Identity", "Linear", "ReLU", "Tanh"]
    assert list(layers._modules) == ["0", "1", "2", "3", "4"]
    assert [n for n, _ in layers.named_parameters()] == ["0.weight", "0.bias", "2.weight",
                                                         "2.bias"]
    del layers[1]
    assert [type(m).__name__ for m in layers] == ["Linear", "Linear", "ReLU", "Tanh"]
    assert not hasattr(layers, "4")
    assert isinstance(layers[1:3], nn.ModuleList) and len(layers[1:3]) == 2
    layers[-1] = nn.Sigmoid()
    assert isinstance(layers[3], nn.Sigmoid)
    layers += [nn.ReLU()]
    assert len(layers) == 5
    with pytest.raises(TypeError, match="ModuleList indices must be ints or slices, not str"):
        layers["0"]
    with pytest.raises(TypeError, match="ModuleList has no forward"):
        layers(mt.zeros(1))


def test_module_dict():
    heads = nn.ModuleDict({"cls": nn.Linear(4, 2), "lm": nn.Linear(4, 9)})
    assert list(heads) == ["cls", "lm"] and len(heads) == 2 and "lm" in heads
    assert [n for n, _ in heads.named_parameters()] == ["cls.weight", "cls.bias", "lm.weight",
                                                        "lm.bias"]
    heads["tag"] = nn.Linear(4, 3)
    assert list(heads.keys()) == ["cls", "lm", "tag"]
    assert isinstance(heads.pop("cls"), nn.Linear) and list(heads) == ["lm", "tag"]
    assert [k for k, _ in heads.items()] == ["lm", "tag"] and len(list(heads.values())) == 2
    with pytest.raises(KeyError, match=r"ModuleDict has no module 'cls'; it has \['lm', 'tag'\]"):
        heads["cls"]
    with pytest.raises(KeyError, match="cannot register module 'keys'"):
        heads["keys"] = nn.ReLU()
    heads.clear()
    assert len(heads) == 0 and list(heads.parameters()) == []


# ---- init ----------------------------------------------------------------------------------------
def test_fans_and_gains():
    assert init._calculate_fan_in_and_fan_out(mt.zeros(5, 3)) == (3, 5)
    assert init._calculate_fan_in_and_fan_out(mt.zeros(8, 4, 3, 3)) == (36, 72)
    with pytest.raises(ValueError, match=r"at least 2 dimensions, got shape \(3,\)"):
        init._calculate_fan_in_and_fan_out(mt.zeros(3))
    assert init.calculate_gain("linear") == 1 and init.calculate_gain("sigmoid") == 1
    assert init.calculate_gain("tanh") == 5 / 3
    assert init.calculate_gain("relu") == math.sqrt(2)
    assert init.calculate_gain("leaky_relu") == math.sqrt(2 / (1 + 0.01 ** 2))
    assert init.calculate_gain("leaky_relu", math.sqrt(5)) == math.sqrt(1 / 3)
    with pytest.raises(ValueError, match="unsupported nonlinearity 'swish'"):
        init.calculate_gain("swish")


def test_gains_match_torch():
    torch = pytest.importorskip("torch")
    for name, param in [("linear", None), ("tanh", None), ("relu", None), ("leaky_relu", None),
                        ("leaky_relu", 0.2), ("selu", None), ("sigmoid", None)]:
        assert init.calculate_gain(name, param) == pytest.approx(
            torch.nn.init.calculate_gain(name, param))


def _assert_moments(sample, mean, std):
    n = sample.size
    assert abs(sample.mean() - mean) < 5 * std / math.sqrt(n)
    assert abs(sample.std() - std) < 5 * std / math.sqrt(2 * n)


SHAPE = (400, 300)
FAN_IN, FAN_OUT = 300, 400


@pytest.mark.parametrize("fill, mean, std, bound", [
    (lambda t: init.uniform_(t, -2, 4), 1.0, 6 / math.sqrt(12), (-2, 4)),
    (lambda t: init.normal_(t, 0.5, 2.0), 0.5, 2.0, None),
    (lambda t: init.xavier_uniform_(t, gain=2), 0.0, 2 * math.sqrt(2 / (FAN_IN + FAN_OUT)),
     (-2 * math.sqrt(6 / (FAN_IN + FAN_OUT)), 2 * math.sqrt(6 / (FAN_IN + FAN_OUT)))),
    (lambda t: init.xavier_normal_(t), 0.0, math.sqrt(2 / (FAN_IN + FAN_OUT)), None),
    (lambda t: init.kaiming_uniform_(t, nonlinearity="relu"), 0.0, math.sqrt(2 / FAN_IN),
     (-math.sqrt(6 / FAN_IN), math.sqrt(6 / FAN_IN))),
    (lambda t: init.kaiming_normal_(t, mode="fan_out", nonlinearity="relu"), 0.0,
     math.sqrt(2 / FAN_OUT), None),
    (lambda t: init.kaiming_normal_(t, a=0.2), 0.0,
     math.sqrt(2 / (1 + 0.04)) / math.sqrt(FAN_IN), None),
])
def test_random_initialisers_have_their_distributions(fill, mean, std, bound):
    t = mt.zeros(*SHAPE)
    version = t._version[0]
    assert fill(t) is t
    assert t._version[0] > version and t.dtype == mt.float32
    sample = t.numpy().astype(np.float64)
    _assert_moments(sample, mean, std)
    if bound is not None:
        assert bound[0] <= sample.min() and sample.max() <= bound[1]
        assert sample.min() < bound[0] + 0.01 * (bound[1] - bound[0])


def test_initialisers_take_a_generator_and_run_without_a_graph():
    a, b = mt.zeros(3, 4), mt.zeros(3, 4)
    init.xavier_uniform_(a, generator=mt.Generator(5))
    init.xavier_uniform_(b, generator=mt.Generator(5))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    p = nn.Parameter(mt.zeros(3, 4))
    init.kaiming_normal_(p)  # a leaf that requires grad: allowed, no graph recorded
    assert p.is_leaf and p.grad is None
    assert (init.constant_(mt.zeros(2), 3.5).numpy() == 3.5).all()
    assert (init.ones_(mt.zeros(2)).numpy() == 1).all()
    assert (init.zeros_(mt.ones(2)).numpy() == 0).all()
    with pytest.raises(ValueError, match="mode must be 'fan_in' or 'fan_out', got 'fan'"):
        init.kaiming_uniform_(mt.zeros(2, 2), mode="fan")
    with pytest.raises(ValueError, match="normal_: std must be >= 0, got -1"):
        init.normal_(mt.zeros(2), std=-1)


def _truncated_moments(mean, std, a, b):
    alpha, beta = (a - mean) / std, (b - mean) / std
    pdf = [math.exp(-z * z / 2) / math.sqrt(2 * math.pi) if math.isfinite(z) else 0.0
           for z in (alpha, beta)]
    if alpha > 0:  # upper tail: the upper CDF keeps its precision there
        mass = 0.5 * (math.erfc(alpha / math.sqrt(2)) - math.erfc(beta / math.sqrt(2)))
    else:
        mass = 0.5 * (math.erfc(-beta / math.sqrt(2)) - math.erfc(-alpha / math.sqrt(2)))
    zpdf = [z * p if math.isfinite(z) else 0.0 for z, p in zip((alpha, beta), pdf)]
    mu = mean + std * (pdf[0] - pdf[1]) / mass
    var = std ** 2 * (1 + (zpdf[0] - zpdf[1]) / mass - ((pdf[0] - pdf[1]) / mass) ** 2)
    return mu, math.sqrt(var)


@pytest.mark.parametrize("mean, std, a, b", [(0.0, 1.0, -2.0, 2.0), (0.0, 0.02, -0.04, 0.04),
                                             (1.0, 2.0, 0.0, 10.0), (0.0, 1.0, 3.0, 4.0),
                                             (0.0, 1.0, -math.inf, -9.0), (0.0, 1.0, 8.0, 9.0)])
def test_trunc_normal_has_the_truncated_distribution(mean, std, a, b):
    t = init.trunc_normal_(mt.zeros(200_000, dtype=mt.float64), mean, std, a, b)
    sample = t.numpy()
    assert a <= sample.min() and sample.max() <= b
    mu, sigma = _truncated_moments(mean, std, a, b)
    _assert_moments(sample, mu, sigma)


def test_normal_inverse_cdf_is_accurate():
    from statistics import NormalDist

    u = np.concatenate([np.linspace(1e-6, 1 - 1e-6, 1001), [1e-300, 1e-20, 1e-9, 0.075, 0.925,
                                                              1 - 1e-12]])
    expected = [NormalDist().inv_cdf(v) for v in u]
    np.testing.assert_allclose(init._normal_inverse_cdf(u), expected, rtol=1e-14, atol=1e-14)


# ---- learning ------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_tiny_mlp_overfits_a_tiny_batch(seed):
    rng = np.random.default_rng(seed)
    x = mt.tensor(rng.standard_normal((8, 5)).astype(np.float32))
    y = mt.tensor(rng.integers(0, 3, 8))
    mt.manual_seed(seed % 1000)
    model = nn.Sequential(nn.Linear(5, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 3))
    first = None
    for _ in range(150):
        loss = F.cross_entropy(model(x), y)
        first = loss.item() if first is None else first
        model.zero_grad()
        loss.backward()
        with mt.no_grad():
            for p in model.parameters():
                p.data -= 0.1 * p.grad.data
                p._bump_version()
    assert loss.item() < first / 10


# ---- forward hooks -------------------------------------------------------------------------------
class Scale(nn.Module):
    """forward(x, *, factor=1.0) -> x * factor, to see positional and keyword arguments."""

    def forward(self, x, *, factor=1.0):
        return x * factor


def test_forward_hooks_run_around_forward_in_registration_order():
    module, seen = Scale(), []
    module.register_forward_pre_hook(lambda m, args: seen.append(("pre 1", m, args)))
    module.register_forward_pre_hook(lambda m, args: seen.append(("pre 2", m, args)))
    module.register_forward_hook(lambda m, args, out: seen.append(("post 1", m, args, out)))
    module.register_forward_hook(lambda m, args, out: seen.append(("post 2", m, args, out)))
    module.register_forward_hook(lambda m, args, out: seen.append(("first", m, args, out)),
                                 prepend=True)
    x = mt.tensor([1.0, 2.0])
    out = module(x, factor=3.0)
    assert [entry[0] for entry in seen] == ["pre 1", "pre 2", "first", "post 1", "post 2"]
    assert all(entry[1] is module and entry[2] == (x,) for entry in seen)
    assert all(entry[3] is out for entry in seen[2:])
    np.testing.assert_allclose(out.numpy(), [3.0, 6.0])


def test_forward_pre_hook_replaces_the_arguments():
    module = Scale()
    module.register_forward_pre_hook(lambda m, args: args[0] + 1)           # a single value
    module.register_forward_pre_hook(lambda m, args: (args[0] * 10,))       # a tuple
    np.testing.assert_allclose(module(mt.tensor([1.0, 2.0])).numpy(), [20.0, 30.0])


def test_forward_hook_replaces_the_output_for_later_hooks_and_the_caller():
    module, seen = Scale(), []
    module.register_forward_hook(lambda m, args, out: out * 2)
    module.register_forward_hook(lambda m, args, out: seen.append(out.numpy().copy()))
    out = module(mt.tensor([1.0, 2.0]), factor=3.0)
    np.testing.assert_allclose(seen[0], [6.0, 12.0])
    np.testing.assert_allclose(out.numpy(), [6.0, 12.0])


def test_hooks_with_kwargs_see_and_replace_keyword_arguments():
    module, seen = Scale(), []

    def double_factor(m, args, kwargs):
        return args, {**kwargs, "factor": kwargs["factor"] * 2}

    module.register_forward_pre_hook(double_factor, with_kwargs=True)
    module.register_forward_hook(lambda m, args, kwargs, out: seen.append(kwargs), with_kwargs=True)
    out = module(mt.tensor([1.0]), factor=3.0)
    np.testing.assert_allclose(out.numpy(), [6.0])
    assert seen == [{"factor": 6.0}]


def test_forward_pre_hook_with_kwargs_must_return_a_pair():
    module = Scale()
    module.register_forward_pre_hook(lambda m, args, kwargs: args, with_kwargs=True)
    with pytest.raises(TypeError, match=r"Scale: a forward pre-hook registered with_kwargs=True "
                                        r"must return None or a pair \(args, kwargs\), got tuple"):
        module(mt.tensor([1.0]))


def test_removing_a_handle_removes_only_its_hook():
    module, seen = Scale(), []

    def record(m, args, out):
        seen.append(len(seen))

    first = module.register_forward_hook(record)
    module.register_forward_hook(record)             # the same function twice: two entries
    pre = module.register_forward_pre_hook(lambda m, args: seen.append("pre"))
    module(mt.tensor([1.0]))
    assert seen == ["pre", 1, 2]
    first.remove()
    first.remove()                                   # a second remove does nothing
    pre.remove()
    seen.clear()
    module(mt.tensor([1.0]))
    assert seen == [0]


def test_hooks_on_submodules_fire_during_the_parents_forward():
    model, outputs = Net(), {}
    handles = [module.register_forward_hook(
        lambda m, args, out, name=name: outputs.setdefault(name, out))
        for name, module in model.named_modules() if name.startswith("blocks.")]
    model(mt.tensor([[1, 2, 3]]))
    assert sorted(outputs) == ["blocks.0", "blocks.0.fc", "blocks.0.norm", "blocks.1",
                               "blocks.1.fc", "blocks.1.norm"]
    assert outputs["blocks.0"].shape == (1, 3, 4)
    for handle in handles:
        handle.remove()
    outputs.clear()
    model(mt.tensor([[1, 2, 3]]))
    assert outputs == {}


def test_a_hook_replacing_a_submodule_output_changes_the_model_output():
    model = Net().eval()
    tokens = mt.tensor([[1, 2, 3]])
    before = model(tokens).numpy()
    handle = model.blocks[1].register_forward_hook(lambda m, args, out: out * 0)
    zeroed = model(tokens).numpy()
    handle.remove()
    np.testing.assert_allclose(zeroed, model.head(mt.zeros(1, 3, 4)).numpy(), atol=1e-6)
    np.testing.assert_allclose(model(tokens).numpy(), before)


def test_hooks_leave_the_state_dict_and_gradients_alone():
    model = Net()
    keys = list(model.state_dict())
    model.register_forward_pre_hook(lambda m, args: None)
    model.blocks[0].register_forward_hook(lambda m, args, out: None)
    assert list(model.state_dict()) == keys
    model(mt.tensor([[1, 2]])).sum().backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("register", ["register_forward_hook", "register_forward_pre_hook"])
def test_hook_registration_refuses_bad_input(register):
    module = Scale()
    with pytest.raises(TypeError, match=rf"Scale.{register}: the hook must be callable, got int 3"):
        getattr(module, register)(3)
    with pytest.raises(TypeError, match=rf"Scale.{register}: with_kwargs must be a bool, got 1"):
        getattr(module, register)(lambda *a: None, with_kwargs=1)
    with pytest.raises(TypeError, match=rf"Scale.{register}: prepend must be a bool, got 'yes'"):
        getattr(module, register)(lambda *a: None, prepend="yes")


def test_a_replaced_output_is_differentiated_through_the_hook():
    module = Scale()
    module.register_forward_hook(lambda m, args, out: out * out)
    x = mt.tensor([1.0, -2.0], dtype=mt.float64, requires_grad=True)
    module(x, factor=3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * 9.0 * x.numpy())     # d(3x)^2/dx = 18x


# ---- functional_call / replaced_tensors ---------------------------------------------------------
def test_functional_call_computes_with_the_given_tensors_and_leaves_the_module_as_it_was():
    layer = nn.Linear(3, 2)
    original = layer.weight
    weight = mt.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    x = mt.ones(4, 3)
    out = nn.functional_call(layer, {"weight": weight}, x)
    np.testing.assert_allclose(out.numpy(), x.numpy() @ weight.numpy().T + layer.bias.numpy())
    out.sum().backward()
    np.testing.assert_allclose(weight.grad.numpy(), np.full((2, 3), 4.0))
    assert layer.weight is original and original.grad is None
    assert layer.bias.grad is not None   # a parameter not replaced is used, and trained, as usual
    assert dict(layer.named_parameters())["weight"] is original


def test_replaced_tensors_reaches_nested_modules_and_restores_them_after_an_error():
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    first, zero = model[0].weight, mt.zeros(2, 2)
    with pytest.raises(RuntimeError, match="inside"):
        with nn.replaced_tensors(model, {"0.weight": zero}):
            assert model[0].weight is zero
            raise RuntimeError("inside")
    assert model[0].weight is first


@pytest.mark.parametrize("tensors, error, message", [
    ({"weight2": mt.zeros(2, 3)}, KeyError, "no parameter or buffer 'weight2'"),
    ({"weight": mt.zeros(3, 2)}, ValueError, r"'weight' has shape \(3, 2\), the module's has "
                                             r"\(2, 3\)"),
    ({"weight": np.zeros((2, 3))}, TypeError, "'weight' must be a Tensor, got ndarray"),
])
def test_replaced_tensors_refuses_unknown_names_wrong_shapes_and_arrays(tensors, error, message):
    layer = nn.Linear(3, 2)
    original = layer.weight
    with pytest.raises(error, match=message):
        nn.functional_call(layer, tensors, mt.ones(1, 3))
    assert layer.weight is original


def test_a_deep_copied_model_trains_on_its_own_after_the_original_has_trained():
    """The copy of a parameter that has been through backward gets its own gradient
    accumulator: gradients on the copy used to land in the original's .grad (the accumulator
    was copied with a reference back to the original)."""
    layer = nn.Linear(3, 2)
    x = mt.tensor(np.ones((4, 3), dtype=np.float32))
    layer(x).sum().backward()
    mt.optim.AdamW(layer.parameters(), lr=0.1).step()
    twin = copy.deepcopy(layer)
    assert type(twin.weight) is nn.Parameter and twin.weight.requires_grad
    assert not np.shares_memory(twin.weight.data, layer.weight.data)
    before, original = twin.weight.numpy().copy(), layer.weight.numpy().copy()
    twin.zero_grad()
    optimizer = mt.optim.AdamW(twin.parameters(), lr=0.1)
    twin(x).sum().backward()
    optimizer.step()
    assert twin.weight.grad is not None
    assert not np.allclose(twin.weight.numpy(), before)
    np.testing.assert_array_equal(layer.weight.numpy(), original)


def test_a_recorded_tensor_deep_copies_as_a_detached_leaf():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    y = copy.deepcopy(x * 2)
    assert y.is_leaf and not y.requires_grad and y.tolist() == [2.0, 4.0]
