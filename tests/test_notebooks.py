"""Every example is a lesson that runs top to bottom as a notebook: each one, converted with
jupytext and its first cell switched to ``SMOKE = True`` as a teacher would, is executed with
nbclient in a fresh kernel (working directory a temporary folder), and every figure it writes is
also shown inline (image/png display data) where it is made."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")
nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(path.stem for path in (ROOT / "examples").glob("*.py"))
FIRST_CELL = "SMOKE = False  # True: tiny settings, seconds"


def smoke_notebook(name):
    """The notebook of ``examples/NAME.py`` with its first code cell set to ``SMOKE = True``."""
    notebook = jupytext.read(ROOT / "examples" / f"{name}.py")
    first = next(cell for cell in notebook.cells if cell.cell_type == "code")
    assert first.source.startswith(FIRST_CELL), \
        f"examples/{name}.py: the first code cell is not the documented `{FIRST_CELL}`"
    first.source = first.source.replace("SMOKE = False", "SMOKE = True", 1)
    return notebook


def outputs(notebook, kind):
    """The outputs of ``notebook``'s code cells whose data has MIME type ``kind`` (or, for
    "stream", its stream texts)."""
    found = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if kind == "stream" and output.output_type == "stream":
                found.append(output.text)
            elif kind in output.get("data", {}):
                found.append(output.data[kind])
    return found


def test_the_first_cell_is_documented_in_every_example():
    for name in EXAMPLES:
        smoke_notebook(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLES)
def test_the_examples_notebook_runs_top_to_bottom_and_shows_its_figures(name, tmp_path,
                                                                       monkeypatch):
    notebook = smoke_notebook(name)
    assert sum(cell.cell_type == "markdown" for cell in notebook.cells) >= 3, \
        f"examples/{name}.py has too few markdown cells (# %% [markdown]) to read as a lesson"
    paths = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))    # the kernel imports this checkout
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()                                            # raises on a failing cell
    out = tmp_path / "runs" / name
    assert (out / "metrics.json").is_file()
    figures = sorted(out.glob("*.png"))
    shown = outputs(notebook, "image/png")
    assert figures and len(shown) == len(figures), (len(shown), [f.name for f in figures])
    assert not any("IProgress not found" in text for text in outputs(notebook, "stream"))
