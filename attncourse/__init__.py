"""attncourse: the companion package of the attncourse book on attention mechanisms."""
from .attention import scaled_dot_product_attention
from .multihead import MultiHeadAttention
from .all_attention import AllAttention, AllAttentionBlock
from . import masks

__version__ = "0.1.0"

__all__ = ["scaled_dot_product_attention", "MultiHeadAttention", "AllAttention", "AllAttentionBlock", "masks", "__version__"]
