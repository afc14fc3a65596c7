"""Recurrent layers: the Elman RNN, the LSTM and the GRU, as one-step cells and as multi-layer,
optionally bidirectional layers over whole sequences (the recurrence of the survey's eq 3 and 5).

Names, gate orders and weight layouts are PyTorch's, so a ``torch.nn.LSTM`` state dict loads as
it is: a layer with ``G`` gates keeps ``weight_ih_l{k}`` ``(G * hidden, input)``,
``weight_hh_l{k}`` ``(G * hidden, hidden)``, ``bias_ih_l{k}`` and ``bias_hh_l{k}`` ``(G * hidden,)``
for layer ``k``, with the suffix ``_reverse`` for the backward direction. Gates are stacked in the
order (i, f, g, o) for the LSTM and (r, z, n) for the GRU.

A layer computes the input projection ``W_ih x_t + b_ih`` of every time step in one GEMM before
the time loop; each step then adds ``W_hh h_{t-1} + b_hh`` and applies the cell. With
``lengths``, a padded step neither updates the state nor leaks into the outputs (they are 0
there), so a padded batch gives each sequence the result it gets alone, in both directions.
"""
from __future__ import annotations

import math

import numpy as np

from .. import checks, cookbook
from .. import functional as F
from ..autograd import Generator, Tensor, concatenate, empty, stack, where, zeros
from . import init
from .module import Module
from .parameter import Parameter

__all__ = ["GRU", "GRUCell", "LSTM", "LSTMCell", "RNN", "RNNCell", "gru_step", "lstm_step",
           "rnn_step"]


# ---- one time step, shared by the cells and the layers ------------------------------------------
def rnn_step(x_proj: Tensor, h: Tensor, weight_hh: Tensor, bias_hh: Tensor | None,
             nonlinearity: str = "tanh") -> Tensor:
    """Elman's recurrence: h' = sigma(W_ih x + b_ih + W_hh h + b_hh), ``x_proj = W_ih x + b_ih``.

    With sigma = tanh this is the survey's eq 3, H_{t+1} = sigma(U X_{t+1} + W H_t + b)."""
    pre = x_proj + F.linear(h, weight_hh, bias_hh)
    return pre.tanh() if nonlinearity == "tanh" else pre.relu()


