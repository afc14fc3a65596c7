"""Containers of modules: ``Sequential`` (a pipeline), ``ModuleList`` and ``ModuleDict`` (modules
kept in a list or a dict so that their parameters are registered)."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping

from .module import Module

__all__ = ["ModuleDict", "ModuleList", "Sequential"]


def _position(index, length, container):
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(f"{container} indices must be ints or slices, not {type(index).__name__}")
    if not -length <= index < length:
        raise IndexError(f"{container} index {index} is out of range for {length} modules")
    return index % length


class _Numbered(Module):
    """Modules registered under the names "0", "1", ... (``ModuleList``, ``Sequential``)."""

    def _renumber(self, modules):
        for name in list(self._modules):
            delattr(self, name)
        for i, module in enumerate(modules):
            self.add_module(str(i), module)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, index):
        modules = list(self._modules.values())
        if isinstance(index, slice):
            return ModuleList(modules[index])
        return modules[_position(index, len(modules), type(self).__name__)]

    def __setitem__(self, index, module):
        if isinstance(index, slice):
            raise TypeError(f"{type(self).__name__}: assign one module at an int index, not a "
                            "slice")
        name = list(self._modules)[_position(index, len(self), type(self).__name__)]
        self.add_module(name, module)

    def __delitem__(self, index):
        modules = list(self._modules.values())
        if isinstance(index, slice):
            del modules[index]
        else:
            del modules[_position(index, len(modules), type(self).__name__)]
        self._renumber(modules)

    def append(self, module: Module | None) -> _Numbered:
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module | None]) -> _Numbered:
        for module in modules:
            self.append(module)
        return self

    def insert(self, index: int, module: Module | None) -> None:
        modules = list(self._modules.values())
        modules.insert(index, module)
        self._renumber(modules)


class Sequential(_Numbered):
    """Modules applied in order, each to the previous one's output.

    ``Sequential(a, b, c)`` names them "0", "1", "2"; ``Sequential(OrderedDict(name=module, ...))``
    keeps the given names. Indexing by int gives a module; by slice, a new ``Sequential`` of the
    same modules (shared, not copied).
    """

    def __init__(self, *modules: Module | Mapping[str, Module]) -> None:
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], (OrderedDict, dict)):
            for name, module in modules[0].items():
                self.add_module(name, module)
        else:
            for i, module in enumerate(modules):
                self.add_module(str(i), module)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Sequential(OrderedDict(list(self._modules.items())[index]))
        return super().__getitem__(index)

    def forward(self, x):
        for module in self._modules.values():
            x = module(x)
        return x


class ModuleList(_Numbered):
    """A list of modules whose parameters belong to the owner (a plain Python list would hide
    them). Supports indexing, slicing, ``len``, iteration, ``append``, ``extend``, ``insert`` and
    ``del``."""

    def __init__(self, modules: Iterable[Module | None] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __iadd__(self, modules):
        return self.extend(modules)

    def forward(self, *args, **kwargs):
        raise TypeError("ModuleList has no forward(): iterate over it and call its "
                                  "modules")


class ModuleDict(Module):
    """A dict of modules (insertion-ordered) whose parameters belong to the owner."""

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None
                 ) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        if key not in self._modules:
            raise KeyError(f"ModuleDict has no module {key!r}; it has {list(self._modules)}")
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        self[key]  # noqa: B018 - raises the KeyError that names the keys
        delattr(self, key)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def pop(self, key: str) -> Module:
        module = self[key]
        del self[key]
        return module

    def clear(self) -> None:
        for key in list(self._modules):
            delattr(self, key)

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        items = modules.items() if isinstance(modules, Mapping) else modules
        for key, module in items:
            self[key] = module

    def forward(self, *args, **kwargs):
        raise TypeError("ModuleDict has no forward(): look its modules up and call them")
