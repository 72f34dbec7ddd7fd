"""The block schematic of chapter 5 is read off the blocks themselves."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from attncourse import TransformerBlock  # noqa: E402
from attncourse.plotting import block_stages, plot_transformer_blocks  # noqa: E402


def test_stages_follow_the_layout():
    # what both layouts share: each sublayer with its dropout and residual, a LayerNorm between
    sublayers = [
        "masked self-attention",
        "dropout",
        "+",
        "LayerNorm",
        "feed-forward",
        "dropout",
        "+",
    ]
    # post-LN normalises after the last residual, pre-LN before the first sublayer too
    post_ln = ["input", *sublayers, "LayerNorm", "output"]
    pre_ln = ["input", "LayerNorm", *sublayers, "output"]
    assert block_stages(TransformerBlock(8, 2, 16)) == post_ln
    assert block_stages(TransformerBlock(8, 2, 16, norm_first=True)) == pre_ln
    decoder = block_stages(TransformerBlock(8, 2, 0, cross_attention=True))
    assert (
        "cross-attention" in decoder and "feed-forward" not in decoder and decoder.count("+") == 2
    )


def test_plot_draws_every_stage_and_one_residual_per_sublayer():
    blocks = [TransformerBlock(8, 2, 16), TransformerBlock(8, 2, 16, norm_first=True)]
    fig = plot_transformer_blocks(blocks, ["post", "pre"])
    for ax, block in zip(fig.axes, blocks):
        texts = [t.get_text() for t in ax.texts if t.get_text()]  # arrows are empty annotations
        assert texts == block_stages(block)
        residual_lines = [
            line
            for line in ax.lines
            if line.get_color() == "tab:red" and len(line.get_xdata()) == 3
        ]
        assert len(residual_lines) == 2
        # each skip connection leaves from just below its group's first stage (the sublayer in
        # post-LN, the LayerNorm before it in pre-LN) and enters its "+"
        stages, starts = block_stages(block), []
        for plus in [i for i, label in enumerate(stages) if label == "+"]:
            sublayer = plus - 2  # the stages read sublayer, dropout, "+"
            first = sublayer - 1 if block.norm_first else sublayer
            starts += [first - 0.5, plus]
        drawn = [y for line in residual_lines for y in (line.get_ydata()[0], line.get_ydata()[-1])]
        assert drawn == pytest.approx(starts)
    plt.close(fig)
    with pytest.raises(ValueError, match="one title per block"):
        plot_transformer_blocks(blocks, ["only one"])
