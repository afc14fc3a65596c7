"""The equation registry: the package's own index of the 111 numbered equations of the paper
*The NLP Cookbook: Modern Recipes for Transformer based Deep Learning Architectures*.

Library code that implements an equation says so with a decorator::

    from minitorch_nlp import cookbook

    @cookbook.equation(12)
    def scaled_dot_product_attention(q, k, v, mask=None):
        ...

and tests that check it carry ``@pytest.mark.eq(12)``. ``minitorch-nlp equations`` joins the two:
for each equation, its section, the code registered for it and the tests that check it.

Registration happens when the implementing module is imported; :func:`import_all` imports every
submodule so that the registry is complete. This module uses the standard library only, so any
module of the package can import it without an import cycle.
"""

from __future__ import annotations

import ast
import importlib
import operator
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CHAPTERS",
    "EQUATIONS",
    "Equation",
    "equation",
    "find_tests",
    "implementations",
    "import_all",
    "tests_by_equation",
]

CHAPTERS: dict[int, str] = {
    3: "Preliminaries to modern NLP architectures",
    4: "NLU architectures",
    5: "NLG architectures",
    6: "Model size reduction",
    7: "Information retrieval",
    8: "Long sequence models",
    9: "Computationally efficient architectures",
}
"""The paper's chapters that hold numbered equations; test markers ``sec3``..``sec9`` name them."""

_ROMAN = {"I": 1, "V": 5, "X": 10}


def _roman_to_int(numeral: str) -> int:
    values = [_ROMAN[c] for c in numeral.upper()]
    return sum(-v if v < following else v for v, following in zip(values, values[1:] + [0]))


@dataclass(frozen=True)
class Equation:
    """One numbered equation of the paper: its number, its section heading and what it is."""

    number: int
    section: str
    description: str

    @property
    def chapter(self) -> int:
        """The paper's chapter as an integer (``"IV-B ELMo"`` -> 4), as in the ``secN`` markers."""
        return _roman_to_int(re.match(r"[IVX]+", self.section).group())


