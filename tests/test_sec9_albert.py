"""Section IX-C: ALBERT (Lan et al., 2020).

The n-gram lengths of the masked LM (eq 106) against an exact reference, and the chosen spans'
lengths against eq 106 within binomial bounds, never over special tokens or padding; SOP pairs;
what holds by construction: ALBERT with E = H, an identity projection and nothing shared is
BERT, each sharing mode shares what it says, and with every layer shared the gradient of the
shared weights is the sum of the per-layer gradients of the unshared model holding the same
weights; parameter counts from shapes (equal to the built models', the paper's Table 1, no
allocation); clear errors; every model learns a tiny batch. Padding, dropout, round trips,
dtypes and backends are the shared checks of ``tests/model_checks.py``; equality with
HuggingFace's models is in ``tests/test_hf_albert.py``.
"""
from __future__ import annotations

import dataclasses
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

import minitorch_nlp as mt
from minitorch_nlp.data.albert import (NgramMaskedLMCollator, ngram_length_probabilities,
                                       sentence_order_pairs)
from minitorch_nlp.io.huggingface import Rule
from minitorch_nlp.models.albert import (PAPER_CONFIGS, SHARING_MODES, AlbertConfig,
                                         AlbertForMaskedLM, AlbertForPreTraining, AlbertModel,
                                         parameter_count)
from minitorch_nlp.models.bert import BertConfig, BertModel
from minitorch_nlp.testing.reference import albert as R
from tests.model_checks import (Learning, ModelChecks, encoder_spec, masked_lm_batch, overfit,
                                randomize)

pytestmark = pytest.mark.sec9

TINY = dict(vocab_size=23, embedding_size=6, hidden_size=8, num_hidden_layers=3,
            num_attention_heads=2, intermediate_size=12, max_position_embeddings=10)
SPECIAL = (0, 1, 2, 3)          # [PAD], [UNK], [CLS], [SEP] in these tests; [MASK] = 3


def build(model_class, seed=0, **overrides):
    mt.manual_seed(seed)
    return model_class(AlbertConfig(**{**TINY, **overrides}))


# ---- eq 106: n-gram masking ----------------------------------------------------------------------
@pytest.mark.eq(106)
@given(st.integers(1, 12))
def test_eq106_length_probabilities_match_the_reference(max_n):
    np.testing.assert_allclose(ngram_length_probabilities(max_n),
                               R.eq106_ngram_length_probabilities(max_n), rtol=1e-15)


@pytest.mark.eq(106)
def test_eq106_for_albert_is_six_three_two_elevenths():
    np.testing.assert_allclose(ngram_length_probabilities(), [6 / 11, 3 / 11, 2 / 11])


def collator(**options):
    return NgramMaskedLMCollator(vocab_size=40, mask_token_id=3, special_ids=SPECIAL, **options)


@pytest.mark.eq(106)
def test_chosen_span_lengths_follow_eq106_within_binomial_bounds():
    """Long rows masked lightly (15% of 2000 tokens, so a span rarely meets another or the end
    of the budget): the frequency of each length lies within 4.5 standard deviations of p(n)."""
    maskable = np.ones((6, 2000), dtype=bool)
    maskable[:, ::97] = False                                      # a special token now and then
    spans = collator().choose_spans(maskable, np.random.default_rng(0))
    lengths = np.array([length for row in spans for _, length in row])
    p = R.eq106_ngram_length_probabilities(3)
    counts = np.bincount(lengths, minlength=4)[1:]
    sigma = np.sqrt(p * (1 - p) / lengths.size)
    assert lengths.size > 1000 and counts.sum() == lengths.size
    assert np.all(np.abs(counts / lengths.size - p) < 4.5 * sigma), (counts / lengths.size, p)


@st.composite
def id_batches(draw):
    batch, time = draw(st.integers(1, 4)), draw(st.integers(1, 30))
    ids = draw(st.lists(st.lists(st.integers(0, 39), min_size=time, max_size=time),
                        min_size=batch, max_size=batch))
    lengths = draw(st.lists(st.integers(0, time), min_size=batch, max_size=batch))
    return np.array(ids), np.arange(time)[None, :] < np.array(lengths)[:, None]


