"""HuggingFace-format checkpoints: a directory holding ``config.json`` and ``model.safetensors``.

``from_pretrained(path)`` reads the config, picks our class from ``architectures[0]`` (or, failing
that, ``model_type``), builds it and loads the weights; ``save_pretrained(model, path)`` writes the
same two files back, so that HuggingFace ``transformers`` can read what we write.

Each supported architecture is an ``HFArchitecture``: how to build our model from a config (and a
config from our model), and an explicit key map, a list of ``Rule``s, one per HuggingFace tensor::

    Rule(hf="h.{i}.attn.c_proj.weight", ours="blocks.{i}.self_attn.out_proj.weight",
         to_ours=transpose)                       # GPT-2's Conv1D stores (in, out)

``{i}`` runs over the layers our model has. A rule with ``{i}`` in ``ours`` only maps one
HuggingFace tensor to that tensor of every layer (ALBERT's layers share their weights). A rule may
map one HuggingFace tensor to several of ours (GPT-2's ``c_attn`` holds the query, key and value
projections side by side). Conversion checks everything both ways, and a checkpoint that does not
fit is a ``ValueError`` naming every key that is missing, unexpected or mis-shaped: nothing is
skipped silently.

The registrations live at the end of each model file (``models/gpt.py``, ``models/bert.py``,
``models/roberta.py``), next to the modules whose names they map.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from collections.abc import Callable

import numpy as np

from .files import atomic_write, safetensors_numpy
from .runs import checkpoint_file
from .sizes import check_sizes

__all__ = ["HFArchitecture", "Rule", "concat_columns", "from_pretrained", "register_architecture",
           "save_pretrained", "split_columns", "supported_architectures", "transpose"]

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
_MAX_LISTED = 12


# ---- the key map ---------------------------------------------------------------------------------
def transpose(array):
    """(in, out) <-> (out, in): HuggingFace's Conv1D (GPT, GPT-2) against our Linear."""
    return np.ascontiguousarray(array.T)


def split_columns(parts, transposed=False):
    """One (in, parts * out) tensor -> ``parts`` tensors of (in, out), or of (out, in) when
    ``transposed`` (GPT-2's fused ``c_attn`` -> our q, k, v projections); a 1-D bias splits too."""
    def split(array):
        pieces = np.split(array, parts, axis=-1)
        return tuple(transpose(p) if transposed and p.ndim == 2 else np.ascontiguousarray(p)
                     for p in pieces)
    return split


def concat_columns(transposed=False):
    """The inverse of ``split_columns``: our pieces side by side in one HuggingFace tensor."""
    def concat(*arrays):
        return np.concatenate([a.T if transposed and a.ndim == 2 else a for a in arrays], axis=-1)
    return concat


