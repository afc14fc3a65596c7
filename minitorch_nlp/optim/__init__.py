"""Optimizers, learning-rate schedules and gradient clipping.

``SGD``, ``Adam`` and ``AdamW`` follow PyTorch's update rules and ``state_dict`` format; the
schedules exist both as pure functions of the step and as scheduler objects; ``clip_grad_norm_``
and ``clip_grad_value_`` clip gradients in place. Every update works directly on the parameters'
arrays (no graph is recorded) and bumps their version counters.
"""
from .adam import Adam, AdamW
from .clip import clip_grad_norm_, clip_grad_value_
from .lr_scheduler import (
    ConstantLR,
    CosineWarmupDecayLR,
    LambdaLR,
    LinearWarmupDecayLR,
    LRScheduler,
    NoamLR,
    constant_lr,
    cosine_warmup_decay_lr,
    linear_warmup_decay_lr,
    noam_lr,
)
from .optimizer import Optimizer, ParamState
from .sgd import SGD

__all__ = [
    "Adam", "AdamW", "ConstantLR", "CosineWarmupDecayLR", "LRScheduler", "LambdaLR",
    "LinearWarmupDecayLR", "NoamLR", "Optimizer", "ParamState", "SGD", "clip_grad_norm_",
    "clip_grad_value_", "constant_lr", "cosine_warmup_decay_lr", "linear_warmup_decay_lr",
    "noam_lr",
]
