"""The section VI examples (pruning, quantisation) run end to end in ``--smoke`` mode and write
their metrics and pictures; the synthetic task and the training loop they share."""
from __future__ import annotations

import json

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp import scripting
from minitorch_nlp.data import sorted_or_not_task
from minitorch_nlp.models.bert import BertConfig, BertForSequenceClassification

pytestmark = [pytest.mark.sec6, pytest.mark.filterwarnings("ignore")]

PNG = b"\x89PNG\r\n\x1a\n"


def test_pruning_smoke(run_example, tmp_path):
    pytest.importorskip("matplotlib")
    run_example("pruning.py", "--smoke", "--out", str(tmp_path / "run"))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["smoke"] is True and len(metrics["train_losses"]) == 12
    assert set(metrics["layers"]["by_strategy"]) == {"top", "bottom", "even-alternate",
                                                      "odd-alternate", "symmetric",
                                                      "contribution"}
    assert metrics["heads"]["curves"]["importance"]["pruned"][0] == 0
    assert [r["target"] for r in metrics["flop"]] == [0.25, 0.5, 0.75]
    removed = metrics["heads"]["half_removed"]
    assert removed["parameters_after"] < removed["parameters_before"]
    for name in ("layers.png", "heads.png", "flop.png"):
        assert (tmp_path / "run" / name).read_bytes()[:8] == PNG, name


def test_quantisation_smoke(run_example, tmp_path):
    pytest.importorskip("matplotlib")
    run_example("quantisation.py", "--smoke", "--out", str(tmp_path / "run"))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["smoke"] is True and len(metrics["train_losses"]) == 10
    sizes = [r["bytes"] for r in metrics["bit_widths"]]
    assert [r["bits"] for r in metrics["bit_widths"]] == [8, 6, 4, 3, 2]
    assert sizes == sorted(sizes, reverse=True)
    assert sorted(metrics["qbert"]["bits"]) == [2, 4]
    assert metrics["q8bert"]["ms_per_batch_int8"] > 0
    for name in ("bits.png", "qbert.png"):
        assert (tmp_path / "run" / name).read_bytes()[:8] == PNG, name


def test_sorted_or_not_labels_say_whether_the_sequence_is_sorted():
    ids, labels = sorted_or_not_task(200, 5, "abcd", seed=3)
    assert ids.shape == (200, 6) and labels.shape == (200,)
    assert (ids[:, 0] == 1).all() and ids[:, 1:].min() >= 2 and ids[:, 1:].max() <= 5
    for row, label in zip(ids, labels):
        assert label == int((np.diff(row[1:]) >= 0).all())
    assert (labels[::2] == 1).all()
    assert 0 < labels[1::2].mean() < 0.2                      # random sequences: rarely sorted


def test_fit_classifier_lowers_the_loss():
    mt.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=6, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=8, max_position_embeddings=4, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0))
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 6, (16, 4))
    labels = (ids[:, 1] > 3).astype(int)
    losses = scripting.fit_classifier(model, ids, labels, 60, batch=8, lr=1e-2, rng=rng)
    assert len(losses) == 60 and np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
