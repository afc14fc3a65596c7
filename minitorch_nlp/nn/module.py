"""``Module``: the base class of every layer and model.

A module holds three kinds of state, each registered by plain attribute assignment in
``__init__``:

* parameters (``self.weight = Parameter(...)``), trained by an optimizer;
* buffers (``self.register_buffer("mask", tensor)``), state that is not trained (causal masks,
  running statistics); persistent ones are saved in the ``state_dict``;
* sub-modules (``self.fc = Linear(4, 3)``), whose state is named with a dotted prefix
  (``fc.weight``).

Forward hooks (``register_forward_pre_hook`` / ``register_forward_hook``) let code outside a model
read or replace what a module receives and returns, e.g. to collect a teacher's hidden states
for distillation; they are not state and never enter the ``state_dict``.

Registered values are also ordinary instance attributes, so reading ``self.weight`` in
``forward`` costs what any attribute read costs.
"""
from __future__ import annotations

import contextlib
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from ..autograd import Tensor, dtypes, no_grad
from ..autograd.tensor import _HookHandle
from ..autograd.function import writable
from .parameter import Parameter

IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])
IncompatibleKeys.__doc__ = """What ``load_state_dict(strict=False)`` left out: keys of the model
absent from the state (``missing_keys``) and keys of the state the model does not have
(``unexpected_keys``)."""


