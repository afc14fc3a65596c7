"""The equation registry: the paper's 111 equations, @equation, and finding the tests of each."""

import csv
import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from minitorch_nlp import cookbook

# The paper's equation index (number, line, section, what), as the project's seed gives it.
SEED_TABLE = Path(__file__).resolve().parent / "fixtures" / "seed_equations.tsv"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def empty_registry(monkeypatch):
    """A registry with nothing registered, so that a test's registrations do not leak."""
    monkeypatch.setattr(cookbook, "_implementations", {n: [] for n in cookbook.EQUATIONS})


def test_all_111_equations_numbered_in_order():
    assert list(cookbook.EQUATIONS) == list(range(1, 112))
    for number, eq in cookbook.EQUATIONS.items():
        assert eq.number == number
        assert eq.section and eq.description


@pytest.mark.parametrize(
    "number, section, description, chapter",
    [
        (
            1,
            "III. PRELIMANIERES TO MODERN NLP ARCHITECTURES",
            "seq2seq argmax decoding objective",
            3,
        ),
        (12, "IV-A.2. Queries, Keys, and Values", "scaled dot-product attention Z=W_SM V", 4),
        (60, "VI-C.2 QBERT", "Hessian-vector product", 6),
        (84, "VII-D DENSE PASSAGE RETRIEVAL: DPR", "DPR NLL with negatives", 7),
        (91, "VIII-B TRANSFORMER-XL", "relative-position attention score", 8),
        (111, "IX-E LINFORMER", "Linformer low-rank head", 9),
    ],
)
def test_spot_checks(number, section, description, chapter):
    eq = cookbook.EQUATIONS[number]
    assert (eq.section, eq.description, eq.chapter) == (section, description, chapter)
    assert cookbook.CHAPTERS[chapter]


def test_long_section_heading_kept_whole():
    assert cookbook.EQUATIONS[51].section == (
        "VI-B.3-A Analyzing Multi-Head Self-Attention: Specialized Heads Do the Heavy Lifting, "
        "Rest Can Be Pruned"
    )


def test_matches_the_seed_table():
    with SEED_TABLE.open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert len(rows) == len(cookbook.EQUATIONS)
    for row in rows:
        eq = cookbook.EQUATIONS[int(row["eq"])]
        assert (eq.section, eq.description) == (row["section"], row["what"])


def test_equation_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        cookbook.EQUATIONS[1].number = 2


def test_chapters_cover_every_equation():
    assert {eq.chapter for eq in cookbook.EQUATIONS.values()} == set(cookbook.CHAPTERS)


def test_decorator_registers_and_returns_unchanged(empty_registry):
    def attention(q, k, v):
        return q

    class Block:
        pass

    assert cookbook.equation(11, 12)(attention) is attention
    assert cookbook.equation(np.int64(12))(Block) is Block
    here = f"{__name__}.test_decorator_registers_and_returns_unchanged.<locals>"
    assert cookbook.implementations(11) == [f"{here}.attention"]
    assert cookbook.implementations(12) == [f"{here}.attention", f"{here}.Block"]
    assert cookbook.implementations(13) == []


def test_registering_twice_lists_once(empty_registry):
    def f():
        pass

    cookbook.equation(3)(f)
    cookbook.equation(3)(f)
    assert len(cookbook.implementations(3)) == 1


@pytest.mark.parametrize("bad", [0, 112, -1, 1000])
def test_bad_number_is_a_value_error_naming_it(bad, empty_registry):
    with pytest.raises(ValueError, match=rf"no equation {bad}\b"):
        cookbook.equation(5, bad)
    assert cookbook.implementations(5) == []
    with pytest.raises(ValueError, match=str(bad)):
        cookbook.implementations(bad)
    with pytest.raises(ValueError, match=str(bad)):
        cookbook.find_tests(bad)


@pytest.mark.parametrize("bad", ["12", 12.0, True, None])
def test_non_integer_number_is_a_type_error(bad):
    with pytest.raises(TypeError, match="integers 1..111"):
        cookbook.equation(bad)


def test_bare_decorator_is_refused():
    with pytest.raises(TypeError, match=r"@equation\(n\)"):

        @cookbook.equation
        def f():
            pass

    with pytest.raises(TypeError, match="at least one"):
        cookbook.equation()


