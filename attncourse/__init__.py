"""attncourse: the companion package of the attncourse book on attention mechanisms."""
from .attention import scaled_dot_product_attention
from .multihead import MultiHeadAttention
from . import masks
from .adaptive_span import AdaptiveSpanAttention, adaptive_span_attention, soft_span_mask

__version__ = "0.1.0"

__all__ = [
    "scaled_dot_product_attention",
    "MultiHeadAttention",
    "masks",
    "AdaptiveSpanAttention",
    "adaptive_span_attention",
    "soft_span_mask",
    "__version__",
]
