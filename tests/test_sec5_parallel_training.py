"""``minitorch-nlp train gpt --parallel dp=D,tp=T --zero S`` (``distributed.training``): the
registry's training loop laid out over MPI ranks.

On one process: the errors (one line naming the option; a communicator that says it has two
ranks stands in for ``mpirun -n 2``, since every check runs before the first collective), ZeRO
over one rank equal to the plain run, and gathered checkpoints that resume with another layout.
Under real ``mpirun`` (marked ``mpi``): a run saved by 4 ranks (dp=2, tp=2, ZeRO 3) resumed by 2
(dp=2) and a tensor-parallel run on 2 ranks equal the one-process run after the same steps, with
one progress bar.
"""
from __future__ import annotations


import numpy as np
import pytest

from minitorch_nlp import cli, training
from minitorch_nlp import distributed as D
from minitorch_nlp.distributed import communicator
from tests.distributed_checks import mpirun
from tests.cli_checks import fails

TEXT = "abcdefghijklmno " * 4 + "".join(
    np.random.default_rng(0).choice(list("abcdefghijklmno "), 4000))     # 16 characters
TINY = ["--n-layer", "1", "--n-head", "4", "--n-embd", "16", "--block-size", "16",
        "--batch-size", "4", "--steps", "4", "--eval-every", "2", "--backend", "numpy",
        "--checkpoint-minutes", "0"]


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


class _TwoRanks(D.SingleProcess):
    """Says it has two ranks: enough for the checks made before any collective."""
    size = 2


@pytest.mark.parametrize("ranks, options, message", [
    (1, ["--parallel", "dp=2"], "--parallel dp=2: dp x tp x pp = 2 x 1 x 1 = 2 devices, but the "
                                "number of ranks (mpirun -n) is 1"),
    (1, ["--parallel", "ep=2"], "--parallel ep=2: 'ep=2' is not dp=N, tp=N or pp=N"),
    (2, ["--parallel", "pp=2"], "--parallel pp=2: train does not pipeline (pp); GPipe is the class "
                                "distributed.PipelineParallelGPT2"),
    (2, ["--parallel", "tp=2", "--n-head", "3", "--n-embd", "18"],
     "--parallel tp=2: tp=2 must divide --n-head 3"),
    (2, ["--parallel", "dp=2", "--batch-size", "3"],
     "--batch-size=3 must be divisible by dp=2"),
    (1, ["--zero", "4"], "argument --zero: invalid choice: 4"),
    (1, ["--experts", "1"], "--experts must be 0 (no mixture of experts) or an int >= 2"),
    (1, ["--experts", "4"], "--experts=4 replaces the feed-forward network of every other layer "
                            "(the 2nd, 4th ...): give --n-layer 2 or more, got 1"),
    (1, ["--experts", "4", "--n-layer", "2", "--zero", "1"],
     "--experts=4 works with dp only: ZeRO's partitions would mix the ranks' different experts"),
    (2, ["--experts", "4", "--n-layer", "2", "--parallel", "tp=2"],
     "--experts=4 works with dp only: tensor parallelism (tp) does not split MoE layers"),
    (2, ["--experts", "3", "--n-layer", "2"], "--experts=3 must be divisible by dp=2"),
])
def test_a_layout_the_run_cannot_take_is_refused_naming_the_option(
        capsys, monkeypatch, tmp_path, text_file, ranks, options, message):
    monkeypatch.setattr(communicator, "world", lambda: _TwoRanks() if ranks == 2
                        else D.SingleProcess())
    err = fails(capsys, ["train", "gpt", "--text", text_file, *TINY, "--out", tmp_path / "run",
                         *options])
    assert message in err, err


def test_tensor_parallelism_needs_a_vocabulary_the_ranks_divide(capsys, monkeypatch, tmp_path):
    odd = tmp_path / "odd.txt"
    odd.write_text(TEXT + "p", encoding="utf-8")                        # 17 characters
    monkeypatch.setattr(communicator, "world", _TwoRanks)
    err = fails(capsys, ["train", "gpt", "--text", odd, *TINY, "--parallel", "tp=2"])
    assert "--parallel tp=2: tp=2 must divide the vocabulary (21 tokens)" in err
    assert "--tokenizer bpe with --vocab-size a multiple of 2" in err


def test_parallel_training_and_experts_are_for_the_gpt_family(capsys, monkeypatch, tmp_path,
                                                              text_file):
    monkeypatch.setattr(communicator, "world", _TwoRanks)
    err = fails(capsys, ["train", "bert", "--text", text_file, *TINY, "--parallel", "dp=2"])
    assert "parallel training is built for the gpt family" in err and "not bert" in err
    err = fails(capsys, ["train", "bert", "--text", text_file, *TINY, "--experts", "2"])
    assert "--experts=2: mixture-of-experts layers are built for the gpt family, not bert" in err