@pytest.mark.eq(106)
@given(id_batches(), st.integers(0, 2 ** 32 - 1))
def test_ngrams_cover_only_real_non_special_tokens_within_the_budget(case, seed):
    ids, attention_mask = case
    masker = collator()
    maskable = masker.maskable(ids, attention_mask)
    spans = masker.choose_spans(maskable, np.random.default_rng(seed))
    out = masker({"input_ids": ids, "attention_mask": attention_mask}, rng=seed)
    for row, row_spans in enumerate(spans):
        covered = np.zeros(ids.shape[1], dtype=int)
        for start, length in row_spans:
            assert 1 <= length <= 3
            covered[start:start + length] += 1
        assert covered.max(initial=0) <= 1                         # spans never overlap
        assert np.all(maskable[row][covered == 1])                 # nor touch special / padding
        assert covered.sum() <= masker.budget(maskable)[row]
    chosen = out["labels"] != -100
    assert np.all(maskable[chosen]) and np.all(out["labels"][chosen] == ids[chosen])
    assert np.all(out["input_ids"][~chosen] == ids[~chosen])
    # a row with maskable tokens gets at least one target
    assert np.all(chosen.any(axis=1) == maskable.any(axis=1))


def test_sentence_order_pairs_are_consecutive_segments_in_or_out_of_order():
    documents = [[f"d{d}s{s}" for s in range(n)] for d, n in enumerate((5, 1, 40, 3))]
    first, second, labels = sentence_order_pairs(documents, seed=0)
    assert len(first) == len(second) == labels.size == 4 + 0 + 39 + 2
    for a, b, label in zip(first, second, labels):
        (doc_a, s_a), (doc_b, s_b) = (map(int, x[1:].split("s")) for x in (a, b))
        assert doc_a == doc_b and s_b - s_a == (1 if label == 0 else -1)
    assert 0.25 < labels.mean() < 0.75
    with pytest.raises(ValueError, match="sentence_order_pairs: no document has two segments"):
        sentence_order_pairs([["only"], []])


