"""Maximum inner product search (MIPS): the vector index that DPR, ORQA, REALM and RAG retrieve
from.

Every retriever of section VII scores a passage z for a query x by an inner product of two
vectors, f(x, z) = q(x)^T d(z) (eq 66, 72, 83), and keeps the k best passages. Two indexes share
one interface, ``add(vectors)``, ``search(queries, k) -> (scores, ids)``, ``save(path)`` and
``load(path)``:

* :class:`DenseIndex`: exact search on the active backend (NumPy, Numba or CuPy arrays): the
  queries meet the passages one block of ``block_size`` rows at a time, and each block's k best
  merge with the running k best, so memory stays O(queries x (block_size + k)), never
  queries x passages (nor passages x passages);
* :class:`FaissIndex`: the same search through ``faiss-cpu`` (the ``retrieval`` extra): ``flat``
  (exact), ``ivf`` (inverted lists over k-means cells, Jegou et al. 2011) or ``hnsw``
  (hierarchical navigable small-world graphs, Malkov and Yashunin 2018), approximate and much
  faster on large corpora.

``k`` larger than the index is clamped to its size with a warning (so that ``k = |Z|`` is the
whole corpus, as the marginals of eq 73 and 81-82 want); an empty index, queries of the wrong
width and a non-positive ``k`` are errors. ``save`` writes one ``.npz`` checkpoint through
:mod:`minitorch_nlp.io` (never pickled); ``load`` refuses a file that is not an index.

An *index folder* (what ``minitorch-nlp index build`` writes, and what a saved RAG points to)
keeps an index with its passages: ``index.json`` (its kind, ``"bm25"`` or ``"dense"``, and the
number of passages), ``passages.json`` (the texts) and the index, ``bm25.npz`` or
``vectors.npz``: :func:`save_index_folder` and :func:`load_index_folder`.
"""
from __future__ import annotations

import os

import numpy as np

from .. import checks
from ..backends import get_backend
from ..io import checkpoint
from ..data.tokenizers.base import read_json, write_json
from .bm25 import BM25
from .ranking import clamp_k, top_k

__all__ = ["DenseIndex", "FaissIndex", "load_index", "load_index_folder", "save_index_folder"]

FORMAT = "minitorch_nlp.index"
FAISS_KINDS = ("flat", "ivf", "hnsw")


def _matrix(values, width, name, where):
    """``values`` as a float32 NumPy array (rows, ``width``); one row is accepted as (width,)."""
    array = np.asarray(values.numpy() if hasattr(values, "numpy") else values)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.dtype.kind not in "fiu":
        raise ValueError(f"{where}: {name} must be a 2-D array of numbers (rows, {width}), got "
                         f"{array.dtype} of shape {array.shape}")
    if width is not None and array.shape[1] != width:
        raise ValueError(f"{where}: {name} have width {array.shape[1]} but the index holds "
                         f"{width}-dimensional vectors; encode them with the same encoder")
    if not np.isfinite(array).all():
        raise ValueError(f"{where}: {name} hold nan or inf")
    return np.ascontiguousarray(array, dtype=np.float32)