# The paper's numbered equations, grouped under the section heading they appear in (the headings
# are the paper's own, spelling included): (section, ((number, what it is), ...)).
_SECTIONS = (
    (
        "III. PRELIMANIERES TO MODERN NLP ARCHITECTURES",
        (
            (1, "seq2seq argmax decoding objective"),
            (2, "autoregressive conditional probability"),
            (3, "RNN encoder hidden state"),
            (4, "RNN encoder output"),
            (5, "RNN decoder hidden state"),
            (6, "RNN decoder softmax output"),
            (7, "alignment score e_tj"),
            (8, "Bahdanau additive alignment score"),
            (9, "attention weights softmax"),
            (10, "context vector"),
        ),
    ),
    (
        "IV-A.2. Queries, Keys, and Values",
        (
            (11, "softmax(QK^T) weights"),
            (12, "scaled dot-product attention Z=W_SM V"),
        ),
    ),
    (
        "IV-B EMBEDDINGS FROM LANGUAGE MODELS: ELMo",
        (
            (13, "forward LM factorisation"),
            (14, "backward LM factorisation"),
            (15, "ELMo layer representations R_k"),
            (16, "biLSTM concat h_kj"),
            (17, "ELMo task scalar mix"),
        ),
    ),
    (
        "IV-B GENERATIVE PRE-TRAINING MODEL: GPT-I",
        (
            (18, "GPT LM objective L1"),
            (19, "transformer block stack"),
            (20, "token+position embedding h0"),
            (21, "tied output softmax"),
            (22, "fine-tune classifier head"),
            (23, "fine-tune objective L2"),
            (24, "L3 = L2 + lambda L1 auxiliary LM"),
        ),
    ),
    (
        "IV-D GENERALIZED AUTOREGRESSIVE PRETRAINING FOR LANGUAGE UNDERSTANDING: XLNet",
        (
            (25, "BERT independent masked objective"),
            (26, "XLNet AR objective over targets"),
            (27, "permutation LM expectation"),
        ),
    ),
    (
        "IV-D.2. Model Architecture",
        (
            (28, "standard next-token softmax"),
            (29, "target-aware reparametrisation g(x,z_t)"),
        ),
    ),
    (
        "V-C.1. Supervised Machine Translation",
        (
            (30, "mBART language sampling ratio"),
            (31, "mBART denoising objective"),
        ),
    ),
    (
        "V-G SCALING GIANT MODELS WITH CONDITIONAL COMPUTATION AND AUTOMATIC SHARDING: GShard",
        (
            (32, "GShard gating"),
            (33, "expert FFN"),
            (34, "MoE weighted combine"),
        ),
    ),
    (
        "VI-A DISTILLATION",
        (
            (35, "softmax"),
            (36, "temperature softmax"),
            (37, "distillation loss L_D"),
            (38, "student loss L_s"),
            (39, "combined KD loss"),
        ),
    ),
    (
        "VI-A.2. TinyBERT",
        (
            (40, "TinyBERT layerwise model loss"),
            (41, "TinyBERT attention MSE"),
            (42, "TinyBERT hidden MSE with W_h"),
            (43, "TinyBERT embedding MSE"),
            (44, "TinyBERT prediction loss"),
        ),
    ),
    (
        "VI-A.3. MobileBERT",
        (
            (45, "MobileBERT NoNorm"),
            (46, "feature map transfer MSE"),
            (47, "attention transfer KL"),
            (48, "pre-training distillation loss"),
        ),
    ),
    (
        "VI-B.2-A STRUCTURED PRUNING",
        (
            (49, "L0 pruning mask theta*z"),
            (50, "FLOP factorised W=PGQ"),
        ),
    ),
    (
        "VI-B.3-A Analyzing Multi-Head Self-Attention: Specialized Heads Do the Heavy "
        "Lifting, Rest Can Be Pruned",
        (
            (51, "head-gate L0 norm"),
            (52, "relaxed L0 (hard concrete)"),
        ),
    ),
    (
        "VI-B.3-B ARE 16 HEADS REALLY BETTER THAN ONE?",
        (
            (53, "masked multi-head attention sum"),
            (54, "head importance I_h"),
            (55, "head importance via activations"),
        ),
    ),
    (
        "VI-C.1 LQ-NETS",
        (
            (56, "quantisation function Q(x)"),
            (57, "LQ learnable quantiser"),
            (58, "bitwise xnor inner product"),
        ),
    ),
    (
        "VI-C.2 QBERT",
        (
            (59, "Q-BERT loss"),
            (60, "Hessian-vector product"),
        ),
    ),
    (
        "VI-C.3 Q8BERT",
        (
            (61, "Q8BERT symmetric linear quantisation"),
        ),
    ),
    (
        "VII-A GOLDEN RETRIEVER",
        (
            (62, "GoldEn query generation"),
            (63, "GoldEn context concatenation"),
        ),
    ),
    (
        "VII-B ORQA",
        (
            (64, "ORQA question encoder"),
            (65, "ORQA block encoder"),
            (66, "ORQA retrieval score"),
            (67, "reader start"),
            (68, "reader end"),
            (69, "reader span score"),
            (70, "ICT objective"),
            (71, "ORQA answer derivation distribution"),
        ),
    ),
    (
        "VII-C REALM",
        (
            (72, "REALM retrieval distribution"),
            (73, "REALM marginal p(y|x)"),
            (74, "BERT join single"),
            (75, "BERT join pair"),
            (76, "REALM MLM product"),
            (77, "REALM masked token prob"),
            (78, "REALM span prob"),
            (79, "REALM h_start"),
            (80, "REALM h_end"),
        ),
    ),
    (
        "VII-D RETRIEVAL AUGMENTED GENERATION: RAG",
        (
            (81, "RAG-Sequence"),
            (82, "RAG-Token"),
            (83, "DPR retriever p_eta"),
        ),
    ),
    (
        "VII-D DENSE PASSAGE RETRIEVAL: DPR",
        (
            (84, "DPR NLL with negatives"),
        ),
    ),
    (
        "VIII-A DEEPER SELF-ATTENTION",
        (
            (85, "char LM joint probability"),
        ),
    ),
    (
        "VIII-B TRANSFORMER-XL",
        (
            (86, "autoregressive joint"),
            (87, "XL memory concat with stop-gradient"),
            (88, "XL q,k,v over extended context"),
            (89, "XL transformer layer"),
            (90, "absolute-position attention score"),
            (91, "relative-position attention score"),
        ),
    ),
    (
        "IX-A SPARSE TRANSFORMER",
        (
            (92, "sparse attention over pattern S"),
            (93, "interleaved factorised heads"),
            (94, "merged factorised head"),
            (95, "multi-head factorised"),
        ),
    ),
    (
        "IX-B REFORMER",
        (
            (96, "LSH attention o_i"),
            (97, "LSH attention with mask m"),
            (98, "multi-round hashing union"),
            (99, "chunked sorted attention"),
            (100, "LSH multi-round output"),
            (101, "multi-round combination"),
            (102, "multi-round weights"),
            (103, "single-round output"),
            (104, "reversible forward"),
            (105, "reversible inverse"),
        ),
    ),
    (
        "IX-C A LITE BERT: ALBERT",
        (
            (106, "ALBERT n-gram masking p(n)"),
        ),
    ),
    (
        "IX-D ELECTRA",
        (
            (107, "ELECTRA generator MLM loss"),
            (108, "ELECTRA discriminator loss"),
            (109, "generator softmax"),
            (110, "ELECTRA combined loss"),
        ),
    ),
    (
        "IX-E LINFORMER",
        (
            (111, "Linformer low-rank head"),
        ),
    ),
)

