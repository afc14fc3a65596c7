"""Pages generated at build time (mkdocs-gen-files), so that they never go stale:

* ``sections/secN.md``: a page per chapter III..IX of the paper: the chapter's system notes
  (``docs/systems/``) in the paper's order, each followed by the recorded full-run results of the
  examples it describes (figures and facts from ``docs/results/<example>/metrics.json``), then,
  from the equation registry (``minitorch_nlp.cookbook``), each equation typeset, the code
  registered for it (linked to the API reference, with its source), its tests and its ``check``
  signature;
* ``api/*.md``: the API reference, one page per module, rendered by mkdocstrings, and an index
  grouped by package with each module's one-line summary;
* ``figures/benchmarks.png``: the chart of the speed figures on the backends page, one bar per
  figure of the results files in ``benchmarks/results/``.

``MINITORCH_NLP_EDITION=student`` builds the student edition: the same pages without the source
of the registered code (chapter pages) and of the modules (API pages), so that a course's
solutions are not one click away.

``section_entries()`` is also what ``tests/test_docs.py`` reads to check that every equation with
code has its entry.
"""
from __future__ import annotations

import ast
import inspect
import json
import os
import pkgutil
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.results import RESULTS as BENCHMARK_RESULTS  # noqa: E402
from benchmarks.results import all_results, measurement  # noqa: E402
from minitorch_nlp import cookbook  # noqa: E402

DOCS = ROOT / "docs"
RESULTS = DOCS / "results"
EDITIONS = ("full", "student")

# The system notes of each chapter (docs/systems/<name>.md), in the order the paper presents them.
SYSTEM_NOTES = {
    3: ["sec3_seq2seq"],
    4: ["sec4_transformer", "sec4_elmo", "sec4_gpt", "sec4_bert", "sec4_xlnet",
        "sec4_megatron_bert", "sec4_megatron_zero"],
    5: ["sec5_bart_mbart", "sec5_t5", "sec5_unigram_tokenizer", "sec5_gpt3", "sec5_gshard"],
    6: ["sec6_distillation", "sec6_pruning_quantisation"],
    7: ["sec7_retrieval"],
    8: ["sec8_char_transformer", "sec8_char_transformer_xl", "sec8_long_attention",
        "sec8_longformer", "sec8_extended_transformer", "sec8_big_bird",
        "sec8_sparse_attention_kernels"],
    9: ["sec9_efficient_attention", "sec9_reformer", "sec9_albert", "sec9_electra"],
}

# Each example on a chapter page, and the system note that describes it: its recorded results
# are shown right after that note. (examples/attention_masks.py is on the toolkit page.)
EXAMPLES = {
    "rnn_attention": "sec3_seq2seq",
    "transformer_translation": "sec4_transformer",
    "elmo": "sec4_elmo",
    "gpt1_finetune": "sec4_gpt",
    "gpt2_generate": "sec4_gpt",
    "bert_mlm": "sec4_bert",
    "roberta_masking": "sec4_bert",
    "xlnet_permutation": "sec4_xlnet",
    "megatron_depth": "sec4_megatron_bert",
    "bart_translation": "sec5_bart_mbart",
    "mbart_numbers": "sec5_bart_mbart",
    "t5_text_to_text": "sec5_t5",
    "distillation": "sec6_distillation",
    "pruning": "sec6_pruning_quantisation",
    "quantisation": "sec6_pruning_quantisation",
    "retrieval": "sec7_retrieval",
    "char_transformer_xl": "sec8_char_transformer_xl",
    "long_attention": "sec9_efficient_attention",
    "reformer_memory": "sec9_efficient_attention",
    "electra_vs_bert": "sec9_electra",
}

