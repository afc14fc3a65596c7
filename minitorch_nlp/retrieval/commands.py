"""The ``index`` and ``ask`` commands of ``minitorch-nlp`` (registered by ``cli.entry``): build a
passage index from a text file, search it, and answer a question from its best passages with an
extractive reader.

An index is a folder: ``index.json`` (what kind, how many passages), ``passages.json`` (the
texts, so that a search prints them) and the index itself, ``bm25.npz`` (BM25, the default) or
``vectors.npz`` (a :class:`~minitorch_nlp.retrieval.DenseIndex` of a DPR context encoder's
vectors; the encoder is a HuggingFace-format folder holding its tokenizer too). Searching a dense
index needs the matching question encoder folder. ``ask`` reads the retrieved passages with a
HuggingFace-format ``BertForQuestionAnswering`` folder (with its tokenizer) and prints the best
span (``--reader``), or lets a saved :class:`~minitorch_nlp.retrieval.RAG` (``--model``, a folder
``RAG.save`` wrote) retrieve and write the answer.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

from ..cli.common import UsageError, owned_folder, refuse_overwrite
from ..data.corpus import TextFileError, read_text_file


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
    build.add_argument("--overwrite", action="store_true",
                       help="replace an index already in --out")
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
        "ask", help="answer a question from an index's best passages with a trained reader or "
        "RAG model",
        description="'ask DIR --question Q --reader READER' retrieves the -k best passages of "
        "the index DIR and prints the span of them that the extractive reader (a HuggingFace "
        "BertForQuestionAnswering folder with its tokenizer) scores best. 'ask DIR --question Q "
        "--model RAG_DIR' retrieves with the saved RAG's question encoder from DIR (a dense "
        "index of its passage encoder, e.g. RAG_DIR/index) and prints the answer its generator "
        "writes.")
    ask.add_argument("index", metavar="DIR", help="a folder written by 'index build'")
    ask.add_argument("--question", required=True, metavar="Q")
    answerer = ask.add_mutually_exclusive_group(required=True)
    answerer.add_argument("--reader", metavar="READER",
                          help="a BertForQuestionAnswering folder with its tokenizer")
    answerer.add_argument("--model", metavar="RAG_DIR", help="a folder written by RAG.save")
    ask.add_argument("-k", type=int, metavar="K",
                     help="how many passages to read (3 for a reader; a RAG's own n_docs)")
    ask.add_argument("--encoder", metavar="DIR",
                     help="the DPRQuestionEncoder folder (needed for a dense index and a reader)")
    ask.add_argument("--max-answer-length", type=int, default=30, metavar="N",
                     help="tokens per answer (30)")
    ask.add_argument("--kind", choices=("token", "sequence"), default="token",
                     help="RAG-Token or RAG-Sequence (thorough) decoding, with --model (token)")
    ask.add_argument("--beam-size", type=int, default=4, metavar="B",
                     help="beam size of RAG's decoding, with --model (4)")
    ask.set_defaults(run=_ask)


def _usage(message):
    """A usage error: ``minitorch-nlp: error: ...`` on one line, exit status 2."""
    raise UsageError(message)


def _passages(args):
    from ..data.knowledge_base import split_passages
    try:
        text = read_text_file(args.passages)
    except TextFileError as error:
        _usage(f"PASSAGES: {error}")
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
    from .index import save_index_folder
    from .index import INDEX_META
    passages = _passages(args)
    with owned_folder(args.out, "index build"):
        refuse_overwrite(args.out, args.overwrite, resumable=False, marker=INDEX_META,
                         what="an index")
        if args.encoder is None:
            kind, index = "bm25", BM25().fit(passages)
        else:
            encoder, tokenizer = _encoder(args.encoder, "--encoder")
            kind = "dense"
            index = DenseRetriever(None, encoder, tokenizer).index_passages(passages)
        save_index_folder(args.out, index, passages)
    print(f"indexed {len(passages)} passages ({kind}) in {args.out}")
    return 0


def _index_folder(args):
    """``(kind, index, passages)`` of the index folder ``args.index``."""
    from .index import load_index_folder
    try:
        return load_index_folder(args.index)
    except ValueError as error:
        _usage(f"DIR: {error}")


def _check_k(args):
    if args.k is not None and args.k < 1:
        _usage(f"-k must be >= 1, got {args.k}")


def _retrieve(args, query):
    """The ``args.k`` best passages of the index folder ``args.index`` for ``query``:
    ``(kind, scores, ids, passages)``, ``kind`` being the index's ("bm25" or "dense")."""
    from . import DenseRetriever
    kind, index, passages = _index_folder(args)
    _check_k(args)
    k = min(args.k, len(passages))
    if kind == "bm25":
        scores, ids = index.search([query], k)
    else:
        if args.encoder is None:
            _usage("--encoder: a dense index needs the DPRQuestionEncoder folder")
        encoder, tokenizer = _encoder(args.encoder, "--encoder")
        scores, ids = DenseRetriever(encoder, None, tokenizer).retrieve([query], index, k)
    return kind, scores[0], ids[0], passages


