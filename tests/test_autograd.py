"""Engine behaviour: backward / grad options, hooks, grad mode, in-place rules, backends, dtypes,
creation, random numbers, NumPy interop and error messages.

The gradients of the individual operations are checked in ``test_primitives.py``; this file checks
the machinery around them.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp import backends
from minitorch_nlp.backends import NumpyBackend


def f64(data, requires_grad=False):
    return mt.tensor(data, dtype=mt.float64, requires_grad=requires_grad)


# ---- backward and grad ---------------------------------------------------------------------------
def test_gradients_accumulate_across_backward_calls():
    x = f64([1.0, 2.0, 3.0], requires_grad=True)
    (x * x).sum().backward()
    (3 * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy() + 3)


def test_a_tensor_used_twice_gets_the_sum_of_both_gradients():
    x = f64([0.5, -1.0], requires_grad=True)
    y = x.exp()
    (y * y + y).sum().backward()  # d/dx (e^2x + e^x)
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(2 * x.numpy()) + np.exp(x.numpy()))


def test_going_through_a_freed_graph_twice_explains_retain_graph():
    x = f64([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        y.backward()


def test_retain_graph_allows_a_second_pass():
    x = f64([1.0, 2.0], requires_grad=True)
    y = (x.sin() * x).sum()
    y.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first)


def test_backward_of_a_non_scalar_needs_its_gradient():
    x = f64([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"one element; output 0 has shape \(2,\).*explicitly"):
        (x * 2).backward()
    (x * 2).backward(f64([1.0, 10.0]))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 20.0])


def test_backward_checks_the_shape_of_the_given_gradient():
    x = f64([1.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError, match=r"gradient for output 0 has shape \(3,\).*\(2,\)"):
        (x * 2).backward(f64([1.0, 1.0, 1.0]))


def test_backward_on_a_tensor_without_graph_says_why():
    with pytest.raises(RuntimeError, match="does not require a gradient"):
        f64([1.0]).sum().backward()


def test_the_given_output_gradient_is_not_aliased_by_grad():
    x = f64([1.0, 2.0], requires_grad=True)
    g = f64([1.0, 1.0])
    (x + 0).backward(g)
    g.data[...] = 100.0
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0])


def test_grad_returns_gradients_and_leaves_dot_grad_alone():
    x = f64([1.0, 2.0], requires_grad=True)
    w = f64([3.0, 4.0], requires_grad=True)
    gx, gw = mt.grad((x * w).sum(), [x, w])
    np.testing.assert_array_equal(gx.numpy(), [3.0, 4.0])
    np.testing.assert_array_equal(gw.numpy(), [1.0, 2.0])
    assert x.grad is None and w.grad is None


def test_grad_with_allow_unused():
    x = f64([1.0], requires_grad=True)
    unused = f64([2.0], requires_grad=True)
    y = (x * 3).sum()
    with pytest.raises(RuntimeError, match="input 1 .* not part of the graph.*allow_unused=True"):
        mt.grad(y, [x, unused], retain_graph=True)
    gx, gu = mt.grad(y, [x, unused], allow_unused=True)
    assert gu is None
    np.testing.assert_array_equal(gx.numpy(), [3.0])


def test_grad_of_an_input_that_does_not_require_grad_is_an_error():
    with pytest.raises(RuntimeError, match="input 0 .* does not require a gradient"):
        mt.grad(f64([1.0], requires_grad=True).sum(), [f64([1.0])])


def test_grad_with_respect_to_non_leaf_tensors():
    x = f64([1.0, -2.0], requires_grad=True)
    y = x * 3
    z = (y * y).sum()
    (gy,) = mt.grad(z, y)
    np.testing.assert_allclose(gy.numpy(), 2 * y.numpy())


def test_second_derivative_through_backward_create_graph():
    x = f64([0.3, -1.1], requires_grad=True)
    (x ** 3).sum().backward(create_graph=True)
    assert x.grad.requires_grad
    (second,) = mt.grad(x.grad.sum(), x)
    np.testing.assert_allclose(second.numpy(), 6 * x.numpy())


def test_a_long_chain_does_not_hit_the_recursion_limit():
    x = f64([1.0], requires_grad=True)
    y = x
    for _ in range(5000):
        y = y * 1.0 + 0.0
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0])


# ---- hooks and retain_grad -----------------------------------------------------------------------
def test_a_hook_on_a_leaf_sees_and_can_replace_the_gradient():
    x = f64([1.0, 2.0], requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(g.numpy().copy()))
    x.register_hook(lambda g: g * 10)
    (x * 3).sum().backward()
    np.testing.assert_array_equal(seen[0], [3.0, 3.0])
    np.testing.assert_array_equal(x.grad.numpy(), [30.0, 30.0])


def test_a_hook_on_a_non_leaf_changes_what_flows_upstream():
    x = f64([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: g * 0 + f64([1.0, 0.0]))
    (y * 5).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 0.0])


def test_a_removed_hook_is_not_called():
    x = f64([1.0], requires_grad=True)
    calls = []
    handle = x.register_hook(lambda g: calls.append(1))
    handle.remove()
    handle.remove()  # removing twice is harmless
    (x * 2).sum().backward()
    assert calls == []
    np.testing.assert_array_equal(x.grad.numpy(), [2.0])


def test_each_handle_removes_its_own_registration_of_a_function_registered_twice():
    x = mt.tensor([1.0], requires_grad=True)
    calls = []

    def double(grad):
        calls.append("double")
        return grad * 2

    def add_one(grad):
        calls.append("add_one")
        return grad + 1

    x.register_hook(double)
    x.register_hook(add_one)
    second = x.register_hook(double)
    second.remove()
    second.remove()                      # removing twice is harmless
    (x * 1.0).sum().backward()
    assert calls == ["double", "add_one"]
    assert x.grad.item() == 3.0          # (1 * 2) + 1: the first registration kept its place


def test_hooks_run_during_grad_too():
    x = f64([1.0], requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: g * 3)
    (gx,) = mt.grad((y * 1).sum(), x)
    np.testing.assert_array_equal(gx.numpy(), [6.0])


def test_register_hook_needs_requires_grad():
    with pytest.raises(RuntimeError, match="does not require a gradient"):
        f64([1.0]).register_hook(lambda g: g)


def test_retain_grad_keeps_the_gradient_of_a_non_leaf():
    x = f64([1.0, 2.0], requires_grad=True)
    y = x * 2
    z = x * 3
    y.retain_grad()
    (y * z).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), z.numpy())
    assert z.grad is None
    assert y.retain_grad() is y


# ---- grad mode, detach, requires_grad ------------------------------------------------------------
def test_no_grad_and_enable_grad_as_context_managers():
    x = f64([1.0], requires_grad=True)
    with mt.no_grad():
        assert not mt.is_grad_enabled()
        y = x * 2
        with mt.enable_grad():
            assert mt.is_grad_enabled()
            z = x * 2
        assert not mt.is_grad_enabled()
    assert mt.is_grad_enabled()
    assert not y.requires_grad and y.is_leaf
    assert z.requires_grad and not z.is_leaf


def test_no_grad_and_enable_grad_as_decorators():
    x = f64([1.0], requires_grad=True)

    @mt.no_grad()
    def frozen(t):
        return t * 2

    @mt.enable_grad()
    def recorded(t):
        return t * 2

    assert not frozen(x).requires_grad
    with mt.no_grad():
        assert recorded(x).requires_grad
    assert frozen.__name__ == "frozen"


def test_grad_mode_is_restored_after_an_exception():
    with pytest.raises(ZeroDivisionError):
        with mt.no_grad():
            1 / 0  # noqa: B018 (the division raises the error the test is about)
    assert mt.is_grad_enabled()


def test_grad_mode_belongs_to_the_thread():
    """A no_grad block in another thread (a background index refresh) leaves this thread's
    recording on, and a new thread starts with recording on whatever this thread's mode is."""
    inside, started_under_no_grad = threading.Event(), []
    release = threading.Event()
    x = f64([1.0], requires_grad=True)

    def background():
        with mt.no_grad():
            inside.set()
            release.wait(5)

    worker = threading.Thread(target=background)
    worker.start()
    inside.wait(5)
    assert mt.is_grad_enabled() and (x * 2).requires_grad
    release.set()
    worker.join()
    with mt.no_grad():
        fresh = threading.Thread(target=lambda: started_under_no_grad.append(mt.is_grad_enabled()))
        fresh.start()
        fresh.join()
    assert started_under_no_grad == [True]