# The registry's section keys are the paper's headings as printed (capitals, a typo); the pages
# show them as the paper means them.
HEADINGS = {
    "III. PRELIMANIERES TO MODERN NLP ARCHITECTURES":
        "III. Preliminaries to modern NLP architectures",
    "IV-A.2. Queries, Keys, and Values": "IV-A.2. Queries, keys, and values",
    "IV-B EMBEDDINGS FROM LANGUAGE MODELS: ELMo": "IV-B. Embeddings from language models: ELMo",
    "IV-B GENERATIVE PRE-TRAINING MODEL: GPT-I": "IV-B. Generative pre-training model: GPT-I",
    "IV-D GENERALIZED AUTOREGRESSIVE PRETRAINING FOR LANGUAGE UNDERSTANDING: XLNet":
        "IV-D. Generalized autoregressive pretraining for language understanding: XLNet",
    "IV-D.2. Model Architecture": "IV-D.2. Model architecture",
    "V-C.1. Supervised Machine Translation": "V-C.1. Supervised machine translation",
    "V-G SCALING GIANT MODELS WITH CONDITIONAL COMPUTATION AND AUTOMATIC SHARDING: GShard":
        "V-G. Scaling giant models with conditional computation and automatic sharding: GShard",
    "VI-A DISTILLATION": "VI-A. Distillation",
    "VI-A.2. TinyBERT": "VI-A.2. TinyBERT",
    "VI-A.3. MobileBERT": "VI-A.3. MobileBERT",
    "VI-B.2-A STRUCTURED PRUNING": "VI-B.2-A. Structured pruning",
    "VI-B.3-A Analyzing Multi-Head Self-Attention: Specialized Heads Do the Heavy Lifting, Rest "
    "Can Be Pruned": "VI-B.3-A. Analyzing multi-head self-attention: specialized heads do the "
                     "heavy lifting, rest can be pruned",
    "VI-B.3-B ARE 16 HEADS REALLY BETTER THAN ONE?":
        "VI-B.3-B. Are 16 heads really better than one?",
    "VI-C.1 LQ-NETS": "VI-C.1. LQ-Nets",
    "VI-C.2 QBERT": "VI-C.2. QBERT",
    "VI-C.3 Q8BERT": "VI-C.3. Q8BERT",
    "VII-A GOLDEN RETRIEVER": "VII-A. GoldEn Retriever",
    "VII-B ORQA": "VII-B. ORQA",
    "VII-C REALM": "VII-C. REALM",
    "VII-D RETRIEVAL AUGMENTED GENERATION: RAG": "VII-D. Retrieval-augmented generation: RAG",
    "VII-D DENSE PASSAGE RETRIEVAL: DPR": "VII-D. Dense passage retrieval: DPR",
    "VIII-A DEEPER SELF-ATTENTION": "VIII-A. Deeper self-attention",
    "VIII-B TRANSFORMER-XL": "VIII-B. Transformer-XL",
    "IX-A SPARSE TRANSFORMER": "IX-A. Sparse Transformer",
    "IX-B REFORMER": "IX-B. Reformer",
    "IX-C A LITE BERT: ALBERT": "IX-C. A lite BERT: ALBERT",
    "IX-D ELECTRA": "IX-D. ELECTRA",
    "IX-E LINFORMER": "IX-E. Linformer",
}

_ROMAN = {3: "III", 4: "IV", 5: "V", 6: "VI", 7: "VII", 8: "VIII", 9: "IX"}


def typeset() -> dict[int, list[str]]:
    """Equation number -> [the survey's LaTeX, and the original paper's where the survey's is
    garbled] (docs/equations.tsv)."""
    table = {}
    for line in (DOCS / "equations.tsv").read_text().splitlines():
        if line and not line.startswith("#"):
            number, *forms = line.split("\t")
            table[int(number)] = forms
    return table


def _object(qualified: str):
    parts = qualified.split(".")
    for split in range(len(parts), 0, -1):
        try:
            target = __import__(".".join(parts[:split]), fromlist=["_"])
        except ImportError:
            continue
        for attribute in parts[split:]:
            target = getattr(target, attribute)
        return target
    raise ImportError(qualified)


def edition() -> str:
    """The edition being built: ``full`` or, with ``MINITORCH_NLP_EDITION=student``, ``student``."""
    name = os.environ.get("MINITORCH_NLP_EDITION", "full")
    if name not in EDITIONS:
        raise ValueError(f"MINITORCH_NLP_EDITION must be one of {', '.join(EDITIONS)}, "
                         f"got {name!r}")
    return name


def heading(section: str) -> str:
    """The heading a registry section is shown under."""
    if section not in HEADINGS:
        raise KeyError(f"docs/gen_pages.py: the equation section {section!r} has no heading in "
                       "HEADINGS; add it as the paper writes it")
    return HEADINGS[section]


def system_notes(chapter: int) -> list[str]:
    """The chapter's system notes in the paper's order; every file of docs/systems/ is listed."""
    present = {path.stem for path in (DOCS / "systems").glob(f"sec{chapter}_*.md")}
    listed = SYSTEM_NOTES.get(chapter, [])
    if present != set(listed):
        raise ValueError(f"docs/gen_pages.py: SYSTEM_NOTES[{chapter}] lists {sorted(listed)}, "
                         f"docs/systems/ holds {sorted(present)}: list each note once, in the "
                         "paper's order")
    return listed


def recorded(example: str) -> dict | None:
    """The metrics.json of an example's committed full run, or None when none is recorded."""
    path = RESULTS / example / "metrics.json"
    return json.loads(path.read_text()) if path.exists() else None


