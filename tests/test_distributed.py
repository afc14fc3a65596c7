"""``minitorch_nlp.distributed``: the communicators, the differentiable collectives and data
parallelism.

In one process: ``SingleProcess`` (the communicator the same model code runs on without MPI),
its errors and counters, and the collectives' gradients. With real ranks: the checks of
``tests/distributed_checks.py`` under ``mpirun -n 2`` and ``mpirun -n 4 --oversubscribe``
(marked ``mpi``; skipped, with the reason, where mpirun or mpi4py is missing): every collective
against NumPy, every collective's gradient, sub-communicators, data parallelism equal to one
process on the global batch after three AdamW steps, Megatron's tensor-parallel GPT-2 and BERT,
GPipe's pipeline of GPT-2 stages and ZeRO stages 1-3 equal to the one-process model, GShard's
expert parallelism equal to the dense layer, a failing rank that stops every rank with its
message instead of a hang, and a hanging rank whose collective times out on the others, which
then stop every rank the same way.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp import distributed as D
from minitorch_nlp import functional as F
from minitorch_nlp import nn
from minitorch_nlp.models.gpt import GPT2LMHeadModel, GPTConfig
from minitorch_nlp.optim import AdamW
from tests.distributed_checks import mpirun



# ---- one process ---------------------------------------------------------------------------------
def test_world_without_mpirun_is_a_single_process(monkeypatch):
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        monkeypatch.delenv(name, raising=False)
    comm = D.world()
    assert isinstance(comm, D.SingleProcess) and (comm.rank, comm.size) == (0, 1)


def test_single_process_collectives_return_their_input_and_are_counted():
    comm = D.SingleProcess()
    x = np.arange(12.0).reshape(4, 3)
    for result in (comm.all_reduce(x), comm.all_reduce(x, op="max"), comm.all_gather(x, axis=1),
                   comm.reduce_scatter(x, axis=0), comm.all_to_all(x, axis=1),
                   comm.broadcast(x)):
        np.testing.assert_array_equal(result, x)
        assert result is not x
    assert comm.calls == {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1, "all_to_all": 1,
                          "broadcast": 1}
    assert comm.bytes["all_reduce"] == 2 * x.nbytes
    assert isinstance(comm.split(0), D.SingleProcess)


def test_single_process_collectives_are_differentiable():
    comm = D.SingleProcess()
    x = mt.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    y = D.reduce_from_parallel(D.copy_to_parallel(x, comm), comm)
    y = D.all_to_all(D.reduce_scatter(D.all_gather(y, comm, axis=1), comm, axis=1), comm)
    (y * y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy())


def test_data_parallel_on_one_process_is_plain_training():
    def trained(wrap):
        mt.manual_seed(0)
        model = GPT2LMHeadModel(GPTConfig.tiny())
        parallel = D.DataParallel(model, D.SingleProcess(), bucket_bytes=4096) if wrap else model
        optimizer = AdamW(model.parameters(), lr=1e-2)
        ids = np.random.default_rng(0).integers(0, 100, (2, 8))
        for _ in range(2):
            optimizer.zero_grad()
            parallel(ids, labels=ids).loss.backward()
            if wrap:
                parallel.sync_gradients()
            optimizer.step()
        return [p.numpy() for p in model.parameters()]
    for got, want in zip(trained(True), trained(False)):
        np.testing.assert_array_equal(got, want)


def test_buckets_hold_at_most_bucket_bytes_unless_one_tensor_is_larger():
    model = GPT2LMHeadModel(GPTConfig.tiny())
    parallel = D.DataParallel(model, D.SingleProcess(), bucket_bytes=8192)
    for bucket in parallel.buckets:
        size = sum(p.size * 4 for p in bucket)
        assert size <= 8192 or len(bucket) == 1
    assert sum(len(b) for b in parallel.buckets) == len(list(model.parameters()))
    assert parallel.buckets[0][0] is list(model.parameters())[-1]        # last layers first


def test_a_tensor_parallel_layer_all_reduces_once_per_sub_block_each_way():
    comm = D.SingleProcess()
    d = 16
    layer = nn.TransformerLayer(D.TensorParallelAttention(d, 4, comm),
                                D.TensorParallelMLP(d, 4 * d, comm),
                                functools.partial(nn.LayerNorm, d), norm_first=True, causal=True)
    x = mt.randn(2, 5, d, requires_grad=True)
    y = layer(x)
    assert comm.calls["all_reduce"] == 2                   # g after attention, g after the MLP
    y.sum().backward()
    assert comm.calls["all_reduce"] == 4                   # f before each, backward


def test_tensor_parallel_gpt2_on_one_rank_is_the_dense_model():
    mt.manual_seed(0)
    dense = GPT2LMHeadModel(GPTConfig.tiny())
    mt.manual_seed(0)
    parallel = D.TensorParallelGPT2(GPTConfig.tiny(), D.SingleProcess())
    ids = np.random.default_rng(0).integers(0, 100, (2, 9))
    np.testing.assert_allclose(parallel(ids, labels=ids).loss.numpy(),
                               dense(ids, labels=ids).loss.numpy(), rtol=1e-5)
    np.testing.assert_allclose(parallel(ids).logits.numpy(), dense(ids).logits.numpy(),
                               rtol=1e-4, atol=1e-5)


def test_tensor_parallel_bert_on_one_rank_is_the_dense_model_and_refuses_head_masks():
    from tests.distributed_checks import bert_batch, check_tensor_parallel_bert, tiny_bert_config
    check_tensor_parallel_bert(D.SingleProcess())
    with pytest.raises(ValueError, match="TensorParallelBert: head_mask is not supported"):
        D.TensorParallelBert(tiny_bert_config(), D.SingleProcess())(
            bert_batch(0)["input_ids"], head_mask=np.ones((2, 4)))


def test_a_pipeline_of_one_stage_is_the_dense_model():
    from tests.distributed_checks import check_pipeline_parallel
    check_pipeline_parallel(D.SingleProcess())


def test_vocab_parallel_cross_entropy_on_one_rank_is_cross_entropy():
    logits = mt.tensor(np.random.default_rng(0).standard_normal((3, 4, 7)), requires_grad=True)
    target = np.array([[1, 2, -100, 6], [0, 0, 3, 5], [6, -100, 2, 1]])
    loss = D.vocab_parallel_cross_entropy(logits, target, D.SingleProcess(), 0)
    loss.backward()
    expected = mt.tensor(logits.numpy(), requires_grad=True)
    reference = F.cross_entropy(expected.reshape(-1, 7), target.ravel())
    reference.backward()
    np.testing.assert_allclose(loss.numpy(), reference.numpy(), rtol=1e-12)
    np.testing.assert_allclose(logits.grad.numpy(), expected.grad.numpy(), rtol=1e-10,
                               atol=1e-14)


def test_expert_parallel_moe_on_one_rank_is_the_dense_layer():
    mt.manual_seed(0)
    dense = nn.MixtureOfExperts(8, 16, 4).eval()
    parallel = D.ExpertParallelMoE.from_dense(dense, D.SingleProcess()).eval()
    x = mt.randn(2, 6, 8)
    np.testing.assert_allclose(parallel(x).numpy(), dense(x).numpy(), rtol=1e-6, atol=1e-7)
    assert parallel.routing.tokens_per_expert.tolist() == dense.routing.tokens_per_expert.tolist()


def test_zero_memory_formula_gives_the_papers_figure_1():
    # Rajbhandari et al. (2020), figure 1: Psi = 7.5B, N = 64, mixed-precision Adam (K = 12)
    gigabytes = [sum(D.zero_state_bytes(7_500_000_000, 64, stage, parameter_bytes=2,
                                        gradient_bytes=2, optimizer_bytes=12).values()) / 1e9
                 for stage in (0, 1, 2, 3)]
    assert gigabytes == pytest.approx([120, 31.4, 16.6, 1.9], abs=0.05)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_on_one_process_is_adamw(stage):
    def model():
        mt.manual_seed(0)
        return GPT2LMHeadModel(GPTConfig.tiny())
    ids = np.random.default_rng(0).integers(0, 100, (2, 8))
    plain, sharded = model(), model()
    adamw, zero = AdamW(plain.parameters(), lr=1e-2), D.ZeroAdamW(sharded, D.SingleProcess(),
                                                                  stage, lr=1e-2)
    for _ in range(2):
        adamw.zero_grad()
        plain(ids, labels=ids).loss.backward()
        adamw.step()
        zero.zero_grad()
        with zero.gathered():
            sharded(ids, labels=ids).loss.backward()
        zero.step()
    psi = sharded.num_parameters()
    assert zero.state_bytes() == D.zero_state_bytes(psi, 1, stage)       # float32: 4 + 4 + 8
    with zero.gathered():
        for got, want in zip(sharded.parameters(), plain.parameters()):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)
    if stage == 3:
        assert all(not p.numpy().any() for p in sharded.parameters())   # released placeholders
        assert zero.state_bytes()["parameters"] == 4 * psi                # the partition only


def test_zero_keeps_adamws_parameter_groups_and_its_state_dict_is_adamws():
    def model_and_groups():
        mt.manual_seed(0)
        model = GPT2LMHeadModel(GPTConfig.tiny())
        params = list(model.parameters())
        return model, [{"params": [p for p in params if p.ndim >= 2], "weight_decay": 0.1},
                       {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    ids = np.random.default_rng(0).integers(0, 100, (2, 8))
    (plain, plain_groups), (sharded, sharded_groups) = model_and_groups(), model_and_groups()
    adamw = AdamW(plain_groups, lr=1e-2)
    zero = D.ZeroAdamW(sharded_groups, D.SingleProcess(), 2, lr=1e-2)
    assert [g["weight_decay"] for g in zero.inner.param_groups] == [0.1, 0.0]
    for optimizer, model in ((adamw, plain), (zero, sharded)):
        for _ in range(2):
            optimizer.zero_grad()
            model(ids, labels=ids).loss.backward()
            optimizer.step()
    for got, want in zip(sharded.parameters(), plain.parameters()):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)
    saved, expected = zero.state_dict(), adamw.state_dict()
    assert [g["params"] for g in saved["param_groups"]] == \
        [g["params"] for g in expected["param_groups"]]
    assert set(saved["state"]) == set(expected["state"])
    for index, values in expected["state"].items():
        assert saved["state"][index]["step"] == values["step"] == 2
        for key in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_allclose(saved["state"][index][key], values[key], rtol=1e-5,
                                       atol=1e-12)
    restored_model, restored_groups = model_and_groups()
    restored_model.load_state_dict(sharded.state_dict())
    restored = D.ZeroAdamW(restored_groups, D.SingleProcess(), 1, lr=1e-2)
    restored.load_state_dict(expected)                  # a plain AdamW's state loads too
    for optimizer, model in ((adamw, plain), (restored, restored_model)):
        optimizer.zero_grad()
        model(ids, labels=ids).loss.backward()
        optimizer.step()
    for got, want in zip(restored_model.parameters(), plain.parameters()):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"groups hold \[.*\] parameters, this optimizer's"):
        restored.load_state_dict({"state": {}, "param_groups": expected["param_groups"][:1]})


@pytest.mark.parametrize("call, error, message", [
    (lambda c: c.all_reduce([1.0, 2.0]), TypeError, "collectives take NumPy arrays, got list"),
    (lambda c: c.all_reduce(np.ones(2), op="mean"), ValueError, "op must be one of"),
    (lambda c: c.all_gather(np.array(1.0)), ValueError, "needs an array with an axis"),
    (lambda c: c.broadcast(np.ones(2), root=1), ValueError, "root 1 is not a rank of 1"),
    (lambda c: c.reduce_scatter(np.array(1.0)), ValueError, "must split into 1 equal parts"),
    (lambda c: D.copy_to_parallel(np.ones(2), c), TypeError, "copy_to_parallel: x must be a "
                                                              "Tensor"),
    (lambda c: D.DataParallel(GPT2LMHeadModel(GPTConfig.tiny()), c, bucket_bytes=0), ValueError,
     "bucket_bytes must be a positive int"),
    (lambda c: D.TensorParallelAttention(16, 4, c)(mt.zeros(1, 2, 16), mt.zeros(1, 2, 16)),
     ValueError, "self-attention only"),
    (lambda c: D.TensorParallelAttention(16, 5, c), ValueError, "num_heads=5 does not divide"),
    (lambda c: D.TensorParallelMLP(16, 32, c, activation="tanh"), ValueError,
     "TensorParallelMLP: activation must be one of"),
    (lambda c: D.ZeroAdamW(GPT2LMHeadModel(GPTConfig.tiny()), c, 4), ValueError,
     "stage must be 1, 2 or 3, got 4"),
    (lambda c: D.ZeroAdamW(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2, dtype=mt.float64)), c,
                           1), ValueError, "all of one dtype"),
    (lambda c: D.zero_state_bytes(10, 2, 5), ValueError, "stage must be 0"),
    (lambda c: D.PipelineParallelGPT2(GPTConfig.tiny(), c).forward_backward(
        np.zeros((3, 4), int), 2), ValueError,
     "a batch of 3 sequences does not split into micro_batches=2 equal parts"),
    (lambda c: D.vocab_parallel_cross_entropy(mt.zeros(2, 3, 5), np.zeros((2, 2), int), c, 0),
     ValueError, r"target \(2, 2\) must match the logits' leading axes \(2, 3\)"),
])
def test_bad_input_is_refused_with_a_clear_message(call, error, message):
    with pytest.raises(error, match=message):
        call(D.SingleProcess())


def test_the_collective_timeout_comes_from_the_argument_then_the_environment(monkeypatch):
    monkeypatch.delenv("MINITORCH_NLP_COLLECTIVE_TIMEOUT", raising=False)
    assert D.collective_timeout() == 300.0
    assert D.collective_timeout(2.5) == 2.5 and D.collective_timeout(0) is None
    monkeypatch.setenv("MINITORCH_NLP_COLLECTIVE_TIMEOUT", "7")
    assert D.collective_timeout() == 7.0 and D.collective_timeout(1) == 1.0
    monkeypatch.setenv("MINITORCH_NLP_COLLECTIVE_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="MINITORCH_NLP_COLLECTIVE_TIMEOUT='soon' must be a "
                                         "number of seconds >= 0"):
        D.collective_timeout()
    with pytest.raises(ValueError, match="timeout=-1 must be a number of seconds >= 0"):
        D.collective_timeout(-1)


def test_fail_together_lets_the_error_through_on_one_process():
    with pytest.raises(RuntimeError, match="boom"):
        with D.fail_together(D.SingleProcess()):
            raise RuntimeError("boom")


# ---- real ranks under mpirun ---------------------------------------------------------------------
def _mpirun(ranks, *checks):
    return mpirun(ranks, "-m", "tests.distributed_checks", *checks)


CHECKS = ("collectives", "differentiable_collectives", "data_parallel", "parallel_linears",
          "tensor_parallel", "tensor_parallel_bert", "pipeline_parallel", "zero",
          "expert_parallel")


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_collectives_data_tensor_parallelism_and_zero_under_mpirun(ranks):
    result = _mpirun(ranks, *CHECKS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split("\n")[:len(CHECKS)] == [f"ok {c} on {ranks} ranks" for c in CHECKS]


@pytest.mark.mpi
def test_a_rank_that_hangs_stops_every_rank_when_a_collective_times_out():
    result = _mpirun(2, "a_hanging_rank_times_out")          # the subprocess timeout: 240 s
    assert result.returncode != 0
    assert ("minitorch-nlp: rank 0 of 2: CollectiveTimeout: MPICommunicator.all_reduce: rank 0 "
            "of 2 waited 3 s for the other ranks") in result.stderr


@pytest.mark.mpi
def test_a_rank_that_raises_stops_every_rank_with_its_message():
    result = _mpirun(4, "a_failing_rank_stops_everyone")
    assert result.returncode != 0
    assert "minitorch-nlp: rank 3 of 4: RuntimeError: boom on purpose" in result.stderr
