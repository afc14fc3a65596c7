"""The plumbing the examples share: `minitorch_nlp.scripting` (options, start, metrics) and
`minitorch_nlp.plots` (figure styles)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import minitorch_nlp as mt
from minitorch_nlp import plots, scripting

pytest.importorskip("matplotlib")
EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))
SETTINGS = {"full": {"steps": 100}, "smoke": {"steps": 2}}


def test_example_parser_has_the_shared_options():
    parser = scripting.example_parser("demo_x", "what it shows", steps="steps (100; smoke: 2)",
                                      text="a text file")
    args = parser.parse_args([])
    assert (args.smoke, args.out, args.seed, args.steps, args.backend, args.text) == \
        (False, "runs/demo_x", 0, None, "numpy", None)
    bare = scripting.example_parser("y", "no extras", backend=False).parse_args(["--smoke"])
    assert bare.smoke and not hasattr(bare, "backend") and not hasattr(bare, "steps")


def test_start_picks_the_settings_and_makes_the_folder(tmp_path):
    parser = scripting.example_parser("z", "start")
    args = parser.parse_args(["--smoke", "--out", str(tmp_path / "a" / "b"), "--seed", "3"])
    cfg, out = scripting.start(args, SETTINGS)
    assert cfg == {"steps": 2} and out == tmp_path / "a" / "b" and out.is_dir()
    first = mt.randn(3).numpy()
    scripting.start(args, SETTINGS)
    np.testing.assert_array_equal(mt.randn(3).numpy(), first)     # the seed was set
    assert scripting.start(parser.parse_args(["--out", str(tmp_path)]), None)[0] is None
    scripting.write_metrics(out, {"loss": 1.5})
    assert json.loads((out / "metrics.json").read_text()) == {"loss": 1.5}


def test_visible_shows_spaces_and_control_characters():
    assert plots.visible(" a\tb\n") == "\u2423a\\tb\\n"


def test_heatmap_has_a_colour_bar_axis_titles_and_visible_tokens(tmp_path):
    fig, ax = plots.pyplot().subplots()
    plots.heatmap(ax, np.eye(2), columns=["a", " "], rows=["q", "r"], title="t")
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("key tokens", "query tokens",
                                                                  "t")
    assert [label.get_text() for label in ax.get_xticklabels()] == ["a", "\u2423"]
    assert len(fig.axes) == 2                                       # the colour bar's axes
    plots.save(fig, tmp_path / "h.png")
    assert (tmp_path / "h.png").read_bytes()[:4] == b"\x89PNG"


def test_panels_share_one_colour_bar():
    fig, axes = plots.heatmap_panels((1, 3))
    for ax in axes[0]:
        image = plots.heatmap(ax, np.eye(2), columns="ab", rows="cd", title="", colorbar=False)
    plots.shared_colorbar(fig, image, axes)
    assert len(fig.axes) == 4
    plots.pyplot().close(fig)


def test_loss_curves_have_a_legend_a_title_and_plain_ticks():
    fig, ax = plots.pyplot().subplots()
    plots.loss_curves(ax, range(1, 41), {"train": np.linspace(4.0, 3.5, 40)},
                      validation=([20, 40], [3.9, 3.6]), title="loss")
    fig.canvas.draw()
    assert ax.get_title() == "loss" and ax.get_yscale() == "linear"
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == ["train (running mean of 2)", "validation"]
    ticks = [label.get_text() for label in ax.get_yticklabels()]
    assert ticks and not any("10^" in tick or "e" in tick for tick in ticks)
    plots.pyplot().close(fig)


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda path: path.name)
def test_every_example_uses_the_shared_plumbing(script):
    source = script.read_text(encoding="utf-8")
    first_code_cell = source.split("# %%\n")[1]
    assert first_code_cell.startswith("SMOKE = False  # True: tiny settings"), first_code_cell
    assert "scripting.example_parser(" in source and "scripting.arguments(" in source
    assert "scripting.start(" in source
    assert "plots.show(" in source or "plots.log_log_panels(" in source
    assert "plots.save(" not in source and "tqdm" not in source
    assert "def main(" not in source, "a lesson does its work in cells, not in a final main()"
    assert "argparse.ArgumentParser" not in source
    assert "matplotlib.use" not in source


def test_a_notebook_ignores_the_kernels_command_line_and_reads_smoke(monkeypatch):
    """An example opened as a notebook runs with its defaults (the kernel's own arguments are not
    the example's) and its first cell's SMOKE; a script reads its command line."""
    parser = scripting.example_parser("demo_example", "what it shows", steps="steps")
    monkeypatch.setattr(sys, "argv", ["demo_example.py", "--smoke", "--steps", "3"])
    args = scripting.arguments(parser)
    assert args.smoke and args.steps == 3
    monkeypatch.setattr(sys, "argv", ["demo_example.py"])
    assert not scripting.arguments(parser).smoke and scripting.arguments(parser, smoke=True).smoke
    monkeypatch.setattr(sys, "argv", ["/venv/ipykernel_launcher.py", "-f", "kernel-1.json"])
    monkeypatch.setattr(scripting, "in_notebook", lambda: True)
    args = scripting.arguments(parser, smoke=True)
    assert (args.smoke, args.out, args.steps) == (True, "runs/demo_example", None)


def test_outside_a_kernel_there_is_no_notebook_and_bars_are_text(capsys):
    assert scripting.in_notebook() is False
    bar = scripting.progress(range(3), desc="steps")
    assert type(bar).__module__ == "tqdm.std" and list(bar) == [0, 1, 2]


def test_show_saves_the_figure_and_in_a_notebook_displays_it(tmp_path, monkeypatch):
    shown = []
    display = pytest.importorskip("IPython.display")
    monkeypatch.setattr(display, "display", shown.append)
    fig, _ = plots.pyplot().subplots()
    assert plots.show(fig, tmp_path / "a.png") == tmp_path / "a.png" and shown == []
    monkeypatch.setattr(scripting, "in_notebook", lambda: True)
    fig, _ = plots.pyplot().subplots()
    plots.show(fig, tmp_path / "b.png")
    assert len(shown) == 1 and shown[0].data == (tmp_path / "b.png").read_bytes()
    assert (tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"


def test_start_records_the_options_and_settings(tmp_path):
    parser = scripting.example_parser("z", "start")
    args = parser.parse_args(["--out", str(tmp_path)])
    scripting.start(args, SETTINGS)
    record = json.loads((tmp_path / "settings.json").read_text())
    assert record["settings"] == {"steps": 100} and record["options"]["seed"] == 0


def test_log_log_panels_show_each_series_with_its_slope(tmp_path):
    results = {"quadratic": {n: {"cost": 3.0 * n * n, "flat": 5.0} for n in (2, 4, 8, 16)},
               "linear": {n: {"cost": 7.0 * n, "flat": 5.0} for n in (2, 4, 8, 16)}}
    assert plots.log_log_slope(results["quadratic"], "cost") == pytest.approx(2.0)
    assert plots.log_log_slope(results["linear"], "cost") == pytest.approx(1.0)
    assert plots.log_log_slope(results["linear"], "flat") == pytest.approx(0.0, abs=1e-12)
    path = tmp_path / "scaling.png"
    plots.log_log_panels(results, [("cost", "cost"), ("flat", "flat")], xlabel="n",
                         title="growth", path=path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_definitions_give_an_examples_helpers_without_running_it(tmp_path):
    script = tmp_path / "lesson.py"
    script.write_text("SMOKE = False\nimport math\nLIMIT = 3\n"
                      "def double(x):\n    return 2 * x\n"
                      "raise SystemExit('the lesson itself ran')\n", encoding="utf-8")
    lesson = scripting.definitions(script)
    assert lesson.double(lesson.LIMIT) == 6 and lesson.math.pi > 3
    assert lesson.SMOKE is False and not hasattr(lesson, "args")
