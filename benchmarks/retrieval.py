"""Retrieval speed: exact inner-product search on our backends against faiss, faiss's approximate
indexes against exact search, and passage encoding against HuggingFace transformers.

    python benchmarks/retrieval.py [--threads 1 2] [--passages 100000] [--repeats 5]
                                   [--budget 30] [--only search|approximate|encoding]

Three comparisons, each at every thread count given (OpenBLAS, Numba, faiss's OpenMP and PyTorch
get the same count), runners interleaved in one process, medians and the median per-round ratio:

* search: ``DenseIndex`` on the numpy and numba backends against faiss ``IndexFlatIP``
  (``FaissIndex("flat")``), ``--passages`` random unit vectors of 128 dimensions, 256 queries,
  k = 10; the ids are checked equal before timing; queries per second.
* approximate: recall@10 against exact search and queries per second of faiss IVF (1024 cells,
  nprobe 8 and 32) and HNSW (m 32, ef_search 64 and 128).
* encoding: passages per second of our ``DPRContextEncoder`` (from ``mt.from_pretrained`` of a
  randomly initialised HuggingFace ``DPRContextEncoder``, BERT with 4 layers, d 256, 4 heads)
  against HuggingFace's on PyTorch CPU, 128 passages of 128 tokens in batches of 32; the
  vectors are checked equal (1e-4) before timing. Skipped without torch and transformers.

Needs faiss-cpu (``pip install 'minitorch-nlp[retrieval]'``); torch and transformers only for
the encoding part, from a throw-away virtual environment, never a dependency of the library.
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
from minitorch_nlp.retrieval import DenseIndex, FaissIndex  # noqa: E402

DIM, QUERIES, K = 128, 256, 10


def unit_vectors(rng, rows):
    x = rng.normal(size=(rows, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def search_section(args, passages, queries):
    runners, indexes = {}, {"numpy": DenseIndex(DIM, backend="numpy").add(passages),
                            "numba": DenseIndex(DIM, backend="numba").add(passages),
                            "faiss flat": FaissIndex(DIM, "flat").add(passages)}
    expected = indexes["numpy"].search(queries, K)[1]
    for name, index in indexes.items():
        found = index.search(queries, K)[1]
        # float32 sums in another order may swap two nearly equal neighbours
        assert np.mean(found == expected) > 0.999, name
        runners[name] = lambda index=index: index.search(queries, K)
    times = interleaved(runners, args.repeats, args.budget)
    print(f"  exact search, {len(passages)} x {DIM} passages, {QUERIES} queries, k = {K}")
    for name in runners:
        print(f"    {name:12} {median_ms(times[name]):9.1f} ms  "
              f"{QUERIES / (median_ms(times[name]) / 1e3):10.0f} queries/s  "
              f"{median_ratio(times[name], times['faiss flat']):6.2f}x faiss flat")


def approximate_section(args, passages, queries):
    exact = DenseIndex(DIM).add(passages).search(queries, K)[1]
    flat = FaissIndex(DIM, "flat").add(passages)
    ivf = FaissIndex(DIM, "ivf", nlist=1024).add(passages)
    hnsw = FaissIndex(DIM, "hnsw", m=32).add(passages)
    variants = {"flat": (flat, None), "ivf nprobe 8": (ivf, 8), "ivf nprobe 32": (ivf, 32),
                "hnsw ef 64": (hnsw, 64), "hnsw ef 128": (hnsw, 128)}
    runners, recalls = {}, {}
    for name, (index, setting) in variants.items():
        def run(index=index, setting=setting):
            if index.kind == "ivf":
                index._index.nprobe = setting
            elif index.kind == "hnsw":
                index._index.hnsw.efSearch = setting
            return index.search(queries, K)
        found = run()[1]
        recalls[name] = np.mean([len(set(a) & set(b)) / K for a, b in zip(found, exact)])
        runners[name] = run
    times = interleaved(runners, args.repeats, args.budget)
    print(f"  approximate search against exact, recall@{K}")
    for name in runners:
        print(f"    {name:14} recall {recalls[name]:.3f}  {median_ms(times[name]):8.1f} ms  "
              f"{median_ratio(times['flat'], times[name]):6.1f}x faster than flat")


def encoding_section(args):
    try:
        import torch
        import transformers
    except ImportError:
        print("  encoding: skipped (needs torch and transformers)")
        return
    config = transformers.DPRConfig(vocab_size=30522, hidden_size=256, num_hidden_layers=4,
                                    num_attention_heads=4, intermediate_size=1024)
    theirs = transformers.DPRContextEncoder(config).eval()
    with tempfile.TemporaryDirectory() as folder:
        theirs.save_pretrained(folder)
        ours = mt.from_pretrained(folder, backend="numba")
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30000, size=(128, 128))
    batches = [ids[i:i + 32] for i in range(0, len(ids), 32)]

    def run_ours():
        with mt.no_grad():
            return np.concatenate([ours(b).pooler_output.numpy() for b in batches])

    def run_theirs():
        with torch.no_grad():
            return np.concatenate([theirs(torch.as_tensor(b)).pooler_output.numpy()
                                   for b in batches])

    assert np.abs(run_ours() - run_theirs()).max() < 1e-4
    times = interleaved({"ours (numba)": run_ours, "HuggingFace": run_theirs}, args.repeats,
                        args.budget)
    print("  passage encoding, BERT 4 x 256, 128 passages of 128 tokens, batches of 32")
    for name in times:
        print(f"    {name:14} {median_ms(times[name]):9.1f} ms  "
              f"{len(ids) / (median_ms(times[name]) / 1e3):8.1f} passages/s  "
              f"{median_ratio(times[name], times['HuggingFace']):6.2f}x HuggingFace")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=30.0, help="seconds per comparison")
    parser.add_argument("--only", choices=["search", "approximate", "encoding"])
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    passages, queries = unit_vectors(rng, args.passages), unit_vectors(rng, QUERIES)
    for threads in args.threads:
        print(pin_threads(threads))
        if args.only != "encoding":
            import faiss
            faiss.omp_set_num_threads(threads)
        if args.only in (None, "search"):
            search_section(args, passages, queries)
        if args.only in (None, "approximate"):
            approximate_section(args, passages, queries)
        if args.only in (None, "encoding"):
            encoding_section(args)


if __name__ == "__main__":
    main()