# ---- the architecture ----------------------------------------------------------------------------
def test_albert_without_factorisation_or_sharing_is_bert():
    albert = randomize(build(AlbertModel, embedding_size=8, share_layers="none"), seed=1)
    with mt.no_grad():
        albert.embeddings.project.weight.data[...] = np.eye(8)
        albert.embeddings.project.bias.data[...] = 0
    bert = BertModel(BertConfig(**{k: v for k, v in TINY.items() if k != "embedding_size"},
                                hidden_act="gelu_new", hidden_dropout_prob=0.0,
                                attention_probs_dropout_prob=0.0)).to(mt.float64)
    state = {k: v for k, v in albert.state_dict().items() if "project" not in k}
    bert.load_state_dict(state)
    ids = np.random.default_rng(0).integers(4, 23, (2, 7))
    types = np.array([[0, 0, 0, 1, 1, 1, 1]] * 2)
    np.testing.assert_allclose(albert.eval()(ids, token_type_ids=types).last_hidden_state.numpy(),
                               bert.eval()(ids, token_type_ids=types).last_hidden_state.numpy(),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("share", SHARING_MODES)
def test_each_sharing_mode_shares_what_it_says(share):
    layers = build(AlbertModel, share_layers=share).encoder.layers
    same = {part: all(getattr(layer, part) is getattr(layers[0], part) for layer in layers)
            for part in ("self_attn", "feed_forward", "norm1")}
    assert same == {"self_attn": share in ("all", "attention"),
                    "feed_forward": share in ("all", "ffn"), "norm1": share == "all"}
    assert (layers[0] is layers[1]) == (share == "all")


def test_all_shared_gradient_is_the_sum_of_the_unshared_layers_gradients():
    shared = randomize(build(AlbertForMaskedLM), seed=2)
    unshared = build(AlbertForMaskedLM, share_layers="none").to(mt.float64)
    unshared.load_state_dict(shared.state_dict())          # every layer gets the shared weights
    rng = np.random.default_rng(3)
    ids = rng.integers(4, 23, (2, 6))
    labels = np.where(rng.random((2, 6)) < 0.5, ids, -100)
    outputs = [model(ids, labels=labels) for model in (shared, unshared)]
    np.testing.assert_allclose(outputs[0].logits.numpy(), outputs[1].logits.numpy(), rtol=1e-12)
    for out in outputs:
        out.loss.backward()
    shared_layer, differ = shared.bert.encoder.layers[0], []
    for name, param in shared_layer.named_parameters():
        per_layer = [dict(layer.named_parameters())[name].grad.numpy()
                     for layer in unshared.bert.encoder.layers]
        differ.append(not np.allclose(per_layer[0], per_layer[1]))
        np.testing.assert_allclose(param.grad.numpy(), sum(per_layer), rtol=1e-9, atol=1e-12,
                                   err_msg=name)
    # the depths send different gradients (all but the key bias, which softmax ignores)
    assert sum(differ) == len(differ) - 1


# ---- parameter counts ----------------------------------------------------------------------------
@given(st.sampled_from(SHARING_MODES), st.integers(1, 3), st.integers(1, 4), st.integers(1, 4),
       st.integers(1, 3), st.booleans(), st.booleans())
def test_parameter_count_equals_the_built_models(share, layers, heads, embedding, width, pooler,
                                                 albert):
    hidden = 2 * heads * width
    sizes = dict(vocab_size=17, hidden_size=hidden, num_hidden_layers=layers,
                 num_attention_heads=heads, intermediate_size=3 * width + 1,
                 max_position_embeddings=9, type_vocab_size=3)
    if albert:
        config = AlbertConfig(**sizes, embedding_size=min(embedding, hidden), share_layers=share)
        model = AlbertModel(config, add_pooling_layer=pooler)
    else:
        config = BertConfig(**sizes)
        model = BertModel(config, add_pooling_layer=pooler)
    assert parameter_count(config, pooler) == model.num_parameters()


# Lan et al. Table 1 prints BERT's counts without the pooler and ALBERT's with it (ALBERT-base:
# 11.1M without, 11.7M with; the paper says 12M). Its xlarge and xxlarge figures (60M, 235M) fit
# neither: the configurations it lists give 58.7M and 222.6M (HuggingFace's albert-xxlarge-v2 has
# the same 222 595 584), so for those two the exact shape arithmetic below is what is checked.
TABLE1_ROUNDED = {"BERT base": (False, 108), "BERT large": (False, 334),
                  "ALBERT base": (True, 12), "ALBERT large": (True, 18)}
TABLE1_EXACT = {"ALBERT xlarge": 58_724_864, "ALBERT xxlarge": 222_595_584}


@pytest.mark.parametrize("name", list(PAPER_CONFIGS))
def test_table1_parameter_counts(name):
    config, printed = PAPER_CONFIGS[name]
    if name in TABLE1_ROUNDED:
        pooler, millions = TABLE1_ROUNDED[name]
        assert f"{millions}M" == printed
        assert round(parameter_count(config, pooler) / 1e6) == millions
    else:
        hidden, embedding = config.hidden_size, config.embedding_size
        tables = (30000 + 512 + 2) * embedding + 2 * embedding
        layer = (4 * hidden * hidden + 4 * hidden + 2 * 4 * hidden * hidden + 5 * hidden
                 + 4 * hidden)
        expected = tables + embedding * hidden + hidden + layer + hidden * hidden + hidden
        assert parameter_count(config) == expected == TABLE1_EXACT[name]


def test_counting_xxlarge_allocates_nothing():
    config = PAPER_CONFIGS["ALBERT xxlarge"][0]
    tracemalloc.start()
    count = parameter_count(config)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert count > 2e8 and peak < 100_000


# ---- errors --------------------------------------------------------------------------------------
def test_errors_name_albert_limits():
    with pytest.raises(ValueError, match="AlbertConfig: embedding_size=16 is larger than "
                                         "hidden_size=8; .* lower embedding_size"):
        AlbertConfig(**{**TINY, "embedding_size": 16})
    with pytest.raises(ValueError, match=r"AlbertConfig: share_layers must be one of \('all', "
                                         r"'attention', 'ffn', 'none'\), got 'layers'"):
        AlbertConfig(**{**TINY, "share_layers": "layers"})
    with pytest.raises(ValueError, match="AlbertConfig: embedding_size must be a positive int"):
        AlbertConfig(**{**TINY, "embedding_size": 0})
    with pytest.raises(ValueError, match="num_hidden_groups=2 and inner_group_num=1 are not "):
        AlbertConfig.from_hf({**TINY, "num_hidden_groups": 2})
    with pytest.raises(ValueError, match="share_layers='ffn' has no HuggingFace format"):
        mt.save_pretrained(build(AlbertModel, share_layers="ffn"), "never-written")
    rule = Rule("layer.w", "layers.{i}.w").expand([0, 1])[0]
    np.testing.assert_array_equal(rule.hf_array([np.ones(2), np.ones(2)]), np.ones(2))
    with pytest.raises(ValueError, match=r"layer.w is one tensor that every layer shares, but "
                                         r"our layers \[0, 1\] hold different values"):
        rule.hf_array([np.ones(2), np.zeros(2)])


# ---- the shared checks and learning --------------------------------------------------------------
def build_with_dropout(model_class, **overrides):
    def build_model(dropout=0.0):
        return model_class(AlbertConfig(**TINY, hidden_dropout_prob=dropout,
                                        attention_probs_dropout_prob=dropout, **overrides))
    return build_model


class TestAlbertForMaskedLMChecks(ModelChecks):
    """Right padding (holding random ids of segment 1), round trips, learning (the loss falls
    20-fold in 100 steps with one shared layer), dtypes, backends, dropout."""

    spec = encoder_spec(
        "AlbertForMaskedLM", build_with_dropout(AlbertForMaskedLM), vocab=(4, 23),
        padding_token_type=1,
        learning=Learning(masked_lm_batch, lambda model, inputs: model(**inputs).loss, steps=100,
                          factor=20, lr=1e-2),
        skips={"padding_left": "ALBERT's absolute positions count from the first column"})


class TestAlbertModelChecks(ModelChecks):
    spec = encoder_spec(
        "AlbertModel", build_with_dropout(AlbertModel), vocab=(4, 23),
        output="last_hidden_state", padding_token_type=1,
        skips={"padding_left": TestAlbertForMaskedLMChecks.spec.skips["padding_left"],
               "learns": "no objective of its own; AlbertForMaskedLM learns"})


class TestAlbertModelSharedAttentionChecks(ModelChecks):
    """The encoder with only the attention shared (no HuggingFace format: HuggingFace's ALBERT
    shares whole layers)."""

    spec = dataclasses.replace(
        TestAlbertModelChecks.spec, build=build_with_dropout(AlbertModel, share_layers="attention"),
        hf=False, skips={**TestAlbertModelChecks.spec.skips,
                         "hf_round_trip": "HuggingFace's ALBERT shares all layers, not the "
                                          "attention alone"})


def test_pretraining_learns_masked_lm_and_sentence_order_together():
    inputs = dict(masked_lm_batch(11), sentence_order_label=np.array([0, 1, 0]))
    model = build(AlbertForPreTraining, classifier_dropout_prob=0.0)
    losses = overfit(model, lambda: model(**inputs).loss, 100, lr=1e-2)
    assert losses[-1] < losses[0] / 20, (losses[0], losses[-1])
    out = model.eval()(**inputs)
    np.testing.assert_array_equal(out.sop_logits.numpy().argmax(-1), [0, 1, 0])
    assert out.prediction_logits.shape == (3, 8, 23)


@pytest.mark.parametrize("page", ["README.md", "docs/systems/sec9_albert.md"])
def test_the_printed_table1_rows_are_parameter_count(page):
    """The README's and the ALBERT page's Table 1 rows give what ``parameter_count`` computes."""
    text = (Path(__file__).resolve().parent.parent / page).read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip().strip("*") for cell in line.strip("|").split("|")]
        if cells[0] in PAPER_CONFIGS:
            rows[cells[0]] = cells
    assert set(rows) == set(PAPER_CONFIGS)
    for name, cells in rows.items():
        config, printed = PAPER_CONFIGS[name]
        assert cells[5] == printed
        assert cells[6] == f"{parameter_count(config, add_pooling_layer=False) / 1e6:.2f}M", name
        assert cells[7] == f"{parameter_count(config) / 1e6:.2f}M", name
