"""The ``plan`` command of ``minitorch-nlp`` (registered by ``cli.entry``): the cost model of
:mod:`.plan` on a named model; and the options ``--parallel`` and ``--zero`` of ``train``, which
lay a run out over the ranks ``mpirun`` started (:mod:`.training`)."""
from __future__ import annotations

import argparse

from ..cli.common import UsageError
from . import communicator
from .plan import model_config, parse_layout, plan as plan_layout
from .training import ParallelTraining

GIB = 2 ** 30


def add_plan_commands(commands) -> None:
    """Add ``plan`` to the ``minitorch-nlp`` sub-command parser ``commands``."""
    plan = commands.add_parser(
        "plan", help="memory per device and communication per step of a parallel layout",
        description="The cost model of minitorch_nlp.distributed.plan: model state (ZeRO-divided), "
        "activations with and without recomputation, and the bytes each device sends per step "
        "for data, tensor and pipeline parallelism, from the model's shapes alone.")
    plan.add_argument("--model", required=True, metavar="NAME",
                      help="gpt3-small ... gpt3-175b, megatron-1.2b ... megatron-8.3b")
    plan.add_argument("--gpus", type=int, required=True, metavar="N", help="devices")
    plan.add_argument("--parallel", default="", metavar="LAYOUT",
                      help="e.g. dp=8,tp=8,pp=16 (dp defaults to what tp and pp leave)")
    plan.add_argument("--zero", type=int, default=0, choices=(0, 1, 2, 3),
                      help="ZeRO stage over the data-parallel replicas (0: none)")
    plan.add_argument("--micro-batch", type=int, default=1, metavar="B",
                      help="sequences per micro-batch (1)")
    plan.add_argument("--global-batch", type=int, metavar="B",
                      help="sequences per step (default: one micro-batch per replica)")
    plan.add_argument("--seq-len", type=int, metavar="S", help="tokens (default: the context)")
    plan.add_argument("--precision", default="mixed", choices=("mixed", "float32"),
                      help="mixed: 2+2+12 bytes per parameter (the papers'); float32: 4+4+8")
    plan.add_argument("--recompute", action="store_true",
                      help="keep only each layer's input; recompute the rest in backward")
    plan.set_defaults(run=_plan)


def add_parallel_options(train) -> None:
    """Add ``--parallel`` and ``--zero`` to the ``train`` command's parser."""
    train.add_argument("--parallel", default="", metavar="LAYOUT",
                       help="how the ranks started by mpirun -n N split the run: dp=D,tp=T "
                       "(data- and tensor-parallel degrees, D x T = N; dp defaults to N / T); "
                       "gpt only; may change on --resume")
    train.add_argument("--zero", type=int, default=0, choices=(0, 1, 2, 3),
                       help="ZeRO stage over the data-parallel ranks (0: none; 1 optimizer "
                       "state, 2 also gradients, 3 also parameters partitioned); may change on "
                       "--resume")


def parallel_training(parallel, zero):
    """The ``ParallelTraining`` of ``--parallel`` and ``--zero`` over MPI's world (one process
    without mpirun)."""
    return ParallelTraining(parallel, zero, communicator.world())


def _gib(nbytes):
    return f"{nbytes / GIB:,.1f} GiB"


def _plan(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        config = model_config(args.model)
        layout = parse_layout(args.parallel, args.gpus)
        result = plan_layout(config, layout, zero=args.zero, micro_batch=args.micro_batch,
                      global_batch=args.global_batch, seq_len=args.seq_len,
                      precision=args.precision, recompute=args.recompute)
    except ValueError as error:
        raise UsageError(str(error).removeprefix("plan: ")) from error
    seq = args.seq_len or config.n_positions
    state = result["model_state"]
    print(f"{args.model} on {layout.devices} devices: dp={layout.dp} tp={layout.tp} "
          f"pp={layout.pp}, ZeRO stage {args.zero}, {args.precision} precision, micro-batch "
          f"{args.micro_batch} x {seq} tokens, {result['micro_batches']} micro-batch(es) per "
          "step")
    print(f"parameters: {result['parameters']:,} ({result['parameters_per_device']:,.0f} per "
          "device)")
    print(f"memory per device: parameters {_gib(state['parameters'])}, gradients "
          f"{_gib(state['gradients'])}, optimizer {_gib(state['optimizer'])} (model state "
          f"{_gib(sum(state.values()))}); activations "
          f"{_gib(result['activations_without_recompute'])} "
          f"without recomputation, {_gib(result['activations_with_recompute'])} with")
    print(f"sent per device and step: data parallel {_gib(result['dp_bytes'])}, tensor "
          f"parallel {_gib(result['tp_bytes'])}, pipeline {_gib(result['pp_bytes'])}")
    return 0
