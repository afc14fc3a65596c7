"""The language-model runs behind `minitorch-nlp demo`, `train` and `generate`: a run learns,
stopping and resuming gives bit-for-bit the same parameters as an uninterrupted run, the files it
writes, streaming generation, and the errors for runs that cannot work."""
from __future__ import annotations

import json

import numpy as np
import pytest

from minitorch_nlp import cli, decoding, training
from minitorch_nlp.models import registry

TEXT = ("the quick brown fox jumps over the lazy dog. " * 40
        + "a stitch in time saves nine. " * 40)


def tiny(**changes):
    settings = dict(max_chars=None, n_layer=1, n_head=2, n_embd=16, block_size=16, batch_size=4,
                    steps=8, warmup_steps=1, eval_every=4, eval_batches=2, backend="numpy",
                    dropout=0.1)
    settings.update(changes)
    return training.TrainConfig(**settings)


def parameters(run):
    return {name: p.numpy().copy() for name, p in run.model.state_dict().items()}


@pytest.mark.parametrize("model", ["gpt", "bert"])
def test_resuming_gives_the_same_parameters_as_an_uninterrupted_run(tmp_path, model):
    tokenizer = "char" if model == "gpt" else "wordpiece"
    config = tiny(model=model, tokenizer=tokenizer, vocab_size=60)
    straight = training.LanguageModelRun(config, text=TEXT)
    straight.train(progress=False)

    first = training.LanguageModelRun(config, text=TEXT)
    first.train(3, progress=False, checkpoint_path=tmp_path / "run" / "checkpoint.npz")
    resumed = training.LanguageModelRun.load(tmp_path / "run", text=TEXT)
    assert resumed.step == 3
    resumed.train(progress=False)

    expected, got = parameters(straight), parameters(resumed)
    assert expected.keys() == got.keys()
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    assert resumed.history == straight.history


def test_a_gpt_run_learns_the_text():
    run = training.LanguageModelRun(tiny(steps=60, lr=1e-2, dropout=0.0, eval_every=60), text=TEXT)
    before = run.evaluate()
    after = run.train(progress=False)
    assert after < 0.6 * before


def test_resume_refuses_another_text(tmp_path):
    run = training.LanguageModelRun(tiny(steps=2), text=TEXT)
    run.train(progress=False, checkpoint_path=tmp_path / "checkpoint.npz")
    with pytest.raises(ValueError, match="text differs"):
        training.LanguageModelRun.load(tmp_path / "checkpoint.npz", text=TEXT + "more")
    with pytest.raises(ValueError, match=r"only \['backend', 'eval_every', 'steps'\] can change"):
        training.LanguageModelRun.load(tmp_path, text=TEXT, n_layer=2)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        training.read_checkpoint(tmp_path / "elsewhere")


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="n_head=3 does not divide n_embd=16"):
        tiny(n_head=3)
    with pytest.raises(ValueError, match=f"model 'no-such-model'; choose one of "
                                         f"{', '.join(registry.families())}$"):
        tiny(model="no-such-model")
    with pytest.raises(ValueError, match="part has 296 tokens, and a window needs more than 500"):
        training.LanguageModelRun(tiny(block_size=500), text=TEXT)


def test_generate_text_streams_what_it_returns():
    run = training.LanguageModelRun(tiny(steps=2), text=TEXT)
    pieces = []
    text = decoding.generate_text(run.model.eval(), run.tokenizer, "the ", max_new_tokens=12,
                                  seed=3, on_text=pieces.append)
    assert text == "the " + "".join(pieces)
    assert 0 < len(text) - 4 <= 12 and "<" not in text   # special tokens are never printed
    again = decoding.generate_text(run.model, run.tokenizer, "the ", max_new_tokens=12, seed=3)
    assert again == text


