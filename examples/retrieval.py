# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # Retrieval: BM25, DPR, ORQA, REALM, RAG and GoldEn on a synthetic knowledge base
#
# *The NLP Cookbook*, section VII (Karpukhin et al., 2020, "Dense Passage Retrieval for
# Open-Domain Question Answering"; Lee et al., 2019, "Latent Retrieval for Weakly Supervised
# Open Domain Question Answering"; Guu et al., 2020, "REALM: Retrieval-Augmented Language Model
# Pre-Training"; Lewis et al., 2020, "Retrieval-Augmented Generation for Knowledge-Intensive NLP
# Tasks"; Qi et al., 2019, GoldEn Retriever); eq 62-84.
#
# The built-in knowledge base invents people and cities and describes each in one passage;
# its questions ("Where was Velora Danmik born?") have answers that are spans of a passage.
# We compare how often the right passage is among the k best (recall@k) for
#
# * **BM25**, the sparse baseline: word overlap weighted by rarity;
# * **DPR**, two small BERT encoders trained from scratch with eq 84 on the training questions,
#   in-batch negatives plus one BM25 hard negative per question;
# * **ORQA's ICT retriever** (eq 64-66, 70), the same encoders with a 128-d projection trained
#   without any question: a sentence of a passage must find the rest of its passage;
# * **REALM's retriever** (eq 72-77), the ICT retriever trained further through a masked
#   language model that reads what it retrieves (salient spans masked, a null document, the
#   index refreshed in the background);
#
# on held-out questions about the same corpus, and on the second hop of the two-hop questions
# ("In which country was Velora Danmik born?"), whose answer passage the question never names.
# **GoldEn Retriever** (eq 62-63) answers that with a second search whose query it generates
# from the first passage; we compare how often it holds both gold passages after two hops with
# one search for the top 2. Then three readers answer: **ORQA** (eq 67-71, a span reader over
# the ICT retriever's top k, trained end to end with the block encoder frozen), **REALM** (eq
# 78-80, fine-tuned from its pre-training) and **RAG** (eq 81-82, a small BART that writes the
# answer from the passages DPR retrieves); we report exact match.
#
# ```
# python examples/retrieval.py            # the full run: a few minutes on one CPU core
# python examples/retrieval.py --smoke    # seconds: the pipeline end to end
# ```
#
# Outputs go to `--out` (default `runs/retrieval`): `metrics.json` and `recall.png`, which a
# notebook also shows below the cell that makes it.

# %%
SMOKE = False  # True: tiny settings, seconds (the command line's --smoke)

# %%
import os  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import numpy as np  # noqa: E402

from minitorch_nlp import optim, plots, scripting  # noqa: E402
from minitorch_nlp.data import knowledge_base  # noqa: E402
from minitorch_nlp.data.tokenizers import WordPieceTokenizer  # noqa: E402
from minitorch_nlp.models.bert import (BertConfig, BertForMaskedLM,  # noqa: E402
                                       BertForQuestionAnswering)
from minitorch_nlp.models.bart import BartConfig, BartForConditionalGeneration  # noqa: E402
from minitorch_nlp.models.dpr import DPRConfig, DPRContextEncoder, DPRQuestionEncoder  # noqa
from minitorch_nlp.retrieval import (ORQA, RAG, REALM, BM25, DenseRetriever,  # noqa: E402
                                     IndexRefresher, QueryGenerator, SpanReader,
                                     bm25_hard_negatives, golden_retrieve, inverse_cloze_task,
                                     oracle_query, salient_span_masking)

SETTINGS = {
    "full": dict(people=60, cities=15, vocab_size=600, hidden=64, layers=2, heads=4,
                 projection=32, dpr_steps=600, dpr_batch=16, dpr_lr=2e-3, rag_steps=600,
                 rag_batch=8, rag_lr=3e-3, n_docs=4, ks=(1, 5, 20), golden_steps=150,
                 golden_batch=16, ict_steps=600, ict_batch=32, orqa_steps=400, orqa_batch=8,
                 realm_steps=600, realm_batch=8, refresh_every=100, realm_qa_steps=400),
    "smoke": dict(people=8, cities=3, vocab_size=200, hidden=32, layers=1, heads=4,
                  projection=16, dpr_steps=8, dpr_batch=8, dpr_lr=3e-3, rag_steps=4,
                  rag_batch=4, rag_lr=3e-3, n_docs=2, ks=(1, 5, 20), golden_steps=3,
                  golden_batch=8, ict_steps=4, ict_batch=8, orqa_steps=2, orqa_batch=4,
                  realm_steps=3, realm_batch=4, refresh_every=2, realm_qa_steps=2),
}
parser = scripting.example_parser(
    "retrieval", "BM25, DPR, ORQA, REALM, RAG and GoldEn on the synthetic knowledge base (VII)")
