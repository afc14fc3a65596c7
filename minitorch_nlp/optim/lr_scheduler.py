"""Learning-rate schedules, each as a pure function of the step and as a scheduler object.

The pure functions (``noam_lr(step, d_model, warmup_steps)`` ...) are what to plot or test; the
scheduler objects wrap an optimizer and write the scheduled rate into every parameter group's
``lr``, PyTorch's ``LambdaLR`` style::

    opt = AdamW(model.parameters(), lr=3e-4)
    sched = CosineWarmupDecayLR(opt, warmup_steps=100, total_steps=10_000, min_lr_ratio=0.1)
    for batch in batches:
        loss = model(batch); loss.backward()
        opt.step(); opt.zero_grad()
        sched.step()

A scheduler counts steps from 0: on construction it sets the rate for step 0 (used by the first
``opt.step()``), and each ``sched.step()`` moves to the next. Schedules that scale the group's base
rate (its ``lr`` when the scheduler was made, kept as ``initial_lr``) multiply it by the schedule;
``NoamLR`` sets the rate outright, since Vaswani et al. give it in absolute terms.
"""
from __future__ import annotations

import math
from numbers import Integral, Real

from .optimizer import Optimizer


def _check_step(function: str, step) -> None:
    if not isinstance(step, Integral) or step < 0:
        raise ValueError(f"{function}: invalid step={step!r}; step must be an int >= 0")


def _check_warmup_total(function: str, warmup_steps, total_steps, min_lr_ratio) -> None:
    if not isinstance(warmup_steps, Integral) or warmup_steps < 0:
        raise ValueError(f"{function}: invalid warmup_steps={warmup_steps!r}; it must be an "
                         "int >= 0")
    if not isinstance(total_steps, Integral) or total_steps < max(warmup_steps, 1):
        raise ValueError(f"{function}: invalid total_steps={total_steps!r}; it must be an int "
                         f">= max(warmup_steps, 1) = {max(warmup_steps, 1)}")
    if not isinstance(min_lr_ratio, Real) or not 0 <= min_lr_ratio <= 1:
        raise ValueError(f"{function}: invalid min_lr_ratio={min_lr_ratio!r}; it must be in "
                         "[0, 1]")


def _after_warmup(function: str, step, base_lr, warmup_steps, total_steps, min_lr_ratio,
                  decay) -> float:
    """The shared part of the warmup schedules: checks, the linear warmup, then
    ``base_lr * (r + (1 - r) * decay(progress))`` with progress in [0, 1] over the decay steps."""
    _check_step(function, step)
    _check_warmup_total(function, warmup_steps, total_steps, min_lr_ratio)
    if step < warmup_steps:
        return base_lr * step / warmup_steps
    if total_steps == warmup_steps:
        return float(base_lr)
    progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return base_lr * (min_lr_ratio + (1 - min_lr_ratio) * decay(progress))


def constant_lr(step: int, lr: float) -> float:
    """The constant schedule: ``lr(step) = lr``."""
    _check_step("constant_lr", step)
    return float(lr)


def linear_warmup_decay_lr(step: int, base_lr: float, warmup_steps: int, total_steps: int,
                           min_lr_ratio: float = 0.0) -> float:
    r"""Linear warmup to ``base_lr``, then linear decay to ``min_lr_ratio * base_lr``.

    With W = ``warmup_steps``, T = ``total_steps``, r = ``min_lr_ratio``::

        lr(s) = base_lr * s / W                                     for s < W
        lr(s) = base_lr * (r + (1 - r) * max(0, (T - s) / (T - W)))  for s >= W

    (constant ``base_lr`` from W on when T = W). The schedule of BERT (Devlin et al. 2019,
    section A.2) and of HuggingFace's ``get_linear_schedule_with_warmup`` (which has r = 0).
    """
    return _after_warmup("linear_warmup_decay_lr", step, base_lr, warmup_steps, total_steps,
                         min_lr_ratio, lambda progress: 1 - progress)


