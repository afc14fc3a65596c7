"""MkDocs hook: fills two markers at build time, so that the pages show what the code does.

``<!-- computation-graph -->``: a Mermaid drawing of the graph that the engine records for a small
expression, walked from the output's ``grad_fn``. ``<!-- check-specs -->``: the table of the
equations that ``check`` knows, with each candidate's signature, from the specs."""
from __future__ import annotations

import minitorch_nlp as mt
from minitorch_nlp.autograd.function import LeafNode

GRAPH_MARKER = "<!-- computation-graph -->"
SPECS_MARKER = "<!-- check-specs -->"
EXPRESSION = "y = (x * w + b).tanh().sum()"


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


def on_page_markdown(markdown, page, config, files):
    if GRAPH_MARKER in markdown:
        markdown = markdown.replace(GRAPH_MARKER, computation_graph())
    if SPECS_MARKER in markdown:
        markdown = markdown.replace(SPECS_MARKER, check_specs())
    return markdown