args = scripting.arguments(parser, smoke=SMOKE)
run_start = time.perf_counter()
cfg, out = scripting.start(args, SETTINGS)


# %% [markdown]
# ## Data: the passages, and questions split into training and held-out
#
# Every single-hop question names its entity; 70% of them train DPR and RAG, the rest measure
# them. Both kinds ask about the same corpus, as in open-domain QA, where the retriever is
# trained on questions about the very passages it indexes.

# %%
def split_questions(questions, seed):
    order = np.random.default_rng(seed).permutation(len(questions))
    cut = int(0.7 * len(questions))
    return [questions[i] for i in order[:cut]], [questions[i] for i in order[cut:]]


def train_loop(name, steps, model, loss_fn, lr=3e-3):
    optimizer = optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    for step in scripting.progress(range(steps), desc=name):
        loss = loss_fn(step)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def recall_at(ranked, gold, ks):
    """The fraction of rows of ``ranked`` (questions, >= max k) that hold ``gold`` in the first
    k, for each k."""
    return {k: float(np.mean([g in row[:k] for row, g in zip(ranked, gold)])) for k in ks}


kb = knowledge_base(cfg["people"], cfg["cities"], seed=args.seed)
train, held_out = split_questions(kb.questions_with(1), args.seed)
two_hop = kb.questions_with(2)
two_hop_train, two_hop_held_out = split_questions(two_hop, args.seed + 2)
tokenizer = WordPieceTokenizer.train(kb.texts + [q.text for q in kb.questions], cfg["vocab_size"])
depth = len(kb.texts)
ks = [k for k in cfg["ks"] if k <= depth] or [depth]
bm25 = BM25().fit(kb.texts)
print(f"{len(kb.texts)} passages; {len(train)} training, {len(held_out)} held-out and "
      f"{len(two_hop)} two-hop questions")
print(f"  {kb.texts[0]}\n  {held_out[0].text} -> {held_out[0].answer}\n  {two_hop[0].text} -> "
      f"{two_hop[0].answer}")


# %% [markdown]
# ## DPR: eq 84 with in-batch and BM25 hard negatives
#
# Each step takes a batch of training questions; question i's positive is its gold passage,
# its negatives are the other questions' positives and every question's hard negative (the best
# BM25 passage without the answer).

# %%
def train_dpr(cfg, kb, train, tokenizer, bm25, seed):
    config = DPRConfig(vocab_size=len(tokenizer), hidden_size=cfg["hidden"],
                       num_hidden_layers=cfg["layers"], num_attention_heads=cfg["heads"],
                       intermediate_size=4 * cfg["hidden"], max_position_embeddings=96,
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                       projection_dim=cfg["projection"], initializer_range=0.2)
    retriever = DenseRetriever(DPRQuestionEncoder(config), DPRContextEncoder(config), tokenizer)
    negatives = bm25_hard_negatives(bm25, [q.text for q in train],
                                    [q.passage_ids[0] for q in train],
                                    [q.answer for q in train], kb.texts)
    rng = np.random.default_rng(seed)

    def loss(step):
        rows = rng.choice(len(train), size=min(cfg["dpr_batch"], len(train)), replace=False)
        # one question per gold passage in a batch: two would be each other's negatives
        rows = list({train[r].passage_ids[0]: r for r in rows}.values())
        return retriever.loss([train[r].text for r in rows],
                              [kb.texts[train[r].passage_ids[0]] for r in rows],
                              [kb.texts[negatives[r]] for r in rows if negatives[r] >= 0])

    return retriever, train_loop("DPR", cfg["dpr_steps"], retriever, loss, cfg["dpr_lr"])


retriever, dpr_losses = train_dpr(cfg, kb, train, tokenizer, bm25, args.seed)
index = retriever.index_passages(kb.texts)


# %% [markdown]
# ## ORQA: the Inverse Cloze Task, then the reader (eq 64-71)
#
# ICT needs no question: each step takes a batch of passages, a random sentence of each is the
# pseudo-question and the rest of its passage (the whole passage 10% of the time) the evidence
# to pick among the batch's (eq 70). Then the passages are indexed once with the frozen block
# encoder, and the question encoder and a span reader train on the training questions with
# the early update over the whole corpus plus eq 71 over the top k.

