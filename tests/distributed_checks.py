"""The checks that need real ranks, run by ``tests/test_distributed.py`` as
``mpirun -n N python -m tests.distributed_checks CHECK ...``: each rank runs the named checks in
order (inside ``fail_together``, so that a failing assertion on one rank ends them all with its
message), and rank 0 prints ``ok CHECK`` after each.

Every expected value is computed on each rank without communication, from arrays every rank can
draw (seeded by rank), so that a check compares MPI's answer with plain NumPy.

``mpirun(ranks, *arguments)`` is how the tests start ranks: ``python ARGUMENTS`` under real
``mpirun``, skipping the test where mpirun or mpi4py is missing.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import minitorch_nlp as mt
from minitorch_nlp import distributed as D
from minitorch_nlp import nn
from minitorch_nlp.nn import moe
from minitorch_nlp.distributed.tensor_parallel import (ColumnParallelLinear, RowParallelLinear,
                                                       TensorParallelGPT2)
from minitorch_nlp.models.bert import BertConfig, BertForMaskedLM
from minitorch_nlp.models.gpt import GPT2LMHeadModel, GPTConfig
from minitorch_nlp.optim import AdamW


ROOT = Path(__file__).resolve().parent.parent
MPI_TIMEOUT = 240          # seconds for one mpirun; a hang fails the test instead of CI


def mpirun(ranks, *arguments):
    """``mpirun -n RANKS --oversubscribe python ARGUMENTS`` from the repository root, as root
    too (CI's containers), its output captured; the test is skipped without mpirun or mpi4py."""
    import pytest
    if shutil.which("mpirun") is None or importlib.util.find_spec("mpi4py") is None:
        pytest.skip("needs mpirun and mpi4py: pip install 'minitorch_nlp[distributed]'")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    command = ["mpirun", "-n", str(ranks), "--oversubscribe", sys.executable,
               *map(str, arguments)]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=MPI_TIMEOUT)


def rank_array(rank, shape, salt=0):
    return np.random.default_rng(1000 * salt + rank).standard_normal(shape)


def check_collectives(comm):
    n, r = comm.size, comm.rank
    everyone = [rank_array(q, (2 * n, 3)) for q in range(n)]
    mine = everyone[r]
    np.testing.assert_allclose(comm.all_reduce(mine), sum(everyone), rtol=1e-12)
    np.testing.assert_array_equal(comm.all_reduce(mine, op="max"), np.max(everyone, axis=0))
    np.testing.assert_array_equal(comm.all_gather(mine, axis=1), np.concatenate(everyone, 1))
    np.testing.assert_allclose(comm.reduce_scatter(mine, axis=0),
                               np.split(sum(everyone), n, axis=0)[r], rtol=1e-12)
    exchanged = comm.all_to_all(mine, axis=0)
    np.testing.assert_array_equal(exchanged, np.concatenate(
        [np.split(everyone[q], n, axis=0)[r] for q in range(n)], axis=0))
    np.testing.assert_array_equal(comm.all_to_all(exchanged, axis=0), mine)
    np.testing.assert_array_equal(comm.broadcast(mine, root=n - 1), everyone[n - 1])
    assert comm.calls["all_reduce"] == 2 and comm.bytes["all_gather"] == mine.nbytes
    parity = comm.split(r % 2)                                    # even ranks, odd ranks
    group = [q for q in range(n) if q % 2 == r % 2]
    assert parity.size == len(group) and parity.rank == group.index(r)
    np.testing.assert_allclose(parity.all_reduce(mine), sum(everyone[q] for q in group))
    comm.barrier()


