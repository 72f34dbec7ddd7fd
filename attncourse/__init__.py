"""attncourse: the companion package of the attncourse book on attention mechanisms."""

from . import masks
from .adaptive_span import AdaptiveSpanAttention, adaptive_span_attention, soft_span_mask
from .all_attention import AllAttention, AllAttentionBlock
from .attention import scaled_dot_product_attention
from .efficient import tiled_attention
from .multihead import MultiHeadAttention
from .training import train
from .transformer import CausalLM, Seq2SeqTransformer, TransformerBlock

__version__ = "0.1.0"

__all__ = [
    "scaled_dot_product_attention",
    "MultiHeadAttention",
    "TransformerBlock",
    "CausalLM",
    "Seq2SeqTransformer",
    "train",
    "tiled_attention",
    "soft_span_mask",
    "adaptive_span_attention",
    "AdaptiveSpanAttention",
    "AllAttention",
    "AllAttentionBlock",
    "masks",
    "__version__",
]
