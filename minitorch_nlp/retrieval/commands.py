"""The ``index`` command of ``minitorch-nlp`` (registered by ``cli.py``): build a passage index
from a text file and search it.

An index is a folder: ``index.json`` (what kind, how many passages), ``passages.json`` (the
texts, so that a search prints them) and the index itself, ``bm25.npz`` (BM25, the default) or
``vectors.npz`` (a :class:`~minitorch_nlp.retrieval.DenseIndex` of a DPR context encoder's
vectors; the encoder is a HuggingFace-format folder holding its tokenizer too). Searching a dense
index needs the matching question encoder folder.
"""
from __future__ import annotations

import argparse
import json
import os

from ..io.checkpoint import atomic_write

META, PASSAGES = "index.json", "passages.json"
FILES = {"bm25": "bm25.npz", "dense": "vectors.npz"}


def add_retrieval_commands(commands) -> None:
    """Add ``index build`` and ``index search`` to the sub-command parser ``commands``."""
    index = commands.add_parser(
        "index", help="build a passage index from a text file, or search one",
        description="'index build PASSAGES.txt --out DIR' indexes the passages (one per line, or "
        "--words-per-passage N words each) with BM25, or with a DPR context encoder "
        "(--encoder DIR); 'index search DIR QUERY' prints the best passages.")
    actions = index.add_subparsers(dest="action", required=True)
    build = actions.add_parser("build", help="index the passages of a text file")
    build.add_argument("passages", metavar="PASSAGES", help="a UTF-8 text file")
    build.add_argument("--out", required=True, metavar="DIR", help="the index folder to write")
    build.add_argument("--words-per-passage", type=int, metavar="N",
                       help="cut the text into passages of N words (default: one per line)")
    build.add_argument("--encoder", metavar="DIR",
                       help="a HuggingFace DPRContextEncoder folder with its tokenizer "
                            "(default: BM25, no encoder)")
    build.set_defaults(run=_build)
    search = actions.add_parser("search", help="print the best passages for a query")
    search.add_argument("index", metavar="DIR", help="a folder written by 'index build'")
    search.add_argument("query", metavar="QUERY")
    search.add_argument("-k", type=int, default=5, help="how many passages (5)")
    search.add_argument("--encoder", metavar="DIR",
                        help="the DPRQuestionEncoder folder (needed for a dense index)")
    search.set_defaults(run=_search)


def _usage(message):
    """A usage error: ``minitorch-nlp: error: ...`` on one line, exit status 2."""
    from ..cli import UsageError   # cli imports this module
    raise UsageError(message)


def _passages(args):
    from ..data.knowledge_base import split_passages
    if not os.path.isfile(args.passages):
        _usage(f"PASSAGES: {args.passages} is not a file")
    with open(args.passages, encoding="utf-8") as file:
        text = file.read()
    if args.words_per_passage is not None:
        if args.words_per_passage < 1:
            _usage(f"--words-per-passage must be >= 1, got {args.words_per_passage}")
        passages = split_passages(text, args.words_per_passage)
    else:
        passages = [line.strip() for line in text.splitlines() if line.strip()]
    if not passages:
        _usage(f"PASSAGES: {args.passages} holds no text to index")
    return passages


def _encoder(directory, option):
    """A DPR encoder and its tokenizer from a HuggingFace folder."""
    from ..data.tokenizers import load_tokenizer
    from ..io.huggingface import from_pretrained
    if not os.path.isdir(directory):
        _usage(f"{option}: {directory} is not a folder")
    return from_pretrained(directory), load_tokenizer(directory)


def _build(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from . import BM25, DenseRetriever
    passages = _passages(args)
    if args.encoder is None:
        kind, index = "bm25", BM25().fit(passages)
    else:
        encoder, tokenizer = _encoder(args.encoder, "--encoder")
        kind = "dense"
        index = DenseRetriever(None, encoder, tokenizer).index_passages(passages)
    os.makedirs(args.out, exist_ok=True)
    index.save(os.path.join(args.out, FILES[kind]))
    for name, content in ((PASSAGES, passages), (META, {"kind": kind, "size": len(passages)})):
        data = json.dumps(content, ensure_ascii=False).encode("utf-8")
        atomic_write(os.path.join(args.out, name), lambda file, data=data: file.write(data))
    print(f"indexed {len(passages)} passages ({kind}) in {args.out}")
    return 0


def _search(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from . import BM25, DenseRetriever, load_index
    meta_path = os.path.join(args.index, META)
    if not os.path.isfile(meta_path):
        _usage(f"DIR: {args.index} is not an index folder (no {META}); write one with "
                     "'index build'")
    if args.k < 1:
        _usage(f"-k must be >= 1, got {args.k}")
    with open(meta_path, encoding="utf-8") as file:
        kind = json.load(file).get("kind")
    with open(os.path.join(args.index, PASSAGES), encoding="utf-8") as file:
        passages = json.load(file)
    path = os.path.join(args.index, FILES.get(kind, ""))
    if kind == "bm25":
        scores, ids = BM25.load(path).search([args.query], min(args.k, len(passages)))
    elif kind == "dense":
        if args.encoder is None:
            _usage("--encoder: a dense index needs the DPRQuestionEncoder folder")
        encoder, tokenizer = _encoder(args.encoder, "--encoder")
        scores, ids = DenseRetriever(encoder, None, tokenizer).retrieve(
            [args.query], load_index(path), min(args.k, len(passages)))
    else:
        _usage(f"DIR: {meta_path} names an unknown index kind {kind!r}")
    for rank, (score, i) in enumerate(zip(scores[0], ids[0]), 1):
        text = passages[i] if len(passages[i]) <= 100 else passages[i][:97] + "..."
        print(f"{rank:>3}  {score:9.4f}  #{i:<6} {text}")
    return 0