EQUATIONS: dict[int, Equation] = {
    number: Equation(number, section, description)
    for section, rows in _SECTIONS
    for number, description in rows
}
"""Every numbered equation of the paper, by number (1..111)."""

_implementations: dict[int, list[str]] = {number: [] for number in EQUATIONS}


def _check_number(number) -> int:
    if isinstance(number, bool) or not hasattr(number, "__index__"):
        raise TypeError(
            f"equation numbers are integers 1..{len(EQUATIONS)}, got {number!r} "
            f"of type {type(number).__name__}"
        )
    number = operator.index(number)
    if number not in EQUATIONS:
        raise ValueError(
            f"the paper has equations 1..{len(EQUATIONS)}; there is no equation {number}"
        )
    return number


def equation(*numbers: int):
    """Register the decorated function or class as the implementation of equations ``numbers``.

    The object is registered as ``module.qualname`` and returned unchanged::

        @equation(11, 12)
        def scaled_dot_product_attention(q, k, v): ...
    """
    if len(numbers) == 1 and callable(numbers[0]):
        raise TypeError("use @equation(n) with the equation number(s), not bare @equation")
    if not numbers:
        raise TypeError("@equation() needs at least one equation number")
    checked = [_check_number(number) for number in numbers]

    def register(obj):
        name = f"{obj.__module__}.{obj.__qualname__}"
        for number in checked:
            if name not in _implementations[number]:
                _implementations[number].append(name)
        return obj

    return register


def implementations(number: int) -> list[str]:
    """Qualified names (``module.qualname``) of the code registered for equation ``number``.

    Only modules that have been imported have registered; call :func:`import_all` first for the
    complete picture.
    """
    return list(_implementations[_check_number(number)])


def import_all() -> list[str]:
    """Import every submodule of ``minitorch_nlp`` so that all ``@equation`` registrations run.

    Modules whose optional dependencies are missing (an ``ImportError``, e.g. no cupy) are skipped;
    their names are returned. Any other error propagates: it is a bug worth seeing.
    """
    package = importlib.import_module(__package__ or "minitorch_nlp")
    skipped = []
    modules = pkgutil.walk_packages(
        package.__path__, package.__name__ + ".", onerror=skipped.append
    )
    for module in modules:
        if module.name.rsplit(".", 1)[-1] == "__main__":
            continue
        try:
            importlib.import_module(module.name)
        except ImportError:
            skipped.append(module.name)
    return sorted(set(skipped))


