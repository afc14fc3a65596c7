"""Fault injection: what a run folder, a checkpoint and the files a command reads survive.

Each case has a fast core that runs in every CI run, and a longer variant marked ``slow``:

* concurrent writers: a folder held by another live process is refused (one line, exit 2, naming the
  option and the holder) for ``train --out``, ``train --resume``, ``demo``, ``compress``,
  ``index build`` and ``distill``; a holder killed with SIGKILL is taken over with a message; (slow)
  two ``train`` processes started together on one ``--out``, and two ``--resume`` of one run: one
  trains, the other is refused;
* ``kill -9`` during a save: the checkpoint is always the previous one or the new one, whole,
  and the dead writer's temporary file is removed by the next save; (slow) a training run
  killed at several moments resumes to the end;
* divergence: ``--lr 1e308`` stops at the step the weights or the loss stop being finite, one
  line naming the step and ``--lr``, the last good checkpoint kept and loadable, every JSON
  written strict;
* crafted sizes: checkpoint headers and ``config.json`` files claiming 1e9 layers, 1e10
  positions, a negative step, or an entry larger than the bytes stored, are refused before
  anything of that size is allocated (checked in a fresh process by its peak memory);
* paths escaping their folder: ``rag.json`` naming ``../x``, an absolute path or a link that
  leads out is refused without reading the target.
"""
from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp import cli, training
from minitorch_nlp.io.files import path_inside
from minitorch_nlp.io.huggingface import from_pretrained, save_pretrained
from minitorch_nlp.io.runs import read_checkpoint
from minitorch_nlp.models.gpt import GPT2LMHeadModel, GPTConfig
from tests.cli_checks import TEXT, TINY, fails

ROOT = Path(__file__).resolve().parents[1]


def train_argv(text_file, out, *extra):
    return ["train", "gpt", "--text", str(text_file), *TINY, "--out", str(out),
            *map(str, extra)]


