"""Section VII-A: GoldEn Retriever (Qi et al., 2019), eq 62-63, over BM25 on the knowledge base's
two-hop questions: oracle queries, the context concatenation, and a query generator that learns
the oracle queries and then finds both gold passages where one BM25 search with the question
does not."""
from __future__ import annotations

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp.data.tokenizers import WordPieceTokenizer
from minitorch_nlp.models.bert import BertConfig, BertForQuestionAnswering
from minitorch_nlp.retrieval import BM25
from minitorch_nlp.retrieval.bm25 import tokenize
from minitorch_nlp.retrieval.golden import (QueryGenerator, extend_context, golden_retrieve,
                                            oracle_query, query_span_log_likelihood)
from minitorch_nlp.testing import EquationMismatch, check_equation
from tests.model_checks import overfit

pytestmark = pytest.mark.sec7


def oracle_examples(kb, bm25):
    """(question, context, oracle span) for both hops of every two-hop question."""
    examples = []
    for question in kb.questions_with(2):
        first, second = question.passage_ids
        examples.append((question.text, "", oracle_query(bm25, question.text, "", first)[0]))
        context = kb.texts[first]
        examples.append((question.text, context,
                         oracle_query(bm25, question.text, context, second)[0]))
    return examples


def test_oracle_queries_rank_the_next_gold_passage_first(kb):
    bm25 = BM25().fit(kb.texts)
    for question in kb.questions_with(2):
        first, second = question.passage_ids
        (start, end), rank = oracle_query(bm25, question.text, "", first)
        assert rank == 0 and end - start < 4
        context = kb.texts[first]
        (start, end), rank = oracle_query(bm25, question.text, context, second)
        words = tokenize(question.text) + tokenize(context)
        assert rank == 0 and question.bridge.lower() in words[start:end + 1]
    with pytest.raises(ValueError, match="hold no words"):
        oracle_query(bm25, "?", "", 0)


@pytest.mark.eq(63)
def test_each_hop_appends_the_top_n_passages_of_its_query_to_the_context(kb):
    bm25 = BM25().fit(kb.texts)
    seen = []

    def generator(questions, contexts):
        seen.append(list(contexts))
        return [f"hop {len(seen)} {q}" for q in questions]

    questions = [q.text for q in kb.questions_with(2)[:3]]
    ids, queries = golden_retrieve(questions, generator, bm25, kb.texts, hops=3, n=2)
    assert seen[0] == ["", "", ""]
    for r, question in enumerate(questions):
        assert len(ids[r]) == 6 and queries[r][2] == f"hop 3 {question}"
        for hop in range(3):
            expected = bm25.search([queries[r][hop]], 2)[1][0].tolist()
            assert ids[r][2 * hop:2 * hop + 2] == expected
        assert seen[2][r] == " ".join(kb.texts[i] for i in ids[r][:4])
    with pytest.raises(ValueError, match="hops must be a positive int"):
        golden_retrieve(questions, generator, bm25, kb.texts, hops=0)
    with pytest.raises(ValueError, match="3 passages but the BM25 index holds"):
        golden_retrieve(questions, generator, bm25, kb.texts[:3])


@pytest.mark.eq(62, 63)
def test_a_query_generator_learns_the_oracle_queries_and_golden_finds_both_passages(kb):
    bm25 = BM25().fit(kb.texts)
    examples = oracle_examples(kb, bm25)
    tokenizer = WordPieceTokenizer.train(kb.texts + [q.text for q in kb.questions], 200)
    mt.manual_seed(0)
    reader = BertForQuestionAnswering(BertConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=128, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, initializer_range=0.2))
    generator = QueryGenerator(reader, tokenizer)
    questions, contexts, spans = zip(*examples)
    losses = overfit(reader, lambda: generator.loss(questions, contexts, spans), 20, lr=3e-3)
    assert losses[-1] < losses[0] / 10, (losses[0], losses[-1])
    two_hop = kb.questions_with(2)
    ids, queries = golden_retrieve([q.text for q in two_hop], generator, bm25, kb.texts)
    golden = np.mean([set(q.passage_ids) <= set(row) for q, row in zip(two_hop, ids)])
    _, single = bm25.search([q.text for q in two_hop], 2)
    once = np.mean([set(q.passage_ids) <= set(row) for q, row in zip(two_hop, single)])
    assert golden == 1.0 and once < 0.5, (golden, once, queries[:2])
    with pytest.raises(ValueError, match="every oracle span lies past max_length=1"):
        QueryGenerator(reader, tokenizer, max_length=1).loss(questions, contexts, spans)


@pytest.mark.eq(62)
def test_a_query_generator_that_ignores_which_tokens_are_allowed_fails_the_check():
    def softmax_over_every_token(start_logits, end_logits, *, starts, ends, allowed):
        rows = np.arange(len(starts))
        return start_logits.log_softmax(axis=-1)[rows, starts] + \
            end_logits.log_softmax(axis=-1)[rows, ends]

    with pytest.raises(EquationMismatch, match="differs from the reference"):
        check_equation(62, softmax_over_every_token, max_examples=30)


@pytest.mark.eq(62)
def test_query_span_log_likelihood_refuses_bad_input():
    logits = mt.tensor(np.zeros((2, 3)))
    allowed = np.array([[True, True, False], [True, False, False]])
    with pytest.raises(ValueError, match="must be Tensors of one shape"):
        query_span_log_likelihood(logits, mt.tensor(np.zeros((2, 4))), starts=[0, 0],
                                  ends=[0, 0], allowed=allowed)
    with pytest.raises(ValueError, match=r"allowed must be bool \(2, 3\)"):
        query_span_log_likelihood(logits, logits, starts=[0, 0], ends=[0, 0],
                                  allowed=allowed.astype(int))
    with pytest.raises(ValueError, match=r"ends\[1\] = 1 is not an allowed token"):
        query_span_log_likelihood(logits, logits, starts=[0, 0], ends=[1, 1], allowed=allowed)
    with pytest.raises(ValueError, match=r"starts\[0\] = 5 is not an allowed token"):
        query_span_log_likelihood(logits, logits, starts=[5, 0], ends=[0, 0], allowed=allowed)
    with pytest.raises(ValueError, match=r"starts must be integer ids of shape \(2,\)"):
        query_span_log_likelihood(logits, logits, starts=[0], ends=[0, 0], allowed=allowed)


@pytest.mark.eq(63)
def test_extend_context_that_takes_the_worst_passages_fails_the_check():
    def worst_first(context, passages, scores, *, n):
        return mt.concatenate([context, passages[np.argsort(scores, axis=1)[:, :n]]], axis=1)

    with pytest.raises(EquationMismatch, match="differs from the reference"):
        check_equation(63, worst_first, max_examples=30)


@pytest.mark.eq(63)
def test_extend_context_refuses_bad_input():
    context, passages = mt.tensor(np.zeros((2, 1, 3))), mt.tensor(np.zeros((4, 3)))
    scores = np.zeros((2, 4))
    with pytest.raises(ValueError, match="n must be a positive int"):
        extend_context(context, passages, scores, n=0)
    with pytest.raises(ValueError, match="n=5 is larger than the corpus"):
        extend_context(context, passages, scores, n=5)
    with pytest.raises(ValueError, match="of the same width"):
        extend_context(context, mt.tensor(np.zeros((4, 2))), scores, n=1)
    with pytest.raises(ValueError, match=r"scores \(2, 3\) must be \(batch, P\) = \(2, 4\)"):
        extend_context(context, passages, np.zeros((2, 3)), n=1)
