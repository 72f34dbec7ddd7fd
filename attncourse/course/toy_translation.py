"""A toy translation task whose true alignment is known: number words to digits (chapter 4).

The source language writes numbers from 1 to 9999 in English words, but in the order of
German (and of old English, "four and twenty blackbirds"): the units come *before* the
tens, joined by "and"::

    "three thousand two hundred one and forty"   ->   3 2 4 1

(German says "dreitausendzweihunderteinundvierzig", the same order. The toy language
also says "three and ten" for 13, where German says "dreizehn", so that every number
from 11 to 99 follows one rule.)

Every digit of the numbers drawn here is non-zero, so every target digit comes from
exactly one source word, and the source position of each digit (its *alignment*) is
known. Reading the tens and the units needs a reordering: the target's third digit comes
from the source's last word, its fourth from the word before "and".

:class:`TranslationData` holds padded token tensors and the true alignment; the model is
:class:`AttentionTranslator`, an encoder-decoder made of nothing but what chapters 1-4 teach
(embeddings, multi-head self-attention with padding and causal masks, cross-attention) plus
learned position vectors and residual connections; it is trained by :func:`train_translator`
with :func:`attncourse.training.train`; :func:`alignment_accuracy` scores its
cross-attention against the true alignment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from .._checks import (
    TOKEN_DTYPES,
    _is_int,
    check_seed,
    check_token_id,
    fmt_shape,
    require_floating,
    require_input_like,
    require_module,
    require_positive_int,
    require_positive_number,
    require_rank,
    require_tensor,
    require_token_ids,
)
from ..multihead import MultiHeadAttention
from ..training import train
from ..transformer import EncoderDecoder
from .text import _check_fraction, _seeded

__all__ = [
    "UNITS",
    "TENS",
    "SRC_VOCAB",
    "TGT_VOCAB",
    "PAD",
    "BOS",
    "EOS",
    "MAX_SRC_LEN",
    "MAX_TGT_LEN",
    "number_to_words",
    "all_numbers",
    "split_numbers",
    "TranslationData",
    "make_data",
    "AttentionTranslator",
    "translation_loss",
    "train_translator",
    "cross_attention",
    "alignment_accuracy",
    "translate",
]

UNITS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
TENS = ["ten", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]

PAD, BOS, EOS = 0, 1, 2
SRC_VOCAB: List[str] = ["<pad>", "<bos>", "<eos>", *UNITS, *TENS, "hundred", "thousand", "and"]
TGT_VOCAB: List[str] = ["<pad>", "<bos>", "<eos>", *"123456789"]
MAX_SRC_LEN = 7  # "d thousand d hundred u and T"
MAX_TGT_LEN = 5  # four digits and <eos>

_SRC_ID = {word: i for i, word in enumerate(SRC_VOCAB)}


def number_to_words(n: int) -> Tuple[List[str], List[int]]:
    """The source sentence of ``n`` and the source position of each of its digits.

    Args:
        n: an integer in ``[1, 9999]`` with no zero digit.

    Returns:
        ``(words, alignment)``: ``alignment[i]`` is the index in ``words`` of the word that
        says the ``i``-th digit of ``n`` (most significant first).

    >>> number_to_words(241)
    (['two', 'hundred', 'one', 'and', 'forty'], [0, 4, 2])
    """
    if not _is_int(n):
        raise TypeError(f"n must be an integer in [1, 9999], got {type(n).__name__} {n!r}")
    if not 1 <= n <= 9999:
        raise ValueError(f"n must be an integer in [1, 9999], got {n!r}")
    n = int(n)
    digits = [int(c) for c in str(n)]
    if 0 in digits:
        raise ValueError(
            f"n must have no zero digit (a zero is not said, so it has no source word), got {n}"
        )
    words: List[str] = []
    alignment: List[int] = [0] * len(digits)
    scales = {4: "thousand", 3: "hundred"}
    for i, d in enumerate(digits[:-2]):  # thousands and hundreds: "d thousand", "d hundred"
        alignment[i] = len(words)
        words += [UNITS[d - 1], scales[len(digits) - i]]
    if len(digits) >= 2:  # units before tens: "u and T"
        alignment[-1] = len(words)
        alignment[-2] = len(words) + 2
        words += [UNITS[digits[-1] - 1], "and", TENS[digits[-2] - 1]]
    else:
        alignment[0] = len(words)
        words.append(UNITS[digits[0] - 1])
    return words, alignment


def all_numbers() -> List[int]:
    """The 7380 numbers in ``[1, 9999]`` without a zero digit."""
    return [n for n in range(1, 10000) if "0" not in str(n)]


def split_numbers(test_fraction: float = 0.2, *, seed: int = 0) -> Tuple[List[int], List[int]]:
    """Shuffle :func:`all_numbers` with ``seed`` and split it into ``(train, test)``, both non-empty."""
    fraction, seed = _check_fraction("test_fraction", test_fraction), check_seed("seed", seed)
    numbers = all_numbers()
    n_test = round(fraction * len(numbers))
    if not 0 < n_test < len(numbers):
        raise ValueError(
            f"test_fraction={test_fraction!r} leaves an empty part: {n_test} of the"
            f" {len(numbers)} numbers for the test"
        )
    order = torch.randperm(len(numbers), generator=torch.Generator().manual_seed(seed)).tolist()
    test = [numbers[i] for i in order[:n_test]]
    train_ = [numbers[i] for i in order[n_test:]]
    return train_, test


@dataclass
class TranslationData:
    """A padded batch of translation pairs (``N`` sentences).

    Attributes:
        numbers: the ``N`` numbers.
        src: ``(N, MAX_SRC_LEN)`` source word ids, padded with ``PAD``.
        tgt_in: ``(N, MAX_TGT_LEN)`` decoder input: ``BOS`` then the digits, padded.
        tgt_out: ``(N, MAX_TGT_LEN)`` what each decoder position must predict: the digits,
            ``EOS``, then ``PAD`` (ignored by the loss).
        alignment: ``(N, MAX_TGT_LEN)`` the source position of ``tgt_out``'s digit at each
            decoder position, ``-1`` where ``tgt_out`` is ``EOS`` or ``PAD`` (no source word).
    """

    numbers: List[int]
    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    alignment: Tensor

    def __len__(self) -> int:
        return len(self.numbers)

    def __getitem__(self, index: Union[int, slice, Sequence[int], Tensor]) -> "TranslationData":
        """Select rows with an int, a slice, or row numbers (a list, a numpy array or a 1-D integer
        tensor), or a 1-D bool tensor of length ``N``."""
        if _is_int(index):
            index = int(index)
        elif not isinstance(index, slice):
            index = _row_index(index)
        picked = torch.arange(len(self))[index].tolist()
        if isinstance(picked, int):
            picked = [picked]
        rows = torch.tensor(picked, dtype=torch.long)
        return TranslationData(
            [self.numbers[i] for i in picked],
            self.src[rows],
            self.tgt_in[rows],
            self.tgt_out[rows],
            self.alignment[rows],
        )

    def to(self, device: Union[torch.device, str, int]) -> "TranslationData":
        """The same batch with its tensors on ``device`` (their dtypes are kept)."""
        if not (isinstance(device, (torch.device, str)) or _is_int(device)):
            raise TypeError(
                "device must be a torch.device, a str such as 'cuda' or a device index, got"
                f" {type(device).__name__} {device!r}"
            )
        device = int(device) if _is_int(device) else device
        return TranslationData(
            self.numbers,
            self.src.to(device),
            self.tgt_in.to(device),
            self.tgt_out.to(device),
            self.alignment.to(device),
        )

    def source_words(self, i: int) -> List[str]:
        """The words of sentence ``i``, without padding."""
        return [SRC_VOCAB[t] for t in self.src[_sentence(i)].tolist() if t != PAD]

    def target_tokens(self, i: int) -> List[str]:
        """The tokens sentence ``i``'s decoder must predict (digits and ``<eos>``), without padding."""
        return [TGT_VOCAB[t] for t in self.tgt_out[_sentence(i)].tolist() if t != PAD]


