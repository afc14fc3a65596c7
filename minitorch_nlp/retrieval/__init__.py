"""Section VII, information retrieval: the vector index, BM25, and the retrievers built on them."""
from .bm25 import BM25, tokenize
from .index import DenseIndex, FaissIndex, load_index, top_k

__all__ = ["BM25", "DenseIndex", "FaissIndex", "load_index", "tokenize", "top_k"]