class Module:
    """Base class of layers and models: subclass it, register state in ``__init__`` (after
    ``super().__init__()``) and compute in ``forward``; call the module to run ``forward``.

    ::

        class MLP(Module):
            def __init__(self):
                super().__init__()
                self.fc1 = Linear(784, 512)
                self.fc2 = Linear(512, 10)

            def forward(self, x):
                return self.fc2(F.relu(self.fc1(x)))
    """

    # Class-level empty defaults: a module without hooks pays one attribute test per call, and
    # the first registration gives the instance its own list.
    _forward_pre_hooks = ()
    _forward_hooks = ()

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_non_persistent_buffers", set())
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)

    def forward(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args, **kwargs):
        if self._forward_pre_hooks or self._forward_hooks:
            return self._call_with_hooks(args, kwargs)
        return self.forward(*args, **kwargs)

    # ---- forward hooks ---------------------------------------------------------------------
    def register_forward_pre_hook(self, hook: Callable, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> _HookHandle:
        """Call ``hook(module, args)`` before every ``forward``; ``args`` is the tuple of
        positional arguments. A hook that returns something other than None replaces them (a
        tuple, or a single value that becomes a 1-tuple).

        With ``with_kwargs=True`` the hook is ``hook(module, args, kwargs)`` and returns None or
        a pair ``(args, kwargs)`` that replaces both. Hooks run in registration order
        (``prepend=True`` puts this one first), each seeing what the previous one returned.
        Returns a handle whose ``remove()`` unregisters the hook."""
        return self._add_forward_hook("register_forward_pre_hook", "_forward_pre_hooks", hook,
                                      prepend, with_kwargs)

    def register_forward_hook(self, hook: Callable, *, prepend: bool = False,
                              with_kwargs: bool = False) -> _HookHandle:
        """Call ``hook(module, args, output)`` after every ``forward``; a hook that returns
        something other than None replaces the output (later hooks and the caller see the
        replacement).

        ``args`` are the positional arguments ``forward`` received (after the pre-hooks); with
        ``with_kwargs=True`` the hook is ``hook(module, args, kwargs, output)``. Hooks run in
        registration order (``prepend=True`` puts this one first). Returns a handle whose
        ``remove()`` unregisters the hook."""
        return self._add_forward_hook("register_forward_hook", "_forward_hooks", hook, prepend,
                                      with_kwargs)

    def _add_forward_hook(self, op, registry, hook, prepend, with_kwargs):
        if not callable(hook):
            raise TypeError(f"{type(self).__name__}.{op}: the hook must be callable, got "
                            f"{type(hook).__name__} {hook!r}")
        for name, flag in (("prepend", prepend), ("with_kwargs", with_kwargs)):
            if not isinstance(flag, bool):
                raise TypeError(f"{type(self).__name__}.{op}: {name} must be a bool, got "
                                f"{flag!r}")
        if registry not in self.__dict__:
            object.__setattr__(self, registry, [])
        hooks = self.__dict__[registry]
        entry = _ForwardHook(hook, with_kwargs)
        if prepend:
            hooks.insert(0, entry)
        else:
            hooks.append(entry)
        return _HookHandle(hooks, entry)

    def _call_with_hooks(self, args, kwargs):
        name = type(self).__name__
        for entry in tuple(self._forward_pre_hooks):
            if entry.with_kwargs:
                result = entry.hook(self, args, kwargs)
                if result is not None:
                    if not (isinstance(result, tuple) and len(result) == 2
                            and isinstance(result[1], dict)):
                        raise TypeError(f"{name}: a forward pre-hook registered with_kwargs=True "
                                        "must return None or a pair (args, kwargs), got "
                                        f"{type(result).__name__}")
                    args, kwargs = result
                    args = args if isinstance(args, tuple) else (args,)
            else:
                result = entry.hook(self, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
        output = self.forward(*args, **kwargs)
        for entry in tuple(self._forward_hooks):
            if entry.with_kwargs:
                result = entry.hook(self, args, kwargs, output)
            else:
                result = entry.hook(self, args, output)
            if result is not None:
                output = result
        return output

    # ---- registration ----------------------------------------------------------------------
    def _require_init(self, name, kind):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"cannot assign {kind} {name!r} before {type(self).__name__}."
                                 "__init__() has called super().__init__()")

    def _check_name(self, name, kind, registry):
        """``name`` must be a str without dots that names no attribute other than one of
        ``registry`` (a method or a plain attribute would be shadowed)."""
        if not isinstance(name, str):
            raise TypeError(f"{type(self).__name__}: a {kind} name must be a str, got "
                            f"{type(name).__name__}")
        if not name or "." in name:
            raise KeyError(f"{type(self).__name__}: {kind} name {name!r} must be non-empty and "
                           "contain no '.'")
        self._require_init(name, kind)
        if hasattr(type(self), name) or (name in self.__dict__ and name not in registry):
            raise KeyError(f"{type(self).__name__}: cannot register {kind} {name!r}: an "
                           "attribute of that name already exists")

    def _forget(self, name):
        self._parameters.pop(name, None)
        self._buffers.pop(name, None)
        self._non_persistent_buffers.discard(name)
        self._modules.pop(name, None)

    def __setattr__(self, name, value):
        if isinstance(value, Parameter):
            self._require_init(name, "parameter")
            self._forget(name)
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._require_init(name, "module")
            self._forget(name)
            self._modules[name] = value
        elif name in self.__dict__.get("_parameters", ()):
            if value is not None:
                raise TypeError(f"{type(self).__name__}.{name} is a parameter: assign a "
                                f"Parameter or None, not {type(value).__name__}")
            self._parameters[name] = None
        elif name in self.__dict__.get("_modules", ()):
            if value is not None:
                raise TypeError(f"{type(self).__name__}.{name} is a sub-module: assign a Module "
                                f"or None, not {type(value).__name__}")
            self._modules[name] = None
        elif name in self.__dict__.get("_buffers", ()):
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"{type(self).__name__}.{name} is a buffer: assign a Tensor or "
                                f"None, not {type(value).__name__}")
            self._buffers[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        if "_parameters" in self.__dict__:
            self._forget(name)
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register ``param`` (a Parameter, or None for an absent optional one) as ``name``."""
        self._check_name(name, "parameter", self.__dict__.get("_parameters", ()))
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter: {name!r} must be a Parameter or None, got "
                            f"{type(param).__name__} (wrap it: Parameter(tensor))")
        if param is None:
            self._forget(name)
            self._parameters[name] = None
            object.__setattr__(self, name, None)
        else:
            setattr(self, name, param)

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Register ``tensor`` (or None) as a buffer: state that moves with the module but is not
        trained; ``persistent=False`` keeps it out of the ``state_dict``."""
        self._check_name(name, "buffer", self.__dict__.get("_buffers", ()))
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer: {name!r} must be a Tensor or None, got "
                            f"{type(tensor).__name__}")
        if isinstance(tensor, Parameter):
            raise TypeError(f"register_buffer: {name!r} is a Parameter; assign it as an attribute "
                            "to register it as a parameter")
        self._forget(name)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent_buffers.add(name)
        object.__setattr__(self, name, tensor)

    def add_module(self, name: str, module: Module | None) -> None:
        """Register ``module`` (or None) as the sub-module ``name``."""
        self._check_name(name, "module", self.__dict__.get("_modules", ()))
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: {name!r} must be a Module or None, got "
                            f"{type(module).__name__}")
        self._forget(name)
        self._modules[name] = module
        object.__setattr__(self, name, module)

    register_module = add_module

    def get_submodule(self, target: str) -> Module:
        """The sub-module at dotted path ``target`` ("" is this module)."""
        module = self
        walked = []
        for part in target.split(".") if target else []:
            child = module._modules.get(part)
            if child is None:
                where = ".".join(walked) or type(self).__name__
                raise AttributeError(f"get_submodule: {where} has no sub-module {part!r} "
                                     f"(looking for {target!r})")
            walked.append(part)
            module = child
        return module

    # ---- traversal ---------------------------------------------------------------------------
    def named_modules(self, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Module]]:
        """(dotted name, module) for this module and every sub-module, parents first; a module
        reached twice is given once unless ``remove_duplicate=False``."""
        seen = set()

        def walk(module, name):
            if remove_duplicate:
                if id(module) in seen:
                    return
                seen.add(id(module))
            yield name, module
            for child_name, child in module._modules.items():
                if child is not None:
                    yield from walk(child, f"{name}.{child_name}" if name else child_name)

        return walk(self, prefix)

    def modules(self) -> Iterator[Module]:
        for _, module in self.named_modules():
            yield module

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """(name, module) for the direct sub-modules, each once."""
        seen = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self) -> Iterator[Module]:
        for _, module in self.named_children():
            yield module

    def _named_members(self, registry, prefix, recurse, remove_duplicate, skip=None):
        seen = set()
        modules = self.named_modules(prefix, remove_duplicate) if recurse else [(prefix, self)]
        for module_name, module in modules:
            excluded = getattr(module, skip) if skip else ()
            for name, value in getattr(module, registry).items():
                if value is None or name in excluded:
                    continue
                if remove_duplicate:
                    if id(value) in seen:
                        continue
                    seen.add(id(value))
                yield (f"{module_name}.{name}" if module_name else name), value

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, parameter) in registration order, parents first; a parameter shared
        between modules (tied weights) is given once, under the first name that reaches it."""
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        """(dotted name, buffer), persistent or not, like ``named_parameters``."""
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, buffer in self.named_buffers(recurse=recurse):
            yield buffer

    def _tensors(self):
        """Every parameter and buffer, each once."""
        seen = set()
        for _, t in list(self.named_parameters()) + list(self.named_buffers()):
            if id(t) not in seen:
                seen.add(id(t))
                yield t

    # ---- modes -------------------------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Set training mode (``True``) or evaluation mode (``False``) on this module and every
        sub-module; layers such as ``Dropout`` read ``self.training``. Returns self."""
        if not isinstance(mode, bool):
            raise TypeError(f"train: mode must be a bool, got {mode!r}")
        for module in self.modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self) -> Module:
        """``train(False)``."""
        return self.train(False)

    @contextlib.contextmanager
    def inference(self) -> Iterator[Module]:
        """``with model.inference():`` evaluation mode and no graph (generating, decoding,
        evaluating), then the mode the model was in is put back."""
        was_training = self.training
        self.eval()
        try:
            with no_grad():
                yield self
        finally:
            self.train(was_training)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Freeze (``False``) or unfreeze every parameter. Returns self."""
        for param in self.parameters():
            param.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every parameter's ``.grad`` (or, with ``set_to_none=False``, fill it with zeros)."""
        for param in self.parameters():
            if param.grad is None:
                continue
            if set_to_none:
                param.grad = None
            elif param.grad._node is None:
                param.grad.data.fill(0)
                param.grad._bump_version()
            else:
                param.grad = Tensor._wrap(param.backend.xp.zeros_like(param.grad.data),
                                          param.backend)

    def apply(self, fn: Callable[[Module], object]) -> Module:
        """Call ``fn(module)`` on every sub-module, children before parents (e.g. a custom
        initialisation), then on this module. Returns self."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def to(self, target) -> Module:
        """Move every parameter and buffer in place to another backend (``to("numba")``), or
        cast the floating ones to another float dtype (``to(mt.float64)``). Gradients follow.
        Returns self; the parameter objects stay the same, so an optimizer built on them still
        holds them (but its state is not moved)."""
        from ..backends import Backend, available_backends, get_backend

        if isinstance(target, Backend) or (isinstance(target, str)
                                           and target in available_backends()):
            destination = get_backend(target)

            def convert(t):
                if t.backend is destination:
                    return None
                return destination.asarray(t.backend.to_numpy(t.data)), destination
        else:
            dtype = dtypes.resolve(target)
            if not dtypes.is_floating(dtype):
                raise TypeError(f"Module.to: cast to a floating dtype, not {dtype}")

            def convert(t):
                if not dtypes.is_floating(t.dtype) or t.dtype == dtype:
                    return None
                return t.data.astype(dtype), t.backend

        with no_grad():
            for t in self._tensors():
                moved = convert(t)
                if moved is None:
                    continue
                t.data, t._backend = moved
                t._bump_version()
                if t.grad is not None:
                    grad = convert(t.grad)
                    if grad is not None:
                        t.grad = Tensor._wrap(*grad)
        return self

    def num_parameters(self, trainable_only: bool = False) -> int:
        """How many numbers the parameters hold (shared parameters counted once)."""
        return sum(p.size for p in self.parameters() if p.requires_grad or not trainable_only)

    # ---- state dicts ---------------------------------------------------------------------------
    def state_dict(self, prefix: str = "", keep_vars: bool = False) -> dict[str, Tensor]:
        """Dotted name -> tensor for every parameter and persistent buffer, in registration order.

        As in PyTorch, a tensor shared between modules appears under every name that reaches it.
        The values share memory with the module (``detach()``-ed, or the objects themselves with
        ``keep_vars=True``): save or copy them, do not modify them in place.
        """
        state = {}
        for module_name, module in self.named_modules(prefix, remove_duplicate=False):
            base = f"{module_name}." if module_name else ""
            for name, param in module._parameters.items():
                if param is not None:
                    state[base + name] = param if keep_vars else param.detach()
            for name, buffer in module._buffers.items():
                if buffer is not None and name not in module._non_persistent_buffers:
                    state[base + name] = buffer if keep_vars else buffer.detach()
        return state

    def load_state_dict(self, state_dict: Mapping[str, Tensor | np.ndarray],
                        strict: bool = True) -> IncompatibleKeys:
        """Copy the values of ``state_dict`` (name -> Tensor or NumPy array) into this module's
        parameters and persistent buffers, in place (cast to each one's dtype).

        Everything is checked before anything is copied, and every problem is reported in one
        ``ValueError``: keys the model has but the state lacks ("missing"), keys the state has but
        the model lacks ("unexpected") -- both tolerated when ``strict=False`` -- and values whose
        shape differs from the model's (never tolerated). Returns ``IncompatibleKeys(missing_keys,
        unexpected_keys)``.
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"load_state_dict: expected a mapping of names to tensors, got "
                            f"{type(state_dict).__name__}")
        expected = self.state_dict(keep_vars=True)
        missing = [name for name in expected if name not in state_dict]
        unexpected = [name for name in state_dict if name not in expected]
        problems = []
        if strict and missing:
            problems.append(f"missing keys {missing}")
        if strict and unexpected:
            problems.append(f"unexpected keys {unexpected}")
        copies = []
        for name, target in expected.items():
            if name not in state_dict:
                continue
            array = _checkpoint_array(state_dict[name], target, name)
            if tuple(array.shape) != target.shape:
                problems.append(f"shape mismatch for {name}: checkpoint {tuple(array.shape)} vs "
                                f"model {target.shape}")
            copies.append((target, array))
        if problems:
            raise ValueError("load_state_dict: " + "; ".join(problems))
        with no_grad():
            for target, array in copies:
                with writable(target) as data:
                    data[...] = array
        return IncompatibleKeys(missing, unexpected)

    # ---- printing ------------------------------------------------------------------------------
    def extra_repr(self) -> str:
        """The arguments shown inside ``Name(...)``; layers override it."""
        return ""

    def __repr__(self):
        lines = self.extra_repr().split("\n") if self.extra_repr() else []
        children = [f"({name}): " + _indent(repr(module)) for name, module in self._modules.items()]
        if not children and len(lines) <= 1:
            return f"{type(self).__name__}({lines[0] if lines else ''})"
        body = "\n".join("  " + line for line in lines + children)
        return f"{type(self).__name__}(\n{body}\n)"