def _assert_same_run(got, want, atol=1e-5):
    got, want = training.read_checkpoint(got), training.read_checkpoint(want)
    assert got["step"] == want["step"]
    assert set(got["model"]) == set(want["model"])
    for name in want["model"]:
        np.testing.assert_allclose(np.asarray(got["model"][name]),
                                   np.asarray(want["model"][name]), rtol=1e-4, atol=atol,
                                   err_msg=name)
    saved, expected = got["optimizer"]["state"], want["optimizer"]["state"]
    assert set(saved) == set(expected)
    for index in expected:
        assert saved[index]["step"] == expected[index]["step"]
        for key in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_allclose(np.asarray(saved[index][key]),
                                       np.asarray(expected[index][key]), rtol=1e-3, atol=1e-7)
    np.testing.assert_allclose(got["history"]["loss"], want["history"]["loss"], rtol=1e-5)
    np.testing.assert_allclose(got["history"]["val_loss"], want["history"]["val_loss"],
                               rtol=1e-5)


@pytest.fixture(scope="module")
def one_process_run(tmp_path_factory):
    """The reference: 4 steps on one process, no layout."""
    folder = tmp_path_factory.mktemp("reference")
    text = folder / "text.txt"
    text.write_text(TEXT, encoding="utf-8")
    assert cli.main(["train", "gpt", "--text", str(text), *TINY, "--no-progress", "--out",
                     str(folder / "run")]) == 0
    return text, folder / "run"


@pytest.mark.parametrize("first, then", [(["--zero", "3"], []), ([], ["--zero", "1"])])
def test_zero_on_one_process_is_the_plain_run_and_resumes_with_another_layout(
        tmp_path, one_process_run, first, then):
    text, reference = one_process_run
    common = ["--text", str(text), *TINY, "--no-progress"]
    out = str(tmp_path / "run")
    assert cli.main(["train", "gpt", *common, "--out", out, "--stop-at", "2", *first]) == 0
    assert training.read_checkpoint(out)["step"] == 2
    assert cli.main(["train", "--resume", out, "--no-progress", *then]) == 0
    _assert_same_run(out, reference, atol=1e-6)


# ---- real ranks under mpirun ---------------------------------------------------------------------
def _mpirun(ranks, *argv):
    result = mpirun(ranks, "-m", "minitorch_nlp", *argv)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.mark.slow
@pytest.mark.mpi
def test_a_run_saved_by_four_ranks_resumes_on_two_and_equals_one_process(
        tmp_path, one_process_run):
    text, reference = one_process_run
    out = tmp_path / "run"
    first = _mpirun(4, "train", "gpt", "--text", text, *TINY, "--out", out, "--stop-at", 2,
                    "--parallel", "dp=2,tp=2", "--zero", 3)
    assert "4 rank(s): dp=2 tp=2, ZeRO stage 3" in first.stdout
    assert first.stderr.count("training:   0%") == 1                # rank 0's bar only
    assert first.stdout.count("validation loss") == 1                 # rank 0 reports
    assert training.read_checkpoint(out)["step"] == 2
    then = _mpirun(2, "train", "--resume", out, "--no-progress", "--parallel", "dp=2")
    assert "steps 2 -> 4, 2 rank(s): dp=2 tp=1" in then.stdout
    _assert_same_run(out, reference)
    assert (out / "samples.txt").exists()


@pytest.mark.slow
@pytest.mark.mpi
def test_a_run_with_experts_resumed_on_two_ranks_splits_them_and_equals_one_process(
        tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text(TEXT, encoding="utf-8")
    moe = ["--text", text, *TINY, "--no-progress", "--n-layer", "2", "--experts", "4"]
    reference, out = tmp_path / "reference", tmp_path / "run"
    assert cli.main([str(a) for a in ["train", "gpt", *moe, "--out", reference]]) == 0
    assert cli.main([str(a) for a in ["train", "gpt", *moe, "--out", out, "--stop-at", 2]]) == 0
    _mpirun(2, "train", "--resume", out, "--no-progress")       # dp=2: two experts per rank
    _assert_same_run(out, reference)
    assert np.asarray(training.read_checkpoint(out)["model"][
        "transformer.blocks.layers.1.feed_forward.experts.wi"]).shape[0] == 4
    capsys.readouterr()
    assert cli.main(["generate", str(out), "--prompt", "abc", "--max-new-tokens", "5"]) == 0
    assert capsys.readouterr().out.startswith("abc")


@pytest.mark.mpi
def test_a_tensor_parallel_run_on_two_ranks_equals_one_process(tmp_path, one_process_run):
    text, reference = one_process_run
    out = tmp_path / "run"
    _mpirun(2, "train", "gpt", "--text", text, *TINY, "--no-progress", "--out", out,
            "--parallel", "tp=2")
    _assert_same_run(out, reference)
