"""MkDocs hook: fills markers at build time, so that the pages show what the code does and what
the committed full runs recorded.

``<!-- computation-graph -->``: a Mermaid drawing of the graph that the engine records for a small
expression, walked from the output's ``grad_fn``. ``<!-- check-specs -->``: the table of the
equations that ``check`` knows, with each candidate's signature, from the specs.
``<!-- benchmark-figures -->``: the backends' speed figures, a table per results file that the
benchmark scripts wrote with ``--json`` into ``benchmarks/results/`` (each headed by the file's
command, date, commit and machine); a malformed file fails the build.

``{{ result("EXAMPLE", "metrics.KEY.SUBKEY") }}`` quotes a value from
``docs/results/EXAMPLE/metrics.json`` (an optional third argument is a format spec, e.g. ".3f");
``{{ figure("EXAMPLE", "NAME.png") }}`` shows a recorded figure. A missing file or key fails the
build, and so does a recorded figure that no page shows.

The API source listings and the chapters' "Source of" boxes are left out of the search index,
so that a search finds the prose first."""
from __future__ import annotations

import json
import posixpath
import re
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import minitorch_nlp as mt  # noqa: E402 - after the path set-up above
from benchmarks.results import RESULTS as BENCHMARK_RESULTS  # noqa: E402
from benchmarks.results import all_results, figure_times, measurement  # noqa: E402
from minitorch_nlp.autograd.function import LeafNode  # noqa: E402

GRAPH_MARKER = "<!-- computation-graph -->"
SPECS_MARKER = "<!-- check-specs -->"
BENCHMARKS_MARKER = "<!-- benchmark-figures -->"
EXPRESSION = "y = (x * w + b).tanh().sum()"
RESULTS = Path(__file__).resolve().parent / "results"
TEMPLATE = re.compile(r'\{\{\s*(result|figure)\(\s*"([^"]+)"\s*,\s*"([^"]+)"\s*'
                      r'(?:,\s*"([^"]*)"\s*)?\)\s*\}\}')
FIGURE_LINK = re.compile(r"results/([\w-]+)/([\w.-]+\.png)")
SOURCE_BOXES = re.compile(r'<details class="(mkdocstrings-source|example)"')

_shown: set[tuple[str, str]] = set()


def computation_graph() -> str:
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    w = mt.tensor([0.5, -1.0], requires_grad=True)
    b = mt.tensor(0.1, requires_grad=True)
    y = (x * w + b).tanh().sum()
    y.backward()   # makes the leaves' AccumulateGrad nodes, as any backward pass does
    names = {id(t): n for n, t in (("x", x), ("w", w), ("b", b))}
    ids, boxes, edges = {}, [], []

    def label(node):
        if isinstance(node, LeafNode):
            return f"{names.get(id(node.tensor_ref()), 'leaf')}: AccumulateGrad"
        return repr(node).strip("<>")

    def visit(node):
        if id(node) not in ids:
            ids[id(node)] = f"n{len(ids)}"
            boxes.append(f'    {ids[id(node)]}["{label(node)}"]')
            for parent in node.next_nodes:
                if parent is not None:
                    edges.append((ids[id(node)], visit(parent)))
        return ids[id(node)]

    root = visit(y.grad_fn)
    lines = ["```mermaid", "graph LR", '    y(["y"])', f"    y --> {root}", *boxes]
    lines += [f"    {a} --> {b}" for a, b in edges]
    lines += ["```", "", f"The backward graph of `{EXPRESSION}`, drawn by walking `y.grad_fn` "
              "at build time: each box is a node the engine recorded; the backward pass runs "
              "along the arrows, and the gradients arrive at the leaves' `AccumulateGrad`."]
    return "\n".join(lines)


def check_specs() -> str:
    from minitorch_nlp.testing import specs

    rows = ["| eq | candidate signature | library implementation |", "|---|---|---|"]
    rows += [f"| {n} | `{spec.signature}` | [`{name}`][{name}] |"
             for n, spec in sorted(specs.items()) for name in [spec.library.replace(":", ".")]]
    return "\n".join(rows)


def _ms(value: float) -> str:
    """Milliseconds to three significant digits, whole ones from 100 on (``14,434``)."""
    return f"{value:,.0f}" if value >= 100 else f"{value:#.3g}"


