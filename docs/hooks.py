"""MkDocs hook: replaces ``<!-- computation-graph -->`` in a page with a Mermaid drawing of the
graph that the engine records for a small expression, walked from the output's ``grad_fn``
(so the drawing shows what the engine really builds)."""
from __future__ import annotations

import minitorch_nlp as mt
from minitorch_nlp.autograd.function import LeafNode

MARKER = "<!-- computation-graph -->"
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


def on_page_markdown(markdown, page, config, files):
    if MARKER in markdown:
        return markdown.replace(MARKER, computation_graph())
    return markdown