def _row_index(index: object) -> Tensor:
    """``index`` as a 0-d or 1-D integer or bool tensor (a list or numpy array of rows is converted)."""
    try:
        rows = index if isinstance(index, Tensor) else torch.as_tensor(index)
    except (TypeError, ValueError, RuntimeError):
        rows = None
    if rows is None or rows.dtype not in (*TOKEN_DTYPES, torch.bool):
        raise TypeError(
            "index must be an int, a slice, or a 1-D sequence or tensor of integer rows (or of"
            f" bools), got {type(index).__name__} {index!r}"
        )
    if rows.dim() > 1:
        raise ValueError(
            f"index must be a row or a 1-D list of rows, got shape {fmt_shape(rows.shape)}"
        )
    return rows


def _sentence(i: object) -> int:
    if not _is_int(i):
        raise TypeError(f"i must be an int (the index of a sentence), got {type(i).__name__} {i!r}")
    return int(i)  # type: ignore[call-overload]


def _require_data(name: str, data: object) -> None:
    if not isinstance(data, TranslationData):
        raise TypeError(
            f"{name} must be a TranslationData (from make_data), got {type(data).__name__}"
        )


def make_data(numbers: Sequence[int]) -> TranslationData:
    """Tokenise ``numbers`` (each as for :func:`number_to_words`; a list, a numpy array or a 1-D
    tensor of integers) into a :class:`TranslationData`."""
    if isinstance(numbers, Tensor):
        numbers = numbers.tolist()
    if isinstance(numbers, (str, bytes)) or not isinstance(numbers, Iterable):
        raise TypeError(
            f"numbers must be a sequence of integers in [1, 9999], got {type(numbers).__name__}"
            f" {numbers!r}"
        )
    numbers = list(numbers)
    if not numbers:
        raise ValueError("numbers is empty")
    n = len(numbers)
    src = torch.full((n, MAX_SRC_LEN), PAD, dtype=torch.long)
    tgt_in = torch.full((n, MAX_TGT_LEN), PAD, dtype=torch.long)
    tgt_out = torch.full((n, MAX_TGT_LEN), PAD, dtype=torch.long)
    alignment = torch.full((n, MAX_TGT_LEN), -1, dtype=torch.long)
    for row, number in enumerate(numbers):
        try:
            words, align = number_to_words(number)
        except (TypeError, ValueError) as err:
            raise type(err)(f"numbers[{row}] = {number!r}: {err}") from None
        numbers[row] = number = int(number)
        digits = [TGT_VOCAB.index(c) for c in str(number)]
        src[row, : len(words)] = torch.tensor([_SRC_ID[w] for w in words])
        tgt_in[row, : len(digits) + 1] = torch.tensor([BOS, *digits])
        tgt_out[row, : len(digits) + 1] = torch.tensor([*digits, EOS])
        alignment[row, : len(digits)] = torch.tensor(align)
    return TranslationData(numbers, src, tgt_in, tgt_out, alignment)


