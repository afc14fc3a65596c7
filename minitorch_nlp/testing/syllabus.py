"""A syllabus for a course on The NLP Cookbook: the checkable equations in units, in the order
they build on each other, with each task's difficulty and estimated time.

``UNITS`` orders the equations for teaching (a unit uses only what earlier units taught: softmax
before the losses built on it, the RNN encoder-decoder before its attention, scaled dot-product
attention before every Transformer). ``TASKS`` gives each equation's difficulty (1 easy: a few
lines of tensor maths; 2 medium: masks, several steps or a module's weights; 3 hard: a whole
layer, model or search) and the minutes a student who followed the earlier units usually needs.
``course new`` gives each task its difficulty as points; ``syllabus_markdown()`` renders the
tables of ``docs/teaching.md`` (``python -m minitorch_nlp.testing.syllabus docs/teaching.md``
rewrites them).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from minitorch_nlp import cookbook

__all__ = ["DIFFICULTY", "TASKS", "UNITS", "Unit", "syllabus_markdown", "unit_of"]

DIFFICULTY = {1: "easy", 2: "medium", 3: "hard"}

# equation: (difficulty, estimated minutes)
TASKS: dict[int, tuple[int, int]] = {
    1: (2, 45), 2: (1, 20), 3: (1, 30), 4: (1, 20), 5: (2, 40), 6: (1, 20), 7: (1, 20),
    8: (2, 30), 9: (1, 20), 10: (1, 15), 11: (2, 30), 12: (2, 30), 13: (2, 45), 14: (2, 40),
    15: (2, 45), 16: (3, 60), 17: (1, 20), 18: (1, 25), 19: (3, 90), 20: (1, 20), 21: (1, 20),
    22: (1, 20), 23: (1, 20), 24: (1, 20), 25: (1, 25), 26: (3, 90), 27: (3, 60), 28: (2, 45),
    29: (3, 60), 30: (1, 15), 31: (2, 30), 32: (3, 60), 33: (1, 20), 34: (2, 45), 35: (1, 15),
    36: (1, 15), 37: (1, 20), 38: (1, 15), 39: (1, 20), 40: (2, 45), 41: (1, 20), 42: (1, 20),
    43: (1, 20), 44: (1, 20), 45: (1, 10), 46: (1, 20), 47: (2, 30), 48: (1, 10), 49: (2, 30),
    50: (2, 30), 51: (1, 15), 52: (2, 25), 53: (2, 45), 54: (3, 60), 55: (2, 45), 56: (1, 20),
    57: (2, 40), 58: (2, 40), 59: (1, 20), 60: (3, 45), 61: (1, 20), 62: (2, 30), 63: (1, 20),
    64: (1, 15), 65: (1, 15), 66: (1, 10), 67: (1, 15), 68: (1, 15), 69: (2, 30), 70: (1, 15),
    71: (2, 40), 72: (1, 15), 73: (2, 30), 74: (1, 15), 75: (1, 15), 76: (2, 30), 77: (2, 30),
    78: (2, 40), 79: (1, 15), 80: (1, 15), 81: (2, 40), 82: (2, 40), 83: (1, 15), 84: (1, 25),
    85: (2, 30), 86: (3, 90), 87: (1, 15), 88: (2, 45), 89: (3, 90), 90: (2, 40), 91: (3, 90),
    92: (2, 45), 93: (2, 45), 94: (2, 45), 95: (3, 60), 96: (3, 60), 97: (2, 45), 98: (3, 60),
    99: (3, 75), 100: (3, 90), 101: (3, 60), 102: (2, 40), 103: (2, 45), 104: (1, 20),
    105: (1, 20), 106: (1, 15), 107: (1, 20), 108: (1, 25), 109: (2, 30), 110: (1, 15),
    111: (2, 40),
}


@dataclass(frozen=True)
class Unit:
    """A unit of the course: its equations in teaching order and the units it builds on
    (numbered from 1)."""

    title: str
    equations: tuple[int, ...]
    builds_on: tuple[int, ...] = ()


UNITS: tuple[Unit, ...] = (
    Unit("Softmax and the probability of a sequence", (35, 2, 1)),
    Unit("The RNN encoder-decoder", (3, 4, 5, 6), (1,)),
    Unit("Attention in sequence-to-sequence models", (7, 8, 9, 10), (2,)),
    Unit("Scaled dot-product attention", (11, 12), (1, 3)),
    Unit("ELMo: bidirectional language models", (13, 14, 16, 15, 17), (1, 2)),
    Unit("GPT: generative pre-training", (20, 19, 21, 18, 22, 23, 24), (4,)),
    Unit("BERT and XLNet: masked and permuted language models", (25, 27, 28, 26, 29), (6,)),
    Unit("Multilingual denoising and mixtures of experts", (30, 31, 33, 32, 34), (6,)),
    Unit("Distillation: DistilBERT, TinyBERT, MobileBERT",
         (36, 37, 38, 39, 41, 42, 43, 44, 40, 45, 46, 47, 48), (1, 4)),
    Unit("Pruning", (49, 50, 51, 52, 53, 54, 55), (4,)),
    Unit("Quantisation", (56, 57, 58, 61, 59, 60), (1,)),
    Unit("Retrieval: GoldEn, ORQA, REALM, RAG, DPR",
         (66, 70, 72, 83, 84, 64, 65, 67, 68, 79, 80, 69, 71, 74, 75, 73, 76, 77, 78, 81, 82,
          62, 63), (7,)),
    Unit("Long sequences: character Transformer and Transformer-XL",
         (85, 87, 88, 90, 91, 89, 86), (6,)),
    Unit("Efficient attention: Sparse Transformer and Reformer",
         (92, 93, 94, 95, 96, 97, 98, 99, 102, 103, 100, 101, 104, 105), (4,)),
    Unit("ALBERT, ELECTRA and Linformer", (106, 107, 109, 108, 110, 111), (4, 7)),
)


def unit_of(number: int) -> int:
    """The unit (numbered from 1) that teaches equation ``number``."""
    for index, unit in enumerate(UNITS, start=1):
        if number in unit.equations:
            return index
    raise ValueError(f"syllabus: equation {number} is in no unit")


def syllabus_markdown() -> str:
    """One table per unit: each task's equation, function, what it is, difficulty, estimated
    time and whether it is checked on values only, then the command that makes the unit's
    workspace."""
    from .check import specs

    lines = []
    for index, unit in enumerate(UNITS, start=1):
        minutes = sum(TASKS[n][1] for n in unit.equations)
        after = _units(unit.builds_on)
        lines += [f"### Unit {index}: {unit.title}", "",
                  f"{len(unit.equations)} tasks, about {_duration(minutes)}; builds on {after}.",
                  "", "| eq | function | what it is | difficulty | time | checked on |",
                  "|---|---|---|---|---|---|"]
        for n in unit.equations:
            difficulty, time = TASKS[n]
            checked = "values and gradients" if specs[n].differentiable else "values only"
            lines.append(f"| {n} | `{specs[n].function}` | {cookbook.EQUATIONS[n].description} "
                         f"| {DIFFICULTY[difficulty]} | {time} min | {checked} |")
        numbers = ",".join(map(str, unit.equations))
        lines += ["", "```bash", f"minitorch-nlp course new unit{index} --equations {numbers}",
                  "```", ""]
    return "\n".join(lines).rstrip("\n")


def _units(numbers) -> str:
    if not numbers:
        return "the engine only"
    if len(numbers) == 1:
        return f"unit {numbers[0]}"
    return f"units {', '.join(map(str, numbers[:-1]))} and {numbers[-1]}"


def _duration(minutes: int) -> str:
    hours, rest = divmod(minutes, 60)
    if not hours:
        return f"{rest} min"
    return f"{hours} h {rest:02d} min" if rest else f"{hours} h"


BEGIN, END = "<!-- syllabus: begin -->", "<!-- syllabus: end -->"


def write_page(path) -> None:
    """Replace the text between the syllabus markers of the page at ``path`` with
    :func:`syllabus_markdown`."""
    path = Path(path)
    text = path.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    path.write_text(f"{head}{BEGIN}\n{syllabus_markdown()}\n{END}{tail}")


if __name__ == "__main__":
    write_page(sys.argv[1])
