"""Adam (Kingma & Ba 2015), with optional AMSGrad, and AdamW (Loshchilov & Hutter 2019)."""
from __future__ import annotations

from .optimizer import Optimizer, check_number


class Adam(Optimizer):
    r"""Adam: adaptive moment estimation (Kingma & Ba 2015, "Adam: A Method for Stochastic
    Optimization", Algorithm 1), with PyTorch's conventions.

    For each parameter :math:`\theta` with gradient :math:`g_t` at step :math:`t = 1, 2, \dots`::

        g_t   = g_t + weight_decay * theta                 (L2 penalty, added to the gradient)
        m_t   = beta1 * m_{t-1} + (1 - beta1) * g_t         (first moment)
        v_t   = beta2 * v_{t-1} + (1 - beta2) * g_t**2      (second raw moment)
        m^_t  = m_t / (1 - beta1**t)                        (bias corrections)
        v^_t  = v_t / (1 - beta2**t)
        theta = theta - lr * m^_t / (sqrt(v^_t) + eps)     (eps outside the square root)

    With ``amsgrad=True`` (Reddi, Kale & Kumar 2018, "On the Convergence of Adam and Beyond") the
    denominator uses the running maximum ``vmax_t = max(vmax_{t-1}, v_t)`` in place of ``v_t``.

    The update is the backend's ``adam_update`` (NumPy's as the reference, one fused loop on the
    numba backend): ``theta -= (lr * sqrt(1 - beta2**t) / (1 - beta1**t)) * m_t / (sqrt(v_t) +
    eps * sqrt(1 - beta2**t))``, the same quantity with one pass fewer.

    State per parameter: ``step`` (int), ``exp_avg`` (m), ``exp_avg_sq`` (v) and, with AMSGrad,
    ``max_exp_avg_sq`` (vmax), all arrays in the parameter's backend and dtype.
    """

    _decoupled_weight_decay = False

    def __init__(self, params, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad))

    def _check_group(self, group):
        name = type(self).__name__
        check_number(name, "lr", group["lr"])
        betas = group["betas"]
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"{name}: invalid betas={betas!r}; betas must be a pair "
                             "(beta1, beta2)")
        group["betas"] = tuple(betas)
        for i, beta in enumerate(betas):
            check_number(name, f"betas[{i}]", beta, high=1.0)
        check_number(name, "eps", group["eps"])
        check_number(name, "weight_decay", group["weight_decay"])

    def _expected_state(self, group):
        keys = {"step", "exp_avg", "exp_avg_sq"}
        return keys | {"max_exp_avg_sq"} if group["amsgrad"] else keys

    def _update(self, param, grad, group):
        xp = param.backend.xp
        theta = param.data
        lr, eps, weight_decay = group["lr"], group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        state = self._state_of(param)
        if not state:
            state["step"] = 0
            state["exp_avg"] = xp.zeros_like(theta)
            state["exp_avg_sq"] = xp.zeros_like(theta)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = xp.zeros_like(theta)
        state["step"] += 1
        param.backend.adam_update(
            theta, grad, state["exp_avg"], state["exp_avg_sq"], state.get("max_exp_avg_sq"),
            self._scratch(param, 2), step=state["step"], lr=lr, beta1=beta1, beta2=beta2,
            eps=eps, weight_decay=weight_decay, decoupled=self._decoupled_weight_decay)


class AdamW(Adam):
    r"""AdamW: Adam with decoupled weight decay (Loshchilov & Hutter 2019, "Decoupled Weight Decay
    Regularization", Algorithm 2), as in PyTorch.

    The decay shrinks the parameter directly instead of entering the gradient (and hence the
    moment estimates), so every weight decays at the same relative rate whatever its gradient
    history::

        theta = theta - lr * weight_decay * theta            (decoupled decay, first)
        m_t, v_t, m^_t, v^_t as in Adam, from the raw gradient g_t
        theta = theta - lr * m^_t / (sqrt(v^_t) + eps)

    PyTorch's ``lr * weight_decay`` is the paper's schedule multiplier times lambda: the decay
    follows the learning-rate schedule. Default ``weight_decay=0.01`` as in PyTorch.
    """

    _decoupled_weight_decay = True

    def __init__(self, params, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad)
