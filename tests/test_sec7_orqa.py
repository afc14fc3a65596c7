"""Section VII-B: ORQA (Lee et al., 2019), eq 64-71: the 128-d retriever, the span reader, the
Inverse Cloze Task and the answer-derivation distribution, on the built-in knowledge base.

The function-level equations (66, 69, 70, 71) are checked against the autograd.numpy references
by ``tests/test_check.py``; here are the encoders, the ICT data, the properties and the system
trained end to end."""
from __future__ import annotations

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp.retrieval import (ORQA, DenseIndex, SpanReader, SpanScorer,
                                     answer_derivation_log_likelihood, inverse_cloze_task,
                                     retrieval_scores, split_sentences)
from tests.model_checks import overfit
from tests.retrieval_checks import make_retriever, reader_config

pytestmark = pytest.mark.sec7


def make_reader(tokenizer):
    return SpanReader(reader_config(tokenizer))


@pytest.mark.eq(70)
def test_ict_removes_the_pseudo_question_from_its_block_nine_times_in_ten(kb):
    rng = np.random.default_rng(0)
    blocks = kb.texts * 100
    questions, evidence, kept = inverse_cloze_task(blocks, rng)
    assert len(questions) == len(blocks) and 0.07 < kept.mean() < 0.13, kept.mean()
    for question, block, text, keep in zip(questions, blocks, evidence, kept):
        sentences = split_sentences(block)
        assert question in sentences
        if keep:
            assert text == block
        else:
            rest = list(sentences)
            rest.remove(question)
            assert text == " ".join(rest)
    _, _, kept = inverse_cloze_task(kb.texts, rng, keep_probability=1.0)
    assert kept.all()
    with pytest.raises(ValueError, match=r"keep_probability must lie in \[0, 1\], got 1.5"):
        inverse_cloze_task(kb.texts, rng, keep_probability=1.5)
    with pytest.raises(ValueError, match="no block has two sentences"):
        inverse_cloze_task(["One sentence only.", "Another."], rng)


@pytest.mark.eq(64, 65, 66)
def test_the_encoders_project_cls_to_128_dimensions_and_score_by_inner_product(kb, tokenizer):
    retriever = make_retriever(tokenizer)
    batch = tokenizer(kb.texts[:3], padding=True, return_tensors="np")
    for model in (retriever.question_encoder.question_encoder,
                  retriever.context_encoder.ctx_encoder):
        with mt.no_grad():
            out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
            cls = model.bert_model(batch["input_ids"], batch["attention_mask"],
                                   batch["token_type_ids"]).last_hidden_state.numpy()[:, 0]
        projection = model.encode_proj
        expected = cls @ projection.weight.numpy().T + projection.bias.numpy()
        assert out.pooler_output.shape == (3, 128)
        np.testing.assert_allclose(out.pooler_output.numpy(), expected, rtol=1e-5, atol=1e-5)
    index = retriever.index_passages(kb.texts)
    questions = [q.text for q in kb.questions[:3]]
    ids, scores = retriever.scored_top_k(questions, index, 4)
    found_scores, found_ids = retriever.retrieve(questions, index, 4)
    np.testing.assert_array_equal(ids, found_ids)
    np.testing.assert_allclose(scores.numpy(), found_scores, rtol=1e-5, atol=1e-5)
    scores.sum().backward()
    assert any(p.grad is not None for p in retriever.question_encoder.parameters())
    assert all(p.grad is None for p in retriever.context_encoder.parameters())


@pytest.mark.eq(66)
def test_retrieval_scores_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match="query_vectors must be a Tensor"):
        retrieval_scores(mt.tensor(np.zeros(3)), mt.tensor(np.zeros((1, 2, 3))))
    with pytest.raises(ValueError, match=r"block_vectors must be a Tensor \(batch, k, d\) = "
                                         r"\(2, k, 3\)"):
        retrieval_scores(mt.tensor(np.zeros((2, 3))), mt.tensor(np.zeros((2, 4, 5))))


@pytest.mark.eq(67, 68, 69)
def test_the_span_scorer_reads_each_span_from_its_first_and_last_token():
    mt.manual_seed(0)
    scorer = SpanScorer(4)
    hidden = mt.tensor(np.random.default_rng(0).normal(size=(2, 5, 4)))
    scores = scorer(hidden, [[0, 1], [2, 2]], [[3, 1], [4, 2]]).numpy()
    # a span's score does not depend on the tokens between its ends
    changed = hidden.numpy().copy()
    changed[0, 1:3] += 10.0
    again = scorer(mt.tensor(changed), [[0, 1], [2, 2]], [[3, 1], [4, 2]]).numpy()
    assert scores.shape == (2, 2)
    assert again[0, 0] == pytest.approx(scores[0, 0]) and again[0, 1] != pytest.approx(
        scores[0, 1])
    with pytest.raises(ValueError, match=r"hidden must be a Tensor \(rows, time, 4\)"):
        scorer(mt.tensor(np.zeros((2, 5, 3))), [[0]], [[0]])
    with pytest.raises(ValueError, match=r"ends \(2, 1\) must be \(rows=2, spans\) positions "
                                         r"in \[0, 5\)"):
        scorer(hidden, [[0], [0]], [[5], [0]])
    with pytest.raises(ValueError, match=r"starts \(2, 2\) and ends \(2, 1\) differ"):
        scorer(hidden, [[0, 0], [0, 0]], [[1], [1]])


