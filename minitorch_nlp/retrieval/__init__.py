"""Section VII, information retrieval: the vector index, BM25, and the retrievers built on them."""
from .bm25 import BM25, tokenize
from .dpr import DenseRetriever, bm25_hard_negatives, dpr_loss, retrieval_log_probs
from .index import DenseIndex, FaissIndex, load_index, top_k

__all__ = ["BM25", "DenseIndex", "DenseRetriever", "FaissIndex", "bm25_hard_negatives",
           "dpr_loss", "load_index", "retrieval_log_probs", "tokenize", "top_k"]