@dataclass(frozen=True)
class Rule:
    """One HuggingFace tensor ``hf`` and the tensor(s) of ours it holds.

    ``to_ours(hf_array)`` gives our array (or a tuple of arrays, one per name in ``ours``);
    ``to_hf(*our_arrays)`` gives the HuggingFace array back. Both default to the identity, and
    ``to_hf`` defaults to ``transpose`` when ``to_ours`` is ``transpose``. ``also``: other names
    older versions of ``transformers`` saved the tensor under, read when ``hf`` is absent (and
    taken as copies of it when both are there); ``save_pretrained`` writes ``hf``. ``optional``:
    the rule applies only to models that have its tensors (ELECTRA's ``embeddings_project``
    exists only when the embedding size differs from the hidden size).
    """

    hf: str
    ours: str | tuple[str, ...]
    to_ours: Callable | None = None
    to_hf: Callable | None = None
    also: tuple[str, ...] = ()
    optional: bool = False

    def __post_init__(self):
        names = (self.ours,) if isinstance(self.ours, str) else tuple(self.ours)
        object.__setattr__(self, "ours", names)
        if self.to_hf is None and self.to_ours is transpose:
            object.__setattr__(self, "to_hf", transpose)
        if len(names) > 1 and (self.to_ours is None or self.to_hf is None):
            raise ValueError(f"Rule {self.hf!r}: mapping to several tensors {names} needs both "
                             "to_ours and to_hf")
        if (self.to_ours is None) != (self.to_hf is None):
            raise ValueError(f"Rule {self.hf!r}: give both to_ours and to_hf, or neither")

    def expand(self, layer_indices):
        """This rule with ``{i}`` replaced by each layer index (itself when it has no ``{i}``);
        with ``{i}`` in ``ours`` only, one rule filling every layer's tensor (shared weights)."""
        if "{i}" not in self.ours[0]:
            return [self]
        if "{i}" not in self.hf:
            return [self.shared_by(layer_indices)]
        return [Rule(self.hf.format(i=i), tuple(name.format(i=i) for name in self.ours),
                     self.to_ours, self.to_hf, tuple(name.format(i=i) for name in self.also))
                for i in layer_indices]

    def shared_by(self, layer_indices):
        """One HuggingFace tensor held by the layers ``layer_indices`` alike: read into each of
        them, written from the first after checking that every layer holds the same values."""
        copies = len(layer_indices)
        per_layer = len(self.ours)

        def to_hf(*arrays):
            first = arrays[:per_layer]
            if any(not np.array_equal(a, b) for a, b in zip(arrays, first * copies)):
                raise ValueError(f"save_pretrained: {self.hf} is one tensor that every layer "
                                 f"shares, but our layers {list(layer_indices)} hold different "
                                 "values for it")
            return self.hf_array(first)

        return Rule(self.hf, tuple(name.format(i=i) for i in layer_indices for name in self.ours),
                    to_ours=lambda array: self.our_arrays(array) * copies, to_hf=to_hf)

    def hf_array(self, our_arrays):
        return self.to_hf(*our_arrays) if self.to_hf else our_arrays[0]

    def our_arrays(self, hf_array):
        if self.to_ours is None:
            return (hf_array,)
        out = self.to_ours(hf_array)
        return out if isinstance(out, tuple) else (out,)


@dataclass(frozen=True)
class HFArchitecture:
    """A HuggingFace architecture we can read and write.

    ``name``: ``config.json``'s ``architectures[0]`` (``"GPT2LMHeadModel"``); ``model_type``: its
    ``model_type`` (``"gpt2"``); ``model_class``: our class; ``from_config(hf_config) -> model``;
    ``to_config(model) -> dict`` (the HuggingFace config fields; ``architectures`` and
    ``model_type`` are added); ``rules``: the key map; ``ignore``: regular expressions of
    HuggingFace keys that hold nothing of ours (buffers, tied copies of a weight we share);
    ``base_prefix``: the prefix of the base model's keys (``"transformer."``), so that a checkpoint
    of the bare base model (keys without it) loads into a model with a head that adds no weights;
    ``default_for_type``: the architecture to build for a config that names ``model_type`` only.
    A rule marked ``optional`` applies only to models that hold its tensors (DPR's projection,
    ELECTRA's ``embeddings_project``, T5's two feed-forward forms and its untied head).
    """

    name: str
    model_type: str
    model_class: type
    from_config: Callable[[dict], object]
    to_config: Callable[[object], dict]
    rules: tuple[Rule, ...]
    ignore: tuple[str, ...] = ()
    base_prefix: str = ""
    default_for_type: bool = False

    def expanded_rules(self, our_keys):
        """The rules with ``{i}`` replaced by every layer index present in ``our_keys``, less the
        optional ones whose tensors ``our_keys`` does not hold."""
        rules = []
        for rule in self.rules:
            indices = _layer_indices(rule.ours[0], our_keys) if "{i}" in rule.ours[0] else ()
            rules.extend(expanded for expanded in rule.expand(indices)
                         if not rule.optional or all(name in our_keys for name in expanded.ours))
        return rules

    def is_ignored(self, key):
        return any(re.fullmatch(pattern, key) for pattern in self.ignore)


_ARCHITECTURES: dict[str, HFArchitecture] = {}


def register_architecture(architecture):
    """Make ``architecture`` known to ``from_pretrained`` / ``save_pretrained``."""
    if not isinstance(architecture, HFArchitecture):
        raise TypeError(f"register_architecture: expected an HFArchitecture, got "
                        f"{type(architecture).__name__}")
    _ARCHITECTURES[architecture.name] = architecture
    return architecture


