"""Retrieval-Augmented Generation (Lewis et al., 2020), the survey's section VII-D, eq 81-82, with
the marginal over retrieved documents that it shares with REALM (Guu et al., 2020, eq 73).

A DPR retriever p_eta(z | x) (eq 83) picks the top k passages z for the input x; a seq2seq
generator p_theta(y_i | x, z, y_<i) reads "x // z" and writes the answer. The passage is a latent
variable, marginalised either once per answer or once per token:

    RAG-Sequence (eq 81): p(y | x) = sum_z p_eta(z | x) prod_i p_theta(y_i | x, z, y_<i)
    RAG-Token    (eq 82): p(y | x) = prod_i sum_z p_eta(z | x) p_theta(y_i | x, z, y_<i)

p_eta is renormalised over the k retrieved passages (Lewis section 2.1: "top-K truncated").
Training (section 2.4) minimises -log p(y | x) and updates the query encoder and the generator;
the passage encoder and its index stay fixed. Decoding (section 2.5): RAG-Token is an ordinary
beam search over the per-token marginal; RAG-Sequence searches each passage's beam, then scores
every hypothesis either under all k passages ("thorough") or only under the passages whose beam
produced it, with the beam's own score ("fast").

The generator is any encoder-decoder model with the library's one generation interface,
:class:`~minitorch_nlp.decoding.Seq2SeqGeneration` (BART, as the paper; mBART, T5 and the
section IV Transformer speak it too): its ``encoder_decoder.encode`` / ``decode`` and ``logits``
give the teacher-forced log-probabilities, ``start_decoding`` and ``step`` (with the decoder's
key/value cache) drive the searches, and its config's ``decoder_start_token_id``,
``eos_token_id`` and ``pad_token_id`` start, end and pad the answers. Decoding uses the model's
own probabilities: a config's forced first or last token is not applied.
"""
from __future__ import annotations

import os

import numpy as np

from .. import checks, cookbook, decoding
from .. import functional as F
from ..autograd import Tensor, no_grad, tensor
from ..data.tokenizers.base import read_json, write_json
from ..io.files import path_inside
from ..nn import Module
from .dpr import DenseRetriever
from .index import DenseIndex, load_index_folder, save_index_folder

__all__ = ["RAG", "marginal_log_likelihood", "rag_sequence_log_likelihood",
           "rag_token_log_likelihood"]

KINDS = ("sequence", "token")
FORMAT, SETTINGS = "minitorch_nlp.rag", "rag.json"


def _check_log_probs(doc_log_probs, token_log_probs, target_mask, where):
    if not isinstance(doc_log_probs, Tensor) or doc_log_probs.ndim != 2:
        raise ValueError(f"{where}: doc_log_probs must be a Tensor (batch, k)")
    if not isinstance(token_log_probs, Tensor) or token_log_probs.ndim != 3 \
            or token_log_probs.shape[:2] != doc_log_probs.shape:
        shape = getattr(token_log_probs, "shape", type(token_log_probs).__name__)
        raise ValueError(f"{where}: token_log_probs must be a Tensor (batch, k, T) = "
                         f"{doc_log_probs.shape} + (T,), got {shape}")
    batch, _, time = token_log_probs.shape
    if target_mask is None:
        return np.ones((batch, time), dtype=bool)
    mask = np.asarray(target_mask, dtype=bool)
    if mask.shape != (batch, time):
        raise ValueError(f"{where}: target_mask {mask.shape} must be (batch, T) = "
                         f"{(batch, time)}")
    return mask


@cookbook.equation(73)
def marginal_log_likelihood(doc_log_probs, answer_log_probs):
    """log p(y | x) = log sum_z p(z | x) p(y | z, x) over the given documents (eq 73, REALM).
    ``doc_log_probs`` log p(z | x) and ``answer_log_probs`` log p(y | z, x), Tensors (batch,
    k); returns (batch,). With k = |Z| this is the exact marginal; over the top k it is REALM's
    approximation."""
    if not isinstance(doc_log_probs, Tensor) or doc_log_probs.ndim != 2 \
            or not isinstance(answer_log_probs, Tensor) \
            or answer_log_probs.shape != doc_log_probs.shape:
        raise ValueError("marginal_log_likelihood: doc_log_probs and answer_log_probs must be "
                         "Tensors of one shape (batch, k), got "
                         f"{getattr(doc_log_probs, 'shape', None)} and "
                         f"{getattr(answer_log_probs, 'shape', None)}")
    return (doc_log_probs + answer_log_probs).logsumexp(axis=-1)


