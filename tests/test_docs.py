"""The documentation site: every equation with code has its entry on its chapter's page (the
pages are generated from the registry by ``docs/gen_pages.py``; ``mkdocs build --strict`` in
``.ci/run`` builds them), and the engine page's computation graph is drawn from a real graph."""
from __future__ import annotations

import importlib.util
import json
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
    assert ("$$\ny^* = \\operatorname{argmax} P(y_t | y_1, y_2, y_3, \\dots, y_{t-1})\n$$"
            in pages[3])
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


def test_chapter_headings_are_the_paper_s_and_the_notes_come_in_its_order(pages):
    gen_pages = _load("gen_pages")
    for equation in cookbook.EQUATIONS.values():
        assert f"### {gen_pages.HEADINGS[equation.section]}\n" in pages[equation.chapter]
    assert set(gen_pages.HEADINGS) == {e.section for e in cookbook.EQUATIONS.values()}
    assert "### III. Preliminaries to modern NLP architectures\n" in pages[3]
    assert "### IX-C. A lite BERT: ALBERT\n" in pages[9]
    chapter4 = pages[4]
    assert chapter4.index("Section IV-A: the Transformer") < chapter4.index("IV-C and IV-E: BERT")
    for chapter, notes in gen_pages.SYSTEM_NOTES.items():
        assert sorted(notes) == sorted(p.stem for p in (DOCS / "systems").glob(f"sec{chapter}_*"))


def test_a_section_without_a_heading_or_an_unlisted_note_fails_the_build(monkeypatch):
    gen_pages = _load("gen_pages")
    with pytest.raises(KeyError, match="has no heading"):
        gen_pages.heading("IV-Z A SECTION THE PAGES DO NOT KNOW")
    monkeypatch.setitem(gen_pages.SYSTEM_NOTES, 4, gen_pages.SYSTEM_NOTES[4][1:])
    with pytest.raises(ValueError, match=r"SYSTEM_NOTES\[4\]"):
        gen_pages.system_notes(4)


def test_every_example_s_results_are_placed_after_its_note_or_marked_not_recorded(pages):
    gen_pages = _load("gen_pages")
    for example, note in gen_pages.EXAMPLES.items():
        chapter = int(note[3])
        page = pages[chapter]
        record = gen_pages.recorded(example)
        if record is None:
            assert f"**`examples/{example}.py`:** its full-run result is not recorded yet" in page
        else:
            for png in (gen_pages.RESULTS / example).glob("*.png"):
                assert f"(../results/{example}/{png.name})" in page
        assert "--smoke" not in "".join(gen_pages.results_block(example))


def test_results_are_quoted_from_metrics_json_and_a_missing_one_fails():
    from mkdocs.exceptions import PluginError

    hooks = _load("hooks")
    recorded = json.loads((DOCS / "results" / "attention_masks" / "metrics.json").read_text())
    pairs = recorded["metrics"]["cost"]["full"]["2048"]["pairs"]
    page = 'Full: {{ result("attention_masks", "metrics.cost.full.2048.pairs") }} pairs.'
    assert hooks.fill_templates(page, "toolkit.md") == f"Full: {pairs:,} pairs."
    assert hooks.fill_templates('{{ result("attention_masks", "wall_time_s", ".1f") }}',
                                "x.md") == f"{recorded['wall_time_s']:.1f}"
    assert hooks.fill_templates('{{ figure("attention_masks", "all_masks.png") }}',
                                "sections/sec9.md") == \
        "![attention_masks: all_masks](../results/attention_masks/all_masks.png)"
    with pytest.raises(PluginError, match="has no 'accuracy_full'"):
        hooks.fill_templates('{{ result("attention_masks", "metrics.accuracy_full") }}', "x.md")
    with pytest.raises(PluginError, match="make_results.py --only no_such_example"):
        hooks.fill_templates('{{ result("no_such_example", "metrics.x") }}', "x.md")
    with pytest.raises(PluginError, match="not recorded"):
        hooks.fill_templates('{{ figure("attention_masks", "no_such.png") }}', "x.md")