class DenseIndex:
    """Exact inner-product search over ``dim``-dimensional vectors on a backend.

    The queries meet ``block_size`` passages at a time (one matrix product), and each block's
    scores merge into the running k best: with :func:`top_k` of the block and the best so far,
    or, on a backend with a ``merge_top_k`` kernel (numba), in one pass per row that keeps equal
    scores in id order.

    ``backend``: a backend name (default: the active one) whose arrays hold the vectors;
    ``block_size``: how many passages meet the queries in one matrix product::

        index = DenseIndex(128)
        index.add(passage_vectors)                      # (n, 128)
        scores, ids = index.search(query_vectors, k=5)  # (queries, 5) each, best first
    """

    kind = "exact"

    def __init__(self, dim, *, backend=None, block_size=16384):
        self.dim = checks.positive_int(dim, "dim", "DenseIndex")
        self.block_size = checks.positive_int(block_size, "block_size", "DenseIndex")
        self.backend = get_backend(backend)
        xp = self.backend.xp
        self._vectors = xp.zeros((0, self.dim), dtype=xp.float32)

    def __len__(self):
        return int(self._vectors.shape[0])

    def __repr__(self):
        return f"DenseIndex(dim={self.dim}, size={len(self)}, backend={self.backend.name!r})"

    @property
    def vectors(self):
        """The stored vectors as a NumPy array (n, dim), in the order they were added."""
        return self.backend.to_numpy(self._vectors)

    def add(self, vectors):
        """Append ``vectors`` (n, dim); their ids continue from the current size."""
        rows = self.backend.asarray(_matrix(vectors, self.dim, "vectors", "DenseIndex.add"))
        self._vectors = self.backend.xp.concatenate([self._vectors, rows])
        return self

    def reset(self, vectors):
        """Replace every stored vector by ``vectors`` (n, dim): a refreshed index (REALM
        re-encodes its documents with the latest encoder), ids as in ``vectors``."""
        self._vectors = self.backend.xp.zeros((0, self.dim), dtype=self.backend.xp.float32)
        return self.add(vectors)

    def search(self, queries, k):
        """The ``k`` passages of largest inner product with each query: ``(scores, ids)``, NumPy
        arrays (queries, k), best first."""
        queries = _matrix(queries, self.dim, "queries", "DenseIndex.search")
        k = clamp_k(k, len(self), "DenseIndex.search")
        xp = self.backend.xp
        q = self.backend.asarray(queries)
        merge = getattr(self.backend, "merge_top_k", None)   # a fused kernel (numba)
        if merge is not None:
            best_scores = xp.full((q.shape[0], k), -xp.inf, dtype=self._vectors.dtype)
            best_ids = xp.full((q.shape[0], k), -1, dtype=xp.int64)
            for start in range(0, len(self), self.block_size):
                merge(best_scores, best_ids, q @ self._vectors[start:start + self.block_size].T,
                      start)
            return self.backend.to_numpy(best_scores), self.backend.to_numpy(best_ids)
        best_scores = xp.full((q.shape[0], 0), -xp.inf, dtype=xp.float32)
        best_ids = xp.zeros((q.shape[0], 0), dtype=xp.int64)
        for start in range(0, len(self), self.block_size):
            block = self._vectors[start:start + self.block_size]
            scores = xp.concatenate([best_scores, q @ block.T], axis=1)
            ids = xp.concatenate([best_ids, xp.broadcast_to(
                xp.arange(start, start + block.shape[0]), (q.shape[0], block.shape[0]))], axis=1)
            best_scores, positions = top_k(scores, min(k, scores.shape[1]), xp)
            best_ids = xp.take_along_axis(ids, positions, axis=1)
        return self.backend.to_numpy(best_scores), self.backend.to_numpy(best_ids)

    def save(self, path):
        """Write the index to ``path`` (a ``.npz`` checkpoint, atomically, never pickled)."""
        checkpoint.save({"format": FORMAT, "kind": self.kind, "dim": self.dim,
                         "vectors": self.vectors}, path)

    @classmethod
    def _from_state(cls, state, backend=None):
        return cls(state["dim"], backend=backend).add(state["vectors"])


def _faiss():
    try:
        import faiss
    except ImportError:
        raise ImportError("FaissIndex needs faiss-cpu: pip install 'minitorch-nlp[retrieval]'") \
            from None
    return faiss