def results_block(example: str) -> list[str]:
    """The Markdown that shows an example's recorded full run: what ran, where, how long, and
    each of its figures and numbers, linked from a chapter page (sections/); or a line saying that
    no full run is recorded yet."""
    record = recorded(example)
    if record is None:
        return [f"**`examples/{example}.py`:** its full-run result is not recorded yet "
                f"(`python docs/make_results.py --only {example}` records it).", ""]
    lines = [f"**`examples/{example}.py`, full run:** `{record['command']}`, "
             f"{record['wall_time_s']:.0f} s on {record['machine']}, {record['date'][:10]}, "
             f"commit `{record['commit'][:10]}` "
             f"([metrics.json](../results/{example}/metrics.json)).", ""]
    for png in sorted((RESULTS / example).glob("*.png")):
        lines += [f"![{example}: {png.stem}](../results/{example}/{png.name})", ""]
    numbers = flat_metrics(record.get("metrics", {}))
    if numbers:
        lines += ['??? info "The numbers of this run (`metrics.json`)"', "",
                  "    | metric | value |", "    |---|---|"]
        lines += [f"    | `{key}` | {value} |" for key, value in numbers]
        lines += [""]
    return lines


def flat_metrics(metrics, prefix: str = "", limit: int = 60) -> list[tuple[str, str]]:
    """The scalar values of a metrics dict as (dotted key, formatted value), at most ``limit``;
    short lists of numbers are shown whole, longer ones (curves) are left to the figures."""
    rows = []
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            rows += flat_metrics(value, f"{name}.", limit)
        elif isinstance(value, (bool, str)):
            rows.append((name, str(value)))
        elif isinstance(value, (int, float)):
            rows.append((name, f"{value:,}" if isinstance(value, int) else f"{value:.4g}"))
        elif isinstance(value, list) and 0 < len(value) <= 8 and all(
                isinstance(item, (int, float)) and not isinstance(item, bool) for item in value):
            rows.append((name, ", ".join(f"{item:.4g}" for item in value)))
    return rows[:limit]


def section_entries(chapter: int, tests: dict[int, list[str]]) -> str:
    """The Markdown of one chapter's page."""
    from minitorch_nlp.testing import specs

    with_source = edition() == "full"
    latex = typeset()
    lines = ["---", "search:", "  boost: 2", "---", "",
             f"# Chapter {_ROMAN[chapter]}: {cookbook.CHAPTERS[chapter]}", ""]
    notes = system_notes(chapter)
    unknown = {note for note in EXAMPLES.values()} - {n for c in SYSTEM_NOTES.values() for n in c}
    if unknown:
        raise ValueError(f"docs/gen_pages.py: EXAMPLES places figures after {sorted(unknown)}, "
                         "which are not system notes")
    if notes:
        lines += ["The systems of this chapter, in plain words, each with the recorded results "
                  "of its examples; then every numbered equation of the chapter with its code "
                  "and tests.", ""]
        for note in notes:
            lines += [(DOCS / "systems" / f"{note}.md").read_text(), ""]
            for example, described_in in EXAMPLES.items():
                if described_in == note:
                    lines += results_block(example)
    lines += ["## The equations", ""]
    section = None
    for number, equation in cookbook.EQUATIONS.items():
        if equation.chapter != chapter:
            continue
        if equation.section != section:
            section = equation.section
            lines += [f"### {heading(section)}", ""]
        lines += [f"#### Eq {number}: {equation.description}", ""]
        if number in latex:
            survey, *original = latex[number]
            lines += ["$$", survey, "$$", ""]
            if original:
                lines += ["The survey's form is garbled or simplified; the library implements the "
                          "original paper's (its docstring, below, explains the difference):", "",
                          "$$", original[0], "$$", ""]
        else:
            lines += ["(written inline in the paper's text)", ""]
        code = cookbook.implementations(number)
        if not code:
            lines += ["Not implemented yet.", ""]
            continue
        lines += ["**Code:** " + ", ".join(f"[`{name}`][{name}]" for name in code), ""]
        for name in code if with_source else ():
            source = inspect.getsource(_object(name))
            lines += [f'??? example "Source of `{name}`"', "    ```python",
                      *(f"    {row}" if row else "" for row in source.splitlines()),
                      "    ```", ""]
        found = tests.get(number, [])
        lines += ["**Tests:**" if found else "**Tests:** none yet", ""]
        lines += [f"- `{node}`" for node in found] + [""]
        if number in specs:
            lines += [f"**Check your own:** `minitorch-nlp check {number} "
                      f"MODULE:{specs[number].function}`, signature "
                      f"`{specs[number].signature}` ([check and course](../check.md)).", ""]
    return "\n".join(lines)


