"""The HuggingFace-format machinery (``minitorch_nlp.io.huggingface``) on a toy architecture: the
key map in both directions, transposes and fused tensors, and an error naming every key that does
not fit. The real architectures are tested against HuggingFace's own outputs in test_hf_*.py."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

pytest.importorskip("safetensors")
import safetensors.numpy  # noqa: E402

import minitorch_nlp as mt  # noqa: E402
from minitorch_nlp import nn  # noqa: E402
from minitorch_nlp.io import huggingface as hf  # noqa: E402


class Toy(nn.Module):
    """An embedding, then per layer a fused q/k/v (three Linears of ours) and a Conv1D-style
    projection."""

    def __init__(self, config):
        super().__init__()
        self.config = dict(config)
        d = config["n_embd"]
        self.embed = nn.Embedding(config["vocab_size"], d)
        self.blocks = nn.ModuleList([nn.ModuleDict({"q": nn.Linear(d, d), "k": nn.Linear(d, d),
                                                    "v": nn.Linear(d, d), "proj": nn.Linear(d, d)})
                                     for _ in range(config["n_layer"])])

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block["proj"](block["q"](x) + block["k"](x) * block["v"](x))
        return x


RULES = (
    hf.Rule("base.wte.weight", "embed.weight"),
    hf.Rule("base.h.{i}.c_attn.weight", ("blocks.{i}.q.weight", "blocks.{i}.k.weight",
                                         "blocks.{i}.v.weight"),
            to_ours=hf.split_columns(3, transposed=True), to_hf=hf.concat_columns(transposed=True)),
    hf.Rule("base.h.{i}.c_attn.bias", ("blocks.{i}.q.bias", "blocks.{i}.k.bias",
                                       "blocks.{i}.v.bias"),
            to_ours=hf.split_columns(3), to_hf=hf.concat_columns()),
    hf.Rule("base.h.{i}.c_proj.weight", "blocks.{i}.proj.weight", to_ours=hf.transpose),
    hf.Rule("base.h.{i}.c_proj.bias", "blocks.{i}.proj.bias"),
)
CONFIG = {"architectures": ["ToyModel"], "model_type": "toy", "vocab_size": 7, "n_embd": 4,
          "n_layer": 2}


@pytest.fixture
def registry(monkeypatch):
    monkeypatch.setattr(hf, "_load_registrations", lambda: None)   # the toy model only
    monkeypatch.setattr(hf, "_ARCHITECTURES", {})
    hf.register_architecture(hf.HFArchitecture(
        name="ToyModel", model_type="toy", model_class=Toy, from_config=Toy,
        to_config=lambda model: {k: model.config[k] for k in ("vocab_size", "n_embd", "n_layer")},
        rules=RULES, ignore=(r"base\.h\.\d+\.attn_bias",), base_prefix="base.",
        default_for_type=True))


def hf_checkpoint(rng, d=4, n_layer=2, vocab=7):
    state = {"base.wte.weight": rng.standard_normal((vocab, d))}
    for i in range(n_layer):
        state[f"base.h.{i}.c_attn.weight"] = rng.standard_normal((d, 3 * d))   # (in, out)
        state[f"base.h.{i}.c_attn.bias"] = rng.standard_normal(3 * d)
        state[f"base.h.{i}.c_proj.weight"] = rng.standard_normal((d, d))
        state[f"base.h.{i}.c_proj.bias"] = rng.standard_normal(d)
        state[f"base.h.{i}.attn_bias"] = np.tril(np.ones((3, 3)))             # a buffer: ignored
    return {k: v.astype(np.float32) for k, v in state.items()}


def write(directory, state, config=CONFIG):
    directory.mkdir(exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    safetensors.numpy.save_file(state, str(directory / "model.safetensors"),
                                metadata={"format": "pt"})
    return directory


def reference_forward(state, ids, n_layer=2, d=4):
    """The toy model computed straight from the HuggingFace tensors."""
    x = state["base.wte.weight"][ids]
    for i in range(n_layer):
        qkv = x @ state[f"base.h.{i}.c_attn.weight"] + state[f"base.h.{i}.c_attn.bias"]
        q, k, v = qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:]
        x = (q + k * v) @ state[f"base.h.{i}.c_proj.weight"] + state[f"base.h.{i}.c_proj.bias"]
    return x


def test_load_transposes_and_splits_then_save_writes_the_same_checkpoint(registry, tmp_path):
    state = hf_checkpoint(np.random.default_rng(0))
    model = mt.from_pretrained(write(tmp_path / "in", state))
    assert not model.training
    ids = np.array([[1, 2, 6], [0, 3, 3]])
    np.testing.assert_allclose(model(ids).numpy(), reference_forward(state, ids), rtol=1e-5,
                               atol=1e-5)

    mt.save_pretrained(model, tmp_path / "out")
    written = safetensors.numpy.load_file(str(tmp_path / "out" / "model.safetensors"))
    assert set(written) == {k for k in state if "attn_bias" not in k}
    for key, array in written.items():
        np.testing.assert_array_equal(array, state[key])
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config == CONFIG
    again = mt.from_pretrained(tmp_path / "out")
    np.testing.assert_array_equal(again(ids).numpy(), model(ids).numpy())


def test_a_base_checkpoint_without_the_prefix_loads(registry, tmp_path):
    state = hf_checkpoint(np.random.default_rng(1))
    bare = {k[len("base."):]: v for k, v in state.items()}
    model = mt.from_pretrained(write(tmp_path / "bare", bare))
    ids = np.array([[4, 5]])
    np.testing.assert_allclose(model(ids).numpy(), reference_forward(state, ids), rtol=1e-5,
                               atol=1e-5)


def test_a_config_without_architectures_uses_the_model_type(registry, tmp_path):
    config = {k: v for k, v in CONFIG.items() if k != "architectures"}
    model = mt.from_pretrained(write(tmp_path / "m", hf_checkpoint(np.random.default_rng(2)),
                                     config))
    assert isinstance(model, Toy)


@pytest.mark.parametrize("change, message", [
    (lambda s: s.pop("base.h.1.c_proj.bias"), r"missing keys: base\.h\.1\.c_proj\.bias"),
    (lambda s: s.update({"base.h.0.extra": np.zeros(2, np.float32)}),
     r"unexpected keys: base\.h\.0\.extra"),
    (lambda s: s.update({"base.wte.weight": np.zeros((7, 5), np.float32)}),
     r"mis-shaped keys: base\.wte\.weight \(7, 5\) -> embed\.weight \(7, 5\), expected \(7, 4\)"),
])
def test_keys_that_do_not_fit_are_named(registry, tmp_path, change, message):
    state = hf_checkpoint(np.random.default_rng(3))
    change(state)
    with pytest.raises(ValueError, match=message):
        mt.from_pretrained(write(tmp_path / "bad", state))


def test_a_checkpoint_with_more_layers_than_the_config_is_refused(registry, tmp_path):
    state = hf_checkpoint(np.random.default_rng(4), n_layer=3)
    with pytest.raises(ValueError, match=r"unexpected keys: base\.h\.2\.c_attn\.bias"):
        mt.from_pretrained(write(tmp_path / "deep", state))


def test_unsupported_architectures_and_missing_files(registry, tmp_path):
    with pytest.raises(ValueError, match=r"unsupported architecture 'XLNetLMHeadModel'.*ToyModel"):
        mt.from_pretrained(write(tmp_path / "x", hf_checkpoint(np.random.default_rng(5)),
                                 {**CONFIG, "architectures": ["XLNetLMHeadModel"]}))
    with pytest.raises(FileNotFoundError, match="config.json"):
        mt.from_pretrained(tmp_path / "nowhere")
    (tmp_path / "nowts").mkdir()
    (tmp_path / "nowts" / "config.json").write_text(json.dumps(CONFIG))
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        mt.from_pretrained(tmp_path / "nowts")
    with pytest.raises(ValueError, match="save_pretrained: Linear has no HuggingFace architecture"):
        mt.save_pretrained(nn.Linear(2, 2), tmp_path / "lin")


@pytest.mark.parametrize("content, message", [
    ("{not json", r"config\.json is not valid JSON \(Expecting property name"),
    ("[1, 2]", r"config\.json holds a JSON list, not an object of configuration fields"),
    (b"\xff\xfe", r"config\.json is not valid JSON"),
])
def test_an_invalid_config_json_is_named(registry, tmp_path, content, message):
    (tmp_path / "config.json").write_bytes(content if isinstance(content, bytes)
                                           else content.encode())
    with pytest.raises(ValueError, match="from_pretrained: " + re.escape(str(tmp_path)) + "/"
                       + message):
        mt.from_pretrained(tmp_path)


def test_a_truncated_safetensors_file_is_named(registry, tmp_path):
    directory = write(tmp_path / "cut", hf_checkpoint(np.random.default_rng(6)))
    weights = directory / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-40])
    with pytest.raises(ValueError, match=re.escape(str(weights)) + " is not a readable "
                       "safetensors file .*download or save the model again"):
        mt.from_pretrained(directory)


def test_rules_check_their_own_consistency():
    with pytest.raises(ValueError, match="needs both to_ours and to_hf"):
        hf.Rule("a", ("b", "c"))
    with pytest.raises(ValueError, match="give both to_ours and to_hf"):
        hf.Rule("a", "b", to_ours=np.negative)
    assert hf.Rule("a", "b", to_ours=hf.transpose).to_hf is hf.transpose