@cookbook.equation(81)
def rag_sequence_log_likelihood(doc_log_probs, token_log_probs, *, target_mask=None):
    """log p_RAG-Sequence(y | x) (eq 81): one passage for the whole answer.

    ``doc_log_probs`` (batch, k): log p_eta(z | x); ``token_log_probs`` (batch, k, T):
    log p_theta(y_i | x, z, y_<i); ``target_mask`` (batch, T) bool, False on padding (None:
    every position counts). Returns (batch,)."""
    mask = _check_log_probs(doc_log_probs, token_log_probs, target_mask,
                            "rag_sequence_log_likelihood")
    weights = tensor(mask[:, None, :], dtype=token_log_probs.dtype,
                     backend=token_log_probs.backend)
    return marginal_log_likelihood(doc_log_probs, (token_log_probs * weights).sum(axis=-1))


@cookbook.equation(82)
def rag_token_log_likelihood(doc_log_probs, token_log_probs, *, target_mask=None):
    """log p_RAG-Token(y | x) (eq 82): a passage per token, marginalised at every position.
    Arguments as for :func:`rag_sequence_log_likelihood`; returns (batch,)."""
    mask = _check_log_probs(doc_log_probs, token_log_probs, target_mask,
                            "rag_token_log_likelihood")
    batch, k = doc_log_probs.shape
    per_token = (doc_log_probs.reshape(batch, k, 1) + token_log_probs).logsumexp(axis=1)
    weights = tensor(mask, dtype=per_token.dtype, backend=per_token.backend)
    return (per_token * weights).sum(axis=-1)


_LIKELIHOODS = {"sequence": rag_sequence_log_likelihood, "token": rag_token_log_likelihood}


