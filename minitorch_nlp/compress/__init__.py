"""Model size reduction, the survey's section VI: knowledge distillation (a small student trained
to match a large teacher, :mod:`.distillation`), pruning (:mod:`.pruning`) and quantisation
(:mod:`.quantization`)."""
from .distillation import *  # noqa: F401,F403
from .tinybert import *  # noqa: F401,F403
from .tinybert_augmentation import *  # noqa: F401,F403
from .mobilebert_losses import *  # noqa: F401,F403