class FaissIndex:
    """Inner-product search through ``faiss`` (the ``retrieval`` extra).

    ``kind``: ``"flat"`` (exact, faiss's ``IndexFlatIP``), ``"ivf"`` (``nlist`` k-means cells,
    ``nprobe`` of them searched; needs ``train`` on representative vectors before ``add``) or
    ``"hnsw"`` (a graph of ``m`` neighbours per node, ``ef_search`` candidates kept while
    searching). ``add`` trains an untrained IVF index on the vectors it is given first."""

    def __init__(self, dim, kind="flat", *, nlist=64, nprobe=8, m=32, ef_search=64):
        self.dim = checks.positive_int(dim, "dim", "FaissIndex")
        if kind not in FAISS_KINDS:
            raise ValueError(f"FaissIndex: kind must be one of {FAISS_KINDS}, got {kind!r}")
        faiss = _faiss()
        self.kind = kind
        if kind == "flat":
            self._index = faiss.IndexFlatIP(self.dim)
        elif kind == "ivf":
            checks.positive_int(nlist, "nlist", "FaissIndex")
            self._index = faiss.IndexIVFFlat(faiss.IndexFlatIP(self.dim), self.dim, nlist,
                                             faiss.METRIC_INNER_PRODUCT)
            self._index.nprobe = checks.positive_int(nprobe, "nprobe", "FaissIndex")
        else:
            self._index = faiss.IndexHNSWFlat(self.dim, checks.positive_int(m, "m", "FaissIndex"),
                                              faiss.METRIC_INNER_PRODUCT)
            self._index.hnsw.efSearch = checks.positive_int(ef_search, "ef_search", "FaissIndex")

    def __len__(self):
        return int(self._index.ntotal)

    def __repr__(self):
        return f"FaissIndex(dim={self.dim}, kind={self.kind!r}, size={len(self)})"

    def train(self, vectors):
        """Fit the IVF cells to ``vectors`` (n >= nlist rows); a no-op for flat and HNSW."""
        vectors = _matrix(vectors, self.dim, "vectors", "FaissIndex.train")
        if self.kind == "ivf" and len(vectors) < self._index.nlist:
            raise ValueError(f"FaissIndex.train: an IVF index of nlist={self._index.nlist} cells "
                             f"needs at least that many training vectors, got {len(vectors)}")
        self._index.train(vectors)
        return self

    def add(self, vectors):
        """Append ``vectors`` (n, dim) (training an untrained IVF index on them first)."""
        vectors = _matrix(vectors, self.dim, "vectors", "FaissIndex.add")
        if not self._index.is_trained:
            self.train(vectors)
        self._index.add(vectors)
        return self

    def search(self, queries, k):
        """As :meth:`DenseIndex.search`; approximate for ``ivf`` and ``hnsw`` (a passage an IVF
        search does not reach is reported with id -1 and score -inf)."""
        queries = _matrix(queries, self.dim, "queries", "FaissIndex.search")
        k = clamp_k(k, len(self), "FaissIndex.search")
        scores, ids = self._index.search(queries, k)
        return np.where(ids < 0, -np.inf, scores).astype(np.float32), ids.astype(np.int64)

    def save(self, path):
        """Write the index to ``path`` (a ``.npz`` checkpoint holding faiss's own serialisation
        as bytes, atomically, never pickled)."""
        data = _faiss().serialize_index(self._index)
        checkpoint.save({"format": FORMAT, "kind": f"faiss-{self.kind}", "dim": self.dim,
                         "faiss": np.asarray(data, dtype=np.uint8)}, path)

    @classmethod
    def _from_state(cls, state, path):
        index = cls.__new__(cls)
        index.dim, index.kind = state["dim"], state["kind"].removeprefix("faiss-")
        try:
            index._index = _faiss().deserialize_index(np.ascontiguousarray(state["faiss"]))
        except RuntimeError as error:
            raise ValueError(f"load_index: {path!r} holds a damaged faiss index "
                             f"({str(error).splitlines()[0]})") from None
        if index._index.d != index.dim:
            raise ValueError(f"load_index: {path!r} says dim={index.dim} but its faiss index has "
                             f"{index._index.d}")
        return index