class RAG(Module):
    """A DPR retriever over a fixed index and a seq2seq generator, trained jointly::

        index = retriever.index_passages(passages)          # E_P, once; then fixed
        rag = RAG(retriever, index, passages, generator, tokenizer, n_docs=5)
        loss = rag.loss(questions, answers, kind="token")   # or "sequence"
        rag.generate(questions, kind="sequence", method="thorough")   # answers as text
        rag.save("my_rag"); rag = RAG.load("my_rag")

    ``retriever``: a :class:`~minitorch_nlp.retrieval.DenseRetriever` (its question encoder is
    trained, its passage encoder is not used again); ``index``: a :class:`DenseIndex` of the
    ``passages``' vectors; ``generator``: a ``decoding.Seq2SeqGeneration`` model, e.g.
    ``BartForConditionalGeneration``; ``tokenizer``: the generator's vocabulary for its input and
    output, whose padding id is the generator's ``pad_token_id``; ``n_docs``: the k passages
    retrieved (clamped to the corpus's size); ``max_source_length``: tokens of "question //
    passage" kept."""

    def __init__(self, retriever, index, passages, generator, tokenizer, n_docs=5,
                 max_source_length=96):
        super().__init__()
        if not isinstance(index, DenseIndex):
            raise TypeError(f"RAG: index must be a DenseIndex (its vectors give p_eta), got "
                            f"{type(index).__name__}")
        if len(index) != len(passages):
            raise ValueError(f"RAG: the index holds {len(index)} vectors but {len(passages)} "
                             "passages were given; index exactly these passages")
        if not isinstance(generator, decoding.Seq2SeqGeneration):
            raise TypeError(f"RAG: the generator must be an encoder-decoder model with "
                            f"decoding.Seq2SeqGeneration (BartForConditionalGeneration, "
                            f"T5ForConditionalGeneration, Transformer), got "
                            f"{type(generator).__name__}")
        config = generator.config
        if tokenizer.pad_token_id != config.pad_token_id:
            raise ValueError(f"RAG: the generator's pad_token_id={config.pad_token_id} must be "
                             f"the tokenizer's padding id {tokenizer.pad_token_id}; build the "
                             "generator's config from the tokenizer's special ids")
        self.question_encoder = retriever.question_encoder
        self.generator = generator
        self.retriever, self.index, self.passages = retriever, index, list(passages)
        self.tokenizer, self.max_source_length = tokenizer, max_source_length
        self.n_docs = min(checks.positive_int(n_docs, "n_docs", "RAG"), len(index))

    # ---- the two models -------------------------------------------------------------------------
    def retrieve(self, questions):
        """The top ``n_docs`` passages of each question and log p_eta(z | x) over them: ``(ids
        (batch, k) int64, doc_log_probs (batch, k) Tensor)``, differentiable in the question
        encoder (eq 83 renormalised over the k)."""
        ids, scores = self.retriever.scored_top_k(questions, self.index, self.n_docs)
        return ids, scores.log_softmax(axis=-1)

    def _sources(self, questions, doc_ids):
        """The generator's input for every (question, passage) pair, question-major: "x // z"
        (Lewis section 2.4: "we simply concatenate x and z"), rows batch * k."""
        texts = [f"{question} // {self.passages[i]}"
                 for question, row in zip(questions, doc_ids) for i in row]
        batch = self.tokenizer(texts, padding=True, truncation=True,
                               max_length=self.max_source_length, return_tensors="np")
        return batch["input_ids"], batch["attention_mask"].astype(bool)

    def _targets(self, answers):
        """The decoder's input (start y), its targets (y eos) and the mask of real target
        positions; each answer is a string or a list of token ids."""
        rows = [self.tokenizer.encode(answer, add_special_tokens=False)
                if isinstance(answer, str) else list(answer) for answer in answers]
        time = max(len(row) for row in rows) + 1
        config = self.generator.config
        pad, start, eos = config.pad_token_id, config.decoder_start_token_id, config.eos_token_id
        tgt_in = np.full((len(rows), time), pad, dtype=np.int64)
        tgt_out = np.full((len(rows), time), pad, dtype=np.int64)
        for r, row in enumerate(rows):
            tgt_in[r, :len(row) + 1] = [start, *row]
            tgt_out[r, :len(row) + 1] = [*row, eos]
        return tgt_in, tgt_out, tgt_out != pad

    def _logits(self, src, src_mask, tgt_in):
        """The generator's teacher-forced logits (rows, T, V): the encoder once, then the
        decoder over the whole target (causal, so padding after a row's end changes nothing
        before it)."""
        parts = self.generator.encoder_decoder
        memory = parts.encode(src, src_mask).last_hidden_state
        return self.generator.logits(parts.decode(tgt_in, memory, src_mask).last_hidden_state)

    def token_log_probs(self, questions, doc_ids, answers):
        """log p_theta(y_i | x, z, y_<i) of each answer (a string or token ids) under each of its
        question's passages: ``(Tensor (batch, k, T), target_mask (batch, T))``, 0 at padded
        positions."""
        src, src_mask = self._sources(questions, doc_ids)
        tgt_in, tgt_out, target_mask = self._targets(answers)
        k = doc_ids.shape[1]
        tgt_in, tgt_out_k = np.repeat(tgt_in, k, axis=0), np.repeat(tgt_out, k, axis=0)
        log_probs = -F.cross_entropy(self._logits(src, src_mask, tgt_in), tgt_out_k,
                                     ignore_index=self.generator.config.pad_token_id,
                                     reduction="none")
        return log_probs.reshape(len(questions), k, tgt_out.shape[1]), target_mask

    def log_likelihood(self, questions, answers, kind="token"):
        """log p(y | x) of each answer (eq 81 for ``kind="sequence"``, eq 82 for ``"token"``):
        a Tensor (batch,), differentiable in the question encoder and the generator."""
        if kind not in KINDS:
            raise ValueError(f"RAG: kind must be one of {KINDS}, got {kind!r}")
        if isinstance(questions, str) or len(questions) != len(answers) or not len(questions):
            raise ValueError(f"RAG: give lists of as many answers as questions (at least one), "
                             f"got {len(questions)} questions and {len(answers)} answers")
        doc_ids, doc_log_probs = self.retrieve(questions)
        token_log_probs, target_mask = self.token_log_probs(questions, doc_ids, answers)
        return _LIKELIHOODS[kind](doc_log_probs, token_log_probs, target_mask=target_mask)

    def loss(self, questions, answers, kind="token"):
        """The mean of -log p(y | x) over the batch (Lewis section 2.4)."""
        return -self.log_likelihood(questions, answers, kind).mean()

    # ---- decoding -------------------------------------------------------------------------------
    def _answer_ids(self, ids):
        """A generated row up to its <eos>, as a tuple of ids."""
        ids, eos = [int(i) for i in ids], self.generator.config.eos_token_id
        return tuple(ids[:ids.index(eos)] if eos in ids else ids)

    def _text(self, ids):
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def generate(self, questions, kind="token", beam_size=4, max_len=16, method="thorough"):
        """The answers (strings) of RAG-Token (beam search over the per-token marginal, eq 82)
        or RAG-Sequence (``method="thorough"`` or ``"fast"``, see the module docstring)."""
        if kind not in KINDS:
            raise ValueError(f"RAG.generate: kind must be one of {KINDS}, got {kind!r}")
        if method not in ("thorough", "fast"):
            raise ValueError(f"RAG.generate: method must be 'thorough' or 'fast', got {method!r}")
        with self.inference(), no_grad():
            doc_ids, doc_log_probs = self.retrieve(questions)
            doc_log_probs = np.asarray(doc_log_probs.numpy(), dtype=np.float64)
            if kind == "token":
                return self._generate_token(questions, doc_ids, doc_log_probs, beam_size,
                                            max_len)
            return self._generate_sequence(questions, doc_ids, doc_log_probs, beam_size,
                                           max_len, method)

    def _search_ids(self):
        """The start, end and padding ids of the generator's config, as the searches name them."""
        config = self.generator.config
        return dict(bos_id=config.decoder_start_token_id, eos_id=config.eos_token_id,
                    pad_id=config.pad_token_id)

    def _per_doc_sources(self, questions, doc_ids):
        """The sources of passage j of every question, for each j: k arrays of (batch, S)."""
        src, mask = self._sources(questions, doc_ids)
        batch, k = doc_ids.shape
        return [(src[j::k], mask[j::k]) for j in range(k)]

    def _generate_token(self, questions, doc_ids, doc_log_probs, beam_size, max_len):
        states = [self.generator.start_decoding(src, mask)
                  for src, mask in self._per_doc_sources(questions, doc_ids)]

        def step(tokens, state):
            outputs = [self.generator.step(tokens, s) for s in state["docs"]]
            per_doc = np.stack([np.asarray(lp.numpy(), dtype=np.float64) for lp, _ in outputs],
                               axis=1)                                      # (rows, k, V)
            joint = state["doc_log_probs"][:, :, None] + per_doc
            top = joint.max(axis=1, keepdims=True)
            marginal = (top + np.log(np.exp(joint - top).sum(axis=1, keepdims=True)))[:, 0]
            return marginal, {"docs": [s for _, s in outputs],
                              "doc_log_probs": state["doc_log_probs"]}

        ids, _ = decoding.beam_search(step, {"docs": states, "doc_log_probs": doc_log_probs},
                                      batch_size=len(questions), max_len=max_len,
                                      beam_size=beam_size, length_penalty=0.0,
                                      **self._search_ids())
        return [self._text(self._answer_ids(row)) for row in ids]

    def _generate_sequence(self, questions, doc_ids, doc_log_probs, beam_size, max_len, method):
        batch, k = doc_ids.shape
        # each passage's beam: its best hypothesis and log p_theta(y | x, z) (no length penalty)
        beams = [decoding.beam_search(self.generator.step, self.generator.start_decoding(src, mask),
                                      batch_size=batch, max_len=max_len, beam_size=beam_size,
                                      length_penalty=0.0, **self._search_ids())
                 for src, mask in self._per_doc_sources(questions, doc_ids)]
        answers = []
        for b in range(batch):
            hypotheses = {}
            for j, (ids, scores) in enumerate(beams):
                hypotheses.setdefault(self._answer_ids(ids[b]), {})[j] = scores[b]
            candidates = list(hypotheses)
            if method == "fast":
                # p(y | x, z) taken as 0 for the passages whose beam did not produce y
                marginals = [np.logaddexp.reduce([doc_log_probs[b, j] + s
                                                  for j, s in hypotheses[t].items()])
                             for t in candidates]
            else:
                token_log_probs, mask = self.token_log_probs(
                    [questions[b]] * len(candidates),
                    np.repeat(doc_ids[b:b + 1], len(candidates), axis=0), candidates)
                marginals = rag_sequence_log_likelihood(
                    tensor(np.repeat(doc_log_probs[b:b + 1], len(candidates), axis=0),
                           dtype=token_log_probs.dtype, backend=token_log_probs.backend),
                    token_log_probs, target_mask=mask).numpy()
            answers.append(self._text(candidates[int(np.argmax(marginals))]))
        return answers

    # ---- saving ---------------------------------------------------------------------------------
    def save(self, directory):
        """Write this RAG as the folder ``directory`` (created if needed), nothing pickled:

        * ``generator/`` and ``question_encoder/``: HuggingFace-format folders (``config.json``
          and ``model.safetensors``), each with its tokenizer; the generator must be a model
          that format holds (``BartForConditionalGeneration``, mBART, T5);
        * ``index/``: the fixed passage index with its passages, an index folder as
          ``minitorch-nlp index build`` writes it;
        * ``rag.json``: ``n_docs``, ``max_source_length``, the retriever's ``max_length`` and
          the index folder's path (relative to ``directory``) and its vectors' width."""
        from ..io.huggingface import save_pretrained
        for name, model, tokenizer in (("generator", self.generator, self.tokenizer),
                                       ("question_encoder", self.question_encoder,
                                        self.retriever.tokenizer)):
            save_pretrained(model, os.path.join(directory, name))
            tokenizer.save(os.path.join(directory, name))
        save_index_folder(os.path.join(directory, "index"), self.index, self.passages)
        write_json(os.path.join(directory, SETTINGS), {
            "format": FORMAT, "n_docs": self.n_docs, "max_source_length": self.max_source_length,
            "retriever_max_length": self.retriever.max_length, "index": "index",
            "dim": self.index.dim})

    @classmethod
    def load(cls, directory, index=None, *, backend=None):
        """The RAG that :meth:`save` wrote to ``directory``, retrieving from the index folder
        ``index`` (default: the one saved with it; another must hold vectors of the same
        passage encoder). ``backend``: where the models and the index go (default: the active
        one). The models come back in ``eval()`` mode."""
        from ..data.tokenizers import load_tokenizer
        from ..io.huggingface import from_pretrained
        settings = read_json(os.path.join(directory, SETTINGS))
        if not isinstance(settings, dict) or settings.get("format") != FORMAT:
            raise ValueError(f"RAG.load: {directory} is not a saved RAG (no {SETTINGS} of "
                             f"format {FORMAT!r}); write one with RAG.save")
        folder = (path_inside(directory, settings["index"], os.path.join(directory, SETTINGS))
                  if index is None else index)
        kind, dense_index, passages = load_index_folder(folder, backend=backend)
        if kind != "dense":
            raise ValueError(f"RAG.load: {folder} holds a {kind} index; RAG retrieves from a "
                             "dense index of its passage encoder's vectors ('index build "
                             "--encoder CTX_DIR')")
        if dense_index.dim != settings["dim"]:
            raise ValueError(f"RAG.load: the index in {folder} holds vectors of width "
                             f"{dense_index.dim}, but this RAG's question encoder gives "
                             f"{settings['dim']}; index the passages with the RAG's passage "
                             "encoder")
        parts = {name: (from_pretrained(os.path.join(directory, name), backend=backend),
                        load_tokenizer(os.path.join(directory, name)))
                 for name in ("generator", "question_encoder")}
        question_encoder, question_tokenizer = parts["question_encoder"]
        retriever = DenseRetriever(question_encoder, None, question_tokenizer,
                                   max_length=settings["retriever_max_length"])
        generator, tokenizer = parts["generator"]
        return cls(retriever, dense_index, passages, generator, tokenizer,
                   n_docs=settings["n_docs"], max_source_length=settings["max_source_length"])
