"""The figure styles every example and training report shares, so that a fix to a figure lands in
all of them: loss curves with a title, a legend and plain tick labels; attention heat maps with a
colour bar and axis titles; tokens with their spaces made visible. ``show`` writes a figure to
its file and, in a notebook, shows that file inline where the figure is made.

Needs matplotlib (``pip install 'minitorch-nlp[plots]'``); ``pyplot()`` raises ``ImportError``
saying so when it is missing.
"""
from __future__ import annotations

import numpy as np

__all__ = ["heatmap", "heatmap_panels", "log_log_panels", "log_log_slope", "loss_curves", "pyplot",
           "save", "shared_colorbar", "show", "visible"]

SPACE = "\u2423"   # "␣": a space token drawn so that it can be seen


def pyplot():
    """``matplotlib.pyplot`` on the file-only Agg backend (no window is opened)."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError("figures need matplotlib: pip install 'minitorch-nlp[plots]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def visible(token):
    """``token`` as a label: spaces as "␣", newlines as "\\n", tabs as "\\t"."""
    return str(token).replace(" ", SPACE).replace("\n", "\\n").replace("\t", "\\t")


def loss_curves(ax, steps, series, *, validation=None, validation_label="validation", title,
                ylabel="cross-entropy (nats)"):
    """Training losses on ``ax``: ``series`` maps a legend label to the losses at ``steps``
    (a running mean is drawn over long noisy runs), ``validation`` an optional (steps, losses)
    pair; linear axes with plain tick labels, a legend and ``title``. Lines added afterwards
    join the legend when the caller calls ``ax.legend()`` again."""
    for label, losses in series.items():
        losses = np.asarray(losses, dtype=float)
        noisy = len(losses) >= 20   # drawn faint, under its running mean
        (line,) = ax.plot(steps, losses, alpha=0.35 if noisy else 1.0,
                          label="_nolegend_" if noisy else label)
        if noisy:
            window = max(2, len(losses) // 50)
            smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
            ax.plot(list(steps)[window - 1:], smooth, color=line.get_color(),
                    label=f"{label} (running mean of {window})")
    if validation is not None and len(validation[0]):
        ax.plot(validation[0], validation[1], "o-", label=validation_label)
    ax.ticklabel_format(axis="both", style="plain", useOffset=False)
    ax.xaxis.set_major_locator(_integer_ticks())
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()


def _integer_ticks():
    from matplotlib.ticker import MaxNLocator
    return MaxNLocator(integer=True)


def heatmap(ax, weights, *, columns, rows, title, xlabel="key tokens", ylabel="query tokens",
            colorbar_label="attention weight", vmin=0.0, vmax=None, colorbar=True):
    """The matrix ``weights`` (rows, columns) on ``ax`` with token labels (spaces visible), axis
    titles and a colour bar (``colorbar=False``: none here, e.g. for panels that share one drawn
    by ``shared_colorbar``); attention weights by default (0 to the largest weight). Returns the
    image."""
    weights = np.asarray(weights, dtype=float)
    image = ax.imshow(weights, cmap="viridis", vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(len(columns)), [visible(t) for t in columns], rotation=90)
    ax.set_yticks(range(len(rows)), [visible(t) for t in rows])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, label=colorbar_label, fraction=0.046, pad=0.04)
    return image


def heatmap_panels(shape, *, panel_size=(3.6, 3.4)):
    """A figure of ``shape`` (rows, columns) panels laid out so that tick labels, titles and a
    shared colour bar never overlap; returns (figure, axes as a 2-D array)."""
    rows, columns = shape
    return pyplot().subplots(rows, columns, squeeze=False, layout="constrained",
                             figsize=(panel_size[0] * columns, panel_size[1] * rows))


def shared_colorbar(fig, image, axes, label="attention weight"):
    """One colour bar for all ``axes`` (panels drawn on the same scale)."""
    fig.colorbar(image, ax=np.ravel(axes).tolist(), label=label, shrink=0.9)


def save(fig, path, dpi=100):
    """Write ``fig`` to ``path`` cropped to what is drawn, and close it."""
    plt = pyplot()
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)


def show(fig, path, dpi=100):
    """``save`` ``fig`` to ``path`` and, in a notebook, display that PNG inline (the file-only
    Agg backend draws nothing by itself). Returns ``path``."""
    from .scripting import in_notebook

    save(fig, path, dpi)
    if in_notebook():
        from IPython.display import Image, display
        display(Image(filename=str(path)))
    return path


def log_log_slope(by_x, key):
    """The least-squares slope of ``log(by_x[x][key])`` against ``log(x)``: how a cost grows
    with x (2 quadratic, 1 linear, 0 flat)."""
    xs = sorted(by_x)
    return float(np.polyfit(np.log(xs), np.log([by_x[x][key] for x in xs]), 1)[0])


def log_log_panels(results, panels, *, xlabel, title, path):
    """One log-log panel per (key, label) of ``panels``, each series of ``results`` (name -> x ->
    {key: value}) with its ``log_log_slope`` in the legend, shown and saved to ``path``."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(5.5 * len(panels), 4.2), layout="constrained")
    axes = figure.subplots(1, len(panels), squeeze=False)[0]
    for ax, (key, label) in zip(axes, panels):
        for name, by_x in results.items():
            xs = sorted(by_x)
            ax.plot(xs, [by_x[x][key] for x in xs], marker="o",
                    label=f"{name} (slope {log_log_slope(by_x, key):.2f})")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(label)
        ax.legend(fontsize="small")
    figure.suptitle(title)
    show(figure, path)
