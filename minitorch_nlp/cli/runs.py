"""The ``demo``, ``train`` and ``generate`` commands: train a registered model family on a text
(or the demo's GPT on the built-in corpus), resume a run, and continue a prompt with a trained
model."""
from __future__ import annotations

import argparse
import os

from .. import training
from ..backends.threads import set_num_threads
from ..checks import SettingError
from ..distributed.commands import add_parallel_options, parallel_training
from ..inference import load_for_inference
from ..models import registry
from .common import (UsageError, add_resumable_run_options, add_run_options, at_least,
                     backend_named, check_run_options, option, owned_folder, refuse_overwrite,
                     run_folder, run_training, setting_usage_error)

__all__ = ["add_run_commands"]


def add_run_commands(commands) -> None:
    """Add ``demo``, ``train`` and ``generate`` to the sub-command parser ``commands``."""
    _add_demo_command(commands)
    _add_train_command(commands)
    _add_generate_command(commands)


def _add_demo_command(commands) -> None:
    demo = commands.add_parser(
        "demo",
        help="train a small GPT on the standard library's docstrings, then generate text",
        description="The main job: a GPT-2-style character model (4 layers, d 128, context 128) "
        "trained on the Python standard library's docstrings (no download), with a progress bar, "
        "validation loss, a loss-curve PNG, a checkpoint and generated samples, all in --out "
        "(a folder that holds a run is replaced only with --overwrite). Under 6 minutes on 2 CPU "
        "cores. Ctrl-C saves the run; `minitorch-nlp train --resume DIR` continues it.",
    )
    demo.add_argument("--steps", type=int,
                      help=f"training steps ({training.TrainConfig.steps}; --smoke: 20)")
    demo.add_argument("--seed", type=int, default=0, help="seed (%(default)s)")
    demo.add_argument("--smoke", action="store_true",
                      help="a tiny model for a few steps: checks the pipeline (a first run "
                      "on numba also waits for its kernels to compile)")
    demo.add_argument("--overwrite", action="store_true",
                      help="start afresh in an --out folder that holds a run, replacing it")
    add_run_options(demo, "runs/demo")
    demo.set_defaults(run=_demo)


# The TrainConfig fields that `train` takes as options; all but the RESUMABLE ones are fixed by
# a checkpoint, so that `--resume` refuses a different value.
_TRAIN_INTS = ("max_chars", "vocab_size", "n_layer", "n_head", "n_embd", "block_size",
               "batch_size", "steps", "warmup_steps", "eval_every", "seed", "experts")
_TRAIN_FLOATS = ("lr", "dropout", "weight_decay")


def _add_train_command(commands) -> None:
    defaults = training.TrainConfig()
    families = registry.families()
    train = commands.add_parser(
        "train",
        help="train a language model (" + ", ".join(families) + ") on a text file",
        description="Train a language model on a UTF-8 text file (default: the built-in corpus): "
        + "; ".join(f"{name}: {family.summary}" for name, family in families.items())
        + ". Writes checkpoint.npz, loss.png, metrics.json and samples.txt (models that "
        "generate text) to --out, saving the run every few minutes and on Ctrl-C. A folder "
        "that holds a run is not overwritten without --overwrite; --resume DIR continues the "
        "run exactly where it stopped.",
    )
    train.add_argument("model", nargs="?", choices=list(families),
                       help="the model family (on --resume: the checkpoint's)")
    train.add_argument("--text", metavar="FILE", help="UTF-8 text to train on (built-in corpus)")
    train.add_argument("--tokenizer", choices=training.TOKENIZERS,
                       help="char, bpe (byte-level BPE), wordpiece or unigram (SentencePiece's "
                       "Unigram LM); default: " + ", ".join(
                           f"{family.default_tokenizer} for {name}"
                           for name, family in families.items()))
    warmup = f"min({training.DEFAULT_WARMUP_STEPS}, steps / 10)"
    for name in _TRAIN_INTS:
        default = warmup if name == "warmup_steps" else getattr(defaults, name)
        train.add_argument(option(name), type=int, help=f"({default})")
    for name in _TRAIN_FLOATS:
        train.add_argument(option(name), type=float, help=f"({getattr(defaults, name)})")
    add_resumable_run_options(train)
    add_run_options(train, None)
    add_parallel_options(train)
    train.set_defaults(run=_train)