# %%
def bert_config(cfg, tokenizer):
    return BertConfig(vocab_size=len(tokenizer), hidden_size=cfg["hidden"],
                      num_hidden_layers=cfg["layers"], num_attention_heads=cfg["heads"],
                      intermediate_size=4 * cfg["hidden"], max_position_embeddings=128,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                      initializer_range=0.2)


def train_ict(cfg, kb, tokenizer, seed):
    config = DPRConfig(**{**vars(bert_config(cfg, tokenizer)), "projection_dim": 128})
    retriever = DenseRetriever(DPRQuestionEncoder(config), DPRContextEncoder(config), tokenizer)
    rng = np.random.default_rng(seed)

    def loss(step):
        blocks = rng.choice(len(kb.texts), size=min(cfg["ict_batch"], len(kb.texts)),
                            replace=False)
        questions, evidence, _ = inverse_cloze_task([kb.texts[b] for b in blocks], rng)
        return retriever.loss(questions, evidence)

    return retriever, train_loop("ICT", cfg["ict_steps"], retriever, loss)


def train_orqa(cfg, kb, train, tokenizer, retriever, seed):
    orqa = ORQA(retriever, retriever.index_passages(kb.texts), kb.texts,
                SpanReader(bert_config(cfg, tokenizer)), tokenizer, k=cfg["n_docs"],
                early_k=len(kb.texts))
    rng = np.random.default_rng(seed)

    def loss(step):
        rows = rng.choice(len(train), size=min(cfg["orqa_batch"], len(train)), replace=False)
        return orqa.loss([train[r].text for r in rows], [train[r].answer for r in rows])

    return orqa, train_loop("ORQA", cfg["orqa_steps"], orqa, loss)


ict_retriever, ict_losses = train_ict(cfg, kb, tokenizer, args.seed)
ict_index = ict_retriever.index_passages(kb.texts)


def reader_exact_match(model, questions):
    answers = model.answer([q.text for q in questions])
    return float(np.mean([a == q.answer.lower() for a, q in zip(answers, questions)]))


# %% [markdown]
# ## REALM: retrieval-augmented masked-LM pre-training, then fine-tuning (eq 72-80)
#
# REALM starts from a copy of the ICT retriever. Each pre-training step masks one salient span
# (a name or a year) in a batch of passages; p(y | x) sums over the top k passages and the null
# document (eq 73, 76-77), and the gradient trains both embeddings. The index, which only
# selects the k passages, is re-encoded in a background thread every `refresh_every` steps from
# a snapshot of the document encoder. REALM on Wikipedia excludes the passage a masked sentence
# came from; in this corpus every fact is in exactly one passage, so that would leave nothing to
# find, and the source passage stays a candidate. Fine-tuning then trains the input encoder and
# a span reader on the training questions (eq 78-80), the index fixed.

# %%
def train_realm(cfg, kb, train, tokenizer, ict_retriever, seed):
    # a copy through the state dicts: parameters deep-copied after training (copy.deepcopy) are
    # not updated by a new optimizer's steps, and REALM's retriever would never move
    encoders = []
    for trained in (ict_retriever.question_encoder, ict_retriever.context_encoder):
        encoders.append(type(trained)(trained.config))
        encoders[-1].load_state_dict(trained.state_dict())
    retriever = DenseRetriever(*encoders, tokenizer)
    index = retriever.index_passages(kb.texts)
    config = bert_config(cfg, tokenizer)
    realm = REALM(retriever, index, kb.texts, tokenizer, mlm=BertForMaskedLM(config),
                  reader=SpanReader(config), k=cfg["n_docs"])
    refresher = IndexRefresher(retriever, kb.texts, index)
    rng = np.random.default_rng(seed)

    def mlm_loss(step):
        if refresher.running:
            refresher.finish(wait=False)    # installs the new vectors once they are ready
        elif step % cfg["refresh_every"] == 0:
            refresher.start()
        rows = rng.choice(len(kb.texts), size=min(cfg["realm_batch"], len(kb.texts)),
                          replace=False)
        masked, targets, _ = salient_span_masking([kb.texts[r] for r in rows], tokenizer, rng)
        return realm.mlm_loss(masked, targets)

    pretraining = train_loop("REALM pre-training", cfg["realm_steps"], realm, mlm_loss)
    if refresher.running:
        refresher.finish()
    realm.index.reset(retriever.index_passages(kb.texts).vectors)   # the final encoder's
    skipped = []

    def qa_loss(step):
        rows = rng.choice(len(train), size=min(cfg["orqa_batch"], len(train)), replace=False)
        questions, answers = [train[r].text for r in rows], [train[r].answer for r in rows]
        try:
            return realm.qa_loss(questions, answers)
        except ValueError:   # no answer of this batch is in its top k: take another batch
            skipped.append(step)
            return qa_loss(step)

    fine_tuning = train_loop("REALM fine-tuning", cfg["realm_qa_steps"], realm, qa_loss)
    return realm, pretraining, fine_tuning, refresher.refreshes, len(skipped)


