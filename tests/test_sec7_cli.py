"""``minitorch-nlp index build|search`` (BM25 and DPR indexes of a text file) and ``ask`` (a
trained reader over the retrieved passages), and their errors."""
from __future__ import annotations

import re

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp import cli
from minitorch_nlp.data import knowledge_base
from minitorch_nlp.data.tokenizers import WordPieceTokenizer
from minitorch_nlp.models.bert import BertConfig, BertForQuestionAnswering
from minitorch_nlp.models.dpr import DPRConfig, DPRContextEncoder, DPRQuestionEncoder
from minitorch_nlp.retrieval import BM25, DenseRetriever
from minitorch_nlp.retrieval.commands import read_answer
from tests.model_checks import overfit

pytestmark = pytest.mark.sec7

LINES = ["the cat sat on the mat", "dogs chase cats in the park", "", "a cat and a dog"]


@pytest.fixture
def passages(tmp_path):
    path = tmp_path / "passages.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def test_bm25_index_build_and_search(passages, tmp_path, capsys):
    out = tmp_path / "index"
    assert cli.main(["index", "build", str(passages), "--out", str(out)]) == 0
    assert "indexed 3 passages (bm25)" in capsys.readouterr().out
    assert cli.main(["index", "search", str(out), "cat on the mat", "-k", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0].split()[2] == "#0" and "the cat sat" in lines[0]


def test_words_per_passage_cuts_the_text(passages, tmp_path, capsys):
    out = tmp_path / "index"
    assert cli.main(["index", "build", str(passages), "--out", str(out),
                     "--words-per-passage", "4"]) == 0
    assert "indexed 5 passages" in capsys.readouterr().out


def test_dense_index_with_dpr_encoders_ranks_as_the_retriever(passages, tmp_path, capsys):
    pytest.importorskip("safetensors")
    tokenizer = WordPieceTokenizer.train([line for line in LINES if line], 80, min_frequency=1)
    mt.manual_seed(0)
    config = DPRConfig.tiny(len(tokenizer), projection_dim=8, initializer_range=0.2)
    folders = {}
    for name, model in (("q", DPRQuestionEncoder(config)), ("ctx", DPRContextEncoder(config))):
        folders[name] = tmp_path / name
        mt.save_pretrained(model, folders[name])
        tokenizer.save(folders[name])
    out = tmp_path / "dense"
    assert cli.main(["index", "build", str(passages), "--out", str(out),
                     "--encoder", str(folders["ctx"])]) == 0
    capsys.readouterr()
    assert cli.main(["index", "search", str(out), "a dog", "-k", "3",
                     "--encoder", str(folders["q"])]) == 0
    printed = [int(line.split()[2][1:]) for line in capsys.readouterr().out.splitlines()]
    retriever = DenseRetriever(mt.from_pretrained(folders["q"]),
                               mt.from_pretrained(folders["ctx"]), tokenizer)
    texts = [line for line in LINES if line]
    _, ids = retriever.retrieve(["a dog"], retriever.index_passages(texts), 3)
    assert printed == ids[0].tolist()


def test_errors_are_one_line_naming_the_option(passages, tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\u00e9 au lait".encode("latin-1"))
    out = str(tmp_path / "index")
    cases = [
        (["index", "build", str(tmp_path / "missing.txt"), "--out", out],
         "PASSAGES: .* does not exist"),
        (["index", "build", str(empty), "--out", out], "holds no text"),
        (["index", "build", str(latin1), "--out", out],
         "PASSAGES: .*latin1.txt is not UTF-8 text \\(byte 0xe9 at offset 3\\)"),
        (["index", "build", str(passages), "--out", str(passages)], "--out .* is a file"),
        (["index", "build", str(passages), "--out", out, "--words-per-passage", "0"],
         "--words-per-passage must be >= 1"),
        (["index", "build", str(passages), "--out", out, "--encoder", str(tmp_path / "no")],
         "--encoder: .* is not a folder"),
        (["index", "search", str(tmp_path), "cat"], "is not an index folder"),
    ]
    for argv, message in cases:
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("minitorch-nlp: error:") and err.count("\n") == 1
        assert re.search(message, err), (argv, err)
    cli.main(["index", "build", str(passages), "--out", out])
    capsys.readouterr()
    assert cli.main(["index", "search", out, "cat", "-k", "0"]) == 2
    assert "-k must be >= 1" in capsys.readouterr().err
    assert cli.main(["index", "build", str(passages), "--out", out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already holds an index" in err and "--overwrite" in err
    assert cli.main(["index", "build", str(passages), "--out", out, "--overwrite"]) == 0


def test_a_query_that_matches_no_word_says_so(passages, tmp_path, capsys):
    out = str(tmp_path / "index")
    assert cli.main(["index", "build", str(passages), "--out", out]) == 0
    capsys.readouterr()
    assert cli.main(["index", "search", out, "zzyzx qwxv"]) == 0
    printed = capsys.readouterr().out
    assert "shares a word with the query" in printed and "#" not in printed


@pytest.fixture(scope="module")
def trained_reader(tmp_path_factory):
    """A tiny BertForQuestionAnswering trained on four knowledge-base questions, saved with its
    tokenizer; the knowledge base's passages as a text file."""
    pytest.importorskip("safetensors")
    kb = knowledge_base(n_people=4, n_cities=2, seed=2)
    tokenizer = WordPieceTokenizer.train(kb.texts + [q.text for q in kb.questions], 200)
    questions = kb.questions_with(1)[:4]
    pairs = tokenizer([q.text for q in questions], [kb.texts[q.passage_ids[0]] for q in questions],
                      padding=True, return_tensors="np")
    starts, ends = [], []
    for row, question in zip(pairs["input_ids"], questions):
        answer = tokenizer.encode(question.answer, add_special_tokens=False)
        start = next(i for i in range(len(row)) if row[i:i + len(answer)].tolist() == answer)
        starts.append(start)
        ends.append(start + len(answer) - 1)
    mt.manual_seed(0)
    reader = BertForQuestionAnswering(BertConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=128, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, initializer_range=0.2))
    overfit(reader, lambda: reader(**pairs, start_positions=np.array(starts),
                                   end_positions=np.array(ends)).loss, 40)
    folder = tmp_path_factory.mktemp("reader")
    mt.save_pretrained(reader, folder)
    tokenizer.save(folder)
    text = tmp_path_factory.mktemp("kb") / "kb.txt"
    text.write_text("\n".join(kb.texts) + "\n", encoding="utf-8")
    return folder, text, questions, reader, tokenizer


def test_ask_answers_from_the_retrieved_passages_with_the_trained_reader(trained_reader, tmp_path,
                                                                        capsys):
    folder, text, questions, reader, tokenizer = trained_reader
    out = tmp_path / "index"
    assert cli.main(["index", "build", str(text), "--out", str(out)]) == 0
    passages = [line for line in text.read_text(encoding="utf-8").splitlines() if line]
    bm25 = BM25().fit(passages)
    for question in questions:
        for k in (1, 2):
            capsys.readouterr()
            assert cli.main(["ask", str(out), "--question", question.text, "--reader",
                             str(folder), "-k", str(k)]) == 0
            printed = capsys.readouterr().out.strip()
            retrieved = bm25.search([question.text], k)[1][0]
            answer, score, which = read_answer(reader, tokenizer, question.text,
                                               [passages[i] for i in retrieved])
            assert printed.startswith(f"{answer}\t(score {score:.4f}, passage "
                                      f"#{retrieved[which]}: ")
            if k == 1:   # the reader was trained on gold passages only, which BM25 ranks first
                assert answer == question.answer.lower(), (question, printed)


def test_ask_errors_are_one_line_naming_the_option(trained_reader, passages, tmp_path, capsys):
    folder = trained_reader[0]
    out = str(tmp_path / "index")
    cli.main(["index", "build", str(passages), "--out", out])
    not_a_reader = tmp_path / "dpr"
    mt.manual_seed(0)
    mt.save_pretrained(DPRQuestionEncoder(DPRConfig.tiny(30)), not_a_reader)
    cases = [
        (["ask", out, "--question", " ", "--reader", str(folder)], "--question is empty"),
        (["ask", out, "--question", "cat?", "--reader", str(tmp_path / "no")],
         "--reader: .* is not a folder"),
        (["ask", out, "--question", "cat?", "--reader", str(not_a_reader)],
         "--reader: .* holds a DPRQuestionEncoder, not a BertForQuestionAnswering"),
        (["ask", out, "--question", "cat?", "--reader", str(folder), "-k", "0"],
         "-k must be >= 1"),
        (["ask", out, "--question", "cat?", "--reader", str(folder), "--max-answer-length", "0"],
         "--max-answer-length must be >= 1"),
        (["ask", str(tmp_path), "--question", "cat?", "--reader", str(folder)],
         "is not an index folder"),
    ]
    capsys.readouterr()
    for argv, message in cases:
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("minitorch-nlp: error:") and err.count("\n") == 1, err
        assert re.search(message, err), (argv, err)