def test_train_then_resume_then_generate_from_the_command_line(tmp_path, capsys):
    text_file = tmp_path / "text.txt"
    text_file.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "run"
    common = ["--text", str(text_file), "--n-layer", "1", "--n-head", "2", "--n-embd", "16",
              "--block-size", "16", "--batch-size", "4", "--steps", "6", "--warmup-steps", "1",
              "--eval-every", "3", "--backend", "numpy", "--out", str(out), "--no-progress"]
    assert cli.main(["train", "gpt", *common, "--stop-at", "3"]) == 0
    assert json.loads((out / "metrics.json").read_text())["step"] == 3
    assert cli.main(["train", "gpt", "--resume", str(out), "--no-progress"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["step"] == 6 and np.isfinite(metrics["val_loss"])
    assert {"checkpoint.npz", "metrics.json", "samples.txt"} <= {p.name for p in out.iterdir()}
    capsys.readouterr()
    assert cli.main(["generate", str(out), "--prompt", "the ", "--max-new-tokens", "10"]) == 0
    assert capsys.readouterr().out.startswith("the ")


def test_demo_smoke(tmp_path, capsys):
    assert cli.main(["demo", "--smoke", "--backend", "numpy", "--out", str(tmp_path),
                     "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "validation loss" in printed
    assert (tmp_path / "checkpoint.npz").exists() and (tmp_path / "samples.txt").exists()


def test_generate_from_a_huggingface_directory(tmp_path, capsys):
    """`generate` also reads what save_pretrained + tokenizer.save write."""
    import minitorch_nlp as mt
    run = training.LanguageModelRun(tiny(steps=2), text=TEXT)
    mt.save_pretrained(run.model, tmp_path / "hf")
    run.tokenizer.save(tmp_path / "hf")
    expected = decoding.generate_text(run.model.eval(), run.tokenizer, "the ", max_new_tokens=8,
                                      seed=1)
    capsys.readouterr()
    assert cli.main(["generate", str(tmp_path / "hf"), "--prompt", "the ", "--max-new-tokens",
                     "8", "--seed", "1", "--temperature", "0.8"]) == 0
    assert capsys.readouterr().out.strip() == expected.strip()
    assert cli.main(["generate", str(tmp_path / "nothing-here")]) == 2


def test_a_bert_trains_on_byte_level_bpe_with_roberta_specials_and_refuses_characters():
    run = training.LanguageModelRun(tiny(model="bert", tokenizer="bpe", vocab_size=300, steps=2),
                                    text=TEXT)
    assert np.isfinite(run.train(progress=False))
    assert run.tokenizer.mask_token == "<mask>"
    with pytest.raises(ValueError, match="a bert cannot use the char tokenizer: it has no "
                       "\\[CLS\\], \\[SEP\\] or \\[MASK\\] token"):
        tiny(model="bert", tokenizer="char")


class CountingModel:
    """A causal LM that reads at most 8 tokens and always emits the token 5."""

    config = type("Config", (), {"n_positions": 8})

    def __init__(self):
        import minitorch_nlp as mt
        self.weight, self.contexts = mt.tensor([0.0]), []

    def parameters(self):
        return iter([self.weight])

    def generate(self, ids, steps, *, streamer, **sampling):
        assert ids.shape[1] + steps <= self.config.n_positions
        self.contexts.append(ids.shape[1])
        for _ in range(steps):
            streamer(np.array([5]))
        return np.concatenate([ids, np.full((1, steps), 5)], axis=1)


def test_generate_text_slides_the_window_past_the_context():
    tokenizer = training.LanguageModelRun(tiny(steps=2), text=TEXT).tokenizer
    model = CountingModel()
    text = decoding.generate_text(model, tokenizer, "the quick brown", max_new_tokens=30)
    assert text == "the quick brown" + tokenizer.decode([5]) * 30
    assert model.contexts[0] == 4        # a prompt longer than the context keeps its last half
    assert set(model.contexts[1:]) == {4}


@pytest.mark.parametrize("options, message", [
    (dict(temperature=-1.0), "temperature must be >= 0"),
    (dict(max_new_tokens=0), "max_new_tokens must be a positive int"),
])
def test_generate_text_refuses_bad_options(options, message):
    run = training.LanguageModelRun(tiny(steps=2), text=TEXT)
    with pytest.raises(ValueError, match=message):
        decoding.generate_text(run.model, run.tokenizer, "the ", **options)
