"""Course mode: ``course new`` (by sections or equations) writes stubs whose printed commands work
as printed; ``course grade`` (table or ``--json``) grades right, wrong, broken and
library-calling work, and runs only files inside the workspace; the syllabus covers every
checkable equation."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from minitorch_nlp import cli, cookbook
from minitorch_nlp.testing import specs
from minitorch_nlp.testing.course import (SCHEMA, format_grades, grade, grades_json,
                                          new_workspace, parse_equations, parse_sections)
from minitorch_nlp.testing.syllabus import (BEGIN, END, TASKS, UNITS, syllabus_markdown,
                                            unit_of)
from tests.cli_checks import console_script, run_printed

ROOT = Path(__file__).resolve().parent.parent

CONTEXT = """\
    return (weights.unsqueeze(-1) * memory).sum(axis=1)
"""
ALIGNMENT_WITH_SOFTMAX = """\
    if mask is None:
        return F.softmax(scores, axis=-1)
    real = mt.tensor(mask)
    return F.softmax(mt.where(real, scores, -1e30), axis=-1) * real   # no real token: zeros
"""


def implement(path: Path, function: str, body: str, imports: str = "") -> None:
    """Replace the body of ``function``'s stub in ``path`` with ``body`` (its docstring kept);
    ``imports`` go after the stub file's own imports."""
    source = path.read_text()
    start = source.index(f"\ndef {function}(")
    stop = source.index("    raise TaskNotDone(", start)
    end = source.index("\n", stop) + 1
    source = source[:stop] + body + source[end:]
    marker = "from minitorch_nlp.testing import TaskNotDone\n"
    path.write_text(source.replace(marker, marker + imports))


# ---- course new ----------------------------------------------------------------------------------
def test_parse_sections_and_equations():
    assert parse_sections("sec4, 3,sec3") == [3, 4]
    with pytest.raises(ValueError, match="unknown section 'sec2'; sections with checkable"):
        parse_sections("sec2")
    with pytest.raises(ValueError, match="name at least one section"):
        parse_sections(" , ")
    assert parse_equations("11, 9,10,9") == [9, 10, 11]
    assert parse_equations("40-43,35") == [35, 40, 41, 42, 43]
    with pytest.raises(ValueError, match="equation 0 has no check; checkable equations: 1-111"):
        parse_equations("0")
    with pytest.raises(ValueError, match="equation 112 has no check"):
        parse_equations("110-112")
    with pytest.raises(ValueError, match="'eq9' is not an equation number or a range"):
        parse_equations("eq9")
    with pytest.raises(ValueError, match="the range '12-9' runs backwards"):
        parse_equations("12-9")
    with pytest.raises(ValueError, match="name at least one equation"):
        parse_equations(",")


def test_course_new_by_equations_writes_only_those_tasks_with_their_points(tmp_path, capsys):
    workspace = tmp_path / "unit3"
    assert cli.main(["course", "new", str(workspace), "--equations", "9,10,11"]) == 0
    tasks = json.loads((workspace / "course.json").read_text())["tasks"]
    assert tasks == [
        {"equation": 9, "file": "sec3.py", "function": "alignment_weights", "points": TASKS[9][0]},
        {"equation": 10, "file": "sec3.py", "function": "context_vector", "points": TASKS[10][0]},
        {"equation": 11, "file": "sec4.py", "function": "attention_weights",
         "points": TASKS[11][0]}]
    assert sorted(p.name for p in workspace.iterdir()) == ["course.json", "sec3.py", "sec4.py"]
    assert re.findall(r"\ndef (\w+)\(", (workspace / "sec3.py").read_text()) == \
        ["alignment_weights", "context_vector"]
    assert "eq   9  sec3.py  alignment_weights" in capsys.readouterr().out
    assert cli.main(["course", "new", str(tmp_path / "x"), "--sections", "sec3",
                     "--equations", "9"]) == 2
    assert "argument --equations: not allowed with argument --sections" in \
        capsys.readouterr().err
    with pytest.raises(SystemExit) as exit:
        cli.main(["course", "new", str(tmp_path / "y"), "--equations", "9,200"])
    assert exit.value.code == 2
    assert capsys.readouterr().err == ("minitorch-nlp: error: course: equation 200 has no "
                                       "check; checkable equations: 1-111\n")