class _AttentionLayer(nn.Module):
    """Self-attention, then (in the decoder) cross-attention, each added to its input."""

    def __init__(self, d_model: int, num_heads: int, cross_attention: bool) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.cross_attn = MultiHeadAttention(d_model, num_heads) if cross_attention else None
        self.ffn = None  # no feed-forward sublayer: chapter 5 adds it
        self.self_weights: Optional[Tensor] = None
        self.cross_weights: Optional[Tensor] = None

    def forward(
        self,
        x: Tensor,
        mask: Tensor,
        memory: Optional[Tensor] = None,
        memory_mask: Optional[Tensor] = None,
    ) -> Tensor:
        """``x`` ``(B, L, d)``, ``memory`` ``(B, S, d)`` -> ``(B, L, d)``."""
        attended, weights = self.self_attn(x, x, x, mask)
        self.self_weights = weights.detach()
        x = x + attended  # residual: each position keeps its own vector and adds what it gathered
        if self.cross_attn is not None:
            attended, weights = self.cross_attn(x, memory, memory, memory_mask)
            self.cross_weights = weights.detach()
            x = x + attended
        return x


class AttentionTranslator(EncoderDecoder):
    """An encoder-decoder built from attention alone (chapter 4).

    Each token gets a trained vector (``nn.Embedding``) plus a trained vector for its position
    (attention itself does not see the order; chapter 5 compares the ways to add it). The
    encoder's layers are padding-masked self-attention; the decoder's are causal
    self-attention, then cross-attention to the encoder's output with the source's padding
    masked as keys. Each attention output is added to its input (a residual connection). No
    feed-forward sublayer and no LayerNorm: chapter 5 adds them. The check of the sizes and the
    passes through the layers are :class:`attncourse.transformer.EncoderDecoder`'s, as are
    :class:`attncourse.transformer.Seq2SeqTransformer`'s; the layers and the embeddings are this
    model's own.

    Args:
        src_vocab, tgt_vocab: vocabulary sizes.
        d_model, num_heads: width and heads of every attention layer.
        num_encoder_layers, num_decoder_layers: the depth of each side (the encoder may have 0).
        max_len: longest source or target sequence.
        pad_id: the padding token id of both vocabularies.

    ``forward(src (B, S), tgt_in (B, L))`` returns logits ``(B, L, tgt_vocab)``; every decoder
    layer keeps its last cross-attention weights ``(B, num_heads, L, S)`` in ``cross_weights``.
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        *,
        d_model: int = 32,
        num_heads: int = 2,
        num_encoder_layers: int = 1,
        num_decoder_layers: int = 2,
        max_len: int = 8,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        self._check_sizes(
            src_vocab,
            tgt_vocab,
            d_model,
            max_len,
            pad_id,
            num_decoder_layers=num_decoder_layers,
            num_encoder_layers=num_encoder_layers,
        )
        self.pad_id, self.max_len = int(pad_id), int(max_len)
        self.src_tokens, self.tgt_tokens = (
            nn.Embedding(src_vocab, d_model),
            nn.Embedding(tgt_vocab, d_model),
        )
        self.src_positions, self.tgt_positions = (
            nn.Embedding(max_len, d_model),
            nn.Embedding(max_len, d_model),
        )
        self.encoder = nn.ModuleList(
            _AttentionLayer(d_model, num_heads, False) for _ in range(num_encoder_layers)
        )
        self.decoder = nn.ModuleList(
            _AttentionLayer(d_model, num_heads, True) for _ in range(num_decoder_layers)
        )
        self.head = nn.Linear(d_model, tgt_vocab)

    def _embed(
        self, tokens: Tensor, table: nn.Embedding, positions: nn.Embedding, name: str
    ) -> Tensor:
        require_tensor(name, tokens)
        require_rank(name, tokens, 2, "(B, L)")
        require_token_ids(name, tokens, table.num_embeddings)
        if tokens.size(1) > self.max_len:
            raise ValueError(
                f"{name} must have a length <= max_len={self.max_len}, got shape"
                f" {fmt_shape(tokens.shape)}"
            )
        return table(tokens.long()) + positions(torch.arange(tokens.size(1), device=tokens.device))

    def _embed_source(self, src: Tensor) -> Tensor:
        return self._embed(src, self.src_tokens, self.src_positions, "src")

    def _embed_target(self, tgt_in: Tensor) -> Tensor:
        return self._embed(tgt_in, self.tgt_tokens, self.tgt_positions, "tgt_in")

    def encode(self, src: Tensor) -> Tensor:
        """``(B, S)`` source tokens -> ``(B, S, d_model)`` memory."""
        # _embed_source checks src
        return self._encode(src)

    def decode(self, tgt_in: Tensor, memory: Tensor, src: Tensor) -> Tensor:
        """``(B, L)`` target tokens and the memory ``(B, S, d_model)`` of ``src`` ``(B, S)`` -> logits
        ``(B, L, tgt_vocab)``."""
        require_tensor("src", src)
        require_rank("src", src, 2, "(B, S)")
        require_token_ids("src", src, self.src_tokens.num_embeddings)
        require_floating("memory", memory)
        require_input_like("memory", memory, self.head.weight, "model")
        require_rank("memory", memory, 3, "(B, S, d_model)")
        d_model = self.head.in_features
        if memory.shape != (*src.shape, d_model):
            raise ValueError(
                f"memory must have shape (B, S, d_model) = {fmt_shape((*src.shape, d_model))} for"
                f" src {fmt_shape(src.shape)}, got {fmt_shape(memory.shape)}"
            )
        require_tensor("tgt_in", tgt_in)
        require_rank("tgt_in", tgt_in, 2, "(B, L)")
        if tgt_in.size(0) != src.size(0):
            raise ValueError(
                f"tgt_in (B, L) and src (B, S) must have the same batch size, got tgt_in"
                f" {fmt_shape(tgt_in.shape)} and src {fmt_shape(src.shape)}"
            )
        return self._decode(tgt_in, memory, src)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Source ``(B, S)`` and decoder input ``(B, L)`` (teacher forcing) -> logits ``(B, L, tgt_vocab)``."""
        require_tensor("src", src)
        require_tensor("tgt_in", tgt_in)
        if src.dim() != 2 or tgt_in.dim() != 2 or src.size(0) != tgt_in.size(0):
            raise ValueError(
                "src (B, S) and tgt_in (B, L) must be 2-D with the same batch size, "
                f"got src {fmt_shape(src.shape)} and tgt_in {fmt_shape(tgt_in.shape)}"
            )
        return self._decode(tgt_in, self.encode(src), src)

    @torch.no_grad()
    def greedy_decode(self, src: Tensor, bos_id: int, max_len: int) -> Tensor:
        """Translate ``src`` ``(B, S)`` greedily; returns ``(B, max_len)`` tokens (BOS excluded).

        Each step feeds every token so far back into the decoder. Tokens after an
        end-of-sequence token are produced too; cut them off where the task's EOS appears.
        ``max_len`` is at most the model's ``max_len`` (the longest target it has positions for).
        """
        require_positive_int("max_len", max_len)
        if max_len > self.max_len:
            raise ValueError(
                f"max_len={max_len} tokens cannot be generated: the model has positions for"
                f" max_len={self.max_len} target tokens"
            )
        bos_id = check_token_id("bos_id", bos_id, self.tgt_tokens.num_embeddings)
        # _embed_source checks src
        return self._greedy(src, bos_id, max_len)


