"""``check_equation`` and the ``check`` command (course mode is in ``test_course.py``).

The library's own implementation of every checkable equation passes; deliberately wrong ones
(attention without the 1/sqrt(d_k) scale, a softmax over the wrong axis, a context vector
summed over the wrong axis) fail with a hypothesis-shrunk counter-example.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import autograd.numpy as anp
import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp import cli, cookbook, decoding, nn
from minitorch_nlp.compress.lq_nets import lq_quantize
from minitorch_nlp.compress.mobilebert_losses import attention_transfer_loss
from minitorch_nlp.models.xlnet import permutation_inputs
from minitorch_nlp.retrieval.realm import join_bert
from minitorch_nlp.testing.equation_specs.decoding import markov_step
from minitorch_nlp.testing.equation_specs.elmo import bilstm_states
from minitorch_nlp.testing.equation_specs.retrieval import span_start_vectors
from minitorch_nlp.testing import EquationMismatch, TaskNotDone, check_equation, specs
from minitorch_nlp.testing.check import _gradient_hint, load_candidate
from tests.cli_checks import console_script, run_printed

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("number", [
    pytest.param(1, marks=[pytest.mark.eq(1), pytest.mark.sec3]),
    pytest.param(2, marks=[pytest.mark.eq(2), pytest.mark.sec3]),
    pytest.param(3, marks=[pytest.mark.eq(3), pytest.mark.sec3]),
    pytest.param(4, marks=[pytest.mark.eq(4), pytest.mark.sec3]),
    pytest.param(5, marks=[pytest.mark.eq(5), pytest.mark.sec3]),
    pytest.param(6, marks=[pytest.mark.eq(6), pytest.mark.sec3]),
    pytest.param(7, marks=[pytest.mark.eq(7), pytest.mark.sec3]),
    pytest.param(8, marks=[pytest.mark.eq(8), pytest.mark.sec3]),
    pytest.param(9, marks=[pytest.mark.eq(9), pytest.mark.sec3]),
    pytest.param(10, marks=[pytest.mark.eq(10), pytest.mark.sec3]),
    pytest.param(11, marks=[pytest.mark.eq(11), pytest.mark.sec4]),
    pytest.param(12, marks=[pytest.mark.eq(12), pytest.mark.sec4]),
    pytest.param(13, marks=[pytest.mark.eq(13), pytest.mark.sec4]),
    pytest.param(14, marks=[pytest.mark.eq(14), pytest.mark.sec4]),
    pytest.param(15, marks=[pytest.mark.eq(15), pytest.mark.sec4]),
    pytest.param(16, marks=[pytest.mark.eq(16), pytest.mark.sec4]),
    pytest.param(17, marks=[pytest.mark.eq(17), pytest.mark.sec4]),
    pytest.param(18, marks=[pytest.mark.eq(18), pytest.mark.sec4]),
    pytest.param(19, marks=[pytest.mark.eq(19), pytest.mark.sec4]),
    pytest.param(20, marks=[pytest.mark.eq(20), pytest.mark.sec4]),
    pytest.param(21, marks=[pytest.mark.eq(21), pytest.mark.sec4]),
    pytest.param(22, marks=[pytest.mark.eq(22), pytest.mark.sec4]),
    pytest.param(23, marks=[pytest.mark.eq(23), pytest.mark.sec4]),
    pytest.param(24, marks=[pytest.mark.eq(24), pytest.mark.sec4]),
    pytest.param(25, marks=[pytest.mark.eq(25), pytest.mark.sec4]),
    pytest.param(26, marks=[pytest.mark.eq(26), pytest.mark.sec4]),
    pytest.param(27, marks=[pytest.mark.eq(27), pytest.mark.sec4]),
    pytest.param(28, marks=[pytest.mark.eq(28), pytest.mark.sec4]),
    pytest.param(29, marks=[pytest.mark.eq(29), pytest.mark.sec4]),
    pytest.param(30, marks=[pytest.mark.eq(30), pytest.mark.sec5]),
    pytest.param(31, marks=[pytest.mark.eq(31), pytest.mark.sec5]),
    pytest.param(32, marks=[pytest.mark.eq(32), pytest.mark.sec5]),
    pytest.param(33, marks=[pytest.mark.eq(33), pytest.mark.sec5]),
    pytest.param(34, marks=[pytest.mark.eq(34), pytest.mark.sec5]),
    pytest.param(35, marks=[pytest.mark.eq(35), pytest.mark.sec6]),
    pytest.param(36, marks=[pytest.mark.eq(36), pytest.mark.sec6]),
    pytest.param(37, marks=[pytest.mark.eq(37), pytest.mark.sec6]),
    pytest.param(38, marks=[pytest.mark.eq(38), pytest.mark.sec6]),
    pytest.param(39, marks=[pytest.mark.eq(39), pytest.mark.sec6]),
    pytest.param(40, marks=[pytest.mark.eq(40), pytest.mark.sec6]),
    pytest.param(41, marks=[pytest.mark.eq(41), pytest.mark.sec6]),
    pytest.param(42, marks=[pytest.mark.eq(42), pytest.mark.sec6]),
    pytest.param(43, marks=[pytest.mark.eq(43), pytest.mark.sec6]),
    pytest.param(44, marks=[pytest.mark.eq(44), pytest.mark.sec6]),
    pytest.param(45, marks=[pytest.mark.eq(45), pytest.mark.sec6]),
    pytest.param(46, marks=[pytest.mark.eq(46), pytest.mark.sec6]),
    pytest.param(47, marks=[pytest.mark.eq(47), pytest.mark.sec6]),
    pytest.param(48, marks=[pytest.mark.eq(48), pytest.mark.sec6]),
    pytest.param(49, marks=[pytest.mark.eq(49), pytest.mark.sec6]),
    pytest.param(50, marks=[pytest.mark.eq(50), pytest.mark.sec6]),
    pytest.param(51, marks=[pytest.mark.eq(51), pytest.mark.sec6]),
    pytest.param(52, marks=[pytest.mark.eq(52), pytest.mark.sec6]),
    pytest.param(53, marks=[pytest.mark.eq(53), pytest.mark.sec6]),
    pytest.param(54, marks=[pytest.mark.eq(54), pytest.mark.sec6]),
    pytest.param(55, marks=[pytest.mark.eq(55), pytest.mark.sec6]),
    pytest.param(56, marks=[pytest.mark.eq(56), pytest.mark.sec6]),
    pytest.param(57, marks=[pytest.mark.eq(57), pytest.mark.sec6]),
    pytest.param(58, marks=[pytest.mark.eq(58), pytest.mark.sec6]),
    pytest.param(59, marks=[pytest.mark.eq(59), pytest.mark.sec6]),
    pytest.param(60, marks=[pytest.mark.eq(60), pytest.mark.sec6]),
    pytest.param(61, marks=[pytest.mark.eq(61), pytest.mark.sec6]),
    pytest.param(62, marks=[pytest.mark.eq(62), pytest.mark.sec7]),
    pytest.param(63, marks=[pytest.mark.eq(63), pytest.mark.sec7]),
    pytest.param(64, marks=[pytest.mark.eq(64), pytest.mark.sec7]),
    pytest.param(65, marks=[pytest.mark.eq(65), pytest.mark.sec7]),
    pytest.param(66, marks=[pytest.mark.eq(66), pytest.mark.sec7]),
    pytest.param(67, marks=[pytest.mark.eq(67), pytest.mark.sec7]),
    pytest.param(68, marks=[pytest.mark.eq(68), pytest.mark.sec7]),
    pytest.param(69, marks=[pytest.mark.eq(69), pytest.mark.sec7]),
    pytest.param(70, marks=[pytest.mark.eq(70), pytest.mark.sec7]),
    pytest.param(71, marks=[pytest.mark.eq(71), pytest.mark.sec7]),
    pytest.param(72, marks=[pytest.mark.eq(72), pytest.mark.sec7]),
    pytest.param(73, marks=[pytest.mark.eq(73), pytest.mark.sec7]),
    pytest.param(74, marks=[pytest.mark.eq(74), pytest.mark.sec7]),
    pytest.param(75, marks=[pytest.mark.eq(75), pytest.mark.sec7]),
    pytest.param(76, marks=[pytest.mark.eq(76), pytest.mark.sec7]),
    pytest.param(77, marks=[pytest.mark.eq(77), pytest.mark.sec7]),
    pytest.param(78, marks=[pytest.mark.eq(78), pytest.mark.sec7]),
    pytest.param(79, marks=[pytest.mark.eq(79), pytest.mark.sec7]),
    pytest.param(80, marks=[pytest.mark.eq(80), pytest.mark.sec7]),
    pytest.param(81, marks=[pytest.mark.eq(81), pytest.mark.sec7]),
    pytest.param(82, marks=[pytest.mark.eq(82), pytest.mark.sec7]),
    pytest.param(83, marks=[pytest.mark.eq(83), pytest.mark.sec7]),
    pytest.param(84, marks=[pytest.mark.eq(84), pytest.mark.sec7]),
    pytest.param(85, marks=[pytest.mark.eq(85), pytest.mark.sec8]),
    pytest.param(86, marks=[pytest.mark.eq(86), pytest.mark.sec8]),
    pytest.param(87, marks=[pytest.mark.eq(87), pytest.mark.sec8]),
    pytest.param(88, marks=[pytest.mark.eq(88), pytest.mark.sec8]),
    pytest.param(89, marks=[pytest.mark.eq(89), pytest.mark.sec8]),
    pytest.param(90, marks=[pytest.mark.eq(90), pytest.mark.sec8]),
    pytest.param(91, marks=[pytest.mark.eq(91), pytest.mark.sec8]),
    pytest.param(92, marks=[pytest.mark.eq(92), pytest.mark.sec9]),
    pytest.param(93, marks=[pytest.mark.eq(93), pytest.mark.sec9]),
    pytest.param(94, marks=[pytest.mark.eq(94), pytest.mark.sec9]),
    pytest.param(95, marks=[pytest.mark.eq(95), pytest.mark.sec9]),
    pytest.param(96, marks=[pytest.mark.eq(96), pytest.mark.sec9]),
    pytest.param(97, marks=[pytest.mark.eq(97), pytest.mark.sec9]),
    pytest.param(98, marks=[pytest.mark.eq(98), pytest.mark.sec9]),
    pytest.param(99, marks=[pytest.mark.eq(99), pytest.mark.sec9]),
    pytest.param(100, marks=[pytest.mark.eq(100), pytest.mark.sec9]),
    pytest.param(101, marks=[pytest.mark.eq(101), pytest.mark.sec9]),
    pytest.param(102, marks=[pytest.mark.eq(102), pytest.mark.sec9]),
    pytest.param(103, marks=[pytest.mark.eq(103), pytest.mark.sec9]),
    pytest.param(104, marks=[pytest.mark.eq(104), pytest.mark.sec9]),
    pytest.param(105, marks=[pytest.mark.eq(105), pytest.mark.sec9]),
    pytest.param(106, marks=[pytest.mark.eq(106), pytest.mark.sec9]),
    pytest.param(107, marks=[pytest.mark.eq(107), pytest.mark.sec9]),
    pytest.param(108, marks=[pytest.mark.eq(108), pytest.mark.sec9]),
    pytest.param(109, marks=[pytest.mark.eq(109), pytest.mark.sec9]),
    pytest.param(110, marks=[pytest.mark.eq(110), pytest.mark.sec9]),
    pytest.param(111, marks=[pytest.mark.eq(111), pytest.mark.sec9])])
def test_the_librarys_implementation_passes_its_check(number):
    """Equations are listed literally (not read from ``specs``) so that ``minitorch-nlp
    equations`` sees the marks; the next test keeps the list equal to ``specs``."""
    result = check_equation(number, specs[number].library_function())
    assert result.number == number and result.examples > 0


CHECKED = [param.values[0] for param in
           test_the_librarys_implementation_passes_its_check.pytestmark[0].args[1]]


def test_every_spec_is_checked_here_and_listed_in_the_registry():
    assert set(CHECKED) == set(specs), "add each new spec to the parametrization above"
    tests = cookbook.tests_by_equation()   # reads every test file once
    for number in specs:
        assert f"tests/test_check.py::test_the_librarys_implementation_passes_its_check[{number}]" \
            in tests[number]


def test_every_spec_names_a_registered_equation_and_its_library_function():
    cookbook.import_all()
    for number, spec in specs.items():
        library = spec.library_function()
        assert library.__name__ == spec.function
        assert cookbook.implementations(number), f"eq {number} has a spec but no registered code"
        assert set(spec.differentiable) <= {name for name, _ in spec.arguments}
        assert spec.signature.startswith(f"{spec.function}(")


def attention_without_scale(q, k, *, causal=False, key_mask=None):
    return nn.attention_weights(q, k, causal=causal, key_mask=key_mask, scale=1.0)


def test_attention_without_the_scale_fails_with_a_shrunk_example():
    with pytest.raises(EquationMismatch) as failure:
        check_equation(11, attention_without_scale)
    q, k = failure.value.inputs["q"], failure.value.inputs["k"]
    # the scale matters only with d_k >= 2 and at least two keys: the shrunk example has exactly
    # that, one query, and no mask
    assert q.shape == (1, 1, 1, 2) and k.shape == (1, 1, 2, 2)
    assert failure.value.inputs["key_mask"] is None and not failure.value.inputs["causal"]
    message = str(failure.value)
    assert "eq 11: tests.test_check:attention_without_scale differs from the reference" in message
    assert "inputs (shrunk by hypothesis)" in message and "q = float64 (1, 1, 1, 2)" in message
    # the values agree (q = 0 makes every score 0, scaled or not): the report says which input's
    # gradient differs, by how much, and that it is off by sqrt(d_k)
    assert "the values agree with the reference; the gradient" in message
    assert "with respect to q: 1 of 2 entries differ; max abs error" in message
    assert "max rel error 0.414 at [0, 0, 0, 1]" in message
    assert "with respect to k: agrees" in message
    assert "hint: the gradient with respect to q is 1.41421 (= sqrt(2)) times the reference's" \
        in message and "1/sqrt(d_k)" in message


def test_the_check_page_shows_this_report_as_check_prints_it():
    page = (ROOT / "docs" / "check.md").read_text()
    shown = page.split("**When it differs**", 1)[1].split("```text\n", 1)[1].split("\n```", 1)[0]
    with pytest.raises(EquationMismatch) as failure:
        check_equation(11, attention_without_scale,
                       name="mypackage.attention:attention_without_scale")
    assert shown == str(failure.value)


def softmax_over_queries(q, k, *, causal=False, key_mask=None):
    scores = (q @ k.swapaxes(-1, -2)) / math.sqrt(q.shape[-1])
    return scores.softmax(axis=-2)


def test_softmax_over_the_wrong_axis_fails_with_a_shrunk_example():
    with pytest.raises(EquationMismatch) as failure:
        check_equation(11, softmax_over_queries)
    q, k = failure.value.inputs["q"], failure.value.inputs["k"]
    assert q.shape[:2] == (1, 1) and k.shape[:2] == (1, 1)
    assert q.shape[2] + k.shape[2] <= 3        # one query and two keys, or two queries and one key
    assert "value: " in str(failure.value) and "entries differ; max abs error" in str(failure.value)


def test_a_wrong_gradient_is_reported_as_one():
    def context_with_a_detached_memory(weights, memory):
        return (weights.unsqueeze(1) @ memory.detach()).squeeze(1)

    with pytest.raises(EquationMismatch, match="gradient with respect to memory") as failure:
        check_equation(10, context_with_a_detached_memory)
    assert "with respect to weights: agrees" in str(failure.value)
    assert "hint: no gradient reaches memory: a detached path" in str(failure.value)


def kl_in_the_reversed_direction(teacher_attention, student_attention, *, mask=None):
    return attention_transfer_loss(student_attention, teacher_attention, mask=mask)


def test_a_reversed_kl_is_reported_as_a_gradient_of_the_opposite_sign():
    with pytest.raises(EquationMismatch) as failure:
        check_equation(47, kl_in_the_reversed_direction)
    message = str(failure.value)
    # shrunk to teacher = student, where both directions of the KL are 0
    assert "the values agree with the reference" in message
    assert "with respect to teacher_attention: " in message
    assert "with respect to student_attention: " in message
    assert "has the opposite sign" in message and "KL(q || p) for KL(p || q)" in message


def test_the_gradient_hint_reads_how_the_gradients_differ():
    got = np.array([[1.0, 2.0], [3.0, 4.0]])
    assert "transposed product" in _gradient_hint("W", got, got.T.copy(), {})
    assert "times the reference's" in _gradient_hint("W", 3 * got, got, {})
    assert "(= 1/sqrt(4))" in _gradient_hint("q", got / 2, got, {"q": np.zeros((1, 4))})
    assert "part of the computation is hidden" in _gradient_hint("W", got + [[0, 1], [0, 0]],
                                                                 got, {})


def test_an_autograd_numpy_candidate_is_checked_with_autograd():
    def context(weights, memory):
        return anp.einsum("bs,bsd->bd", weights, memory)

    def summed_over_the_wrong_axis(weights, memory):
        return anp.sum(memory, axis=2) * weights

    assert check_equation(10, context, inputs="numpy", max_examples=10).examples == 10
    with pytest.raises(EquationMismatch, match="value: shape"):
        check_equation(10, summed_over_the_wrong_axis, inputs="numpy", max_examples=10)


@pytest.mark.eq(1)
@pytest.mark.sec3
def test_a_beam_of_one_is_not_the_argmax_and_fails():
    def greedy(*, tables, length_penalty):
        step_fn, state = markov_step(tables)
        ids, scores = decoding.beam_search(step_fn, state, len(tables), 1, 2, tables.shape[1],
                                           beam_size=1, length_penalty=length_penalty)
        return np.pad(ids, ((0, 0), (0, tables.shape[1] - ids.shape[1]))), scores

    with pytest.raises(EquationMismatch, match=r"value\[0\]: "):
        check_equation(1, greedy)


@pytest.mark.eq(87)
@pytest.mark.sec8
def test_a_memory_without_the_stop_gradient_fails_on_its_gradient():
    def concatenated_without_detach(memory, h):
        return mt.concatenate([memory, h], axis=1)

    with pytest.raises(EquationMismatch, match="gradient with respect to memory"):
        check_equation(87, concatenated_without_detach)


@pytest.mark.eq(16)
@pytest.mark.sec4
def test_states_concatenated_backward_first_fail_on_the_values():
    def backward_first(forward_weight_ih, backward_weight_ih, *, char_ids, lengths, params,
                       residual):
        states = bilstm_states(forward_weight_ih, backward_weight_ih, char_ids=char_ids,
                               lengths=lengths, params=params, residual=residual)
        dim = states.shape[-1] // 2
        return mt.concatenate([states[..., dim:], states[..., :dim]], axis=-1)

    with pytest.raises(EquationMismatch, match="value: "):
        check_equation(16, backward_first, max_examples=20)


@pytest.mark.eq(68)
@pytest.mark.sec7
def test_an_end_vector_taken_at_the_start_fails():
    def at_the_start(hidden, *, starts, ends):
        return span_start_vectors(hidden, starts=starts, ends=ends)

    with pytest.raises(EquationMismatch, match="differs from the reference span_end_vectors"):
        check_equation(68, at_the_start)


@pytest.mark.eq(75)
@pytest.mark.sec7
def test_a_pair_joined_without_the_middle_separator_fails():
    def one_separator(*, first_ids, second_ids, cls_id, sep_id):
        return join_bert([*first_ids, *second_ids], cls_id=cls_id, sep_id=sep_id)

    with pytest.raises(EquationMismatch, match=r"value\[0\]: "):
        check_equation(75, one_separator)


@pytest.mark.eq(64)
@pytest.mark.sec7
def test_a_question_vector_from_the_mean_token_instead_of_cls_fails():
    def mean_pooled(hidden, W, b):
        return mt.functional.linear(hidden.mean(axis=1), W, b)

    with pytest.raises(EquationMismatch, match="differs from the reference cls_projection"):
        check_equation(64, mean_pooled)


@pytest.mark.eq(27)
@pytest.mark.sec4
def test_a_query_stream_that_sees_its_own_target_fails_on_the_values():
    def query_sees_itself(*, orders, num_predict):
        perm_mask, target_mapping, targets = permutation_inputs(orders, num_predict)
        return perm_mask * (1.0 - np.eye(orders.shape[1])), target_mapping, targets

    with pytest.raises(EquationMismatch) as failure:
        check_equation(27, query_sees_itself)
    assert "value[0]: " in str(failure.value)
    assert failure.value.inputs["orders"].shape == (1, 1)     # one position, predicted


@pytest.mark.eq(56)
@pytest.mark.sec6
def test_a_quantiser_that_sends_ties_to_the_upper_level_fails():
    def ties_up(*, x, levels):
        index = np.searchsorted((levels[:-1] + levels[1:]) / 2, x, side="right")
        return levels[index], index

    with pytest.raises(EquationMismatch) as failure:
        check_equation(56, ties_up)
    levels, x = failure.value.inputs["levels"], failure.value.inputs["x"]
    assert np.isin(x, (levels[:-1] + levels[1:]) / 2).any()   # the shrunk x sits on a threshold


@pytest.mark.eq(57)
@pytest.mark.sec6
def test_an_lq_quantiser_without_the_straight_through_gradient_fails():
    def detached(x, *, basis):
        return lq_quantize(x, basis).detach()

    with pytest.raises(EquationMismatch, match="gradient with respect to x"):
        check_equation(57, detached)


def test_a_values_only_candidate_must_return_as_many_parts_as_the_reference():
    assert specs[27].signature == "permutation_inputs(*, orders, num_predict)"
    assert "Checked on values only" in specs[27].describe()
    with pytest.raises(EquationMismatch, match="a tuple of 3 arrays expected, got 2"):
        check_equation(27, lambda *, orders, num_predict:
                       permutation_inputs(orders, num_predict)[:2], max_examples=5)


def test_a_candidate_that_raises_or_returns_no_tensor_is_reported():
    def crashes(weights, memory):
        raise ValueError("boom")

    with pytest.raises(EquationMismatch, match="crashes raised ValueError: boom"):
        check_equation(10, crashes, max_examples=5)
    with pytest.raises(EquationMismatch, match="not a minitorch_nlp Tensor"):
        check_equation(10, lambda weights, memory: np.zeros(1), max_examples=5)


def test_task_not_done_passes_through_after_one_example():
    calls = []

    def stub(weights, memory):
        calls.append(1)
        raise TaskNotDone("implement eq 10")

    with pytest.raises(TaskNotDone, match="implement eq 10"):
        check_equation(10, stub, max_examples=50)
    assert len(calls) == 1


def test_bad_arguments_are_refused_with_a_clear_error(monkeypatch):
    with pytest.raises(ValueError, match="there is no equation 0"):
        check_equation(0, len)
    monkeypatch.delitem(specs, 12)
    with pytest.raises(ValueError, match=r"equation 12 \(scaled dot-product attention .*\) has "
                                         "no spec yet"):
        check_equation(12, len)
    with pytest.raises(ValueError, match="inputs must be one of"):
        check_equation(10, len, inputs="torch")
    with pytest.raises(TypeError, match="must be callable"):
        check_equation(10, 3)
    with pytest.raises(ValueError, match="'package.module:function'"):
        load_candidate("minitorch_nlp.functional.softmax")
    with pytest.raises(ValueError, match="has no attribute 'nope'"):
        load_candidate("minitorch_nlp.functional:nope")
    with pytest.raises(TypeError, match="not a function"):
        load_candidate("minitorch_nlp.cookbook:EQUATIONS")
    assert load_candidate("minitorch_nlp.functional:softmax") is mt.functional.softmax


def test_each_spec_describes_the_signature_a_candidate_must_have():
    text = specs[12].describe()
    assert text.startswith("eq 12: scaled_dot_product_attention(q, k, v, *, causal, key_mask)")
    assert "k: keys, float64 (batch, heads, n_k, d_k)" in text and "Returns: float64" in text


# ---- the command line ----------------------------------------------------------------------------
def test_check_command_passes_the_library_and_fails_a_wrong_candidate(capsys):
    assert cli.main(["check", "10", "minitorch_nlp.models.seq2seq:context_vector",
                     "--max-examples", "5"]) == 0
    assert "eq 10: minitorch_nlp.models.seq2seq:context_vector agrees with the reference on 5 " \
           "examples" in capsys.readouterr().out
    assert cli.main(["check", "11", "tests.test_check:attention_without_scale",
                     "--max-examples", "20"]) == 1
    assert "inputs (shrunk by hypothesis)" in capsys.readouterr().out
    assert cli.main(["check", "27", "minitorch_nlp.models.xlnet:permutation_inputs",
                     "--max-examples", "5"]) == 0
    assert "on 5 examples (values, float64)" in capsys.readouterr().out
    assert cli.main(["check", "12"]) == 0
    assert "scaled_dot_product_attention(q, k, v" in capsys.readouterr().out


MYPACKAGE = """\
import minitorch_nlp as mt