def test_a_recorded_figure_that_no_page_shows_fails_the_build():
    from mkdocs.exceptions import PluginError

    hooks = _load("hooks")
    hooks.on_pre_build(None)
    with pytest.raises(PluginError, match="docs/results/attention_masks/all_masks.png"):
        hooks.on_post_build(None)
    toolkit = (DOCS / "toolkit.md").read_text()
    hooks._shown.update(hooks.FIGURE_LINK.findall(hooks.fill_templates(toolkit, "toolkit.md")))
    assert "attention_masks" not in " ".join(hooks.unplaced_figures())


def test_the_student_edition_leaves_out_the_solutions_source(monkeypatch):
    gen_pages = _load("gen_pages")
    cookbook.import_all()
    tests = cookbook.tests_by_equation()
    full = gen_pages.section_entries(4, tests)
    assert '??? example "Source of `' in full
    assert "show_source: false" not in gen_pages.api_page("minitorch_nlp.functional")
    monkeypatch.setenv("MINITORCH_NLP_EDITION", "student")
    student = gen_pages.section_entries(4, tests)
    assert "Source of `" not in student and "def " not in student
    assert "[`minitorch_nlp." in student   # the code is still named and linked
    assert "options:\n      show_source: false" in gen_pages.api_page("minitorch_nlp.functional")
    monkeypatch.setenv("MINITORCH_NLP_EDITION", "teacher")
    with pytest.raises(ValueError, match="MINITORCH_NLP_EDITION must be one of full, student"):
        gen_pages.edition()


def test_the_api_index_groups_modules_by_package_with_their_summaries():
    gen_pages = _load("gen_pages")
    modules = gen_pages.api_modules()
    index = gen_pages.api_index(modules)
    assert "## `minitorch_nlp.models`" in index and "## `minitorch_nlp.backends`" in index
    for module in modules:
        assert index.count(f"- [`{module}`]({module}.md)") == 1
    assert index.index("## `minitorch_nlp`\n") < index.index("## `minitorch_nlp.attention`")
    import minitorch_nlp.functional

    first_line = minitorch_nlp.functional.__doc__.strip().splitlines()[0]
    assert f"- [`minitorch_nlp.functional`](minitorch_nlp.functional.md): {first_line}" in index