def python(code, *args, **popen):
    """A fresh Python process running ``code`` with this checkout importable."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **popen)


def command(*argv):
    """``minitorch-nlp argv`` in a fresh process."""
    return python("import sys; from minitorch_nlp.cli import main; sys.exit(main(sys.argv[1:]))",
                  *argv)


def killed(process):
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL


# ---- concurrent writers --------------------------------------------------------------------------
HOLDER = """
import sys, time
from minitorch_nlp.io.run_lock import hold_folder
with hold_folder(sys.argv[1], "holder"):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_folder_in_use_by_another_process_is_refused_and_a_killed_holder_taken_over(
        tmp_path, text_file, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoint.npz").write_bytes(b"the run another process is writing")
    holder = python(HOLDER, out)
    try:
        assert holder.stdout.readline() == "held\n"
        in_use = f"is in use by process {holder.pid} on "
        for argv, name in [
                (train_argv(text_file, out, "--steps", "2", "--overwrite"), "--out"),
                (["train", "--resume", out, "--steps", "4"], "--resume"),
                (["demo", "--smoke", "--out", out, "--overwrite"], "--out"),
                (["compress", tmp_path / "other", "--quantize", "int8", "--out", out,
                  "--overwrite"], "--out"),
                (["index", "build", text_file, "--out", out, "--overwrite"], "--out"),
                (["distill", "--teacher", tmp_path / "other", "--student", "distilbert",
                  "--out", out, "--overwrite"], "--out")]:
            err = fails(capsys, argv)
            assert f"{name} {out} {in_use}" in err and "(`holder`, since" in err, err
        assert (out / "checkpoint.npz").read_bytes() == b"the run another process is writing"
    finally:
        killed(holder)
    assert cli.main(["index", "build", str(text_file), "--out", str(out)]) == 0
    assert f"{out}: taking over from process {holder.pid} on " in capsys.readouterr().err


def test_a_folder_is_free_again_once_its_holder_finishes(tmp_path, text_file, capsys):
    out = tmp_path / "run"
    holder = python(HOLDER.replace("time.sleep(600)", "sys.stdin.readline()"), out,
                    stdin=subprocess.PIPE)
    assert holder.stdout.readline() == "held\n"
    holder.communicate("done\n", timeout=60)
    assert holder.returncode == 0
    assert cli.main(["index", "build", str(text_file), "--out", str(out)]) == 0
    assert "taking over" not in capsys.readouterr().err   # a finished holder leaves no record


def _two_at_once(first, second):
    """Start both commands together; their (exit status, stderr), first's then second's."""
    runs = [command(*first), command(*second)]
    return [(run.wait(timeout=300), run.communicate()[1]) for run in runs]


def _one_trains_and_one_is_refused(results, option, out):
    statuses = sorted(status for status, _ in results)
    assert statuses == [0, 2], results
    refused = next(err for status, err in results if status == 2).splitlines()
    assert len(refused) == 1 and refused[0].startswith(f"minitorch-nlp: error: {option} {out}")
    assert "is in use by process" in refused[0]


@pytest.mark.slow
def test_two_train_processes_on_one_out(tmp_path, text_file):
    out = tmp_path / "run"
    argv = train_argv(text_file, out, "--steps", "300", "--checkpoint-every", "5")
    _one_trains_and_one_is_refused(_two_at_once(argv, argv), "--out", out)
    state = read_checkpoint(out)
    assert state["step"] == 300 and len(state["history"]["step"]) == 300


@pytest.mark.slow
def test_two_resumes_of_one_run(tmp_path, text_file):
    out = tmp_path / "run"
    assert cli.main(train_argv(text_file, out, "--steps", "2")) == 0
    argv = ["train", "--resume", str(out), "--steps", "300", "--checkpoint-every", "5"]
    _one_trains_and_one_is_refused(_two_at_once(argv, argv), "--resume", out)
    state = read_checkpoint(out)
    assert state["step"] == 300 and state["history"]["step"] == list(range(1, 301))


# ---- kill -9 during a save -----------------------------------------------------------------------
SAVER = """
import sys
import numpy as np
import minitorch_nlp as mt
for version in range(1, 10**6):
    mt.save({"version": version, "weights": np.full(1 << 20, version, dtype=np.float32)},
            sys.argv[1])
    if version == 1:
        print("saved", flush=True)
"""


def _whole(state):
    return state["version"] >= 1 and (state["weights"] == state["version"]).all() \
        and state["weights"].shape == (1 << 20,)


def test_kill_9_during_saves_leaves_a_whole_checkpoint(tmp_path):
    path = tmp_path / "checkpoint.npz"
    for delay in (0.0, 0.05, 0.2):
        saver = python(SAVER, path)
        assert saver.stdout.readline() == "saved\n"
        time.sleep(delay)
        killed(saver)
        assert _whole(mt.load(path))
    mt.save({"version": 0}, path)   # the next save clears what the dead writers left
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.npz"]


@pytest.mark.slow
def test_a_run_killed_at_several_moments_resumes_to_the_end(tmp_path, text_file):
    out = tmp_path / "run"
    argv = train_argv(text_file, out, "--steps", "400", "--checkpoint-every", "1")
    reached = 0
    for _ in range(3):      # each process is killed a few steps after it has saved one
        run = command(*argv) if not out.exists() else \
            command("train", "--resume", out, "--checkpoint-every", "1")
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and _saved_step(out) < reached + 3:
            time.sleep(0.02)
        killed(run)
        step = _saved_step(out)
        assert reached < step < 400
        reached = step
    finished = command("train", "--resume", out)
    assert finished.wait(timeout=300) == 0, finished.communicate()
    assert read_checkpoint(out)["step"] == 400


def _saved_step(out):
    """The step of the run saved in ``out`` (0 before its first save); saves are atomic, so the
    file read is always whole."""
    return read_checkpoint(out)["step"] if (out / "checkpoint.npz").exists() else 0


# ---- divergence ----------------------------------------------------------------------------------
def _strict(path):
    def refuse(constant):
        raise ValueError(f"{path}: {constant} is not JSON")
    return json.loads(Path(path).read_text(encoding="utf-8"), parse_constant=refuse)


def test_a_diverging_run_stops_with_one_line_keeping_its_last_good_checkpoint(
        tmp_path, text_file, capsys):
    out = tmp_path / "run"
    err = fails(capsys, train_argv(text_file, out, "--steps", "10", "--lr", "1e308",
                                   "--checkpoint-every", "1"))
    step, kept = (int(word) for word in
                  (err.split(" at step ")[1].split(":")[0],
                   err.split("the last good checkpoint (step ")[1].split(")")[0]))
    assert kept == step - 1 and "(--lr 1e+308): lower it" in err
    state = read_checkpoint(out)
    assert state["step"] == kept
    assert all(np.isfinite(weights).all() for weights in state["model"].values())
    for written in out.glob("*.json"):
        _strict(written)


def test_metrics_are_strict_json_whatever_the_losses(tmp_path, text_file):
    config = training.TrainConfig(model="gpt", text=str(text_file), n_layer=1, n_head=2,
                                  n_embd=16, block_size=16, batch_size=4, steps=2,
                                  backend="numpy")
    run = training.LanguageModelRun(config)
    run.train(progress=False)
    run.history["loss"][-1], run.history["val_loss"][-1] = math.nan, math.inf
    training.write_report(run, tmp_path, 1.0)
    metrics = _strict(tmp_path / "metrics.json")
    assert metrics["train_loss"] is None and metrics["val_loss"] is None


# ---- crafted sizes -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run_checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    (folder / "text.txt").write_text(TEXT, encoding="utf-8")
    config = training.TrainConfig(model="gpt", text=str(folder / "text.txt"), n_layer=1,
                                  n_head=2, n_embd=16, block_size=16, batch_size=4, steps=2,
                                  backend="numpy")
    run = training.LanguageModelRun(config)
    run.train(progress=False)
    run.save(folder / "checkpoint.npz")
    return folder / "checkpoint.npz"


CRAFTED = [
    ({"config": {"n_layer": 10**9}}, "n_layer = 1000000000 layers of width 16 cannot be made"),
    ({"config": {"block_size": 10**10}}, "block_size = 10000000000 is past the 131072"),
    ({"config": {"n_embd": 10**6}}, "n_embd = 1000000 is the size of no stored weight"),
    ({"config": {"vocab_size": 10**12}}, "vocab_size = 1000000000000 is past"),
    ({"config": {"n_layer": 1e9}}, "n_layer = 1000000000.0 is not a whole number"),
    ({"step": -5}, "step = -5 is not a step of a 2-step run"),
    ({"step": 10**9}, "step = 1000000000 is not a step of a 2-step run"),
]


def _crafted(source, path, change):
    state = mt.load(source)
    for key, value in change.items():
        if isinstance(value, dict):
            state[key] = {**state[key], **value}
        else:
            state[key] = value
    mt.save(state, path)
    return path


@pytest.mark.parametrize("change, message", CRAFTED)
def test_crafted_checkpoint_headers_are_refused(run_checkpoint, tmp_path, capsys, change,
                                                message):
    path = _crafted(run_checkpoint, tmp_path / "checkpoint.npz", change)
    with pytest.raises(ValueError, match=message):
        read_checkpoint(path)
    assert message in fails(capsys, ["generate", path])
    assert message in fails(capsys, ["train", "--resume", path])
    assert message in fails(capsys, ["compress", path, "--quantize", "int8", "--out",
                                     tmp_path / "small"])


def _claims_more_than_it_holds(source, path):
    """``source`` with its largest entry's own .npy header claiming 10**10 values (the bytes
    stored and the checkpoint's header unchanged)."""
    with zipfile.ZipFile(source) as archive:
        entries = {info.filename: archive.read(info) for info in archive.infolist()}
    name = max((entry for entry in entries if entry != "__header__.npy"),
               key=lambda entry: len(entries[entry]))
    data = entries[name]
    header_length = int.from_bytes(data[8:10], "little")
    header = data[10:10 + header_length].decode("latin1")
    shape = header[header.index("'shape': (") + 10:header.index(")", header.index("'shape'"))]
    crafted = header.replace(f"'shape': ({shape})", "'shape': (10000000000,)")
    crafted = crafted.rstrip().ljust(header_length - 1) + "\n"
    assert len(crafted) == header_length
    entries[name] = data[:10] + crafted.encode("latin1") + data[10 + header_length:]
    with zipfile.ZipFile(path, "w") as archive:
        for entry, content in entries.items():
            archive.writestr(entry, content)
    return path


def test_an_entry_claiming_more_than_it_holds_is_refused(run_checkpoint, tmp_path):
    path = _claims_more_than_it_holds(run_checkpoint, tmp_path / "checkpoint.npz")
    with pytest.raises(ValueError, match=r"header claims float32 \(10000000000,\) \(40000000000 "
                       r"bytes\) but it holds \d+ bytes; the file is damaged"):
        read_checkpoint(path)


@pytest.mark.parametrize("member", ["__header__.npy", "arr_0.npy"])
def test_an_entry_that_is_not_an_npy_array_is_refused(run_checkpoint, tmp_path, member):
    path = tmp_path / "checkpoint.npz"
    with zipfile.ZipFile(run_checkpoint) as source, zipfile.ZipFile(path, "w") as target:
        assert member in source.namelist()
        for info in source.infolist():
            name = info.filename[:-4] if info.filename == member else info.filename
            target.writestr(name, source.read(info))
    with pytest.raises(ValueError, match="checkpoint.npz"):
        read_checkpoint(path)


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf")
    model = GPT2LMHeadModel(GPTConfig(vocab_size=40, n_positions=16, n_embd=16, n_layer=1,
                                      n_head=2))
    save_pretrained(model, folder)
    return folder


HF_CRAFTED = [
    ({"n_layer": 10**9}, "n_layer = 1000000000 layers of width 16 cannot be made"),
    ({"n_positions": 10**10}, "n_positions = 10000000000 is past"),
    ({"n_embd": 10**6}, "n_embd = 1000000 is the size of no stored weight"),
    ({"n_head": -1}, "n_head = -1 is not a whole number >= 0"),
    ({"n_inner": 10**12}, "n_inner = 1000000000000 is more than the"),
]


def _crafted_folder(source, folder, change):
    folder.mkdir()
    for item in source.iterdir():
        (folder / item.name).write_bytes(item.read_bytes())
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **change}))
    return folder


