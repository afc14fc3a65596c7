"""Input checks shared by the layers and models: one place for the messages a user reads when an
argument is wrong. Each check names the operation (``where``), the argument and what was given,
and says what to change; each returns the value in the form the caller computes with.

A model file calls these in one or two lines at the top of ``forward``, so that the paper's maths
below them reads without guards.
"""
from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable

import numpy as np

from .autograd import Tensor

__all__ = ["SettingError", "attention_mask", "divides", "features", "ids_array", "int_at_least",
           "ints_at_least", "memories", "numbers_in", "one_of", "positive", "positive_int",
           "positive_numbers",
           "probabilities", "same_batch", "special_token_ids", "token_ids", "validate"]


class SettingError(ValueError):
    """A setting that cannot work: ``setting`` names the field of the configuration ``where``
    (a ``TrainConfig`` by default), so that the command line can name its option (``n_layer``
    -> ``--n-layer``)."""

    def __init__(self, setting, problem, where="TrainConfig"):
        self.setting, self.problem = setting, problem
        super().__init__(f"{where}: " + self.about(setting))

    def about(self, name):
        """The problem told about the setting called ``name`` (a field or an option)."""
        return name + ("" if self.problem.startswith("=") else " ") + self.problem


def int_at_least(value, minimum, name, where):
    """``value`` as an int if it is an integer >= ``minimum`` (bools refused), else a ValueError
    naming it."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) \
            or value < minimum:
        wanted = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise SettingError(name, f"must be {wanted}, got {value!r}", where)
    return int(value)


def positive_int(value, name, where):
    """``value`` if it is an int > 0 (bools refused), else a ValueError naming it."""
    return int_at_least(value, 1, name, where)


def features(x, width, name, where):
    """``x`` must be a Tensor (batch, time, ``width``)."""
    if not isinstance(x, Tensor) or x.ndim != 3 or x.shape[-1] != width:
        shape = x.shape if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{where}: {name} must be a Tensor of shape (batch, time, d_model="
                         f"{width}), got {shape}")
    return x


def _numpy(value):
    return value.numpy() if isinstance(value, Tensor) else np.asarray(value)


def ids_array(values, name, where, shape=None, axes="(batch, time)"):
    """Integer ids (a Tensor, an array or nested lists) as an int64 NumPy array with the axes
    ``axes`` (or exactly ``shape``)."""
    ndim = axes.count(",") + 1
    try:
        array = _numpy(values)
    except ValueError:
        raise ValueError(f"{where}: {name} must be integer ids of shape {axes}, got sequences of "
                         "different lengths; pad them to one length") from None
    if (array.ndim != ndim or (array.size and array.dtype.kind not in "iu")
            or (shape is not None and array.shape != tuple(shape))):
        expected = axes if shape is None else str(tuple(shape))
        raise ValueError(f"{where}: {name} must be integer ids of shape {expected}, got "
                         f"{array.dtype} of shape {array.shape}")
    return array.astype(np.int64, copy=False)


def token_ids(values, vocab_size, where, name="input_ids", size_name="vocab_size", shape=None,
              axes="(batch, time)"):
    """``ids_array`` whose ids all lie in [0, vocab_size), and that is not empty."""
    array = ids_array(values, name, where, shape, axes)
    if array.shape[-1] == 0:
        raise ValueError(f"{where}: {name} is empty (shape {array.shape})")
    outside = (array < 0) | (array >= vocab_size)
    if outside.any():
        table = "the vocabulary " if size_name == "vocab_size" else ""
        raise ValueError(f"{where}: {name} holds {int(array[outside][0])}, outside {table}"
                         f"[0, {size_name}={vocab_size})")
    return array


def same_batch(where, **arrays):
    """The arrays given by name (None: not given; ids, masks or hidden states) hold one batch:
    the first axis of each is as long as the others', as an encoder-decoder needs of its inputs,
    its labels and its decoder's inputs before the decoder attends to the encoder."""
    batches = {name: (value.shape[0] if hasattr(value, "shape") else len(value))
               for name, value in arrays.items()
               if value is not None and (not hasattr(value, "shape") or len(value.shape))}
    if len(set(batches.values())) > 1:
        given = ", ".join(f"{name} of batch {batch}" for name, batch in batches.items())
        raise ValueError(f"{where}: {given}: give each the same number of rows (one per "
                         "example)")


def attention_mask(mask, shape, where):
    """HuggingFace's ``attention_mask`` (batch, keys), 1 / True on tokens and 0 / False on
    padding, as the bool key mask the attention takes; None when every token is real (the fused
    attention then skips the mask)."""
    if mask is None:
        return None
    array = _numpy(mask)
    if array.shape != tuple(shape):
        raise ValueError(f"{where}: attention_mask of shape {array.shape} must be {tuple(shape)}: "
                         "one entry per key (cached ones included), 1 for tokens and 0 for "
                         "padding")
    array = array.astype(bool)
    return None if array.all() else array