def test_detach_shares_data_but_not_the_graph():
    x = f64([1.0, 2.0], requires_grad=True)
    y = x * 2
    d = y.detach()
    assert not d.requires_grad and d.is_leaf
    assert np.shares_memory(d.data, y.data)


def test_changing_a_detached_tensor_in_place_is_seen_by_the_graph():
    x = f64([1.0, 2.0], requires_grad=True)
    y = x.exp()
    y.detach().add_(1)  # same memory, same version counter
    with pytest.raises(RuntimeError, match="modified in place"):
        y.sum().backward()


def test_requires_grad_only_for_floating_tensors():
    with pytest.raises(TypeError, match="only floating-point tensors can require a gradient; "
                                        "this one is int64"):
        mt.tensor([1, 2]).requires_grad_()
    with pytest.raises(TypeError, match="floating"):
        mt.tensor([True], requires_grad=True)


def test_requires_grad_false_on_a_graph_output_points_to_detach():
    y = f64([1.0], requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="detach"):
        y.requires_grad_(False)


def test_operations_on_tensors_without_requires_grad_record_nothing():
    y = f64([1.0]) * f64([2.0])
    assert not y.requires_grad and y.grad_fn is None


def test_comparisons_give_bool_tensors_without_gradient():
    x = f64([1.0, 2.0, 3.0], requires_grad=True)
    mask = x > 1.5
    assert mask.dtype == np.bool_ and not mask.requires_grad
    assert (x.argmax()).item() == 2 and x.argmax().dtype == np.int64