def test_the_stubs_do_not_name_the_library_function_that_solves_them(tmp_path):
    new_workspace(tmp_path, "3,4,5,6,7,8,9")
    source = "".join(path.read_text() for path in sorted(tmp_path.glob("sec*.py")))
    assert source.count("raise TaskNotDone(") == len({(cookbook.EQUATIONS[n].chapter, s.function)
                                                      for n, s in specs.items()})
    assert not re.search(r"the library's (side|``|:class:|:func:)|library registers", source,
                         re.IGNORECASE)
    assert not re.search(r"(^|[.:] )The library's", source, re.MULTILINE)
    for spec in specs.values():
        module, function = spec.library.split(":")
        assert spec.library not in source and f"{module}.{function}" not in source
    # what is left of a docstring that lost its sentence about the library still reads whole
    assert "H_{t+1} = tanh(U X_{t+1} + W H_t + b) (eq 3)" in source


def test_an_untouched_workspace_grades_every_task_as_not_done(tmp_path, capsys):
    workspace = tmp_path / "student"
    assert cli.main(["course", "new", str(workspace), "--sections", "sec3,sec4"]) == 0
    tasks = json.loads((workspace / "course.json").read_text())["tasks"]
    assert {t["equation"] for t in tasks} == {n for n in specs
                                              if cookbook.EQUATIONS[n].chapter in {3, 4}}
    stub = (workspace / "sec4.py").read_text()
    assert 'raise TaskNotDone("implement eq 12' in stub
    assert "softmax(q k^T / sqrt(d_k) + bias) v" in stub
    capsys.readouterr()
    assert cli.main(["course", "grade", str(workspace), "--max-examples", "3"]) == 1
    out = capsys.readouterr().out
    assert f"0 of {len(tasks)} tasks done, 0 of {sum(t['points'] for t in tasks)} points" in out
    assert out.count("not done") == len(tasks)


def test_equations_that_share_a_function_share_one_stub_naming_each(tmp_path):
    new_workspace(tmp_path, "sec7")
    source = (tmp_path / "sec7.py").read_text()
    shared = {}
    for number, spec in specs.items():
        if cookbook.EQUATIONS[number].chapter == 7:
            shared.setdefault(spec.function, []).append(number)
    assert len(shared["retrieval_log_probs"]) > 1   # eq 70, 72 and 83
    for function, numbers in shared.items():
        assert source.count(f"\ndef {function}(") == 1
        stub = source[source.index(f"\ndef {function}("):].split("\ndef ", 2)[1]
        for number in numbers:
            assert f"minitorch-nlp check {number} sec7.py:{function}" in stub
            assert f"eq {number} (" in stub.split("raise TaskNotDone(", 1)[1]


@pytest.mark.slow
def test_the_commands_printed_in_the_stubs_work_as_printed(tmp_path):
    """From a fresh workspace, through a launcher that does not put the working directory on
    the path (as pip's console script): the stub's ``check`` line, the header's ``grade`` line,
    and the module:fn form."""
    workspace = tmp_path / "hw"
    new_workspace(workspace, equations="9,10")
    implement(workspace / "sec3.py", "context_vector", CONTEXT)
    source = (workspace / "sec3.py").read_text()
    printed = set(re.findall(r"minitorch-nlp (?:check|course) [^\n):]*(?::\w+)?", source))
    assert printed == {"minitorch-nlp check 9 sec3.py:alignment_weights",
                       "minitorch-nlp check 10 sec3.py:context_vector",
                       "minitorch-nlp course grade ."}
    launcher = console_script(tmp_path / "venv")
    done = run_printed("minitorch-nlp check 10 sec3.py:context_vector", workspace, launcher)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("eq 10: sec3.py:context_vector agrees with the reference on "
                                  "100 examples")
    stub = run_printed("minitorch-nlp check 9 sec3.py:alignment_weights", workspace, launcher)
    assert stub.returncode == 1 and stub.stderr == ""
    assert stub.stdout == ("eq 9: sec3.py:alignment_weights is not done yet (implement eq 9 "
                           "(attention weights softmax))\n")
    graded = run_printed("minitorch-nlp course grade .", workspace, launcher)
    assert graded.returncode == 1, graded.stderr
    assert "1 of 2 tasks done, 1 of 2 points" in graded.stdout
    as_module = run_printed("minitorch-nlp check 10 sec3:context_vector --max-examples 5",
                            workspace, launcher)
    assert as_module.returncode == 0, as_module.stderr
    assert as_module.stdout.startswith("eq 10: sec3:context_vector agrees")


