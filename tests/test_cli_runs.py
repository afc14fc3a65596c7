"""`minitorch-nlp train / demo / generate` as a new user meets them: one error style (one line,
`minitorch-nlp: error: ...`, naming the option; exit 2 for usage, 1 for failures; tracebacks only
with --debug), runs that never lose work (Ctrl-C saves, refused overwrite, resume checks), and the
model registry behind them."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp import checks, cli, inference, training
from minitorch_nlp.cli import common as cli_common
from minitorch_nlp.cli import entry as cli_entry
from minitorch_nlp.cli.common import UsageError
from minitorch_nlp.io.huggingface import supported_architectures
from minitorch_nlp.models import registry
from tests.cli_checks import TEXT, TINY, fails


def train(tmp_path, text_file, *extra, out="run"):
    return cli.main(["train", "gpt", "--text", str(text_file), *TINY, "--out",
                     str(tmp_path / out), *map(str, extra)])


# ---- one error style -----------------------------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["train", "gpt", "--lr", "nan"], "--lr must be a finite number > 0, got nan"),
    (["train", "gpt", "--dropout", "1.5"], "--dropout must be a finite number in [0, 1)"),
    (["train", "gpt", "--n-layer", "0"], "--n-layer must be a positive int, got 0"),
    (["train", "gpt", "--n-head", "3"], "--n-head=3 does not divide n_embd=128"),
    (["train", "gpt", "--steps", "10", "--warmup-steps", "10"], "--warmup-steps must lie in"),
    (["train", "bert", "--tokenizer", "char"], "--tokenizer char: a bert cannot use the char"),
    (["train", "roberta", "--tokenizer", "wordpiece"], "RoBERTa's vocabulary is byte-level BPE"),
    (["train", "gpt", "--stop-at", "0"], "--stop-at must be at least 1, got 0"),
    (["train", "gpt", "--steps", "abc"], "argument --steps: invalid int value: 'abc'"),
    (["train"], f"give the model to train ({', '.join(registry.families())}), or --resume PATH"),
    (["train", "gpt", "--backend", "nope"], "--backend nope:"),
    (["demo", "--steps", "0"], "--steps must be at least 1, got 0"),
    (["demo", "--checkpoint-minutes", "-1"], "--checkpoint-minutes must be >= 0"),
    (["train", "gpt", "--checkpoint-every", "0"], "--checkpoint-every must be at least 1"),
    (["train", "gpt", "--threads", "0"], "--threads must be at least 1"),
    (["generate", "x", "--temperature", "-1"], "--temperature must be >= 0 (0: greedy)"),
    (["generate", "x", "--top-p", "1.5"], "--top-p must lie in (0, 1]"),
    (["generate", "x", "--top-k", "0"], "--top-k must be at least 1"),
    (["generate", "x", "--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
    (["generate", "x", "--repetition-penalty", "0"], "--repetition-penalty must be > 0"),
    (["generate", "nowhere"], "no checkpoint at nowhere"),
])
def test_usage_errors_are_one_line_naming_the_option(capsys, argv, message):
    assert message in fails(capsys, argv)


@pytest.mark.parametrize("content, message", [
    (b"", "holds no text"),
    (b"caf\xc3\xa9 \x9b", "is not UTF-8 text (byte 0x9b at offset 6): re-save it as UTF-8"),
    (b"too short", "--block-size=16 is too long for the text"),
])
def test_text_files_that_cannot_work(tmp_path, capsys, content, message):
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    assert message in fails(capsys, ["train", "gpt", "--text", path, *TINY, "--out",
                                     tmp_path / "run"])


def test_a_missing_text_file_names_the_option(tmp_path, capsys):
    err = fails(capsys, ["train", "gpt", "--text", tmp_path / "none.txt", "--out", tmp_path])
    assert f"--text: {tmp_path / 'none.txt'} does not exist" in err


def test_generate_with_a_backend_that_cannot_start(tmp_path, capsys, monkeypatch):
    def no_gpu(name=None):
        raise RuntimeError("the cupy backend needs an NVIDIA GPU; none was found")
    monkeypatch.setattr(cli_common, "get_backend", no_gpu)
    err = fails(capsys, ["generate", tmp_path, "--backend", "cupy"])
    assert "--backend cupy: the cupy backend needs an NVIDIA GPU" in err


@pytest.mark.parametrize("make, message", [
    (lambda path: np.savez(path, a=np.ones(2)), "not a minitorch_nlp checkpoint"),
    (lambda path: path.write_bytes(__import__("pickle").dumps({"a": 1})),
     "not a minitorch_nlp checkpoint: it holds pickled data"),
])
def test_generate_refuses_files_that_are_not_checkpoints(tmp_path, capsys, make, message):
    path = tmp_path / "other.npz"
    make(path)
    err = fails(capsys, ["generate", path])
    assert message in err and "allow_pickle" not in err


def test_debug_shows_the_traceback(capsys):
    with pytest.raises(UsageError, match="--lr must be a finite number") as raised:
        cli.main(["--debug", "train", "gpt", "--lr", "nan"])
    assert isinstance(raised.value.__cause__, checks.SettingError)
    with pytest.raises(UsageError, match="no checkpoint at nowhere") as raised:
        cli.main(["generate", "nowhere", "--debug"])
    assert isinstance(raised.value.__cause__, FileNotFoundError)


def test_a_failure_that_is_not_a_usage_error_exits_1(tmp_path, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("No space left on device")
    monkeypatch.setattr(training.io, "save", broken)
    err = fails(capsys, ["train", "gpt", "--text", tmp_path / "t.txt", "--out", tmp_path],
                status=2)   # the text is checked first: a usage error
    (tmp_path / "t.txt").write_text(TEXT, encoding="utf-8")
    err = fails(capsys, ["train", "gpt", "--text", tmp_path / "t.txt", *TINY, "--steps", "2",
                         "--out", tmp_path / "run"], status=1)
    assert "No space left on device" in err


# ---- runs that never lose work -------------------------------------------------------------------
def test_a_folder_holding_a_run_is_not_overwritten(tmp_path, text_file, capsys):
    assert train(tmp_path, text_file, "--steps", "3") == 0
    before = (tmp_path / "run" / "checkpoint.npz").read_bytes()
    err = fails(capsys, ["train", "gpt", "--text", text_file, *TINY, "--steps", "3", "--out",
                         tmp_path / "run"])
    assert f"continue it with --resume {tmp_path / 'run'}, or start afresh there with " \
           "--overwrite" in err
    assert (tmp_path / "run" / "checkpoint.npz").read_bytes() == before
    assert train(tmp_path, text_file, "--steps", "4", "--overwrite") == 0
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["step"] == 4


def test_resume_refuses_options_that_change_the_run(tmp_path, text_file, capsys):
    assert train(tmp_path, text_file, "--steps", "6", "--stop-at", "3") == 0
    capsys.readouterr()
    err = fails(capsys, ["train", "--resume", tmp_path / "run", "--n-layer", "2", "--text",
                         tmp_path / "other.txt", "--lr", "0.5"])
    assert "--n-layer 2 (the run has 1)" in err and "--lr 0.5 (the run has 0.003)" in err
    assert "--text" in err
    err = fails(capsys, ["train", "bert", "--resume", tmp_path / "run"])
    assert "bert (the run is a gpt)" in err
    # options equal to the run's are fine, and so is the checkpoint file instead of its folder
    assert cli.main(["train", "gpt", "--resume", str(tmp_path / "run" / "checkpoint.npz"),
                     "--n-layer", "1", "--text", str(text_file), "--no-progress"]) == 0
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["step"] == 6


def test_resume_problems_are_one_line(tmp_path, text_file, capsys):
    assert "--resume" in fails(capsys, ["train", "--resume", tmp_path / "nothing"])
    assert train(tmp_path, text_file, "--steps", "3") == 0
    capsys.readouterr()
    err = fails(capsys, ["train", "--resume", tmp_path / "run"])
    assert "the run finished at step 3; give --steps N (more than 3)" in err
    err = fails(capsys, ["train", "--resume", tmp_path / "run", "--steps", "5", "--stop-at", "9"])
    assert "--stop-at 9 must lie after the run's current step 3 and at most at its end" in err
    assert "--overwrite starts afresh" in fails(
        capsys, ["train", "--resume", tmp_path / "run", "--overwrite"])


def test_steps_on_resume_extends_a_finished_run(tmp_path, text_file):
    assert train(tmp_path, text_file, "--steps", "3") == 0
    assert cli.main(["train", "--resume", str(tmp_path / "run"), "--steps", "5",
                     "--no-progress"]) == 0
    run = training.LanguageModelRun.load(tmp_path / "run")
    assert run.step == 5 and run.config.steps == 5 and run.scheduler.total_steps == 5


def test_resume_from_another_directory(tmp_path, text_file, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "gpt", "--text", "text.txt", *TINY, "--steps", "6", "--stop-at",
                     "3", "--out", "run"]) == 0
    saved = training.read_checkpoint(tmp_path / "run")["config"]["text"]
    assert saved == str(text_file)                       # stored absolute
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert cli.main(["train", "--resume", "../run", "--no-progress"]) == 0
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["step"] == 6


def test_a_relative_text_path_of_an_older_checkpoint_is_found_beside_it(tmp_path, text_file):
    run = training.LanguageModelRun(training.TrainConfig(
        text=str(text_file), n_layer=1, n_head=2, n_embd=16, block_size=16, batch_size=4,
        steps=4, eval_every=2, backend="numpy"))
    run.train(2, progress=False, checkpoint_path=tmp_path / "checkpoint.npz")
    state = training.read_checkpoint(tmp_path)
    state["config"]["text"] = "text.txt"                 # as an older version stored it
    mt.save(state, tmp_path / "checkpoint.npz")
    assert training.LanguageModelRun.load(tmp_path).step == 2


def test_checkpoints_are_saved_every_n_steps_and_by_time(tmp_path, text_file, monkeypatch):
    saved = []
    monkeypatch.setattr(training.LanguageModelRun, "save",
                        lambda run, path: saved.append(run.step))
    run = training.LanguageModelRun(training.TrainConfig(
        text=str(text_file), n_layer=1, n_head=2, n_embd=16, block_size=16, batch_size=4,
        steps=6, eval_every=6, backend="numpy"))
    run.train(progress=False, checkpoint_path="x", checkpoint_every=4, checkpoint_seconds=None)
    assert saved == [4, 6]
    saved.clear()
    run = training.LanguageModelRun(run.config)
    run.train(progress=False, checkpoint_path="x", checkpoint_seconds=0.0)
    assert saved == [1, 2, 3, 4, 5, 6, 6]


def test_ctrl_c_saves_and_prints_the_resume_command(tmp_path, text_file):
    """SIGINT to a real `minitorch-nlp train` process: it saves the step it reached and says how
    to resume; the resumed run then finishes."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    command = [sys.executable, "-m", "minitorch_nlp", "train", "gpt", "--text", str(text_file),
               *TINY, "--steps", "100000", "--out", str(out), "--checkpoint-minutes", "0"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        for line in process.stdout:              # the run has started once this is printed
            if "parameters" in line:
                break
        time.sleep(1.0)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert f"resume with: minitorch-nlp train --resume {out}" in err
    step = training.read_checkpoint(out)["step"]
    assert 0 < step < 100000
    assert cli.main(["train", "--resume", str(out), "--stop-at", str(step + 2),
                     "--no-progress"]) == 0
    assert training.read_checkpoint(out)["step"] == step + 2


