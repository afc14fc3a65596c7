"""``minitorch-nlp index build|search``: BM25 and DPR indexes of a text file, and the errors."""
from __future__ import annotations

import re

import pytest

import minitorch_nlp as mt
from minitorch_nlp import cli
from minitorch_nlp.data.tokenizers import WordPieceTokenizer
from minitorch_nlp.models.dpr import DPRConfig, DPRContextEncoder, DPRQuestionEncoder
from minitorch_nlp.retrieval import DenseRetriever

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
    out = str(tmp_path / "index")
    cases = [
        (["index", "build", str(tmp_path / "missing.txt"), "--out", out], "PASSAGES: .* is not a"),
        (["index", "build", str(empty), "--out", out], "holds no text"),
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
