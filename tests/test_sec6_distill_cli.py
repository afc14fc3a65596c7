"""`minitorch-nlp distill`: a tiny `train bert` teacher distilled into DistilBERT, TinyBERT and
MobileBERT students with the machinery of `train` (checkpoints, exact resume), the student run
used by `generate`, and the one-line errors naming the option."""
from __future__ import annotations

import json
import signal

import numpy as np
import pytest

from minitorch_nlp import cli, inference, io, training
from minitorch_nlp.autograd import Tensor
from minitorch_nlp.compress.distillation_run import DistillationRun, student_config
from minitorch_nlp.models.bert import BertForMaskedLM
from minitorch_nlp.models.distilbert import DistilBertForMaskedLM
from minitorch_nlp.models.mobilebert import MobileBertForMaskedLM
from tests.cli_checks import fails

pytestmark = pytest.mark.sec6

TEXT = ("the quick brown fox jumps over the lazy dog. " * 40
        + "a stitch in time saves nine. " * 40)
OTHER_TEXT = "pack my box with five dozen liquor jugs, said the sphinx of black quartz. " * 60
TEACHER = ["--n-layer", "2", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
           "--batch-size", "4", "--eval-every", "3", "--steps", "6", "--backend", "numpy",
           "--no-progress"]
STUDENT_CLASSES = {"distilbert": DistilBertForMaskedLM, "tinybert": BertForMaskedLM,
                   "mobilebert": MobileBertForMaskedLM}


def train_teacher(directory, text, *extra):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "text.txt").write_text(text, encoding="utf-8")
    assert cli.main(["train", "bert", "--text", str(directory / "text.txt"), *TEACHER,
                     "--out", str(directory / "run"), *extra]) == 0
    return directory / "run"


@pytest.fixture(scope="module")
def teachers(tmp_path_factory):
    """A tiny BERT teacher; one of the same shape on another text (another vocabulary); one on
    the same text with another seed (the same vocabulary, other weights)."""
    root = tmp_path_factory.mktemp("teachers")
    return {"teacher": train_teacher(root / "a", TEXT),
            "other_vocabulary": train_teacher(root / "b", OTHER_TEXT),
            "other_weights": train_teacher(root / "c", TEXT, "--seed", "1")}


def distill(teachers, out, student, *extra):
    return cli.main(["distill", "--teacher", str(teachers["teacher"]), "--student", student,
                     "--out", str(out), "--steps", "4", "--eval-every", "2", "--no-progress",
                     *map(str, extra)])


def flat(state, prefix=""):
    """Every array (tensor) of a nested checkpoint, by its dotted name."""
    arrays = {}
    items = state.items() if isinstance(state, dict) else enumerate(state)
    for name, value in items:
        if isinstance(value, (dict, list, tuple)):
            arrays.update(flat(value, f"{prefix}{name}."))
        elif isinstance(value, (np.ndarray, Tensor)):
            arrays[f"{prefix}{name}"] = np.asarray(value)
    return arrays


@pytest.mark.parametrize("student", list(STUDENT_CLASSES))
def test_distill_resumes_exactly_and_generate_reads_the_student(teachers, tmp_path, capsys,
                                                                student):
    assert distill(teachers, tmp_path / "whole", student) == 0
    assert distill(teachers, tmp_path / "parts", student, "--stop-at", "2") == 0
    assert cli.main(["distill", "--resume", str(tmp_path / "parts"), "--no-progress"]) == 0
    whole = io.load(tmp_path / "whole" / "checkpoint.npz")
    parts = io.load(tmp_path / "parts" / "checkpoint.npz")
    assert parts["step"] == whole["step"] == 4
    assert parts["history"] == whole["history"]
    arrays, resumed = flat(whole), flat(parts)
    assert arrays.keys() == resumed.keys()
    assert any(name.startswith("model.") for name in arrays)
    if student == "tinybert":   # W_e and W_h are trained and saved with the student
        assert {"distillation.objective.embedding_projection",
                "distillation.objective.hidden_projection"} <= arrays.keys()
    for name, array in arrays.items():
        np.testing.assert_array_equal(resumed[name], array, err_msg=name)

    metrics = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    assert metrics["distillation"]["student"] == student
    assert np.isfinite(metrics["val_loss"])
    assert np.isfinite(metrics["distillation"]["teacher_val_loss"])
    teacher_parameters = metrics["distillation"]["teacher_parameters"]
    assert metrics["parameters"] < teacher_parameters

    model, tokenizer, family = inference.load_for_inference(tmp_path / "whole")
    assert type(model) is STUDENT_CLASSES[student]
    capsys.readouterr()
    assert cli.main(["generate", str(tmp_path / "whole"), "--prompt",
                     f"the {tokenizer.mask_token} fox"]) == 0
    answer = capsys.readouterr().out.strip()
    assert answer and tokenizer.mask_token not in answer