# ---- in-place operations -------------------------------------------------------------------------
def test_in_place_on_a_leaf_that_requires_grad_is_refused():
    x = f64([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="in-place operation on a leaf"):
        x.add_(1)
    with pytest.raises(RuntimeError, match="in-place operation on a leaf"):
        x[0] = 5.0
    with mt.no_grad():
        x.add_(1)  # optimizer-style updates are fine
    np.testing.assert_array_equal(x.numpy(), [2.0, 3.0])


def test_modifying_a_saved_output_in_place_is_detected():
    x = f64([0.5, 1.0], requires_grad=True)
    y = x.exp()  # exp saves its output
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified in place"):
        y.sum().backward()


def test_modifying_a_saved_input_in_place_is_detected():
    x = f64([0.5, 1.0], requires_grad=True)
    y = x.sin()  # sin saves its input
    with mt.no_grad():
        x.mul_(2)
    with pytest.raises(RuntimeError, match=r"modified in place.*version 0 -> 1"):
        y.sum().backward()


def test_in_place_on_a_non_leaf_is_differentiable():
    x = f64([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    y[0] = 0
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 2.0, 2.0])


def test_in_place_arithmetic_on_a_non_leaf_is_differentiable():
    x = f64([1.0, 2.0], requires_grad=True)
    w = f64([5.0, 7.0], requires_grad=True)
    y = x.sin()
    y *= 3
    y += w
    y /= 2
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 1.5 * np.cos(x.numpy()))
    np.testing.assert_allclose(w.grad.numpy(), [0.5, 0.5])


def test_in_place_that_overwrites_a_value_its_own_backward_needs_is_refused():
    x = f64([1.0, 2.0], requires_grad=True)
    y = x * 1.0
    y *= x  # the gradient for x needs the old y, which is overwritten
    with pytest.raises(RuntimeError, match="Mul backward: .* modified in place"):
        y.sum().backward()


