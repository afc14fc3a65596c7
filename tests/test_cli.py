"""The minitorch-nlp command: `equations` and `example`, run in-process through cli.main(argv)."""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from minitorch_nlp import cli, cookbook


@pytest.fixture
def fake_checkout(monkeypatch, tmp_path):
    """A registry holding one known implementation and a tests folder holding one known test."""
    cookbook.import_all()   # modules imported later would register into the fake registry
    registry = {n: [] for n in cookbook.EQUATIONS}
    registry[12] = ["minitorch_nlp.functional.scaled_dot_product_attention"]
    monkeypatch.setattr(cookbook, "_implementations", registry)
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_attention.py").write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.mark.eq(12)
            def test_scaled():
                pass
            """
        )
    )
    monkeypatch.setattr(cookbook, "_default_tests_dir", lambda: tests)


def run(capsys, *argv):
    assert cli.main(list(argv)) == 0
    return capsys.readouterr().out


def test_equations_json(capsys, fake_checkout):
    rows = json.loads(run(capsys, "equations", "--json"))
    assert [row["number"] for row in rows] == list(range(1, 112))
    for row in rows:
        assert set(row) == {"number", "section", "description", "implementations", "tests"}
        eq = cookbook.EQUATIONS[row["number"]]
        assert (row["section"], row["description"]) == (eq.section, eq.description)
    assert "minitorch_nlp.functional.scaled_dot_product_attention" in rows[11]["implementations"]
    assert rows[11]["tests"] == ["tests/test_attention.py::test_scaled"]
    assert rows[10]["tests"] == []


@pytest.mark.parametrize(
    "section, numbers",
    [
        ("sec4", range(11, 30)),
        ("4", range(11, 30)),
        ("IV", range(11, 30)),
        ("ix", range(92, 112)),
        ("elmo", range(13, 18)),
        ("VII-C REALM", range(72, 81)),
    ],
)
def test_equations_section_filter(capsys, section, numbers):
    rows = json.loads(run(capsys, "equations", "--json", "--section", section))
    assert [row["number"] for row in rows] == list(numbers)


@pytest.mark.parametrize("section", ["no such heading", "sec10", "2", "XII"])
def test_equations_unknown_section_lists_the_headings(capsys, section):
    assert cli.main(["equations", "--section", section]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"minitorch-nlp: error: --section {section}: no equation is in that")
    assert "IX-E LINFORMER" in err and err.count("\n") == 1


def test_equations_table(capsys, fake_checkout):
    out = run(capsys, "equations")
    lines = out.splitlines()
    assert lines[0].split() == ["eq", "what", "implemented", "by", "tests"]
    assert "IV-A.2. Queries, Keys, and Values" in lines
    row = next(line for line in lines if line.split()[:1] == ["12"])
    assert "scaled dot-product attention" in row
    assert "minitorch_nlp.functional.scaled_dot_product_attention" in row
    assert row.endswith("tests/test_attention.py::test_scaled")
    assert lines[-1] == "111 equations: 1 with code registered, 1 with tests"


def test_example_loss_goes_down(capsys):
    out = run(capsys, "example", "--steps", "50", "--seed", "1", "--log-every", "10")
    losses = [float(x) for x in re.findall(r"^step\s+\d+\s+loss (\S+)$", out, re.MULTILINE)]
    assert len(losses) == 6  # step 1, 10, 20, ..., 50
    assert losses[-1] < 0.8 * losses[0]
    assert re.search(r"^accuracy: train \d+\.\d%, fresh points \d+\.\d%", out, re.MULTILINE)


def test_example_is_reproducible(capsys):
    first = run(capsys, "example", "--steps", "5", "--seed", "3")
    second = run(capsys, "example", "--steps", "5", "--seed", "3")
    assert re.sub(r"in \S+ s", "", first) == re.sub(r"in \S+ s", "", second)


def test_example_on_the_numpy_backend(capsys):
    out = run(capsys, "example", "--steps", "2", "--backend", "numpy")
    assert "backend numpy" in out


def test_example_unknown_backend(capsys):
    assert cli.main(["example", "--backend", "no-such-backend"]) == 2
    assert capsys.readouterr().err.startswith("minitorch-nlp: error: --backend no-such-backend")


def test_example_bad_steps(capsys):
    assert cli.main(["example", "--steps", "0"]) == 2
    assert capsys.readouterr().err == "minitorch-nlp: error: --steps must be at least 1, got 0\n"


def test_a_command_is_required(capsys):
    assert cli.main([]) == 2
    assert capsys.readouterr().err.startswith("minitorch-nlp: error: the following arguments")


def test_python_dash_m():
    result = subprocess.run(
        [sys.executable, "-m", "minitorch_nlp", "equations", "--section", "LINFORMER"],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert "Linformer low-rank head" in result.stdout


@pytest.mark.parametrize("first", ["minitorch_nlp.compress.distill_commands",
                                   "minitorch_nlp.retrieval.commands",
                                   "minitorch_nlp.distributed.commands",
                                   "minitorch_nlp.cli.common"])
def test_a_sub_command_module_imported_first_leaves_the_console_script_whole(first):
    """The console script is ``minitorch_nlp.cli:main``: it must resolve to the function in a
    process that imported a package's sub-command module before the command line."""
    code = (f"import importlib; importlib.import_module({first!r})\n"
            "from importlib.metadata import EntryPoint\n"
            "main = EntryPoint('minitorch-nlp', 'minitorch_nlp.cli:main', None).load()\n"
            "raise SystemExit(main(['plan', '--model', 'gpt3-small', '--gpus', '8']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr
    assert "gpt3-small on 8 devices" in result.stdout