def _default_tests_dir() -> Path | None:
    """The ``tests`` folder of the source checkout this package was imported from, if any."""
    root = Path(__file__).resolve().parent.parent
    tests = root / "tests"
    if tests.is_dir() and ((root / "pyproject.toml").is_file() or (root / "setup.cfg").is_file()):
        return tests
    return None


def _is_eq_mark(node: ast.expr) -> bool:
    """``pytest.mark.eq`` or ``mark.eq`` (as in ``from pytest import mark``)."""
    return _is_mark(node, "eq")


def _is_mark(node: ast.expr, name: str) -> bool:
    """``pytest.mark.<name>`` or ``mark.<name>``."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == name
        and (
            (isinstance(node.value, ast.Attribute) and node.value.attr == "mark")
            or (isinstance(node.value, ast.Name) and node.value.id == "mark")
        )
    )


def _eq_numbers(expressions) -> set[int]:
    """Equation numbers named by every ``pytest.mark.eq(...)`` call inside ``expressions``."""
    numbers = set()
    for expression in expressions:
        for node in ast.walk(expression):
            if isinstance(node, ast.Call) and _is_eq_mark(node.func):
                numbers.update(
                    arg.value
                    for arg in node.args
                    if isinstance(arg, ast.Constant) and type(arg.value) is int
                )
    return numbers


def _pytestmark(body) -> list[ast.expr]:
    """The values assigned to ``pytestmark`` in a module or class body."""
    values = []
    for statement in body:
        if isinstance(statement, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "pytestmark"
            for target in statement.targets
        ):
            values.append(statement.value)
        elif (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and statement.target.id == "pytestmark"
            and statement.value is not None
        ):
            values.append(statement.value)
    return values


def _is_parametrize(node: ast.expr) -> bool:
    """A ``pytest.mark.parametrize(...)`` or ``mark.parametrize(...)`` call."""
    return isinstance(node, ast.Call) and _is_mark(node.func, "parametrize")


def _is_param(node: ast.expr) -> bool:
    """A ``pytest.param(...)`` call."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "param"
    )


def _value_id(node: ast.expr, argname: str, index: int) -> str:
    """The id pytest generates for one parameter value: the value itself for numbers, strings,
    booleans and None, ``argname`` and the position otherwise."""
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return f"{argname}{index}"
    if value is None or isinstance(value, (bool, int, float, str)):
        return str(value)
    return f"{argname}{index}"


def _parametrized_ids(decorator: ast.Call) -> dict[int, list[str]] | None:
    """Equation number -> the ids (``"12"`` of ``test[12]``) of the cases of one parametrize
    decorator that carry ``pytest.param(..., marks=pytest.mark.eq(n))``.

    None when the ids cannot be read from the source (computed argument lists, ``ids=``,
    repeated ids), so that the caller falls back to the whole function.
    """
    if len(decorator.args) < 2 or decorator.keywords:
        return None
    names, cases = decorator.args[0], decorator.args[1]
    if isinstance(names, ast.Constant) and isinstance(names.value, str):
        argnames = [name.strip() for name in names.value.split(",") if name.strip()]
    elif isinstance(names, (ast.List, ast.Tuple)) and all(
        isinstance(name, ast.Constant) and isinstance(name.value, str) for name in names.elts
    ):
        argnames = [name.value for name in names.elts]
    else:
        return None
    if not isinstance(cases, (ast.List, ast.Tuple)):
        return None
    ids, found = [], {}
    for index, case in enumerate(cases.elts):
        keywords = {k.arg: k.value for k in case.keywords} if _is_param(case) else {}
        if _is_param(case):
            values = case.args
        elif len(argnames) == 1:
            values = [case]
        elif isinstance(case, (ast.List, ast.Tuple)):
            values = case.elts
        else:
            return None
        if "id" in keywords:
            if not isinstance(keywords["id"], ast.Constant):
                return None
            case_id = str(keywords["id"].value)
        else:
            case_id = "-".join(_value_id(value, name, index)
                               for value, name in zip(values, argnames))
        ids.append(case_id)
        if "marks" in keywords:
            for number in _eq_numbers([keywords["marks"]]):
                found.setdefault(number, []).append(case_id)
    if len(set(ids)) != len(ids):
        return None
    return found


