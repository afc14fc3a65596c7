"""Compressing a trained run's checkpoint (what ``minitorch-nlp compress`` does), and rebuilding
the compressed model's structure when it is loaded again.

``compress_checkpoint`` loads a run written by ``train`` / ``demo``, then, in this order, drops
layers by a Poor Man's BERT strategy, removes the least important heads (eq 54, scored on the
run's validation batches) and converts every Linear to int8 (Q8BERT, input ranges calibrated on
the validation batches). It writes a checkpoint of the same format whose ``compression`` entry
records what was done; ``inference.load_for_inference`` (and so ``generate``) calls ``rebuild`` to
give the freshly built model the same shape before loading the weights. Such a checkpoint is for
inference: training cannot resume from it.
"""
from __future__ import annotations

import os

from .. import io, training
from ..autograd import no_grad
from ..io.runs import CHECKPOINT_NAME, checkpoint_file, read_checkpoint
from . import pruning, quantization

__all__ = ["compress_checkpoint", "parse_drop_layers", "rebuild"]

QUANTIZE_CHOICES = ("int8",)


def parse_drop_layers(text):
    """``"STRATEGY:K"`` (e.g. ``odd-alternate:2``, ``top:1``) as (strategy, k); ``odd`` and
    ``even`` stand for the alternate strategies."""
    strategy, sep, count = str(text).partition(":")
    strategy = {"odd": "odd-alternate", "even": "even-alternate"}.get(strategy, strategy)
    choices = [s for s in pruning.POOR_MANS_STRATEGIES if s != "contribution"]
    if not sep or strategy not in choices or not count.isdigit():
        raise ValueError(f"--drop-layers must be STRATEGY:K with STRATEGY one of {choices} "
                         f"(odd, even for short) and K a count, got {text!r}")
    return strategy, int(count)


def _described(record):
    parts = [f"heads pruned in {len(record['pruned_heads'])} layer(s)"
             if record.get("pruned_heads") else "", "int8" if record.get("quantize") else ""]
    return ", ".join(part for part in parts if part) or "layers dropped"


def rebuild(model, record):
    """Give a freshly built ``model`` the structure a ``compression`` record describes (the
    layers were already dropped in the config): its heads removed, its Linears int8."""
    if not record:
        return model
    heads = {int(layer): [int(h) for h in hs] for layer, hs in record.get("pruned_heads",
                                                                          {}).items()}
    if heads:
        pruning.prune_heads(model, heads)
    if record.get("quantize") == "int8":
        quantization.int8_skeleton(model)
    return model


def compress_checkpoint(path, out, *, drop_layers=None, prune_heads=None, quantize=None):
    """Compress the run at ``path`` (checkpoint file or run directory) into ``out`` (a directory;
    ``out/checkpoint.npz``): ``drop_layers`` "STRATEGY:K", ``prune_heads`` the fraction of heads
    to remove (in (0, 1), never a layer's last head), ``quantize`` "int8". Returns a dict of
    what was done, with the numbers stored (parameters and buffers) and the file sizes before and
    after."""
    if drop_layers is None and prune_heads is None and quantize is None:
        raise ValueError("compress: give at least one of --drop-layers, --prune-heads and "
                         "--quantize")
    if prune_heads is not None and not 0.0 < prune_heads < 1.0:
        raise ValueError(f"--prune-heads must be a fraction in (0, 1), got {prune_heads}")
    if quantize is not None and quantize not in QUANTIZE_CHOICES:
        raise ValueError(f"--quantize must be one of {QUANTIZE_CHOICES}, got {quantize!r}")
    strategy = None if drop_layers is None else parse_drop_layers(drop_layers)
    source = checkpoint_file(path)
    state = read_checkpoint(source)
    if state.get("compression") is not None:
        raise ValueError(f"{source} is already compressed ({_described(state['compression'])})"
                         "; compress the run it was made from instead")
    run = training.LanguageModelRun.load(source)
    model = run.model.eval()
    report = {"values_before": sum(t.size for t in model.state_dict().values()),
              "bytes_before": os.path.getsize(source)}
    record = {}
    config = dict(state["config"])
    if strategy is not None:
        depth = len(pruning.transformer_stack(model).layers)
        try:
            dropped = pruning.poor_mans_layers_to_drop(strategy[0], depth, strategy[1])
        except ValueError as error:
            raise ValueError(f"--drop-layers {drop_layers}: the model has {depth} layer(s); "
                             f"{str(error).split(': ', 1)[-1]}") from error
        pruning.drop_layers(model, dropped)
        config["n_layer"] = depth - len(dropped)
        report["dropped_layers"] = dropped
    if prune_heads is not None:
        total = sum(a.num_heads for a in pruning.attention_layers(model))
        importance = pruning.head_importance(model, run.val_batches,
                                             lambda m, batch: run.loss(*batch))
        heads = pruning.least_important_heads(importance, round(prune_heads * total))
        pruning.prune_heads(model, heads)
        record["pruned_heads"] = {str(layer): hs for layer, hs in heads.items()}
        report["pruned_heads"] = record["pruned_heads"]
    if quantize == "int8":
        quantization.prepare_qat(model)
        with no_grad():
            quantization.calibrate(model, [batch[0] for batch in run.val_batches])
        quantization.convert_to_int8(model)
        record["quantize"] = "int8"
    report["values_after"] = sum(t.size for t in model.state_dict().values())
    compressed = {key: state[key] for key in ("format", "text_sha256", "tokenizer", "step",
                                              "history")}
    compressed.update(config=config, model=model.state_dict(), compression=record)
    os.makedirs(out, exist_ok=True)
    target = os.path.join(out, CHECKPOINT_NAME)
    io.save(compressed, target)
    report["bytes_after"] = os.path.getsize(target)
    report["checkpoint"] = target
    return report

