"""The book's figures, drawn from the package's own code (course scaffolding, not the library).

* :mod:`~attncourse.plotting.weights`: attention weights as heat maps (every chapter).
* :mod:`~attncourse.plotting.diagrams`: schematics of the mechanisms (chapters 1-10).
* :mod:`~attncourse.plotting.measurements`: measured times and the roofline (chapters 6, 8, 10).

Every public function of the three is importable from here, ``from attncourse.plotting import
heatmap``, as the chapters do. The library (``attncourse`` itself) never imports this package.
"""

from .diagrams import (
    block_stages,
    draw_attention_schematic,
    draw_encoder_decoder,
    draw_head_split,
    draw_kv_cache,
    draw_mask_schematic,
    plot_persistent_memory,
    plot_span_cells,
    plot_tile_maps,
    plot_tile_schedule,
    plot_transformer_blocks,
)
from .measurements import plot_decode_times, plot_roofline, plot_span_time
from .weights import heatmap, plot_attention, plot_heads

__all__ = [
    "heatmap",
    "plot_attention",
    "plot_heads",
    "draw_attention_schematic",
    "draw_head_split",
    "draw_mask_schematic",
    "draw_encoder_decoder",
    "block_stages",
    "plot_transformer_blocks",
    "draw_kv_cache",
    "plot_tile_schedule",
    "plot_span_cells",
    "plot_persistent_memory",
    "plot_tile_maps",
    "plot_decode_times",
    "plot_span_time",
    "plot_roofline",
]