realm, realm_losses, realm_qa_losses, refreshes, skipped = train_realm(
    cfg, kb, train, tokenizer, ict_retriever, args.seed + 3)

# %% [markdown]
# ## Recall@k of the four retrievers
#
# On the held-out questions, and on the second passage of the two-hop questions.

# %%
dense = {"DPR": (retriever, index), "ORQA (ICT)": (ict_retriever, ict_index),
         "REALM": (realm.retriever, realm.index)}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")   # k = the corpus's size is clamped, as documented
    rankings = {
        "BM25": lambda questions: bm25.search([q.text for q in questions], depth)[1],
        **{name: lambda questions, pair=pair: pair[0].retrieve(
            [q.text for q in questions], pair[1], depth)[1] for name, pair in dense.items()}}
    recall, two_hop_recall, curves = {}, {}, {}
    for name, rank in rankings.items():
        ranked = rank(held_out)
        gold = [q.passage_ids[0] for q in held_out]
        recall[name] = recall_at(ranked, gold, ks)
        curves[name] = recall_at(ranked, gold, range(1, min(depth, 20) + 1))
        two_hop_recall[name] = recall_at(rank(two_hop), [q.passage_ids[1] for q in two_hop], ks)
for name in rankings:
    print(f"{name:10} held-out recall " + "  ".join(f"@{k} {v:.3f}"
                                                  for k, v in recall[name].items())
          + "  | two-hop, second passage " + "  ".join(
              f"@{k} {v:.3f}" for k, v in two_hop_recall[name].items()))

figure, axis = plots.pyplot().subplots(figsize=(6, 4))
for name, curve in curves.items():
    axis.plot(list(curve), list(curve.values()), marker="o", label=name)
axis.set(xlabel="k", ylabel="recall@k", title="gold passage among the k best", ylim=(0, 1.02))
axis.legend()
plots.show(figure, out / "recall.png")


# %% [markdown]
# ## GoldEn: a query per hop (eq 62-63)
#
# The query generator is a BERT span reader trained on the oracle queries of the training
# two-hop questions: for the first hop, the span of the question that makes BM25 rank the
# person's passage first; for the second, the span of question + that passage that ranks the
# city's passage first (the city's name).

# %%
def train_golden(cfg, kb, train, tokenizer, bm25, seed):
    examples = []
    for question in train:
        first, second = question.passage_ids
        examples.append((question.text, "", oracle_query(bm25, question.text, "", first)[0]))
        context = kb.texts[first]
        examples.append((question.text, context,
                         oracle_query(bm25, question.text, context, second)[0]))
    reader = BertForQuestionAnswering(BertConfig(
        vocab_size=len(tokenizer), hidden_size=cfg["hidden"], num_hidden_layers=cfg["layers"],
        num_attention_heads=cfg["heads"], intermediate_size=4 * cfg["hidden"],
        max_position_embeddings=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        initializer_range=0.2))
    generator = QueryGenerator(reader, tokenizer)
    rng = np.random.default_rng(seed)

    def loss(step):
        rows = rng.choice(len(examples), size=min(cfg["golden_batch"], len(examples)),
                          replace=False)
        return generator.loss(*zip(*(examples[r] for r in rows)))

    return generator, train_loop("GoldEn", cfg["golden_steps"], reader, loss)


def both_found(questions, ranked):
    return float(np.mean([set(q.passage_ids) <= set(row) for q, row in zip(questions, ranked)]))


generator, golden_losses = train_golden(cfg, kb, two_hop_train, tokenizer, bm25, args.seed)
golden_ids, _ = golden_retrieve([q.text for q in two_hop_held_out], generator, bm25, kb.texts)
texts = [q.text for q in two_hop_held_out]
both = {"GoldEn (2 hops)": both_found(two_hop_held_out, golden_ids),
        "BM25 top 2": both_found(two_hop_held_out, bm25.search(texts, 2)[1]),
        "DPR top 2": both_found(two_hop_held_out, retriever.retrieve(texts, index, 2)[1])}
