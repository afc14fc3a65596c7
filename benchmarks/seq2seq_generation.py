"""Encoder-decoder generation, ours against HuggingFace transformers on PyTorch CPU.

    python benchmarks/seq2seq_generation.py [--threads 1 2] [--repeats 5] [--budget 30]
                                            [--new-tokens 32]

A randomly initialised HuggingFace ``T5ForConditionalGeneration`` of T5-small's shape (6 + 6
layers, d 512, 8 heads, d_ff 2048, vocabulary 32128) is saved with ``save_pretrained`` and loaded
with our ``mt.from_pretrained`` on the numba backend; batch 1, a 16-token source, greedy
decoding of ``--new-tokens`` tokens (the end token suppressed on both sides). Three runners, in
one process, interleaved (each round runs each once, in a rotating order): ours with the
key/value cache (``decoding.generate_seq2seq``: the self-attention keys and values cached, the
cross-attention ones projected once), ours without it (every step runs the whole prefix again),
and HuggingFace's ``generate`` with its cache. The generated tokens are checked identical before
anything is timed. Reported: median times, tokens per second, and the medians of the per-round
ratios at every thread count (OpenBLAS, Numba and PyTorch get the same count).

Needs ``torch`` and ``transformers``: run it from a throw-away virtual environment
(``pip install torch==2.13.0 transformers``), never a dependency of the library.

Target (issue 15): at batch 1, at least as fast as HuggingFace on PyTorch CPU.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import minitorch_nlp as mt  # noqa: E402 - after the path set-up above
from backends import interleaved, median_ms, median_ratio, pin_threads  # noqa: E402

SOURCE_LENGTH = 16


def runners(torch, transformers, directory, new_tokens):
    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048,
                                   num_layers=6, num_heads=8, dropout_rate=0.0,
                                   decoder_start_token_id=0)
    hf_model = transformers.T5ForConditionalGeneration(config).eval()
    hf_model.save_pretrained(directory)
    with mt.backend("numba"):
        model = mt.from_pretrained(directory)
    source = np.random.default_rng(0).integers(2, config.vocab_size, (1, SOURCE_LENGTH))

    def ours(use_cache):
        def run():
            with mt.no_grad():
                return model.generate(source, max_new_tokens=new_tokens, eos_token_id=None,
                                      use_cache=use_cache)
        return run

    def theirs():
        with torch.inference_mode():
            ids = hf_model.generate(torch.from_numpy(source), max_new_tokens=new_tokens,
                                    min_new_tokens=new_tokens, do_sample=False, num_beams=1)
        return ids.numpy()

    cached, uncached, hf = ours(True)(), ours(False)(), theirs()
    if not (np.array_equal(cached, hf) and np.array_equal(uncached, hf)):
        raise SystemExit("T5: our greedy tokens differ from HuggingFace's")
    return {"ours, cache": ours(True), "ours, no cache": ours(False), "HuggingFace": theirs}


def report(times, new_tokens):
    for name, seconds in times.items():
        print(f"    {name:15s} {median_ms(seconds):9.1f} ms   "
              f"{new_tokens / (median_ms(seconds) / 1e3):7.1f} tokens/s")
    print(f"    ours with cache / HF = "
          f"{median_ratio(times['ours, cache'], times['HuggingFace']):.2f}x   "
          f"no cache / cache = "
          f"{median_ratio(times['ours, no cache'], times['ours, cache']):.2f}x   "
          f"({len(times['HuggingFace'])} rounds)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=30.0, help="seconds per measurement")
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    import torch
    import transformers

    with tempfile.TemporaryDirectory() as directory:
        suite = runners(torch, transformers, directory, args.new_tokens)
        print(f"T5-small-shaped greedy generation, batch 1, source {SOURCE_LENGTH}, "
              f"{args.new_tokens} new tokens (same tokens)")
        for threads in args.threads:
            print(pin_threads(threads))
            report(interleaved(suite, args.repeats, args.budget), args.new_tokens)


if __name__ == "__main__":
    main()