def translation_loss(model: nn.Module, batch: TranslationData) -> Tensor:
    """Mean cross-entropy of the decoder's predictions of ``batch.tgt_out``, padding ignored.

    ``model(batch.src, batch.tgt_in)`` must return floating logits ``(B, L, V)``; a batch whose
    targets are all padding has nothing to score (a ``ValueError``, not a NaN loss).
    """
    require_module("model", model)
    _require_data("batch", batch)
    logits = model(batch.src, batch.tgt_in)  # (B, L, V)
    name = "model(batch.src, batch.tgt_in)"
    require_floating(name, logits)
    if logits.dim() != 3 or logits.shape[:2] != batch.tgt_out.shape:
        raise ValueError(
            f"{name} must return logits (B, L, V) with (B, L) = {fmt_shape(batch.tgt_out.shape)}"
            f" (batch.tgt_out's shape), got {fmt_shape(logits.shape)}"
        )
    require_token_ids("batch.tgt_out", batch.tgt_out, logits.size(-1))
    if not bool((batch.tgt_out != PAD).any()):
        raise ValueError(
            f"batch.tgt_out holds only padding (PAD={PAD}): no target to score, the mean loss"
            " would be NaN"
        )
    return nn.functional.cross_entropy(
        logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD
    )


def train_translator(
    data: TranslationData,
    *,
    steps: int = 400,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    progress: bool = True,
    **model_kwargs,
) -> Tuple[AttentionTranslator, List[float]]:
    """Train an :class:`AttentionTranslator` on ``data``.

    Everything is seeded by ``seed``: the initial weights and the batches (drawn uniformly
    with replacement). ``model_kwargs`` go to the model; its defaults (``d_model=32``,
    ``num_heads=2``, 1 encoder and 2 decoder layers) learn the task in 400 steps, a few
    seconds of CPU.

    The initial weights come from torch's global CPU generator seeded with ``seed`` inside
    ``torch.random.fork_rng``: the caller's own random stream is left as it was.

    Returns:
        ``(model, losses)``: the trained model in ``eval()`` mode and the loss of each step.
    """
    _require_data("data", data)
    require_positive_int("steps", steps)
    require_positive_int("batch_size", batch_size)
    require_positive_number("lr", lr)
    seed = check_seed("seed", seed)
    model_kwargs.setdefault("max_len", max(MAX_SRC_LEN, MAX_TGT_LEN))
    longest = max(data.src.size(1), data.tgt_in.size(1))
    if _is_int(model_kwargs["max_len"]) and model_kwargs["max_len"] < longest:
        raise ValueError(
            f"max_len={model_kwargs['max_len']} is too short for data: its src"
            f" {fmt_shape(data.src.shape)} and tgt_in {fmt_shape(data.tgt_in.shape)} need"
            f" max_len >= {longest}"
        )
    with _seeded(seed):
        return _train_translator(data, steps, int(batch_size), lr, seed, progress, model_kwargs)


