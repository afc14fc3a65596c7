"""``Function``: one differentiable operation, and ``Context``: its node in the recorded graph.

A ``Function`` subclass defines

* ``forward(ctx, *arrays, **static)`` on raw backend arrays (non-tensor inputs such as Python
  scalars or constant masks arrive unchanged), returning one array (or, for a Function with
  ``multi_output = True`` such as ``split``, a tuple of arrays: each output tensor then gets an
  ``OutputNode`` that hands its gradient to the shared ``Context``, whose ``backward(ctx, grads)``
  runs once with one gradient per output, ``None`` for outputs no gradient reached);
* ``backward(ctx, grad)`` written with ``Tensor`` operations, returning one gradient per input
  (``None`` where there is none). Because it is written with tensor operations, running it with
  recording switched on (``create_graph=True``) records the graph of the gradient itself, which is
  what makes second derivatives work. A gradient may have the broadcast shape of the output: the
  engine reduces it to the input's shape in one place.

Static arguments (axis, shapes, flags) are keyword-only and kept on ``ctx``.
``Function.apply`` runs ``forward`` and, when some input requires a gradient and recording is on,
makes the ``Context`` the output's node: it holds the ``Function``, the saved tensors and the
edges to the inputs' nodes (not the input tensors themselves, so intermediates that no backward
needs are freed as soon as the user drops them). Otherwise (``no_grad``, or no input needing a
gradient: inference) ``save_for_backward`` keeps nothing and the ``Context`` is dropped.
"""
from __future__ import annotations

import contextlib
import weakref

from . import grad_mode

Tensor = None  # the Tensor class, handed over by tensor.py (the two modules need each other)

# Arrays a live graph saved for backward, made read-only so that a write through ``t.data`` or
# ``np.asarray(t)`` raises instead of silently changing a gradient: id -> [array, holders].
_locked = {}


def _lock(array):
    """Count one more graph node holding ``array``; the first makes it read-only. Arrays without
    a ``writeable`` flag (CuPy) or already read-only by their owner are left alone."""
    entry = _locked.get(id(array))
    if entry is not None:
        entry[1] += 1
        return True
    if _waiting.pop(id(array), None) is not None:  # still read-only: held again
        _locked[id(array)] = [array, 1]
        return True
    flags = getattr(array, "flags", None)
    if flags is None or not getattr(flags, "writeable", False):
        return False
    array.flags.writeable = False
    _locked[id(array)] = [array, 1]
    return True


# Views whose lock ended while their base was still locked (NumPy refuses to make a view
# writable under a read-only base): id -> view, made writable again once their base is.
_waiting = {}


def _unlock(array):
    entry = _locked.get(id(array))
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] == 0:
        del _locked[id(array)]
        if _make_writable(array):
            for key, view in list(_waiting.items()):
                if _make_writable(view):
                    del _waiting[key]
        else:
            _waiting[id(array)] = array


def _make_writable(array):
    try:
        array.flags.writeable = True
    except ValueError:  # its base is still read-only
        return False
    return True


@contextlib.contextmanager
def writable(tensor):
    """Write into ``tensor.data`` in place even while a graph holds it (an optimizer step, loading
    a checkpoint): the read-only lock is lifted for the block and the tensor's version counter
    moves, so a backward through a graph that saved the old values still refuses to run."""
    chain, array = [], tensor.data
    # a view is writable only if its base is; CuPy arrays have no writeable flag (never locked)
    while array is not None and hasattr(getattr(array, "flags", None), "writeable"):
        chain.append(array)
        array = array.base
    relock = []
    for array in reversed(chain):
        if not array.flags.writeable and _make_writable(array):
            if id(array) in _locked:
                relock.append(array)
            else:  # read-only only because a graph held its base when it was made
                _waiting.pop(id(array), None)
    try:
        yield tensor.data
    finally:
        for array in reversed(relock):
            array.flags.writeable = False
        tensor._version[0] += 1


def memory_order(array):
    """``"F"`` for a column-major array that is not also row-major (``nn.column_major_`` stores
    weights so), else ``"C"``: the order in which a gradient or an optimizer's state for it is
    allocated, so that parameter, gradient and state are walked in one order."""
    flags = array.flags
    return "F" if flags.f_contiguous and not flags.c_contiguous else "C"