def lstm_step(x_proj: Tensor, state: tuple[Tensor, Tensor], weight_hh: Tensor,
              bias_hh: Tensor | None) -> tuple[Tensor, Tensor]:
    """Long short-term memory (Hochreiter & Schmidhuber, 1997) with the forget gate of Gers et
    al. (2000), without peepholes, as PyTorch computes it::

        i = sigmoid(W_ii x + b_ii + W_hi h + b_hi)      input gate
        f = sigmoid(W_if x + b_if + W_hf h + b_hf)      forget gate
        g = tanh(W_ig x + b_ig + W_hg h + b_hg)         candidate cell
        o = sigmoid(W_io x + b_io + W_ho h + b_ho)      output gate
        c' = f * c + i * g
        h' = o * tanh(c')

    ``state`` is ``(h, c)``; returns ``(h', c')``."""
    h, c = state
    i, f, g, o = (x_proj + F.linear(h, weight_hh, bias_hh)).chunk(4, axis=-1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c


def gru_step(x_proj: Tensor, h: Tensor, weight_hh: Tensor, bias_hh: Tensor | None,
             reset_after: bool = True) -> Tensor:
    """Gated recurrent unit (Cho et al., 2014, eq 5-8)::

        r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)      reset gate
        z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)      update gate
        n = tanh(W_in x + b_in + r * (W_hn h + b_hn))   candidate (reset_after=True, PyTorch/cuDNN)
        n = tanh(W_in x + b_in + W_hn (r * h) + b_hn)   candidate (reset_after=False, Cho et al.)
        h' = (1 - z) * n + z * h

    Cho et al. reset the previous state *before* the product with W_hn; PyTorch (following
    cuDNN) resets the product, which lets one GEMM compute all three gates' W_h h. Both use the
    same weights; ``reset_after`` picks the formula."""
    x_r, x_z, x_n = x_proj.chunk(3, axis=-1)
    if reset_after:
        h_r, h_z, h_n = F.linear(h, weight_hh, bias_hh).chunk(3, axis=-1)
        r, z = (x_r + h_r).sigmoid(), (x_z + h_z).sigmoid()
        n = (x_n + r * h_n).tanh()
    else:
        size = h.shape[-1]
        h_r, h_z = F.linear(h, weight_hh[:2 * size],
                            None if bias_hh is None else bias_hh[:2 * size]).chunk(2, axis=-1)
        r, z = (x_r + h_r).sigmoid(), (x_z + h_z).sigmoid()
        n = (x_n + F.linear(r * h, weight_hh[2 * size:],
                            None if bias_hh is None else bias_hh[2 * size:])).tanh()
    return (1.0 - z) * n + z * h


_MODES = {  # mode -> (number of gates, step function)
    "RNN_TANH": (1, lambda x, s, w, b: rnn_step(x, s, w, b, "tanh")),
    "RNN_RELU": (1, lambda x, s, w, b: rnn_step(x, s, w, b, "relu")),
    "LSTM": (4, lstm_step),
    "GRU": (3, lambda x, s, w, b: gru_step(x, s, w, b, reset_after=True)),
    "GRU_CHO": (3, lambda x, s, w, b: gru_step(x, s, w, b, reset_after=False)),
}


def _elman_mode(nonlinearity, op):
    if nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"{op}: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
    return "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"


def _uniform_init(module, hidden_size, generator):
    """PyTorch's initialisation of recurrent weights: every weight and bias ~ U(-k, k) with
    k = 1/sqrt(hidden_size)."""
    bound = 1.0 / math.sqrt(hidden_size)
    for p in module.parameters(recurse=False):
        init.uniform_(p, -bound, bound, generator=generator)


# ---- cells ---------------------------------------------------------------------------------------
class _CellBase(Module):
    """One time step: ``weight_ih`` ``(G*H, I)``, ``weight_hh`` ``(G*H, H)``, ``bias_ih`` and
    ``bias_hh`` ``(G*H,)``, with ``G`` the number of gates."""

    mode = None

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, dtype=None,
                 generator: Generator | None = None) -> None:
        super().__init__()
        name = type(self).__name__
        self.input_size = checks.positive_int(input_size, "input_size", name)
        self.hidden_size = checks.positive_int(hidden_size, "hidden_size", name)
        rows = _MODES[self.mode][0] * hidden_size
        self.weight_ih = Parameter(empty(rows, input_size, dtype=dtype))
        self.weight_hh = Parameter(empty(rows, hidden_size, dtype=dtype))
        if bias:
            self.bias_ih = Parameter(empty(rows, dtype=dtype))
            self.bias_hh = Parameter(empty(rows, dtype=dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters(generator)

    def reset_parameters(self, generator: Generator | None = None) -> None:
        _uniform_init(self, self.hidden_size, generator)

    def _check(self, x, states):
        name = type(self).__name__
        if x.ndim != 2 or x.shape[1] != self.input_size:
            raise ValueError(f"{name}: input must have shape (batch, "
                             f"input_size={self.input_size}), got {x.shape}")
        for h in states:
            if h is not None and h.shape != (x.shape[0], self.hidden_size):
                raise ValueError(f"{name}: the state must have shape (batch, hidden_size) = "
                                 f"{(x.shape[0], self.hidden_size)}, got {h.shape}")

    def _zeros(self, x):
        return zeros(x.shape[0], self.hidden_size, dtype=x.dtype, backend=x.backend)

    def _step(self, x, state):
        x_proj = F.linear(x, self.weight_ih, self.bias_ih)
        return _MODES[self.mode][1](x_proj, state, self.weight_hh, self.bias_hh)

    def extra_repr(self):
        return f"{self.input_size}, {self.hidden_size}, bias={self.bias_ih is not None}"


@cookbook.equation(3)
class RNNCell(_CellBase):
    """One step of Elman's RNN: h' = tanh(W_ih x + b_ih + W_hh h + b_hh) -- the survey's eq 3,
    H_{t+1} = sigma(U X_{t+1} + W H_t + b), with U = W_ih, W = W_hh, b = b_ih + b_hh.

    ``forward(x, h=None)``: ``x`` ``(batch, input_size)``, ``h`` ``(batch, hidden_size)`` (zeros
    when omitted); returns h'. ``nonlinearity="relu"`` swaps tanh for ReLU."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", dtype=None,
                 generator: Generator | None = None) -> None:
        self.mode = _elman_mode(nonlinearity, "RNNCell")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias, dtype, generator)

    def forward(self, x: Tensor, h: Tensor | None = None) -> Tensor:
        self._check(x, [h])
        return self._step(x, self._zeros(x) if h is None else h)


class LSTMCell(_CellBase):
    """One LSTM step (gates i, f, g, o; see :func:`lstm_step`). ``forward(x, state=None)`` with
    ``state = (h, c)`` (zeros when omitted) returns ``(h', c')``."""

    mode = "LSTM"

    def forward(self, x: Tensor,
                state: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        if state is None:
            state = (self._zeros(x), self._zeros(x))
        self._check(x, state)
        return self._step(x, tuple(state))


class GRUCell(_CellBase):
    """One GRU step (gates r, z, n; see :func:`gru_step`). ``forward(x, h=None)`` returns h'.
    ``reset_after=False`` gives Cho et al.'s original candidate state (same weights)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 reset_after: bool = True, dtype=None, generator: Generator | None = None) -> None:
        self.mode = "GRU" if reset_after else "GRU_CHO"
        self.reset_after = reset_after
        super().__init__(input_size, hidden_size, bias, dtype, generator)

    def forward(self, x: Tensor, h: Tensor | None = None) -> Tensor:
        self._check(x, [h])
        return self._step(x, self._zeros(x) if h is None else h)


# ---- layers over sequences -----------------------------------------------------------------------
class _RNNBase(Module):
    """A stack of ``num_layers`` recurrent layers, each run forward (and, when bidirectional,
    backward) over the sequence; layer k > 0 reads the concatenated outputs of layer k - 1."""

    mode = None

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 dtype=None, generator: Generator | None = None) -> None:
        super().__init__()
        name = type(self).__name__
        self.input_size = checks.positive_int(input_size, "input_size", name)
        self.hidden_size = checks.positive_int(hidden_size, "hidden_size", name)
        self.num_layers = checks.positive_int(num_layers, "num_layers", name)
        F._check_probability(dropout, name)
        self.bias = bool(bias)
        self.batch_first = bool(batch_first)
        self.dropout = dropout
        self.bidirectional = bool(bidirectional)
        self.num_directions = 2 if bidirectional else 1
        rows = _MODES[self.mode][0] * hidden_size
        for layer in range(num_layers):
            width = input_size if layer == 0 else hidden_size * self.num_directions
            for suffix in self._suffixes():
                setattr(self, f"weight_ih_l{layer}{suffix}",
                        Parameter(empty(rows, width, dtype=dtype)))
                setattr(self, f"weight_hh_l{layer}{suffix}",
                        Parameter(empty(rows, hidden_size, dtype=dtype)))
                if bias:
                    setattr(self, f"bias_ih_l{layer}{suffix}", Parameter(empty(rows, dtype=dtype)))
                    setattr(self, f"bias_hh_l{layer}{suffix}", Parameter(empty(rows, dtype=dtype)))
        self.reset_parameters(generator)

    def _suffixes(self):
        return ("", "_reverse") if self.bidirectional else ("",)

    def reset_parameters(self, generator: Generator | None = None) -> None:
        _uniform_init(self, self.hidden_size, generator)

    def _weights(self, layer, direction):
        suffix = self._suffixes()[direction]
        get = lambda kind: getattr(self, f"{kind}_l{layer}{suffix}", None)  # noqa: E731
        return get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh")

    # ---- argument checks -------------------------------------------------------------------------
    def _layout(self):
        return "(batch, time, input_size)" if self.batch_first else "(time, batch, input_size)"

    def _check_input(self, x):
        name = type(self).__name__
        if not isinstance(x, Tensor):
            raise TypeError(f"{name}: the input must be a Tensor, got {type(x).__name__}")
        if x.ndim != 3 or x.shape[2] != self.input_size:
            raise ValueError(f"{name}: input must have shape {self._layout()} with input_size="
                             f"{self.input_size} (batch_first={self.batch_first}), got {x.shape}")
        if x.shape[0] == 0 or x.shape[1] == 0:
            raise ValueError(f"{name}: input of shape {x.shape} has an empty batch or time axis")

    def _check_lengths(self, lengths, batch, time):
        """``lengths`` as a NumPy int array ``(batch,)``, or None when every sequence is full."""
        if lengths is None:
            return None
        name = type(self).__name__
        values = np.asarray(lengths.numpy() if isinstance(lengths, Tensor) else lengths)
        if values.shape != (batch,) or values.dtype.kind not in "iu":
            raise ValueError(f"{name}: lengths must be {batch} integers, one per sequence "
                             f"(shape ({batch},)), got {values.dtype} {values.shape}")
        if values.size and (values.min() < 0 or values.max() > time):
            raise ValueError(f"{name}: lengths {values.tolist()} must lie in [0, {time}]: a length "
                             f"longer than the sequence ({time} steps) is not allowed")
        return None if (values == time).all() else values.astype(np.int64)

    def _initial_states(self, h0, x, batch):
        """One initial state per (layer, direction): ``(batch, hidden)`` (LSTM: an (h, c) pair)."""
        name = type(self).__name__
        shape = (self.num_layers * self.num_directions, batch, self.hidden_size)
        parts = (h0 if self.mode == "LSTM" else (h0,)) if h0 is not None else None
        if parts is not None:
            if self.mode == "LSTM" and (not isinstance(h0, (tuple, list)) or len(h0) != 2):
                raise ValueError(f"{name}: h0 must be a pair (h0, c0) of tensors of shape {shape}")
            for part in parts:
                if part.shape != shape:
                    raise ValueError(f"{name}: h0 must have shape (num_layers * num_directions, "
                                     f"batch, hidden_size) = {shape}, got {part.shape}")
        if parts is None:
            zero = zeros(batch, self.hidden_size, dtype=x.dtype, backend=x.backend)
            return [(zero, zero) if self.mode == "LSTM" else zero] * shape[0]
        states = [tuple(part[k] for part in parts) for k in range(shape[0])]
        return states if self.mode == "LSTM" else [h for (h,) in states]

    # ---- the computation -------------------------------------------------------------------------
    def forward(self, x: Tensor, h0: Tensor | tuple[Tensor, Tensor] | None = None,
                lengths: Tensor | np.ndarray | None = None
                ) -> tuple[Tensor, Tensor | tuple[Tensor, Tensor]]:
        """``x``: ``(batch, time, input_size)`` when ``batch_first``, else ``(time, batch,
        input_size)``; ``h0``: ``(num_layers * num_directions, batch, hidden_size)`` (LSTM: a pair
        ``(h0, c0)``), zeros when omitted; ``lengths``: ``(batch,)`` ints <= time, or None for
        full-length sequences.

        Returns ``(output, h_n)``: ``output`` ``(batch, time, num_directions * hidden_size)``
        (time first unless ``batch_first``), the top layer's states with the forward and backward
        directions side by side, 0 at padded steps; ``h_n`` ``(num_layers * num_directions, batch,
        hidden_size)``, each sequence's state after its last real step (for the backward
        direction, after step 0). The LSTM returns ``(output, (h_n, c_n))``."""
        self._check_input(x)
        if self.batch_first:
            x = x.swapaxes(0, 1)
        time, batch = x.shape[0], x.shape[1]
        lengths = self._check_lengths(lengths, batch, time)
        initial = self._initial_states(h0, x, batch)
        real = None if lengths is None else [
            x.backend.asarray((t < lengths)[:, None]) for t in range(time)]
        step = _MODES[self.mode][1]
        layer_input, finals = x, []
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(self.num_directions):
                weight_ih, weight_hh, bias_ih, bias_hh = self._weights(layer, direction)
                # every step's input projection in one GEMM, then one slice per step
                x_proj = F.linear(layer_input, weight_ih, bias_ih).unbind(0)
                state = initial[layer * self.num_directions + direction]
                out = [None] * time
                for t in (range(time) if direction == 0 else reversed(range(time))):
                    new = step(x_proj[t], state, weight_hh, bias_hh)
                    if real is None:
                        state = new
                        out[t] = _hidden(new)
                    else:  # padded steps keep the old state and output zeros
                        state = _select(real[t], new, state)
                        out[t] = where(real[t], _hidden(new), 0.0)
                outputs.append(stack(out, axis=0))
                finals.append(state)
            layer_input = outputs[0] if len(outputs) == 1 else concatenate(outputs, axis=-1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_input = F.dropout(layer_input, self.dropout)
        output = layer_input.swapaxes(0, 1) if self.batch_first else layer_input
        if self.mode == "LSTM":
            return output, (stack([h for h, _ in finals]), stack([c for _, c in finals]))
        return output, stack(finals)

    def extra_repr(self):
        text = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            text += f", num_layers={self.num_layers}"
        for flag, default in (("bias", True), ("batch_first", False), ("bidirectional", False)):
            if getattr(self, flag) != default:
                text += f", {flag}={getattr(self, flag)}"
        if self.dropout:
            text += f", dropout={self.dropout}"
        return text


def _hidden(state):
    return state[0] if isinstance(state, tuple) else state


def _select(real, new, old):
    if isinstance(new, tuple):
        return tuple(where(real, n, o) for n, o in zip(new, old))
    return where(real, new, old)


@cookbook.equation(3)
class RNN(_RNNBase):
    """Elman RNN layers, h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh) at every step: the
    survey's eq 3 (and eq 5 for a decoder). ``nonlinearity="relu"`` swaps tanh for ReLU. See
    ``_RNNBase.forward`` for shapes."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, dtype=None,
                 generator: Generator | None = None) -> None:
        self.mode = _elman_mode(nonlinearity, "RNN")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, dtype, generator)


class LSTM(_RNNBase):
    """LSTM layers (see :func:`lstm_step`); ``forward(x, h0=None, lengths=None)`` returns
    ``(output, (h_n, c_n))``."""

    mode = "LSTM"


class GRU(_RNNBase):
    """GRU layers (see :func:`gru_step`); ``forward(x, h0=None, lengths=None)`` returns
    ``(output, h_n)``. ``reset_after=False`` gives Cho et al.'s original candidate state."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 reset_after: bool = True, dtype=None, generator: Generator | None = None) -> None:
        self.mode = "GRU" if reset_after else "GRU_CHO"
        self.reset_after = reset_after
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, dtype, generator)