def supported_architectures():
    """The names of the HuggingFace architectures ``from_pretrained`` reads, sorted."""
    _load_registrations()
    return sorted(_ARCHITECTURES)


def _load_registrations():
    from ..models.registry import import_model_modules   # the model modules import this one
    import_model_modules()


def _layer_indices(pattern, keys):
    regex = re.compile(re.escape(pattern).replace(re.escape("{i}"), r"(\d+)"))
    return sorted({int(m.group(1)) for key in keys if (m := regex.fullmatch(key))})


def _listed(keys):
    keys = sorted(keys)
    more = f" ... and {len(keys) - _MAX_LISTED} more" if len(keys) > _MAX_LISTED else ""
    return ", ".join(keys[:_MAX_LISTED]) + more


# ---- reading -------------------------------------------------------------------------------------
def read_config(path):
    """The ``config.json`` of the HuggingFace directory ``path`` as a dict."""
    config_path = os.path.join(os.fspath(path), CONFIG_NAME)
    if not os.path.isfile(config_path):
        run = checkpoint_file(path)
        if os.path.isfile(run):   # a folder (or file) that `minitorch-nlp train` wrote
            raise FileNotFoundError(
                f"from_pretrained: {path} is a training run ({run}), not a HuggingFace model "
                "directory; load it with minitorch_nlp.inference.load_for_inference(path), or "
                "on the command line `minitorch-nlp generate PATH`")
        raise FileNotFoundError(f"from_pretrained: {config_path} does not exist; a HuggingFace "
                                f"model directory holds {CONFIG_NAME} and {WEIGHTS_NAME}")
    try:
        with open(config_path, encoding="utf-8") as file:
            config = json.load(file)
    except ValueError as error:   # JSONDecodeError, and UnicodeDecodeError for a binary file
        raise ValueError(f"from_pretrained: {config_path} is not valid JSON ({error}); "
                         "download or save the model again") from None
    if not isinstance(config, dict):
        raise ValueError(f"from_pretrained: {config_path} holds a JSON "
                         f"{type(config).__name__}, not an object of configuration fields")
    return config


def architecture_for(config):
    """The registered architecture a HuggingFace config names."""
    _load_registrations()
    names = config.get("architectures") or []
    if names and names[0] in _ARCHITECTURES:
        return _ARCHITECTURES[names[0]]
    model_type = config.get("model_type")
    by_type = [a for a in _ARCHITECTURES.values() if a.model_type == model_type]
    defaults = [a for a in by_type if a.default_for_type] or by_type
    if not names and defaults:
        return defaults[0]
    raise ValueError(f"from_pretrained: unsupported architecture {names[0] if names else None!r} "
                     f"(model_type {model_type!r}); supported: {', '.join(sorted(_ARCHITECTURES))}")


def convert_to_ours(architecture, hf_state, our_shapes):
    """HuggingFace tensors -> our state dict, checking every key both ways and every shape."""
    if architecture.base_prefix and not any(k.startswith(architecture.base_prefix)
                                            for k in hf_state):
        hf_state = {architecture.base_prefix + key: value for key, value in hf_state.items()}
    state, used, missing_hf, mis_shaped = {}, set(), [], []
    for rule in architecture.expanded_rules(our_shapes):
        unknown = [name for name in rule.ours if name not in our_shapes]
        if unknown:
            raise ValueError(f"{architecture.name} key map: rule {rule.hf!r} names {unknown}, "
                             f"which our {architecture.model_class.__name__} does not have")
        present = [key for key in (rule.hf, *rule.also) if key in hf_state]
        if not present:
            missing_hf.append(rule.hf)
            continue
        used.update(present)
        hf_key = present[0]
        for name, array in zip(rule.ours, rule.our_arrays(hf_state[hf_key])):
            if tuple(array.shape) != tuple(our_shapes[name]):
                mis_shaped.append(f"{hf_key} {tuple(hf_state[hf_key].shape)} -> {name} "
                                  f"{tuple(array.shape)}, expected {tuple(our_shapes[name])}")
            state[name] = array
    unexpected = [k for k in hf_state if k not in used and not architecture.is_ignored(k)]
    unfilled = [name for name in our_shapes if name not in state]
    problems = []
    if missing_hf:
        problems.append(f"missing keys: {_listed(missing_hf)}")
    if unexpected:
        problems.append(f"unexpected keys: {_listed(unexpected)}")
    if mis_shaped:
        problems.append(f"mis-shaped keys: {'; '.join(mis_shaped[:_MAX_LISTED])}")
    if unfilled and not missing_hf:
        problems.append(f"no checkpoint tensor for our {_listed(unfilled)}")
    if problems:
        raise ValueError(f"from_pretrained: the checkpoint does not fit {architecture.name}: "
                         + "; ".join(problems))
    return state