def api_modules() -> list[str]:
    """The public modules of the package (no leading underscore, not ``__main__``)."""
    import minitorch_nlp

    names = ["minitorch_nlp"]
    for module in pkgutil.walk_packages(minitorch_nlp.__path__, "minitorch_nlp."):
        if not any(part.startswith("_") for part in module.name.split(".")):
            names.append(module.name)
    return sorted(names)


def summary(module: str) -> str:
    """The first sentence of a module's docstring, on one line (read from the source, so that
    modules whose optional dependencies are missing are described too)."""
    path = ROOT / Path(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(docstring.split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[:end + 1]


def api_page(module: str) -> str:
    """The API page of one module; the student edition leaves out the source code."""
    options = "" if edition() == "full" else "\n    options:\n      show_source: false"
    return f"---\nsearch:\n  boost: 0.5\n---\n\n# `{module}`\n\n::: {module}{options}\n"


def api_index(modules: list[str]) -> str:
    """The API index: one group per package, one line per module with its summary."""
    packages = {module for module in modules
                if any(other.startswith(module + ".") for other in modules)}
    groups: dict[str, list[str]] = {}
    for module in modules:
        package = ".".join(module.split(".")[:2])
        groups.setdefault(package if package in packages else "minitorch_nlp", []).append(module)
    lines = ["# API reference", "", "One page per module, generated from the docstrings; the "
             "modules are grouped by package.", ""]
    for package, members in sorted(groups.items(), key=lambda item: (item[0] != "minitorch_nlp",
                                                                      item[0])):
        lines += [f"## `{package}`", ""]
        lines += [f"- [`{module}`]({module}.md): {summary(module) or '(no docstring)'}"
                  for module in members]
        lines += [""]
    return "\n".join(lines)


def benchmark_chart(path, directory=BENCHMARK_RESULTS) -> None:
    """The bar chart of every results file in ``benchmarks/results/`` (or ``directory``): our
    time / the peer's, one bar per figure, the files' figures in the order of the table."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    records = list(all_results(directory).values())
    figures = [figure for record in records for figure in record["figures"]]
    labels = [textwrap.fill(measurement(item), 70) + f"\nvs {item['against']}, "
              + ("threads not set" if item["threads"] is None else
                 f"{item['threads']} thread{'s' if item['threads'] != 1 else ''}")
              for item in figures]
    ratios = [item["ratio"] for item in figures]
    heights = [0.16 * (label.count("\n") + 1) + 0.12 for label in labels]
    figure = Figure(figsize=(10, sum(heights) + 1.0), layout="constrained")
    ax = figure.subplots()
    rows = range(len(figures))[::-1]
    # each bar runs from 1 to the ratio on a log axis, so that 2x slower and 2x faster are the
    # same length and a large ratio does not flatten the others
    ax.set_xscale("log")
    ax.barh(list(rows), [r - 1 for r in ratios], left=1.0,
            color=["#2b6cb0" if r <= 1 else "#c05621" for r in ratios])
    ax.axvline(1.0, color="black", linewidth=1)
    first = 0
    for record in records[:-1]:   # a line between the files' figures
        first += len(record["figures"])
        ax.axhline(len(figures) - first - 0.5, color="grey", linewidth=0.5, linestyle="--")
    ax.set_yticks(list(rows), labels, fontsize=7)
    ax.set_ylim(-0.6, len(figures) - 0.4)
    for row, ratio in zip(rows, ratios):
        ax.text(ratio, row, f" {ratio:.2f}x ", va="center",
                ha="left" if ratio >= 1 else "right", fontsize=7)
    ax.set_xlabel("our time / the peer's time (log scale; left of 1: faster)")
    ax.set_xlim(min(min(ratios), 1.0) / 1.6, max(max(ratios), 1.0) * 1.6)
    ticks = [2.0 ** k for k in range(-6, 7)]
    ax.set_xticks([t for t in ticks if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]])
    ax.xaxis.set_major_formatter(lambda value, _: f"{value:g}x")
    ax.xaxis.set_minor_formatter(lambda value, _: "")
    figure.savefig(path, dpi=100)


def main() -> None:
    import mkdocs_gen_files

    cookbook.import_all()
    tests = cookbook.tests_by_equation(ROOT / "tests")
    for chapter in cookbook.CHAPTERS:
        with mkdocs_gen_files.open(f"sections/sec{chapter}.md", "w") as f:
            f.write(section_entries(chapter, tests))
    modules = api_modules()
    for module in modules:
        with mkdocs_gen_files.open(f"api/{module}.md", "w") as f:
            f.write(api_page(module))
    with mkdocs_gen_files.open("api/index.md", "w") as f:
        f.write(api_index(modules))
    with mkdocs_gen_files.open("figures/benchmarks.png", "wb") as f:
        benchmark_chart(f)


if __name__ in ("__main__", "<run_path>"):
    main()