@contextlib.contextmanager
def replaced_tensors(module: Module, tensors: Mapping[str, Tensor]) -> Iterator[Module]:
    """Within the ``with`` block, ``module`` computes with ``tensors`` (dotted name -> Tensor,
    names as ``named_parameters`` / ``named_buffers`` give them) in place of those parameters
    and buffers, so gradients flow to the given tensors; afterwards the module is exactly as it
    was, even if the block raises. A name that is neither a parameter nor a buffer of
    ``module``, or a tensor whose shape differs from the one it replaces, raises."""
    known = dict(module.named_parameters(remove_duplicate=False))
    known.update(module.named_buffers(remove_duplicate=False))
    swaps = []
    try:
        for name, tensor in tensors.items():
            if name not in known:
                raise KeyError(f"replaced_tensors: {type(module).__name__} has no parameter or "
                               f"buffer {name!r}; it has {sorted(known)}")
            if not isinstance(tensor, Tensor):
                raise TypeError(f"replaced_tensors: {name!r} must be a Tensor, got "
                                f"{type(tensor).__name__}")
            if known[name] is not None and tuple(tensor.shape) != tuple(known[name].shape):
                raise ValueError(f"replaced_tensors: {name!r} has shape {tuple(tensor.shape)}, "
                                 f"the module's has {tuple(known[name].shape)}")
            owner_name, _, leaf = name.rpartition(".")
            owner = module.get_submodule(owner_name)
            swaps.append((owner, leaf, owner.__dict__[leaf]))
            object.__setattr__(owner, leaf, tensor)
        yield module
    finally:
        for owner, leaf, original in reversed(swaps):
            object.__setattr__(owner, leaf, original)