def cosine_warmup_decay_lr(step: int, base_lr: float, warmup_steps: int, total_steps: int,
                           min_lr_ratio: float = 0.0) -> float:
    r"""Linear warmup to ``base_lr``, then half a cosine down to ``min_lr_ratio * base_lr``.

    With W = ``warmup_steps``, T = ``total_steps``, r = ``min_lr_ratio`` and progress
    p = min(1, (s - W) / (T - W))::

        lr(s) = base_lr * s / W                                      for s < W
        lr(s) = base_lr * (r + (1 - r) * (1 + cos(pi * p)) / 2)      for s >= W

    so the rate stays at ``r * base_lr`` from step T on. Cosine annealing is from Loshchilov &
    Hutter (2017), "SGDR: Stochastic Gradient Descent with Warm Restarts", eq. 5 (one cycle, no
    restart); the warmup is Goyal et al. (2017), "Accurate, Large Minibatch SGD".
    """
    return _after_warmup("cosine_warmup_decay_lr", step, base_lr, warmup_steps, total_steps,
                         min_lr_ratio, lambda progress: 0.5 * (1 + math.cos(math.pi * progress)))


def noam_lr(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    r"""The inverse-square-root "Noam" schedule of Vaswani et al. (2017), "Attention Is All You
    Need", section 5.3, eq. 3::

        lr(s) = factor * d_model**-0.5 * min(s**-0.5, s * warmup_steps**-1.5)

    It rises linearly for ``warmup_steps`` steps, peaks at ``factor * (d_model * warmup_steps)
    ** -0.5`` and then decays as 1/sqrt(s). At s = 0 the minimum is 0 (s**-0.5 is infinite), so the
    rate is 0; the paper counts steps from 1.
    """
    _check_step("noam_lr", step)
    if not isinstance(d_model, Real) or d_model <= 0:
        raise ValueError(f"noam_lr: invalid d_model={d_model!r}; it must be > 0")
    if not isinstance(warmup_steps, Real) or warmup_steps <= 0:
        raise ValueError(f"noam_lr: invalid warmup_steps={warmup_steps!r}; it must be > 0")
    if step == 0:
        return 0.0
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


class LRScheduler:
    """Base class: writes ``lr_at(step)`` (one rate per parameter group) into the optimizer.

    ``last_step`` is the step whose rate is in effect; ``-1`` (default) starts a new schedule
    (each group's current ``lr`` becomes its ``initial_lr``), another value resumes one, which
    needs ``initial_lr`` in every group (restore the optimizer's ``state_dict`` first).
    Subclasses define ``lr_at(step)`` and list their hyper-parameters in ``_hyper_parameters``
    so that ``state_dict()`` records them.
    """

    _hyper_parameters: tuple = ()

    def __init__(self, optimizer: Optimizer, last_step: int = -1):
        name = type(self).__name__
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{name}: expected an Optimizer, got {type(optimizer).__name__}")
        self.optimizer = optimizer
        if last_step == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise ValueError(f"{name}: last_step={last_step} resumes a schedule, but "
                                     f"parameter group {i} has no 'initial_lr'; load the "
                                     "optimizer's state_dict first, or pass last_step=-1")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_step = last_step
        self._last_lr: list[float] = []
        self.step()

    def lr_at(self, step: int) -> list[float]:
        """The learning rate of each parameter group at ``step`` (each schedule defines it)."""
        raise TypeError(f"{type(self).__name__} must define lr_at(step)")

    def step(self) -> None:
        """Advance to the next step and set every group's ``lr`` to its scheduled value."""
        self.last_step += 1
        self._apply()

    def _apply(self) -> None:
        lrs = self.lr_at(self.last_step)
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        self._last_lr = list(lrs)

    def get_last_lr(self) -> list[float]:
        """The rates the last ``step()`` set, one per parameter group."""
        return list(self._last_lr)

    def state_dict(self) -> dict:
        """``{"last_step", "base_lrs"}`` and the schedule's hyper-parameters."""
        state = {"last_step": self.last_step, "base_lrs": list(self.base_lrs)}
        state.update((name, getattr(self, name)) for name in self._hyper_parameters)
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore a ``state_dict()`` and set the optimizer's rates for the restored step."""
        name = type(self).__name__
        expected = {"last_step", "base_lrs", *self._hyper_parameters}
        missing = expected - set(state_dict)
        if missing:
            raise ValueError(f"{name}.load_state_dict: missing {sorted(missing)}")
        base_lrs = list(state_dict["base_lrs"])
        if len(base_lrs) != len(self.optimizer.param_groups):
            raise ValueError(f"{name}.load_state_dict: the state dict has {len(base_lrs)} base "
                             f"learning rates but the optimizer has "
                             f"{len(self.optimizer.param_groups)} parameter groups")
        for key in self._hyper_parameters:
            setattr(self, key, state_dict[key])
        self.base_lrs = base_lrs
        self.last_step = int(state_dict["last_step"])
        for group, base_lr in zip(self.optimizer.param_groups, base_lrs):
            group["initial_lr"] = base_lr
        self._apply()


class LambdaLR(LRScheduler):
    """``lr = initial_lr * lr_lambda(step)`` per group (one function, or a list, one per group)."""

    def __init__(self, optimizer: Optimizer, lr_lambda, last_step: int = -1):
        groups = len(optimizer.param_groups) if isinstance(optimizer, Optimizer) else 0
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != groups:
                raise ValueError(f"LambdaLR: got {len(lr_lambda)} lr_lambdas for {groups} "
                                 "parameter groups")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * groups
        super().__init__(optimizer, last_step)

    def lr_at(self, step):
        return [base * fn(step) for base, fn in zip(self.base_lrs, self.lr_lambdas)]


class ConstantLR(LRScheduler):
    """The constant schedule: every group keeps its ``initial_lr`` (see ``constant_lr``).

    Unlike PyTorch's ``ConstantLR`` there is no temporary factor: the rate never changes.
    """

    def lr_at(self, step):
        return [constant_lr(step, base) for base in self.base_lrs]


class _WarmupDecayLR(LRScheduler):
    """Shared by the warmup-then-decay schedules: ``_schedule`` scales each group's
    ``initial_lr``."""

    _hyper_parameters = ("warmup_steps", "total_steps", "min_lr_ratio")
    _schedule = None

    def __init__(self, optimizer: Optimizer, warmup_steps: int, total_steps: int,
                 min_lr_ratio: float = 0.0, last_step: int = -1):
        _check_warmup_total(type(self).__name__, warmup_steps, total_steps, min_lr_ratio)
        self.warmup_steps, self.total_steps, self.min_lr_ratio = (
            warmup_steps, total_steps, min_lr_ratio)
        super().__init__(optimizer, last_step)

    def lr_at(self, step):
        return [self._schedule(step, base, self.warmup_steps, self.total_steps,
                                self.min_lr_ratio) for base in self.base_lrs]


class LinearWarmupDecayLR(_WarmupDecayLR):
    """Linear warmup then linear decay of each group's ``initial_lr``; see
    ``linear_warmup_decay_lr``."""

    _schedule = staticmethod(linear_warmup_decay_lr)


class CosineWarmupDecayLR(_WarmupDecayLR):
    """Linear warmup then cosine decay of each group's ``initial_lr``; see
    ``cosine_warmup_decay_lr``."""

    _schedule = staticmethod(cosine_warmup_decay_lr)


class NoamLR(LRScheduler):
    """Sets every group's ``lr`` to ``noam_lr(step, d_model, warmup_steps, factor)`` (Vaswani et al.
    2017, eq. 3), ignoring the groups' own rates."""

    _hyper_parameters = ("d_model", "warmup_steps", "factor")

    def __init__(self, optimizer: Optimizer, d_model: int, warmup_steps: int, factor: float = 1.0,
                 last_step: int = -1):
        noam_lr(1, d_model, warmup_steps, factor)  # validates the arguments
        self.d_model, self.warmup_steps, self.factor = d_model, warmup_steps, factor
        super().__init__(optimizer, last_step)

    def lr_at(self, step):
        return [noam_lr(step, self.d_model, self.warmup_steps, self.factor)] * len(self.base_lrs)
