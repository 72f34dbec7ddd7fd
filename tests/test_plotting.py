"""The heat-map helpers: labels on both axes, a colour bar, one panel per head, clear errors."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attncourse.plotting import heatmap, plot_attention, plot_heads  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_plot_attention_labels_and_colorbar():
    weights = torch.softmax(torch.randn(3, 4), -1)
    ax = plot_attention(weights, ["a", "b", "c"], ["w", "x", "y", "z"], title="t")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["w", "x", "y", "z"]
    assert ax.get_title() == "t"
    assert len(ax.figure.axes) == 2  # the heat map and its colour bar
    assert ax.images[0].get_clim() == (0.0, 1.0)
    np.testing.assert_allclose(ax.images[0].get_array(), weights.numpy())
    assert len(ax.texts) == 12  # small matrices are annotated


def test_heatmap_uses_the_data_range_and_skips_annotation_for_large_matrices():
    values = np.arange(200.0).reshape(10, 20)
    ax = heatmap(values)
    assert ax.images[0].get_clim() == (0.0, 199.0) and not ax.texts


def test_minus_infinity_is_drawn_grey_and_written():
    scores = torch.tensor([[0.5, float("-inf")], [1.0, 2.0]])
    ax = heatmap(scores)
    assert ax.images[0].get_clim() == (0.5, 2.0)  # the colour range ignores -inf
    assert [t.get_text() for t in ax.texts] == ["0.50", "-inf", "1.00", "2.00"]
    assert ax.images[0].get_array().mask.tolist() == [[False, True], [False, False]]


def test_plot_heads_one_panel_per_head_with_shared_scale():
    weights = torch.softmax(torch.randn(4, 3, 3), -1)
    fig = plot_heads(weights, list("abc"), list("abc"), ncols=2, suptitle="heads")
    panels = [ax for ax in fig.axes if ax.images and ax.get_title().startswith("head")]
    assert [ax.get_title() for ax in panels] == ["head 0", "head 1", "head 2", "head 3"]
    assert all(ax.images[0].get_clim() == (0.0, 1.0) for ax in panels)
    assert len(fig.axes) == 5  # four panels and one shared colour bar


def test_plot_heads_wraps_wide_panels_into_rows():
    """Four heads of nine keys side by side made a figure 21 in wide, shown about 7 in wide in
    the book (labels a third of their size): by default the panels wrap at 12 in."""
    fig = plot_heads(torch.softmax(torch.randn(4, 9, 9), -1), annotate=False)
    width, _ = fig.get_size_inches()
    grid = fig.axes[0].get_subplotspec().get_gridspec()
    assert width <= 12 and (grid.nrows, grid.ncols) == (2, 2)
    plt.close(fig)
    small = plot_heads(torch.softmax(torch.randn(4, 4, 4), -1))  # narrow panels stay in a row
    assert small.axes[0].get_subplotspec().get_gridspec().ncols == 4
    plt.close(small)


def test_plot_heads_accepts_a_list_with_own_scales():
    fig = plot_heads([np.eye(2) * 5, np.eye(2)], titles=["scores", "weights"], shared_scale=False)
    panels = [ax for ax in fig.axes if ax.images]
    assert panels[0].images[0].get_clim() == (0.0, 5.0) and len(fig.axes) == 4


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: heatmap(torch.zeros(2, 3, 4)), r"2-D matrix \(L, S\), got shape \(2, 3, 4\)"),
        (
            lambda: heatmap(torch.zeros(2, 3), ["a"]),
            "query_labels has 1 labels but the matrix has 2 rows",
        ),
        (
            lambda: heatmap(torch.zeros(2, 3), None, ["a"]),
            "key_labels has 1 labels but the matrix has 3 columns",
        ),
        (lambda: plot_heads(torch.zeros(2, 3)), r"\(h, L, S\)"),
        (lambda: plot_heads([np.eye(2)], titles=["a", "b"]), "2 titles for 1 matrices"),
        (lambda: plot_heads([]), "empty"),
        (
            lambda: heatmap(torch.zeros(0, 3)),
            r"matrix must have at least one row and one column, got shape \(0, 3\)",
        ),
        (lambda: plot_attention(np.zeros((2, 0))), r"matrix must have at least one row.*\(2, 0\)"),
        (
            lambda: plot_heads(torch.zeros(2, 0, 3)),
            r"matrices\[0\] must have at least one row.*\(0, 3\)",
        ),
        (
            lambda: plot_heads(torch.zeros(2, 3, 3), ncols=-1),
            "ncols must be a positive int or None, got -1",
        ),
        (
            lambda: plot_heads(torch.zeros(2, 3, 3), ncols=0),
            "ncols must be a positive int or None, got 0",
        ),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("ncols", [1.5, "2", True])
def test_plot_heads_ncols_of_the_wrong_type(ncols):
    with pytest.raises(TypeError, match="ncols must be a positive int or None"):
        plot_heads(torch.zeros(2, 3, 3), ncols=ncols)


def test_plot_heads_more_columns_than_panels():
    fig = plot_heads(torch.full((2, 3, 3), 1 / 3), ncols=5)
    assert sum(ax.get_visible() for ax in fig.axes if ax.get_label() != "<colorbar>") == 2


# -- schematics: their numbers come from running the package --------------------------------------

from attncourse import MultiHeadAttention  # noqa: E402
from attncourse.plotting import (
    draw_attention_schematic,
    draw_encoder_decoder,
    draw_head_split,
    draw_mask_schematic,
)  # noqa: E402
from attncourse.transformer import Seq2SeqTransformer  # noqa: E402


def _texts(ax):
    return [t.get_text() for t in ax.texts]


def _cell_colours(ax, cell_size):
    """The face colours of the square cells of one size, in drawing order."""
    return [
        p.get_facecolor()
        for p in ax.patches
        if abs(p.get_width() - cell_size) < 1e-9 and abs(p.get_height() - cell_size) < 1e-9
    ]


def test_attention_schematic_writes_the_shapes_of_every_step():
    ax = draw_attention_schematic(L=3, S=5, d_k=4, d_v=2)
    texts = _texts(ax)
    # Q, K, V, scores and weights, output
    for shape in [
        "(3, 4)",
        "(5, 4)",
        "(5, 2)",
        "(3, 5)",
        "(3, 2)",
    ]:
        assert shape in texts, shape
    assert texts.count("(3, 5)") == 2
    # one square per matrix entry
    assert len(ax.patches) == 3 * 4 + 5 * 4 + 5 * 2 + 2 * 3 * 5 + 3 * 2
    assert not ax.axison


def test_head_split_colours_each_head_and_its_rows_of_w_o():
    layer = MultiHeadAttention(12, 3)
    ax = draw_head_split(layer, length=2)
    texts = _texts(ax)
    assert "(2, 12)" in texts and "(2, 4)" in texts and "(12, 12)" in texts  # X, one head, W^O
    assert [t for t in texts if t.startswith("head ")] == ["head 0", "head 1", "head 2"]
    w_o = _cell_colours(ax, 0.22 * 0.6)  # the smaller cells: W^O, row by row
    assert len(w_o) == 12 * 12
    row_colour = [w_o[12 * i] for i in range(12)]
    # rows 4i..4i+3 meet head i
    assert all(row_colour[i] == row_colour[4 * (i // 4)] for i in range(12))
    assert len({tuple(c) for c in row_colour}) == 3
    projected = _cell_colours(ax, 0.22)[2 * 12 : 2 * 12 + 12]  # first row of X W^Q
    assert [tuple(c) for c in projected[:4]] == [tuple(row_colour[0])] * 4


@pytest.mark.parametrize("embed_dim, num_heads, length", [(12, 3, 3), (12, 3, 2), (8, 2, 3)])
def test_head_split_labels_clear_every_arrow(embed_dim, num_heads, length):
    """No text of the drawing touches an arrow: the arrow into split_heads used to end on the
    label "head 0" (chapter 2 draws (12, 3) at length 3)."""
    ax = draw_head_split(MultiHeadAttention(embed_dim, num_heads), length=length)
    ax.figure.canvas.draw()
    renderer = ax.figure.canvas.get_renderer()
    heads = [getattr(t, "arrow_patch", None) for t in ax.texts]  # an annotation's arrow
    arrows = [patch.get_window_extent(renderer) for patch in heads if patch is not None]
    texts = {t.get_text(): t.get_window_extent(renderer) for t in ax.texts if t.get_text()}
    assert len(arrows) == 4 + num_heads and "head 0" in texts
    touching = [name for name, box in texts.items() for arrow in arrows if arrow.overlaps(box)]
    assert touching == []


def test_mask_schematic_draws_the_package_masks():
    from attncourse.masks import causal_mask, combine_masks, padding_mask

    ax = draw_mask_schematic([3, 1], 3, [["Have", "you", "?"], ["Have", "<pad>", "<pad>"]])
    colours = _cell_colours(ax, 0.28)
    assert len(colours) == 2 * 3 * 9  # 2 sequences, 3 grids of 3 x 3
    dark = matplotlib.colors.to_rgba("#2b5d8a")
    expected = combine_masks(causal_mask(3), padding_mask(torch.tensor([3, 1]), 3)[:, None, :])
    for b in range(2):
        combined = colours[b * 27 + 18 : b * 27 + 27]
        assert [c == dark for c in combined] == expected[b].flatten().tolist()
    assert "length 3: 6 pairs" in _texts(ax) and "length 1: 3 pairs" in _texts(ax)


def test_encoder_decoder_draws_one_cross_attention_arrow_per_decoder_block():
    model = Seq2SeqTransformer(10, 12, d_model=16, num_heads=2, num_layers=3)
    ax = draw_encoder_decoder(model)
    texts = _texts(ax)
    assert texts.count("cross-attention") == 3 and texts.count("masked self-attention") == 3
    assert texts.count("self-attention") == 3  # the encoder's
    assert texts.count("K, V") == 3


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: draw_attention_schematic(L=0), ValueError, "L must be an int from 1 to 12"),
        (lambda: draw_attention_schematic(d_k=2.5), ValueError, "d_k must be an int"),
        (
            lambda: draw_head_split(torch.nn.MultiheadAttention(8, 2)),
            TypeError,
            "attncourse MultiHeadAttention",
        ),
        (lambda: draw_head_split(MultiHeadAttention(64, 8)), ValueError, "embed_dim=64"),
        (
            lambda: draw_mask_schematic([3, 1], 3, [["a", "b", "c"]]),
            ValueError,
            "tokens must be 2 lists of 3 labels",
        ),
        (lambda: draw_mask_schematic([3], 11), ValueError, "max_len=11"),
        (lambda: draw_encoder_decoder(MultiHeadAttention(8, 2)), TypeError, "Seq2SeqTransformer"),
    ],
)
def test_schematics_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_draw_kv_cache_shows_the_positions_each_slot_holds():
    from attncourse.plotting import draw_kv_cache

    ax = draw_kv_cache(6, prompt_len=2)
    assert [t.get_text() for t in ax.texts[:2]] == ["0", "1"]  # the prompt's two slots
    # last row: every position
    assert [t.get_text() for t in ax.texts[-5:]] == ["0", "1", "2", "3", "4", "5"][-5:]
    assert len(ax.patches) == 2 + 3 + 4 + 5 + 6  # the cache grows by one slot per step
    ax = draw_kv_cache(7, prompt_len=2, window=3)
    last = [t.get_text() for t in ax.texts[-3:]]
    # slot p % 3 holds position p: 6 overwrote 3 in slot 0, not in time order
    assert last == ["6", "4", "5"]
    assert len(ax.patches) == 6 * 3  # a fixed buffer of 3 slots


def test_plot_decode_times_draws_both_lines():
    from attncourse.plotting import plot_decode_times

    rows = [{"context": c, "cached_s": 1e-3, "uncached_s": c * 1e-5} for c in (64, 128, 256)]
    ax = plot_decode_times(rows)
    assert len(ax.lines) == 2
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [0.64, 1.28, 2.56])
    np.testing.assert_allclose(ax.lines[1].get_ydata(), [1.0, 1.0, 1.0])  # the cached step, ms


# --- schematics drawn from the package's code (chapters 7-9) ---


def test_plot_tile_schedule_draws_one_rectangle_per_tile():
    from matplotlib.patches import Rectangle

    from attncourse.efficient import tile_schedule
    from attncourse.plotting import plot_tile_schedule

    ax = plot_tile_schedule(4096, 4096, causal=True)
    rectangles = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert len(rectangles) == len(tile_schedule(4096, 4096, causal=True)) == 40
    assert "40 tiles" in ax.get_title() and "53.1%" in ax.get_title()
    plt.close("all")


def test_plot_span_cells_marks_the_layer_window_and_computed_band():
    from attncourse.adaptive_span import computed_cells
    from attncourse.plotting import plot_span_cells

    fig = plot_span_cells([20, 6, 1, 0], 4, 96, block_m=16)
    assert len(fig.axes) == 5
    assert any("W = 24" in t.get_text() for t in fig.axes[0].texts)
    image = fig.axes[1].images[0].get_array()
    computed = (image > 0).sum()
    # the band drawn: each block of 16 queries against its own 16 keys and the 23 before them, inside the sequence
    in_sequence = sum(16 * (start + 16 - max(0, start - 23)) for start in range(0, 96, 16))
    # what the counter adds before position 0
    padding = sum(16 * max(0, 23 - start) for start in range(0, 96, 16))
    assert computed == in_sequence == computed_cells(96, 24, block_m=16) - padding
    assert (np.asarray(fig.axes[1].images[0].get_array()) > 0).sum() == (
        np.asarray(fig.axes[4].images[0].get_array()) > 0
    ).sum()
    with pytest.raises(ValueError, match="spans"):
        plot_span_cells([], 4, 96)
    plt.close("all")


def test_plot_persistent_memory_draws_all_attention_mask():
    from attncourse.plotting import plot_persistent_memory

    ax = plot_persistent_memory(5, 3)
    image = np.asarray(ax.images[0].get_array())
    assert image.shape == (5, 8)
    assert (image[:, 5:] == 2).all()  # memory: visible to every query
    assert np.array_equal(image[:, :5] > 0, np.tril(np.ones((5, 5), dtype=bool)))  # context: causal
    plt.close("all")


def test_plot_tile_maps_and_span_time():
    import matplotlib.pyplot as plt

    from attncourse.kernels.tiles import span_tile_maps
    from attncourse.plotting import plot_span_time, plot_tile_maps

    maps = span_tile_maps(torch.tensor([8.0, 100.0]), 4.0, 128, 16, 16)
    fig = plot_tile_maps(maps)
    assert [ax.get_title() for ax in fig.axes] == [
        f"head {h}: {int(maps[h].sum())} tiles" for h in range(2)
    ]
    for h, ax in enumerate(fig.axes):  # each panel draws its own head's map
        assert np.array_equal(np.asarray(ax.images[0].get_array()) > 0, maps[h].numpy())
    plt.close(fig)
    with pytest.raises(ValueError, match="maps"):
        plot_tile_maps(maps[0])
    with pytest.raises(ValueError, match="titles"):
        plot_tile_maps(maps, ["one"])
    result = {
        "length": 64,
        "rows": [
            {"span": s, "cells": 10 * s, "seconds": 0.01 * s, "times": [0.01 * s]} for s in (4, 16)
        ],
    }
    fig = plot_span_time(result)
    assert len(fig.axes) == 2
    plt.close(fig)


def test_plot_roofline():
    import matplotlib.pyplot as plt

    from attncourse.plotting import plot_roofline

    # 100 TFLOP/s and 2 TB/s: the ridge at 50 FLOP/byte (a bandwidth of 1e12 would equal the
    # plot's unit, 1e12 FLOP/s, and hide a roofline that ignores it)
    fig = plot_roofline({"gpu": (100e12, 2e12)}, {"kernel": 50.0})
    line = fig.axes[0].get_lines()[0]
    x, y = line.get_data()
    # flat at the peak, bandwidth-bound below the ridge: 2 TFLOP/s per FLOP/byte
    assert abs(y[-1] - 100) < 1e-9 and abs(y[0] - 2 * x[0]) < 1e-9
    # the legend stands below the axes, where it hides no line
    fig.canvas.draw()
    (legend,) = fig.legends
    assert legend.get_window_extent().y1 < fig.axes[0].get_window_extent().y0
    assert {t.get_text() for t in legend.get_texts()} == {
        "gpu (ridge at 50 FLOP/B)",
        "kernel: 50 FLOP/B",
    }
    plt.close(fig)
    with pytest.raises(ValueError, match="intensity_range"):
        plot_roofline({}, {}, intensity_range=(10, 1))
