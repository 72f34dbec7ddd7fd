"""The small Transformer models that the later chapters train (chapters 4, 5, 6, 8 and 9).

* :class:`TransformerBlock`: a post-LayerNorm layer as in "Attention Is All You Need"::

      h   = LayerNorm(x + Dropout(SelfAttention(x)))
      h   = LayerNorm(h + Dropout(CrossAttention(h, memory)))  (decoders)
      out = LayerNorm(h + Dropout(FFN(h)))

  or, with ``norm_first=True``, a pre-LayerNorm layer (GPT-2; Xiong et al., 2020)::

      h   = x + Dropout(SelfAttention(LayerNorm(x)))
      out = h + Dropout(FFN(LayerNorm(h)))

* :class:`Seq2SeqTransformer`: encoder-decoder (chapter 4, cross-attention).
* :class:`CausalLM`: decoder-only language model over any stack of blocks. A block is any
  module called as ``block(x, mask)`` with ``x`` of shape ``(B, L, d_model)`` and a causal
  ``mask`` of shape ``(L, L)``; so a standard Transformer, one with adaptive spans
  (chapter 8) and an all-attention one (chapter 9) differ only in the blocks they stack.
"""

from __future__ import annotations

import inspect
from typing import List, Optional, Sequence

import torch
from torch import Tensor, nn

from ._checks import (
    check_mask,
    check_positive_ints,
    check_probability,
    check_token_id,
    fmt_shape,
    require_bool,
    require_floating,
    require_heads_divide,
    require_input_like,
    require_non_negative_int,
    require_pad_id,
    require_positive_int,
    require_rank,
    require_size,
    require_tensor,
    require_token_ids,
)
from .kv_cache import KVCache
from .masks import causal_mask, combine_masks
from .multihead import MultiHeadAttention
from .positions import sinusoidal_encoding

__all__ = ["FeedForward", "TransformerBlock", "CausalLM", "EncoderDecoder", "Seq2SeqTransformer"]

#: ``CausalLM``'s ``positional``: added to the token embeddings (``"learned"``,
#: ``"sinusoidal"``), nothing (``"none"``), or inside every self-attention (``"rope"``,
#: ``"alibi"``, which the blocks must be built with).
POSITIONAL = ("learned", "sinusoidal", "none", "rope", "alibi")
_TABLES = ("learned", "sinusoidal")  # encodings with a table of max_len rows
_IN_ATTENTION = ("rope", "alibi")


class FeedForward(nn.Module):
    """Position-wise feed-forward sublayer: ``W2 ReLU(W1 x + b1) + b2``, ``(..., d_model) -> (..., d_model)``."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        require_positive_int("d_model", d_model)
        require_positive_int("d_ff", d_ff)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        """``(..., d_model)`` -> ``(..., d_model)``, each position on its own."""
        require_floating("x", x)
        require_rank("x", x, 1, "(..., d_model)", at_least=True)
        require_size("x", x, -1, self.linear1.in_features, "d_model")
        require_input_like("x", x, self.linear1.weight, "feed-forward layer")
        return self._forward(x)

    def _forward(self, x: Tensor) -> Tensor:
        """:meth:`forward` without the input checks (a block has checked its input)."""
        return self.linear2(torch.relu(self.linear1(x)))


def _check_dropout(dropout: object) -> float:
    return check_probability("dropout", dropout)


def _check_hidden(
    name: str, x: object, attn: MultiHeadAttention, layout: str = "(B, L, d_model)"
) -> None:
    """A block's input: floating ``(B, L, d_model)`` in the dtype and device of its parameters."""
    require_floating(name, x)
    assert isinstance(x, Tensor)
    require_rank(name, x, 3, layout)
    require_size(name, x, -1, attn.embed_dim, "d_model")
    require_input_like(name, x, attn.q_proj.weight, "block")


