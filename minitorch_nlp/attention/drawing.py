"""Pictures of attention masks: one grid of query rows by key columns, allowed cells dark.

matplotlib is imported only when a picture is drawn, so the masks need nothing beyond NumPy.
Figures are made with ``matplotlib.figure.Figure`` (not pyplot), so drawing from a script or a
test opens no window and leaves no figure behind.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["draw_mask", "draw_masks"]

ALLOWED_COLOUR = "#1f4e8c"
BLOCKED_COLOUR = "#eeeeee"
GRID_COLOUR = "white"
# Beyond these many rows or columns the cell grid (or a tick per position) only adds noise.
MAX_GRID_LINES = 64
MAX_POSITION_TICKS = 16


def _matrix(mask, op):
    """``mask`` as a (q_time, k_time) bool array; leading axes of size 1 are dropped."""
    array = np.asarray(mask)
    if array.dtype.kind != "b":
        raise TypeError(f"{op}: the mask must be a bool array (True = may attend), got "
                        f"{array.dtype}")
    while array.ndim > 2 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 2:
        raise ValueError(f"{op}: can draw a (q_time, k_time) mask, got shape {np.shape(mask)}; "
                         "pick one sequence and head first, e.g. mask[0, 0]")
    return array


def _labels(labels, count, which, op):
    if labels is None:
        return None
    labels = [str(label) for label in labels]
    if len(labels) != count:
        raise ValueError(f"{op}: {which} has {len(labels)} labels for {count} positions")
    return labels


def _legend_handles(allowed, blocked):
    from matplotlib.patches import Patch

    return [Patch(color=ALLOWED_COLOUR, label=f"allowed{allowed}"),
            Patch(facecolor=BLOCKED_COLOUR, edgecolor="#999999", label=f"blocked{blocked}")]


def draw_mask(mask: np.ndarray, ax: Axes | None = None, title: str | None = None,
              query_labels=None, key_labels=None, path=None, *, legend: bool = True) -> Axes:
    """Draw ``mask`` (True = the query of that row may attend the key of that column) on ``ax``
    (a new figure when None) and, with ``path``, save the figure there as a PNG.

    Rows are query positions, columns key positions, allowed cells dark; ``query_labels`` /
    ``key_labels`` (e.g. the tokens) label the ticks; the legend counts the allowed and blocked
    cells (``legend=False`` leaves it out). Returns the axes."""
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    grid = _matrix(mask, "draw_mask")
    q_time, k_time = grid.shape
    query_labels = _labels(query_labels, q_time, "query_labels", "draw_mask")
    key_labels = _labels(key_labels, k_time, "key_labels", "draw_mask")
    if ax is None:
        side = min(8.0, 2.5 + 0.22 * max(q_time, k_time))
        ax = Figure(figsize=(side + 1.2, side), layout="constrained").add_subplot()
    ax.imshow(grid, cmap=ListedColormap([BLOCKED_COLOUR, ALLOWED_COLOUR]), vmin=0, vmax=1,
              interpolation="nearest")
    if max(q_time, k_time) <= MAX_GRID_LINES:  # cell borders, as two line collections
        ax.vlines(np.arange(0.5, k_time - 1), -0.5, q_time - 0.5, colors=GRID_COLOUR,
                  linewidth=0.6)
        ax.hlines(np.arange(0.5, q_time - 1), -0.5, k_time - 0.5, colors=GRID_COLOUR,
                  linewidth=0.6)
    for axis, labels, count in ((ax.xaxis, key_labels, k_time), (ax.yaxis, query_labels, q_time)):
        if labels is not None:
            axis.set_ticks(np.arange(count), labels)
        elif count <= MAX_POSITION_TICKS:
            axis.set_ticks(np.arange(count))
        else:
            axis.set_major_locator(MaxNLocator(nbins=8, integer=True))
    if key_labels is not None:
        ax.tick_params(axis="x", labelrotation=90)
    ax.xaxis.set_ticks_position("top")
    ax.xaxis.set_label_position("top")
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    if title is not None:
        ax.set_title(title, pad=12)
    if legend:
        allowed = int(grid.sum())
        ax.legend(handles=_legend_handles(f" ({allowed})", f" ({grid.size - allowed})"),
                  loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small", frameon=False)
    if path is not None:
        ax.figure.savefig(path, dpi=120)
    return ax


def draw_masks(masks: dict[str, np.ndarray], path=None, columns: int = 3) -> Figure:
    """Draw each mask of the dict ``masks`` (title -> mask) in a grid of ``columns`` panels, each
    titled with the share of query-key pairs it allows, under one legend, and, with ``path``,
    save it as a PNG. Returns the figure."""
    from matplotlib.figure import Figure

    if not masks:
        raise ValueError("draw_masks: give at least one mask (a dict of title -> mask)")
    if isinstance(columns, bool) or not isinstance(columns, int) or columns < 1:
        raise ValueError(f"draw_masks: columns must be a positive int, got {columns!r}")
    grids = {title: _matrix(mask, "draw_masks") for title, mask in masks.items()}
    columns = min(columns, len(grids))
    rows = math.ceil(len(grids) / columns)
    figure = Figure(figsize=(4.2 * columns, 4.4 * rows + 0.4), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for ax, (title, grid) in zip(axes, grids.items()):
        draw_mask(grid, ax=ax, title=f"{title}\n{grid.mean():.0%} of pairs allowed", legend=False)
    for ax in axes[len(grids):]:
        ax.set_axis_off()
    figure.legend(handles=_legend_handles("", ""), loc="outside lower center", ncols=2,
                  frameon=False)
    if path is not None:
        figure.savefig(path, dpi=110)
    return figure