def test_stale_temporary_files_are_removed_by_the_next_save(tmp_path):
    stale = tmp_path / ".checkpoint.npz.0123456789ab.tmp"
    stale.write_bytes(b"half a checkpoint")
    other = tmp_path / ".other.npz.0123456789ab.tmp"
    other.write_bytes(b"another file's")
    mt.save({"step": 1}, tmp_path / "checkpoint.npz")
    assert not stale.exists() and other.exists()


# ---- sensible defaults ---------------------------------------------------------------------------
def test_a_short_run_gets_a_short_warmup(tmp_path, text_file):
    assert training.TrainConfig(steps=30).warmup_steps == 3
    assert training.TrainConfig(steps=5000).warmup_steps == 100
    assert train(tmp_path, text_file, "--steps", "5") == 0


def test_metrics_report_the_real_vocabulary_size(tmp_path, text_file):
    assert train(tmp_path, text_file, "--steps", "2") == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    run = training.LanguageModelRun.load(tmp_path / "run")
    assert metrics["vocab_size"] == len(run.tokenizer) < 100


def test_generate_writes_past_the_context_and_never_prints_special_tokens(tmp_path, text_file,
                                                                          capsys):
    assert train(tmp_path, text_file, "--steps", "2") == 0
    capsys.readouterr()
    assert cli.main(["generate", str(tmp_path / "run"), "--prompt", "the ", "--max-new-tokens",
                     "40", "--greedy"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("the ") and "<" not in printed


# ---- the model registry --------------------------------------------------------------------------
@pytest.mark.slow
def test_every_family_builds_trains_and_answers_generate(tmp_path, text_file, capsys):
    for name, family in registry.families().items():
        assert cli.main(["train", name, "--text", str(text_file), *TINY, "--steps", "2",
                         "--vocab-size", "300", "--out", str(tmp_path / name)]) == 0, name
        model, tokenizer, loaded = inference.load_for_inference(tmp_path / name)
        # a model HuggingFace knows is one of its family's architectures; ELECTRA trains a
        # generator-discriminator pair, which HuggingFace keeps as two models
        assert loaded is family and (type(model).__name__ in family.hf_architectures
                                     or type(model).__name__ not in supported_architectures())
        capsys.readouterr()
        prompt = "the " if family.objective.generates_text else f"the {tokenizer.mask_token} fox"
        assert cli.main(["generate", str(tmp_path / name), "--prompt", prompt]) == 0
        assert capsys.readouterr().out.strip()


def test_a_new_family_needs_only_its_registration(tmp_path, text_file, monkeypatch):
    gpt = registry.family("gpt")
    monkeypatch.setitem(registry._FAMILIES, "tinygpt", registry.ModelFamily(
        name="tinygpt", summary="a GPT under another name", objective=gpt.objective,
        build=gpt.build, default_tokenizer="char", bpe_style="gpt2"))
    config = training.TrainConfig(model="tinygpt", text=str(text_file), n_layer=1, n_head=2,
                                  n_embd=16, block_size=16, batch_size=4, steps=2,
                                  backend="numpy")
    assert np.isfinite(training.LanguageModelRun(config).train(progress=False))


def test_hf_architectures_that_neither_generate_nor_fill_masks_are_named():
    with pytest.raises(ValueError, match="a BertModel neither generates text nor fills masks"):
        registry.family_for_architecture("BertModel")


def test_ctrl_c_before_training_starts_is_one_line(tmp_path, capsys, monkeypatch):
    def interrupted(config, **options):
        raise KeyboardInterrupt
    main = cli.main   # the commands are imported before the run class is replaced
    monkeypatch.setattr(training, "LanguageModelRun", interrupted)
    assert main(["train", "gpt", "--out", str(tmp_path / "run")]) == 130
    assert capsys.readouterr().err == "\nminitorch-nlp: interrupted\n"


# ---- errors a user can cause in generate and the Python API (issue #41, items 8 and 9) ----------
def test_an_empty_prompt_names_the_option(tmp_path, text_file, capsys):
    assert train(tmp_path, text_file, "--steps", "2") == 0
    capsys.readouterr()
    err = fails(capsys, ["generate", tmp_path / "run", "--prompt", ""])
    assert "--prompt '': generate_text: the prompt is empty" in err


def test_a_masked_lm_prompt_without_a_mask_names_the_option(tmp_path, text_file, capsys):
    assert cli.main(["train", "bert", "--text", str(text_file), *TINY, "--steps", "2",
                     "--vocab-size", "300", "--out", str(tmp_path / "bert")]) == 0
    capsys.readouterr()
    err = fails(capsys, ["generate", tmp_path / "bert", "--prompt", "the fox"])
    assert "--prompt 'the fox': fill_masks: the prompt has no [MASK]" in err


@pytest.mark.parametrize("family, architecture", [
    ("bart", "BartForConditionalGeneration"), ("t5", "T5ForConditionalGeneration")])
def test_generate_on_an_encoder_decoder_honours_max_new_tokens(tmp_path, text_file, capsys,
                                                               monkeypatch, family,
                                                               architecture):
    assert cli.main(["train", family, "--text", str(text_file), *TINY, "--steps", "2",
                     "--vocab-size", "300", "--out", str(tmp_path / family)]) == 0
    model, _, _ = inference.load_for_inference(tmp_path / family)
    assert type(model).__name__ == architecture
    asked = []
    generate = type(model).generate

    def recording(self, input_ids, **options):
        asked.append(options["max_new_tokens"])
        out = generate(self, input_ids, **options)
        assert out.shape[1] <= options["max_new_tokens"] + 1   # the start token and the new ones
        return out
    monkeypatch.setattr(type(model), "generate", recording)
    for limit in ("3", "5"):
        assert cli.main(["generate", str(tmp_path / family), "--prompt", "the fox",
                         "--max-new-tokens", limit]) == 0
    assert asked == [3, 5]


def test_generate_on_bart_stops_at_its_position_table(tmp_path, text_file, monkeypatch):
    assert cli.main(["train", "bart", "--text", str(text_file), *TINY, "--steps", "2",
                     "--vocab-size", "300", "--out", str(tmp_path / "bart")]) == 0
    model, _, _ = inference.load_for_inference(tmp_path / "bart")
    asked = []
    monkeypatch.setattr(type(model), "generate",
                        lambda self, ids, **options: asked.append(options["max_new_tokens"])
                        or np.asarray([[0]]))
    assert cli.main(["generate", str(tmp_path / "bart"), "--max-new-tokens", "100000"]) == 0
    assert asked == [model.config.max_position_embeddings - 1]


def test_from_pretrained_on_a_training_run_points_to_its_loader(tmp_path, text_file):
    assert train(tmp_path, text_file, "--steps", "2") == 0
    for path in (tmp_path / "run", tmp_path / "run" / "checkpoint.npz"):
        with pytest.raises(FileNotFoundError, match=r"is a training run .*load_for_inference"):
            mt.io.huggingface.from_pretrained(path)
    with pytest.raises(FileNotFoundError, match="config.json does not exist; a HuggingFace"):
        mt.io.huggingface.from_pretrained(tmp_path)


def _encoder_decoders():
    from minitorch_nlp.models.bart import (
        BartConfig,
        BartForConditionalGeneration,
        BartModel,
        MBartConfig,
        MBartForConditionalGeneration,
    )
    from minitorch_nlp.models.t5 import (
        T5Config,
        T5DecoderOnly,
        T5ForConditionalGeneration,
        T5Model,
    )
    t5 = T5Config(vocab_size=20, d_model=8, d_kv=4, d_ff=16, num_layers=1, num_heads=2)
    bart = {"vocab_size": 20, "d_model": 8, "encoder_layers": 1, "decoder_layers": 1,
            "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 16,
            "decoder_ffn_dim": 16, "max_position_embeddings": 16}
    return [T5ForConditionalGeneration(t5), T5DecoderOnly(t5),
            BartForConditionalGeneration(BartConfig(**bart)),
            MBartForConditionalGeneration(MBartConfig(**bart)), T5Model(t5),
            BartModel(BartConfig(**bart))]


def test_encoder_decoders_refuse_inputs_and_labels_of_different_batches():
    from minitorch_nlp.models.transformer import Transformer
    inputs, targets = np.ones((1, 5), dtype=np.int64), np.full((2, 4), 3, dtype=np.int64)
    for model in _encoder_decoders():
        name = type(model).__name__
        target = "labels" if "labels" in model.forward.__code__.co_varnames else \
            "decoder_input_ids"
        with pytest.raises(ValueError, match=rf"^{name}: input_ids of batch 1, {target} of "
                           r"batch 2: give each the same number of rows"):
            model(input_ids=inputs, **{target: targets})
    transformer = Transformer(20, d_model=8, num_heads=2, num_encoder_layers=1,
                              num_decoder_layers=1, d_ff=16)
    with pytest.raises(ValueError, match=r"^Transformer: src of batch 1, tgt_in of batch 2"):
        transformer(inputs, targets)
    assert transformer(np.ones((2, 5), dtype=np.int64), targets).shape == (2, 4, 20)


# ---- what the rest of issue #41 asked of train, demo and generate -------------------------------
@pytest.mark.parametrize("family", ["gpt", "xl"])
def test_a_one_token_window_is_refused_with_its_reason(capsys, family):
    err = fails(capsys, ["train", family, "--block-size", "1"])
    assert f"--block-size must be at least 2 for a {family} (a window must hold a token and " \
           "the next one, which it learns to predict), got 1" in err


def test_generate_refuses_a_one_token_context_instead_of_looping():
    from minitorch_nlp.data.tokenizers import CharTokenizer
    from minitorch_nlp.decoding import generate_text
    from minitorch_nlp.models.gpt import GPT2LMHeadModel, GPTConfig
    tokenizer = CharTokenizer.train("abc")
    model = GPT2LMHeadModel(GPTConfig(vocab_size=len(tokenizer), n_positions=1, n_embd=8,
                                      n_layer=1, n_head=2))
    with pytest.raises(ValueError, match="generating needs a context of at least 2"):
        generate_text(model, tokenizer, "ab", max_new_tokens=5)


def test_demo_does_not_replace_a_train_run(tmp_path, text_file, capsys):
    assert train(tmp_path, text_file, "--steps", "2") == 0
    before = (tmp_path / "run" / "checkpoint.npz").read_bytes()
    err = fails(capsys, ["demo", "--smoke", "--out", tmp_path / "run"])
    assert f"--out {tmp_path / 'run'} already holds a gpt run (step 2 of 2)" in err
    assert "--overwrite" in err
    assert (tmp_path / "run" / "checkpoint.npz").read_bytes() == before


def test_out_naming_a_file_and_too_many_threads_name_the_option(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    for command in (["train", "gpt"], ["demo"]):
        err = fails(capsys, [*command, "--out", tmp_path / "file"])
        assert f"--out {tmp_path / 'file'} is a file; give a folder" in err
    cores = os.cpu_count()
    err = fails(capsys, ["demo", "--threads", cores + 1, "--out", tmp_path / "demo"])
    assert f"--threads {cores + 1} is more than the {cores} cores of this machine" in err


def test_resume_of_a_text_file_says_what_it_is(tmp_path, capsys):
    (tmp_path / "my.txt").write_text("hello\n")
    err = fails(capsys, ["train", "--resume", tmp_path / "my.txt"])
    assert "is not a NumPy .npz file (a text file?)" in err and "pickled" not in err


def test_max_chars_reads_no_more_of_an_endless_text(tmp_path):
    trained = subprocess.run(
        [sys.executable, "-m", "minitorch_nlp", "train", "gpt", "--text", "/dev/zero",
         "--max-chars", "1000", *TINY, "--steps", "1", "--out", str(tmp_path / "run")],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        capture_output=True, text=True, timeout=300)
    assert trained.returncode == 0, trained.stderr
    read = json.loads((tmp_path / "run" / "metrics.json").read_text())["config"]
    assert read["max_chars"] == 1000


def test_the_getting_started_page_names_every_family_and_command():
    page = (Path(__file__).resolve().parents[1] / "docs" / "getting-started.md").read_text()
    reference = page[page.index("### The command line"):page.index("## nn and functional")]
    for name in registry.families():
        assert f"`{name}`" in reference, f"the train family {name} is not listed"
    subcommands = next(action for action in cli_entry.build_parser()._actions
                       if action.dest == "command").choices
    for name in subcommands:
        assert f"minitorch-nlp {name} " in reference, f"the command {name} is not shown"
    for status in ("| 0 |", "| 1 |", "| 2 |", "| 130 |"):
        assert status in reference
    assert "--allow-run-as-root" in reference and "QA_DIR" in reference
