"""The ``compress`` command of ``minitorch-nlp`` (registered by ``cli.entry``): parsing and the
report; the work is :func:`minitorch_nlp.compress.checkpoints.compress_checkpoint`."""
from __future__ import annotations

import argparse
import os

from ..cli.common import UsageError, owned_folder, refuse_overwrite
from .checkpoints import compress_checkpoint


def add_compress_commands(commands) -> None:
    """Add ``compress`` to the ``minitorch-nlp`` sub-command parser ``commands``."""
    compress = commands.add_parser(
        "compress",
        help="write a smaller model of a trained run: layers dropped, heads pruned, int8",
        description="Load a run written by `train`/`demo` (its directory or checkpoint.npz), "
        "then drop layers by a Poor Man's BERT strategy, remove the least important heads "
        "(Michel et al.'s importance on the run's validation batches) and/or convert every "
        "Linear to int8 (Q8BERT, ranges calibrated on the validation batches); write the "
        "result to --out, a checkpoint that `generate` loads.")
    compress.add_argument("run_dir", metavar="RUN_DIR", help="run directory or checkpoint.npz")
    compress.add_argument("--out", required=True, metavar="DIR",
                          help="directory for the compressed checkpoint.npz")
    compress.add_argument("--drop-layers", metavar="STRATEGY:K",
                          help="drop K layers: top, bottom, odd (odd-alternate), even "
                          "(even-alternate) or symmetric, e.g. odd:2")
    compress.add_argument("--prune-heads", type=float, metavar="FRACTION",
                          help="remove this fraction of all heads, least important first")
    compress.add_argument("--quantize", choices=("int8",),
                          help="int8 weights and activations for every Linear")
    compress.add_argument("--overwrite", action="store_true",
                          help="replace a run already in --out (it is then lost)")
    compress.set_defaults(run=_compress)


def _compress(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if os.path.abspath(args.out) == os.path.abspath(args.run_dir):
        raise UsageError("--out must differ from RUN_DIR: the compressed model cannot resume "
                         "training, so it does not replace the run")
    with owned_folder(args.out, "compress"):
        refuse_overwrite(args.out, args.overwrite, resumable=False)
        try:
            report = compress_checkpoint(args.run_dir, args.out, drop_layers=args.drop_layers,
                                         prune_heads=args.prune_heads, quantize=args.quantize)
        except FileNotFoundError as error:
            raise UsageError(f"RUN_DIR {args.run_dir}: {error}") from error
        except ValueError as error:    # each names the option or the file at fault
            raise UsageError(str(error).removeprefix("compress: ")) from error
    if "dropped_layers" in report:
        print(f"dropped layers {report['dropped_layers']}")
    if "pruned_heads" in report:
        print(f"removed heads {report['pruned_heads']} (layer: heads)")
    print(f"stored values {report['values_before']} -> {report['values_after']}, file "
          f"{report['bytes_before']} -> {report['bytes_after']} bytes: {report['checkpoint']}")
    return 0
