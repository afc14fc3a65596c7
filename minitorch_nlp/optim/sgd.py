"""Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay."""
from __future__ import annotations

from .optimizer import Optimizer, check_number, invalid


class SGD(Optimizer):
    r"""Stochastic gradient descent, with PyTorch's exact update rule.

    For each parameter :math:`\theta` with gradient :math:`g_t` at step :math:`t`::

        d_t = g_t + weight_decay * theta                     (L2 penalty in the gradient)
        b_t = d_t                                             at the first step
        b_t = momentum * b_{t-1} + (1 - dampening) * d_t      afterwards
        d_t = d_t + momentum * b_t    if nesterov    else    b_t
        theta = theta - lr * d_t

    (with ``momentum = 0`` the update is plain ``theta -= lr * d_t``).

    Momentum is Polyak's heavy ball (Polyak 1964, "Some methods of speeding up the convergence of
    iteration methods"); the Nesterov variant is the reformulation of Sutskever, Martens, Dahl &
    Hinton (2013), "On the importance of initialization and momentum in deep learning", eq. 3-4,
    rewritten, as in PyTorch, in terms of the gradient at the current parameters. Note that the
    learning rate multiplies the velocity rather than the gradient, unlike Sutskever et al.

    State per parameter: ``momentum_buffer`` (only when ``momentum != 0``).
    """

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov))

    def _check_group(self, group):
        for argument in ("lr", "momentum", "dampening", "weight_decay"):
            check_number("SGD", argument, group[argument])
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise invalid("SGD", "nesterov", group["nesterov"],
                          "Nesterov momentum needs momentum > 0 and dampening = 0 (got "
                          f"momentum={group['momentum']}, dampening={group['dampening']})")

    def _expected_state(self, group):
        return {"momentum_buffer"} if group["momentum"] != 0 else set()

    def _update(self, param, grad, group):
        xp = param.backend.xp
        theta = param.data
        lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
        weight_decay = group["weight_decay"]
        decayed, spare = self._scratch(param, 2)

        direction = grad
        if weight_decay != 0:
            direction = xp.multiply(theta, weight_decay, out=decayed)
            direction += grad
        if momentum != 0:
            state = self._state_of(param)
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = xp.array(direction, dtype=theta.dtype, copy=True)
            else:
                buf *= momentum
                buf += direction if dampening == 0 else xp.multiply(direction, 1 - dampening,
                                                                    out=spare)
            if group["nesterov"]:
                nesterov = xp.multiply(buf, momentum, out=spare)
                nesterov += direction
                direction = nesterov
            else:
                direction = buf
        theta -= xp.multiply(direction, lr, out=spare)
