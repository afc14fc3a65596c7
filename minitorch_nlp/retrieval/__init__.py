"""Section VII, information retrieval: the vector index, BM25, and the retrievers built on them."""
from .bm25 import BM25, tokenize
from .dpr import (DenseRetriever, bm25_hard_negatives, dpr_loss, retrieval_log_probs,
                  retrieval_scores)
from .golden import (QueryGenerator, extend_context, golden_retrieve, oracle_query,
                     query_span_log_likelihood)
from .index import DenseIndex, FaissIndex, load_index, load_index_folder, save_index_folder
from .ranking import top_k
from .orqa import (ORQA, SpanReader, SpanScorer, answer_derivation_log_likelihood,
                   answer_span_mask, best_answers, inverse_cloze_task, read_spans,
                   split_sentences)
from .rag import (RAG, marginal_log_likelihood, rag_sequence_log_likelihood,
                  rag_token_log_likelihood)
from .realm import (REALM, IndexRefresher, join_bert, masked_lm_log_likelihood,
                    salient_span_masking, salient_spans, span_answer_log_probs)

__all__ = ["BM25", "DenseIndex", "DenseRetriever", "FaissIndex", "IndexRefresher", "ORQA",
           "QueryGenerator", "RAG", "REALM", "SpanReader", "SpanScorer",
           "answer_derivation_log_likelihood", "answer_span_mask", "best_answers",
           "bm25_hard_negatives", "dpr_loss", "extend_context", "golden_retrieve",
           "inverse_cloze_task", "join_bert", "load_index", "load_index_folder",
           "marginal_log_likelihood", "masked_lm_log_likelihood", "oracle_query",
           "query_span_log_likelihood", "rag_sequence_log_likelihood", "rag_token_log_likelihood",
           "read_spans", "retrieval_log_probs", "retrieval_scores", "salient_span_masking",
           "salient_spans", "save_index_folder", "span_answer_log_probs", "split_sentences",
           "tokenize", "top_k"]
