"""``python -m minitorch_nlp`` runs the ``minitorch-nlp`` command."""

from minitorch_nlp.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