def my_context(weights, memory):
    return (weights.unsqueeze(-1) * memory).sum(axis=1)


def summed_over_the_wrong_axis(weights, memory):
    return (weights.unsqueeze(-1) * memory).sum(axis=2)
"""


@pytest.mark.slow
def test_check_finds_modules_from_the_working_directory_and_takes_a_file(tmp_path):
    (tmp_path / "mypackage").mkdir()
    (tmp_path / "mypackage" / "__init__.py").write_text("")
    (tmp_path / "mypackage" / "ctx.py").write_text(MYPACKAGE)
    launcher = console_script(tmp_path / "elsewhere")
    passed = run_printed("minitorch-nlp check 10 mypackage.ctx:my_context --max-examples 5",
                         tmp_path, launcher)
    assert passed.returncode == 0, passed.stderr
    assert passed.stdout.startswith("eq 10: mypackage.ctx:my_context agrees with the reference")
    # the failure names the candidate as the pass line does, module:fn
    failed = run_printed("minitorch-nlp check 10 mypackage.ctx:summed_over_the_wrong_axis "
                         "--max-examples 5", tmp_path, launcher)
    assert failed.returncode == 1
    assert failed.stdout.startswith("eq 10: mypackage.ctx:summed_over_the_wrong_axis differs")
    by_file = run_printed("minitorch-nlp check 10 mypackage/ctx.py:my_context --max-examples 5",
                          tmp_path, launcher)
    assert by_file.returncode == 0, by_file.stderr
    assert by_file.stdout.startswith("eq 10: mypackage/ctx.py:my_context agrees")
    missing = run_printed("minitorch-nlp check 10 nopackage.ctx:my_context", tmp_path, launcher)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "minitorch-nlp: error: cannot import nopackage.ctx:my_context: No module named " \
        "'nopackage' (modules are looked up from the working directory" in missing.stderr


def test_a_candidate_file_that_fails_to_import_is_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "broken.py").write_text("import minitorch_nlp\nundefined_name\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit:
        cli.main(["check", "10", "broken.py:context"])
    assert exit.value.code == 2
    assert capsys.readouterr().err == ("minitorch-nlp: error: importing broken.py:context raised "
                                       "NameError: name 'undefined_name' is not defined\n")
    with pytest.raises(SystemExit):
        cli.main(["check", "10", "nothere.py:context"])
    assert "'nothere.py' is not a Python file" in capsys.readouterr().err
    assert cli.main(["check", "10", "broken.py:context", "--max-examples", "0"]) == 2
    assert "argument --max-examples: must be a whole number >= 1, got '0'" in \
        capsys.readouterr().err


def test_check_command_refuses_bad_input(capsys, monkeypatch):
    monkeypatch.delitem(specs, 12)
    with pytest.raises(SystemExit):
        cli.main(["check", "12", "minitorch_nlp.functional:softmax"])
    assert "equation 12 has no check" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["check", "10", "no_such_module_here:f"])
    assert "no_such_module_here" in capsys.readouterr().err


def test_the_package_imports_without_the_test_extra_and_says_what_to_install():
    blocked = ("import sys\nsys.modules['hypothesis'] = None\nsys.modules['autograd'] = None\n")
    script = blocked + (
        "from minitorch_nlp.testing import gradcheck\n"
        "from minitorch_nlp import cli\n"
        "try:\n"
        "    from minitorch_nlp.testing import check_equation\n"
        "except ImportError as error:\n"
        "    print(error)\n"
        "cli.main(['check', '12', 'minitorch_nlp.functional:softmax'])\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert result.returncode == 2
    assert "needs HIPS autograd and hypothesis: pip install 'minitorch-nlp[test]'" in result.stdout
    assert "pip install 'minitorch-nlp[test]'" in result.stderr