def check_differentiable_collectives(comm):
    n, r = comm.size, comm.rank
    x = rank_array(0, (2 * n, 2))                                # the same on every rank
    a = [rank_array(q, x.shape, salt=1) for q in range(n)]
    tx = mt.tensor(x, dtype=mt.float64, requires_grad=True)
    (D.copy_to_parallel(tx, comm) * mt.tensor(a[r])).sum().backward()     # f
    np.testing.assert_allclose(tx.grad.numpy(), sum(a), rtol=1e-12)
    xs = [rank_array(q, x.shape, salt=2) for q in range(n)]
    tx = mt.tensor(xs[r], dtype=mt.float64, requires_grad=True)
    z = D.reduce_from_parallel(tx, comm)                                   # g
    np.testing.assert_allclose(z.numpy(), sum(xs), rtol=1e-12)
    (z * mt.tensor(a[0])).sum().backward()
    np.testing.assert_allclose(tx.grad.numpy(), a[0], rtol=1e-12)
    # the gradient of the sum of every rank's <output, cotangent>, rank r's share of x
    small = [rank_array(q, (2, 2), salt=3) for q in range(n)]
    part = lambda array, q: np.split(array, n, axis=0)[q]                  # noqa: E731
    cases = (
        (D.all_gather, small, a, sum(part(a[q], r) for q in range(n))),
        (D.reduce_scatter, xs, small, np.concatenate(small)),
        (D.all_to_all, xs, a, np.concatenate([part(a[q], r) for q in range(n)])))
    for op, inputs, cotangents, expected in cases:
        tx = mt.tensor(inputs[r], dtype=mt.float64, requires_grad=True)
        (op(tx, comm, axis=0) * mt.tensor(cotangents[r])).sum().backward()
        np.testing.assert_allclose(tx.grad.numpy(), expected, rtol=1e-12, err_msg=op.__name__)


def _float64(model):
    for parameter in model.parameters():
        parameter.data = parameter.data.astype(np.float64)
    return model


def _tiny_gpt(config=None):
    mt.manual_seed(0)
    return _float64(GPT2LMHeadModel(GPTConfig.tiny() if config is None else config))


def check_data_parallel(comm):
    n, r, steps = comm.size, comm.rank, 3
    batches = [np.random.default_rng(s).integers(0, 100, (2 * n, 8)) for s in range(steps)]
    single = _tiny_gpt()
    optimizer = AdamW(single.parameters(), lr=1e-2)
    for ids in batches:                                  # one process, the global batch
        optimizer.zero_grad()
        single(ids, labels=ids).loss.backward()
        optimizer.step()
    replica = _tiny_gpt()
    if r:                                                # other ranks start elsewhere:
        for parameter in replica.parameters():           # the broadcast must fix it
            parameter.data = parameter.data + 1.0
    parallel = D.DataParallel(replica, comm, bucket_bytes=16_000)
    optimizer = AdamW(replica.parameters(), lr=1e-2)
    before = comm.calls["all_reduce"]
    for ids in batches:
        local = ids[2 * r:2 * r + 2]                     # this rank's share
        optimizer.zero_grad()
        parallel(local, labels=local).loss.backward()
        parallel.sync_gradients()
        optimizer.step()
    assert len(parallel.buckets) > 1
    assert comm.calls["all_reduce"] - before == steps * len(parallel.buckets)
    for (name, got), want in zip(replica.named_parameters(), single.parameters()):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-9, atol=1e-12,
                                   err_msg=name)


def check_a_failing_rank_stops_everyone(comm):
    if comm.rank == comm.size - 1:
        raise RuntimeError("boom on purpose")
    comm.all_reduce(np.zeros(1))                         # the others would wait here forever


def check_a_hanging_rank_times_out(comm):
    comm.barrier()                                       # every rank has started
    timed = D.MPICommunicator(comm.comm, timeout=3)
    assert timed.split(0).timeout == 3                   # sub-communicators keep the timeout
    if comm.rank == comm.size - 1:
        time.sleep(3600)                                 # hangs, never joining the all-reduce
    timed.all_reduce(np.zeros(1))                        # the others give up after 3 s




