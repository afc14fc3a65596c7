"""Section VII's vector index and BM25 baseline, and the synthetic knowledge base.

Exact search equals the argsort of the full score matrix (for any block size, on numpy and
numba), faiss flat search equals exact search, IVF / HNSW find most true neighbours, save / load
round trips (never unpickled, damaged files refused), BM25 agrees with ``bm25s``; bad input.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

from minitorch_nlp.data import knowledge_base, split_passages
from minitorch_nlp.retrieval import BM25, DenseIndex, FaissIndex, load_index, tokenize, top_k

pytestmark = pytest.mark.sec7


@st.composite
def corpus_and_queries(draw):
    n, dim, queries = (draw(st.integers(1, 40)), draw(st.integers(1, 6)),
                       draw(st.integers(1, 4)))
    # distinct scores: integer-valued vectors plus a tiny distinct offset per passage
    elements = st.integers(-4, 4).map(float)
    passages = draw(hnp.arrays(np.float64, (n, dim), elements=elements))
    passages[:, 0] += np.arange(n) * 1e-3
    q = draw(hnp.arrays(np.float64, (queries, dim), elements=elements))
    q[:, 0] = np.where(q[:, 0] == 0, 1.0, q[:, 0])
    return passages.astype(np.float32), q.astype(np.float32), draw(st.integers(1, n))


@given(corpus_and_queries(), st.integers(1, 9), st.sampled_from(["numpy", "numba"]))
def test_exact_search_equals_argsort_of_the_full_score_matrix(case, block_size, backend):
    passages, queries, k = case
    index = DenseIndex(passages.shape[1], backend=backend, block_size=block_size).add(passages)
    scores, ids = index.search(queries, k)
    full = queries.astype(np.float64) @ passages.T.astype(np.float64)
    expected = np.argsort(-full, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(ids, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(full, expected, 1), rtol=1e-5,
                               atol=1e-5)


@given(st.integers(1, 30), st.integers(1, 4), st.integers(1, 3), st.integers(1, 7),
       st.data())
def test_numba_merge_kernel_keeps_equal_scores_in_id_order(n, dim, queries, block_size, data):
    # small integer vectors: many exactly equal scores, all exact in float32
    elements = st.integers(-2, 2).map(float)
    passages = data.draw(hnp.arrays(np.float32, (n, dim), elements=elements))
    q = data.draw(hnp.arrays(np.float32, (queries, dim), elements=elements))
    k = data.draw(st.integers(1, n))
    index = DenseIndex(dim, backend="numba", block_size=block_size).add(passages)
    scores, ids = index.search(q, k)
    full = q.astype(np.float64) @ passages.T.astype(np.float64)
    expected = np.argsort(-full, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(ids, expected)
    np.testing.assert_array_equal(scores, np.take_along_axis(full, expected, 1))


@pytest.mark.parametrize("parallel", [False, True])
def test_merge_top_k_kernel_in_two_blocks_equals_argsort(parallel):
    from minitorch_nlp.backends import numba_kernels
    rng = np.random.default_rng(0)
    scores = rng.integers(-3, 4, size=(37, 50)).astype(np.float32)   # ties in every row
    best_scores = np.full((37, 6), -np.inf, dtype=np.float32)
    best_ids = np.full((37, 6), -1, dtype=np.int64)
    for start in (0, 20):
        block = np.ascontiguousarray(scores[:, start:start + 20 if start == 0 else None])
        numba_kernels.merge_top_k(parallel, best_scores, best_ids, block, start)
    expected = np.argsort(-scores, axis=1, kind="stable")[:, :6]
    np.testing.assert_array_equal(best_ids, expected)
    np.testing.assert_array_equal(best_scores, np.take_along_axis(scores, expected, 1))


def test_search_never_builds_a_queries_by_corpus_block_larger_than_block_size(monkeypatch):
    seen = []
    real = top_k

    def spy(scores, k, xp=np):
        seen.append(scores.shape)
        return real(scores, k, xp)

    monkeypatch.setattr("minitorch_nlp.retrieval.index.top_k", spy)
    rng = np.random.default_rng(0)
    DenseIndex(4, block_size=10).add(rng.normal(size=(95, 4))).search(rng.normal(size=(3, 4)), 5)
    assert len(seen) == 10 and max(cols for _, cols in seen) <= 10 + 5


def test_top_k_of_a_row_with_k_equal_to_its_length_sorts_it():
    values, ids = top_k(np.array([[0.5, 2.0, -1.0]]), 3)
    np.testing.assert_array_equal(ids, [[1, 0, 2]])
    np.testing.assert_array_equal(values, [[2.0, 0.5, -1.0]])


def test_add_appends_and_reset_replaces():
    index = DenseIndex(2).add([[1.0, 0.0]]).add(np.array([[0.0, 1.0], [2.0, 2.0]]))
    assert len(index) == 3
    assert index.search([[1.0, 0.0]], 1)[1].tolist() == [[2]]
    index.reset([[0.0, 5.0]])
    assert len(index) == 1 and index.search([[0.0, 1.0]], 1)[1].tolist() == [[0]]


def test_bad_input_is_refused_with_a_clear_message():
    index = DenseIndex(3)
    with pytest.raises(ValueError, match="the index is empty"):
        index.search(np.ones((1, 3)), 1)
    index.add(np.eye(3))
    with pytest.raises(ValueError, match="width 2 but the index holds 3-dimensional"):
        index.search(np.ones((1, 2)), 1)
    with pytest.raises(ValueError, match="width 4 but the index holds 3"):
        index.add(np.ones((2, 4)))
    with pytest.raises(ValueError, match="k must be a positive int, got 0"):
        index.search(np.ones((1, 3)), 0)
    with pytest.raises(ValueError, match="nan or inf"):
        index.add([[np.nan, 0, 0]])
    with pytest.raises(ValueError, match="dim must be a positive int"):
        DenseIndex(0)


def test_k_larger_than_the_index_is_clamped_with_a_warning():
    index = DenseIndex(2).add(np.eye(2))
    with pytest.warns(UserWarning, match="k=5 is larger than the index .2 vectors"):
        scores, ids = index.search([[1.0, 0.5]], 5)
    assert ids.tolist() == [[0, 1]]


def test_dense_index_save_load_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    index = DenseIndex(5).add(rng.normal(size=(30, 5)))
    path = str(tmp_path / "index.npz")
    index.save(path)
    loaded = load_index(path, backend="numba")
    assert isinstance(loaded, DenseIndex) and loaded.backend.name == "numba"
    np.testing.assert_array_equal(loaded.vectors, index.vectors)
    queries = rng.normal(size=(4, 5))
    np.testing.assert_array_equal(loaded.search(queries, 7)[1], index.search(queries, 7)[1])


def test_corrupted_or_foreign_index_files_are_refused(tmp_path):
    index = DenseIndex(2).add(np.eye(2))
    path = tmp_path / "index.npz"
    index.save(str(path))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="not a minitorch_nlp checkpoint"):
        load_index(str(path))
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, __header__=np.array([object()], dtype=object))
    with pytest.raises(ValueError, match="allow_pickle=False"):
        load_index(str(pickled))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_index(str(tmp_path / "missing.npz"))
    from minitorch_nlp.io import save
    save({"weights": np.eye(2)}, str(tmp_path / "other.npz"))
    with pytest.raises(ValueError, match="not a minitorch_nlp index"):
        load_index(str(tmp_path / "other.npz"))
    save({"format": "minitorch_nlp.index", "kind": "exact", "dim": 3, "vectors": np.eye(2)},
         str(tmp_path / "shape.npz"))
    with pytest.raises(ValueError, match=r"vectors of shape \(2, 2\), not \(n, 3\)"):
        load_index(str(tmp_path / "shape.npz"))


# ---- faiss ---------------------------------------------------------------------------------

@given(corpus_and_queries())
def test_faiss_flat_search_equals_exact_search(case):
    pytest.importorskip("faiss")
    passages, queries, k = case
    exact = DenseIndex(passages.shape[1]).add(passages).search(queries, k)
    flat = FaissIndex(passages.shape[1], "flat").add(passages).search(queries, k)
    np.testing.assert_array_equal(flat[1], exact[1])
    np.testing.assert_allclose(flat[0], exact[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_approximate_faiss_search_finds_most_true_neighbours(kind):
    pytest.importorskip("faiss")
    rng = np.random.default_rng(0)
    passages, queries = rng.normal(size=(2000, 16)), rng.normal(size=(50, 16))
    exact = DenseIndex(16).add(passages).search(queries, 10)[1]
    found = FaissIndex(16, kind, nlist=16, nprobe=4).add(passages).search(queries, 10)[1]
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, exact)])
    assert recall > 0.6


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_faiss_save_load_round_trip_and_damage(kind, tmp_path):
    pytest.importorskip("faiss")
    rng = np.random.default_rng(2)
    index = FaissIndex(8, kind, nlist=4).add(rng.normal(size=(100, 8)))
    path = str(tmp_path / "faiss.npz")
    index.save(path)
    loaded = load_index(path)
    assert isinstance(loaded, FaissIndex) and loaded.kind == kind and len(loaded) == 100
    queries = rng.normal(size=(3, 8))
    np.testing.assert_array_equal(loaded.search(queries, 5)[1], index.search(queries, 5)[1])
    from minitorch_nlp.io import load, save
    state = load(path)
    state["faiss"] = state["faiss"][:40]
    save(state, path)
    with pytest.raises(ValueError, match="damaged faiss index"):
        load_index(path)


def test_faiss_bad_input():
    pytest.importorskip("faiss")
    with pytest.raises(ValueError, match="kind must be one of"):
        FaissIndex(4, "lsh")
    index = FaissIndex(4, "ivf", nlist=8)
    with pytest.raises(ValueError, match="nlist=8 cells needs at least that many"):
        index.add(np.ones((3, 4)))
    with pytest.raises(ValueError, match="the index is empty"):
        FaissIndex(4).search(np.ones((1, 4)), 1)
    with pytest.raises(ValueError, match="width 3 but the index holds 4"):
        FaissIndex(4).add(np.eye(4)).search(np.ones((1, 3)), 1)


# ---- BM25 ----------------------------------------------------------------------------------

DOCS = ["The cat sat on the mat.", "Dogs chase cats in the park.", "A cat and a dog.",
        "mat mat mat", "Nothing to see here."]


def test_bm25_by_hand():
    bm25 = BM25(k1=1.2, b=0.75).fit(["a b", "b b c"])
    avgdl, n = 2.5, 2
    idf = {"a": np.log1p((n - 1 + 0.5) / 1.5), "b": np.log1p((n - 2 + 0.5) / 2.5)}

    def term(tf, length, word):
        return idf[word] * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / avgdl))

    np.testing.assert_allclose(bm25.scores("a b"), [term(1, 2, "a") + term(1, 2, "b"),
                                                    term(2, 3, "b")])
    np.testing.assert_allclose(bm25.scores("b b"), 2 * bm25.scores("b"))
    np.testing.assert_array_equal(bm25.scores("unknown words"), [0.0, 0.0])


def test_bm25_agrees_with_bm25s():
    bm25s = pytest.importorskip("bm25s")
    ours = BM25().fit(DOCS)
    theirs = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    theirs.index([tokenize(d) for d in DOCS], show_progress=False)
    for query in ["cat mat", "dog park", "the"]:
        np.testing.assert_allclose(ours.scores(query) / 2.5,
                                   theirs.get_scores(tokenize(query)), rtol=1e-5)


def test_bm25_search_save_load_and_errors(tmp_path):
    bm25 = BM25().fit(DOCS)
    scores, ids = bm25.search(["cat on the mat", "dogs"], 2)
    assert ids[0, 0] == 0 and ids[1, 0] == 1 and scores.shape == (2, 2)
    path = str(tmp_path / "bm25.npz")
    bm25.save(path)
    np.testing.assert_allclose(BM25.load(path).scores("cat mat"), bm25.scores("cat mat"))
    with pytest.raises(ValueError, match="the corpus is empty"):
        BM25().fit([])
    with pytest.raises(ValueError, match="the index is empty"):
        BM25().search(["cat"], 1)
    with pytest.raises(TypeError, match="wrap one in"):
        bm25.search("cat", 1)
    with pytest.raises(TypeError, match="a str or a list of words, got int"):
        bm25.scores(3)
    with pytest.raises(ValueError, match="k1 >= 0 and 0 <= b <= 1"):
        BM25(b=2)
    DenseIndex(2).add(np.eye(2)).save(path)
    with pytest.raises(ValueError, match="not a BM25 index"):
        BM25.load(path)


# ---- the knowledge base --------------------------------------------------------------------

def test_knowledge_base_answers_are_spans_of_the_last_gold_passage():
    kb = knowledge_base(n_people=30, n_cities=9, seed=3)
    assert len(kb.passages) == 39 and len(kb.questions) == 5 * 30 + 2 * 9
    assert [p.id for p in kb.passages] == list(range(39))
    for question in kb.questions:
        text = kb.passages[question.passage_ids[-1]].text
        start = question.answer_start
        assert text[start:start + len(question.answer)] == question.answer
        assert text.count(question.answer) == 1
    two_hop = kb.questions_with(2)
    assert len(two_hop) == 60
    for question in two_hop:
        first, second = (kb.passages[i] for i in question.passage_ids)
        assert question.bridge in first.text and second.title == question.bridge
        assert question.bridge not in question.text


def test_knowledge_base_is_deterministic_and_seeded():
    assert knowledge_base(seed=1) == knowledge_base(seed=1)
    assert knowledge_base(seed=1).texts != knowledge_base(seed=2).texts
    with pytest.raises(ValueError, match="n_people must be a positive int"):
        knowledge_base(n_people=0)


def test_bm25_finds_the_single_hop_passage_but_not_the_second_hop():
    kb = knowledge_base()
    bm25 = BM25().fit(kb.texts)
    single = kb.questions_with(1)
    _, ids = bm25.search([q.text for q in single], 1)
    assert np.mean([q.passage_ids[0] == i for q, i in zip(single, ids[:, 0])]) > 0.9
    two_hop = kb.questions_with(2)
    _, ids = bm25.search([q.text for q in two_hop], 5)
    assert np.mean([q.passage_ids[1] in row for q, row in zip(two_hop, ids)]) < 0.5


def test_split_passages():
    assert split_passages("a b c d e", 2) == ["a b", "c d", "e"]
    assert split_passages("  ", 3) == []
    with pytest.raises(ValueError, match="words_per_passage must be a positive int"):
        split_passages("a", 0)
    with pytest.raises(TypeError, match="expected a str"):
        split_passages(["a"], 2)



def test_index_folders_round_trip_and_refuse_a_broken_folder(tmp_path):
    from minitorch_nlp.retrieval import load_index_folder, save_index_folder
    passages = ["the cat sat", "a dog ran", "cats and dogs"]
    vectors = np.arange(12.0).reshape(3, 4)
    save_index_folder(tmp_path / "dense", DenseIndex(4).add(vectors), passages)
    kind, index, texts = load_index_folder(tmp_path / "dense")
    assert kind == "dense" and texts == passages
    np.testing.assert_array_equal(index.vectors, vectors)
    save_index_folder(tmp_path / "bm25", BM25().fit(passages), passages)
    kind, index, texts = load_index_folder(tmp_path / "bm25")
    assert kind == "bm25" and texts == passages and index.search(["dog"], 1)[1][0, 0] == 1
    with pytest.raises(ValueError, match="the index holds 3 passages but 2 texts"):
        save_index_folder(tmp_path / "x", DenseIndex(4).add(vectors), passages[:2])
    with pytest.raises(TypeError, match="expected a BM25 or a DenseIndex, got ndarray"):
        save_index_folder(tmp_path / "x", vectors, passages)
    with pytest.raises(ValueError, match="is not an index folder .no index.json"):
        load_index_folder(tmp_path)
    (tmp_path / "dense" / "passages.json").unlink()
    with pytest.raises(ValueError, match="an index folder without passages.json"):
        load_index_folder(tmp_path / "dense")
    (tmp_path / "bm25" / "passages.json").write_text('["only one"]')
    with pytest.raises(ValueError, match="the index holds 3 passages but passages.json 1"):
        load_index_folder(tmp_path / "bm25")
    (tmp_path / "bm25" / "index.json").write_text('{"kind": "sparse"}')
    with pytest.raises(ValueError, match="names an unknown index kind 'sparse'"):
        load_index_folder(tmp_path / "bm25")