class Context:
    """A node of the graph; ``forward`` stores on it whatever ``backward`` needs."""

    fn = None
    next_nodes = ()
    input_meta = ()
    hooks = None
    retained = None
    released = False
    _saved = ()
    _saved_versions = ()
    _output_data = None
    _output_version = None
    _locks = ()
    needs_input_grad = ()
    recorded = False  # whether ``apply`` makes this the output's node (some input needs a grad)

    def save_for_backward(self, *values):
        """Keep tensors (and constants) for ``backward``. An in-place change to a tensor through
        the engine is detected (version counter); a raw write into its array (``t.data[...] =``,
        ``np.asarray(t)[...] =``) is refused, since the array is read-only while this node
        holds it."""
        if not self.recorded:  # nothing will run backward: keep nothing, check nothing
            return
        self._saved = values
        self._saved_versions = [v._version[0] if isinstance(v, Tensor) else None for v in values]
        for v in values:
            if isinstance(v, Tensor):
                self._hold(v.data)

    def _hold(self, array):
        if _lock(array):
            self._locks = self._locks + (array,) if self._locks else (array,)

    def save_inputs(self, *positions):
        """``save_for_backward`` of the inputs at ``positions`` (tensors, or constants as given)."""
        if self.recorded:
            self.save_for_backward(*(self._inputs[i] for i in positions))

    def save_output(self):
        """Ask ``apply`` to keep this operation's output for ``backward`` (see ``output``)."""
        self._output_data = True

    @property
    def saved_tensors(self):
        self._check_not_released()
        for t, version in zip(self._saved, self._saved_versions):
            if version is not None and t._version[0] != version:
                raise RuntimeError(
                    f"{self.name} backward: a tensor of shape {t.shape} saved for backward was "
                    f"modified in place afterwards (version {version} -> {t._version[0]}); "
                    "use an out-of-place operation (e.g. x = x + y instead of x += y)")
        return self._saved

    @property
    def output(self):
        """The output tensor, connected to this node (so that ``create_graph`` can differentiate
        it)."""
        self._check_not_released()
        box, version = self._output_version
        if box[0] != version:
            raise RuntimeError(
                f"{self.name} backward: its output was modified in place afterwards "
                f"(version {version} -> {box[0]}); use an out-of-place operation")
        return Tensor._wrap(self._output_data, self.backend, node=self)

    @property
    def name(self):
        return self.fn.__name__ if self.fn is not None else "operation"

    def _check_not_released(self):
        if self.released:
            raise RuntimeError(
                f"{self.name} backward: the graph has already been freed by an earlier backward; "
                "pass retain_graph=True to the first backward() / grad() to go through it twice")

    def release(self):
        self._saved = ()
        self._output_data = None
        self.released = True
        self._drop_locks()

    def _drop_locks(self):
        for array in self._locks:
            _unlock(array)
        self._locks = ()

    def __del__(self):
        if self._locks:
            self._drop_locks()

    def __repr__(self):
        return f"<{self.name}Backward>"


class OutputNode:
    """The node of output ``index`` of a multi-output Function: the engine passes the gradient
    that reaches it on to the shared ``Context`` ``ctx``, slot ``index``."""

    fn = None
    input_meta = ()
    hooks = None
    retained = None
    released = False

    def __init__(self, ctx, index):
        self.ctx, self.index = ctx, index
        self.next_nodes = (ctx,)

    def release(self):
        self.released = True

    def __repr__(self):
        return f"<{self.ctx.name}Backward output {self.index}>"


class LeafNode:
    """Where gradients of a leaf tensor (one made by the user, e.g. a parameter) arrive."""

    fn = None
    next_nodes = ()
    retained = None

    def __init__(self, tensor):
        self.tensor_ref = weakref.ref(tensor)
        self.hooks = None

    def __repr__(self):
        return "<AccumulateGrad>"


class Function:
    """Base class of every differentiable operation (see the module docstring)."""

    is_view = False  # output shares memory with input 0 (so they share a version counter)
    differentiable = True
    multi_output = False  # forward returns a tuple of arrays, backward takes a tuple of grads

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise TypeError("a Function subclass must define forward(ctx, *arrays)")

    @staticmethod
    def backward(ctx, grad):
        raise TypeError("a Function subclass must define backward(ctx, grad)")

    @classmethod
    def apply(cls, *inputs, **static):
        backend = None
        record = False
        arrays = []
        for x in inputs:
            if isinstance(x, Tensor):
                if backend is None:
                    backend = x._backend
                elif x._backend is not backend:
                    raise TypeError(
                        f"{cls.__name__}: inputs live on different backends ({backend.name} and "
                        f"{x._backend.name}); move one with tensor.to({backend.name!r})")
                if x.requires_grad:
                    record = True
                arrays.append(x.data)
            else:
                arrays.append(x)
        ctx = Context()
        ctx.backend = backend
        ctx._inputs = inputs
        if record and grad_mode._mode.enabled and cls.differentiable:
            ctx.recorded = True
            ctx.needs_input_grad = needs = [isinstance(x, Tensor) and x.requires_grad
                                            for x in inputs]
        else:
            record = False
            ctx.needs_input_grad = (False,) * len(inputs)
        out = cls.forward(ctx, *arrays, **static)
        ctx._inputs = None
        backend = ctx.backend  # forward may move the output to another backend (Tensor.to)
        if record:
            next_nodes, input_meta = [], []
            for x, need in zip(inputs, needs):
                if need:
                    next_nodes.append(x._node or x._grad_node())
                    input_meta.append((x.data.shape, x.data.dtype))
                else:
                    next_nodes.append(None)
                    input_meta.append(None)
            ctx.fn = cls
            ctx.next_nodes = next_nodes
            ctx.input_meta = input_meta
        if cls.multi_output:
            ctx.num_outputs = len(out)
            results = tuple(Tensor._wrap(o, backend, node=OutputNode(ctx, i) if record else None)
                            for i, o in enumerate(out))
            for result in results if cls.is_view else ():
                result._version = inputs[0]._version
                result._is_view = True
            return results
        result = Tensor._wrap(out, backend, node=ctx if record else None)
        if cls.is_view:
            result._version = inputs[0]._version
            result._is_view = True
        if record and ctx._output_data is True:
            ctx._output_data = result.data
            ctx._output_version = (result._version, result._version[0])
            ctx._hold(result.data)
        return result