def write_tests(root: Path, files: dict[str, str]) -> Path:
    tests = root / "tests"
    for name, source in files.items():
        path = tests / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return tests


def test_find_tests_reads_marks(tmp_path):
    tests = write_tests(
        tmp_path,
        {
            "test_attention.py": """
                import pytest
                from pytest import mark

                @pytest.mark.eq(12)
                def test_scaled():
                    pass

                @pytest.mark.sec4
                @pytest.mark.eq(11, 12)
                def test_weights():
                    pass

                @mark.eq(9)
                @pytest.mark.parametrize("n", [1, 2])
                def test_softmax(n):
                    pass

                @pytest.mark.parametrize("x", [pytest.param(1, marks=pytest.mark.eq(10)), 2])
                def test_context(x):
                    pass

                @pytest.mark.eq(12)
                def helper_not_a_test():
                    pass

                def test_unmarked():
                    pass

                @pytest.mark.eq(53)
                class TestHeads:
                    def test_one(self):
                        pass

                    @pytest.mark.eq(54)
                    def test_importance(self):
                        pass

                class TestRelative:
                    pytestmark = pytest.mark.eq(91)

                    def test_score(self):
                        pass

                class Helper:
                    @pytest.mark.eq(1)
                    def test_not_collected(self):
                        pass
                """,
            "test_reformer.py": """
                import pytest

                pytestmark = [pytest.mark.sec9, pytest.mark.eq(104, 105)]

                def test_inverse():
                    pass

                @pytest.mark.eq(105, 96)
                def test_lsh():
                    pass
                """,
            "models/test_gpt.py": """
                import pytest

                pytestmark: list = [pytest.mark.eq(20)]

                def test_embedding():
                    pass
                """,
            "reference/eq12.py": """
                import pytest

                @pytest.mark.eq(12)
                def test_in_a_non_test_file():
                    pass
                """,
        },
    )
    found = cookbook.tests_by_equation(tests)
    assert found == {
        9: ["tests/test_attention.py::test_softmax"],
        10: ["tests/test_attention.py::test_context[1]"],
        11: ["tests/test_attention.py::test_weights"],
        12: ["tests/test_attention.py::test_scaled", "tests/test_attention.py::test_weights"],
        20: ["tests/models/test_gpt.py"],
        53: ["tests/test_attention.py::TestHeads"],
        54: ["tests/test_attention.py::TestHeads::test_importance"],
        91: ["tests/test_attention.py::TestRelative"],
        96: ["tests/test_reformer.py::test_lsh"],
        104: ["tests/test_reformer.py"],
        105: ["tests/test_reformer.py"],
    }
    assert cookbook.find_tests(12, tests) == found[12]
    assert cookbook.find_tests(12, str(tests)) == found[12]
    assert cookbook.find_tests(1, tests) == []


def test_find_tests_names_the_marked_cases_of_a_parametrized_test(tmp_path):
    tests = write_tests(
        tmp_path,
        {
            "test_check.py": """
                import pytest

                @pytest.mark.parametrize("number", [
                    pytest.param(11, marks=[pytest.mark.eq(11), pytest.mark.sec4]),
                    pytest.param(12, marks=pytest.mark.eq(12)),
                    13])
                def test_spec(number):
                    pass

                @pytest.mark.parametrize("name, scale", [
                    pytest.param("plain", -0.5, marks=pytest.mark.eq(12)),
                    pytest.param("named", 2.0, id="custom", marks=pytest.mark.eq(12)),
                    ("other", 1.0)])
                def test_two_arguments(name, scale):
                    pass

                @pytest.mark.parametrize("shape", [pytest.param((2, 3), marks=pytest.mark.eq(20))])
                def test_object_values(shape):
                    pass

                @pytest.mark.eq(30)
                @pytest.mark.parametrize("x", [pytest.param(1, marks=pytest.mark.eq(30))])
                def test_marked_whole_and_case(x):
                    pass

                @pytest.mark.parametrize("x", [pytest.param(1, marks=pytest.mark.eq(40)), 1])
                def test_repeated_ids_fall_back(x):
                    pass

                @pytest.mark.parametrize("y", [0, 1])
                @pytest.mark.parametrize("x", [pytest.param(1, marks=pytest.mark.eq(50))])
                def test_stacked_parametrize_falls_back(x, y):
                    pass

                CASES = [pytest.param(1, marks=pytest.mark.eq(60))]

                @pytest.mark.parametrize("x", CASES)
                def test_computed_cases_fall_back(x):
                    pass
                """,
        },
    )
    found = cookbook.tests_by_equation(tests)
    assert found[11] == ["tests/test_check.py::test_spec[11]"]
    assert found[12] == ["tests/test_check.py::test_spec[12]",
                         "tests/test_check.py::test_two_arguments[custom]",
                         "tests/test_check.py::test_two_arguments[plain--0.5]"]
    assert found[20] == ["tests/test_check.py::test_object_values[shape0]"]
    assert found[30] == ["tests/test_check.py::test_marked_whole_and_case"]
    assert found[40] == ["tests/test_check.py::test_repeated_ids_fall_back"]
    assert found[50] == ["tests/test_check.py::test_stacked_parametrize_falls_back"]
    assert 60 not in found   # the cases are not in the source; nothing can be read without running