def _shard_of(dense, shard, comm):
    """This rank's part of a dense parameter: split along the one axis where the shapes differ
    (replicated when they agree)."""
    axes = [a for a, (d, s) in enumerate(zip(dense.shape, shard.shape)) if d != s]
    return dense if not axes else np.split(dense, comm.size, axis=axes[0])[comm.rank]


def check_parallel_linears(comm):
    x = mt.tensor(rank_array(0, (3, 4, 6)), requires_grad=True)        # the same on every rank
    mt.manual_seed(1)
    first, second = _float64(nn.Linear(6, 4 * comm.size)), _float64(nn.Linear(4 * comm.size, 5))
    column = ColumnParallelLinear.from_dense(first, comm)
    gathered = ColumnParallelLinear.from_dense(first, comm, gather_output=True)
    row = RowParallelLinear.from_dense(second, comm)
    np.testing.assert_allclose(gathered(x).numpy(), first(x).numpy(), rtol=1e-12)
    out = row(column(x))
    expected = second(first(x))
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-10, atol=1e-12)
    out.sum().backward()
    grad = x.grad.numpy().copy()
    x.grad = None
    expected.sum().backward()
    np.testing.assert_allclose(grad, x.grad.numpy(), rtol=1e-10)    # f summed the shards' parts


def _train_beside_dense(comm, make_dense, make_parallel, batches, all_reduces):
    """AdamW steps of a tensor-parallel model and of its dense model (both built from seed 0,
    float64) on ``batches`` (keyword arguments), checked at every step: the same loss, the
    logits (the parallel model's slice of them), ``all_reduces`` == (forward, backward)
    all-reduces, every gradient shard; and every parameter shard at the end."""
    mt.manual_seed(0)
    dense = _float64(make_dense())
    mt.manual_seed(0)
    parallel = _float64(make_parallel())
    dense_optimizer = AdamW(dense.parameters(), lr=1e-2)
    parallel_optimizer = AdamW(parallel.parameters(), lr=1e-2)
    dense_parameters = dict(dense.named_parameters())
    for batch in batches:
        dense_out, before = dense(**batch), comm.calls["all_reduce"]
        out = parallel(**batch)
        forward = comm.calls["all_reduce"] - before
        np.testing.assert_allclose(out.loss.numpy(), dense_out.loss.numpy(), rtol=1e-10)
        np.testing.assert_allclose(out.logits.numpy(), _shard_of(
            dense_out.logits.numpy(), out.logits, comm), rtol=1e-9, atol=1e-12)
        dense_optimizer.zero_grad()
        parallel_optimizer.zero_grad()
        dense_out.loss.backward()
        before = comm.calls["all_reduce"]
        out.loss.backward()
        assert (forward, comm.calls["all_reduce"] - before) == all_reduces
        for name, p in parallel.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), _shard_of(
                dense_parameters[name].grad.numpy(), p, comm), rtol=1e-8, atol=1e-12,
                err_msg=name)
        dense_optimizer.step()
        parallel_optimizer.step()
    for name, p in parallel.named_parameters():
        np.testing.assert_allclose(p.numpy(), _shard_of(dense_parameters[name].numpy(), p, comm),
                                   rtol=1e-9, atol=1e-12, err_msg=name)


def check_tensor_parallel(comm):
    config = GPTConfig.tiny()
    batches = [{"input_ids": ids, "labels": ids} for ids in (
        np.random.default_rng(step).integers(0, 100, (2, 8)) for step in range(3))]
    # one all-reduce per sub-block each way (2 per layer), plus the vocabulary-parallel
    # embedding (1 forward), loss (3 forward) and output layer's f (1 backward)
    _train_beside_dense(comm, lambda: GPT2LMHeadModel(config),
                        lambda: TensorParallelGPT2(config, comm), batches,
                        (2 * config.n_layer + 4, 2 * config.n_layer + 1))