# ---- course grade --------------------------------------------------------------------------------
def test_a_workspace_with_the_librarys_functions_imported_is_not_done(tmp_path):
    new_workspace(tmp_path, ",".join(sorted({f"sec{cookbook.EQUATIONS[n].chapter}"
                                             for n in specs})))
    for number, spec in specs.items():
        module, function = spec.library.split(":")
        path = tmp_path / f"sec{cookbook.EQUATIONS[number].chapter}.py"
        path.write_text(path.read_text() + f"\nfrom {module} import {function}  # noqa: E402\n")
    grades = grade(tmp_path, max_examples=5)
    assert [g.status for g in grades] == ["not done"] * len(specs)
    for g in grades:
        assert g.detail == (f"{g.function} is the library's own {specs[g.equation].library} "
                            "(imported or assigned): write it yourself")
    assert format_grades(grades).splitlines()[len(specs) + 1].startswith(
        f"0 of {len(specs)} tasks done, 0 of ")


def test_calling_the_library_through_any_alias_or_helper_is_not_done(tmp_path):
    new_workspace(tmp_path, equations="9,10,11")
    implement(tmp_path / "sec3.py", "alignment_weights",
              "    return helpers.alignment_weights(scores, mask)\n",
              "from minitorch_nlp.models import seq2seq as helpers\n")
    implement(tmp_path / "sec3.py", "context_vector", "    return ctx(weights, memory)\n",
              "from minitorch_nlp.models.seq2seq import context_vector as ctx\n")
    # a name the source does not show: only the run-time watch sees it
    implement(tmp_path / "sec4.py", "attention_weights",
              "    return _solve(q, k, causal=causal, key_mask=key_mask)\n",
              "import importlib\n\n\ndef _solve(*args, **kwargs):\n"
              "    module = importlib.import_module('minitorch_nlp.' + 'functional')\n"
              "    return getattr(module, 'attention_' + 'weights')(*args, **kwargs)\n")
    grades = {g.equation: g for g in grade(tmp_path, max_examples=5)}
    assert {g.status for g in grades.values()} == {"not done"}
    assert re.fullmatch(r"alignment_weights calls the library's own "
                        r"minitorch_nlp\.models\.seq2seq:alignment_weights \(line \d+: "
                        r"helpers\.alignment_weights\): write it yourself", grades[9].detail)
    assert "(line" in grades[10].detail and ": ctx): write it yourself" in grades[10].detail
    assert grades[11].detail == ("attention_weights runs the library's own "
                                 "minitorch_nlp.functional:attention_weights when it is called: "
                                 "write it yourself")
    assert [g.points for g in grades.values()] == [0, 0, 0]


def test_softmax_through_the_tensor_method_is_the_librarys_softmax(tmp_path):
    """``F.softmax`` is ``x.softmax()``: either one is eq 35's solution, by hand is not."""
    new_workspace(tmp_path / "method", equations="35")
    implement(tmp_path / "method" / "sec6.py", "softmax", "    return x.softmax(axis=-1)\n")
    [by_method] = grade(tmp_path / "method", max_examples=5)
    assert (by_method.status, by_method.detail) == (
        "not done", "softmax runs the library's own minitorch_nlp.functional:softmax when it is "
        "called: write it yourself")
    new_workspace(tmp_path / "hand", equations="35")
    implement(tmp_path / "hand" / "sec6.py", "softmax",
              "    top = x.max(axis=axis, keepdims=True).detach()\n"
              "    e = (x - mt.where(top == -math.inf, 0.0, top)).exp()   # all -inf: zeros\n"
              "    total = e.sum(axis=axis, keepdims=True)\n"
              "    return e / mt.where(total == 0, 1.0, total)\n",
              "import math\n")
    assert grade(tmp_path / "hand", max_examples=5)[0].status == "done"


def test_using_the_reference_maths_that_grading_checks_against_is_not_done(tmp_path):
    """A values-only equation's reference gives the right values: it is the answer key."""
    new_workspace(tmp_path / "named", equations="56")
    implement(tmp_path / "named" / "sec6.py", "quantize_to_levels",
              "    return answers.eq56_quantize_to_levels(x, levels)\n",
              "from minitorch_nlp.testing.reference import quantization as answers\n")
    [named] = grade(tmp_path / "named", max_examples=5)
    assert named.status == "not done"
    assert re.fullmatch(r"quantize_to_levels uses the reference maths that grading checks "
                        r"against \(line \d+: answers\.eq56_quantize_to_levels\): write it "
                        r"yourself", named.detail)
    new_workspace(tmp_path / "hidden", equations="56")
    implement(tmp_path / "hidden" / "sec6.py", "quantize_to_levels",
              "    return _key().eq56_quantize_to_levels(x, levels)\n",
              "import importlib\n\n\ndef _key():\n    return importlib.import_module("
              "'minitorch_nlp.testing.' + 'reference.quantization')\n")
    [hidden] = grade(tmp_path / "hidden", max_examples=5)
    assert (hidden.status, hidden.detail) == (
        "not done", "quantize_to_levels runs the reference maths that grading checks against "
        "when it is called: write it yourself")