def load_index(path, *, backend=None):
    """The :class:`DenseIndex` or :class:`FaissIndex` that ``save`` wrote to ``path``.
    ``backend``: where a dense index's vectors go (default: the active backend). A file that is
    not an index (or is damaged) is a ``ValueError`` naming it; nothing in it is unpickled."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"load_index: {path!r} does not exist")
    state = checkpoint.load(path)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"load_index: {path!r} is a checkpoint but not a minitorch_nlp index")
    kind = state.get("kind")
    try:
        if kind == DenseIndex.kind:
            vectors = state["vectors"]
            if not isinstance(vectors, np.ndarray) or vectors.shape[1:] != (state["dim"],):
                raise ValueError(f"load_index: {path!r} holds vectors of shape "
                                 f"{getattr(vectors, 'shape', None)}, not (n, {state['dim']})")
            return DenseIndex._from_state(state, backend)
        if isinstance(kind, str) and kind.removeprefix("faiss-") in FAISS_KINDS:
            return FaissIndex._from_state(state, path)
    except KeyError as missing:
        raise ValueError(f"load_index: {path!r} lacks the entry {missing}") from None
    raise ValueError(f"load_index: {path!r} holds an index of unknown kind {kind!r}")


# ---- index folders: an index with its passages -------------------------------------------------
INDEX_META, INDEX_PASSAGES = "index.json", "passages.json"
INDEX_FILES = {"bm25": "bm25.npz", "dense": "vectors.npz"}


def save_index_folder(directory, index, passages):
    """Write ``index`` (a :class:`~minitorch_nlp.retrieval.BM25` or a :class:`DenseIndex`) and
    its ``passages`` (the texts, in the index's order) as the index folder ``directory``
    (created if needed; each file written atomically)."""
    kind = "dense" if isinstance(index, DenseIndex) else "bm25" if isinstance(index, BM25) \
        else None
    if kind is None:
        raise TypeError(f"save_index_folder: expected a BM25 or a DenseIndex, got "
                        f"{type(index).__name__}")
    if len(index) != len(passages):
        raise ValueError(f"save_index_folder: the index holds {len(index)} passages but "
                         f"{len(passages)} texts were given")
    os.makedirs(directory, exist_ok=True)
    index.save(os.path.join(directory, INDEX_FILES[kind]))
    write_json(os.path.join(directory, INDEX_PASSAGES), list(passages))
    write_json(os.path.join(directory, INDEX_META), {"kind": kind, "size": len(passages)})


def load_index_folder(directory, *, backend=None):
    """``(kind, index, passages)`` of the index folder ``directory``: ``"bm25"`` and a
    :class:`~minitorch_nlp.retrieval.BM25`, or ``"dense"`` and a :class:`DenseIndex` (its
    vectors on ``backend``, default the active one). A folder that is not an index folder, or
    whose passages do not match its index, is a ``ValueError`` naming it."""
    meta_path = os.path.join(directory, INDEX_META)
    if not os.path.isfile(meta_path):
        raise ValueError(f"{directory} is not an index folder (no {INDEX_META}); write one with "
                         "'index build'")
    kind = read_json(meta_path).get("kind")
    if kind not in INDEX_FILES:
        raise ValueError(f"{meta_path} names an unknown index kind {kind!r}")
    paths = [os.path.join(directory, name) for name in (INDEX_PASSAGES, INDEX_FILES[kind])]
    missing = [os.path.basename(path) for path in paths if not os.path.isfile(path)]
    if missing:
        raise ValueError(f"{directory} is an index folder without {' and '.join(missing)}; "
                         "write it again with 'index build'")
    passages = read_json(paths[0])
    index = BM25.load(paths[1]) if kind == "bm25" else load_index(paths[1], backend=backend)
    if len(index) != len(passages):
        raise ValueError(f"{directory}: the index holds {len(index)} passages but "
                         f"{INDEX_PASSAGES} {len(passages)}")
    return kind, index, passages
