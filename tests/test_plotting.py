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


def test_plot_heads_accepts_a_list_with_own_scales():
    fig = plot_heads([np.eye(2) * 5, np.eye(2)], titles=["scores", "weights"], shared_scale=False)
    panels = [ax for ax in fig.axes if ax.images]
    assert panels[0].images[0].get_clim() == (0.0, 5.0) and len(fig.axes) == 4


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: heatmap(torch.zeros(2, 3, 4)), r"2-D matrix \(L, S\), got shape \(2, 3, 4\)"),
        (lambda: heatmap(torch.zeros(2, 3), ["a"]), "query_labels has 1 labels but the matrix has 2 rows"),
        (lambda: heatmap(torch.zeros(2, 3), None, ["a"]), "key_labels has 1 labels but the matrix has 3 columns"),
        (lambda: plot_heads(torch.zeros(2, 3)), r"\(H, L, S\)"),
        (lambda: plot_heads([np.eye(2)], titles=["a", "b"]), "2 titles for 1 matrices"),
        (lambda: plot_heads([]), "empty"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_plot_tile_maps_and_span_time():
    import matplotlib.pyplot as plt

    from attncourse.kernels.tiles import span_tile_maps
    from attncourse.plotting import plot_span_time, plot_tile_maps

    maps = span_tile_maps(torch.tensor([8.0, 100.0]), 4.0, 128, 16, 16)
    fig = plot_tile_maps(maps)
    assert [ax.get_title() for ax in fig.axes] == [f"head {h}: {int(maps[h].sum())} tiles" for h in range(2)]
    plt.close(fig)
    with pytest.raises(ValueError, match="maps"):
        plot_tile_maps(maps[0])
    with pytest.raises(ValueError, match="titles"):
        plot_tile_maps(maps, ["one"])
    result = {"length": 64, "rows": [{"span": s, "cells": 10 * s, "seconds": 0.01 * s, "times": [0.01 * s]} for s in (4, 16)]}
    fig = plot_span_time(result)
    assert len(fig.axes) == 2
    plt.close(fig)


def test_plot_roofline():
    import matplotlib.pyplot as plt

    from attncourse.plotting import plot_roofline

    fig = plot_roofline({"gpu": (100e12, 1e12)}, {"kernel": 50.0})
    line = fig.axes[0].get_lines()[0]
    x, y = line.get_data()
    assert abs(y[-1] - 100) < 1e-9 and abs(y[0] - x[0]) < 1e-9  # flat at the peak, bandwidth-bound below the ridge
    plt.close(fig)
    with pytest.raises(ValueError, match="intensity_range"):
        plot_roofline({}, {}, intensity_range=(10, 1))
