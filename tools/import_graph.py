"""The package's structure as rooms and arrows, and its import circles.

A room is a sub-package of ``minitorch_nlp`` (``nn``, ``models`` ...) or one of its top-level
modules (``training``, ``checks`` ...); an arrow ``a -> b`` says that a module of room ``a``
imports one of room ``b``. Imports are read with ``ast`` from the source, at module level and
inside functions (a deferred import is still an arrow: it only moves the circle to run time).
A circle is a set of modules (or rooms) that reach each other through imports.

    python tools/import_graph.py            rooms, arrows and circles
    python tools/import_graph.py --modules  every module's imports as well
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PACKAGE = "minitorch_nlp"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE
# Tensor and its operations are one unit: the ops need Tensor and Tensor's methods call the ops.
INHERENT = (f"{PACKAGE}.autograd",)


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module that ``from ... import`` names."""
    if node.level == 0:
        return node.module or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def imports(module: str, path: Path, modules: dict[str, Path],
            unresolved: list[str] | None = None) -> dict[str, bool]:
    """The package's modules that ``module`` imports, each with whether the import is deferred
    (only inside functions); an import of the package that names no module of it is appended to
    ``unresolved`` (``module: name``)."""
    found: dict[str, bool] = {}

    def add(target: str, deferred: bool) -> None:
        while target and target not in modules:   # `import a.b.c`'s attribute path
            target = target.rpartition(".")[0]
        if target and target != module:
            found[target] = found.get(target, True) and deferred

    def check(target: str) -> None:
        if unresolved is not None and target.startswith(PACKAGE) and target not in modules:
            unresolved.append(f"{module}: {target}")

    def visit(node: ast.AST, deferred: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = deferred or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                   ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    check(alias.name)
                    add(alias.name, inner)
            elif isinstance(child, ast.ImportFrom):
                base = _base(module, path.name == "__init__.py", child)
                check(base)
                for alias in child.names:
                    name = f"{base}.{alias.name}"
                    add(name if name in modules else base, inner)
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), False)
    return {target: deferred for target, deferred in found.items()
            if target.startswith(PACKAGE)}


def module_graph(root: Path = ROOT, bootstraps: bool = True) -> dict[str, dict[str, bool]]:
    """Each module's imports of the package's modules (value: deferred); without the registries'
    ``BOOTSTRAPS`` when ``bootstraps`` is False."""
    modules = module_files(root)
    graph = {module: imports(module, path, modules) for module, path in modules.items()}
    if not bootstraps:
        for module, target in BOOTSTRAPS:
            graph.get(module, {}).pop(target, None)
    return graph


# The registries' bootstraps: a lower layer looks a name up in a registry that the higher layer's
# modules fill when they are imported. These deferred imports are the only arrows allowed to
# point up or to close a circle.
BOOTSTRAPS = {
    (f"{PACKAGE}.io.huggingface", f"{PACKAGE}.models.registry"):
        "from_pretrained imports the model modules, which register their architectures",
    (f"{PACKAGE}.backends.numpy_backend", f"{PACKAGE}.backends"):
        "a backend unpickles as its name, looked up in the backend registry",
}


def unresolved_imports(root: Path = ROOT) -> list[str]:
    """Imports of the package that name no module of it (``module: name``)."""
    modules = module_files(root)
    found: list[str] = []
    for module, path in modules.items():
        imports(module, path, modules, found)
    return found


def room(module: str) -> str:
    """The room of ``module``: its sub-package or top-level module (the package's own
    ``__init__`` is the room ``minitorch_nlp``, the public API); the packages' sub-command
    modules (``compress/commands.py`` ...) belong to the command line, ``cli``."""
    parts = module.split(".")
    if parts[-1].endswith("commands"):
        return f"{PACKAGE}.cli"
    return ".".join(parts[:2])


def room_graph(graph: dict[str, dict[str, bool]]) -> dict[str, dict[str, bool]]:
    """Arrows between rooms (value: every import behind the arrow is deferred)."""
    rooms: dict[str, dict[str, bool]] = {}
    for module, targets in graph.items():
        arrows = rooms.setdefault(room(module), {})
        for target, deferred in targets.items():
            if room(target) != room(module):
                arrows[room(target)] = arrows.get(room(target), True) and deferred
    return rooms


def circles(graph: dict[str, dict[str, bool]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, {}):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found)


def is_inherent(circle: list[str]) -> bool:
    return all(member.startswith(INHERENT) for member in circle)


def _short(name: str) -> str:
    return name.removeprefix(PACKAGE + ".") if name != PACKAGE else PACKAGE


def _arrows(targets: dict[str, bool]) -> str:
    return ", ".join(_short(t) + (" (deferred)" if deferred else "")
                     for t, deferred in sorted(targets.items())) or "-"


def report(root: Path = ROOT, modules: bool = False) -> str:
    graph = module_graph(root)
    rooms = room_graph(graph)
    without_bootstraps = module_graph(root, bootstraps=False)
    lines = ["rooms and arrows (a -> b: a module of a imports one of b)"]
    lines += [f"  {_short(name)} -> {_arrows(targets)}" for name, targets in sorted(rooms.items())]
    if modules:
        lines.append("modules")
        lines += [f"  {_short(name)} -> {_arrows(targets)}"
                  for name, targets in sorted(graph.items())]
    lines.append("registries' bootstraps (deferred imports allowed to point up)")
    lines += [f"  {_short(a)} -> {_short(b)}: {why}" for (a, b), why in BOOTSTRAPS.items()]
    for title, found in (("circles between rooms, bootstraps aside",
                          circles(room_graph(without_bootstraps))),
                         ("circles between modules", circles(graph)),
                         ("circles between modules, bootstraps aside",
                          circles(without_bootstraps))):
        lines.append(f"{title}: {len(found)}")
        lines += ["  " + " <-> ".join(map(_short, circle))
                  + (" (inherent: the tensor and its ops)" if is_inherent(circle) else "")
                  for circle in found]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", action="store_true", help="every module's imports too")
    print(report(modules=parser.parse_args(argv).modules))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
