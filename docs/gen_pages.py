"""Pages generated at build time (mkdocs-gen-files), so that they never go stale:

* ``sections/secN.md``: a page per chapter III..IX of the paper, from the equation registry
  (``minitorch_nlp.cookbook``): each equation typeset, the code registered for it (linked to the
  API reference, with its source), its tests, its ``check`` signature, and the figures written by
  the chapter's examples (run with ``--smoke`` during the build);
* ``api/*.md``: the API reference, one page per module, rendered by mkdocstrings.

``section_entries()`` is also what ``tests/test_docs.py`` reads to check that every equation with
code has its entry.
"""
from __future__ import annotations

import inspect
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from minitorch_nlp import cookbook  # noqa: E402

DOCS = ROOT / "docs"

# Each example, with the chapter and the paper section (heading prefix) whose equations it runs.
EXAMPLES = {
    "rnn_attention": (3, "III."),
    "transformer_translation": (4, "IV-A.2."),
    "elmo": (4, "IV-B EMBEDDINGS"),
    "gpt1_finetune": (4, "IV-B GENERATIVE"),
    "bert_mlm": (4, "IV-D GENERALIZED"),
    "roberta_masking": (4, "IV-D GENERALIZED"),
    "xlnet_permutation": (4, "IV-D GENERALIZED"),
    "megatron_depth": (4, "IV-D GENERALIZED"),
    "gpt2_generate": (5, None),
    "char_transformer_xl": (8, "VIII-B"),
    "electra_vs_bert": (9, "IX-D"),
    "t5_text_to_text": (5, None),
    "mbart_numbers": (5, "V-C MULTILINGUAL"),
    "bart_translation": (5, None),
    "long_attention": (9, None),
    "reformer_memory": (9, "IX-B"),
    "distillation": (6, "VI-A DISTILLATION"),
    "pruning": (6, "VI-B.3-B"),
    "quantisation": (6, "VI-C.2"),
    "retrieval": (7, "VII-D RETRIEVAL"),
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


def section_entries(chapter: int, tests: dict[int, list[str]]) -> str:
    """The Markdown of one chapter's page."""
    from minitorch_nlp.testing import specs

    latex = typeset()
    lines = [f"# Chapter {_ROMAN[chapter]}: {cookbook.CHAPTERS[chapter]}", ""]
    notes = sorted((DOCS / "systems").glob(f"sec{chapter}_*.md"))
    if notes:
        lines += ["The systems of this chapter, in plain words, then every numbered equation of "
                  "the chapter with its code and tests.", ""]
        for note in notes:
            lines += [note.read_text(), ""]
    lines += ["## The equations", ""]
    section = None
    for number, equation in cookbook.EQUATIONS.items():
        if equation.chapter != chapter:
            continue
        if equation.section != section:
            section = equation.section
            lines += [f"### {section.title()}", ""]
            lines += _figures(chapter, section)
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
        for name in code:
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
    lines += _figures(chapter, None)
    return "\n".join(lines)


_FIGURES: dict[str, list[Path]] = {}


def _figures(chapter: int, section: str | None) -> list[str]:
    """Figures of the examples attached to this section (or, for None, to the chapter only)."""
    lines = []
    for name, (example_chapter, prefix) in EXAMPLES.items():
        if example_chapter != chapter:
            continue
        if (section is None) != (prefix is None) or (prefix and not section.startswith(prefix)):
            continue
        pngs = _FIGURES.get(name, [])
        if not pngs:
            continue
        lines += [f'!!! note "From `examples/{name}.py --smoke`"', ""]
        lines += [f"    ![{name}: {png.stem}](../figures/{name}/{png.name})" for png in pngs]
        lines += [""]
    return lines


def run_examples() -> dict[str, list[Path]]:
    """Run every example with ``--smoke`` into a temporary folder; its PNGs, by example."""
    out = Path(tempfile.mkdtemp(prefix="minitorch-nlp-docs-"))
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=str(ROOT))
    figures = {}
    for name in EXAMPLES:
        target = out / name
        run = subprocess.run([sys.executable, str(ROOT / "examples" / f"{name}.py"), "--smoke",
                              "--out", str(target)], env=env, cwd=ROOT, capture_output=True,
                             text=True)
        if run.returncode != 0:   # the progress bars stay out of the build log unless it fails
            raise RuntimeError(f"examples/{name}.py --smoke failed:\n{run.stderr[-4000:]}")
        figures[name] = sorted(target.glob("*.png"))
    return figures


def api_modules() -> list[str]:
    """The public modules of the package (no leading underscore, not ``__main__``)."""
    import pkgutil

    import minitorch_nlp

    names = ["minitorch_nlp"]
    for module in pkgutil.walk_packages(minitorch_nlp.__path__, "minitorch_nlp."):
        if not any(part.startswith("_") for part in module.name.split(".")):
            names.append(module.name)
    return sorted(names)


def main() -> None:
    import mkdocs_gen_files

    cookbook.import_all()
    tests = cookbook.tests_by_equation(ROOT / "tests")
    _FIGURES.update(run_examples())
    for name, pngs in _FIGURES.items():
        for png in pngs:
            with mkdocs_gen_files.open(f"figures/{name}/{png.name}", "wb") as f:
                f.write(png.read_bytes())
    for chapter in cookbook.CHAPTERS:
        with mkdocs_gen_files.open(f"sections/sec{chapter}.md", "w") as f:
            f.write(section_entries(chapter, tests))
    modules = api_modules()
    for module in modules:
        with mkdocs_gen_files.open(f"api/{module}.md", "w") as f:
            f.write(f"# `{module}`\n\n::: {module}\n")
    with mkdocs_gen_files.open("api/index.md", "w") as f:
        f.write("# API reference\n\nOne page per module, from the docstrings.\n\n")
        f.write("".join(f"- [`{module}`]({module}.md)\n" for module in modules))


if __name__ in ("__main__", "<run_path>"):
    main()