def _train_translator(
    data: TranslationData,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    progress: bool,
    model_kwargs: dict,
) -> Tuple[AttentionTranslator, List[float]]:
    model = AttentionTranslator(len(SRC_VOCAB), len(TGT_VOCAB), pad_id=PAD, **model_kwargs)
    model.to(data.src.device)
    generator = torch.Generator().manual_seed(seed)

    def get_batch(step: int) -> TranslationData:
        rows = torch.randint(len(data), (batch_size,), generator=generator)
        return data[rows]

    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = train(
        model,
        get_batch,
        translation_loss,
        steps=steps,
        optimizer=optimizer,
        progress=progress,
        desc="translation",
    )
    return model, losses


@torch.no_grad()
def cross_attention(model: AttentionTranslator, data: TranslationData) -> Tensor:
    """Cross-attention weights of every decoder layer on ``data`` (teacher forcing).

    Returns:
        ``(num_layers, N, num_heads, MAX_TGT_LEN, MAX_SRC_LEN)``: entry ``[l, n, h, i, j]``
        is how much decoder position ``i`` (which predicts ``data.tgt_out[n, i]``) of layer
        ``l``, head ``h``, attends to source word ``j``.
    """
    if not isinstance(model, AttentionTranslator):
        raise TypeError(f"model must be an AttentionTranslator, got {type(model).__name__}")
    _require_data("data", data)
    model(data.src, data.tgt_in)
    return torch.stack([block.cross_weights for block in model.decoder])


