"""The package's imports flow one way: no circle of modules outside ``autograd/`` (whose Tensor
and operations need each other), counting imports inside functions too; the only deferred
imports allowed to point back up are the registries' bootstraps that ``tools/import_graph.py``
lists."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parent.parent / "tools" / "import_graph.py"


@pytest.fixture(scope="module")
def graph_tool():
    spec = importlib.util.spec_from_file_location("import_graph", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_circle_of_modules_outside_autograd(graph_tool):
    circles = graph_tool.circles(graph_tool.module_graph(bootstraps=False))
    outside = [" <-> ".join(circle) for circle in circles if not graph_tool.is_inherent(circle)]
    assert outside == []
    assert any(graph_tool.is_inherent(circle) for circle in circles)   # the reader sees them


def test_the_rooms_form_layers(graph_tool):
    """Sub-packages and top-level modules (the packages' sub-command modules counted with
    ``cli``) import each other in one direction: no room reaches back to one that imports it."""
    rooms = graph_tool.room_graph(graph_tool.module_graph(bootstraps=False))
    assert graph_tool.circles(rooms) == []


def test_every_import_of_the_package_names_one_of_its_modules(graph_tool):
    assert graph_tool.unresolved_imports() == []


def test_each_bootstrap_is_a_deferred_import_that_exists(graph_tool):
    graph = graph_tool.module_graph()
    for module, target in graph_tool.BOOTSTRAPS:
        assert graph[module].get(target) is True, (module, target)


def write_package(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_a_circle_through_a_function_level_relative_import_is_found(graph_tool, tmp_path):
    package = write_package(tmp_path / graph_tool.PACKAGE, {
        "__init__.py": "",
        "top.py": "from .low import helper\n",
        "low/__init__.py": "",
        "low/helper.py": "def f():\n    from .. import top\n    return top\n",
        "low/other.py": "import minitorch_nlp.low.helper as h\n",
    })
    graph = graph_tool.module_graph(package)
    assert graph["minitorch_nlp.top"] == {"minitorch_nlp.low.helper": False}
    assert graph["minitorch_nlp.low.helper"] == {"minitorch_nlp.top": True}
    assert graph["minitorch_nlp.low.other"] == {"minitorch_nlp.low.helper": False}
    assert graph_tool.circles(graph) == [["minitorch_nlp.low.helper", "minitorch_nlp.top"]]
    assert graph_tool.unresolved_imports(package) == []
    (package / "low" / "broken.py").write_text("def f():\n    from .nn import x\n",
                                               encoding="utf-8")
    assert graph_tool.unresolved_imports(package) == ["minitorch_nlp.low.broken: "
                                                      "minitorch_nlp.low.nn"]
    rooms = graph_tool.room_graph(graph)
    assert rooms["minitorch_nlp.top"] == {"minitorch_nlp.low": False}
    assert rooms["minitorch_nlp.low"] == {"minitorch_nlp.top": True}


def test_the_script_prints_rooms_arrows_and_circles():
    result = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True,
                            check=True)
    assert result.stdout.startswith("rooms and arrows")
    assert "  cli -> " in result.stdout
    assert "circles between modules, bootstraps aside: 1\n" in result.stdout