@pytest.mark.parametrize("change, message", HF_CRAFTED)
def test_crafted_config_json_is_refused(hf_folder, tmp_path, change, message):
    folder = _crafted_folder(hf_folder, tmp_path / "model", change)
    with pytest.raises(ValueError, match=message):
        from_pretrained(folder)


PEAK = """
import json, resource, sys
from minitorch_nlp.inference import load_for_inference
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
refused = []
for path in sys.argv[1:]:
    try:
        load_for_inference(path)
    except (ValueError, OSError) as error:
        refused.append(str(error))
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"grown_kib": grown, "refused": refused}))
"""


def test_crafted_sizes_are_refused_before_memory_is_spent(run_checkpoint, hf_folder, tmp_path):
    paths = [_crafted(run_checkpoint, tmp_path / f"crafted{i}.npz", change)
             for i, (change, _) in enumerate(CRAFTED)]
    paths.append(_claims_more_than_it_holds(run_checkpoint, tmp_path / "entry.npz"))
    paths += [_crafted_folder(hf_folder, tmp_path / f"hf{i}", change)
              for i, (change, _) in enumerate(HF_CRAFTED)]
    checker = python(PEAK, *paths)
    out, err = checker.communicate(timeout=300)
    assert checker.returncode == 0, err
    result = json.loads(out)
    assert len(result["refused"]) == len(paths), result
    assert result["grown_kib"] < 64 * 1024, result   # the model itself is a few kilobytes


