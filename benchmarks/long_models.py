"""Long-document encoders, ours against HuggingFace transformers on PyTorch CPU.

    python benchmarks/long_models.py [--only longformer|bigbird] [--threads 1 2]
                                     [--tokens 4096] [--repeats 5] [--budget 40] [--json PATH]

Randomly initialised HuggingFace encoders, saved with ``save_pretrained`` and loaded with our
``mt.from_pretrained`` on the numba backend, run on one sequence of ``--tokens`` tokens:

* Longformer (4 layers, d 256, 4 heads, d_ff 1024, window 256: 128 tokens on each side), token 0
  global (``global_attention_mask``);
* BigBird's block-sparse encoder (4 layers, d 256, 4 heads, d_ff 1024, blocks of 64, 3 random
  blocks), ``attention_type="block_sparse"``.

The runners are interleaved in one process (each round runs both once, in a rotating order,
each timed call right after an untimed one of its own, as in a loop over documents) at
every thread count (OpenBLAS, Numba and PyTorch get the same count); the last hidden states are
checked equal (to 1e-3 of their scale) before anything is timed, BigBird's random blocks drawn
with the same seed is not assumed: its outputs are compared on the inputs' first block row, which
every pattern computes densely. Reported: median times and the median of the per-round ratios
ours / HuggingFace's; ``--json`` writes them for ``benchmarks/results/``.

Needs ``torch`` and ``transformers`` (``pip install torch==2.13.0 transformers``), never a
dependency of the library.

Targets (issue 40): Longformer at most 0.9x HuggingFace's time at 1 and 2 threads; BigBird kept
at or below 0.41x (1 thread) and 0.40x (2 threads).
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

SHAPE = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def longformer(transformers, tokens):
    config = transformers.LongformerConfig(vocab_size=30522, attention_window=256,
                                           max_position_embeddings=tokens + 2, **SHAPE)
    model = transformers.LongformerModel(config)
    ids = np.random.default_rng(0).integers(3, config.vocab_size, (1, tokens))
    global_mask = np.zeros((1, tokens), dtype=np.int64)
    global_mask[:, 0] = 1
    return model, ids, {"global_attention_mask": global_mask}, slice(None)


def bigbird(transformers, tokens):
    config = transformers.BigBirdConfig(vocab_size=30522, attention_type="block_sparse",
                                        block_size=64, num_random_blocks=3,
                                        max_position_embeddings=tokens, **SHAPE)
    model = transformers.BigBirdModel(config)
    ids = np.random.default_rng(0).integers(3, config.vocab_size, (1, tokens))
    return model, ids, {}, slice(0, config.block_size)


FAMILIES = {"longformer": ("Longformer", longformer), "bigbird": ("BigBird block-sparse", bigbird)}


def runners(torch, transformers, build, directory, tokens):
    torch.manual_seed(0)
    hf_model, ids, extra, compared = build(transformers, tokens)
    hf_model.eval().save_pretrained(directory)
    with mt.backend("numba"):
        model = mt.from_pretrained(directory)
    model.eval()

    def ours():
        with mt.no_grad():
            return model(input_ids=ids, **extra).last_hidden_state.numpy()

    def theirs():
        with torch.inference_mode():
            return hf_model(input_ids=torch.from_numpy(ids),
                            **{k: torch.from_numpy(v) for k, v in extra.items()}
                            ).last_hidden_state.numpy()

    mine, hf = ours()[:, compared], theirs()[:, compared]
    scale = max(1.0, float(np.abs(hf).max()))
    if not np.allclose(mine, hf, atol=1e-3 * scale, rtol=1e-3):
        raise SystemExit(f"outputs differ from HuggingFace's by {np.abs(mine - hf).max():.3g}")
    return {"ours": ours, "HuggingFace": theirs}


def main() -> None:
    parser = comparison_parser(__doc__.split("\n")[0], FAMILIES, repeats=5, budget=40.0)
    parser.add_argument("--tokens", type=int, default=4096)
    args = parser.parse_args()
    import torch
    import transformers

    figures = []
    for family in [args.only] if args.only else sorted(FAMILIES):
        label, build = FAMILIES[family]
        with tempfile.TemporaryDirectory() as directory:
            suite = runners(torch, transformers, build, directory, args.tokens)
            print(f"{label} encoder, 4 layers, d 256, {args.tokens} tokens (same outputs)")
            for threads in args.threads:
                print(pin_threads(threads))
                times = interleaved(suite, args.repeats, args.budget, lead_in=True)
                ratio = median_ratio(times["ours"], times["HuggingFace"])
                for name, seconds in times.items():
                    print(f"    {name:12s} {median_ms(seconds):9.1f} ms")
                print(f"    ours / HF = {ratio:.2f}x   ({len(times['ours'])} rounds)")
                figures.append({"path": f"{label} encoder", "threads": threads,
                                "tokens": args.tokens, "against": "HuggingFace",
                                "ratio": ratio, "rounds": len(times["ours"]),
                                "median_ms": {n: median_ms(s) for n, s in times.items()}})
    if args.json:
        write_results(args.json, figures, sys.argv)


if __name__ == "__main__":
    main()
