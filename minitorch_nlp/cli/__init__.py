"""The ``minitorch-nlp`` command.

``minitorch-nlp demo``       the main job: train a small GPT on the built-in corpus, then sample
``minitorch-nlp train``      train a registered model family (gpt, bert, t5, xl ...) on your own
                             text (``--resume`` continues a run; ``--parallel`` under ``mpirun``)
``minitorch-nlp generate``   continue a prompt with a trained model (or fill [MASK]s with a BERT)
``minitorch-nlp equations``  the paper's equations, the code that implements each and its tests
``minitorch-nlp example``    a worked example of the engine: an MLP learns the two-spirals task
``minitorch-nlp check``      property-test your own implementation of an equation
``minitorch-nlp course``     write a student workspace of stubs, or grade one
``minitorch-nlp compress``   a smaller model of a trained run: layers dropped, heads pruned, int8
``minitorch-nlp distill``    train a DistilBERT, TinyBERT or MobileBERT student from a BERT run
``minitorch-nlp index``      build a passage index from a text file, or search one
``minitorch-nlp ask``        answer a question from an index's best passages
``minitorch-nlp plan``       memory and communication per device of a parallel layout

``main`` and the parser that holds every command are ``cli.entry``; the helpers the commands
share (the error style, the checks of options, running a training command) are ``cli.common``,
which the packages' sub-command modules import.
"""
from __future__ import annotations

__all__ = ["main"]


def __getattr__(name):
    # ``main`` (the console script ``minitorch_nlp.cli:main``) is imported on first use: a
    # sub-command module imported on its own imports ``cli.common``, which runs this package
    # first, and assembling the parser here would import that sub-command module back.
    if name == "main":
        from .entry import main
        globals()["main"] = main
        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
