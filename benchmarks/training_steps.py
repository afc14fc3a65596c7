"""Training steps, ours against the same HuggingFace models on PyTorch eager (CPU).

    python benchmarks/training_steps.py [--only bert|t5|gpt2] [--threads 1 2] [--repeats 7]
                                        [--budget 60] [--check-steps 3] [--profile] [--json PATH]

One AdamW step (forward with the loss, backward, update; lr 1e-4, weight decay 0.01) of:

* BERT masked LM: 4 layers, d 256, 4 heads, d_ff 1024, vocabulary 30522, batch 16 x 128, 15 % of
  the positions labelled;
* T5-small's shape: 6 + 6 layers, d 512, 8 heads, d_ff 2048, vocabulary 32128, batch 8, source
  128, target 32;
* GPT-2: 6 layers, d 512, 8 heads, vocabulary 50257 (the output layer tied to the token
  embedding), batch 8 x 256.

Each HuggingFace model is randomly initialised without dropout, saved with ``save_pretrained``
and loaded with our ``mt.from_pretrained`` on the numba backend, so both start from the same
weights and take the same batch. Before anything is timed, ``--check-steps`` steps are run on a
copy of each side and the losses compared (to 1e-4 relative); then the two runners are timed in
one process, interleaved (each round runs both, in a rotating order, each timed step right after
an untimed one of its own, as in a training loop), at every thread count (OpenBLAS, Numba and
PyTorch get the same count). Reported: median step times and the median of the per-round ratios
ours / PyTorch's; ``--profile`` prints where our step's time goes; ``--json`` writes the figures
for ``benchmarks/results/``.

Needs ``torch`` and ``transformers`` (``pip install torch==2.13.0 transformers``), never a
dependency of the library.

Targets (issue 40): every step at most 1.0x PyTorch's time at 1 and 2 threads.
"""
from __future__ import annotations

import cProfile
import pstats
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import minitorch_nlp as mt  # noqa: E402 - after the path set-up above
from backends import interleaved, median_ms, median_ratio, pin_threads  # noqa: E402
from minitorch_nlp import optim  # noqa: E402
from results import comparison_parser, write_results  # noqa: E402

LR, WEIGHT_DECAY = 1e-4, 0.01


def bert(transformers, rng):
    config = transformers.BertConfig(vocab_size=30522, hidden_size=256, num_hidden_layers=4,
                                     num_attention_heads=4, intermediate_size=1024,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ids = rng.integers(1000, config.vocab_size, (16, 128))
    labels = np.where(rng.random(ids.shape) < 0.15, ids, -100)
    return transformers.BertForMaskedLM(config), {"input_ids": ids, "labels": labels}


def t5(transformers, rng):
    config = transformers.T5Config(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048,
                                   num_layers=6, num_heads=8, dropout_rate=0.0,
                                   decoder_start_token_id=0)
    ids = rng.integers(2, config.vocab_size, (8, 128))
    labels = rng.integers(2, config.vocab_size, (8, 32))
    return transformers.T5ForConditionalGeneration(config), {"input_ids": ids, "labels": labels}


def gpt2(transformers, rng):
    config = transformers.GPT2Config(vocab_size=50257, n_positions=256, n_embd=512, n_layer=6,
                                     n_head=8, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    ids = rng.integers(0, config.vocab_size, (8, 256))
    return transformers.GPT2LMHeadModel(config), {"input_ids": ids, "labels": ids}


FAMILIES = {"bert": ("BERT masked LM, 4 layers, d 256, batch 16 x 128", bert),
            "t5": ("T5-small shape, batch 8, source 128, target 32", t5),
            "gpt2": ("GPT-2, 6 layers, d 512, vocabulary 50257, batch 8 x 256", gpt2)}


def steps(torch, transformers, build, directory):
    """(our step, PyTorch's step), each from the same saved weights, each returning its loss."""
    torch.manual_seed(0)
    hf_model, batch = build(transformers, np.random.default_rng(0))
    hf_model.save_pretrained(directory)
    hf_model.train()
    with mt.backend("numba"):
        model = mt.from_pretrained(directory)
    model.train()
    ours_opt = optim.AdamW(list(model.parameters()), lr=LR, weight_decay=WEIGHT_DECAY)
    hf_opt = torch.optim.AdamW(hf_model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    hf_batch = {name: torch.from_numpy(value) for name, value in batch.items()}

    def ours():
        ours_opt.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        ours_opt.step()
        return float(loss.item())

    def theirs():
        hf_opt.zero_grad()
        loss = hf_model(**hf_batch).loss
        loss.backward()
        hf_opt.step()
        return float(loss.item())

    return ours, theirs


def check_losses(torch, transformers, build, count):
    """``count`` steps of fresh copies of both sides: their losses, which must agree."""
    with tempfile.TemporaryDirectory() as directory:
        ours, theirs = steps(torch, transformers, build, directory)
        pairs = [(ours(), theirs()) for _ in range(count)]
    for step, (mine, hf) in enumerate(pairs):
        if not np.isclose(mine, hf, rtol=1e-4):
            raise SystemExit(f"losses differ at step {step}: ours {mine:.6f}, PyTorch {hf:.6f}")
    return pairs


def main() -> None:
    parser = comparison_parser(__doc__.split("\n")[0], FAMILIES, repeats=7, budget=60.0)
    parser.add_argument("--check-steps", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="profile our step")
    args = parser.parse_args()
    import torch
    import transformers

    figures = []
    for family in [args.only] if args.only else list(FAMILIES):
        label, build = FAMILIES[family]
        pairs = check_losses(torch, transformers, build, args.check_steps)
        print(f"{label}: losses " + ", ".join(f"{a:.5f} / {b:.5f}" for a, b in pairs))
        with tempfile.TemporaryDirectory() as directory:
            ours, theirs = steps(torch, transformers, build, directory)
            for threads in args.threads:
                print(pin_threads(threads))
                times = interleaved({"ours": ours, "PyTorch": theirs}, args.repeats,
                                    args.budget, lead_in=True)
                ratio = median_ratio(times["ours"], times["PyTorch"])
                for name, seconds in times.items():
                    print(f"    {name:8s} {median_ms(seconds):9.1f} ms")
                print(f"    ours / PyTorch = {ratio:.2f}x   ({len(times['ours'])} rounds)")
                figures.append({"path": f"{label} training step", "threads": threads,
                                "against": "PyTorch eager", "ratio": ratio,
                                "rounds": len(times["ours"]),
                                "losses": [list(pair) for pair in pairs],
                                "median_ms": {n: median_ms(s) for n, s in times.items()}})
            if args.profile:
                profile = cProfile.Profile()
                profile.runcall(ours)
                pstats.Stats(profile).sort_stats("tottime").print_stats(20)
    if args.json:
        write_results(args.json, figures, sys.argv)


if __name__ == "__main__":
    main()