def test_own_work_that_uses_other_library_pieces_is_done(tmp_path):
    """F.softmax is not eq 9's solution: a student may build on it."""
    new_workspace(tmp_path, equations="9,10")
    implement(tmp_path / "sec3.py", "alignment_weights", ALIGNMENT_WITH_SOFTMAX)
    implement(tmp_path / "sec3.py", "context_vector", CONTEXT)
    assert [(g.status, g.points) for g in grade(tmp_path, max_examples=10)] == \
        [("done", TASKS[9][0]), ("done", TASKS[10][0])]


def test_a_wrong_or_broken_task_is_graded_so(tmp_path):
    new_workspace(tmp_path, [4])
    implement(tmp_path / "sec4.py", "attention_weights",
              "    return (q @ k.swapaxes(-1, -2)).softmax(axis=-1)   # the survey's, unscaled\n")
    grades = {g.equation: g for g in grade(tmp_path, max_examples=20)}
    assert grades[11].status == "wrong" and "shrunk" in grades[11].detail
    assert grades[11].detail.startswith("eq 11: sec4.py:attention_weights differs")
    assert "inputs (shrunk by hypothesis)" in format_grades(list(grades.values()))
    (tmp_path / "sec4.py").write_text("this is not python")
    assert {g.status for g in grade(tmp_path)} == {"error"}


