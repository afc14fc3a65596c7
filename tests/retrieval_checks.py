"""What the section VII tests share: the small knowledge base, a WordPiece tokenizer trained on
it, and tiny DPR retrievers and BERT readers built on that tokenizer."""
from __future__ import annotations

import pytest

import minitorch_nlp as mt
from minitorch_nlp.data import knowledge_base
from minitorch_nlp.data.tokenizers import WordPieceTokenizer
from minitorch_nlp.models.bert import BertConfig
from minitorch_nlp.models.dpr import DPRConfig, DPRContextEncoder, DPRQuestionEncoder
from minitorch_nlp.retrieval import DenseRetriever


@pytest.fixture(scope="module")
def kb():
    return knowledge_base(n_people=4, n_cities=2, seed=2)


@pytest.fixture(scope="module")
def tokenizer(kb):
    return WordPieceTokenizer.train(kb.texts + [q.text for q in kb.questions], 200)


def make_retriever(tokenizer, seed=0):
    """A tiny DPR retriever (128-dim projections, as ORQA's) drawn with ``seed``."""
    mt.manual_seed(seed)
    config = DPRConfig.tiny(len(tokenizer), projection_dim=128, initializer_range=0.2)
    return DenseRetriever(DPRQuestionEncoder(config), DPRContextEncoder(config), tokenizer)


def reader_config(tokenizer):
    """A one-layer BERT of width 32 over ``tokenizer``'s vocabulary, without dropout."""
    return BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1,
                      num_attention_heads=4, intermediate_size=64, max_position_embeddings=128,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                      initializer_range=0.2)