class TransformerBlock(nn.Module):
    """One Transformer layer (post-LayerNorm by default); with ``cross_attention=True`` a decoder layer.

    Args:
        d_model: width of the hidden states.
        num_heads: heads of each attention sublayer.
        d_ff: inner width of the feed-forward sublayer; ``0`` leaves that sublayer out.
        cross_attention: add encoder-decoder attention between self-attention and the FFN.
        dropout: probability of the attention dropout inside each attention sublayer and of
            the residual dropout on each sublayer's output before it is added to the residual
            stream (Vaswani et al., 2017, section 5.4); active in training mode only.
        norm_first: pre-LayerNorm: normalise each sublayer's input and leave the residual
            stream un-normalised (stack a final LayerNorm after the last such block, as
            ``CausalLM(..., final_norm=True)`` does).
        positional: ``None``, ``"rope"`` or ``"alibi"``: relative positions inside the
            self-attention (``MultiHeadAttention``'s ``positional``; chapters 5 and 6).

    After each call, ``self_weights`` (and ``cross_weights``) hold the detached attention
    weights ``(B, num_heads, L, S)`` of the last forward pass, for plotting.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        *,
        cross_attention: bool = False,
        dropout: float = 0.0,
        norm_first: bool = False,
        positional: Optional[str] = None,
    ) -> None:
        super().__init__()
        require_heads_divide(
            "d_model", d_model, num_heads, " (each head gets d_model / num_heads features)"
        )
        require_non_negative_int("d_ff", d_ff)
        dropout = _check_dropout(dropout)
        require_bool("cross_attention", cross_attention)
        require_bool("norm_first", norm_first)
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(
            d_model, num_heads, dropout=dropout, positional=positional
        )
        self.norm1 = nn.LayerNorm(d_model)
        self.cross_attn = (
            MultiHeadAttention(d_model, num_heads, dropout=dropout) if cross_attention else None
        )
        self.norm2 = nn.LayerNorm(d_model) if cross_attention else None
        self.ffn = FeedForward(d_model, d_ff) if d_ff > 0 else None
        self.norm3 = nn.LayerNorm(d_model) if d_ff > 0 else None
        self.dropout = nn.Dropout(dropout)  # residual dropout
        self.self_weights: Optional[Tensor] = None
        self.cross_weights: Optional[Tensor] = None

    def _sublayer(self, x: Tensor, norm: nn.LayerNorm, f) -> Tensor:
        """``x + Dropout(f(LayerNorm(x)))`` (pre-LN) or ``LayerNorm(x + Dropout(f(x)))`` (post-LN)."""
        if self.norm_first:
            return x + self.dropout(f(norm(x)))
        return norm(x + self.dropout(f(x)))

    def forward(
        self,
        x: Tensor,
        mask: Optional[Tensor] = None,
        memory: Optional[Tensor] = None,
        memory_mask: Optional[Tensor] = None,
        *,
        cache: Optional[KVCache] = None,
    ) -> Tensor:
        """``x``: ``(B, L, d_model)``; ``mask``: self-attention mask, boolean or additive,
        broadcastable to ``(B, L, L)`` (with a cache, to ``(B, L, S)`` over the cached and new
        positions; the cache adds the causal mask itself); ``memory``: ``(B, S, d_model)``
        encoder output, with ``memory_mask`` broadcastable to ``(B, L, S)``; ``cache``: the
        self-attention's :class:`attncourse.kv_cache.KVCache` (chapter 6). Returns ``(B, L, d_model)``.
        """
        _check_hidden("x", x, self.self_attn)
        if self.cross_attn is None and (memory is not None or memory_mask is not None):
            raise ValueError(
                f"{'memory' if memory is not None else 'memory_mask'} was given but this block"
                " has no cross-attention"
            )
        if self.cross_attn is not None:
            if memory is None:
                raise ValueError("this block has cross-attention: pass memory (B, S, d_model)")
            _check_hidden("memory", memory, self.self_attn, "(B, S, d_model)")
            if memory.size(0) != x.size(0):
                raise ValueError(
                    f"x and memory must have the same batch size, got x {fmt_shape(x.shape)} and"
                    f" memory {fmt_shape(memory.shape)}"
                )
            if memory_mask is not None:
                check_mask(
                    memory_mask,
                    (x.size(0), x.size(1), memory.size(1)),
                    name="memory_mask",
                    layout="(B, L, S)",
                )

        def self_attention(h: Tensor) -> Tensor:
            attended, weights = self.self_attn(h, h, h, mask, cache=cache)
            self.self_weights = weights.detach()
            return attended

        def cross_attention(h: Tensor) -> Tensor:
            attended, weights = self.cross_attn(h, memory, memory, memory_mask)
            self.cross_weights = weights.detach()
            return attended

        h = self._sublayer(x, self.norm1, self_attention)
        if self.cross_attn is not None:
            h = self._sublayer(h, self.norm2, cross_attention)
        if self.ffn is not None:
            h = self._sublayer(h, self.norm3, self.ffn._forward)
        return h


class _Embedding(nn.Module):
    """Token embedding plus a position embedding: learned (the default), sinusoidal or none.

    ``positional="learned"``: a table of ``max_len`` trained vectors, initialised N(0, 1) like
    the tokens'; ``"sinusoidal"``: the fixed :func:`attncourse.positions.sinusoidal_encoding`;
    ``"none"``: no position information at all (chapter 5's control).

    No sqrt(d_model) factor on the tokens: that factor belongs with embeddings initialised at
    scale 1/sqrt(d_model). Applied to N(0, 1) embeddings it makes every token component
    sqrt(d_model) times larger than the position components, which then carry almost no signal
    (tasks that need "the token k positions back" learned far more slowly with it)."""

    def __init__(
        self, vocab_size: int, d_model: int, max_len: int, positional: str = "learned"
    ) -> None:
        super().__init__()
        if not isinstance(positional, str):
            raise TypeError(
                f"positional must be one of {POSITIONAL}, got {type(positional).__name__}"
                f" {positional!r}"
            )
        if positional not in POSITIONAL:
            raise ValueError(f"positional must be one of {POSITIONAL}, got {positional!r}")
        self.positional, self.max_len = positional, max_len
        self.tokens = nn.Embedding(vocab_size, d_model)
        self.positions = nn.Embedding(max_len, d_model) if positional == "learned" else None
        if positional == "sinusoidal":
            self.register_buffer("table", sinusoidal_encoding(max_len, d_model), persistent=False)

    def check(self, name: str, tokens: object, offset: int = 0) -> None:
        """``tokens``: integer ``(B, L)`` ids of this vocabulary that fit at ``offset``; errors
        name the caller's argument ``name``."""
        require_tensor(name, tokens)
        assert isinstance(tokens, Tensor)
        require_rank(name, tokens, 2, "(B, L)")
        require_token_ids(name, tokens, self.tokens.num_embeddings)
        if self.positional in _TABLES and offset + tokens.size(1) > self.max_len:
            reason = (
                f": its {self.positional} position table has rows for positions 0 .. "
                f"{self.max_len - 1} only, and a rolling buffer (new_cache(window=...)) bounds the"
                " keys, not the positions; decoding past max_len needs relative positions"
                " (positional='rope' or 'alibi')"
                if offset > 0
                else ""
            )
            raise ValueError(
                f"{name} has length {tokens.size(1)} at offset {offset} but the model has"
                f" max_len={self.max_len} ({name} shape {fmt_shape(tokens.shape)}){reason}"
            )

    def forward(self, tokens: Tensor, offset: int = 0) -> Tensor:
        """``(B, L)`` tokens at positions ``offset .. offset + L - 1`` -> ``(B, L, d_model)``."""
        self.check("tokens", tokens, offset)
        x = self.tokens(tokens.long())  # int8/int16/uint8 ids are ids too; embedding wants long
        if self.positional == "learned":
            x = x + self.positions(
                torch.arange(offset, offset + tokens.size(1), device=tokens.device)
            )
        elif self.positional == "sinusoidal":
            x = x + self.table[offset : offset + tokens.size(1)].to(x.dtype)
        return x


def _check_blocks(blocks: object, d_model: int) -> list:
    """``blocks`` as a list of modules; a :class:`TransformerBlock` must have width ``d_model``."""
    if isinstance(blocks, nn.Module) and not isinstance(blocks, nn.ModuleList):
        raise TypeError(
            f"blocks must be a list of modules, got a single {type(blocks).__name__}: pass [block]"
        )
    if not isinstance(blocks, (list, tuple, nn.ModuleList)):
        raise TypeError(f"blocks must be a list of modules, got {type(blocks).__name__}")
    for i, block in enumerate(blocks):
        if not isinstance(block, nn.Module):
            raise TypeError(f"blocks[{i}] must be an nn.Module, got {type(block).__name__}")
        if isinstance(block, TransformerBlock) and block.self_attn.embed_dim != d_model:
            raise ValueError(
                f"blocks[{i}] has width {block.self_attn.embed_dim} but the model's d_model is"
                f" {d_model}"
            )
    return list(blocks)


def _check_block_positions(blocks: Sequence[nn.Module], positional: str) -> None:
    """``"rope"``/``"alibi"`` act in the blocks: each must be a TransformerBlock built with it."""
    expected = positional if positional in _IN_ATTENTION else None
    for i, block in enumerate(blocks):
        attn = getattr(block, "self_attn", None)
        has = getattr(attn, "positional", None)
        if expected is not None and not isinstance(block, TransformerBlock):
            raise TypeError(
                f"positional={positional!r} is applied inside attention, but blocks[{i}] is a"
                f" {type(block).__name__}: use TransformerBlock(..., positional={positional!r})"
                f" blocks (CausalLM.standard(..., positional={positional!r}) builds them)"
            )
        if has != expected:
            raise ValueError(
                f"positional={positional!r} but blocks[{i}] was built with positional={has!r}:"
                f" build every block with positional={expected!r}"
                f" (CausalLM.standard(..., positional={positional!r}) does)"
            )


def _check_cached_batch(tokens: Tensor, cache: Sequence[KVCache]) -> None:
    """``tokens`` continue the cached sequences: the same batch size as the cache holds."""
    require_tensor("tokens", tokens)
    stored = cache[0].keys
    if stored is not None and tokens.dim() >= 1 and tokens.size(0) != stored.size(0):
        raise ValueError(
            f"tokens has batch size {tokens.size(0)} but the cache holds {stored.size(0)}"
            f" sequences (tokens shape {fmt_shape(tokens.shape)}): continue the same batch, or"
            " start a new cache (new_cache())"
        )


class CausalLM(nn.Module):
    """Decoder-only language model: embeddings, a stack of causal blocks, a linear head.

    Args:
        vocab_size: number of token ids.
        d_model: hidden width.
        max_len: longest sequence the position table covers (``"learned"``, ``"sinusoidal"``):
            the longest input, and the last position a cache may reach. With ``"none"``,
            ``"rope"`` or ``"alibi"`` there is no table and positions go on past it (a
            rolling-buffer cache decodes for ever); :func:`attncourse.sampling.generate` still
            crops its context to ``max_len``.
        blocks: the layers, each called as ``block(x, mask)`` with the ``(L, L)`` causal mask.
        positional: ``"learned"`` (default) or ``"sinusoidal"`` vectors added to the token
            embeddings, ``"none"``, or ``"rope"`` / ``"alibi"`` applied inside the
            self-attention of every block (chapter 5): each block must then be a
            :class:`TransformerBlock` built with the same ``positional``, as
            :meth:`standard` builds them.
        dropout: dropout on the sum of token and position embeddings (training mode only).
        final_norm: a LayerNorm after the last block (needed after pre-LayerNorm blocks, whose
            residual stream is never normalised otherwise).

    ``forward`` maps tokens ``(B, L)`` to next-token logits ``(B, L, vocab_size)``, with ``L``
    at most ``max_len`` where there is a position table (see ``max_len`` above).
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        max_len: int,
        blocks: Sequence[nn.Module],
        *,
        positional: str = "learned",
        dropout: float = 0.0,
        final_norm: bool = False,
    ) -> None:
        super().__init__()
        check_positive_ints(vocab_size=vocab_size, d_model=d_model, max_len=max_len)
        self.max_len = max_len
        self.embed = _Embedding(vocab_size, d_model, max_len, positional)
        self.positional = positional
        self.dropout = nn.Dropout(_check_dropout(dropout))
        self.blocks = nn.ModuleList(_check_blocks(blocks, d_model))
        _check_block_positions(self.blocks, positional)
        require_bool("final_norm", final_norm)
        self.norm = nn.LayerNorm(d_model) if final_norm else None
        self.head = nn.Linear(d_model, vocab_size)

    @classmethod
    def standard(
        cls,
        vocab_size: int,
        *,
        d_model: int = 64,
        num_heads: int = 4,
        d_ff: int = 256,
        num_layers: int = 2,
        max_len: int = 128,
        dropout: float = 0.0,
        norm_first: bool = False,
        positional: str = "learned",
    ) -> "CausalLM":
        """A language model of ``num_layers`` :class:`TransformerBlock` layers.

        Post-LayerNorm blocks by default; ``norm_first=True`` gives GPT-2's layout, pre-LayerNorm
        blocks and a final LayerNorm. ``dropout`` is used everywhere (embeddings, attention
        weights, residuals), as nanoGPT does.
        """
        require_positive_int("num_layers", num_layers)
        in_attention = positional if positional in _IN_ATTENTION else None
        blocks = [
            TransformerBlock(
                d_model,
                num_heads,
                d_ff,
                dropout=dropout,
                norm_first=norm_first,
                positional=in_attention,
            )
            for _ in range(num_layers)
        ]
        return cls(
            vocab_size,
            d_model,
            max_len,
            blocks,
            positional=positional,
            dropout=dropout,
            final_norm=norm_first,
        )

    def forward(self, tokens: Tensor, cache: Optional[List[KVCache]] = None) -> Tensor:
        """Tokens ``(B, L)`` -> next-token logits ``(B, L, vocab_size)``; position ``t`` sees tokens ``<= t`` only.

        With ``cache`` (one :class:`attncourse.kv_cache.KVCache` per block, from
        :meth:`new_cache`), ``tokens`` continue the cached sequence: they sit at positions
        ``cache[0].seen ..`` and attend to the cached positions as well (chapter 6).
        """
        if cache is None:
            x = self.dropout(self.embed(tokens))
            mask = causal_mask(tokens.size(1), device=tokens.device)
            for block in self.blocks:
                x = block(x, mask)
        else:
            self._require_cacheable()
            if (
                not isinstance(cache, (list, tuple))
                or len(cache) != len(self.blocks)
                or not all(isinstance(c, KVCache) for c in cache)
            ):
                raise TypeError(
                    f"cache must be a list of {len(self.blocks)} KVCache objects, one per block"
                    " (see new_cache)"
                )
            _check_cached_batch(tokens, cache)
            x = self.dropout(self.embed(tokens, offset=cache[0].seen))
            for block, layer_cache in zip(self.blocks, cache):
                x = block(x, cache=layer_cache)  # the cache supplies the causal mask
        if self.norm is not None:
            x = self.norm(x)
        return self.head(x)

    def _require_cacheable(self) -> None:
        """A KV cache needs blocks whose ``forward`` takes ``cache=`` (as :class:`TransformerBlock`'s does)."""
        if len(self.blocks) == 0:
            raise ValueError(
                "this model has no blocks, so it has no keys and values to cache: run it without"
                " cache (generate(..., use_cache=False))"
            )
        for i, block in enumerate(self.blocks):
            if "cache" not in inspect.signature(block.forward).parameters:
                raise TypeError(
                    f"block {i} ({type(block).__name__}) takes no KV cache, so this model cannot"
                    " decode with one: run it without cache (generate(..., use_cache=False))"
                )

    def new_cache(self, window: Optional[int] = None) -> List[KVCache]:
        """An empty KV cache per block (``window``: a rolling buffer of that many positions).

        Raises a ``TypeError`` when a block takes no cache (the adaptive-span blocks of chapter 8),
        a ``ValueError`` for a model without blocks.
        """
        self._require_cacheable()
        return [KVCache(window) for _ in self.blocks]


class EncoderDecoder(nn.Module):
    """The base of the course's translation models: what an encoder-decoder does with its layers,
    whatever they are (chapter 4's :class:`attncourse.course.toy_translation.AttentionTranslator`,
    made of attention alone, and :class:`Seq2SeqTransformer`).

    The encoder's layers read the source with its padded keys masked; the decoder's read the
    target so far with a causal mask (and its padded keys masked), and the encoder's output with
    the source's padding masked; a linear ``head`` turns the last one's output into logits.

    A subclass checks its sizes with ``_check_sizes``, sets ``pad_id``, builds ``encoder`` and
    ``decoder`` (layers called as ``layer(x, mask)`` and ``layer(x, mask, memory,
    memory_mask)``) and the linear ``head``, and embeds tokens in ``_embed_source`` and
    ``_embed_target``. Its public methods check their arguments, then call ``_encode``,
    ``_decode`` and ``_greedy``.
    """

    pad_id: int
    encoder: nn.ModuleList
    decoder: nn.ModuleList
    head: nn.Linear

    @staticmethod
    def _check_sizes(
        src_vocab: int,
        tgt_vocab: int,
        d_model: int,
        max_len: int,
        pad_id: int,
        *,
        num_encoder_layers: Optional[int] = None,
        **layers: int,
    ) -> None:
        """Positive ``src_vocab``, ``tgt_vocab``, ``d_model``, ``layers`` (counts of layers) and
        ``max_len``, in that order; then ``num_encoder_layers``, where given, a count that may be
        0 (no encoder layer); then ``pad_id``, a token id of both vocabularies."""
        check_positive_ints(
            src_vocab=src_vocab, tgt_vocab=tgt_vocab, d_model=d_model, **layers, max_len=max_len
        )
        if num_encoder_layers is not None:
            require_non_negative_int("num_encoder_layers", num_encoder_layers)
        require_pad_id(pad_id, src_vocab, tgt_vocab)

    def _embed_source(self, src: Tensor) -> Tensor:
        """``(B, S)`` source tokens -> ``(B, S, d_model)`` vectors (positions included)."""
        raise NotImplementedError

    def _embed_target(self, tgt_in: Tensor) -> Tensor:
        """``(B, L)`` target tokens -> ``(B, L, d_model)`` vectors (positions included)."""
        raise NotImplementedError

    def _encode(self, src: Tensor) -> Tensor:
        x = self._embed_source(src)
        keys = (src != self.pad_id)[:, None, :]  # (B, 1, S): padded keys are never attended
        for layer in self.encoder:
            x = layer(x, keys)
        return x

    def _decode(self, tgt_in: Tensor, memory: Tensor, src: Tensor) -> Tensor:
        x = self._embed_target(tgt_in)
        self_mask = combine_masks(
            causal_mask(tgt_in.size(1), device=tgt_in.device), (tgt_in != self.pad_id)[:, None, :]
        )
        memory_mask = (src != self.pad_id)[:, None, :]
        for layer in self.decoder:
            x = layer(x, self_mask, memory, memory_mask)
        return self.head(x)

    def _greedy(self, src: Tensor, bos_id: int, max_len: int) -> Tensor:
        """``greedy_decode`` once its arguments are checked: ``max_len`` steps, each feeding
        every token so far back into the decoder."""
        memory = self._encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        for _ in range(int(max_len)):
            logits = self._decode(out, memory, src)
            out = torch.cat([out, logits[:, -1:].argmax(-1)], dim=1)
        return out[:, 1:]


class Seq2SeqTransformer(EncoderDecoder):
    """Encoder-decoder Transformer for toy translation (chapter 4).

    Args:
        src_vocab: source vocabulary size.
        tgt_vocab: target vocabulary size.
        d_model, num_heads, d_ff: widths of the layers.
        num_layers: layers in the encoder and in the decoder.
        max_len: longest source or target sequence.
        pad_id: the padding token id of both vocabularies; padded source positions are
            masked out of every attention, padded target positions only matter to the loss.

    ``forward(src (B, S), tgt_in (B, L))`` returns logits ``(B, L, tgt_vocab)``; the
    decoder's last layer keeps its cross-attention weights in ``decoder[-1].cross_weights``.
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        *,
        d_model: int = 64,
        num_heads: int = 4,
        d_ff: int = 128,
        num_layers: int = 2,
        max_len: int = 32,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        self._check_sizes(src_vocab, tgt_vocab, d_model, max_len, pad_id, num_layers=num_layers)
        self.pad_id = pad_id
        self.src_embed = _Embedding(src_vocab, d_model, max_len)
        self.tgt_embed = _Embedding(tgt_vocab, d_model, max_len)
        self.encoder = nn.ModuleList(
            TransformerBlock(d_model, num_heads, d_ff) for _ in range(num_layers)
        )
        self.decoder = nn.ModuleList(
            TransformerBlock(d_model, num_heads, d_ff, cross_attention=True)
            for _ in range(num_layers)
        )
        self.head = nn.Linear(d_model, tgt_vocab)

    def encode(self, src: Tensor) -> Tensor:
        """``(B, S)`` source tokens -> ``(B, S, d_model)`` memory."""
        self.src_embed.check("src", src)
        return self._encode(src)

    def _embed_source(self, src: Tensor) -> Tensor:
        return self.src_embed(src)

    def _embed_target(self, tgt_in: Tensor) -> Tensor:
        return self.tgt_embed(tgt_in)

    def decode(self, tgt_in: Tensor, memory: Tensor, src: Tensor) -> Tensor:
        """Decoder pass: ``(B, L)`` target tokens, the ``(B, S, d_model)`` memory of ``src``
        ``(B, S)`` -> logits ``(B, L, tgt_vocab)``."""
        self.tgt_embed.check("tgt_in", tgt_in)
        self.src_embed.check("src", src)
        require_tensor("memory", memory)
        if memory.dim() != 3 or memory.shape[:2] != src.shape or src.size(0) != tgt_in.size(0):
            raise ValueError(
                "tgt_in (B, L), memory (B, S, d_model) and src (B, S) must agree in B and S, got"
                f" tgt_in {fmt_shape(tgt_in.shape)}, memory {fmt_shape(memory.shape)} and src"
                f" {fmt_shape(src.shape)}"
            )
        return self._decode(tgt_in, memory, src)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Source ``(B, S)`` and decoder input ``(B, L)`` (teacher forcing) -> logits ``(B, L, tgt_vocab)``."""
        self.src_embed.check("src", src)
        self.tgt_embed.check("tgt_in", tgt_in)
        if src.size(0) != tgt_in.size(0):
            raise ValueError(
                "src (B, S) and tgt_in (B, L) must have the same batch size, "
                f"got src {fmt_shape(src.shape)} and tgt_in {fmt_shape(tgt_in.shape)}"
            )
        return self._decode(tgt_in, self._encode(src), src)

    @torch.no_grad()
    def greedy_decode(self, src: Tensor, bos_id: int, max_len: int) -> Tensor:
        """Translate ``src`` ``(B, S)`` greedily, one token at a time; returns ``(B, max_len)`` tokens (BOS excluded).

        Each step feeds every token so far back into the decoder (no cache: the toy
        sequences are short), so ``max_len`` is at most the model's ``max_len``. Tokens after
        an end-of-sequence token are produced too; cut them off where the task's EOS appears.
        """
        self.src_embed.check("src", src)
        require_positive_int("max_len", max_len)
        if max_len > self.tgt_embed.max_len:
            raise ValueError(
                f"max_len={max_len} is longer than the model's max_len={self.tgt_embed.max_len}"
                " (the decoder reads BOS and every token produced so far)"
            )
        bos_id = check_token_id("bos_id", bos_id, self.tgt_embed.tokens.num_embeddings)
        return self._greedy(src, bos_id, max_len)
