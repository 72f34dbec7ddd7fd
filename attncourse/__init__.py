"""attncourse: the companion package of the attncourse book on attention mechanisms."""
from .attention import scaled_dot_product_attention
from .multihead import MultiHeadAttention
from .efficient import tiled_attention
from . import masks

__version__ = "0.1.0"

__all__ = ["scaled_dot_product_attention", "MultiHeadAttention", "tiled_attention", "masks", "__version__"]