def tiny_bert_config():
    return BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=32, max_position_embeddings=16,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def bert_batch(step):
    """Masked-LM inputs with padding (the second sequence ends in three pad tokens)."""
    rng = np.random.default_rng(step)
    ids = rng.integers(1, 40, (2, 8))
    mask = np.ones((2, 8), dtype=np.int64)
    mask[1, 5:] = 0
    ids[1, 5:] = 0
    labels = np.where(rng.random((2, 8)) < 0.4, ids, -100)
    labels[1, 5:] = -100
    labels[0, 0] = ids[0, 0]                             # at least one masked position
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def check_tensor_parallel_bert(comm):
    config = tiny_bert_config()
    layers = config.num_hidden_layers            # one all-reduce per sub-block each way
    _train_beside_dense(comm, lambda: BertForMaskedLM(config),
                        lambda: D.TensorParallelBert(config, comm),
                        [bert_batch(step) for step in range(3)], (2 * layers, 2 * layers))


def _dense_name(name, first_layer):
    """The dense GPT-2's name for a pipeline stage's parameter ``name``."""
    if name.startswith("stack.layers."):
        index, rest = name[len("stack.layers."):].split(".", 1)
        return f"transformer.blocks.layers.{first_layer + int(index)}.{rest}"
    if name == "output_weight":
        return "transformer.wte.weight"
    return "transformer." + name.replace("stack.", "blocks.")


def check_pipeline_parallel(comm):
    config, micro_batches = GPTConfig.tiny(n_layer=4), 2
    dense = _tiny_gpt(config)
    mt.manual_seed(0)
    stage = _float64(D.PipelineParallelGPT2(config, comm))
    dense_optimizer = AdamW(dense.parameters(), lr=1e-2)
    stage_optimizer = AdamW(stage.parameters(), lr=1e-2)
    dense_parameters = dict(dense.named_parameters())
    names = {name: _dense_name(name, stage.first_layer) for name, _ in stage.named_parameters()}
    assert set(names.values()) <= set(dense_parameters)
    for step in range(3):
        ids = np.random.default_rng(step).integers(0, 100, (4, 8))
        dense_optimizer.zero_grad()
        stage_optimizer.zero_grad()
        loss = dense(ids, labels=ids).loss
        loss.backward()
        sends = comm.calls["send"]
        np.testing.assert_allclose(stage.forward_backward(ids, micro_batches), loss.item(),
                                   rtol=1e-10)
        # each micro-batch: activations forward and their gradient backward, between stages
        assert comm.calls["send"] - sends == (0 if comm.size == 1 else micro_batches * (
            (not stage.last) + (not stage.first)))
        for name, p in stage.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), dense_parameters[names[name]].grad.numpy(),
                                       rtol=1e-8, atol=1e-12, err_msg=name)
        dense_optimizer.step()
        stage_optimizer.step()
    for name, p in stage.named_parameters():
        np.testing.assert_allclose(p.numpy(), dense_parameters[names[name]].numpy(), rtol=1e-9,
                                   atol=1e-12, err_msg=name)
    if comm.size > 1:
        _refuses(lambda: D.PipelineParallelGPT2(GPTConfig.tiny(n_layer=comm.size + 1), comm),
                 f"n_layer={comm.size + 1} must be divisible by the {comm.size} pipeline stages")
        _refuses(lambda: comm.send(np.zeros(1), comm.rank),
                 f"MPICommunicator.send: {comm.rank} is not another rank of {comm.size}")


def _refuses(call, message):
    try:
        call()
    except ValueError as error:
        assert message in str(error), str(error)
    else:
        raise AssertionError(f"accepted what should fail with: {message}")


