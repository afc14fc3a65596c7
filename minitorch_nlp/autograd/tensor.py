"""``Tensor``: one backend array, its gradient, and the node of the graph that produced it."""
from __future__ import annotations

import copy
import math

import numpy as np

from . import dtypes, engine, function, grad_mode
from . import ops_elementwise as ew
from . import ops_shape as sh
from .engine_api import backward as _backward
from .function import LeafNode
from .ops_fused import Gelu, Logcumsumexp, LogSoftmax, Softmax
from .ops_linalg import Matmul


def _backend_of(name):
    from ..backends import get_backend

    return get_backend(name)


class Tensor:
    """An n-dimensional array that records the operations applied to it.

    ``data`` is the backend array (``numpy.ndarray`` on the NumPy backend). When
    ``requires_grad`` is true, operations on the tensor are recorded and ``backward()`` fills
    ``.grad`` of the leaves. Names follow PyTorch; axes are given as ``axis=`` as in NumPy
    (``dim=`` is accepted as an alias).
    """

    __slots__ = ("data", "requires_grad", "grad", "_node", "_backend", "_version", "_leaf_node",
                 "_is_view", "__weakref__")
    __array_priority__ = 1000  # numpy_array + tensor calls Tensor.__radd__

    def __init__(self, data, dtype=None, requires_grad=False, backend=None):
        be = _backend_of(backend)
        if isinstance(data, Tensor):
            data = data.data if data._backend is be else data._backend.to_numpy(data.data)
        try:
            dtype = dtypes.resolve(dtype) or dtypes.infer(data)
            self.data = be.asarray(data, dtype=dtype)
        except ValueError:
            if isinstance(data, (list, tuple)):
                _raise_if_ragged(data)
            raise
        self._backend = be
        self._node = None
        self._leaf_node = None
        self._version = [0]
        self._is_view = False
        self.grad = None
        self.requires_grad = False
        if requires_grad:
            self.requires_grad_()

    @classmethod
    def _wrap(cls, array, backend, node=None):
        """A tensor around an existing backend array (no copy); ``node`` makes it a graph output."""
        t = object.__new__(Tensor)
        if type(array) is not np.ndarray and not isinstance(array, backend.xp.ndarray):
            array = backend.xp.asarray(array)
        t.data = array
        t._backend = backend
        t._node = node
        t._leaf_node = None
        t._version = [0]
        t._is_view = False
        t.grad = None
        t.requires_grad = node is not None
        return t

    def __deepcopy__(self, memo):
        """A new leaf with copies of the data and of ``.grad``, and no graph. The gradient
        accumulator is not copied: it points back at this tensor, so gradients of a copied model
        would land in the original. A tensor recorded by a graph copies as a detached leaf."""
        new = object.__new__(type(self))
        memo[id(self)] = new
        new.data = copy.deepcopy(self.data, memo)
        new._backend = self._backend
        new._node = None
        new._leaf_node = None
        new._version = [0]
        new._is_view = False
        new.grad = copy.deepcopy(self.grad, memo)
        new.requires_grad = self.requires_grad and self._node is None
        if hasattr(self, "__dict__"):   # subclasses (Parameter) may carry attributes
            new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return new

    # ---- properties ------------------------------------------------------------------------------
    @property
    def shape(self):
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def ndim(self):
        return self.data.ndim

    @property
    def size(self):
        return self.data.size

    @property
    def backend(self):
        return self._backend

    @property
    def is_leaf(self):
        return self._node is None

    @property
    def grad_fn(self):
        return self._node

    @property
    def T(self):
        return self.permute(*reversed(range(self.ndim)))

    @property
    def mT(self):
        return self.swapaxes(-1, -2)

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self):
        body = np.array2string(self.numpy(), separator=", ", precision=4, threshold=50,
                               prefix="tensor(")
        extra = ""
        if self.dtype != dtypes.get_default_dtype() and self.dtype.kind == "f" or \
                self.dtype.kind != "f":
            extra += f", dtype={self.dtype}"
        if self._backend.name != "numpy":
            extra += f", backend={self._backend.name!r}"
        if self._node is not None:
            extra += f", grad_fn={self._node!r}"
        elif self.requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    # ---- autograd --------------------------------------------------------------------------------
    def _grad_node(self):
        if self._node is not None:
            return self._node
        if self._leaf_node is None:
            self._leaf_node = LeafNode(self)
        return self._leaf_node

    def requires_grad_(self, requires_grad=True):
        if requires_grad and not dtypes.is_floating(self.dtype):
            raise TypeError(f"requires_grad_: only floating-point tensors can require a gradient; "
                            f"this one is {self.dtype}")
        if not requires_grad and self._node is not None:
            raise RuntimeError("requires_grad_(False): this tensor is the output of a recorded "
                               "operation; use .detach() instead")
        self.requires_grad = requires_grad
        return self

    def backward(self, grad=None, retain_graph=None, create_graph=False):
        """Accumulate the gradient of this tensor into ``.grad`` of every leaf it depends on."""
        _backward(self, grad, retain_graph=retain_graph, create_graph=create_graph)

    def detach(self):
        """The same data, cut from the graph (shares memory and the in-place version counter)."""
        t = Tensor._wrap(self.data, self._backend)
        t._version = self._version
        return t

    def register_hook(self, hook):
        """Call ``hook(grad)`` when this tensor's gradient is computed; a returned tensor replaces
        the gradient. Returns a handle with ``remove()``."""
        if not self.requires_grad:
            raise RuntimeError("register_hook: the tensor does not require a gradient")
        node = self._grad_node()
        if node.hooks is None:
            node.hooks = []
        entry = _TensorHook(hook)   # its own object, so that its handle removes this entry only
        node.hooks.append(entry)
        return _HookHandle(node.hooks, entry)

    def retain_grad(self):
        """Keep ``.grad`` for this non-leaf tensor too (leaves always keep theirs)."""
        import weakref

        if self._node is not None:
            self._node.retained = weakref.ref(self)
        return self

    def _bump_version(self):
        self._version[0] += 1

    # ---- conversion ------------------------------------------------------------------------------
    def numpy(self):
        """The data as a ``numpy.ndarray`` (a view on the NumPy backend, a copy from the GPU)."""
        return self._backend.to_numpy(self.data)

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype, copy=False)

    def item(self):
        if self.size != 1:
            raise ValueError("item: only a tensor with one element has an item; shape is "
                             f"{self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self.dtype.kind not in "iu":
            raise TypeError(f"only integer tensors can be used as an index, not {self.dtype}")
        return int(self.item())

    def __bool__(self):
        if self.size != 1:
            raise ValueError(f"the truth value of a tensor of shape {self.shape} is ambiguous; "
                             "use .any() or .all()")
        return bool(self.item())

    def astype(self, dtype):
        dtype = dtypes.resolve(dtype)
        if dtype == self.dtype:
            return self
        if not dtypes.is_floating(dtype) or not dtypes.is_floating(self.dtype):
            return Tensor._wrap(self.data.astype(dtype), self._backend)
        return ew.Cast.apply(self, dtype=dtype)

    def float(self):
        return self.astype(dtypes.float32)

    def double(self):
        return self.astype(dtypes.float64)

    def long(self):
        return self.astype(dtypes.int64)

    def to(self, target):
        """``to("numba")`` moves to another backend; ``to(float64)`` changes the dtype."""
        from ..backends import Backend, available_backends

        if isinstance(target, Backend) or (isinstance(target, str)
                                           and target in available_backends()):
            target = _backend_of(target)
            return self if target is self._backend else _ToBackend.apply(self, target=target)
        return self.astype(target)

    def clone(self):
        return ew.Copy.apply(self)

    def copy(self):
        return self.clone()

    # ---- arithmetic ------------------------------------------------------------------------------
    def __add__(self, other):
        return ew.Add.apply(self, other)

    def __radd__(self, other):
        return ew.Add.apply(other, self)

    def __sub__(self, other):
        return ew.Sub.apply(self, other)

    def __rsub__(self, other):
        return ew.Sub.apply(other, self)

    def __mul__(self, other):
        return ew.Mul.apply(self, other)

    def __rmul__(self, other):
        return ew.Mul.apply(other, self)

    def __truediv__(self, other):
        return ew.Div.apply(self, other)

    def __rtruediv__(self, other):
        return ew.Div.apply(other, self)

    def __floordiv__(self, other):
        return ew.floor_divide(self, other)

    def __rfloordiv__(self, other):
        return ew.floor_divide(other, self)

    def __mod__(self, other):
        return ew.remainder(self, other)

    def __rmod__(self, other):
        return ew.remainder(other, self)

    def div(self, other, rounding_mode=None):
        """``self / other``, or rounded toward 0 or -inf (``ops_elementwise.div``)."""
        return ew.div(self, other, rounding_mode)

    def __pow__(self, other):
        return ew.Pow.apply(self, other)

    def __rpow__(self, other):
        return ew.Pow.apply(other, self)

    def __matmul__(self, other):
        return Matmul.apply(self, other)

    def __rmatmul__(self, other):
        return Matmul.apply(other, self)

    def __neg__(self):
        return ew.Neg.apply(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return ew.Abs.apply(self)

    # ---- comparisons and logic (no gradient) -----------------------------------------------------
    def _compare(self, other, ufunc):
        if isinstance(other, Tensor):
            if other._backend is not self._backend:
                raise TypeError(f"comparison: tensors on different backends ({self._backend.name} "
                                f"and {other._backend.name})")
            other = other.data
        return Tensor._wrap(ufunc(self.data, other), self._backend)

    def __eq__(self, other):
        return self._compare(other, self._backend.xp.equal)

    def __ne__(self, other):
        return self._compare(other, self._backend.xp.not_equal)

    def __lt__(self, other):
        return self._compare(other, self._backend.xp.less)

    def __le__(self, other):
        return self._compare(other, self._backend.xp.less_equal)

    def __gt__(self, other):
        return self._compare(other, self._backend.xp.greater)

    def __ge__(self, other):
        return self._compare(other, self._backend.xp.greater_equal)

    def _bits(self, name, other=None, reflected=False):
        """A bitwise operation: logical on bool tensors, wrapping integer arithmetic otherwise
        (``ops_elementwise.bitwise``)."""
        if isinstance(other, Tensor) and other._backend is not self._backend:
            raise TypeError(f"{name}: tensors on different backends ({self._backend.name} and "
                            f"{other._backend.name})")
        logical = {"bitwise_and": "logical_and", "bitwise_or": "logical_or",
                   "bitwise_xor": "logical_xor", "invert": "logical_not"}.get(name)
        if logical and self.dtype.kind == "b" and (
                other is None or isinstance(other, bool) or
                isinstance(other, Tensor) and other.dtype.kind == "b"):
            operands = [self.data] + ([] if other is None else
                                      [other.data if isinstance(other, Tensor) else other])
            return Tensor._wrap(getattr(self._backend.xp, logical)(*operands), self._backend)
        return ew.bitwise(name, *((other, self) if reflected else (self, other)))

    def __and__(self, other):
        return self._bits("bitwise_and", other)

    def __or__(self, other):
        return self._bits("bitwise_or", other)

    def __xor__(self, other):
        return self._bits("bitwise_xor", other)

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__

    def __lshift__(self, other):
        return self._bits("left_shift", other)

    def __rshift__(self, other):
        return self._bits("right_shift", other)

    def __rlshift__(self, other):
        return self._bits("left_shift", other, reflected=True)

    def __rrshift__(self, other):
        return self._bits("right_shift", other, reflected=True)

    def __invert__(self):
        return self._bits("invert")

    __hash__ = object.__hash__

    def isfinite(self):
        return Tensor._wrap(self._backend.xp.isfinite(self.data), self._backend)

    def isnan(self):
        return Tensor._wrap(self._backend.xp.isnan(self.data), self._backend)

    def any(self, axis=None, keepdims=False, dim=None):
        axis = dim if dim is not None else axis
        return Tensor._wrap(self.data.any(axis=axis, keepdims=keepdims), self._backend)

    def all(self, axis=None, keepdims=False, dim=None):
        axis = dim if dim is not None else axis
        return Tensor._wrap(self.data.all(axis=axis, keepdims=keepdims), self._backend)

    def allclose(self, other, rtol=1e-5, atol=1e-8):
        return bool(np.allclose(self.numpy(), np.asarray(other), rtol=rtol, atol=atol))

    # ---- elementwise functions -------------------------------------------------------------------
    def exp(self):
        return ew.Exp.apply(self)

    def log(self):
        return ew.Log.apply(self)

    def log1p(self):
        return ew.Log1p.apply(self)

    def sqrt(self):
        return ew.Sqrt.apply(self)

    def rsqrt(self):
        return ew.Rsqrt.apply(self)

    def sin(self):
        return ew.Sin.apply(self)

    def cos(self):
        return ew.Cos.apply(self)

    def tanh(self):
        return ew.Tanh.apply(self)

    def sigmoid(self):
        return ew.Sigmoid.apply(self)

    def relu(self):
        return ew.Relu.apply(self)

    def softplus(self):
        return ew.Softplus.apply(self)

    def erf(self):
        return ew.Erf.apply(self)

    def gelu(self, approximate="none"):
        if approximate not in ("none", "tanh"):
            raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        return Gelu.apply(self, approximate=approximate)

    def abs(self):
        return ew.Abs.apply(self)

    def neg(self):
        return ew.Neg.apply(self)

    def clip(self, low=None, high=None):
        return ew.clip(self, low, high)

    clamp = clip

    def maximum(self, other):
        return ew.Maximum.apply(self, other)

    def minimum(self, other):
        return ew.Minimum.apply(self, other)

    def masked_fill(self, mask, value):
        """``value`` where ``mask`` (a bool tensor broadcastable to this one) is true."""
        mask = _bool_mask(mask, self.shape, "masked_fill")
        return ew.Where.apply(mask, value, self)

    # ---- reductions ------------------------------------------------------------------------------
    def _reduce(self, function, name, axis, keepdims, dim, **extra):
        axes = self._axes(dim if dim is not None else axis, name)
        return function.apply(self, axes=axes, keepdims=keepdims, **extra)

    def _axes(self, axis, name):
        """``axis`` normalised; a 0-d tensor takes axis 0 or -1 (as PyTorch) and reduces nothing."""
        if self.ndim == 0:
            if axis not in (None, 0, -1, (), (0,), (-1,), [0], [-1]):
                raise ValueError(f"{name}: axis {axis!r} is out of range for a 0-d tensor "
                                 "(use 0, -1 or None)")
            return ()
        return sh.normalize_axis(axis, self.ndim, name)

    def sum(self, axis=None, keepdims=False, dim=None):
        return self._reduce(sh.Sum, "sum", axis, keepdims, dim)

    def mean(self, axis=None, keepdims=False, dim=None):
        return self._reduce(sh.Mean, "mean", axis, keepdims, dim)

    def max(self, axis=None, keepdims=False, dim=None):
        return self._reduce(sh.MaxMin, "max", axis, keepdims, dim, largest=True)

    def min(self, axis=None, keepdims=False, dim=None):
        return self._reduce(sh.MaxMin, "min", axis, keepdims, dim, largest=False)

    def prod(self, axis=None, keepdims=False, dim=None):
        return self._reduce(sh.Prod, "prod", axis, keepdims, dim)

    def logsumexp(self, axis=None, keepdims=False, dim=None):
        return self._reduce(sh.Logsumexp, "logsumexp", axis, keepdims, dim)

    def var(self, axis=None, keepdims=False, ddof=0, dim=None):
        """Variance with NumPy's default ``ddof=0`` (PyTorch's ``unbiased=True`` is ``ddof=1``).

        With no degrees of freedom left (``count - ddof <= 0``) the sum of squares is divided by
        0, as NumPy and PyTorch do: nan where it is 0 (one element, or none), inf otherwise; the
        gradient is then nan (not finite) too, never an exception."""
        axes = self._axes(dim if dim is not None else axis, "var")
        count = math.prod(self.shape[a] for a in axes)
        scale = 1.0 / (count - ddof) if count - ddof > 0 else math.inf
        centred = self - self.mean(axis=axes, keepdims=True)
        return (centred * centred).sum(axis=axes, keepdims=keepdims) * scale

    def std(self, axis=None, keepdims=False, ddof=0, dim=None):
        return self.var(axis=axis, keepdims=keepdims, ddof=ddof, dim=dim).sqrt()

    def argmax(self, axis=None, keepdims=False, dim=None):
        axis = dim if dim is not None else axis
        return Tensor._wrap(self.data.argmax(axis=axis, keepdims=keepdims).astype(np.int64),
                            self._backend)

    def argmin(self, axis=None, keepdims=False, dim=None):
        axis = dim if dim is not None else axis
        return Tensor._wrap(self.data.argmin(axis=axis, keepdims=keepdims).astype(np.int64),
                            self._backend)

    def cumsum(self, axis=None, dim=None):
        """Running sums along ``axis``; ``axis=None`` runs over the flattened tensor (NumPy). A
        0-d tensor comes back as a 0-d tensor (its own running sum)."""
        axis = dim if dim is not None else axis
        if self.ndim == 0:
            self._axes(axis, "cumsum")
            return self.clone()
        if axis is None:
            return sh.Cumsum.apply(self.reshape(-1), axis=0)
        (axis,) = sh.normalize_axis(axis, self.ndim, "cumsum")
        return sh.Cumsum.apply(self, axis=axis)

    def _running_axis(self, axis, name):
        """The axis a running operation goes along, or None where there is nothing to run over
        (a 0-d tensor, an empty axis) and the result is the input itself."""
        if self.ndim == 0:
            self._axes(axis, name)
            return None
        (axis,) = sh.normalize_axis(axis, self.ndim, name)
        return None if self.shape[axis] == 0 else axis

    def cumprod(self, axis, dim=None):
        """Running products along ``axis``; the gradient is exact where entries are 0 (each step
        is a product of the previous one, never a division)."""
        axis = self._running_axis(dim if dim is not None else axis, "cumprod")
        if axis is None:
            return self.clone()
        running = []
        for piece in self.unbind(axis):
            running.append(piece if not running else running[-1] * piece)
        return sh.Stack.apply(*running, axis=axis)

    def cummax(self, axis, dim=None):
        """(values, indices) of the running maximum along ``axis``; on ties the later index."""
        return self._running_extreme(dim if dim is not None else axis, "cummax", np.greater_equal)

    def cummin(self, axis, dim=None):
        return self._running_extreme(dim if dim is not None else axis, "cummin", np.less_equal)

    def _running_extreme(self, axis, name, better_or_equal):
        if self.ndim == 0:
            self._axes(axis, name)
            return self.clone(), Tensor._wrap(np.zeros((), np.int64), self._backend)
        (axis,) = sh.normalize_axis(axis, self.ndim, name)
        values = np.moveaxis(self.numpy(), axis, -1)
        index = np.zeros(values.shape, dtype=np.int64)
        for i in range(1, values.shape[-1]):
            previous = np.take_along_axis(values, index[..., i - 1:i], -1)[..., 0]
            index[..., i] = np.where(better_or_equal(values[..., i], previous) |
                                     np.isnan(values[..., i]), i, index[..., i - 1])
        indices = Tensor._wrap(self._backend.asarray(np.moveaxis(index, -1, axis)), self._backend)
        from .creation import take_along_axis

        return take_along_axis(self, indices, axis), indices

    def logcumsumexp(self, axis, dim=None):
        """log(cumsum(exp(x))) along ``axis``, exact for entries far below a later maximum
        (each step is a ``logaddexp`` with the running result)."""
        axis = self._running_axis(dim if dim is not None else axis, "logcumsumexp")
        if axis is None:
            return self.clone()
        return Logcumsumexp.apply(self if self.dtype.kind == "f" else
                                     self.astype(dtypes.floating(self.dtype)), axis=axis)

    def norm(self, p=2, axis=None, keepdims=False, dim=None):
        """The vector p-norm over ``axis`` (all entries when None): p = 1, 2, inf, -inf, any
        p > 0, or "fro" (= 2 over the axes given). At a zero vector the gradient is 0 (PyTorch's
        subgradient) instead of 0/0."""
        axes = self._axes(dim if dim is not None else axis, "norm")
        if p == "fro":
            p = 2
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not (p > 0 or p == -math.inf):
            raise ValueError(f"norm: p must be a positive number, inf, -inf or 'fro', got {p!r}")
        if p == 2:
            return sh.Norm2.apply(self, axes=axes, keepdims=keepdims)
        size = self.abs()
        if p == math.inf:
            return size.max(axis=axes, keepdims=keepdims)
        if p == -math.inf:
            return size.min(axis=axes, keepdims=keepdims)
        if p == 1:
            return size.sum(axis=axes, keepdims=keepdims)
        total = (size ** p).sum(axis=axes, keepdims=keepdims)
        zero = total == 0  # the root's derivative is infinite there: keep it off that path
        return ew.where(zero, 0.0, ew.where(zero, 1.0, total) ** (1.0 / p))

    def softmax(self, axis=-1, dim=None):
        """Softmax along ``axis``; a 0-d tensor is a softmax over one entry (1)."""
        axis = dim if dim is not None else axis
        if self.ndim == 0:
            self._axes(axis, "softmax")
            return Softmax.apply(self.reshape(1), axis=0).reshape(())
        sh.normalize_axis(axis, self.ndim, "softmax")
        if self.size == 0:  # nothing to normalise: the (empty) result has the input's shape
            return self.clone()
        return Softmax.apply(self, axis=axis)

    def log_softmax(self, axis=-1, dim=None):
        axis = dim if dim is not None else axis
        if self.ndim == 0:
            self._axes(axis, "log_softmax")
            return LogSoftmax.apply(self.reshape(1), axis=0).reshape(())
        sh.normalize_axis(axis, self.ndim, "log_softmax")
        if self.size == 0:
            return self.clone()
        return LogSoftmax.apply(self, axis=axis)

    # ---- shape -----------------------------------------------------------------------------------
    def reshape(self, *shape):
        shape = _shape_args(shape)
        known = math.prod(n for n in shape if n != -1)
        free = shape.count(-1)
        if not (free == 0 and known == self.size or
                free == 1 and known > 0 and self.size % known == 0):
            raise ValueError(f"reshape: cannot reshape a tensor of shape {self.shape} "
                             f"({self.size} elements) into {tuple(shape)}")
        if tuple(shape) == self.shape:
            return self
        return sh.Reshape.apply(self, shape=tuple(shape))

    view = reshape

    def flatten(self, start_axis=0, end_axis=-1):
        start = start_axis % max(self.ndim, 1)
        end = end_axis % max(self.ndim, 1)
        return self.reshape(*self.shape[:start], -1, *self.shape[end + 1:])

    def permute(self, *axes):
        given, ndim = _shape_args(axes), self.data.ndim
        axes = tuple(a % ndim for a in given) if len(given) == ndim else ()
        identity = tuple(range(ndim))
        if len(given) != ndim or tuple(sorted(axes)) != identity:
            raise ValueError(f"permute: {tuple(given)} is not a permutation of the "
                             f"{ndim} axes of a tensor of shape {self.shape}")
        if axes == identity:
            return self
        return sh.Transpose.apply(self, axes=axes)

    def transpose(self, *axes):
        """No arguments reverse the axes (NumPy); two ints swap those two axes (PyTorch); a full
        permutation permutes."""
        if not axes:
            return self.T
        if len(axes) == 2 and all(isinstance(a, int) for a in axes):
            return self.swapaxes(*axes)
        return self.permute(*axes)

    def swapaxes(self, axis1, axis2):
        a, b = sh.normalize_axis(axis1, self.ndim, "swapaxes")[0], \
            sh.normalize_axis(axis2, self.ndim, "swapaxes")[0]
        axes = list(range(self.ndim))
        axes[a], axes[b] = axes[b], axes[a]
        return self.permute(*axes)

    def squeeze(self, axis=None, dim=None):
        axis = dim if dim is not None else axis
        if axis is None:
            return self.reshape(*[n for n in self.shape if n != 1])
        axes = self._axes(axis, "squeeze")
        for a in axes:
            if self.shape[a] != 1:  # NumPy's rule; PyTorch would return the tensor unchanged
                raise ValueError(f"squeeze: axis {a} of a tensor of shape {self.shape} has size "
                                 f"{self.shape[a]}, not 1; squeeze only axes of size 1")
        return self.reshape(*[n for i, n in enumerate(self.shape) if i not in axes])

    def unflatten(self, axis, sizes):
        """Split axis ``axis`` into ``sizes`` (one of them may be -1)."""
        (axis,) = sh.normalize_axis(axis, self.ndim, "unflatten")
        sizes = _shape_args((sizes,))
        known = math.prod(n for n in sizes if n != -1)
        if sizes.count(-1) > 1 or (-1 not in sizes and known != self.shape[axis]) or (
                -1 in sizes and (known == 0 or self.shape[axis] % known)):
            raise ValueError(f"unflatten: sizes {tuple(sizes)} do not split axis {axis} of size "
                             f"{self.shape[axis]} (shape {self.shape})")
        return self.reshape(*self.shape[:axis], *sizes, *self.shape[axis + 1:])

    def tile(self, *reps):
        """NumPy's tile: repeat the whole tensor ``reps[i]`` times along axis i (missing leading
        axes count 1 on whichever side is shorter)."""
        reps = _shape_args(reps)
        if any(r < 0 for r in reps):
            raise ValueError(f"tile: repetitions must be >= 0, got {tuple(reps)}")
        ndim = max(len(reps), self.ndim)
        reps = [1] * (ndim - len(reps)) + reps
        x = self.reshape(*([1] * (ndim - self.ndim)), *self.shape)
        interleaved = [n for pair in zip([1] * ndim, x.shape) for n in pair]
        target = [n for pair in zip(reps, x.shape) for n in pair]
        return x.reshape(*interleaved).broadcast_to(*target).reshape(
            *[r * n for r, n in zip(reps, x.shape)])

    def repeat(self, *reps):
        """PyTorch's repeat (NumPy's tile), with at least as many repetitions as axes."""
        reps = _shape_args(reps)
        if len(reps) < self.ndim:
            raise ValueError(f"repeat: {len(reps)} repetitions for a tensor with {self.ndim} "
                             f"axes; give one per axis (or use tile)")
        return self.tile(*reps)

    def repeat_interleave(self, repeats, axis=None, dim=None):
        """Each entry repeated ``repeats`` times (an int, or one count per entry) along ``axis``
        (the flattened tensor when None), as ``numpy.repeat``."""
        axis = dim if dim is not None else axis
        x = self.reshape(-1) if axis is None else self
        (axis,) = sh.normalize_axis(0 if axis is None else axis, x.ndim, "repeat_interleave")
        counts = repeats.numpy() if isinstance(repeats, Tensor) else np.asarray(repeats)
        if counts.dtype.kind not in "iu" or (counts < 0).any() or counts.ndim > 1 or (
                counts.ndim == 1 and counts.size not in (1, x.shape[axis])):
            raise ValueError(f"repeat_interleave: repeats must be a count >= 0 or one count per "
                             f"entry of axis {axis} (size {x.shape[axis]}), got {repeats!r}")
        positions = np.repeat(np.arange(x.shape[axis]), counts)
        return x.index_select(axis, Tensor._wrap(self._backend.asarray(positions), self._backend))

    def diagonal(self, offset=0, axis1=0, axis2=1):
        """The diagonal ``offset`` of the (axis1, axis2) planes, as a new last axis (NumPy)."""
        a, b = (sh.normalize_axis(ax, self.ndim, "diagonal")[0] for ax in (axis1, axis2))
        if a == b:
            raise ValueError(f"diagonal: axis1 and axis2 are the same axis ({a})")
        rows = np.arange(max(0, -offset), self.shape[a])
        cols = rows + offset
        keep = cols < self.shape[b]
        rows, cols = rows[keep], cols[keep]
        moved = self.permute(*[i for i in range(self.ndim) if i not in (a, b)], a, b)
        xp = self._backend.xp
        return moved[(Ellipsis, xp.asarray(rows), xp.asarray(cols))]

    def masked_select(self, mask):
        """The entries where ``mask`` (broadcast against this tensor) is true, as a 1-D tensor."""
        mask_data = mask.data if isinstance(mask, Tensor) else np.asarray(mask)
        try:
            shape = np.broadcast_shapes(mask_data.shape, self.shape)
        except ValueError:
            raise ValueError(f"masked_select: a mask of shape {mask_data.shape} does not broadcast "
                             f"with the tensor's shape {self.shape}") from None
        mask_data = _bool_mask(mask_data, shape, "masked_select")
        mask_data = self._backend.xp.broadcast_to(mask_data, shape)
        return self.broadcast_to(*shape)[mask_data]

    def nonzero(self):
        """Indices of the non-zero entries, shape (count, ndim), int64 (PyTorch's layout)."""
        xp = self._backend.xp
        return Tensor._wrap(xp.stack(xp.nonzero(self.data), axis=-1).astype(xp.int64)
                            if self.ndim else xp.zeros((int(bool(self.data)), 0), xp.int64),
                            self._backend)

    def unfold(self, axis, size, step):
        """Sliding windows of ``size`` entries every ``step`` along ``axis``: that axis becomes the
        number of windows and a new last axis holds each window (PyTorch's ``Tensor.unfold``)."""
        (axis,) = sh.normalize_axis(axis, self.ndim, "unfold")
        n = self.shape[axis]
        if size < 0 or size > n or step <= 0:
            raise ValueError(f"unfold: windows of size {size} every {step} do not fit axis {axis} "
                             f"of size {n} (need 0 <= size <= {n}, step >= 1)")
        xp = self._backend.xp
        windows = xp.arange(0, n - size + 1, step)[:, None] + xp.arange(size)[None, :]
        picked = self[(slice(None),) * axis + (windows,)]
        order = [i for i in range(picked.ndim) if i != axis + 1] + [axis + 1]
        return picked.permute(*order)

    def isinf(self):
        return Tensor._wrap(self._backend.xp.isinf(self.data), self._backend)

    def isclose(self, other, rtol=1e-5, atol=1e-8, equal_nan=False):
        other = other.data if isinstance(other, Tensor) else other
        return Tensor._wrap(self._backend.xp.isclose(self.data, other, rtol=rtol, atol=atol,
                                                     equal_nan=equal_nan), self._backend)

    def unsqueeze(self, axis):
        if not -self.ndim - 1 <= axis <= self.ndim:
            raise ValueError(f"unsqueeze: axis {axis} is out of range for a tensor with "
                             f"{self.ndim} dimensions")
        axis = axis % (self.ndim + 1)
        return self.reshape(*self.shape[:axis], 1, *self.shape[axis:])

    def expand_dims(self, axis):
        return self.unsqueeze(axis)

    def broadcast_to(self, *shape):
        shape = tuple(_shape_args(shape))
        if shape == self.shape:
            return self
        try:
            np.broadcast_shapes(self.shape, shape)
            if len(shape) < self.ndim or np.broadcast_shapes(self.shape, shape) != shape:
                raise ValueError
        except ValueError:
            raise ValueError(f"broadcast_to: a tensor of shape {self.shape} cannot be broadcast "
                             f"to {shape}") from None
        return sh.BroadcastTo.apply(self, shape=shape)

    def expand(self, *shape):
        """PyTorch's expand: -1 keeps a size."""
        shape = _shape_args(shape)
        lead = len(shape) - self.ndim
        shape = [self.shape[i - lead] if n == -1 else n for i, n in enumerate(shape)]
        return self.broadcast_to(*shape)

    def flip(self, axis=None, dim=None):
        axis = dim if dim is not None else axis
        axes = sh.normalize_axis(axis, self.ndim, "flip")
        return sh.Flip.apply(self, axis=axes)

    def roll(self, shift, axis=None, dim=None):
        axis = dim if dim is not None else axis
        if axis is None:
            return sh.Roll.apply(self.reshape(-1), shift=shift, axis=0).reshape(self.shape)
        shift = tuple(shift) if isinstance(shift, (list, tuple)) else shift
        axis = tuple(axis) if isinstance(axis, (list, tuple)) else axis
        return sh.Roll.apply(self, shift=shift, axis=axis)

    def tril(self, k=0):
        _need_matrix(self, "tril")
        return sh.Triangle.apply(self, k=k, upper=False)

    def triu(self, k=0):
        _need_matrix(self, "triu")
        return sh.Triangle.apply(self, k=k, upper=True)

    def split(self, split_size_or_sections, axis=0, dim=None):
        from .creation import split

        return split(self, split_size_or_sections, axis=dim if dim is not None else axis)

    def chunk(self, chunks, axis=0, dim=None):
        from .creation import chunk

        return chunk(self, chunks, axis=dim if dim is not None else axis)

    def unbind(self, axis=0, dim=None):
        from .creation import unbind

        return unbind(self, axis=dim if dim is not None else axis)

    # ---- indexing --------------------------------------------------------------------------------
    def __getitem__(self, index):
        return sh.GetItem.apply(self, index=_index_data(index, self))

    def __setitem__(self, index, value):
        index = _index_data(index, self)
        if isinstance(value, Tensor) and value._backend is not self._backend:
            raise TypeError(f"__setitem__: the value lives on {value._backend.name}, the tensor "
                            f"on {self._backend.name}")
        self._inplace(lambda: sh.IndexPut.apply(self, value, index=index),
                      lambda: self.data.__setitem__(
                          index, value.data if isinstance(value, Tensor) else value), value)

    def gather(self, axis, index):
        from .creation import take_along_axis

        return take_along_axis(self, index, axis)

    def take_along_axis(self, index, axis):
        from .creation import take_along_axis

        return take_along_axis(self, index, axis)

    def index_select(self, axis, index):
        (axis,) = sh.normalize_axis(axis, self.ndim, "index_select")
        index = _index_data(index, self)
        return self[(slice(None),) * axis + (index,)]

    def scatter_add(self, axis, index, src):
        from .creation import scatter_add

        return scatter_add(self, axis, index, src)

    def scatter(self, axis, index, src):
        from .creation import scatter

        return scatter(self, axis, index, src)

    def scatter_reduce(self, axis, index, src, reduce, include_self=True):
        from .creation import scatter_reduce

        return scatter_reduce(self, axis, index, src, reduce, include_self)

    # ---- in-place operations ---------------------------------------------------------------------
    def _inplace(self, recorded, direct, *operands):
        """Run an in-place operation. Without a graph it is ``direct`` on the array; while
        recording, the out-of-place ``recorded`` result is written back and this tensor takes its
        node. Either way the version counter moves, so stale saved tensors are detected."""
        needs_graph = grad_mode.is_grad_enabled() and (
            self.requires_grad or any(isinstance(o, Tensor) and o.requires_grad for o in operands))
        if not needs_graph:
            with function.writable(self):
                direct()
            return self
        else:
            if self._node is None and self.requires_grad:
                raise RuntimeError(
                    f"in-place operation on a leaf tensor of shape {self.shape} that requires a "
                    "gradient; do it under no_grad(), or use an out-of-place operation")
            if self._is_view:
                raise RuntimeError(
                    "in-place operation on a view (reshape / transpose / slice) of another "
                    "tensor while recording a graph; use an out-of-place operation")
            result = recorded()
            with function.writable(self):
                self.data[...] = result.data
            self._node = result._node
            self.requires_grad = True
        return self

    def _binary_inplace(self, function, ufunc, other):
        other_data = other.data if isinstance(other, Tensor) else other
        return self._inplace(lambda: function.apply(self, other),
                             lambda: ufunc(self.data, other_data, out=self.data,
                                           casting="same_kind"), other)

    def add_(self, other):
        return self._binary_inplace(ew.Add, self._backend.xp.add, other)

    def sub_(self, other):
        return self._binary_inplace(ew.Sub, self._backend.xp.subtract, other)

    def mul_(self, other):
        return self._binary_inplace(ew.Mul, self._backend.xp.multiply, other)

    def div_(self, other):
        return self._binary_inplace(ew.Div, self._backend.xp.true_divide, other)

    __iadd__ = add_
    __isub__ = sub_
    __imul__ = mul_
    __itruediv__ = div_

    def zero_(self):
        return self.fill_(0)

    def fill_(self, value):
        return self._inplace(lambda: ew.Where.apply(True, value, self),
                             lambda: self.data.fill(value))

    def copy_(self, source):
        source = source if isinstance(source, Tensor) else Tensor(source, dtype=self.dtype,
                                                                  backend=self._backend)
        src = source.data if source._backend is self._backend else \
            self._backend.asarray(source.numpy())
        return self._inplace(lambda: ew.Where.apply(True, source, self),
                             lambda: self.data.__setitem__(Ellipsis, src), source)

    def clip_(self, low=None, high=None):
        return self._inplace(lambda: ew.clip(self, low, high),
                             lambda: self._backend.xp.clip(self.data, low, high, out=self.data))

    clamp_ = clip_

    def masked_fill_(self, mask, value):
        mask_data = _bool_mask(mask, self.shape, "masked_fill_")
        return self._inplace(lambda: ew.Where.apply(mask_data, value, self),
                             lambda: self._backend.xp.copyto(self.data, value, where=mask_data),
                             value)


class _TensorHook:
    """One registration of a gradient hook (``Tensor.register_hook``)."""

    __slots__ = ("hook",)

    def __init__(self, hook):
        self.hook = hook

    def __call__(self, grad):
        return self.hook(grad)


class _HookHandle:
    """Removes one registration of a hook: the entry at its own place, found by identity, so
    that the same function registered twice keeps its other registration where it was."""

    def __init__(self, hooks, hook):
        self._hooks, self._hook = hooks, hook

    def remove(self):
        for i, entry in enumerate(self._hooks):
            if entry is self._hook:
                del self._hooks[i]
                return


class _ToBackend(sh.Function):
    """Move data to another backend; the gradient moves back."""

    @staticmethod
    def forward(ctx, x, *, target):
        ctx.source = ctx.backend
        ctx.backend = target  # the output lives on the target backend
        return target.asarray(ctx.source.to_numpy(x))

    @staticmethod
    def backward(ctx, grad):
        return grad.to(ctx.source)


# function.py and engine.py make tensors but are imported by this module: hand them the class.
function.Tensor = engine.Tensor = Tensor
engine.sum_to = sh.sum_to


# ---- helpers -------------------------------------------------------------------------------------
def _raise_if_ragged(data):
    """Raise ``ValueError`` saying at which depth and item nested lists stop being rectangular."""
    def shape_of(item, path):
        if not isinstance(item, (list, tuple)):
            return tuple(np.shape(item))
        shapes = [shape_of(child, path + [i]) for i, child in enumerate(item)]
        for i, child_shape in enumerate(shapes[1:], start=1):
            if child_shape != shapes[0]:
                where = "".join(f"[{j}]" for j in path)
                raise ValueError(
                    f"tensor: the nested list is ragged at depth {len(path) + 1}: item "
                    f"data{where}[0] has shape {shapes[0]} but data{where}[{i}] has shape "
                    f"{child_shape}; every list at one depth must have the same length "
                    "(pad the shorter ones)")
        return (len(item),) + (shapes[0] if shapes else ())

    shape_of(data, [])


def _shape_args(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return [int(n) for n in shape]


def _need_matrix(t, op):
    if t.ndim < 2:
        raise ValueError(f"{op}: needs at least 2 dimensions, got shape {t.shape}")


def _bool_mask(mask, shape, op):
    data = mask.data if isinstance(mask, Tensor) else np.asarray(mask)
    if data.dtype.kind != "b":
        raise TypeError(f"{op}: the mask must be a bool tensor, got dtype {data.dtype}")
    try:
        if np.broadcast_shapes(data.shape, shape) != tuple(shape):
            raise ValueError
    except ValueError:
        raise ValueError(f"{op}: a mask of shape {data.shape} does not broadcast to the tensor's "
                         f"shape {tuple(shape)}") from None
    return data


def _index_data(index, owner):
    """Tensors, lists, and tuples inside a tuple index become backend arrays; slices, ints, None
    and Ellipsis stay. Every selection by position is then an integer (or bool) array, which the
    backward of indexing scatter-adds, so a position selected twice gets both gradients."""
    xp = owner._backend.xp

    def convert(i):
        if isinstance(i, Tensor):
            if i._backend is not owner._backend:
                raise TypeError(f"indexing: the index lives on {i._backend.name}, the tensor on "
                                f"{owner._backend.name}")
            if i.dtype.kind not in "iub":
                raise IndexError("indexing: an index tensor must be integer or bool, got "
                                 f"{i.dtype}")
            return i.data
        if isinstance(i, (list, tuple)):
            array = xp.asarray([convert(j) for j in i])
            if array.size == 0:  # [] selects nothing
                return array.astype(xp.int64)
            if array.dtype.kind not in "iub":
                raise IndexError(f"indexing: a list used as an index must hold integers or "
                                 f"bools, got {i!r}")
            return array
        return i

    if isinstance(index, tuple):  # x[a, b]: one entry per axis (a nested tuple is an array)
        return tuple(convert(i) for i in index)
    return convert(index)

