"""`minitorch-nlp compress RUN_DIR`: a trained run made smaller (layers dropped, heads removed,
int8 Linears), written as a checkpoint that `generate` and ``inference.load_for_inference`` load
with the compressed structure; one-line errors naming the option."""
from __future__ import annotations

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp import cli, inference
from minitorch_nlp.compress import pruning, quantization

pytestmark = pytest.mark.sec6

TEXT = ("the quick brown fox jumps over the lazy dog. " * 40
        + "a stitch in time saves nine. " * 40)
TINY = ["--n-layer", "3", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
        "--batch-size", "4", "--eval-every", "3", "--backend", "numpy", "--no-progress",
        "--steps", "4"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("compress")
    (folder / "text.txt").write_text(TEXT, encoding="utf-8")
    assert cli.main(["train", "gpt", "--text", str(folder / "text.txt"), *TINY, "--out",
                     str(folder / "run")]) == 0
    return folder / "run"


def logits(model, ids):
    with mt.no_grad():
        return model(input_ids=ids).logits.numpy()


def test_dropped_layers_load_back_as_the_shallower_model(run_dir, tmp_path, capsys):
    assert cli.main(["compress", str(run_dir), "--out", str(tmp_path / "small"),
                     "--drop-layers", "odd:1"]) == 0
    assert "dropped layers [2]" in capsys.readouterr().out        # layer 3, the top odd one
    original, tokenizer, _ = inference.load_for_inference(run_dir)
    small, _, _ = inference.load_for_inference(tmp_path / "small")
    ids = np.array([tokenizer.encode("the fox")])
    assert len(pruning.transformer_stack(small).layers) == 2
    np.testing.assert_allclose(logits(small, ids),
                               logits(pruning.drop_layers(original, [2]), ids), rtol=1e-6)


def test_removed_heads_load_back_as_the_pruned_model(run_dir, tmp_path, capsys):
    assert cli.main(["compress", str(run_dir), "--out", str(tmp_path / "small"),
                     "--prune-heads", "0.5"]) == 0
    assert "removed heads" in capsys.readouterr().out
    record = mt.load(tmp_path / "small" / "checkpoint.npz")["compression"]["pruned_heads"]
    heads = {int(layer): list(hs) for layer, hs in record.items()}
    assert sum(map(len, heads.values())) == 3                          # half of 3 x 2 heads
    original, tokenizer, _ = inference.load_for_inference(run_dir)
    small, _, _ = inference.load_for_inference(tmp_path / "small")
    ids = np.array([tokenizer.encode("a stitch")])
    np.testing.assert_allclose(logits(small, ids),
                               logits(pruning.prune_heads(original, heads), ids), rtol=1e-6)


def test_all_three_give_a_smaller_int8_model_that_generate_runs(run_dir, tmp_path, capsys):
    out, pruned = tmp_path / "small", tmp_path / "pruned"
    options = ["--drop-layers", "top:1", "--prune-heads", "0.25"]
    assert cli.main(["compress", str(run_dir), "--out", str(pruned), *options]) == 0
    assert cli.main(["compress", str(run_dir), "--out", str(out), *options, "--quantize",
                     "int8"]) == 0
    def weight_bytes(folder):
        return sum(t.numpy().nbytes for t in mt.load(folder / "checkpoint.npz")["model"].values())

    assert weight_bytes(out) < 0.5 * weight_bytes(pruned)
    small, _, _ = inference.load_for_inference(out)
    int8 = [m for m in small.modules() if isinstance(m, quantization.Int8Linear)]
    assert int8 and all(m.qweight.dtype == np.int8 for m in int8)
    capsys.readouterr()
    assert cli.main(["generate", str(out), "--prompt", "the ", "--max-new-tokens", "5",
                     "--greedy"]) == 0
    assert capsys.readouterr().out.startswith("the ")


@pytest.mark.parametrize("extra, message", [
    ([], "give at least one of --drop-layers, --prune-heads and --quantize"),
    (["--drop-layers", "middle:1"], "--drop-layers must be STRATEGY:K"),
    (["--drop-layers", "top:3"], "--drop-layers top:3: the model has 3 layer(s); dropping k=3 "
                                 "of 3 layers leaves none"),
    (["--prune-heads", "1.5"], "--prune-heads must be a fraction in (0, 1), got 1.5"),
])
def test_bad_options_are_one_line_errors(run_dir, tmp_path, capsys, extra, message):
    assert cli.main(["compress", str(run_dir), "--out", str(tmp_path / "x"), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("minitorch-nlp: error: ") and err.count("\n") == 1 and message in err
    assert "poor_mans_layers_to_drop" not in err


def test_the_run_itself_is_never_replaced_and_a_missing_run_is_named(run_dir, tmp_path, capsys):
    assert cli.main(["compress", str(run_dir), "--out", str(run_dir), "--quantize", "int8"]) == 2
    assert "--out must differ from RUN_DIR" in capsys.readouterr().err
    assert cli.main(["compress", str(tmp_path / "nothing"), "--out", str(tmp_path / "x"),
                     "--quantize", "int8"]) == 2
    assert "RUN_DIR" in capsys.readouterr().err


def test_a_run_in_out_is_replaced_only_with_overwrite(run_dir, tmp_path, capsys):
    out = tmp_path / "small"
    assert cli.main(["compress", str(run_dir), "--out", str(out), "--quantize", "int8"]) == 0
    before = (out / "checkpoint.npz").read_bytes()
    capsys.readouterr()
    assert cli.main(["compress", str(run_dir), "--out", str(out), "--drop-layers", "top:1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {out} already holds" in err and "--overwrite" in err
    assert (out / "checkpoint.npz").read_bytes() == before
    assert cli.main(["compress", str(run_dir), "--out", str(out), "--drop-layers", "top:1",
                     "--overwrite"]) == 0
    assert (out / "checkpoint.npz").read_bytes() != before


def test_a_compressed_run_is_neither_resumed_nor_compressed_again(run_dir, tmp_path, capsys):
    out = tmp_path / "small"
    assert cli.main(["compress", str(run_dir), "--out", str(out), "--prune-heads", "0.25"]) == 0
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(out), "--steps", "50", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "compressed model" in err and "cannot resume" in err
    assert cli.main(["compress", str(out), "--out", str(tmp_path / "again"),
                     "--quantize", "int8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already compressed" in err