def _add_generate_command(commands) -> None:
    generate = commands.add_parser(
        "generate",
        help="continue a prompt with a trained model, streaming tokens (or fill masks)",
        description="Load a checkpoint written by `train`/`demo` (a file or its directory), or a "
        "HuggingFace directory (config.json, model.safetensors and the tokenizer's files), and "
        "continue --prompt, printing each token as it is produced; past the model's context the "
        "window slides (the model reads the last half-context of text). A masked LM (bert, "
        "roberta) fills each mask token of the prompt instead.",
    )
    generate.add_argument("checkpoint", help="checkpoint.npz, its run directory, or a "
                          "HuggingFace model directory")
    generate.add_argument("--prompt", default="The ", help="text to continue (%(default)r)")
    generate.add_argument("--max-new-tokens", type=int,
                          help="tokens to write at most (200; bart: its position table's "
                          "length, t5: 64)")
    generate.add_argument("--temperature", type=float, default=0.8,
                          help="(%(default)s; 0: greedy, the likeliest token every step)")
    generate.add_argument("--top-k", type=int, default=None, help="keep the k likeliest tokens")
    generate.add_argument("--top-p", type=float, default=None,
                          help="nucleus sampling: keep the likeliest tokens of this total "
                          "probability, in (0, 1]")
    generate.add_argument("--repetition-penalty", type=float, default=1.0,
                          help="(%(default)s; > 1 discourages repeats)")
    generate.add_argument("--greedy", action="store_true", help="always take the likeliest token")
    generate.add_argument("--seed", type=int, default=0, help="sampling seed (%(default)s)")
    generate.add_argument("--backend", default=None, help="array backend (the checkpoint's)")
    generate.set_defaults(run=_generate)


def _demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    at_least(1, steps=args.steps)
    check_run_options(args)
    backend_name = args.backend or training.TrainConfig.backend
    backend_named(backend_name)
    set_num_threads(args.threads)
    config = _config(training.demo_config, steps=args.steps, backend=backend_name,
                     seed=args.seed, smoke=args.smoke)
    with owned_folder(args.out, "demo"):
        refuse_overwrite(args.out, args.overwrite)
        return run_training(_start(config), args.out, None, args)


def _config(make, **values):
    """``make(**values)`` (a ``TrainConfig``), its setting errors as usage errors naming the
    option."""
    try:
        return make(**values)
    except SettingError as error:
        raise setting_usage_error(error) from error


def _start(config, parallel=None, **load):
    """The run of ``config`` (or, with ``load``, the run saved at ``load["path"]``) laid out as
    ``parallel`` says (default: one process), its text and setting errors as usage errors
    naming the option."""
    try:
        if load:
            path = load.pop("path")
            try:
                return training.LanguageModelRun.load(path, parallel=parallel, **load)
            except (FileNotFoundError, ValueError) as error:
                if isinstance(error, (training.TextFileError, SettingError)):
                    raise
                raise UsageError(f"--resume: {error}") from error
        return training.LanguageModelRun(config, parallel=parallel)
    except training.TextFileError as error:
        raise UsageError(f"--text: {error}") from error
    except SettingError as error:
        raise setting_usage_error(error) from error


