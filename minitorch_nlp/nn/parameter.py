"""``Parameter``: a tensor that a ``Module`` owns and an optimizer updates."""
from __future__ import annotations

import numpy as np

from ..autograd import Tensor, dtypes


class Parameter(Tensor):
    """A leaf tensor with ``requires_grad=True`` that registers itself when assigned to a
    ``Module`` attribute (``self.weight = Parameter(...)``).

    ``Parameter(tensor)`` shares the tensor's memory (as in PyTorch); ``Parameter(array)`` wraps a
    NumPy array (or anything ``numpy.asarray`` accepts) on the current backend, keeping its dtype
    when it is floating. ``requires_grad=False`` makes a frozen parameter: still saved in the
    ``state_dict`` and moved by ``Module.to``, but never given a gradient.
    """

    def __init__(self, data: Tensor | np.ndarray, requires_grad: bool = True) -> None:
        if isinstance(data, Tensor):
            super().__init__(data.detach(), dtype=data.dtype, backend=data.backend)
            self._version = data._version  # same memory, same in-place version counter
        else:
            if not hasattr(data, "dtype"):
                data = np.asarray(data, dtype=dtypes.get_default_dtype())
            super().__init__(data)
        if requires_grad and not dtypes.is_floating(self.dtype):
            raise TypeError(f"Parameter: only floating-point tensors can require a gradient; "
                            f"got dtype {self.dtype} (pass requires_grad=False to store it)")
        self.requires_grad = bool(requires_grad)

    def __repr__(self):
        body = np.array2string(self.numpy(), separator=", ", precision=4, threshold=50,
                               prefix="Parameter(")
        extra = ""
        if self.dtype != dtypes.get_default_dtype():
            extra += f", dtype={self.dtype}"
        if self.backend.name != "numpy":
            extra += f", backend={self.backend.name!r}"
        if not self.requires_grad:
            extra += ", requires_grad=False"
        return f"Parameter({body}{extra})"