def functional_call(module: Module, tensors: Mapping[str, Tensor], args=(),
                    kwargs: dict | None = None):
    """``module(*args, **kwargs)`` computed with ``tensors`` in place of some of its parameters
    and buffers (see :func:`replaced_tensors`; ``args`` may be a single Tensor or a tuple).

    Gradients flow to the given tensors, not to the module's own Parameters, and the module is
    left as it was. This is how a module's maths is checked against a reference that takes its
    weights as arguments (``minitorch_nlp.testing.equation_specs``), and how a function of the
    weights is differentiated (meta-learning, Hessians with respect to one layer)."""
    with replaced_tensors(module, tensors):
        return module(*(args if isinstance(args, tuple) else (args,)), **(kwargs or {}))


class _ForwardHook:
    """One registration of a forward (pre-)hook. Compared by identity, so that the same function
    registered twice is two entries and each handle removes its own."""

    __slots__ = ("hook", "with_kwargs")

    def __init__(self, hook, with_kwargs):
        self.hook, self.with_kwargs = hook, with_kwargs


def _indent(text):
    return text.replace("\n", "\n  ")


def _checkpoint_array(value, target, name):
    """``value`` (a Tensor or anything ``numpy.asarray`` takes) as an array of ``target``'s
    backend and dtype."""
    if isinstance(value, Tensor):
        array = value.data if value.backend is target.backend else value.numpy()
    else:
        array = np.asarray(value)
        if array.dtype.kind not in "biuf":
            raise TypeError(f"load_state_dict: the value for {name!r} is a "
                            f"{type(value).__name__} of dtype {array.dtype}, not numbers")
    return target.backend.asarray(array, dtype=target.dtype)
