"""The paper's architectures, one module per family, named after each paper's system."""
from . import bert  # noqa: F401
from . import distilbert  # noqa: F401
from . import dpr  # noqa: F401
from . import elmo  # noqa: F401
from . import gpt  # noqa: F401
from . import mobilebert  # noqa: F401
from . import roberta  # noqa: F401
from . import seq2seq  # noqa: F401
from . import transformer  # noqa: F401
