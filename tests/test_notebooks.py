"""Every example converts with jupytext to a notebook that runs top to bottom: each notebook's
``--smoke`` version (a first cell that sets ``sys.argv``, as the command line would) is executed
with nbclient in a fresh kernel, working directory the repository root."""
from __future__ import annotations

from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")
nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(path.stem for path in (ROOT / "examples").glob("*.py"))


def smoke_notebook(name, out):
    """The notebook of ``examples/NAME.py``, with a first cell that makes it a --smoke run."""
    notebook = jupytext.read(ROOT / "examples" / f"{name}.py")
    argv = [f"{name}.py", "--smoke", "--out", str(out)]
    setup = (f"import sys\nsys.argv = {argv!r}\nsys.path.insert(0, {str(ROOT)!r})\n"
             "import matplotlib\nmatplotlib.use('Agg')")
    notebook.cells.insert(0, nbformat.v4.new_code_cell(setup))
    return notebook


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLES)
def test_the_examples_notebook_runs_top_to_bottom(name, tmp_path):
    notebook = smoke_notebook(name, tmp_path / "out")
    assert any(cell.cell_type == "markdown" for cell in notebook.cells), \
        f"examples/{name}.py has no markdown cells (# %% [markdown]) to read as a lesson"
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT)}})
    client.execute()
    assert (tmp_path / "out" / "metrics.json").is_file()   # execute() raises on a failing cell