def alignment_accuracy(weights: Tensor, alignment: Tensor) -> float:
    """Fraction of aligned target tokens whose most attended source word is the true one.

    Args:
        weights: ``(N, L, S)`` cross-attention weights (one layer; average the heads, or
            pick one, before calling).
        alignment: ``(N, L)`` true source positions, ``-1`` for tokens without one (these
            are not counted).
    """
    require_floating("weights", weights)
    require_tensor("alignment", alignment)
    require_rank("weights", weights, 3, "(N, L, S)")
    if alignment.shape != weights.shape[:2]:
        raise ValueError(
            f"alignment must have shape (N, L) = {fmt_shape(weights.shape[:2])}, got"
            f" {fmt_shape(alignment.shape)}"
        )
    if alignment.is_floating_point() or alignment.is_complex() or alignment.dtype == torch.bool:
        raise TypeError(
            f"alignment must be an integer tensor of source positions, got dtype {alignment.dtype}"
        )
    if weights.device != alignment.device:
        raise ValueError(
            f"weights and alignment must be on the same device, got {weights.device} and"
            f" {alignment.device}"
        )
    if alignment.numel() and int(alignment.min()) < -1:
        raise ValueError(
            "alignment must hold source positions >= 0, or -1 for a token without one, got"
            f" {int(alignment.min())}"
        )
    if not bool(torch.isfinite(weights).all()):
        raise ValueError(
            f"weights must be finite, got a NaN or an infinity (shape {fmt_shape(weights.shape)})"
        )
    counted = alignment >= 0
    if not bool(counted.any()):
        raise ValueError("alignment has no entry >= 0: nothing to score")
    if int(alignment.max()) >= weights.size(-1):
        raise ValueError(
            f"alignment holds source position {int(alignment.max())}, but weights has only"
            f" S={weights.size(-1)} source positions (weights shape {fmt_shape(weights.shape)})"
        )
    hits = (weights.argmax(dim=-1) == alignment) & counted
    return hits.sum().item() / counted.sum().item()


def translate(model: AttentionTranslator, data: TranslationData) -> List[str]:
    """Greedy translations of ``data``'s sources, as digit strings (cut at the first ``<eos>``).

    The model's target vocabulary must be ``TGT_VOCAB``.
    """
    require_module("model", model)
    _require_data("data", data)
    if isinstance(model, AttentionTranslator) and model.tgt_tokens.num_embeddings != len(TGT_VOCAB):
        raise ValueError(
            f"model's target vocabulary must be TGT_VOCAB ({len(TGT_VOCAB)} ids), got"
            f" tgt_vocab={model.tgt_tokens.num_embeddings}"
        )
    tokens = model.greedy_decode(data.src, BOS, MAX_TGT_LEN)
    require_token_ids("model.greedy_decode(data.src, BOS, MAX_TGT_LEN)", tokens, len(TGT_VOCAB))
    out = []
    for row in tokens.tolist():
        text = ""
        for t in row:
            if t == EOS:
                break
            text += TGT_VOCAB[t] if t > EOS else "?"
        out.append(text)
    return out