def memories(mems, n_layer, batch, width, dtype, where):
    """Transformer-XL / XLNet memories: None, or one Tensor (batch, mem_time, ``width``) per
    layer, all of one length and of the model's ``dtype``. Returns mem_time (0 for None)."""
    if mems is None:
        return 0
    if not isinstance(mems, (list, tuple)) or len(mems) != n_layer:
        raise ValueError(f"{where}: mems must be a list of {n_layer} Tensors (one per layer), "
                         f"got {type(mems).__name__}"
                         + (f" of {len(mems)}" if isinstance(mems, (list, tuple)) else ""))
    lengths = set()
    for i, memory in enumerate(mems):
        if not isinstance(memory, Tensor) or memory.ndim != 3 or memory.shape[0] != batch \
                or memory.shape[2] != width:
            shape = memory.shape if isinstance(memory, Tensor) else type(memory).__name__
            raise ValueError(f"{where}: mems[{i}] must be a Tensor (batch={batch}, mem_time, "
                             f"d_model={width}), got {shape}")
        if memory.dtype != dtype:
            raise ValueError(f"{where}: mems[{i}] is {memory.dtype} but the model is {dtype}; "
                             "cast the memory (or the model) to one dtype")
        lengths.add(memory.shape[1])
    if len(lengths) > 1:
        raise ValueError(f"{where}: every layer's memory needs the same length, got "
                         f"{sorted(lengths)}")
    return lengths.pop()


# ---- configurations: each config class lists its rules once, ``validate`` applies them ---------
# A rule is a function ``rule(config, where)`` that raises a ValueError naming ``where`` (the
# config's class) and the field. A config class keeps its rules in the class attribute ``RULES``
# (a subclass extends its parent's: ``RULES = BertConfig.RULES + (...)``) and calls
# ``checks.validate(self)`` first thing in ``__post_init__``.
Rule = Callable[[object, str], None]


def validate(config) -> None:
    """Apply every rule of ``type(config).RULES`` to ``config``."""
    where = type(config).__name__
    for rule in type(config).RULES:
        rule(config, where)


def ints_at_least(minimum: int, *names: str, optional: bool = False) -> Rule:
    """Each field is an int >= ``minimum`` (with ``optional``, None too)."""
    def rule(config, where):
        for name in names:
            value = getattr(config, name)
            if not (optional and value is None):
                int_at_least(value, minimum, name, where)
    return rule


def positive(*names: str, optional: bool = False) -> Rule:
    """Each field is a positive int (with ``optional``, None too)."""
    return ints_at_least(1, *names, optional=optional)


def divides(part: str, whole: str) -> Rule:
    """The field ``part`` (heads) divides the field ``whole`` (a width)."""
    def rule(config, where):
        if getattr(config, whole) % getattr(config, part):
            raise SettingError(part, f"={getattr(config, part)} does not divide {whole}="
                               f"{getattr(config, whole)}; each head gets {whole} / {part} "
                               "features", where)
    return rule


def one_of(name: str, choices) -> Rule:
    """The field is one of ``choices`` (a collection, or a function of the config giving one)."""
    def rule(config, where):
        allowed = choices(config) if callable(choices) else choices
        value = getattr(config, name)
        if value not in allowed:
            shown = tuple(sorted(allowed)) if isinstance(allowed, (dict, set)) else allowed
            raise SettingError(name, f"must be one of {shown}, got {value!r}", where)
    return rule


def numbers_in(low: float, high: float, *names: str, low_open: bool = False,
               high_open: bool = False, optional: bool = False) -> Rule:
    """Each field is a finite number from ``low`` to ``high`` (``math.inf``: no upper end; open
    ends as told; with ``optional``, None too)."""
    def rule(config, where):
        for name in names:
            value = getattr(config, name)
            if optional and value is None:
                continue
            inside = isinstance(value, numbers.Real) and not isinstance(value, bool) \
                and math.isfinite(value) and (value > low if low_open else value >= low) \
                and (value < high if high_open else value <= high)
            if not inside:
                span = (f"{'>' if low_open else '>='} {low}" if high == math.inf else
                        f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}")
                raise SettingError(name, f"must be a finite number {span}, got {value!r}", where)
    return rule


def probabilities(*names: str) -> Rule:
    """Each field (a dropout probability) is a number in [0, 1), or None (no dropout given)."""
    return numbers_in(0, 1, *names, high_open=True, optional=True)


def positive_numbers(*names: str) -> Rule:
    """Each field is a finite number > 0 (an epsilon, a standard deviation, a learning rate)."""
    return numbers_in(0, math.inf, *names, low_open=True)


def special_token_ids(*names: str) -> Rule:
    """Each field is a token id (an int >= 0, or None). One outside the vocabulary is accepted
    with a warning, as HuggingFace accepts it (``GPT2Config(vocab_size=200)`` keeps bos and eos
    50256): nothing uses it until a part of the model that needs that token, which refuses it
    there (an embedding's padding row, a decoder's start token)."""
    def rule(config, where):
        for name in names:
            value = getattr(config, name)
            if value is None:
                continue
            int_at_least(value, 0, name, where)
            if value >= config.vocab_size:
                warnings.warn(f"{where}: {name}={value} is outside the vocabulary [0, "
                              f"{config.vocab_size}); it is kept, and whatever needs that "
                              "token refuses it there", stacklevel=5)
    return rule
