"""The paper's architectures, one module per family, named after each paper's system."""
from . import elmo  # noqa: F401
from . import seq2seq  # noqa: F401
from . import transformer  # noqa: F401