def test_setitem_gradient_reaches_the_target_and_the_value():
    x = f64([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    v = f64([10.0, 20.0], requires_grad=True)
    w = f64([1.0, 2.0, 3.0, 4.0])
    y = x * 1.0
    y[1:3] = v * 3
    np.testing.assert_array_equal(y.numpy(), [1.0, 30.0, 60.0, 4.0])
    (y * w).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 0.0, 0.0, 4.0])
    np.testing.assert_array_equal(v.grad.numpy(), [6.0, 9.0])


@pytest.mark.parametrize("operation, expected_grad", [
    (lambda y: y.masked_fill_(mt.tensor([True, False, False]), 0.0), [0.0, 2.0, 2.0]),
    (lambda y: y.clip_(-5.0, 5.0), [2.0, 2.0, 0.0]),
    (lambda y: y.zero_(), [0.0, 0.0, 0.0]),
    (lambda y: y.fill_(3.0), [0.0, 0.0, 0.0]),
    (lambda y: y.sub_(f64([1.0, 1.0, 1.0])), [2.0, 2.0, 2.0]),
])
def test_in_place_methods_on_a_non_leaf(operation, expected_grad):
    x = f64([1.0, -2.0, 3.0], requires_grad=True)
    y = x * 2
    assert operation(y) is y
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), expected_grad)


def test_copy_into_a_non_leaf_sends_the_gradient_to_the_source():
    x = f64([1.0, -2.0], requires_grad=True)
    c = f64([7.0, 8.0], requires_grad=True)
    y = x * 2
    y.copy_(c * 3)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0])
    np.testing.assert_array_equal(c.grad.numpy(), [3.0, 3.0])


def test_setitem_with_a_mask_and_no_graph_writes_directly():
    x = f64([1.0, -2.0, 3.0])
    x[x < 0] = 0.0
    np.testing.assert_array_equal(x.numpy(), [1.0, 0.0, 3.0])


def test_in_place_on_a_view_while_recording_is_refused():
    x = f64([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    view = (x * 1.0).reshape(4)
    with pytest.raises(RuntimeError, match="view"):
        view[0] = 0.0


# ---- backends ------------------------------------------------------------------------------------
@pytest.fixture
def second_numpy_backend():
    """A second, separate NumPy backend instance registered as "numpy2"."""
    mt.register_backend("numpy2", NumpyBackend)
    try:
        yield mt.get_backend("numpy2")
    finally:
        backends._FACTORIES.pop("numpy2", None)
        backends._INSTANCES.pop("numpy2", None)


def test_unknown_backend_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown backend 'nosuch': choose one of \[.*'numpy'"):
        mt.set_backend("nosuch")
    with pytest.raises(ValueError, match="unknown backend"):
        with mt.backend("nosuch"):
            pass
    assert mt.get_backend().name == "numpy"


def test_mixing_backends_is_an_error(second_numpy_backend):
    a = mt.tensor([1.0, 2.0])
    b = mt.tensor([1.0, 2.0], backend="numpy2")
    assert b.backend is second_numpy_backend and a.backend is not b.backend
    with pytest.raises(TypeError, match=r"different backends \(numpy and numpy\).*\.to\("):
        a + b
    with pytest.raises(TypeError, match="different backends"):
        a > b  # noqa: B015 (the comparison raises the error the test is about)


def test_set_backend_and_the_backend_context(second_numpy_backend):
    with mt.backend("numpy2") as be:
        assert be is second_numpy_backend
        assert mt.zeros(2).backend is second_numpy_backend
        assert mt.tensor([1.0]).backend is second_numpy_backend
    assert mt.zeros(2).backend is mt.get_backend("numpy")
    mt.set_backend("numpy2")
    assert mt.randn(2).backend is second_numpy_backend
    assert "numpy2" in mt.available_backends()


def test_tensor_to_moves_data_and_gradient_back(second_numpy_backend):
    x = f64([1.0, 2.0], requires_grad=True)
    y = x.to("numpy2")
    assert y.backend is second_numpy_backend
    assert x.to("numpy") is x
    (y * y).sum().backward()
    assert x.grad.backend is x.backend
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])


def test_tensor_to_changes_dtype():
    x = mt.tensor([1.5, 2.5], requires_grad=True)
    y = x.to(mt.float64)
    assert y.dtype == np.float64
    y.sum().backward()
    assert x.grad.dtype == np.float32  # the gradient comes back in the leaf's dtype
    assert x.to("float32") is x
    assert mt.tensor([1.7]).to(mt.int64).dtype == np.int64


def _run_python(code, **env):
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, env={**os.environ, **env}, timeout=120)
    return result