def check_zero(comm):
    n, r, steps = comm.size, comm.rank, 3
    batches = [np.random.default_rng(s).integers(0, 100, (2 * n, 8)) for s in range(steps)]
    single = _tiny_gpt()
    optimizer = AdamW(single.parameters(), lr=1e-2, weight_decay=0.1)
    for ids in batches:
        optimizer.zero_grad()
        single(ids, labels=ids).loss.backward()
        optimizer.step()
    for stage in (1, 2, 3):
        replica = _tiny_gpt()
        if r:                                            # the broadcast must fix other starts
            for parameter in replica.parameters():
                parameter.data = parameter.data - 1.0
        zero = D.ZeroAdamW(replica, comm, stage, lr=1e-2, weight_decay=0.1)
        calls = dict(comm.calls)
        for ids in batches:
            local = ids[2 * r:2 * r + 2]
            zero.zero_grad()
            with zero.gathered():
                replica(local, labels=local).loss.backward()
            zero.step()
        assert comm.calls["reduce_scatter"] - calls.get("reduce_scatter", 0) == steps
        assert comm.calls["all_gather"] - calls.get("all_gather", 0) == steps
        padded = zero.partition * n
        expected = D.zero_state_bytes(padded, n, stage, parameter_bytes=8, gradient_bytes=8,
                                      optimizer_bytes=16)                      # float64
        assert zero.state_bytes() == expected, (stage, zero.state_bytes(), expected)
        with zero.gathered():
            for (name, got), want in zip(replica.named_parameters(), single.parameters()):
                np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-9, atol=1e-12,
                                           err_msg=f"stage {stage}: {name}")


def check_expert_parallel(comm):
    n, r = comm.size, comm.rank
    d_model, d_ff, experts = 6, 8, 2 * n
    for k in (1, 2):
        mt.manual_seed(0)
        dense = _float64(moe.MixtureOfExperts(d_model, d_ff, experts, k=k)).eval()
        parallel = D.ExpertParallelMoE.from_dense(dense, comm).eval()
        xs = [rank_array(q, (2, 5, d_model), salt=4) for q in range(n)]   # each rank's tokens
        cotangents = [rank_array(q, (2, 5, d_model), salt=5) for q in range(n)]
        x = mt.tensor(xs[r], requires_grad=True)
        out = parallel(x)
        (out * mt.tensor(cotangents[r])).sum().backward()
        dense_x = [mt.tensor(a, requires_grad=True) for a in xs]
        expected = [dense(a) for a in dense_x]            # one group of tokens per rank
        sum((e * mt.tensor(c)).sum() for e, c in zip(expected, cotangents)).backward()
        np.testing.assert_allclose(out.numpy(), expected[r].numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(x.grad.numpy(), dense_x[r].grad.numpy(), rtol=1e-10,
                                   atol=1e-12)
        local = slice(r * experts // n, (r + 1) * experts // n)
        for name in ("wi", "wo"):                        # every rank's tokens reached them
            np.testing.assert_allclose(getattr(parallel.experts, name).grad.numpy(),
                                       getattr(dense.experts, name).grad.numpy()[local],
                                       rtol=1e-9, atol=1e-12, err_msg=f"k={k} {name}")
        gate = comm.all_reduce(parallel.gate.weight.grad.numpy())        # data-parallel part
        np.testing.assert_allclose(gate, dense.gate.weight.grad.numpy(), rtol=1e-9, atol=1e-12)
        assert parallel.experts.num_experts == 2 and comm.calls["all_to_all"] >= 4
    if n > 1:
        _refuses(lambda: D.ExpertParallelMoE(4, 8, n + 1, comm),
                 f"num_experts={n + 1} must be divisible by the {n} ranks")


def main(names):
    comm = D.world()
    with D.fail_together(comm):
        for name in names:
            CHECKS[name](comm)
            comm.barrier()
            if comm.rank == 0:
                print(f"ok {name} on {comm.size} ranks", flush=True)


CHECKS = {name[len("check_"):]: check for name, check in globals().items()
          if name.startswith("check_")}


if __name__ == "__main__":
    main(sys.argv[1:])