def test_the_students_shapes_follow_the_teacher(teachers):
    teacher = str(teachers["teacher"])
    distil = student_config(teacher, "distilbert")
    tiny = student_config(teacher, "tinybert")
    mobile = student_config(teacher, "mobilebert", steps=9)
    assert (distil.model, distil.n_layer, distil.n_embd, distil.n_head) == ("distilbert", 1, 16, 2)
    assert (tiny.model, tiny.n_layer, tiny.n_embd, tiny.n_head) == ("bert", 1, 8, 2)
    assert (mobile.model, mobile.n_layer, mobile.n_embd) == ("mobilebert", 2, 16)
    assert mobile.steps == 9 and mobile.warmup_steps == 0 and distil.steps == 6
    assert student_config(teacher, "tinybert", n_layer=2, n_embd=4).n_embd == 4


def test_a_distilbert_student_starts_from_every_other_teacher_layer(teachers):
    config = student_config(str(teachers["teacher"]), "distilbert")
    run = DistillationRun(config, teacher=teachers["teacher"], student="distilbert")
    teacher = run.teacher.state_dict()
    copied = [name for name in run.model.state_dict() if name.startswith("bert.encoder.layers.0.")]
    assert run.model.config.num_hidden_layers == 1 and copied
    for name in copied:
        np.testing.assert_array_equal(run.model.state_dict()[name], teacher[name], err_msg=name)
    assert not any(p.requires_grad for p in run.teacher.parameters())


def test_ctrl_c_saves_and_prints_the_distill_resume_command(teachers, tmp_path, capsys,
                                                            monkeypatch):
    """SIGINT during step 2 (sent from inside the step): the run saves step 2 and says how to
    continue it; `distill --resume` then finishes it."""
    loss_of = DistillationRun.training_loss

    def interrupted_at_step_2(run, *batch):
        if run.step == 1:
            signal.raise_signal(signal.SIGINT)
        return loss_of(run, *batch)

    monkeypatch.setattr(DistillationRun, "training_loss", interrupted_at_step_2)
    assert distill(teachers, tmp_path / "run", "tinybert") == 130
    assert (f"resume with: minitorch-nlp distill --resume {tmp_path / 'run'}"
            in capsys.readouterr().err)
    assert training.read_checkpoint(tmp_path / "run")["step"] == 2
    monkeypatch.undo()
    assert cli.main(["distill", "--resume", str(tmp_path / "run"), "--no-progress"]) == 0
    assert training.read_checkpoint(tmp_path / "run")["step"] == 4


def test_train_resume_refuses_a_distillation_run(teachers, tmp_path, capsys):
    assert distill(teachers, tmp_path / "run", "tinybert", "--stop-at", "2") == 0
    with pytest.raises(ValueError, match="continue it with `minitorch-nlp distill --resume`"):
        training.LanguageModelRun.load(tmp_path / "run")
    err = fails(capsys, ["train", "--resume", tmp_path / "run"], status=2)
    assert "minitorch-nlp distill --resume" in err


# ---- one-line errors naming the option -----------------------------------------------------------
def test_a_missing_teacher_is_named(tmp_path, capsys):
    err = fails(capsys, ["distill", "--teacher", tmp_path / "nothing", "--student", "tinybert",
                         "--out", tmp_path / "out"])
    assert f"--teacher {tmp_path / 'nothing'}: no checkpoint at" in err


def test_an_unknown_student_is_named(teachers, tmp_path, capsys):
    err = fails(capsys, ["distill", "--teacher", teachers["teacher"], "--student", "albert",
                         "--out", tmp_path / "out"])
    assert "argument --student: invalid choice: 'albert'" in err


