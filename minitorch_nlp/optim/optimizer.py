"""The ``Optimizer`` base class: parameter groups, per-parameter state, and exact ``state_dict``
round trips.

An optimizer holds ``param_groups``, a list of dicts, one per group, each with a ``"params"`` list
and that group's hyper-parameters (``lr``, ``weight_decay`` ...), exactly as in PyTorch::

    opt = AdamW([{"params": decay_params, "weight_decay": 0.1},
                 {"params": no_decay_params, "weight_decay": 0.0}], lr=3e-4)

and ``state``, a mapping from each parameter to its own state (moment estimates, step count).

Updates work directly on the parameters' backend arrays, never recording a graph: a subclass
implements ``_update(param, grad, group)`` with in-place ``xp`` operations (``out=``, ``*=``) and
the base class bumps the parameter's version counter afterwards, so a graph that saved the old
value refuses to run backward instead of giving wrong gradients.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping
from numbers import Real

import numpy as np

from ..autograd import Tensor, enable_grad
from ..autograd.function import memory_order, writable


class ParamState(MutableMapping):
    """Per-parameter optimizer state, keyed by parameter identity.

    Tensors compare elementwise, so they cannot be dictionary keys by value; ``opt.state[p]``
    looks ``p`` up by identity instead (and keeps ``p`` alive, so an id is never reused).
    """

    def __init__(self):
        self._entries = {}

    def __getitem__(self, param):
        entry = self._entries.get(id(param))
        if entry is None:
            raise KeyError(f"no optimizer state for this parameter (shape {tuple(param.shape)})")
        return entry[1]

    def __setitem__(self, param, value):
        self._entries[id(param)] = (param, value)

    def __delitem__(self, param):
        del self._entries[id(param)]

    def __contains__(self, param):
        return id(param) in self._entries

    def __iter__(self):
        return (param for param, _ in self._entries.values())

    def __len__(self):
        return len(self._entries)

    def __repr__(self):
        return f"ParamState({len(self)} parameters)"


def is_array(value) -> bool:
    """Whether ``value`` is a backend array (a NumPy or CuPy ndarray, not a scalar)."""
    if isinstance(value, np.ndarray):
        return True
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, np.generic)


def invalid(optimizer: str, argument: str, value, requirement: str) -> ValueError:
    """The error for a bad hyper-parameter, naming the optimizer, the argument and its value."""
    return ValueError(f"{optimizer}: invalid {argument}={value}; {requirement}")


def check_number(optimizer: str, argument: str, value, *, low=0.0, high=None,
                 high_open=True) -> None:
    """Refuse ``value`` unless it is a real number in ``[low, high)`` (or ``[low, high]``)."""
    if not isinstance(value, Real) or isinstance(value, bool):
        raise TypeError(f"{optimizer}: {argument} must be a real number, got "
                        f"{type(value).__name__} {value!r}")
    if value != value or value < low:
        raise invalid(optimizer, argument, value, f"{argument} must be >= {low}")
    if high is not None and (value >= high if high_open else value > high):
        bracket = ")" if high_open else "]"
        raise invalid(optimizer, argument, value, f"{argument} must be in [{low}, {high}{bracket}")


class Optimizer:
    """Base class of the optimizers: parameter groups, state, ``zero_grad``, ``step``, state dicts.

    ``params`` is an iterable of Parameters, or of dicts each holding ``"params"`` and any
    per-group options; options a group does not give are taken from ``defaults``.

    Subclasses define ``_check_group(group)`` (validate hyper-parameters, raising ``ValueError``
    that names the optimizer, the argument and the value), ``_expected_state(group)`` (the state
    keys each parameter of the group carries once it has been updated) and
    ``_update(param, grad, group)`` (one in-place update of ``param.data``, given the raw gradient
    array ``grad``).
    """

    #: state entries that are Python numbers (a checkpoint may hand them back as 0-d arrays)
    _scalar_state = frozenset({"step"})

    def __init__(self, params, defaults: dict):
        self.defaults = dict(defaults)
        self.state = ParamState()
        self.param_groups: list[dict] = []
        self._scratch_buffers: dict = {}
        name = type(self).__name__
        if isinstance(params, Tensor):
            raise TypeError(f"{name}: params must be an iterable of Tensors or of dicts, got a "
                            f"single Tensor of shape {tuple(params.shape)}; pass [tensor]")
        if isinstance(params, (set, frozenset)):
            raise TypeError(f"{name}: params must be an ordered iterable such as a list, not a "
                            "set (a set's order changes between runs, which breaks state_dict)")
        groups = list(params)
        if not groups:
            raise ValueError(f"{name}: got an empty parameter list")
        if not isinstance(groups[0], Mapping):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    # ---- hooks for subclasses ----------------------------------------------------------------
    def _check_group(self, group: dict) -> None:
        """Raise ``ValueError`` for an invalid hyper-parameter of ``group``."""

    def _expected_state(self, group: dict) -> set:
        """State keys every updated parameter of ``group`` carries."""
        return set()

    def _update(self, param, grad, group: dict) -> None:
        raise TypeError(f"{type(self).__name__} does not implement _update")

    # ---- parameter groups ----------------------------------------------------------------------
    def add_param_group(self, param_group: dict) -> None:
        """Add a group of parameters (with its own options) to be optimized from now on.

        Useful when fine-tuning: unfreeze layers and hand them to the optimizer, for instance
        with a smaller learning rate. A parameter may belong to only one group.
        """
        name = type(self).__name__
        index = len(self.param_groups)
        if not isinstance(param_group, Mapping):
            raise TypeError(f"{name}: parameter group {index} must be a dict with a 'params' "
                            f"entry, got {type(param_group).__name__}")
        if "params" not in param_group:
            raise ValueError(f"{name}: parameter group {index} has no 'params' entry")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, (set, frozenset)):
            raise TypeError(f"{name}: the params of group {index} must be an ordered iterable "
                            "such as a list, not a set")
        else:
            params = list(params)
        for position, param in enumerate(params):
            if not isinstance(param, Tensor):
                raise TypeError(f"{name}: parameter {position} of group {index} is a "
                                f"{type(param).__name__}, not a Tensor")
            if not param.is_leaf:
                raise ValueError(f"{name}: parameter {position} of group {index} is not a leaf "
                                 "Tensor (it was computed from others); optimize the leaves, "
                                 "or use .detach() to make a new leaf")
        ids = [id(p) for p in params]
        if len(set(ids)) != len(ids):
            raise ValueError(f"{name}: parameter group {index} lists the same parameter twice")
        taken = {id(p) for group in self.param_groups for p in group["params"]}
        if taken.intersection(ids):
            raise ValueError(f"{name}: some parameters of group {index} are already in another "
                             "parameter group")
        group = {**self.defaults}
        group.update((k, v) for k, v in param_group.items() if k != "params")
        group["params"] = params
        self._check_group(group)
        self.param_groups.append(group)

    # ---- the training loop -----------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's gradient: set it to ``None`` (default) or fill it with zeros."""
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                if set_to_none:
                    param.grad = None
                else:
                    param.grad.data[...] = 0
                    param.grad._bump_version()

    def step(self, closure=None):
        """Update every parameter that has a gradient; parameters whose ``grad`` is None are
        skipped.

        ``closure``, if given, re-evaluates the model and returns the loss (it runs with
        gradient recording enabled); its result is returned.
        """
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        for group in self.param_groups:
            for param in group["params"]:
                grad = param.grad
                if grad is None:
                    continue
                if grad.shape != param.shape:
                    raise ValueError(f"{type(self).__name__}.step: a parameter of shape "
                                     f"{tuple(param.shape)} has a gradient of shape "
                                     f"{tuple(grad.shape)}")
                with writable(param):  # a graph that saved param refuses to run afterwards
                    self._update(param, grad.data, group)
        return loss

    def _state_of(self, param) -> dict:
        """The state dict of ``param``, created empty on first use."""
        if param not in self.state:
            self.state[param] = {}
        return self.state[param]

    def _scratch(self, param, count: int) -> list:
        """``count`` scratch arrays shaped like ``param`` (same backend and dtype).

        They are views into one flat buffer per backend and dtype, kept between steps and sized
        for the largest parameter, so an update allocates no fresh temporaries; each is laid out
        as the parameter is (row- or column-major). Their contents are garbage on entry and are
        not part of the optimizer's state.
        """
        size = param.data.size
        key = (param.backend.name, param.data.dtype)
        buffer = self._scratch_buffers.get(key)
        if buffer is None or buffer.size < count * size:
            buffer = param.backend.xp.empty(count * size, dtype=param.data.dtype)
            self._scratch_buffers[key] = buffer
        shape, order = param.data.shape, memory_order(param.data)
        return [buffer[i * size:(i + 1) * size].reshape(shape, order=order)
                for i in range(count)]

    # ---- state dicts -----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """A snapshot
        ``{"state": {index: {...}}, "param_groups": [{..., "params": [index, ...]}]}``.

        Parameters are numbered 0, 1, 2 ... in the order the groups list them (PyTorch's format);
        state arrays are copied (a later ``step`` does not change the snapshot) and stay arrays of
        the parameters' backend.
        """
        indices: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            packed = {k: copy.deepcopy(v) for k, v in group.items() if k != "params"}
            packed["params"] = [indices.setdefault(id(p), len(indices)) for p in group["params"]]
            groups.append(packed)
        state = {}
        for group in self.param_groups:
            for param in group["params"]:
                if param in self.state:
                    state[indices[id(param)]] = {
                        key: value.copy() if is_array(value) else copy.deepcopy(value)
                        for key, value in self.state[param].items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: Mapping) -> None:
        """Restore hyper-parameters and state saved by ``state_dict`` (deep-copied, nothing shared).

        The optimizer must hold the same number of groups with the same number of parameters
        each, and every state array must match its parameter's shape; otherwise a ``ValueError``
        names the mismatch and nothing is changed. Arrays are converted to each parameter's
        backend and dtype, so a checkpoint saved from the GPU loads on the CPU and vice versa.
        """
        where = f"{type(self).__name__}.load_state_dict"
        if not isinstance(state_dict, Mapping) or not {"state", "param_groups"} <= set(state_dict):
            keys = (sorted(state_dict) if isinstance(state_dict, Mapping)
                    else type(state_dict).__name__)
            raise ValueError(f"{where}: expected a dict with 'state' and 'param_groups', got "
                             f"{keys}")
        saved_groups = list(state_dict["param_groups"])
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(f"{where}: the state dict has {len(saved_groups)} parameter groups "
                             f"but the optimizer has {len(self.param_groups)}")
        owner = {}
        for g, (saved, group) in enumerate(zip(saved_groups, self.param_groups)):
            if "params" not in saved:
                raise ValueError(f"{where}: parameter group {g} of the state dict has no 'params'")
            if len(saved["params"]) != len(group["params"]):
                raise ValueError(f"{where}: parameter group {g} has {len(saved['params'])} "
                                 f"parameters in the state dict but {len(group['params'])} in "
                                 "the optimizer")
            for position, (index, param) in enumerate(zip(saved["params"], group["params"])):
                owner[int(index)] = (param, g, position)

        new_groups = []
        for saved, group in zip(saved_groups, self.param_groups):
            restored = {k: copy.deepcopy(v) for k, v in saved.items() if k != "params"}
            restored["params"] = group["params"]
            self._check_group(restored)
            new_groups.append(restored)

        new_state = ParamState()
        for index, entries in state_dict["state"].items():
            index = int(index)  # keys come back as str from formats with str-only keys
            if index not in owner:
                raise ValueError(f"{where}: the state dict has state for parameter {index}, which "
                                 "none of its parameter groups lists")
            param, g, position = owner[index]
            label = f"parameter {index} (group {g}, position {position})"
            missing = self._expected_state(new_groups[g]) - set(entries)
            if missing:
                raise ValueError(f"{where}: the state of {label} lacks {sorted(missing)} "
                                 f"(it has {sorted(entries)})")
            new_state[param] = {key: self._restore_value(key, value, param, label, where)
                                for key, value in entries.items()}

        for group, restored in zip(self.param_groups, new_groups):
            group.clear()
            group.update(restored)
        self.state = new_state

    def _restore_value(self, key, value, param, label, where):
        if key in self._scalar_state:
            return value.item() if hasattr(value, "item") else value
        if is_array(value):
            if tuple(value.shape) != tuple(param.shape):
                raise ValueError(f"{where}: state {key!r} of {label} has shape "
                                 f"{tuple(value.shape)} but the parameter has shape "
                                 f"{tuple(param.shape)}")
            return param.backend.asarray(value, dtype=param.data.dtype).copy(
                order=memory_order(param.data))
        return copy.deepcopy(value)

    def __repr__(self):
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines.extend(f"    {key}: {group[key]}" for key in sorted(group) if key != "params")
        lines.append(")")
        return "\n".join(lines)
