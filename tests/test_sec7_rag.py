"""Section VII-C/D: REALM's marginal (eq 73) and RAG-Sequence / RAG-Token (Lewis et al., 2020,
eq 81-82) with a DPR retriever and a BART generator (any ``decoding.Seq2SeqGeneration`` model:
the section IV Transformer runs through the same code).

The equations against their references are in ``tests/test_check.py``; here: the marginal over
k = |Z| retrieved passages equals the brute-force sum over the whole corpus, RAG-Token with one
passage equals RAG-Sequence with one passage, the gradient of the marginal likelihood raises the
score of the passage that helps, RAG-Token's beam search with one passage is the generator's own
``generate``, and a tiny RAG learns to answer (both decodings of RAG-Sequence included), training
the question encoder and the generator but not the passage encoder.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
from minitorch_nlp import cli, optim
from minitorch_nlp.data import knowledge_base
from minitorch_nlp.data.tokenizers import WordPieceTokenizer
from minitorch_nlp.models.bart import BartConfig, BartForConditionalGeneration
from minitorch_nlp.models.dpr import DPRConfig, DPRContextEncoder, DPRQuestionEncoder
from minitorch_nlp.models.transformer import Transformer
from minitorch_nlp.retrieval import (BM25, RAG, DenseIndex, DenseRetriever,
                                     marginal_log_likelihood, rag_sequence_log_likelihood,
                                     rag_token_log_likelihood)
from minitorch_nlp.retrieval import save_index_folder
from minitorch_nlp.nn import replaced_tensors
from minitorch_nlp.testing import strategies as S

pytestmark = pytest.mark.sec7


@pytest.mark.eq(81, 82)
@given(st.integers(1, 3), st.integers(1, 5), st.data())
def test_rag_token_with_one_document_equals_rag_sequence(batch, time, data):
    token_log_probs = mt.tensor(data.draw(S.arrays((batch, 1, time), low=-3.0, high=0.0)))
    doc_log_probs = mt.tensor(np.zeros((batch, 1)))
    mask = data.draw(S.bool_masks((batch, time)))
    np.testing.assert_allclose(
        rag_token_log_likelihood(doc_log_probs, token_log_probs, target_mask=mask).numpy(),
        rag_sequence_log_likelihood(doc_log_probs, token_log_probs, target_mask=mask).numpy(),
        rtol=1e-12, atol=1e-12)


@pytest.mark.eq(73)
def test_the_gradient_of_the_marginal_raises_the_score_of_the_helpful_document():
    scores = mt.tensor(np.zeros((1, 3)), requires_grad=True)
    answer = mt.tensor(np.log([[0.9, 0.1, 0.1]]))        # document 0 explains the answer
    marginal_log_likelihood(scores.log_softmax(axis=-1), answer).sum().backward()
    grad = scores.grad.numpy()[0]
    assert grad[0] > 0 > grad[1] and grad[1] == pytest.approx(grad[2])
    # d log p(y|x) / d s_z = p(z | x, y) - p(z | x)
    posterior = np.array([0.9, 0.1, 0.1]) / 1.1
    np.testing.assert_allclose(grad, posterior - 1 / 3, rtol=1e-12)


def test_marginal_bad_input():
    with pytest.raises(ValueError, match="Tensors of one shape"):
        marginal_log_likelihood(mt.tensor(np.zeros((2, 3))), mt.tensor(np.zeros((2, 2))))
    with pytest.raises(ValueError, match=r"token_log_probs must be a Tensor \(batch, k, T\)"):
        rag_token_log_likelihood(mt.tensor(np.zeros((2, 3))), mt.tensor(np.zeros((2, 2, 4))))
    with pytest.raises(ValueError, match=r"target_mask \(2, 3\) must be \(batch, T\)"):
        rag_sequence_log_likelihood(mt.tensor(np.zeros((2, 3))), mt.tensor(np.zeros((2, 3, 4))),
                                    target_mask=np.ones((2, 3)))


# ---- a tiny RAG on the knowledge base -------------------------------------------------------

def tiny_bart(tokenizer, d_model=32):
    """A one-layer BART over the tokenizer's vocabulary: [PAD] pads, the decoder starts from
    [SEP] (BART starts from its </s>) and [SEP] ends the answer."""
    return BartForConditionalGeneration(BartConfig.tiny(
        vocab_size=len(tokenizer), d_model=d_model, encoder_layers=1, decoder_layers=1,
        encoder_ffn_dim=2 * d_model, decoder_ffn_dim=2 * d_model, max_position_embeddings=128,
        init_std=0.1, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id, decoder_start_token_id=tokenizer.sep_token_id,
        forced_eos_token_id=None))


def tiny_transformer(tokenizer):
    return Transformer(len(tokenizer), d_model=32, num_heads=4, num_encoder_layers=1,
                       num_decoder_layers=1, d_ff=64, dropout=0.0, label_smoothing=0.0,
                       max_len=128, pad_id=tokenizer.pad_token_id, bos_id=tokenizer.cls_token_id,
                       eos_id=tokenizer.sep_token_id)


GENERATORS = {"bart": tiny_bart, "transformer": tiny_transformer}


def tiny_rag(n_docs, seed=0, dtype=None, generator="bart"):
    kb = knowledge_base(n_people=4, n_cities=2, seed=1)
    tokenizer = WordPieceTokenizer.train(kb.texts + [q.text for q in kb.questions], 200)
    mt.manual_seed(seed)
    config = DPRConfig.tiny(len(tokenizer), projection_dim=16, initializer_range=0.2)
    retriever = DenseRetriever(DPRQuestionEncoder(config), DPRContextEncoder(config), tokenizer)
    generator = GENERATORS[generator](tokenizer)
    if dtype is not None:
        retriever.question_encoder.to(dtype)
        retriever.context_encoder.to(dtype)
        generator.to(dtype)
    index = retriever.index_passages(kb.texts)
    return RAG(retriever, index, kb.texts, generator, tokenizer, n_docs=n_docs), kb


@pytest.mark.eq(73, 81, 82)
@pytest.mark.parametrize("kind", ["sequence", "token"])
def test_top_k_with_k_equal_to_the_corpus_is_the_brute_force_marginal(kind):
    rag, kb = tiny_rag(n_docs=100, dtype="float64")
    questions = [q.text for q in kb.questions[:3]]
    answers = [q.answer for q in kb.questions[:3]]
    ours = rag.log_likelihood(questions, answers, kind).numpy()
    everything = np.tile(np.arange(len(kb.texts)), (3, 1))
    token_log_probs, mask = rag.token_log_probs(questions, everything, answers)
    token_log_probs = token_log_probs.numpy()
    q = rag.retriever.encode_questions(questions).numpy()
    scores = q @ rag.index.vectors.astype(np.float64).T
    p_z = np.exp(scores - scores.max(1, keepdims=True))
    p_z /= p_z.sum(1, keepdims=True)
    for b in range(3):
        per_token = np.exp(token_log_probs[b][:, mask[b]])          # (|Z|, real positions)
        if kind == "sequence":
            expected = np.log(sum(p_z[b, z] * per_token[z].prod() for z in range(len(p_z[b]))))
        else:
            expected = np.log((p_z[b][:, None] * per_token).sum(0)).sum()
        assert ours[b] == pytest.approx(expected, rel=1e-6)


@pytest.mark.eq(81, 82)
@pytest.mark.parametrize("kind", ["sequence", "token"])
def test_float64_gradients_reach_the_question_encoder_and_bart(kind):
    """The gradient of log p(y | x) with respect to the question encoder's projection (through
    p_eta, eq 83) and BART's shared embedding (through p_theta), along a random direction,
    equals the central finite difference, over all passages (k = |Z|, so a perturbation cannot
    change which passages are retrieved)."""
    rag, kb = tiny_rag(n_docs=100, dtype="float64")
    questions, answers = [q.text for q in kb.questions[:2]], [q.answer for q in kb.questions[:2]]
    names = ("question_encoder.question_encoder.encode_proj.weight",
             "generator.model.shared.weight")
    parameters = dict(rag.named_parameters())
    rng = np.random.default_rng(0)
    direction = {name: rng.standard_normal(parameters[name].shape) for name in names}
    rag.log_likelihood(questions, answers, kind).sum().backward()
    analytical = sum((parameters[name].grad.numpy() * direction[name]).sum() for name in names)

    def moved(eps):
        with replaced_tensors(rag, {name: mt.tensor(parameters[name].numpy() + eps * v)
                                    for name, v in direction.items()}):
            return rag.log_likelihood(questions, answers, kind).sum().item()

    eps = 1e-6
    assert analytical == pytest.approx((moved(eps) - moved(-eps)) / (2 * eps), rel=1e-6)
    assert abs(analytical) > 1e-3


@pytest.mark.eq(81, 82)
def test_rag_token_with_one_document_equals_rag_sequence_on_the_model():
    rag, kb = tiny_rag(n_docs=1)
    questions, answers = [q.text for q in kb.questions[:4]], [q.answer for q in kb.questions[:4]]
    np.testing.assert_allclose(rag.log_likelihood(questions, answers, "token").numpy(),
                               rag.log_likelihood(questions, answers, "sequence").numpy(),
                               rtol=1e-6)


@pytest.mark.parametrize("generator", ["bart", "transformer"])
def test_rag_token_beam_search_with_one_document_is_the_generators(generator):
    """With one passage the marginal is the generator's own distribution, so RAG-Token's beam
    is the generator's ``generate`` (its key/value cache) on "question // passage"."""
    rag, kb = tiny_rag(n_docs=1, generator=generator)
    questions = [q.text for q in kb.questions[:3]]
    doc_ids, _ = rag.retrieve(questions)
    src, mask = rag._sources(questions, doc_ids)
    ids = rag.generator.generate(src, mask, num_beams=3, max_new_tokens=6, length_penalty=0.0)
    assert rag.generate(questions, "token", beam_size=3, max_len=6) == \
        [rag._text(rag._answer_ids(row[1:])) for row in ids]