print("held-out two-hop questions, both gold passages found: "
      + ", ".join(f"{k} {v:.3f}" for k, v in both.items()))


# %% [markdown]
# ## RAG: a generator reads what DPR retrieves (eq 81-82)
#
# RAG starts from the trained DPR retriever; the passage index stays fixed, the question
# encoder and the generator, a BART as in the paper (here small and trained from scratch, on
# the WordPiece vocabulary: [PAD] pads, the decoder starts from [SEP] as BART's starts from its
# </s>, and [SEP] ends the answer), train together on -log p_RAG-Token(y | x) (eq 82).

# %%
def train_rag(cfg, kb, train, tokenizer, retriever, seed):
    generator = BartForConditionalGeneration(BartConfig(
        vocab_size=len(tokenizer), d_model=cfg["hidden"], encoder_layers=cfg["layers"],
        decoder_layers=cfg["layers"], encoder_attention_heads=cfg["heads"],
        decoder_attention_heads=cfg["heads"], encoder_ffn_dim=4 * cfg["hidden"],
        decoder_ffn_dim=4 * cfg["hidden"], dropout=0.0, max_position_embeddings=128,
        init_std=0.1, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id, decoder_start_token_id=tokenizer.sep_token_id,
        forced_eos_token_id=None))
    rag = RAG(retriever, retriever.index_passages(kb.texts), kb.texts, generator, tokenizer,
              n_docs=cfg["n_docs"])
    rng = np.random.default_rng(seed)

    def loss(step):
        rows = rng.choice(len(train), size=min(cfg["rag_batch"], len(train)), replace=False)
        return rag.loss([train[r].text for r in rows], [train[r].answer for r in rows], "token")

    return rag, train_loop("RAG", cfg["rag_steps"], rag, loss, cfg["rag_lr"])


def exact_match(rag, questions, kind, method="thorough"):
    answers = rag.generate([q.text for q in questions], kind, beam_size=2, max_len=8,
                           method=method)
    return float(np.mean([a == q.answer.lower() for a, q in zip(answers, questions)]))


# %% [markdown]
# ## The readers: exact match of ORQA, REALM and RAG

# %%
orqa, orqa_losses = train_orqa(cfg, kb, train, tokenizer, ict_retriever, args.seed + 4)
rag, rag_losses = train_rag(cfg, kb, train, tokenizer, retriever, args.seed + 1)
exact = {split: {"ORQA": reader_exact_match(orqa, questions),
                 "REALM": reader_exact_match(realm, questions),
                 "RAG-Token": exact_match(rag, questions, "token"),
                 "RAG-Sequence (thorough)": exact_match(rag, questions, "sequence"),
                 "RAG-Sequence (fast)": exact_match(rag, questions, "sequence", "fast")}
         for split, questions in (("train", train), ("held-out", held_out))}
for split, scores in exact.items():
    print(f"exact match ({split}): " + ", ".join(f"{k} {v:.3f}" for k, v in scores.items()))

# %%
scripting.write_metrics(out, {
    "smoke": args.smoke, "seed": args.seed, "backend": args.backend, "config": cfg,
    "passages": len(kb.texts), "questions": {"train": len(train), "held_out": len(held_out),
                                             "two_hop": len(two_hop)},
    "recall_held_out": recall, "recall_two_hop_second_passage": two_hop_recall,
    "recall_curves": curves, "exact_match": exact, "two_hop_both_found": both,
    "golden_loss": {"first": golden_losses[0], "last": golden_losses[-1]},
    "dpr_loss": {"first": dpr_losses[0], "last": dpr_losses[-1]},
    "rag_loss": {"first": rag_losses[0], "last": rag_losses[-1]},
    "ict_loss": {"first": ict_losses[0], "last": ict_losses[-1]},
    "orqa_loss": {"first": orqa_losses[0], "last": orqa_losses[-1]},
    "realm_mlm_loss": {"first": realm_losses[0], "last": realm_losses[-1]},
    "realm_qa_loss": {"first": realm_qa_losses[0], "last": realm_qa_losses[-1]},
    "realm_index_refreshes": refreshes, "realm_qa_batches_redrawn": skipped,
    "total_seconds": time.perf_counter() - run_start,
})
