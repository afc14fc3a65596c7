"""Section VII-C: REALM (Guu et al., 2020), eq 72-80: the retriever over the index with fresh
document embeddings and the null document, the BERT joins, salient-span masking, the
retrieval-augmented masked LM, span-based fine-tuning and the asynchronous index refresh.

The function-level equations (72, 76, 78) are checked against the autograd.numpy references by
``tests/test_check.py``; here are the properties and the system."""
from __future__ import annotations

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp.models.bert import BertForMaskedLM
from minitorch_nlp.retrieval import (REALM, DenseIndex, IndexRefresher,
                                     SpanReader, join_bert, marginal_log_likelihood,
                                     masked_lm_log_likelihood, salient_span_masking,
                                     salient_spans, span_answer_log_probs)
from tests.model_checks import overfit
from tests.retrieval_checks import make_retriever, reader_config

pytestmark = pytest.mark.sec7


def make_realm(kb, tokenizer, k=2):
    retriever = make_retriever(tokenizer)
    bert = reader_config(tokenizer)
    return REALM(retriever, retriever.index_passages(kb.texts), kb.texts, tokenizer,
                 mlm=BertForMaskedLM(bert), reader=SpanReader(bert), k=k, max_length=64,
                 max_span_length=4)


def test_salient_spans_are_names_and_numbers_masked_one_per_text(kb, tokenizer):
    text = kb.texts[0]
    assert [text[a:b] for a, b in salient_spans(text)] == [
        "Mifin Sherthol", "Shekbon", "1831", "Mifin Sherthol"]
    masked, targets, sources = salient_span_masking([text, "no names here.", *kb.texts[1:3]],
                                                    tokenizer, np.random.default_rng(0))
    assert sources.tolist() == [0, 2, 3]
    texts = [text, None, *kb.texts[1:3]]
    for source, x, y in zip(sources, masked, targets):
        pieces = tokenizer.tokenize(x)
        holes = [i for i, piece in enumerate(pieces) if piece == tokenizer.mask_token]
        assert len(holes) == len(y) > 0 and holes == list(range(holes[0], holes[0] + len(y)))
        pieces[holes[0]:holes[-1] + 1] = tokenizer.convert_ids_to_tokens(y)
        assert pieces == tokenizer.tokenize(texts[source])     # the [MASK]s hide exactly y
        spans = [texts[source][a:b] for a, b in salient_spans(texts[source])]
        assert tokenizer.convert_ids_to_tokens(y) in [tokenizer.tokenize(s) for s in spans]
    with pytest.raises(ValueError, match="no text holds a salient span"):
        salient_span_masking(["nothing salient."], tokenizer, np.random.default_rng(0))


@pytest.mark.eq(74, 75)
def test_bert_joins_frame_one_or_two_segments():
    assert join_bert([7, 8], cls_id=1, sep_id=2) == ([1, 7, 8, 2], [0, 0, 0, 0])
    assert join_bert([7], [9, 9, 9], cls_id=1, sep_id=2) == ([1, 7, 2, 9, 9, 9, 2],
                                                             [0, 0, 0, 1, 1, 1, 1])


@pytest.mark.eq(76, 77)
def test_masked_lm_log_likelihood_counts_only_masked_positions_and_refuses_bad_input():
    logits = mt.tensor(np.log(np.array([[[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]]])))
    value = masked_lm_log_likelihood(logits, labels=[[1, -100]]).numpy()
    np.testing.assert_allclose(value, [np.log(0.25)], rtol=1e-6)
    np.testing.assert_allclose(masked_lm_log_likelihood(logits, labels=[[-100, -100]]).numpy(),
                               [0.0])
    with pytest.raises(ValueError, match=r"logits must be a Tensor \(rows, time, vocab\)"):
        masked_lm_log_likelihood(logits[0], labels=[[1, 1]])
    with pytest.raises(ValueError, match=r"labels must be integer ids of shape \(1, 2\)"):
        masked_lm_log_likelihood(logits, labels=[[1, 1, 1]])


@pytest.mark.eq(78)
def test_a_document_without_the_answer_has_probability_zero_and_no_nan_gradient():
    scores = mt.tensor(np.random.default_rng(0).normal(size=(1, 2, 3)), dtype=mt.float64,
                       requires_grad=True)
    spans = np.ones((1, 2, 3), dtype=bool)
    answer = np.zeros_like(spans)
    answer[0, 0, 1] = True
    value = span_answer_log_probs(scores, span_mask=spans, answer_mask=answer)
    assert np.isneginf(value.numpy()[0, 1]) and np.isfinite(value.numpy()[0, 0])
    marginal = marginal_log_likelihood(mt.tensor(np.log([[0.5, 0.5]])), value)
    (grad,) = mt.grad(marginal.sum(), [scores])
    assert np.isfinite(grad.numpy()).all() and (grad.numpy()[0, 1] == 0).all()
    with pytest.raises(ValueError, match="answer_mask marks a span that span_mask leaves out"):
        span_answer_log_probs(scores, span_mask=~answer, answer_mask=answer)
    with pytest.raises(ValueError, match="document 1 of row 0 has no real span"):
        span_answer_log_probs(scores, span_mask=answer, answer_mask=answer)
    with pytest.raises(ValueError, match=r"span_mask must be bool \(1, 2, 3\)"):
        span_answer_log_probs(scores, span_mask=spans[0], answer_mask=answer)