@pytest.fixture(scope="module")
def trained():
    """A tiny RAG with a BART generator trained 30 steps on four questions (RAG-Sequence and
    RAG-Token alternately), with its parameters before training and its losses."""
    rag, kb = tiny_rag(n_docs=3)
    questions = kb.questions_with(1)[:4]
    texts, answers = [q.text for q in questions], [q.answer for q in questions]
    optimizer = optim.AdamW(rag.parameters(), lr=1e-2, weight_decay=0.0)
    before = {name: [p.numpy().copy() for p in module.parameters()] for name, module in
              (("question", rag.question_encoder), ("generator", rag.generator),
               ("context", rag.retriever.context_encoder))}
    losses = []
    for step in range(30):
        loss = rag.loss(texts, answers, "token" if step % 2 else "sequence")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return rag, kb, texts, answers, before, losses


def test_a_tiny_rag_learns_to_answer_training_the_question_encoder_and_bart(trained):
    rag, kb, texts, answers, before, losses = trained
    assert losses[-1] < losses[0] / 5, losses
    assert any(not np.array_equal(a, p.numpy()) for a, p in
               zip(before["question"], rag.question_encoder.parameters()))
    assert all(not np.array_equal(a, p.numpy()) for a, p in
               zip(before["generator"], rag.generator.parameters()))
    assert all(np.array_equal(a, p.numpy()) for a, p in
               zip(before["context"], rag.retriever.context_encoder.parameters()))
    wanted = [answer.lower() for answer in answers]
    assert rag.generate(texts, "token") == wanted
    assert rag.generate(texts, "sequence", method="thorough") == wanted
    assert rag.generate(texts, "sequence", method="fast") == wanted