def test_backend_environment_variable():
    code = """
        import minitorch_nlp as mt
        from minitorch_nlp.backends import NumpyBackend
        mt.register_backend("numpy2", NumpyBackend)
        print(mt.tensor([1.0]).backend.name == "numpy" and mt.get_backend() is not
              mt.get_backend("numpy"))
    """
    result = _run_python(code, MINITORCH_NLP_BACKEND="numpy2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
    bad = _run_python("import minitorch_nlp as mt; mt.zeros(1)", MINITORCH_NLP_BACKEND="nosuch")
    assert bad.returncode != 0
    assert "unknown backend 'nosuch'" in bad.stderr


# ---- dtypes --------------------------------------------------------------------------------------
def test_dtype_rules():
    assert mt.tensor(1.5).dtype == np.float32
    assert mt.tensor([1.0, 2.0]).dtype == np.float32
    assert mt.tensor(3).dtype == np.int64
    assert mt.tensor([True]).dtype == np.bool_
    assert mt.tensor(np.zeros(2, dtype=np.float64)).dtype == np.float64
    assert mt.tensor(np.zeros(2, dtype=np.int32)).dtype == np.int32
    assert mt.tensor(np.zeros(2, dtype=np.int16)).dtype == np.int64
    assert mt.zeros(2).dtype == np.float32 and mt.randn(2).dtype == np.float32
    x = mt.tensor([1.0, 2.0])
    assert (x + 1.5).dtype == np.float32
    assert (2.5 * x).dtype == np.float32
    assert (x / 3).dtype == np.float32
    assert (x ** 2).dtype == np.float32
    assert (x + f64([1.0, 1.0])).dtype == np.float64
    assert (mt.tensor([1, 2]) * 2).dtype == np.int64


def test_default_dtype_can_be_float64():
    mt.set_default_dtype(mt.float64)
    assert mt.tensor(1.5).dtype == np.float64
    assert mt.ones(2).dtype == np.float64
    with pytest.raises(ValueError, match="float32 or float64"):
        mt.set_default_dtype(mt.int64)


def test_unsupported_dtype_is_refused():
    with pytest.raises(TypeError, match="not supported"):
        mt.zeros(2, dtype=np.complex128)
    with pytest.raises(TypeError, match="unknown dtype"):
        mt.zeros(2, dtype="no-such-type")


# ---- creation ------------------------------------------------------------------------------------
def test_creation_functions():
    np.testing.assert_array_equal(mt.zeros(2, 3).numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(mt.zeros((2, 3)).numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(mt.ones(4).numpy(), np.ones(4))
    full = mt.full((2, 2), 7.0)
    assert full.dtype == np.float32 and (full.numpy() == 7).all()
    assert mt.full(3, 7).dtype == np.int64
    assert mt.arange(5).dtype == np.int64
    np.testing.assert_array_equal(mt.arange(1, 7, 2).numpy(), [1, 3, 5])
    np.testing.assert_allclose(mt.arange(0, 1, 0.25).numpy(), [0, 0.25, 0.5, 0.75])
    assert mt.arange(0, 1, 0.25).dtype == np.float32
    np.testing.assert_array_equal(mt.eye(3).numpy(), np.eye(3))
    np.testing.assert_array_equal(mt.eye(2, 3, k=1).numpy(), np.eye(2, 3, k=1))
    np.testing.assert_allclose(mt.linspace(0, 1, 5).numpy(), np.linspace(0, 1, 5))
    assert mt.empty(2, 3).shape == (2, 3)
    assert mt.zeros(2, requires_grad=True).requires_grad
    assert mt.zeros(2, dtype=mt.float64).dtype == np.float64


def test_random_creation_ranges_and_dtypes():
    u = mt.rand(1000)
    assert u.dtype == np.float32 and 0 <= u.numpy().min() and u.numpy().max() < 1
    n = mt.randn(2000, dtype=mt.float64)
    assert n.dtype == np.float64 and abs(n.numpy().mean()) < 0.1 and abs(n.numpy().std() - 1) < 0.1
    r = mt.randint(3, 7, size=(500,))
    assert r.dtype == np.int64 and set(np.unique(r.numpy())) == {3, 4, 5, 6}
    assert set(np.unique(mt.randint(2, size=100).numpy())) <= {0, 1}
    with pytest.raises(ValueError, match=r"empty range \[3, 3\)"):
        mt.randint(3, 3)
    assert mt.randn(2, 3, requires_grad=True).requires_grad


def test_like_functions_copy_shape_dtype_and_backend():
    x = mt.tensor(np.arange(6.0).reshape(2, 3), dtype=mt.float64)
    for made in (mt.zeros_like(x), mt.ones_like(x), mt.full_like(x, 2.5), mt.rand_like(x),
                 mt.randn_like(x)):
        assert made.shape == (2, 3) and made.dtype == np.float64 and made.backend is x.backend
    assert (mt.zeros_like(x).numpy() == 0).all() and (mt.ones_like(x).numpy() == 1).all()
    assert (mt.full_like(x, 2.5).numpy() == 2.5).all()
    assert mt.zeros_like(x, dtype=mt.float32).dtype == np.float32
    assert mt.ones_like(x, requires_grad=True).requires_grad
    ints = mt.randint_like(mt.zeros(3, 4, dtype=mt.int64), 0, 5)
    assert ints.shape == (3, 4) and ints.dtype == np.int64 and ints.numpy().max() < 5


def test_tensor_copies_its_input_and_as_tensor_does_not():
    a = np.array([1.0, 2.0], dtype=np.float32)
    t = mt.tensor(a)
    a[0] = 100.0
    assert t.numpy()[0] == 1.0
    assert mt.as_tensor(t) is t


# ---- random numbers ------------------------------------------------------------------------------
def test_manual_seed_makes_runs_reproducible():
    mt.manual_seed(123)
    first = (mt.randn(5).numpy(), mt.rand(3).numpy(), mt.randint(10, size=4).numpy())
    mt.manual_seed(123)
    second = (mt.randn(5).numpy(), mt.rand(3).numpy(), mt.randint(10, size=4).numpy())
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    mt.manual_seed(124)
    assert not np.array_equal(mt.randn(5).numpy(), first[0])


def test_a_generator_is_independent_of_the_default_stream():
    mt.manual_seed(0)
    expected = mt.randn(4).numpy()
    mt.manual_seed(0)
    g = mt.Generator(7)
    from_g = mt.randn(4, generator=g).numpy()
    np.testing.assert_array_equal(mt.randn(4).numpy(), expected)
    np.testing.assert_array_equal(mt.randn(4, generator=mt.Generator(7)).numpy(), from_g)
    assert not np.array_equal(mt.randn(4, generator=g).numpy(), from_g)  # g moved on


def test_generator_state_round_trip_and_seed_validation():
    g = mt.Generator(3)
    state = g.get_state()
    a = mt.rand(3, generator=g).numpy()
    g.set_state(state)
    np.testing.assert_array_equal(mt.rand(3, generator=g).numpy(), a)
    with pytest.raises(ValueError, match="non-negative int"):
        mt.manual_seed(-1)
    assert mt.default_generator() is mt.manual_seed(5)


# ---- NumPy interop -------------------------------------------------------------------------------
def test_numpy_interop():
    t = mt.tensor([[1.0, 2.0], [3.0, 4.0]])
    a = np.asarray(t)
    assert isinstance(a, np.ndarray) and a.dtype == np.float32
    np.testing.assert_array_equal(a, [[1, 2], [3, 4]])
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    assert isinstance(t.numpy(), np.ndarray)
    assert t.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert t[1, 0].item() == 3.0 and isinstance(t[1, 0].item(), float)
    assert mt.tensor([7]).item() == 7 and isinstance(mt.tensor([7]).item(), int)
    assert float(mt.tensor(2.5)) == 2.5 and int(mt.tensor(3)) == 3
    with pytest.raises(ValueError, match=r"one element.*\(2, 2\)"):
        t.item()


def test_numpy_array_with_a_tensor_gives_a_tensor_with_gradient():
    x = f64([1.0, 2.0], requires_grad=True)
    c = np.array([10.0, 20.0])
    for y in (c + x, c * x, c - x, c / x):
        assert isinstance(y, mt.Tensor) and y.requires_grad
    (c * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), c)


def test_truth_value_of_a_tensor():
    assert bool(mt.tensor([1.0]))
    with pytest.raises(ValueError, match="ambiguous"):
        bool(mt.tensor([1.0, 2.0]))


def test_transpose_argument_conventions():
    x = mt.zeros(2, 3, 4)
    assert x.transpose().shape == (4, 3, 2)           # NumPy: reverse
    assert x.transpose(0, 2).shape == (4, 3, 2)       # PyTorch: swap two axes
    assert x.transpose(1, 2, 0).shape == (3, 4, 2)    # a full permutation
    assert x.transpose((1, 0, 2)).shape == (3, 2, 4)
    assert mt.zeros(2, 3).transpose(0, 1).shape == (3, 2)


# ---- error messages ------------------------------------------------------------------------------
def test_matmul_shape_mismatch_message():
    with pytest.raises(ValueError, match=r"matmul: \(2, 3\) @ \(4, 5\): inner dimensions 3 and 4 "
                                         "differ"):
        mt.zeros(2, 3) @ mt.zeros(4, 5)
    with pytest.raises(ValueError, match="batch dimensions"):
        mt.zeros(2, 2, 3) @ mt.zeros(3, 3, 4)
    with pytest.raises(ValueError, match="at least one dimension"):
        mt.matmul(mt.zeros(()), mt.zeros(3))


def test_reshape_message():
    with pytest.raises(ValueError, match=r"reshape: cannot reshape a tensor of shape \(2, 3\) "
                                         r"\(6 elements\) into \(4, 2\)"):
        mt.zeros(2, 3).reshape(4, 2)
    with pytest.raises(ValueError, match="reshape"):
        mt.zeros(2, 3).reshape(-1, -1)


def test_broadcast_to_message():
    with pytest.raises(ValueError, match=r"broadcast_to: a tensor of shape \(2, 3\) cannot be "
                                         r"broadcast to \(3, 3\)"):
        mt.zeros(2, 3).broadcast_to(3, 3)
    with pytest.raises(ValueError, match="broadcast_to"):
        mt.zeros(2, 3).broadcast_to(3)


def test_concatenate_and_stack_messages():
    with pytest.raises(ValueError, match=r"concatenate: tensor 1 has shape \(3, 2\), which does "
                                         r"not match \(2, 3\) outside axis 0"):
        mt.concatenate([mt.zeros(2, 3), mt.zeros(3, 2)])
    with pytest.raises(ValueError, match="concatenate: needs at least one tensor"):
        mt.concatenate([])
    with pytest.raises(ValueError, match=r"stack: tensor 1 has shape \(3,\)"):
        mt.stack([mt.zeros(2), mt.zeros(3)])


def test_indexing_with_an_empty_list_selects_nothing():
    x = f64([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = x[[]]
    assert y.shape == (0, 2)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((2, 2)))


def test_index_out_of_range_message():
    x = mt.zeros(2, 3)
    with pytest.raises(IndexError, match=r"indexing a tensor of shape \(2, 3\): index 5 is out of "
                                         "bounds for axis 0 with size 2"):
        x[5]
    with pytest.raises(IndexError, match="out of bounds"):
        x[mt.tensor([0, 7])]
    with pytest.raises(IndexError, match="take_along_axis: index out of range"):
        mt.take_along_axis(x, mt.tensor([[3], [0]]), 1)
    with pytest.raises(IndexError, match="must be integer or bool, got float32"):
        x[mt.tensor([0.0])]


def test_axis_messages():
    with pytest.raises(ValueError, match="sum: axis 2 is out of range for a tensor with 2 "
                                         "dimensions"):
        mt.zeros(2, 3).sum(axis=2)
    with pytest.raises(ValueError, match="repeated axis"):
        mt.zeros(2, 3).sum(axis=(0, 0))
    with pytest.raises(ValueError, match=r"squeeze: axis 0 .* has size 2, not 1"):
        mt.zeros(2, 3).squeeze(0)
    with pytest.raises(ValueError, match="permute"):
        mt.zeros(2, 3).permute(0, 0)


def test_einsum_messages():
    with pytest.raises(ValueError, match="index 'j' has sizes 3 and 2"):
        mt.einsum("ij,jk->ik", mt.zeros(2, 3), mt.zeros(2, 3))
    with pytest.raises(ValueError, match="names 2 operands but 1 were given"):
        mt.einsum("ij,jk->ik", mt.zeros(2, 3))
    with pytest.raises(ValueError, match="do not match its shape"):
        mt.einsum("ijk->i", mt.zeros(2, 3))


def test_other_argument_messages():
    with pytest.raises(ValueError, match=r"masked_fill: a mask of shape \(3,\) does not broadcast"):
        mt.zeros(2, 2).masked_fill(mt.tensor([True, False, True]), 0.0)
    with pytest.raises(TypeError, match="the mask must be a bool tensor"):
        mt.zeros(2).masked_fill(mt.tensor([1, 0]), 0.0)
    with pytest.raises(ValueError, match=r"split: sizes \[1, 1\] add up to 2"):
        mt.zeros(3).split([1, 1])
    with pytest.raises(ValueError, match="topk: k=4 is out of range"):
        mt.topk(mt.zeros(3), 4)
    with pytest.raises(ValueError, match=r"one_hot: index values must lie in \[0, 3\)"):
        mt.one_hot(mt.tensor([0, 3]), 3)
    with pytest.raises(ValueError, match="pad"):
        mt.pad(mt.zeros(2, 2), [(1, 1), (1, 1), (1, 1)])
    with pytest.raises(ValueError, match="gelu: approximate"):
        mt.zeros(2).gelu(approximate="sigmoid")


# ---- multi-output functions (split) ------------------------------------------------------------
def test_split_pieces_share_one_node_whose_backward_runs_once():
    x = mt.tensor(np.arange(12.0).reshape(3, 4), dtype=mt.float64, requires_grad=True)
    a, b, c = x.split([1, 2, 1], axis=1)
    assert a.grad_fn.ctx is c.grad_fn.ctx and repr(a.grad_fn) == "<SplitBackward output 0>"
    seen = []
    b.register_hook(seen.append)
    c.retain_grad()
    loss = (a * 2).sum() + (a * 3).sum() + (c ** 2).sum()     # a used twice, b unused
    loss.backward()
    assert not seen                                           # no gradient reached b
    np.testing.assert_array_equal(c.grad.numpy(), 2 * c.numpy())
    expected = np.zeros((3, 4))
    expected[:, 0] = 5
    expected[:, 3] = 2 * x.numpy()[:, 3]
    np.testing.assert_array_equal(x.grad.numpy(), expected)


def test_gradients_from_and_to_a_piece():
    x = mt.tensor(np.arange(6.0), dtype=mt.float64, requires_grad=True)
    first, second = x.chunk(2)
    second.backward(mt.tensor([1.0, 2.0, 3.0], dtype=mt.float64))   # a piece as the root
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0, 0, 1, 2, 3])
    (g_piece,) = mt.grad((first * second).sum(), [first])          # a piece as the target
    np.testing.assert_array_equal(g_piece.numpy(), second.numpy())
    with mt.no_grad():
        pieces = x.split(2)
    assert all(p.grad_fn is None and not p.requires_grad for p in pieces)


def test_split_pieces_are_views_sharing_the_version_counter():
    x = mt.zeros(4, requires_grad=True) * 1.0
    a, b = x.split(2)
    assert a._version is x._version
    with pytest.raises(ValueError, match=r"split: piece sizes must be ints >= 0"):
        x.split([5, -1])