@pytest.mark.eq(71)
def test_answer_derivations_normalise_over_every_span_of_the_top_k():
    rng = np.random.default_rng(1)
    retrieval = mt.tensor(rng.normal(size=(2, 3)), dtype=mt.float64, requires_grad=True)
    reader = mt.tensor(rng.normal(size=(2, 3, 4)), dtype=mt.float64)
    every = np.ones((2, 3, 4), dtype=bool)
    assert np.allclose(answer_derivation_log_likelihood(retrieval, reader, span_mask=every,
                                                        answer_mask=every).numpy(), 0.0)
    # the answer only in block 0: the gradient raises S_retr of block 0, by
    # P(b | correct) - P(b) = 1 - P(block 0), and lowers the others' by their P(b)
    answer = np.zeros_like(every)
    answer[:, 0, 1] = True
    value = answer_derivation_log_likelihood(retrieval, reader, span_mask=every,
                                             answer_mask=answer)
    (grad,) = mt.grad(value.sum(), [retrieval])
    joint = retrieval.numpy()[:, :, None] + reader.numpy()
    p_block = np.exp(joint).sum(axis=2) / np.exp(joint).sum(axis=(1, 2))[:, None]
    np.testing.assert_allclose(grad.numpy(), np.eye(3)[[0, 0]] - p_block, rtol=1e-9)
    with pytest.raises(ValueError, match="row 1 has no correct derivation"):
        answer_derivation_log_likelihood(retrieval, reader, span_mask=every,
                                         answer_mask=answer & (np.arange(2) == 0)[:, None, None])
    with pytest.raises(ValueError, match="answer_mask marks a span that span_mask leaves out"):
        answer_derivation_log_likelihood(retrieval, reader, span_mask=~answer,
                                         answer_mask=answer)
    with pytest.raises(ValueError, match=r"span_mask must be bool \(2, 3, 4\)"):
        answer_derivation_log_likelihood(retrieval, reader, span_mask=every[:, :2],
                                         answer_mask=answer)
    with pytest.raises(ValueError, match="reader_scores a Tensor"):
        answer_derivation_log_likelihood(retrieval, reader[:, :2], span_mask=every,
                                         answer_mask=answer)


@pytest.mark.eq(70, 71)
def test_orqa_after_ict_learns_its_questions_with_the_block_encoder_frozen(kb, tokenizer):
    retriever = make_retriever(tokenizer)
    rng = np.random.default_rng(0)
    ict = overfit(retriever, lambda: retriever.loss(*inverse_cloze_task(kb.texts, rng)[:2]), 10)
    assert ict[-1] < ict[0], ict
    index = retriever.index_passages(kb.texts)
    orqa = ORQA(retriever, index, kb.texts, make_reader(tokenizer), tokenizer, k=2, early_k=4,
                max_span_length=4, max_length=48)
    questions = kb.questions_with(1)[:4]
    texts, answers = [q.text for q in questions], [q.answer for q in questions]
    frozen = [p.numpy().copy() for p in retriever.context_encoder.parameters()]
    question_encoder = [p.numpy().copy() for p in retriever.question_encoder.parameters()]
    assert {id(p) for p in orqa.parameters()}.isdisjoint(
        id(p) for p in retriever.context_encoder.parameters())
    losses = overfit(orqa, lambda: orqa.loss(texts, answers), 25)
    assert losses[-1] < losses[0] / 3, (losses[0], losses[-1])
    assert [a.lower() for a in answers] == orqa.answer(texts)
    assert all((a == p.numpy()).all()
               for a, p in zip(frozen, retriever.context_encoder.parameters()))
    assert any((a != p.numpy()).any()
               for a, p in zip(question_encoder, retriever.question_encoder.parameters()))
    with pytest.raises(ValueError, match="no answer of the batch is in its top 4 blocks"):
        orqa.loss(texts[:1], ["not in any block"])


def test_orqa_refuses_bad_arguments(kb, tokenizer):
    retriever = make_retriever(tokenizer)
    index = retriever.index_passages(kb.texts)
    reader = make_reader(tokenizer)
    with pytest.raises(TypeError, match="index must be a DenseIndex"):
        ORQA(retriever, None, kb.texts, reader, tokenizer)
    with pytest.raises(ValueError, match=r"the index holds \d+ vectors but 2 blocks"):
        ORQA(retriever, index, kb.texts[:2], reader, tokenizer)
    with pytest.raises(ValueError, match="early_k=2 must be at least k=3"):
        ORQA(retriever, index, kb.texts, reader, tokenizer, k=3, early_k=2)
    with pytest.raises(ValueError, match="max_span_length must be a positive int"):
        ORQA(retriever, DenseIndex(128).add(index.vectors), kb.texts, reader, tokenizer,
             max_span_length=0)
    orqa = ORQA(retriever, index, kb.texts, reader, tokenizer)
    with pytest.raises(ValueError, match="1 questions and 2 answers"):
        orqa.loss(["Where?"], ["a", "b"])