def benchmark_figures(directory: Path = BENCHMARK_RESULTS) -> str:
    """A table per results file in ``directory``: each figure's measurement, threads, peer, both
    median times and the ratio, under a line naming the file's command, date, commit and
    machine."""
    try:
        recorded = all_results(directory)
    except ValueError as error:
        raise PluginError(f"the speed figures of docs/backends.md: {error}") from None
    parts = []
    for path, record in recorded.items():
        machine = record["machine"]
        load = " / ".join(f"{value:.1f}" for value in machine["load_average"])
        commit = record["commit"] or "unknown"
        short = commit[:7] + ("+dirty" if commit.endswith("+dirty") else "")
        parts.append(f"**`{path.name}`**: `{record['command']}`, {record['date']}, commit "
                     f"`{short}`, {machine['cores']} cores, load average {load}.\n")
        rows = ["| measurement | threads | peer | ours (ms) | peer (ms) | ours / peer |",
                "|---|---|---|---|---|---|"]
        for figure in record["figures"]:
            ours_ms, peer_ms = figure_times(figure)
            threads = "not set" if figure["threads"] is None else figure["threads"]
            rows.append(f"| {measurement(figure)} | {threads} | {figure['against']} | "
                        f"{_ms(ours_ms)} | {_ms(peer_ms)} | **{figure['ratio']:.2f}x** |")
        parts.append("\n".join(rows) + "\n")
    return "\n".join(parts)


def result(example: str, key: str, spec: str | None = None, *, where: str = "a page") -> str:
    """The value at the dotted ``key`` of an example's recorded metrics.json, formatted."""
    path = RESULTS / example / "metrics.json"
    if not path.exists():
        raise PluginError(f"{where} quotes result({example!r}, {key!r}), but {path} is not "
                          f"recorded: run `python docs/make_results.py --only {example}`")
    value = json.loads(path.read_text())
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise PluginError(f"{where} quotes result({example!r}, {key!r}): {path} has no "
                              f"{part!r} there")
        value = value[part]
    if spec:
        return format(value, spec)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:.3g}"


def figure(example: str, name: str, page_uri: str, *, where: str = "a page") -> str:
    """A Markdown image of a recorded figure, linked relative to the page."""
    if not (RESULTS / example / name).exists():
        raise PluginError(f"{where} shows figure({example!r}, {name!r}), but "
                          f"docs/results/{example}/{name} is not recorded")
    target = posixpath.relpath(f"results/{example}/{name}", posixpath.dirname(page_uri) or ".")
    return f"![{example}: {Path(name).stem}]({target})"


def fill_templates(markdown: str, page_uri: str) -> str:
    where = f"docs/{page_uri}"

    def fill(match):
        kind, example, argument, spec = match.groups()
        if kind == "result":
            return result(example, argument, spec, where=where)
        return figure(example, argument, page_uri, where=where)

    return TEMPLATE.sub(fill, markdown)


def on_pre_build(config):
    _shown.clear()


def on_page_markdown(markdown, page, config, files):
    if GRAPH_MARKER in markdown:
        markdown = markdown.replace(GRAPH_MARKER, computation_graph())
    if SPECS_MARKER in markdown:
        markdown = markdown.replace(SPECS_MARKER, check_specs())
    if BENCHMARKS_MARKER in markdown:
        markdown = markdown.replace(BENCHMARKS_MARKER, benchmark_figures())
    markdown = fill_templates(markdown, page.file.src_uri)
    _shown.update(FIGURE_LINK.findall(markdown))
    return markdown


def on_page_content(html, page, config, files):
    if "<p>$$" in html:
        raise PluginError(f"docs/{page.file.src_uri}: a $$ block that Markdown did not read as "
                          "maths (indented inside a list?): write it inline or unindented")
    return SOURCE_BOXES.sub(r'<details class="\1" data-search-exclude', html)


def unplaced_figures() -> list[str]:
    """The recorded figures that no page shows."""
    return sorted(f"docs/results/{png.parent.name}/{png.name}"
                  for png in RESULTS.glob("*/*.png") if (png.parent.name, png.name) not in _shown)


def on_post_build(config):
    missing = unplaced_figures()
    if missing:
        raise PluginError("recorded figures that no page shows (place them in docs/gen_pages.py's "
                          "EXAMPLES or with {{ figure(...) }} on a page): " + ", ".join(missing))