def _results_module():
    spec = importlib.util.spec_from_file_location(
        "benchmark_results", DOCS.parent / "benchmarks" / "results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _figure(path="MLP step", threads=1, ours=12.5, peer=25.0, ratio=0.5):
    return {"path": path, "threads": threads, "against": "PyTorch eager", "ratio": ratio,
            "rounds": 3, "median_ms": {"ours": ours, "PyTorch": peer}}


def test_the_backends_page_shows_every_committed_results_file():
    hooks = _load("hooks")
    table = hooks.benchmark_figures()
    paths = sorted((DOCS.parent / "benchmarks" / "results").glob("*.json"))
    assert paths, "benchmarks/results/ holds the figures the backends page shows"
    for path in paths:
        recorded = json.loads(path.read_text())
        assert f"**`{path.name}`**: `{recorded['command']}`" in table
        assert f"commit `{recorded['commit'][:7]}" in table
        for figure in recorded["figures"]:
            assert f"| {figure['path']}" in table
            assert f"**{figure['ratio']:.2f}x**" in table
    page = (DOCS / "backends.md").read_text()
    assert "<!-- benchmark-figures -->" in page and "(figures/benchmarks.png)" in page
    assert "figures.json" not in page


def test_a_results_file_that_a_script_writes_becomes_a_table_and_a_chart(tmp_path, capsys):
    results = _results_module()
    results.write_results(tmp_path / "mlp.json", [
        _figure(), _figure(threads=2, ours=150.0, peer=100.0, ratio=1.5),
        dict(_figure(path="tokenizer", threads=None), tokens=4096)],
        ["benchmarks/engine_overhead.py", "--json", "mlp.json"])
    assert "figures written to" in capsys.readouterr().out
    table = _load("hooks").benchmark_figures(tmp_path)
    assert "**`mlp.json`**: `python benchmarks/engine_overhead.py --json mlp.json`" in table
    assert "| MLP step | 1 | PyTorch eager | 12.5 | 25.0 | **0.50x** |" in table
    assert "| MLP step | 2 | PyTorch eager | 150 | 100 | **1.50x** |" in table
    assert "| tokenizer (tokens 4096) | not set | PyTorch eager |" in table
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 3   # the header, then one row per figure
    chart = tmp_path / "chart.png"
    with chart.open("wb") as f:
        _load("gen_pages").benchmark_chart(f, tmp_path)
    assert chart.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("damage, message", [
    (lambda record: record.pop("machine"), "machine missing"),
    (lambda record: record["machine"].pop("load_average"), "load_average missing"),
    (lambda record: record["machine"].update(load_average="high"), "list of numbers"),
    (lambda record: record.update(figures=[]), "no figures"),
    (lambda record: record["figures"][0].pop("ratio"), "figure 0 needs the keys"),
    (lambda record: record["figures"][0]["median_ms"].pop("PyTorch"), "one peer"),
    (lambda record: record["figures"][0].update(ratio="fast"), "must be numbers"),
    (lambda record: record["figures"][0].update(threads="2"), "threads must be a count"),
])
def test_a_malformed_results_file_fails_the_build_naming_it(tmp_path, damage, message):
    from mkdocs.exceptions import PluginError

    record = {"command": "python benchmarks/x.py", "commit": "0" * 40, "date": "2026-01-01",
              "machine": {"processor": "x86_64", "cores": 2, "load_average": [1.0, 1.0, 1.0]},
              "figures": [_figure()]}
    damage(record)
    (tmp_path / "good.json").write_text(json.dumps(dict(record, figures=[_figure()],
                                                        machine={"cores": 2,
                                                                 "load_average": [0, 0, 0]})))
    (tmp_path / "broken.json").write_text(json.dumps(record))
    with pytest.raises(PluginError, match=f"broken.json.*{message}"):
        _load("hooks").benchmark_figures(tmp_path)
    with pytest.raises(ValueError, match=f"broken.json.*{message}"):
        _load("gen_pages").benchmark_chart(tmp_path / "chart.png", tmp_path)


def test_no_results_files_or_one_that_is_not_json_fails_the_build(tmp_path):
    from mkdocs.exceptions import PluginError

    with pytest.raises(PluginError, match="no results files"):
        _load("hooks").benchmark_figures(tmp_path)
    (tmp_path / "cut.json").write_text('{"command": ')
    with pytest.raises(PluginError, match="cut.json: not a readable JSON results file"):
        _load("hooks").benchmark_figures(tmp_path)


def test_a_recorded_run_s_numbers_are_listed_from_its_metrics_json():
    gen_pages = _load("gen_pages")
    metrics = {"accuracy": 0.9871, "by_bits": {"8": 0.99, "2": 0.5}, "steps": 600,
               "curve": list(range(100)), "heads": [0.5, 0.25], "smoke": False}
    assert gen_pages.flat_metrics(metrics) == [
        ("accuracy", "0.9871"), ("by_bits.8", "0.99"), ("by_bits.2", "0.5"), ("steps", "600"),
        ("heads", "0.5, 0.25"), ("smoke", "False")]
    assert len(gen_pages.flat_metrics({str(i): i for i in range(100)}, limit=60)) == 60


def test_every_example_has_a_place_on_the_site():
    gen_pages = _load("gen_pages")
    examples = {path.stem for path in (DOCS.parent / "examples").glob("*.py")}
    toolkit = (DOCS / "toolkit.md").read_text()
    on_the_toolkit_page = {name for name in examples if f'figure("{name}",' in toolkit}
    assert examples - on_the_toolkit_page == set(gen_pages.EXAMPLES), \
        "place each example in docs/gen_pages.py's EXAMPLES (after its system note)"


def test_a_display_equation_markdown_did_not_read_fails_the_build():
    from types import SimpleNamespace

    from mkdocs.exceptions import PluginError

    hooks = _load("hooks")
    page = SimpleNamespace(file=SimpleNamespace(src_uri="sections/sec9.md"))
    with pytest.raises(PluginError, match="sections/sec9.md: a \\$\\$ block"):
        hooks.on_page_content("<ul><li>x</li></ul>\n<p>$$\n  p(n)\n  $$</p>", page, None, None)
    assert "data-search-exclude" in hooks.on_page_content(
        '<details class="mkdocstrings-source">', page, None, None)


# Maths written in ASCII where the page means a formula; each is typeset instead ($...$).
ASCII_MATHS = {
    "a square root written sqrt(...)": re.compile(r"\bsqrt\("),
    "a derivative written d/dx": re.compile(r"\bd/d[a-z]\b"),
    "an exponent written with ^": re.compile(r"[\w)]\^[\w({]"),
    "a plus-minus written +-": re.compile(r"\+-(?=\s*[\w\\])"),
    "an inequality written <= or >=": re.compile(r"<=|>="),
    "a sigma bound written N-sigma": re.compile(r"\b\d+(\.\d+)?-sigma\b"),
}
# What a page may hold in ASCII: code (fenced and inline), maths already typeset, the hooks'
# templates and markers, and the tables generated from the program between begin/end markers.
NOT_PROSE = [re.compile(pattern, re.S) for pattern in (
    r"^```.*?^```", r"(`+).+?\1", r"\$\$.*?\$\$", r"\$[^$]+\$", r"\{\{.*?\}\}",
    r"<!-- ?([\w-]+): ?begin -->.*?<!-- ?\1: ?end -->", r"<!--.*?-->")]


def ascii_maths(markdown: str) -> list[str]:
    """The prose passages of a Markdown page that write maths in ASCII, each with its line number
    and what it is."""
    for pattern in NOT_PROSE:
        markdown = pattern.sub(lambda match: re.sub(r"[^\n]", " ", match.group()),
                               markdown.replace("\r", ""))
    found = []
    for number, line in enumerate(markdown.splitlines(), 1):
        found += [f"line {number}: {what}: {line.strip()[:80]}"
                  for what, pattern in ASCII_MATHS.items() if pattern.search(line)]
    return found


def test_the_ascii_maths_check_finds_formulas_in_prose_only():
    prose = ("Without the 1/sqrt(d_k) scale, d/dx x^0 = 0 for +-inf, y <= 0, within 4-sigma.\n"
             "```python\ny = x ** 0.5 ^ mask   # sqrt(x), d/dx\n```\n"
             "`norm(p=inf) <= 1` and $\\sqrt{d_k}$, $d(x^0)/dx$;\n"
             "{{ result(\"attention_masks\", \"l=sqrt(n)\") }}\n"
             "<!-- table: begin -->\n| softmax(QK^T) |\n<!-- table: end -->\n")
    found = ascii_maths(prose)
    assert [entry.split(":")[1].strip() for entry in found] == list(ASCII_MATHS)
    assert all(entry.startswith("line 1:") for entry in found)


@pytest.mark.parametrize("page", sorted([*DOCS.glob("*.md"), *DOCS.glob("systems/*.md")]),
                         ids=lambda page: page.relative_to(DOCS).as_posix())
def test_prose_maths_is_typeset_not_written_in_ascii(page):
    found = ascii_maths(page.read_text(encoding="utf-8"))
    assert not found, (f"docs/{page.relative_to(DOCS).as_posix()} writes maths in ASCII outside "
                       "code; typeset it as $...$:\n" + "\n".join(found))