# ---- paths escaping their folder -----------------------------------------------------------------
def _saved_rag(folder, index):
    from minitorch_nlp.retrieval.rag import FORMAT, SETTINGS
    folder.mkdir()
    (folder / SETTINGS).write_text(json.dumps({"format": FORMAT, "n_docs": 1,
                                               "max_source_length": 8,
                                               "retriever_max_length": 8, "index": index,
                                               "dim": 4}))
    return folder


@pytest.mark.parametrize("index, says", [
    ("../outside", ", which leads out of"), ("sub/../../outside", ", which leads out of"),
    ("/etc", "; only a relative path inside"), ("", "; only a relative path inside"),
    ("link", ", which leads out of")])
def test_rag_load_follows_its_index_path_only_inside_its_folder(tmp_path, index, says):
    from minitorch_nlp.retrieval import RAG
    (tmp_path / "outside").mkdir()
    folder = _saved_rag(tmp_path / "rag", index)
    (folder / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(ValueError, match=re.escape(f"rag.json names {index!r}{says}")):
        RAG.load(folder)


def test_paths_inside_the_folder_are_followed(tmp_path):
    (tmp_path / "index").mkdir()
    for name in ("index", "./index", "sub/../index"):
        assert path_inside(tmp_path, name, "rag.json") == os.path.realpath(tmp_path / "index")
