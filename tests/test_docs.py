"""The documentation site: every equation with code has its entry on its chapter's page (the
pages are generated from the registry by ``docs/gen_pages.py``; ``mkdocs build --strict`` in
``.ci/run`` builds them), and the engine page's computation graph is drawn from a real graph."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from minitorch_nlp import cookbook
from minitorch_nlp.testing import specs

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"docs_{name}", DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pages():
    gen_pages = _load("gen_pages")
    cookbook.import_all()
    tests = cookbook.tests_by_equation()
    return {chapter: gen_pages.section_entries(chapter, tests) for chapter in cookbook.CHAPTERS}


def test_every_equation_with_code_has_its_entry_with_code_and_tests(pages):
    tests = cookbook.tests_by_equation()
    for number, equation in cookbook.EQUATIONS.items():
        page = pages[equation.chapter]
        entry = re.search(rf"^#### Eq {number}: .*?(?=^#### |\Z)", page, re.M | re.S)
        assert entry, f"eq {number} has no entry on the sec{equation.chapter} page"
        entry = entry.group()
        code = cookbook.implementations(number)
        if not code:
            assert "Not implemented yet." in entry
            continue
        for name in code:
            assert f"[`{name}`][{name}]" in entry and f'"Source of `{name}`"' in entry
        for node in tests.get(number, []):
            assert f"- `{node}`" in entry
        assert ("minitorch-nlp check" in entry) == (number in specs)


def test_the_equations_are_typeset_from_the_paper(pages):
    assert "$$\ny^* = \\operatorname{argmax} P(y_t | y_1, y_2, y_3, \\dots, y_{t-1})\n$$" in pages[3]
    assert "#### Eq 12: scaled dot-product attention Z=W_SM V" in pages[4]


def test_the_engine_page_draws_the_recorded_graph():
    graph = _load("hooks").computation_graph()
    for box in ("SumBackward", "TanhBackward", "AddBackward", "MulBackward",
                "x: AccumulateGrad", "w: AccumulateGrad", "b: AccumulateGrad"):
        assert box in graph
    assert "<!-- computation-graph -->" in (DOCS / "engine.md").read_text()


def test_the_check_page_lists_every_spec():
    table = _load("hooks").check_specs()
    for number, spec in specs.items():
        assert f"| {number} | `{spec.signature}` |" in table
    assert "<!-- check-specs -->" in (DOCS / "check.md").read_text()