def _shortened(text):
    return text if len(text) <= 100 else text[:97] + "..."


def _search(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    kind, scores, ids, passages = _retrieve(args, args.query)
    if kind == "bm25" and not np.any(np.asarray(scores) > 0):   # BM25 scores shared words
        print(f"no passage of {args.index} shares a word with the query {args.query!r}")
        return 0
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
    if not args.question.strip():
        _usage("--question is empty")
    if args.max_answer_length < 1:
        _usage(f"--max-answer-length must be >= 1, got {args.max_answer_length}")
    return _ask_reader(args) if args.model is None else _ask_rag(args)


def _ask_reader(args):
    from ..data.tokenizers import load_tokenizer
    from ..io.huggingface import from_pretrained
    from ..models.bert import BertForQuestionAnswering
    if not os.path.isdir(args.reader):
        _usage(f"--reader: {args.reader} is not a folder")
    reader = from_pretrained(args.reader)
    if not isinstance(reader, BertForQuestionAnswering):
        _usage(f"--reader: {args.reader} holds a {type(reader).__name__}, not a "
               "BertForQuestionAnswering")
    args.k = 3 if args.k is None else args.k
    _, _, ids, passages = _retrieve(args, args.question)
    answer, score, which = read_answer(reader, load_tokenizer(args.reader), args.question,
                                       [passages[i] for i in ids], args.max_answer_length)
    passage = ids[which]
    print(f"{answer}\t(score {score:.4f}, passage #{passage}: {_shortened(passages[passage])})")
    return 0


def _ask_rag(args):
    """The answer of the RAG saved in ``args.model``, retrieving from the index folder
    ``args.index``, and the passages it read."""
    from .rag import RAG
    if args.beam_size < 1:
        _usage(f"--beam-size must be >= 1, got {args.beam_size}")
    _check_k(args)
    if not os.path.isdir(args.model):
        _usage(f"--model: {args.model} is not a folder")
    kind, _, _ = _index_folder(args)
    if kind != "dense":
        _usage(f"DIR: {args.index} holds a {kind} index; --model retrieves from a dense index of "
               f"the RAG's passage encoder, such as {os.path.join(args.model, 'index')}")
    try:
        rag = RAG.load(args.model, index=args.index)
    except ValueError as error:
        _usage(f"--model: {error}")
    rag.n_docs = rag.n_docs if args.k is None else min(args.k, len(rag.passages))
    answer = rag.generate([args.question], args.kind, beam_size=args.beam_size,
                          max_len=args.max_answer_length)[0]
    ids, _ = rag.retrieve([args.question])
    print(f"{answer}\t(RAG-{args.kind.capitalize()}, passages "
          + ", ".join(f"#{i}" for i in ids[0]) + ")")
    return 0