def test_a_saved_rag_loads_with_the_same_likelihoods_and_answers(trained, tmp_path):
    pytest.importorskip("safetensors")
    rag, kb, texts, answers, _, _ = trained
    rag.save(tmp_path / "rag")
    assert sorted(p.name for p in (tmp_path / "rag").iterdir()) == \
        ["generator", "index", "question_encoder", "rag.json"]
    loaded = RAG.load(tmp_path / "rag")
    assert isinstance(loaded.generator, BartForConditionalGeneration)
    assert loaded.passages == rag.passages and loaded.n_docs == rag.n_docs
    np.testing.assert_array_equal(loaded.index.vectors, rag.index.vectors)
    with rag.inference():
        for kind in ("token", "sequence"):
            np.testing.assert_allclose(loaded.log_likelihood(texts, answers, kind).numpy(),
                                       rag.log_likelihood(texts, answers, kind).numpy(),
                                       rtol=1e-5)
    assert loaded.generate(texts, "token") == rag.generate(texts, "token")


def test_rag_load_refuses_what_it_cannot_use(trained, tmp_path):
    pytest.importorskip("safetensors")
    rag = trained[0]
    rag.save(tmp_path / "rag")
    with pytest.raises(ValueError, match="is not a saved RAG .no rag.json"):
        RAG.load(tmp_path)
    save_index_folder(tmp_path / "bm25", BM25().fit(rag.passages), rag.passages)
    with pytest.raises(ValueError, match="holds a bm25 index; RAG retrieves from a dense"):
        RAG.load(tmp_path / "rag", index=tmp_path / "bm25")
    narrow = DenseIndex(4).add(np.ones((len(rag.passages), 4)))
    save_index_folder(tmp_path / "narrow", narrow, rag.passages)
    with pytest.raises(ValueError, match="vectors of width 4, but this RAG's question encoder "
                                         "gives 16"):
        RAG.load(tmp_path / "rag", index=tmp_path / "narrow")
    with pytest.raises(ValueError, match="is not an index folder"):
        RAG.load(tmp_path / "rag", index=tmp_path)
    transformer_rag, _ = tiny_rag(n_docs=1, generator="transformer")
    with pytest.raises(ValueError, match="Transformer has no HuggingFace architecture"):
        transformer_rag.save(tmp_path / "transformer_rag")


