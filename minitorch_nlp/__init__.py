"""minitorch_nlp: a NumPy-first autograd engine and the architectures of *The NLP Cookbook*.

The public names mirror PyTorch where a learner already knows them (``tensor``, ``no_grad``,
``nn.Module``, ``optim.AdamW``) and NumPy where they are array functions (``axis=``,
``concatenate``, ``einsum``).
"""
from .autograd import *  # noqa: F401,F403 - the tensor API is the package's API
from .autograd import __all__ as _autograd_names
from .backends import available_backends, backend, get_backend, register_backend, set_backend
from .backends.threads import set_num_threads
from . import functional, io, nn, optim  # noqa: E402 - they build on the names above
from .io import from_pretrained, load, save, save_pretrained  # noqa: E402 - mt.save / mt.load
from .data.tokenizers import load_tokenizer  # noqa: E402

__version__ = "0.1.0"

__all__ = list(_autograd_names) + ["available_backends", "backend", "get_backend",
                                   "from_pretrained", "load", "load_tokenizer",
                                   "register_backend", "save", "save_pretrained", "set_backend",
                                   "set_num_threads"]
