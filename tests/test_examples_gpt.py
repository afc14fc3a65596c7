"""The GPT examples run end to end in ``--smoke`` mode and write their metrics, samples, checkpoint
and pictures: GPT-1 fine-tuning with and without the auxiliary LM loss (section IV-B) and GPT-2
generation from a HuggingFace-format checkpoint (section V-A)."""
from __future__ import annotations

import json

import pytest

import minitorch_nlp as mt
from minitorch_nlp.models.gpt import GPT2LMHeadModel

pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.sec4
def test_gpt1_finetune_smoke(run_example, tmp_path):
    run_example("gpt1_finetune.py", "--smoke", "--out", str(tmp_path / "run"))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["smoke"] is True
    assert set(metrics["final_accuracy"]) == {"pre-trained, L2 + 0.5 L1", "pre-trained, L2 only",
                                              "random init, L2 + 0.5 L1"}
    assert all(0.0 <= a <= 1.0 for a in metrics["final_accuracy"].values())
    curves = metrics["curves"]["pre-trained, L2 only"]
    assert curves["step"][-1] == metrics["config"]["finetune_steps"]
    for name in ("pretraining.png", "finetuning.png"):
        assert (tmp_path / "run" / name).read_bytes()[:8] == PNG, name


@pytest.mark.sec5
def test_gpt2_generate_smoke_trains_saves_and_reloads(run_example, tmp_path):
    done = run_example("gpt2_generate.py", "--smoke", "--out", str(tmp_path / "run"))
    assert "--- top-p 0.9" in done.stdout
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["round_trip_identical"] is True
    assert set(metrics["samples"]) >= {"greedy", "temperature 0.8", "top-k 10", "top-p 0.9"}
    assert all(text.startswith("Return the ") for text in metrics["samples"].values())
    assert metrics["cache"]["new_tokens"] > 0
    for name in ("loss.png", "sampling.png"):
        assert (tmp_path / "run" / name).read_bytes()[:8] == PNG, name
    assert isinstance(mt.from_pretrained(tmp_path / "run" / "model"), GPT2LMHeadModel)

    run_example("gpt2_generate.py", "--smoke", "--out", str(tmp_path / "again"),
                "--checkpoint", str(tmp_path / "run" / "model"))
    again = json.loads((tmp_path / "again" / "metrics.json").read_text())
    assert again["samples"]["greedy"] == metrics["samples"]["greedy"]
    assert "steps" not in again