@pytest.mark.eq(72, 73)
def test_the_gradient_of_the_marginal_raises_the_score_of_the_document_that_helps(kb, tokenizer):
    realm = make_realm(kb, tokenizer, k=3)
    masked, targets, sources = salient_span_masking(kb.texts[:3], tokenizer,
                                                    np.random.default_rng(1))
    ids, scores = realm.retrieve(masked, null_document=True)
    assert (ids[:, -1] == -1).all() and ids.shape == (3, 4)
    # the index selects; the scores are recomputed with the current encoders and, the index
    # being fresh, equal its own
    found, index_ids = realm.index.search(np.asarray(realm.retriever.encode_questions(
        masked).numpy()), 3)
    np.testing.assert_array_equal(ids[:, :3], index_ids)
    np.testing.assert_allclose(scores.numpy()[:, :3], found, rtol=1e-4, atol=1e-4)
    answer_log_probs = realm.mlm_log_probs(masked, targets, ids)
    log_likelihood = marginal_log_likelihood(scores.log_softmax(axis=-1), answer_log_probs)
    (grad,) = mt.grad(log_likelihood.sum(), [scores])
    prior = np.exp(scores.log_softmax(axis=-1).numpy())
    joint = prior * np.exp(answer_log_probs.numpy())
    posterior = joint / joint.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(grad.numpy(), posterior - prior, rtol=1e-4, atol=1e-6)
    helpful = answer_log_probs.numpy().argmax(axis=1)
    assert (grad.numpy()[np.arange(3), helpful] > 0).all()
    realm.mlm_loss(masked, targets).backward()
    for encoder in (realm.input_encoder, realm.document_encoder):
        assert any(p.grad is not None and np.abs(p.grad.numpy()).sum() > 0
                   for p in encoder.parameters())
    excluded, _ = realm.retrieve(masked, exclude=sources)
    assert excluded.shape == (3, 3) and not (excluded == sources[:, None]).any()


def test_the_background_refresh_encodes_with_the_snapshot_taken_at_start(kb, tokenizer):
    realm = make_realm(kb, tokenizer)
    retriever = realm.retriever
    refresher = IndexRefresher(retriever, kb.texts, realm.index)
    with pytest.raises(RuntimeError, match="no refresh is running"):
        refresher.finish()
    at_start = retriever.index_passages(kb.texts).vectors
    refresher.start()
    with pytest.raises(RuntimeError, match="already running"):
        refresher.start()
    # training goes on meanwhile and changes the document encoder
    overfit(retriever, lambda: retriever.loss(kb.texts[:3], kb.texts[:3]), 2)
    assert refresher.finish(wait=True) and refresher.refreshes == 1
    np.testing.assert_allclose(realm.index.vectors, at_start, rtol=1e-5, atol=1e-5)
    now = realm.retriever.index_passages(kb.texts).vectors
    assert not np.allclose(now, at_start, atol=1e-4)
    refresher.start()
    assert refresher.finish() and refresher.refreshes == 2
    np.testing.assert_allclose(realm.index.vectors, now, rtol=1e-5, atol=1e-5)


@pytest.mark.eq(78, 79, 80)
def test_realm_pretrains_and_fine_tunes_on_a_tiny_batch(kb, tokenizer):
    realm = make_realm(kb, tokenizer)
    masked, targets, _ = salient_span_masking(kb.texts, tokenizer, np.random.default_rng(0))
    losses = overfit(realm, lambda: realm.mlm_loss(masked, targets), 12)
    assert losses[-1] < losses[0] / 2, (losses[0], losses[-1])
    questions = kb.questions_with(1)[:4]
    texts, answers = [q.text for q in questions], [q.answer for q in questions]
    documents = [p.numpy().copy() for p in realm.document_encoder.parameters()]
    losses = overfit(realm, lambda: realm.qa_loss(texts, answers), 20)
    assert losses[-1] < losses[0] / 5, (losses[0], losses[-1])
    assert all((a == p.numpy()).all() for a, p in zip(documents,
                                                       realm.document_encoder.parameters()))
    assert sum(a.lower() == b for a, b in zip(answers, realm.answer(texts))) >= 3
    with pytest.raises(ValueError, match="no answer of the batch is a span of its top 2"):
        realm.qa_loss(texts[:1], ["nowhere"])


def test_realm_refuses_bad_arguments(kb, tokenizer):
    realm = make_realm(kb, tokenizer)
    retriever, index = realm.retriever, realm.index
    with pytest.raises(TypeError, match="index must be a DenseIndex"):
        REALM(retriever, None, kb.texts, tokenizer, mlm=realm.mlm)
    with pytest.raises(ValueError, match=r"the index holds 6 vectors but 2 documents"):
        REALM(retriever, index, kb.texts[:2], tokenizer, mlm=realm.mlm)
    with pytest.raises(ValueError, match="give an mlm"):
        REALM(retriever, index, kb.texts, tokenizer)
    only_reader = REALM(retriever, DenseIndex(128).add(index.vectors), kb.texts, tokenizer,
                        reader=realm.reader)
    with pytest.raises(ValueError, match="pre-training needs an mlm"):
        only_reader.mlm_loss(["[MASK] was born."], [[5]])
    with pytest.raises(ValueError, match="holds 1 \\[MASK\\] tokens but its target has 2"):
        realm.mlm_loss(["[MASK] was born."], [[5, 6]])
    with pytest.raises(ValueError, match="1 texts and 2 targets"):
        realm.mlm_loss(["[MASK] was born."], [[5], [6]])
