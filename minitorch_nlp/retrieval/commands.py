"""The ``index`` and ``ask`` commands of ``minitorch-nlp`` (registered by ``cli.py``): build a
passage index from a text file, search it, and answer a question from its best passages with an
extractive reader.

An index is a folder: ``index.json`` (what kind, how many passages), ``passages.json`` (the
texts, so that a search prints them) and the index itself, ``bm25.npz`` (BM25, the default) or
``vectors.npz`` (a :class:`~minitorch_nlp.retrieval.DenseIndex` of a DPR context encoder's
vectors; the encoder is a HuggingFace-format folder holding its tokenizer too). Searching a dense
index needs the matching question encoder folder. ``ask`` reads the retrieved passages with a
HuggingFace-format ``BertForQuestionAnswering`` folder (with its tokenizer) and prints the best
span.
"""
from __future__ import annotations

import argparse
import json
import os

from ..io.checkpoint import atomic_write

META, PASSAGES = "index.json", "passages.json"
FILES = {"bm25": "bm25.npz", "dense": "vectors.npz"}


def add_retrieval_commands(commands) -> None:
    """Add ``index build``, ``index search`` and ``ask`` to the sub-command parser ``commands``."""
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
    ask = commands.add_parser(
        "ask", help="answer a question from an index's best passages with a trained reader",
        description="'ask DIR --question Q --reader READER' retrieves the -k best passages of "
        "the index DIR and prints the span of them that the extractive reader (a HuggingFace "
        "BertForQuestionAnswering folder with its tokenizer) scores best.")
    ask.add_argument("index", metavar="DIR", help="a folder written by 'index build'")
    ask.add_argument("--question", required=True, metavar="Q")
    ask.add_argument("--reader", required=True, metavar="READER",
                     help="a BertForQuestionAnswering folder with its tokenizer")
    ask.add_argument("-k", type=int, default=3, help="how many passages to read (3)")
    ask.add_argument("--encoder", metavar="DIR",
                     help="the DPRQuestionEncoder folder (needed for a dense index)")
    ask.add_argument("--max-answer-length", type=int, default=30, metavar="N",
                     help="tokens per answer span (30)")
    ask.set_defaults(run=_ask)


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


def _retrieve(args, query):
    """The ``args.k`` best passages of the index folder ``args.index`` for ``query``:
    ``(scores, ids, passages)``."""
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
        scores, ids = BM25.load(path).search([query], min(args.k, len(passages)))
    elif kind == "dense":
        if args.encoder is None:
            _usage("--encoder: a dense index needs the DPRQuestionEncoder folder")
        encoder, tokenizer = _encoder(args.encoder, "--encoder")
        scores, ids = DenseRetriever(encoder, None, tokenizer).retrieve(
            [query], load_index(path), min(args.k, len(passages)))
    else:
        _usage(f"DIR: {meta_path} names an unknown index kind {kind!r}")
    return scores[0], ids[0], passages


def _shortened(text):
    return text if len(text) <= 100 else text[:97] + "..."


def _search(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    scores, ids, passages = _retrieve(args, args.query)
    for rank, (score, i) in enumerate(zip(scores, ids), 1):
        print(f"{rank:>3}  {score:9.4f}  #{i:<6} {_shortened(passages[i])}")
    return 0


def read_answer(reader, tokenizer, question, passages, max_answer_length=30):
    """The best answer span of ``passages`` for ``question`` under an extractive ``reader`` (a
    ``BertForQuestionAnswering``): ``(answer text, score, index of its passage)``, the score
    start_logit + end_logit of the span (Devlin section 4.2), spans within the passage only
    (which is cut to fit the reader's ``max_position_embeddings``)."""
    from ..models.bert import best_span
    batch = tokenizer([question] * len(passages), list(passages), padding=True,
                      truncation="only_second", max_length=reader.config.max_position_embeddings,
                      return_tensors="np", return_special_tokens_mask=True)
    allowed = (batch["token_type_ids"] == 1) & (batch["special_tokens_mask"] == 0) & \
        (batch["attention_mask"] == 1)
    with reader.inference():
        out = reader(batch["input_ids"], attention_mask=batch["attention_mask"],
                     token_type_ids=batch["token_type_ids"])
    starts, ends, scores = best_span(out.start_logits, out.end_logits, max_answer_length,
                                     allowed=allowed)
    best = int(scores.argmax())
    ids = batch["input_ids"][best, starts[best]:ends[best] + 1].tolist()
    return tokenizer.decode(ids, skip_special_tokens=True), float(scores[best]), best


def _ask(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from ..data.tokenizers import load_tokenizer
    from ..io.huggingface import from_pretrained
    from ..models.bert import BertForQuestionAnswering
    if not args.question.strip():
        _usage("--question is empty")
    if args.max_answer_length < 1:
        _usage(f"--max-answer-length must be >= 1, got {args.max_answer_length}")
    if not os.path.isdir(args.reader):
        _usage(f"--reader: {args.reader} is not a folder")
    reader = from_pretrained(args.reader)
    if not isinstance(reader, BertForQuestionAnswering):
        _usage(f"--reader: {args.reader} holds a {type(reader).__name__}, not a "
               "BertForQuestionAnswering")
    _, ids, passages = _retrieve(args, args.question)
    answer, score, which = read_answer(reader, load_tokenizer(args.reader), args.question,
                                       [passages[i] for i in ids], args.max_answer_length)
    passage = ids[which]
    print(f"{answer}\t(score {score:.4f}, passage #{passage}: {_shortened(passages[passage])})")
    return 0