def _function_ids(node, prefix: str, covered: set[int]) -> dict[int, list[str]]:
    """Equation number -> node ids of one test function: ``prefix::test`` for marks on the
    function, ``prefix::test[case]`` for marks on single cases of its only parametrize
    decorator (so that the id runs that case, not all of them)."""
    node_id = f"{prefix}::{node.name}"
    parametrizes = [d for d in node.decorator_list if _is_parametrize(d)]
    by_case = _parametrized_ids(parametrizes[0]) if len(parametrizes) == 1 else None
    others = node.decorator_list if by_case is None else [
        d for d in node.decorator_list if d is not parametrizes[0]]
    ids: dict[int, list[str]] = {}
    for number in _eq_numbers(others) - covered:
        ids.setdefault(number, []).append(node_id)
    for number, cases in (by_case or {}).items():
        if number not in covered and number not in ids:
            ids[number] = [f"{node_id}[{case}]" for case in cases]
    return ids


def _collect(body, prefix: str, covered: set[int], found: dict[int, list[str]]) -> None:
    """Record the test functions and classes in ``body`` under the equations they are marked with.

    A class (or module) marked as a whole is recorded once, by its own node id, and the tests
    inside it only under the equations they add (``covered`` holds those already recorded).
    """
    for node in body:
        is_function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        if is_function and node.name.startswith("test"):
            for number, node_ids in _function_ids(node, prefix, covered).items():
                found.setdefault(number, []).extend(node_ids)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            node_id = f"{prefix}::{node.name}"
            marked = _eq_numbers(node.decorator_list) | _eq_numbers(_pytestmark(node.body))
            for number in marked - covered:
                found.setdefault(number, []).append(node_id)
            _collect(node.body, node_id, covered | marked, found)


def tests_by_equation(tests_dir: str | Path | None = None) -> dict[int, list[str]]:
    """Map each equation number to the pytest node ids in ``tests_dir`` marked ``eq(n)``.

    Reads the test files with :mod:`ast` (nothing is imported or run). Understands decorators
    (``@pytest.mark.eq(3, 4)``, marks inside ``pytest.param(..., marks=...)``), class decorators
    and ``pytestmark = ...`` in modules and classes. Node ids are relative to the folder that holds
    ``tests_dir``: ``"tests/test_attention.py::test_scaled_dot_product"``; a module or class marked
    as a whole appears once, as ``"tests/test_x.py"`` or ``"tests/test_x.py::TestY"``; a case of a
    parametrized test marked through ``pytest.param(..., marks=...)`` appears as the id of that
    case, ``"tests/test_check.py::test_x[12]"``, so that every id runs as it is. Without
    ``tests_dir`` the ``tests`` folder of the source checkout is used; an installed package has
    none, and the result is empty.
    """
    tests = Path(tests_dir) if tests_dir is not None else _default_tests_dir()
    found: dict[int, list[str]] = {}
    if tests is None or not tests.is_dir():
        return found
    for path in sorted(tests.rglob("*.py")):
        if not (path.name.startswith("test_") or path.name.endswith("_test.py")):
            continue
        module = ast.parse(path.read_bytes(), filename=str(path))
        node_id = path.relative_to(tests.parent).as_posix()
        marked = _eq_numbers(_pytestmark(module.body))
        for number in marked:
            found.setdefault(number, []).append(node_id)
        _collect(module.body, node_id, marked, found)
    return {number: sorted(set(node_ids)) for number, node_ids in sorted(found.items())}


def find_tests(number: int, tests_dir: str | Path | None = None) -> list[str]:
    """Pytest node ids of the tests marked ``@pytest.mark.eq(number)``.

    See :func:`tests_by_equation`, which reads the test files once for all equations.
    """
    return tests_by_equation(tests_dir).get(_check_number(number), [])