def _train(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    check_run_options(args)
    set_num_threads(args.threads)
    if args.backend is not None:
        backend_named(args.backend)
    parallel = _config(parallel_training, parallel=args.parallel, zero=args.zero)
    if args.resume is None and args.model is None:
        raise UsageError("give the model to train (" + ", ".join(registry.families())
                         + "), or --resume PATH to continue a run")
    out = run_folder(args, f"runs/{args.model}")
    folder_option = "--resume" if args.resume and not args.out else "--out"
    with owned_folder(out, "train", option_name=folder_option, writes=parallel.writes):
        if args.resume:
            run = _resume(args, parallel)
        else:
            refuse_overwrite(out, args.overwrite)
            given = {name: getattr(args, name) for name in (*_TRAIN_INTS, *_TRAIN_FLOATS,
                                                            "text", "tokenizer", "backend")}
            config = _config(training.TrainConfig, model=args.model,
                             **{name: value for name, value in given.items()
                                if value is not None})
            run = _start(config, parallel)
        if args.stop_at is not None and not run.step < args.stop_at <= run.config.steps:
            raise UsageError(f"--stop-at {args.stop_at} must lie after the run's current step "
                             f"{run.step} and at most at its end, step {run.config.steps} "
                             "(--steps)")
        return run_training(run, out, args.stop_at, args)


def _resume(args, parallel):
    """The run that ``--resume`` names; the options that would change what it was trained with
    are refused, naming each."""
    if args.overwrite:
        raise UsageError("--overwrite starts afresh and --resume continues: give one of them")
    path = training.checkpoint_file(args.resume)
    try:
        saved = training.read_checkpoint(path)["config"]
    except (FileNotFoundError, ValueError) as error:
        raise UsageError(f"--resume {args.resume}: {error}") from error
    given = {name: getattr(args, name) for name in (*_TRAIN_INTS, *_TRAIN_FLOATS, "tokenizer")}
    given["text"] = args.text and os.path.abspath(args.text)
    conflicts = [f"{option(name)} {value} (the run has {saved[name]})"
                 for name, value in given.items()
                 if value is not None and name not in training.LanguageModelRun.RESUMABLE
                 and value != saved[name]]
    if args.model is not None and args.model != saved["model"]:
        conflicts.insert(0, f"{args.model} (the run is a {saved['model']})")
    if conflicts:
        raise UsageError(f"--resume {args.resume}: these options differ from the run's and "
                         "cannot change on resume: " + ", ".join(conflicts)
                         + "; leave them out, or start a new run in another --out")
    overrides = {name: getattr(args, name) for name in training.LanguageModelRun.RESUMABLE
                 if getattr(args, name) is not None}
    run = _start(None, parallel, path=path, **overrides)
    if run.step >= run.config.steps:
        raise UsageError(f"--resume {args.resume}: the run finished at step {run.step}; give "
                         f"--steps N (more than {run.step}) to train it further")
    return run


def _generate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    at_least(1, max_new_tokens=args.max_new_tokens, top_k=args.top_k)
    if not args.temperature >= 0:
        raise UsageError(f"--temperature must be >= 0 (0: greedy), got {args.temperature}")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        raise UsageError(f"--top-p must lie in (0, 1], got {args.top_p}")
    if not args.repetition_penalty > 0:
        raise UsageError(f"--repetition-penalty must be > 0, got {args.repetition_penalty}")
    if args.backend is not None:
        backend_named(args.backend)
    overrides = {} if args.backend is None else {"backend": args.backend}
    try:
        model, tokenizer, family = load_for_inference(args.checkpoint, **overrides)
    except (FileNotFoundError, ValueError) as error:
        raise UsageError(f"{args.checkpoint}: {error}" if args.checkpoint not in str(error)
                         else str(error)) from error
    length = {} if args.max_new_tokens is None else {"max_new_tokens": args.max_new_tokens}
    try:
        if not family.objective.generates_text:
            print(family.objective.respond(model, tokenizer, args.prompt, **length))
            return 0
        print(args.prompt, end="", flush=True)
        family.objective.respond(model, tokenizer, args.prompt, **length,
                                 temperature=0.0 if args.greedy else args.temperature,
                                 top_k=args.top_k, top_p=args.top_p,
                                 repetition_penalty=args.repetition_penalty, seed=args.seed,
                                 on_text=lambda piece: print(piece, end="", flush=True))
    except ValueError as error:   # a prompt this model cannot answer: empty, too long, no mask
        if family.objective.generates_text:
            print(flush=True)   # ends the line the prompt was printed on
        raise UsageError(f"--prompt {args.prompt!r}: {error}") from error
    print()
    return 0