def test_grade_json_has_points_per_task_in_the_documented_schema(tmp_path, capsys):
    new_workspace(tmp_path, equations="9,10,11")
    implement(tmp_path / "sec3.py", "context_vector", CONTEXT)
    implement(tmp_path / "sec3.py", "alignment_weights", "    return F.softmax(scores, axis=0)\n")
    assert cli.main(["course", "grade", str(tmp_path), "--json", "--max-examples", "5"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert list(report) == ["schema", "workspace", "points", "max_points", "done",
                            "tasks_total", "tasks"]
    assert report["schema"] == SCHEMA == "minitorch-nlp/course-grades/1"
    assert report["workspace"] == str(tmp_path)
    assert [list(task) for task in report["tasks"]] == \
        [["equation", "file", "function", "status", "points", "max_points", "detail"]] * 3
    assert [(t["equation"], t["status"], t["points"], t["max_points"]) for t in report["tasks"]] \
        == [(9, "wrong", 0, TASKS[9][0]), (10, "done", TASKS[10][0], TASKS[10][0]),
            (11, "not done", 0, TASKS[11][0])]
    assert report["points"] == TASKS[10][0] and report["done"] == 1
    assert report["max_points"] == TASKS[9][0] + TASKS[10][0] + TASKS[11][0]
    assert report["tasks_total"] == 3
    assert report["tasks"][0]["detail"].startswith("eq 9: sec3.py:alignment_weights differs")
    # a teacher's own points in course.json are the ones graded
    manifest = json.loads((tmp_path / "course.json").read_text())
    manifest["tasks"][1]["points"] = 2.5
    (tmp_path / "course.json").write_text(json.dumps(manifest))
    assert grades_json(grade(tmp_path, max_examples=3), tmp_path)["points"] == 2.5


def test_course_refuses_a_used_folder_and_a_missing_workspace(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="is not an empty folder"):
        new_workspace(tmp_path, "sec3")
    with pytest.raises(FileExistsError, match="is not an empty folder"):
        new_workspace(tmp_path / "notes.txt", "sec3")
    with pytest.raises(ValueError, match="by sections or by equations"):
        new_workspace(tmp_path / "new", "sec3", equations="9")
    with pytest.raises(FileNotFoundError, match="course.json not found"):
        grade(tmp_path)


@pytest.mark.parametrize("named", ["../outside.py", "{outside}", "link.py", "sub/../../outside.py"])
def test_grade_runs_no_file_outside_the_workspace(tmp_path, capsys, named):
    workspace, marker = tmp_path / "student", tmp_path / "marker"
    new_workspace(workspace, equations="10")
    outside = tmp_path / "outside.py"
    outside.write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                       "def context_vector(weights, memory):\n    return weights\n")
    (workspace / "link.py").symlink_to(outside)
    named = named.format(outside=outside)
    manifest = {"tasks": [{"equation": 10, "file": named, "function": "context_vector"}]}
    (workspace / "course.json").write_text(json.dumps(manifest))
    with pytest.raises(SystemExit) as exit:
        cli.main(["course", "grade", str(workspace)])
    assert exit.value.code == 2
    assert capsys.readouterr().err == (
        f"minitorch-nlp: error: course grade: {workspace / 'course.json'} names the file "
        f"{named!r} (eq 10), which is not inside the workspace {workspace}; only files inside it "
        "are run\n")
    assert not marker.exists()


@pytest.mark.parametrize("manifest, message", [
    ("not json", "is not a course manifest (JSONDecodeError"),
    ('{"steps": []}', "is not a course manifest (KeyError"),
    ('{"tasks": {}}', "is not a course manifest (TypeError: 'tasks' is not a list)"),
    ('{"tasks": [{"equation": 0, "file": "sec3.py", "function": "f"}]}',
     "names no checkable equation"),
    ('{"tasks": [{"equation": 10, "file": "sec3.py", "function": "os.system"}]}',
     "'function' must be a Python name"),
    ('{"tasks": [{"equation": 10, "file": "sec3.py", "function": "f", "points": -1}]}',
     "'points' must be a number >= 0"),
])
def test_a_damaged_manifest_is_one_line(tmp_path, capsys, manifest, message):
    (tmp_path / "course.json").write_text(manifest)
    with pytest.raises(SystemExit) as exit:
        cli.main(["course", "grade", str(tmp_path)])
    assert exit.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("minitorch-nlp: error: course grade: ") and message in error
    assert error.count("\n") == 1


# ---- the syllabus --------------------------------------------------------------------------------
def test_every_checkable_equation_has_a_difficulty_a_time_and_one_unit():
    assert set(TASKS) == set(specs)
    for number, (difficulty, minutes) in TASKS.items():
        assert difficulty in (1, 2, 3) and 5 <= minutes <= 120, number
    taught = [n for unit in UNITS for n in unit.equations]
    assert sorted(taught) == sorted(specs)          # each equation in exactly one unit
    for index, unit in enumerate(UNITS, start=1):
        assert all(1 <= before < index for before in unit.builds_on), unit.title
        assert all(unit_of(n) == index for n in unit.equations)
    with pytest.raises(ValueError, match="equation 0 is in no unit"):
        unit_of(0)


def test_units_follow_the_order_the_equations_build_on():
    """What a unit's functions need is taught before it: softmax (eq 35) before every
    distribution, the RNN (eq 3-6) before its attention (eq 7-10), scaled dot-product attention
    (eq 11-12) before every Transformer unit."""
    order = [n for unit in UNITS for n in unit.equations]
    assert all(order.index(35) < order.index(n) for n in (2, 1, 9, 11, 36))
    assert max(unit_of(n) for n in (3, 4, 5, 6)) < min(unit_of(n) for n in (7, 8, 9, 10))
    transformer_units = {unit_of(n) for n in (19, 25, 41, 53, 88, 92, 111)}
    assert max(unit_of(n) for n in (11, 12)) < min(transformer_units)


def test_the_teaching_page_shows_the_generated_syllabus():
    page = (ROOT / "docs" / "teaching.md").read_text()
    generated = page.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")
    assert generated == syllabus_markdown(), \
        "regenerate it: python -m minitorch_nlp.testing.syllabus docs/teaching.md"
    for index, unit in enumerate(UNITS, start=1):
        assert f"### Unit {index}: {unit.title}" in generated
        assert f"course new unit{index} --equations {','.join(map(str, unit.equations))}" in \
            generated
    assert generated.count("| values only |") == sum(not s.differentiable for s in specs.values())
    assert "MINITORCH_NLP_EDITION=student mkdocs build" in page
    assert "teaching.md" in (ROOT / "mkdocs.yml").read_text()


def test_the_syllabus_commands_make_each_units_workspace(tmp_path):
    for index, unit in enumerate(UNITS, start=1):
        tasks = new_workspace(tmp_path / f"unit{index}", equations=list(unit.equations))
        assert sorted(t["equation"] for t in tasks) == sorted(unit.equations)
