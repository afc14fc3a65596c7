"""Section VII-D: Dense Passage Retrieval (Karpukhin et al., 2020), eq 83-84.

The retrieval distribution and the loss against the autograd.numpy references
(``minitorch_nlp/testing/reference/retrieval.py``) are checked by ``check_equation`` in
``tests/test_check.py``; here the loss by hand, the encoders
against HuggingFace's ``DPRQuestionEncoder`` / ``DPRContextEncoder`` (tiny fixtures of
``tests/fixtures/hf/make_dpr_fixtures.py``) and the shared model checks; BM25 hard negatives;
a retriever trained with in-batch and hard negatives on the knowledge base finds the passages.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp.data import knowledge_base
from minitorch_nlp.data.tokenizers import WordPieceTokenizer
from minitorch_nlp.models.dpr import DPRConfig, DPRContextEncoder, DPRQuestionEncoder
from minitorch_nlp.retrieval import (BM25, DenseRetriever, bm25_hard_negatives, dpr_loss,
                                     retrieval_log_probs)
from minitorch_nlp.testing.reference import retrieval as reference
from tests.model_checks import Learning, ModelChecks, encoder_spec, overfit

pytestmark = pytest.mark.sec7

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"


@pytest.mark.eq(84)
def test_dpr_loss_is_the_cross_entropy_of_the_positive_against_all_passages():
    rng = np.random.default_rng(0)
    q, p = rng.normal(size=(2, 3)), rng.normal(size=(4, 3))
    scores = q @ p.T
    expected = np.mean([np.log(np.exp(scores[i]).sum()) - scores[i, i] for i in range(2)])
    assert dpr_loss(mt.tensor(q), mt.tensor(p)).item() == pytest.approx(expected, rel=1e-12)


def test_bad_vectors_are_refused():
    q, p = mt.tensor(np.ones((3, 4))), mt.tensor(np.ones((2, 4)))
    with pytest.raises(ValueError, match=r"dpr_loss: passage_vectors \(2, 4\) must have at least"):
        dpr_loss(q, p)
    with pytest.raises(ValueError, match="width 4 and passage vectors of width 2"):
        retrieval_log_probs(q, mt.tensor(np.ones((2, 2))))
    with pytest.raises(ValueError, match="query_vectors must be a Tensor"):
        retrieval_log_probs(np.ones((2, 2)), p)


# ---- the encoders --------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["DPRQuestionEncoder", "DPRContextEncoder"])
def test_huggingface_checkpoints_give_huggingfaces_vectors(name, tmp_path):
    pytest.importorskip("safetensors")
    model = mt.from_pretrained(FIXTURES / name)
    assert type(model).__name__ == name
    arrays = dict(np.load(FIXTURES / name / "expected.npz"))
    out = model(arrays["input_ids"], arrays["attention_mask"], arrays["token_type_ids"])
    for key in ("pooler_output", "last_hidden_state"):
        np.testing.assert_allclose(out[key].numpy(), arrays[key], atol=1e-5, err_msg=key)
    mt.save_pretrained(model, tmp_path)
    import safetensors.numpy
    ours = safetensors.numpy.load_file(tmp_path / "model.safetensors")
    theirs = safetensors.numpy.load_file(FIXTURES / name / "model.safetensors")
    assert set(ours) == set(theirs) - {k for k in theirs if k.endswith("position_ids")}
    again = mt.from_pretrained(tmp_path)
    np.testing.assert_array_equal(again(arrays["input_ids"]).pooler_output.numpy(),
                                  model(arrays["input_ids"]).pooler_output.numpy())


@pytest.mark.eq(64, 65)
@pytest.mark.parametrize("projection_dim", [0, 5])
@pytest.mark.parametrize("model_class", [DPRQuestionEncoder, DPRContextEncoder])
def test_the_vector_is_the_cls_row_projected_or_not(model_class, projection_dim):
    """h = W BERT(x)[CLS] + b (ORQA's 128-d projection), or BERT(x)[CLS] itself without a
    projection (DPR's encoders): the first row, never a mean or the last row."""
    mt.manual_seed(0)
    model = model_class(DPRConfig.tiny(30, projection_dim=projection_dim)).to(mt.float64)
    ids = np.array([[2, 7, 9, 3], [2, 11, 3, 0]])
    out = model(ids, np.array([[1, 1, 1, 1], [1, 1, 1, 0]]))
    cls = out.last_hidden_state.numpy()[:, 0]
    encoder = getattr(model, model.encoder_name)
    if projection_dim:
        cls = reference.eq64_cls_projection(cls[:, None], encoder.encode_proj.weight.numpy(),
                                            encoder.encode_proj.bias.numpy())
    np.testing.assert_allclose(out.pooler_output.numpy(), cls, rtol=1e-12, atol=1e-12)


def test_projection_is_optional_and_checked():
    assert DPRQuestionEncoder(DPRConfig.tiny(30)).question_encoder.encode_proj is None
    model = DPRContextEncoder(DPRConfig.tiny(30, projection_dim=8))
    assert model(np.array([[2, 5, 3]])).pooler_output.shape == (1, 8)
    with pytest.raises(ValueError, match="projection_dim must be an int >= 0, got -1"):
        DPRConfig.tiny(30, projection_dim=-1)
    with pytest.raises(TypeError, match="config must be a DPRConfig"):
        DPRQuestionEncoder(object())


def _vector_batch():
    rng = np.random.default_rng(5)
    ids = rng.integers(4, 23, size=(4, 6))
    return ids, np.ones_like(ids), mt.tensor(rng.normal(size=(4, 8)).astype(np.float32))


def _encoder_spec(model_class):
    def build(dropout=0.0):
        return model_class(DPRConfig.tiny(23, projection_dim=8, hidden_dropout_prob=dropout,
                                          attention_probs_dropout_prob=dropout))
    return encoder_spec(
        model_class.__name__, build, vocab=(4, 23), output="pooler_output",
        outputs_follow_ids=False, padding_token_type=1,
        learning=Learning(_vector_batch, lambda model, batch: dpr_loss(
            model(batch[0], batch[1]).pooler_output, batch[2]), steps=60, factor=10, lr=1e-2),
        skips={"padding_left": "BERT's absolute positions count from the first column"})


class TestDPRQuestionEncoderChecks(ModelChecks):
    """E_Q's vectors under the shared checks; it learns to pick its targets among 4 (eq 84)."""

    spec = _encoder_spec(DPRQuestionEncoder)


class TestDPRContextEncoderChecks(ModelChecks):
    """E_P's vectors under the shared checks."""

    spec = _encoder_spec(DPRContextEncoder)


# ---- training a retriever on the knowledge base -------------------------------------------

def test_bm25_hard_negatives_are_high_scoring_passages_without_the_answer():
    kb = knowledge_base(n_people=12, n_cities=4)
    questions = kb.questions_with(1)
    bm25 = BM25().fit(kb.texts)
    negatives = bm25_hard_negatives(bm25, [q.text for q in questions],
                                    [q.passage_ids[0] for q in questions],
                                    [q.answer for q in questions], kb.texts)
    assert (negatives >= 0).all()
    for question, negative in zip(questions, negatives):
        assert negative != question.passage_ids[0]
        assert question.answer not in kb.texts[negative]
    with pytest.raises(ValueError, match="2 questions, 1 positive ids and 2 answers"):
        bm25_hard_negatives(bm25, ["a", "b"], [0], ["x", "y"], kb.texts)


def test_a_dpr_retriever_learns_to_find_the_positive_passages():
    kb = knowledge_base(n_people=8, n_cities=3, seed=4)
    questions = [q for q in kb.questions_with(1) if q.passage_ids[0] < 8][::3]
    tokenizer = WordPieceTokenizer.train(kb.texts + [q.text for q in kb.questions], 300)
    mt.manual_seed(0)
    # DPR starts from pretrained BERT; from scratch, BERT's std 0.02 makes every [CLS] vector
    # nearly the same and training collapses them into two clusters, a wider start does not
    config = DPRConfig.tiny(len(tokenizer), projection_dim=16, initializer_range=0.2)
    retriever = DenseRetriever(DPRQuestionEncoder(config), DPRContextEncoder(config), tokenizer)
    bm25 = BM25().fit(kb.texts)
    negatives = bm25_hard_negatives(bm25, [q.text for q in questions],
                                    [q.passage_ids[0] for q in questions],
                                    [q.answer for q in questions], kb.texts)
    texts = [q.text for q in questions]
    positives = [kb.texts[q.passage_ids[0]] for q in questions]
    hard = [kb.texts[i] for i in negatives]

    def recall_at_1():
        _, ids = retriever.retrieve(texts, retriever.index_passages(kb.texts), k=1)
        return np.mean([q.passage_ids[0] == i for q, i in zip(questions, ids[:, 0])])

    before = recall_at_1()
    losses = overfit(retriever, lambda: retriever.loss(texts, positives, hard), 30, lr=3e-3)
    assert losses[-1] < losses[0] / 10, (losses[0], losses[-1])
    assert before < 0.5 and recall_at_1() == 1.0


def test_retriever_errors_and_hard_negatives_that_are_positives():
    tokenizer = WordPieceTokenizer.train(["where was ada born", "ada was born in rome"], 60)
    config = DPRConfig.tiny(len(tokenizer))
    retriever = DenseRetriever(DPRQuestionEncoder(config), DPRContextEncoder(config), tokenizer)
    with pytest.raises(ValueError, match="encode_questions: expected a non-empty list"):
        retriever.encode_questions([])
    with pytest.raises(ValueError, match="encode_passages: expected a non-empty list"):
        retriever.encode_passages("ada was born in rome")
    with pytest.raises(ValueError, match="2 questions but 1 positive passages"):
        retriever.loss(["a", "b"], ["ada"])
    with pytest.raises(ValueError, match="index_passages: the corpus is empty"):
        retriever.index_passages([])
    questions, positives = ["where was ada born", "was ada born"], ["ada was born", "in rome"]
    with_copy = retriever.loss(questions, positives, ["in rome"]).item()
    assert with_copy == pytest.approx(retriever.loss(questions, positives).item(), rel=1e-6)