def test_a_teacher_with_another_vocabulary_is_refused(teachers, tmp_path, capsys):
    assert distill(teachers, tmp_path / "run", "distilbert", "--stop-at", "2") == 0
    err = fails(capsys, ["distill", "--resume", tmp_path / "run", "--teacher",
                         teachers["other_vocabulary"], "--no-progress"])
    assert f"--teacher {teachers['other_vocabulary']}: its vocabulary (" in err
    assert "differs from the student's" in err
    err = fails(capsys, ["distill", "--resume", tmp_path / "run", "--teacher",
                         teachers["other_weights"], "--no-progress"])
    assert "its weights differ from those of the teacher this run was distilled from" in err


@pytest.mark.parametrize("options, message", [
    (["--student", "distilbert", "--n-embd", "8"],
     "--n-embd 8: a distilbert student has the teacher's width 16"),
    (["--student", "distilbert", "--n-layer", "3"],
     "--n-layer 3: a distilbert student has 1 to the teacher's 2 layers"),
    (["--student", "tinybert", "--n-embd", "7"],
     "--n-embd 7: a tinybert student has a multiple of the teacher's 2 heads"),
    (["--student", "mobilebert", "--n-layer", "1"],
     "--n-layer 1: a mobilebert student has the teacher's 2 layers"),
    (["--student", "mobilebert", "--temperature", "2"],
     "--temperature 2.0: MobileBERT's transfer distils the masked-LM distribution at T = 1"),
    (["--student", "tinybert", "--temperature", "0"], "--temperature must be a number > 0"),
    (["--student", "tinybert", "--steps", "0"], "--steps must be a positive int, got 0"),
    (["--student", "tinybert", "--stop-at", "9"],
     "--stop-at 9 must lie after the run's current step 0 and at most at its end, step 6"),
])
def test_options_that_cannot_work_are_named(teachers, tmp_path, capsys, options, message):
    err = fails(capsys, ["distill", "--teacher", teachers["teacher"], "--out", tmp_path / "out",
                         "--no-progress", *options])
    assert message in err


def test_the_teacher_is_a_bert_run(tmp_path, capsys):
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    assert cli.main(["train", "gpt", "--text", str(tmp_path / "text.txt"), *TEACHER,
                     "--out", str(tmp_path / "gpt")]) == 0
    err = fails(capsys, ["distill", "--teacher", tmp_path / "gpt", "--student", "tinybert",
                         "--out", tmp_path / "out"])
    assert "--teacher" in err and "a gpt run" in err and "`minitorch-nlp train bert`" in err


def test_a_teacher_too_narrow_for_a_mobilebert_student_is_named(tmp_path, capsys):
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    narrow = [*TEACHER[:4], "--n-embd", "12", *TEACHER[6:]]    # 12 // 4 = 3 and 2 heads
    assert cli.main(["train", "bert", "--text", str(tmp_path / "text.txt"), *narrow,
                     "--out", str(tmp_path / "narrow")]) == 0
    err = fails(capsys, ["distill", "--teacher", tmp_path / "narrow", "--student", "mobilebert",
                         "--out", tmp_path / "out"])
    assert "2 heads, which must divide its bottleneck width 12 // 4 = 3" in err


def test_resume_problems_are_named(teachers, tmp_path, capsys):
    assert "give --teacher RUN_DIR and --student" in fails(capsys, ["distill"])
    assert distill(teachers, tmp_path / "run", "tinybert", "--stop-at", "2") == 0
    err = fails(capsys, ["distill", "--resume", tmp_path / "run", "--student", "mobilebert",
                         "--lr", "0.1"])
    assert "--lr, --student cannot change on resume" in err
    assert "--overwrite starts afresh" in fails(
        capsys, ["distill", "--resume", tmp_path / "run", "--overwrite"])
    assert f"--resume {tmp_path / 'nothing'}: no checkpoint" in fails(
        capsys, ["distill", "--resume", tmp_path / "nothing"])
    assert "already holds a " in fails(
        capsys, ["distill", "--teacher", teachers["teacher"], "--student", "tinybert", "--out",
                 tmp_path / "run"])
    assert distill(teachers, tmp_path / "done", "tinybert") == 0
    assert "the run finished at step 4" in fails(
        capsys, ["distill", "--resume", tmp_path / "done"])