def _collected_ids(*arguments: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "--strict-markers",
         "-p", "no:cacheprovider", *arguments],
        check=False, capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


@pytest.mark.slow
def test_find_tests_ids_run_as_they_are_and_pytest_m_eqN_selects_the_same_tests():
    """The ids of :func:`cookbook.find_tests` name exactly what ``pytest -m eq12`` selects: one
    case of the parametrized ``check`` test (not all 111), and every other eq(12) test."""
    ids = cookbook.find_tests(12)
    check_ids = [i for i in ids if i.startswith("tests/test_check.py::")]
    assert check_ids == [
        "tests/test_check.py::test_the_librarys_implementation_passes_its_check[12]"]
    files = sorted({node_id.split("::")[0] for node_id in ids})
    by_marker = _collected_ids("-m", "eq12", *files)
    by_id = _collected_ids(*ids)
    assert by_marker and sorted(by_marker) == sorted(by_id)
    assert "tests/test_check.py::test_the_librarys_implementation_passes_its_check[11]" \
        not in by_marker


@pytest.mark.slow
def test_pytest_m_eqN_selects_a_case_marked_with_several_equations(tmp_path):
    tests = write_tests(tmp_path, {"test_marks.py": """
        import pytest

        @pytest.mark.eq(11, 12)
        def test_both():
            pass

        @pytest.mark.parametrize("n", [pytest.param(1, marks=pytest.mark.eq(111)), 2])
        def test_cases(n):
            pass
        """})
    (tests / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    eq(n): equation n\n")
    for marker, expected in [("eq11", ["test_both"]), ("eq12", ["test_both"]),
                             ("eq111", ["test_cases[1]"]), ("eq1", [])]:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "--strict-markers",
             "-p", "no:cacheprovider", "-m", marker, str(tests)],
            check=False, capture_output=True, text=True, cwd=tmp_path, timeout=120,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        collected = [line.split("::")[-1] for line in done.stdout.splitlines() if "::" in line]
        assert collected == expected, done.stdout[-2000:]


def test_find_tests_without_a_tests_folder(tmp_path):
    assert cookbook.find_tests(12, tmp_path / "missing") == []


def test_default_tests_folder_is_the_checkouts():
    checkout = Path(cookbook.__file__).resolve().parents[1]
    if (checkout / "tests").is_dir():
        assert cookbook._default_tests_dir() == checkout / "tests"
    assert isinstance(cookbook.tests_by_equation(), dict)


def test_import_all_imports_the_package():
    skipped = cookbook.import_all()
    assert all(name.startswith("minitorch_nlp.") for name in skipped)
    assert "minitorch_nlp.cli" in sys.modules
    assert "minitorch_nlp.__main__" not in sys.modules


def test_the_readme_and_the_check_page_show_how_to_run_one_equations_tests():
    for page in ("README.md", "docs/check.md", "docs/project.md"):
        assert "pytest -m eq12" in (ROOT / page).read_text(), page
