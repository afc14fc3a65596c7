"""``minitorch-nlp plan``: the cost model of ``minitorch_nlp.distributed.plan`` -- Megatron-LM's
parameter counts from shapes, every figure of one small layout computed by hand, ZeRO's and
recomputation's effect, the command's output and its errors. (ZeRO's memory formula is checked
against the paper's figure 1 in ``tests/test_distributed.py``; GPT-3's counts against its table
2.1 in ``tests/test_sec5_gpt3.py``.)"""
from __future__ import annotations

import pytest

from minitorch_nlp import cli
from minitorch_nlp.distributed.plan import (MEGATRON_SIZES, Layout, model_config, parse_layout,
                                            plan)
from minitorch_nlp.models.gpt import GPTConfig
from minitorch_nlp.models.gpt3 import count_parameters

pytestmark = pytest.mark.sec4


@pytest.mark.parametrize("name", list(MEGATRON_SIZES))
def test_megatron_table_1_parameter_counts_from_shapes(name):
    assert count_parameters(model_config(name)) == pytest.approx(MEGATRON_SIZES[name][0],
                                                                 rel=0.02)


def test_every_figure_of_a_small_layout_by_hand():
    config = GPTConfig.tiny()           # L 2, h 32, 4 heads, 32 positions
    psi = count_parameters(config)
    result = plan(config, Layout(dp=2, tp=2, pp=2), zero=1, global_batch=4)
    psi_device = psi / 4
    assert result["micro_batches"] == 2                  # 4 sequences / (dp 2 x micro-batch 1)
    assert result["model_state"] == {"parameters": 2 * round(psi_device),
                                     "gradients": 2 * round(psi_device),
                                     "optimizer": 12 * round(psi_device) / 2}
    # s b h (10 + 24 / t + 5 a s / (h t)) = 32 * 32 * (10 + 12 + 10), for 1 layer x 2 in flight
    assert result["activations"] == result["activations_without_recompute"] == 2 * 32768
    assert result["activations_with_recompute"] == 2 * 2 * 32 * 32
    assert result["dp_bytes"] == pytest.approx(2 * psi_device)      # ring: 2 n (p - 1) / p
    # 4 all-reduces x ring(s b h x 2 bytes over t = 2) x 1 layer per stage x 2 micro-batches
    assert result["tp_bytes"] == 4 * (2 * 2048 * (2 - 1) / 2) * 1 * 2
    assert result["pp_bytes"] == 2 * 2048 * 2


def test_zero_3_float32_and_recomputation_change_what_they_should():
    config = GPTConfig.tiny()
    base = plan(config, Layout(dp=4), zero=0)
    zero3 = plan(config, Layout(dp=4), zero=3)
    assert zero3["dp_bytes"] == pytest.approx(1.5 * base["dp_bytes"])
    assert sum(zero3["model_state"].values()) == pytest.approx(
        sum(base["model_state"].values()) / 4)
    float32 = plan(config, Layout(dp=4), precision="float32")
    assert float32["model_state"]["optimizer"] == pytest.approx(
        base["model_state"]["optimizer"] * 8 / 12)
    assert float32["activations"] == 2 * base["activations"]
    recomputed = plan(config, Layout(tp=2, dp=2), recompute=True)
    assert recomputed["activations"] == recomputed["activations_with_recompute"]
    assert recomputed["tp_bytes"] == 1.5 * plan(config, Layout(tp=2, dp=2))["tp_bytes"]


def test_layouts_default_dp_to_what_tp_and_pp_leave():
    assert parse_layout("tp=8,pp=16", 1024) == Layout(dp=8, tp=8, pp=16)
    assert parse_layout("", 4) == Layout(dp=4)


def test_the_plan_command_prints_memory_and_traffic(capsys):
    assert cli.main(["plan", "--model", "gpt3-175b", "--gpus", "1024", "--parallel",
                     "dp=8,tp=8,pp=16", "--zero", "1", "--global-batch", "1536"]) == 0
    out = capsys.readouterr().out
    assert "gpt3-175b on 1024 devices: dp=8 tp=8 pp=16, ZeRO stage 1" in out
    assert "parameters: 174,604,259,328 (1,364,095,776 per device)" in out
    assert "192 micro-batch(es) per step" in out
    assert "memory per device: parameters 2.5 GiB" in out and "sent per device" in out


@pytest.mark.parametrize("argv, message", [
    (["--model", "gpt3-9", "--gpus", "4"], "unknown --model 'gpt3-9'; models: gpt3-small"),
    (["--model", "gpt3-small", "--gpus", "4", "--parallel", "xp=2"], "'xp=2' is not dp=N"),
    (["--model", "gpt3-small", "--gpus", "4", "--parallel", "dp=3"],
     "3 x 1 x 1 = 3 devices, but --gpus is 4"),
    (["--model", "gpt3-small", "--gpus", "6", "--parallel", "tp=4"], "tp x pp = 4 does not "
                                                                      "divide --gpus 6"),
    (["--model", "gpt3-small", "--gpus", "5", "--parallel", "tp=5"], "tp=5 must divide the "
                                                                     "model's heads"),
    (["--model", "gpt3-small", "--gpus", "4", "--global-batch", "6"],
     "--global-batch 6 must be a multiple of dp x --micro-batch = 4"),
    (["--model", "gpt3-small", "--gpus", "4", "--zero", "5"], "invalid choice: 5"),
])
def test_plan_errors_are_one_line_naming_the_option(argv, message, capsys):
    assert cli.main(["plan", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("minitorch-nlp: error: ") and message in err and err.count("\n") == 1
