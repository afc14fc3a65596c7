"""Encoder-decoder generation, ours against HuggingFace transformers on PyTorch CPU.

    python benchmarks/seq2seq_generation.py [--only t5|bart] [--threads 1 2] [--batch 4]
                                            [--source 64] [--new-tokens 32] [--uncached]
                                            [--repeats 5] [--budget 30] [--json PATH]

Randomly initialised HuggingFace models of T5-small's shape (6 + 6 layers, d 512, 8 heads,
d_ff 2048, vocabulary 32128) and BART-base's (6 + 6 layers, d 768, 12 heads, d_ff 3072,
vocabulary 50265), each saved with ``save_pretrained`` and loaded with our ``mt.from_pretrained``
on the numba backend; a batch of ``--batch`` sources of ``--source`` tokens, greedy decoding of
``--new-tokens`` tokens (no end token on either side: every row runs to the last token). The
runners, in one process,
interleaved (each round runs each once, in a rotating order, each timed call right after an
untimed one of its own): ours with the key/value cache
(``decoding.generate_seq2seq``: the self-attention keys and values cached, the cross-attention
ones projected once), with ``--uncached`` ours without it (every step runs the whole prefix
again), and HuggingFace's ``generate`` with its cache. The generated tokens are checked identical
before anything is timed. Reported: median times, tokens per second, and the medians of the
per-round ratios at every thread count (OpenBLAS, Numba and PyTorch get the same count);
``--json`` writes them for ``benchmarks/results/``.

Needs ``torch`` and ``transformers``: run it from a throw-away virtual environment
(``pip install torch==2.13.0 transformers``), never a dependency of the library.

Targets (issue 40): at batch 4, source 64, 32 new tokens, T5 and BART each at most 0.9x
HuggingFace's time at 1 and 2 threads.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import minitorch_nlp as mt  # noqa: E402 - after the path set-up above
from backends import interleaved, median_ms, median_ratio, pin_threads  # noqa: E402
from results import comparison_parser, write_results  # noqa: E402


def t5_model(transformers):
    config = transformers.T5Config(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048,
                                   num_layers=6, num_heads=8, dropout_rate=0.0,
                                   decoder_start_token_id=0)
    return transformers.T5ForConditionalGeneration(config)


def bart_model(transformers):
    config = transformers.BartConfig(vocab_size=50265, d_model=768, encoder_layers=6,
                                     decoder_layers=6, encoder_attention_heads=12,
                                     decoder_attention_heads=12, encoder_ffn_dim=3072,
                                     decoder_ffn_dim=3072, dropout=0.0, attention_dropout=0.0,
                                     activation_dropout=0.0, forced_bos_token_id=None,
                                     forced_eos_token_id=None)
    return transformers.BartForConditionalGeneration(config)


FAMILIES = {"t5": ("T5-small", t5_model), "bart": ("BART-base", bart_model)}


def runners(torch, transformers, build, directory, batch, source_length, new_tokens, uncached):
    torch.manual_seed(0)
    hf_model = build(transformers).eval()
    hf_model.save_pretrained(directory)
    hf_model.generation_config.eos_token_id = None     # every row runs to ``new_tokens``
    with mt.backend("numba"):
        model = mt.from_pretrained(directory)
    vocab = hf_model.config.vocab_size
    source = np.random.default_rng(0).integers(4, vocab, (batch, source_length))

    def ours(use_cache):
        def run():
            with mt.no_grad():
                return model.generate(source, max_new_tokens=new_tokens, eos_token_id=None,
                                      forced_bos_token_id=None, forced_eos_token_id=None,
                                      use_cache=use_cache)
        return run

    def theirs():
        with torch.inference_mode():
            ids = hf_model.generate(torch.from_numpy(source), max_new_tokens=new_tokens,
                                    do_sample=False, num_beams=1)
        return ids.numpy()

    suite = {"ours, cache": ours(True)}
    if uncached:
        suite["ours, no cache"] = ours(False)
    hf = theirs()
    for name, run in suite.items():
        if not np.array_equal(run(), hf):
            raise SystemExit(f"{name}: our greedy tokens differ from HuggingFace's")
    suite["HuggingFace"] = theirs
    return suite


def report(times, new_tokens, batch):
    for name, seconds in times.items():
        print(f"    {name:15s} {median_ms(seconds):9.1f} ms   "
              f"{batch * new_tokens / (median_ms(seconds) / 1e3):7.1f} tokens/s")
    ratio = median_ratio(times["ours, cache"], times["HuggingFace"])
    line = f"    ours with cache / HF = {ratio:.2f}x"
    if "ours, no cache" in times:
        line += (f"   no cache / cache = "
                 f"{median_ratio(times['ours, no cache'], times['ours, cache']):.2f}x")
    print(line + f"   ({len(times['HuggingFace'])} rounds)")
    return {"ratio": ratio, "rounds": len(times["HuggingFace"]),
            "median_ms": {name: median_ms(seconds) for name, seconds in times.items()}}


def main() -> None:
    parser = comparison_parser(__doc__.split("\n")[0], FAMILIES, repeats=5, budget=30.0)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--source", type=int, default=64, help="source tokens per row")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--uncached", action="store_true", help="also time ours without cache")
    args = parser.parse_args()
    import torch
    import transformers

    figures = []
    for family in [args.only] if args.only else sorted(FAMILIES):
        label, build = FAMILIES[family]
        with tempfile.TemporaryDirectory() as directory:
            suite = runners(torch, transformers, build, directory, args.batch, args.source,
                            args.new_tokens, args.uncached)
            print(f"{label}-shaped greedy generation, batch {args.batch}, source {args.source}, "
                  f"{args.new_tokens} new tokens (same tokens)")
            for threads in args.threads:
                print(pin_threads(threads))
                times = interleaved(suite, args.repeats, args.budget, lead_in=True)
                row = report(times, args.new_tokens, args.batch)
                figures.append({"path": f"{label} greedy generation", "threads": threads,
                                "batch": args.batch, "source": args.source,
                                "new_tokens": args.new_tokens, "against": "HuggingFace", **row})
    if args.json:
        write_results(args.json, figures, sys.argv)


if __name__ == "__main__":
    main()