def from_pretrained(path, *, backend=None, dtype=None):
    """Our model, built from the HuggingFace directory ``path`` (``config.json`` +
    ``model.safetensors``) and loaded with its weights, in ``eval()`` mode.

    ``backend`` (``"numpy"``, ``"numba"``, ``"cupy"``) and ``dtype`` (a float dtype) move or cast
    it afterwards. Raises ``ValueError`` for an architecture we do not support (listing those we
    do) and for a checkpoint whose keys or shapes do not fit (naming each key).
    """
    config = read_config(path)
    architecture = architecture_for(config)
    weights_path = os.path.join(os.fspath(path), WEIGHTS_NAME)
    if not os.path.isfile(weights_path):
        raise FileNotFoundError(f"from_pretrained: {weights_path} does not exist (only "
                                f"safetensors weights are read, never pickled .bin files)")
    hf_state = _read_safetensors(weights_path)
    check_sizes(os.path.join(os.fspath(path), CONFIG_NAME), config,
                {name: tuple(array.shape) for name, array in hf_state.items()})
    model = architecture.from_config(config)
    our_shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    model.load_state_dict(convert_to_ours(architecture, hf_state, our_shapes))
    if backend is not None:
        model.to(backend)
    if dtype is not None:
        model.to(dtype)
    return model.eval()


def _read_safetensors(path):
    """The tensors of the safetensors file ``path``; a truncated or corrupt file is a
    ``ValueError`` naming it (safetensors' own error type is not a ValueError)."""
    reader = safetensors_numpy()
    try:
        return reader.load_file(path)
    except Exception as error:  # noqa: BLE001 (SafetensorError derives from Exception only)
        raise ValueError(f"from_pretrained: {path} is not a readable safetensors file "
                         f"({error}); download or save the model again") from None


# ---- writing -------------------------------------------------------------------------------------
def save_pretrained(model, path):
    """Write ``model`` as a HuggingFace directory ``path`` (created if needed): ``config.json``
    and ``model.safetensors`` with HuggingFace's names, layouts and dtypes, atomically."""
    _load_registrations()
    matches = [a for a in _ARCHITECTURES.values() if type(model) is a.model_class]
    if not matches:
        supported = sorted(a.model_class.__name__ for a in _ARCHITECTURES.values())
        raise ValueError(f"save_pretrained: {type(model).__name__} has no HuggingFace "
                         f"architecture; supported: {', '.join(supported)}")
    architecture = matches[0]
    config = {"architectures": [architecture.name], "model_type": architecture.model_type,
              **architecture.to_config(model)}
    state = {name: np.asarray(t.numpy()) for name, t in model.state_dict().items()}
    hf_state, used = {}, set()
    for rule in architecture.expanded_rules(state):
        hf_state[rule.hf] = np.ascontiguousarray(rule.hf_array([state[n] for n in rule.ours]))
        used.update(rule.ours)
    left = [name for name in state if name not in used]
    if left:
        raise ValueError(f"save_pretrained: the {architecture.name} key map has no rule for our "
                         f"{_listed(left)}")
    os.makedirs(path, exist_ok=True)
    payload = safetensors_numpy().save(hf_state, metadata={"format": "pt"})
    atomic_write(os.path.join(os.fspath(path), WEIGHTS_NAME), lambda file: file.write(payload))
    text = json.dumps(config, indent=2, sort_keys=True).encode("utf-8")
    atomic_write(os.path.join(os.fspath(path), CONFIG_NAME), lambda file: file.write(text))