def test_ask_answers_with_a_saved_rag(trained, tmp_path, capsys):
    pytest.importorskip("safetensors")
    rag, kb, texts, answers, _, _ = trained
    rag.save(tmp_path / "rag")
    for kind in ("token", "sequence"):
        for question, answer in zip(texts, answers):
            capsys.readouterr()
            assert cli.main(["ask", str(tmp_path / "rag" / "index"), "--question", question,
                             "--model", str(tmp_path / "rag"), "--kind", kind]) == 0
            printed = capsys.readouterr().out.strip()
            ids = rag.retrieve([question])[0][0]
            assert printed == f"{answer.lower()}\t(RAG-{kind.capitalize()}, passages " + \
                ", ".join(f"#{i}" for i in ids) + ")"
    assert cli.main(["ask", str(tmp_path / "rag" / "index"), "--question", texts[0], "--model",
                     str(tmp_path / "rag"), "-k", "1"]) == 0
    assert capsys.readouterr().out.strip().endswith(
        f"passages #{rag.retrieve(texts[:1])[0][0, 0]})")


def test_ask_with_a_rag_errors_are_one_line_naming_the_option(trained, tmp_path, capsys):
    pytest.importorskip("safetensors")
    rag = trained[0]
    folder, index = tmp_path / "rag", tmp_path / "rag" / "index"
    rag.save(folder)
    save_index_folder(tmp_path / "bm25", BM25().fit(rag.passages), rag.passages)
    cases = [
        (["ask", str(index), "--question", "who?"], "one of the arguments --reader --model"),
        (["ask", str(index), "--question", "who?", "--model", str(folder), "--reader",
          str(folder)], "--reader: not allowed with argument --model"),
        (["ask", str(index), "--question", "who?", "--model", str(tmp_path / "no")],
         "--model: .* is not a folder"),
        (["ask", str(index), "--question", "who?", "--model", str(tmp_path)],
         "--model: RAG.load: .* is not a saved RAG"),
        (["ask", str(tmp_path / "bm25"), "--question", "who?", "--model", str(folder)],
         "DIR: .* holds a bm25 index; --model retrieves from a dense index"),
        (["ask", str(tmp_path), "--question", "who?", "--model", str(folder)],
         "DIR: .* is not an index folder"),
        (["ask", str(index), "--question", "who?", "--model", str(folder), "--beam-size", "0"],
         "--beam-size must be >= 1"),
        (["ask", str(index), "--question", "who?", "--model", str(folder), "-k", "0"],
         "-k must be >= 1"),
        (["ask", str(index), "--question", "who?", "--model", str(folder), "--kind", "both"],
         "--kind: invalid choice"),
    ]
    capsys.readouterr()
    for argv, message in cases:
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("minitorch-nlp: error:") and err.count("\n") == 1, (argv, err)
        assert re.search(message, err), (argv, err)


def test_rag_bad_input():
    rag, kb = tiny_rag(n_docs=2)
    with pytest.raises(ValueError, match="kind must be one of"):
        rag.loss(["a"], ["b"], kind="both")
    with pytest.raises(ValueError, match="1 questions and 2 answers"):
        rag.loss(["a"], ["b", "c"])
    with pytest.raises(ValueError, match="method must be 'thorough' or 'fast'"):
        rag.generate(["a"], "sequence", method="slow")
    with pytest.raises(ValueError, match="the index holds 6 vectors but 5 passages"):
        RAG(rag.retriever, rag.index, kb.texts[:5], rag.generator, rag.tokenizer)
    with pytest.raises(TypeError, match="index must be a DenseIndex"):
        RAG(rag.retriever, object(), kb.texts, rag.generator, rag.tokenizer)
    generator = BartForConditionalGeneration(BartConfig.tiny(vocab_size=len(rag.tokenizer)))
    with pytest.raises(ValueError, match="pad_token_id=1 must be the tokenizer's padding id 0"):
        RAG(rag.retriever, rag.index, kb.texts, generator, rag.tokenizer)
    with pytest.raises(TypeError, match="decoding.Seq2SeqGeneration .* got DPRQuestionEncoder"):
        RAG(rag.retriever, rag.index, kb.texts, rag.question_encoder, rag.tokenizer)
    with pytest.raises(ValueError, match="n_docs must be a positive int, got 0"):
        RAG(rag.retriever, rag.index, kb.texts, rag.generator, rag.tokenizer, n_docs=0)
    assert RAG(rag.retriever, rag.index, kb.texts, rag.generator, rag.tokenizer,
               n_docs=50).n_docs == len(kb.texts)
