"""The checks that need real ranks, run by ``tests/test_distributed.py`` as
``mpirun -n N python -m tests.distributed_checks CHECK ...``: each rank runs the named checks in
order (inside ``fail_together``, so that a failing assertion on one rank ends them all with its
message), and rank 0 prints ``ok CHECK`` after each.

Every expected value is computed on each rank without communication, from arrays every rank can
draw (seeded by rank), so that a check compares MPI's answer with plain NumPy.
"""
from __future__ import annotations

import sys

import numpy as np

import minitorch_nlp as mt
from minitorch_nlp import distributed as D
from minitorch_nlp.models.gpt import GPT2LMHeadModel, GPTConfig
from minitorch_nlp.optim import AdamW


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


def _tiny_gpt():
    mt.manual_seed(0)
    model = GPT2LMHeadModel(GPTConfig.tiny())
    for parameter in model.parameters():
        parameter.data = parameter.data.astype(np.float64)
    return model


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


CHECKS = {name[len("check_"):]: check for name, check in globals().items()
          if name.startswith("check_")}


def main(names):
    comm = D.world()
    with D.fail_together(comm):
        for name in names:
            CHECKS[name](comm)
            comm.barrier()
            if comm.rank == 0:
                print(f"ok {name} on {comm.size} ranks", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
