"""The configurations of the model families, one module per family: sizes and switches with
HuggingFace's field names, their checks (``checks.validate`` reads each class's ``RULES``) and
the translation from and to a HuggingFace ``config.json``. Each model module imports its
configuration from here and exports it, so ``from minitorch_nlp.models.gpt import GPTConfig``
works as before."""
