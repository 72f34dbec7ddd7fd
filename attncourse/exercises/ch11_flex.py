"""Chapter 11 exercises: attention variants written as FlexAttention programs (a mask_mod, a
score_mod), a prediction of a block mask's sparsity, a misaligned causal mask, and the blocks
behind a measured timing ratio.

Every program the learner writes is run twice: on index tensors that broadcast to the whole
``(B, h, L, S)`` grid (so that each wrong entry can be named), and inside FlexAttention itself
(its eager mode, which calls the program through ``vmap``), whose output must equal the
package's attention with the same mask.
"""

from __future__ import annotations

import functools
import warnings
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch.overrides import TorchFunctionMode

from ..attention import scaled_dot_product_attention
from ..flex import (
    alibi_score_mod,
    block_counts,
    causal_mask_mod,
    document_ids,
    document_mask_mod,
    flex_available,
    sliding_window_mask_mod,
    sparsity_table,
)
from ..kv_cache import sliding_window_mask
from ..masks import causal_mask
from ..positions import alibi_bias, alibi_slopes
from ._core import (
    Mistake,
    call,
    captured,
    diagnose,
    exercise,
    expect_tensor,
    integer,
    matches,
    random_tensor,
    several,
)
from ._i18n import _

try:  # torch >= 2.5: the programs also run inside FlexAttention
    from torch.nn.attention.flex_attention import (
        and_masks,
        create_block_mask,
        create_mask,
        flex_attention,
    )
except ImportError:  # an older torch: the programs are checked on the index grids only
    and_masks = create_block_mask = create_mask = flex_attention = None  # type: ignore[assignment]


def _grids(batch: int, heads: int, query_len: int, key_len: int):
    """``b, h, q_idx, kv_idx`` shaped to broadcast to ``(B, h, L, S)``."""
    return (
        torch.arange(batch).view(-1, 1, 1, 1),
        torch.arange(heads).view(1, -1, 1, 1),
        torch.arange(query_len).view(1, 1, -1, 1),
        torch.arange(key_len).view(1, 1, 1, -1),
    )


def _program(fn, args: tuple, what: str) -> Callable:
    """The learner's factory called on ``args``: it must return the program (a function)."""
    program = call(fn, *args)
    if not callable(program):
        raise Mistake(
            _(
                "{what}: your function returned {type_name}; return the program itself, the "
                "function mask_mod(b, h, q_idx, kv_idx) or score_mod(score, b, h, q_idx, kv_idx) "
                "defined inside it (or a lambda), not its result."
            ).format(what=what, type_name=type(program).__name__)
        )
    return program


def _run(program: Callable, args: tuple, what: str):
    """``program(*args)`` on the index grids, with a plain word for Python's ``and``/``if``."""
    try:
        return call(program, *args)
    except Mistake as mistake:
        if "ambiguous" in str(mistake):
            raise Mistake(
                _(
                    "{what}: your program uses Python's and / or / not (or an if) on tensors. It "
                    "runs on tensors of indices, so combine conditions with &, | and ~ (and pick "
                    "values with torch.where).\n({mistake})"
                ).format(what=what, mistake=mistake)
            ) from None
        raise


def _mask(program: Callable, shape: Tuple[int, int, int, int], what: str) -> torch.Tensor:
    """The learner's mask_mod evaluated on the whole ``(B, h, L, S)`` grid."""
    keep = _run(program, _grids(*shape), what)
    if not isinstance(keep, torch.Tensor):
        raise Mistake(
            _(
                "{what}: your mask_mod returned {type_name}; it should return a boolean tensor "
                "(True = may attend), computed from the index tensors it is given."
            ).format(what=what, type_name=type(keep).__name__)
        )
    if keep.dtype != torch.bool:
        raise Mistake(
            _(
                "{what}: your mask_mod returned dtype {dtype}; FlexAttention wants booleans "
                "(True = may attend): return a comparison, or combine comparisons with & and |."
            ).format(what=what, dtype=keep.dtype)
        )
    try:
        return keep.expand(shape)
    except RuntimeError:
        raise Mistake(
            _(
                "{what}: your mask_mod returned shape {got}, which does not broadcast to the "
                "scores {shape}: compute it elementwise from b, h, q_idx and kv_idx."
            ).format(what=what, got=tuple(keep.shape), shape=shape)
        ) from None


def _in_flex(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask_mod: Optional[Callable] = None,
    score_mod: Optional[Callable] = None,
) -> Tuple[Optional[torch.Tensor], Optional[BaseException]]:
    """FlexAttention's eager forward with the learner's programs: ``(output, None)`` or
    ``(None, the error)``. Not through :func:`call`: the programs already ran, time-limited, on
    the index grids, and FlexAttention's first call in a process spends seconds setting up
    that are not the learner's."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*flex_attention called without torch")
            block_mask = None
            if mask_mod is not None:
                block_mask = create_block_mask(  # every batch entry and head: none ignored
                    mask_mod, q.size(0), q.size(1), q.size(2), k.size(2), device="cpu"
                )
            return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask), None
    except Exception as error:  # noqa: BLE001 - reported as the learner's mistake
        return None, error


def _check_in_flex(
    what: str,
    mask: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    **programs,
) -> None:
    """The learner's programs run inside FlexAttention and give the package's output with
    ``mask`` (boolean, or added to the scores) on the same inputs (checked on one case per
    exercise: the grids check every case, this that the program runs there)."""
    if flex_attention is None:  # torch < 2.5: the grids were the whole check
        return
    expected = scaled_dot_product_attention(q, k, v, mask)[0]
    output, error = _in_flex(q.clone(), k.clone(), v.clone(), **programs)
    if error is not None:
        raise Mistake(
            _(
                "{what}: your program is right on index tensors but fails inside FlexAttention, "
                "which calls it through vmap, as if on one score at a time ({type_name}: {error}). Use "
                "tensor operations only: no .item(), no Python if on a tensor, no lists indexed "
                "with a tensor (put captured values in a tensor)."
            ).format(what=what, type_name=type(error).__name__, error=str(error).splitlines()[0])
        )
    if not matches(output, expected):
        raise Mistake(
            _(
                "{what}: inside FlexAttention your program gives another output than the "
                "package's attention with the same mask. Does it depend on the shape of the "
                "index tensors it gets?"
            ).format(what=what)
        )


def _same_for_every_head(got: torch.Tensor, what: str) -> None:
    """A mask of positions only: the same for every batch entry and head of ``got`` (B, h, L, S)."""
    if bool((got.any(dim=(0, 1)) != got.all(dim=(0, 1))).any()):
        raise Mistake(
            _(
                "{what}: your mask differs between heads or batch entries; this mask depends on "
                "the positions only."
            ).format(what=what)
        )


def _matching(what: str, got: torch.Tensor, mistakes: Dict[str, torch.Tensor], default: str) -> str:
    """``diagnose`` for boolean masks: the messages of the known mistakes ``got`` equals (else
    ``default``), after the case ``what``."""
    message = diagnose(
        got.double(),
        {message: (m.double() if m is not None else None) for message, m in mistakes.items()},
        default=default,
    )
    return _("{what}: {message}").format(what=what, message=message)


def _whole(answer, noun: str, what: str) -> int:
    """:func:`integer` of ``answer`` (``noun`` names it), its complaint after the case ``what``."""
    try:
        return integer(answer, noun)
    except Mistake as mistake:
        raise Mistake(_("{what}: {message}").format(what=what, message=mistake)) from None


# -- 1. a mask_mod: causal, within a window, within a document ---------------------------------


def _document_window_mask_solution(document, window):
    def mask_mod(b, h, q_idx, kv_idx):
        same_document = document[q_idx] == document[kv_idx]
        in_window = (kv_idx <= q_idx) & (q_idx - kv_idx < window)
        return same_document & in_window

    return mask_mod


_DOCUMENT_CASES = (
    ([3, 5, 4], 3),
    ([6, 1, 5, 4], 2),
    ([2, 7, 3], 1),
    ([4, 9], 20),
)


def _document_window_mistakes(document: torch.Tensor, window: int) -> Dict[str, torch.Tensor]:
    i = torch.arange(document.numel())[:, None]
    j = torch.arange(document.numel())[None, :]
    same = document[:, None] == document[None, :]
    past = j <= i
    near = i - j < window
    return {
        _(
            "The window is one key too wide: a window of w holds the query's own key and the "
            "w - 1 before it, so keep q_idx - kv_idx < window, not <= window."
        ): same & past & (i - j <= window),
        _(
            "The window is one key too short: q_idx - kv_idx < window keeps the query's own key "
            "and the window - 1 keys before it."
        ): same & past & (i - j < window - 1),
        _(
            "Future keys are kept: the mask must also be causal, kv_idx <= q_idx (a distance "
            "q_idx - kv_idx that is negative is the future)."
        ): same & near,
        _(
            "Your window looks both ways (an absolute distance): keep only keys at or before "
            "the query, kv_idx <= q_idx."
        ): same & ((i - j).abs() < window),
        _(
            "Your mask looks at the future, not the past: the keys allowed are those with "
            "kv_idx <= q_idx, the query's own position and earlier."
        ): same & (j >= i) & (j - i < window),
        _(
            "The documents are ignored: a query may only attend to keys of its own document, "
            "document[q_idx] == document[kv_idx]."
        ): past & near,
        _(
            "The window is ignored: within its document a query sees only the window keys up "
            "to its own."
        ): same & past,
        _(
            "The diagonal is missing: a query may attend to its own key (kv_idx <= q_idx, not <)."
        ): same & (j < i) & near,
        _(
            "The conditions are combined with | (or): every one must hold, so combine them with &."
        ): same | (past & near),
        _(
            "Your mask is inverted: it is True at the pairs to remove. A mask_mod returns True "
            "where the query may attend to the key, as the book's boolean masks do."
        ): ~(same & past & near),
    }


@exercise(
    "flex/document-window-mask",
    title="A mask_mod: causal, within a window and within a document",
    hint=(
        """
            Three conditions must all hold: same document, not in the future, inside the
            window. The indices are tensors, so combine the comparisons with an operator
            that works element by element.
        """,
        """
            Three conditions, each a comparison of index tensors: the key is in the query's document
            (document[q_idx] == document[kv_idx]), it is not in the future (kv_idx <= q_idx), and it
            is fewer than window positions back (q_idx - kv_idx < window). Combine them with &, not
            with `and`: the indices are tensors. Return the inner function, not its value.
        """,
    ),
    solution=_document_window_mask_solution,
    name="document_window_mask",
    forbids=(
        document_mask_mod,
        sliding_window_mask_mod,
        causal_mask_mod,
        # the dense masks too: the program states the conditions, it does not look them up
        sliding_window_mask,
        causal_mask,
    ),
)
def _check_document_window_mask(fn) -> str:
    for seed, (lengths, window) in enumerate(_DOCUMENT_CASES):
        document = document_ids(lengths)
        length = document.numel()
        what = _("Documents of lengths {lengths} packed in one row, window {window}").format(
            lengths=lengths, window=window
        )
        program = _program(fn, (document.clone(), window), what)
        got = _mask(program, (2, 2, length, length), what)
        expected = sliding_window_mask(length, window=window) & (
            document[:, None] == document[None, :]
        )
        if not torch.equal(got, expected.expand_as(got)):
            _same_for_every_head(got, what)
            raise Mistake(
                _matching(
                    what,
                    got[0, 0],
                    _document_window_mistakes(document, window),
                    default=_(
                        "Your mask differs from causal attention within the window and within "
                        "each document (first wrong entry: query {query}, key {key})."
                    ).format(**_first_difference(got[0, 0], expected)),
                )
            )
        if seed:
            continue
        q, k, v = (random_tensor(2, 2, length, 4, seed=seed + s) for s in (10, 20, 30))
        _check_in_flex(what, expected, q, k, v, mask_mod=program)
    return _(
        "Right: one program for the three conditions. It captures the document ids as a tensor, so "
        "one compiled kernel serves every packing of the same length; capture the window as a "
        "tensor too (as flex.sliding_window_mask_mod does) and it serves every window."
    )


def _first_difference(got: torch.Tensor, expected: torch.Tensor) -> Dict[str, int]:
    query, key = (int(x) for x in (got != expected).nonzero()[0])
    return {"query": query, "key": key}


# -- 2. a score_mod: ALiBi ---------------------------------------------------------------------


def _alibi_mod_solution(num_heads, query_len, key_len):
    slopes = torch.tensor(alibi_slopes(num_heads), dtype=torch.float64)
    offset = key_len - query_len  # the queries are the last query_len of the key_len positions

    def score_mod(score, b, h, q_idx, kv_idx):
        distance = q_idx + offset - kv_idx
        return score - (slopes[h] * distance).to(score.dtype)

    return score_mod


_ALIBI_CASES = (  # (heads, L, S, dtype of the scores)
    (4, 6, 6, torch.float64),
    (3, 4, 9, torch.float64),
    (8, 5, 5, torch.float64),
    (6, 3, 7, torch.float32),
)


def _alibi_mistakes(score, heads, query_len, key_len) -> Dict[str, Optional[torch.Tensor]]:
    slopes = torch.tensor(alibi_slopes(heads), dtype=torch.float64).view(1, -1, 1, 1)
    i = torch.arange(query_len).view(1, 1, -1, 1)
    j = torch.arange(key_len).view(1, 1, 1, -1)
    offset = key_len - query_len
    distance = (i + offset - j).double()
    top_left = (i - j).double()
    geometric = torch.exp2(-8.0 * torch.arange(1, heads + 1, dtype=torch.float64) / heads)
    power_of_two = heads & (heads - 1) == 0
    return {
        _(
            "Your slopes follow 2^(-8 (h + 1) / num_heads), ALiBi's formula for a power of two "
            "heads only; for {heads} heads the slopes are alibi_slopes({heads}) (the paper's "
            "rule for other counts)."
        ).format(heads=heads): (
            None if power_of_two else score - geometric.view(1, -1, 1, 1) * distance
        ),
        _(
            "The bias has the wrong sign: ALiBi lowers the score of distant keys, score - "
            "slope * distance."
        ): score + slopes * distance,
        _(
            "Your distance is top-left aligned (q_idx - kv_idx): here the queries are the last "
            "query_len of key_len positions, so the distance is q_idx + (key_len - query_len) - "
            "kv_idx."
        ): (score - slopes * top_left) if offset else None,
        _("The offset has the wrong sign: query i sits at position i + (key_len - query_len)."): (
            score - slopes * (i - offset - j).double()
        )
        if offset
        else None,
        _(
            "The slopes are in the wrong order: head 0 has the largest slope, "
            "alibi_slopes(num_heads)[0]."
        ): score - slopes.flip(1) * distance,
        _(
            "The slope is missing: each head h multiplies the distance by its own slope, "
            "alibi_slopes(num_heads)[h]."
        ): score - distance,
        _("The bias multiplies the score: ALiBi adds -slope * distance to the score."): score
        * (-slopes * distance),
        _("The score is dropped: return score plus the bias, not the bias alone."): -slopes
        * distance,
    }


def _alibi_case(heads: int, query_len: int, key_len: int) -> str:
    """How the ALiBi exercise's messages name a case."""
    return _("{heads} heads, {query_len} queries after {key_len} keys").format(
        heads=heads, query_len=query_len, key_len=key_len
    )


#: The shape :func:`_no_stored_table` runs the program at: (heads, queries, keys), 768 pairs,
#: more numbers than the slopes or a vector of positions a learner keeps.
_TABLE_PROBE = (4, 24, 32)


class _Indexed(TorchFunctionMode):
    """Inside the block, the tensors indexed (``t[...]``, ``index_select``, ``gather``,
    ``take``) are recorded in ``tensors``."""

    INDEXING = (
        torch.Tensor.__getitem__,
        torch.Tensor.index_select,
        torch.index_select,
        torch.Tensor.gather,
        torch.gather,
        torch.Tensor.take,
        torch.take,
    )

    def __init__(self) -> None:
        super().__init__()
        self.tensors: List[torch.Tensor] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.INDEXING and args and isinstance(args[0], torch.Tensor):
            self.tensors.append(args[0])
        return func(*args, **(kwargs or {}))


def _no_stored_table(fn) -> None:
    """A :class:`Mistake` when the program, made for :data:`_TABLE_PROBE`, reads a stored tensor
    of as many numbers as the scores, or of two dimensions and more numbers than the heads'
    slopes, or indexes one while it runs (built on its first call, cached, or rebuilt on every
    call): a bias looked up in a table, (L, S) or (h, S), rather than computed per score. A
    vector of positions is not a table of biases. A program that fails at that shape is left to
    the cases."""
    heads, query_len, key_len = _TABLE_PROBE
    what = _alibi_case(heads, query_len, key_len)
    program = _program(fn, (heads, query_len, key_len), what)
    score = torch.zeros(1, heads, query_len, key_len, dtype=torch.float64)
    tables = [t for t in captured(program) if isinstance(t, torch.Tensor)]
    indexed = _Indexed()
    try:
        with indexed, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program(score, *_grids(1, heads, query_len, key_len))
    except Exception:  # noqa: BLE001 - the program's own errors are the cases' to name
        pass
    for table in tables + indexed.tensors:
        scores_worth = table.numel() >= query_len * key_len
        if table is not score and (scores_worth or (table.dim() >= 2 and table.numel() > heads)):
            raise Mistake(
                _(
                    "{what}: your score_mod reads a tensor of shape {shape}, a table, stored or "
                    "built as it runs. Compute the bias of each "
                    "score from h, q_idx and kv_idx inside the program (only the {heads} slopes "
                    "need to be stored)."
                ).format(what=what, shape=tuple(table.shape), heads=heads)
            )


@exercise(
    "flex/alibi-score-mod",
    title="A score_mod: ALiBi",
    hint=(
        """
            ALiBi subtracts a head's slope times the distance from the query to the key.
            Prepare the slopes as a tensor before score_mod, and mind where the queries
            sit when there are more keys than queries.
        """,
        """
            Put alibi_slopes(num_heads) in a tensor before defining score_mod, so that slopes[h]
            works on index tensors. The distance of query q_idx to key kv_idx is
            q_idx + (key_len - query_len) - kv_idx (the queries are the last ones); return
            score - slopes[h] * distance, in the dtype of score.
        """,
    ),
    solution=_alibi_mod_solution,
    name="alibi_mod",
    forbids=(alibi_bias, alibi_score_mod),
)
def _check_alibi_mod(fn) -> str:
    for seed, (heads, query_len, key_len, dtype) in enumerate(_ALIBI_CASES):
        what = _alibi_case(heads, query_len, key_len)
        program = _program(fn, (heads, query_len, key_len), what)
        score = random_tensor(2, heads, query_len, key_len, seed=40 + seed).to(dtype)
        got = _run(program, (score.clone(), *_grids(2, heads, query_len, key_len)), what)
        if isinstance(got, torch.Tensor) and got.shape != score.shape:
            try:
                got = got.expand(score.shape)
            except RuntimeError:
                pass  # expect_tensor names the shape
        expect_tensor(got, score.shape, _("{what}: the modified scores").format(what=what))
        expected = score + alibi_bias(heads, query_len, key_len, dtype=dtype)
        past = causal_mask(query_len, key_len)  # what the causal mask keeps is what counts
        if not matches(got[..., past], expected[..., past]):
            raise Mistake(
                diagnose(
                    got[..., past],
                    {
                        message: (
                            wrong.expand(score.shape)[..., past] if wrong is not None else None
                        )
                        for message, wrong in _alibi_mistakes(
                            score, heads, query_len, key_len
                        ).items()
                    },
                    default=_(
                        "{what}: your scores differ from score - slope_h * distance on the keys "
                        "the causal mask keeps."
                    ).format(what=what),
                )
            )
        if seed != 1:  # the case with more keys than queries
            continue
        q, k, v = (
            random_tensor(1, heads, n, 4, seed=seed + s)
            for s, n in ((50, query_len), (60, key_len), (70, key_len))
        )
        mask = causal_mask(query_len, key_len)
        bias = alibi_bias(heads, query_len, key_len, dtype=torch.float64)
        _check_in_flex(
            what,
            bias.masked_fill(~mask, float("-inf")),
            q,
            k,
            v,
            score_mod=program,
            mask_mod=causal_mask_mod(query_len, key_len),
        )
    _no_stored_table(fn)
    return _(
        "Right: the bias is computed per score from the indices, never stored as an (H, L, S) "
        "table; the slopes are the only tensor the program captures."
    )


# -- 3. predict the blocks of a sliding window --------------------------------------------------


def _window_blocks_solution(length, window, block_size):
    full = partial = 0
    blocks = length // block_size
    for row in range(blocks):  # queries row * block_size .. (row + 1) * block_size - 1
        first_q, last_q = row * block_size, (row + 1) * block_size - 1
        for col in range(blocks):  # keys col * block_size .. (col + 1) * block_size - 1
            first_k, last_k = col * block_size, (col + 1) * block_size - 1
            nearest, farthest = first_q - last_k, last_q - first_k  # distances q - k in the block
            if nearest >= window or farthest < 0:
                continue  # no pair at a distance in [0, window): an empty block, skipped
            if nearest >= 0 and farthest < window:
                full += 1  # every pair kept: no mask_mod needed
            else:
                partial += 1
    return full, partial


_BLOCK_CASES = (  # (L, window, block): windows on and beside the blocks' edges, blocks of 1 and 2
    (2048, 256, 128),
    (1024, 100, 128),
    (512, 1, 64),
    (1024, 4096, 128),
    (768, 128, 128),
    (1024, 300, 256),
    (640, 64, 128),
    (1024, 255, 128),
    (1024, 130, 128),
    (64, 5, 1),
    (64, 7, 2),
)


def _counted(length: int, window: int, block: int, keep) -> Tuple[int, int]:
    """(full, partial) of the blocks whose distances ``[nearest, farthest]`` ``keep`` classifies."""
    full = partial = 0
    rows = length // block
    for row in range(rows):
        for col in range(rows):
            nearest = row * block - (col * block + block - 1)
            farthest = row * block + block - 1 - col * block
            verdict = keep(nearest, farthest)
            full += verdict == "full"
            partial += verdict == "partial"
    return full, partial


def _classify(lo_ok, hi_ok):
    """A block classifier from the kept distances ``lo <= d <= hi`` (as functions of the block)."""

    def keep(nearest, farthest, lo=lo_ok, hi=hi_ok):
        if farthest < lo or nearest > hi:
            return "empty"
        return "full" if nearest >= lo and farthest <= hi else "partial"

    return keep


def _block_mistakes(length: int, window: int, block: int) -> Dict[str, Tuple[int, int]]:
    full, partial = _counted(length, window, block, _classify(0, window - 1))
    kept = full + partial
    rows = length // block
    return {
        _("Your pair is (partial, full); the exercise asks for (full, partial)."): (partial, full),
        _(
            "You counted every kept block as full: a block is full only when every pair in it "
            "is kept; the diagonal blocks (future keys) and the window's edge are partial."
        ): (kept, 0),
        _(
            "You counted every kept block as partial: a block whose every query-key distance is "
            "in [0, window) is full, and FlexAttention skips the mask_mod there."
        ): (0, kept),
        _(
            "Your window is one key too wide (distances 0 .. window instead of 0 .. window - 1)."
        ): _counted(length, window, block, _classify(0, window)),
        _(
            "Your window looks both ways: keys after the query are never kept (causal), so the "
            "blocks above the diagonal are skipped."
        ): _counted(length, window, block, _classify(-(window - 1), window - 1)),
        _("You counted the skipped blocks: the question is about the blocks computed (kept)."): (
            0,
            rows * rows - kept,
        ),
        _(
            "The diagonal blocks are missing: each holds the query's own key (distance 0), so it "
            "is kept, as a partial block."
        ): (full, partial - rows),
        _(
            "You counted the diagonal blocks as full: each also holds keys after its queries (the "
            "block's upper triangle), which the mask removes, so it is partial."
        ): (full + rows, partial - rows),
    }


@exercise(
    "flex/predict-blocks",
    title="Predict the blocks of a sliding window",
    hint=(
        """
            For each pair of a query block and a key block, find the smallest and the
            largest distance between its queries and keys, and compare them with the
            window.
        """,
        """
            Loop over the pairs (query block, key block). In a block, the distances q - k run from
            nearest = first query - last key to farthest = last query - first key. The block is
            empty when no distance lies in [0, window), full when all of them do, partial otherwise.
            Keys after a block's last query are never kept, so the key blocks after the query block
            are all empty.
        """,
    ),
    solution=_window_blocks_solution,
    name="window_blocks",
    forbids=(
        create_block_mask,
        create_mask,
        block_counts,
        sparsity_table,
        sliding_window_mask,
        causal_mask,
    ),
)
def _check_window_blocks(fn) -> str:
    for length, window, block in _BLOCK_CASES:
        what = _("L = S = {length}, window {window}, blocks of {block}").format(
            length=length, window=window, block=block
        )
        got = call(fn, length, window, block)
        if getattr(got, "ndim", None) == 1 and callable(getattr(got, "tolist", None)):
            try:  # a 1-D tensor or numpy array of the two counts
                got = got.tolist()
            except Exception:  # noqa: BLE001 - a meta or sparse tensor: not a pair of counts
                pass
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Mistake(
                _("{what}: return a pair (full, partial) of block counts, got {value}.").format(
                    what=what,
                    value=(
                        (
                            _("1 value")
                            if len(got) == 1
                            else _("{count} values").format(count=len(got))
                        )
                        if isinstance(got, (tuple, list))
                        else type(got).__name__
                    ),
                )
            )
        pair = (
            _whole(got[0], _("number of full blocks"), what),
            _whole(got[1], _("number of partial blocks"), what),
        )
        expected = _counted(length, window, block, _classify(0, window - 1))
        if pair == expected:
            continue
        found = [m for m, wrong in _block_mistakes(length, window, block).items() if wrong == pair]
        if found:
            raise Mistake(_("{what}: {message}").format(what=what, message=several(found)))
        raise Mistake(
            _(
                "{what}: ({full}, {partial}) is not it. Count per block row: which key blocks hold "
                "a pair at a distance in [0, window), and which hold only such pairs?"
            ).format(what=what, full=pair[0], partial=pair[1])
        )
    return _(
        "Right: the prediction matches create_block_mask on every case; the cell below shows "
        "the reveal for the chapter's window."
    )


# -- 4. find the bug: a causal mask aligned top-left --------------------------------------------


def _fixed_causal_solution(query_len, key_len):
    offset = key_len - query_len  # the last query sits at the last key

    def mask_mod(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + offset

    return mask_mod


_CAUSAL_CASES = ((6, 6), (4, 10), (1, 9), (10, 4), (3, 3))


def _causal_mistakes(query_len: int, key_len: int) -> Dict[str, Optional[torch.Tensor]]:
    i = torch.arange(query_len)[:, None]
    j = torch.arange(key_len)[None, :]
    offset = key_len - query_len
    return {
        _(
            "This is still the given mask: q_idx >= kv_idx aligns the first query with the first "
            "key (top left). In this course the last query is aligned with the last key."
        ): j <= i,
        _(
            "Off by one on the diagonal: each query must see the key at its own position, not "
            "only the keys before it."
        ): j < i + offset,
        _(
            "Off by one the other way: your mask also keeps the key just after the query's own "
            "position, which is the future."
        ): j <= i + offset + 1,
        _(
            "The shift has the wrong sign: with more keys than queries the queries move right, "
            "by key_len - query_len; with more queries than keys they move left, by query_len - "
            "key_len."
        ): (j <= i - offset) if offset else None,
        _(
            "With more queries than keys the shift is negative: the first queries have no key "
            "at or before their position, so their rows are empty. Do not clamp the shift at 0."
        ): (j <= i) if offset < 0 else None,
        _(
            "Your mask keeps the future instead of the past: a query may see the keys at or before "
            "its own position."
        ): j >= i + offset,
    }


@exercise(
    "flex/fix-causal",
    title="Find the bug: a causal mask_mod for a decoding step",
    hint=(
        """
            Evaluate the given mask_mod for a few queries after a longer cache and compare
            it with the package's causal_mask: which keys does the last query see?
        """,
        """
            Evaluate the given mask_mod with create_mask (or on torch.arange grids) for 4 queries
            after 10 keys and compare it with causal_mask(4, 10): which keys does the last query
            see? The package aligns the last query with the last key: query i is at position
            i + (key_len - query_len).
        """,
    ),
    solution=_fixed_causal_solution,
    name="fixed_causal",
    forbids=(causal_mask_mod, causal_mask, sliding_window_mask, sliding_window_mask_mod),
)
def _check_fixed_causal(fn) -> str:
    for seed, (query_len, key_len) in enumerate(_CAUSAL_CASES):
        what = _("{query_len} queries after {key_len} keys").format(
            query_len=query_len, key_len=key_len
        )
        program = _program(fn, (query_len, key_len), what)
        grid = _mask(program, (2, 2, query_len, key_len), what)
        _same_for_every_head(grid, what)
        got = grid[0, 0]
        expected = causal_mask(query_len, key_len)
        if not torch.equal(got, expected):
            raise Mistake(
                _matching(
                    what,
                    got,
                    _causal_mistakes(query_len, key_len),
                    default=_(
                        "Your mask differs from causal_mask({query_len}, {key_len}) (first wrong "
                        "entry: query {query}, key {key})."
                    ).format(
                        query_len=query_len, key_len=key_len, **_first_difference(got, expected)
                    ),
                )
            )
        if seed != 1:  # the case with more keys than queries
            continue
        q, k, v = (
            random_tensor(2, 2, n, 4, seed=seed + s)
            for s, n in ((80, query_len), (90, key_len), (100, key_len))
        )
        _check_in_flex(what, expected, q, k, v, mask_mod=program)
    return _(
        "Right: FlexAttention's documentation writes q_idx >= kv_idx, which is this course's "
        "mask only when query_len == key_len; in a decoding step it is not."
    )


# -- 5. the blocks behind a timing ratio ---------------------------------------------------------


def _computed_blocks_solution(block_mask):
    partial = block_mask.kv_num_blocks.sum()  # (B, h, query blocks): kept blocks with masking
    full = block_mask.full_kv_num_blocks.sum()  # kept blocks without any masked pair
    return int(partial + full)


@functools.lru_cache(maxsize=1)
def _built_block_masks() -> Tuple[object, ...]:
    """The BlockMasks the checker asks about, built once per process."""
    lengths = [300, 120, 500, 64, 400, 200, 264, 200]
    spans = [1, 2, 3]

    def per_head_window(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (q_idx - kv_idx < 64 * torch.tensor(spans)[h])

    return (
        create_block_mask(causal_mask_mod(1024), None, None, 1024, 1024, device="cpu"),
        create_block_mask(
            sliding_window_mask_mod(2048, window=256), None, None, 2048, 2048, device="cpu"
        ),
        create_block_mask(
            sliding_window_mask_mod(512, window=1), None, None, 512, 512, device="cpu"
        ),
        create_block_mask(
            and_masks(causal_mask_mod(300), _padding(torch.tensor([300, 100]))),
            2,
            3,
            300,
            300,
            device="cpu",
        ),
        create_block_mask(per_head_window, None, 3, 1024, 1024, device="cpu"),
        create_block_mask(
            and_masks(causal_mask_mod(2048), document_mask_mod(document_ids(lengths))),
            None,
            None,
            2048,
            2048,
            device="cpu",
        ),
    )


def _block_masks() -> List[Tuple[str, object]]:
    """The BlockMasks the checker asks about, each with its description in the language spoken."""
    descriptions = (
        _("causal, L = S = 1024"),
        _("a sliding window of 256, L = S = 2048"),
        _("a window of 1 (the diagonal only), L = S = 512"),
        _("key padding, a batch of 2 with 3 heads, L = S = 300"),
        _("a window per head (64, 128, 192), L = S = 1024"),
        _("documents packed in one row, L = S = 2048"),
    )
    return list(zip(descriptions, _built_block_masks()))


def _padding(lengths: torch.Tensor):
    return lambda b, h, q_idx, kv_idx: kv_idx < lengths[b]


def _blocks_mistakes(block_mask) -> Dict[str, Optional[float]]:
    counts = block_counts(block_mask)
    partial = block_mask.kv_num_blocks
    return {
        _(
            "You counted the partial blocks only (kv_num_blocks): the full blocks "
            "(full_kv_num_blocks) are computed too, without the mask_mod."
        ): counts["partial"],
        _(
            "You counted the full blocks only (full_kv_num_blocks): the partial blocks "
            "(kv_num_blocks) are computed too."
        ): counts["full"],
        _("You counted the skipped blocks: the kernel computes the others."): counts["skipped"],
        _("You counted every block: the kernel computes only the kept ones."): counts["total"],
        _(
            "You counted the first batch entry and head only: sum over every batch entry and "
            "head, each runs its own blocks."
        ): (
            int(partial[0, 0].sum()) + int(block_mask.full_kv_num_blocks[0, 0].sum())
            if partial.size(0) * partial.size(1) > 1
            else None
        ),
        _(
            "You counted the capacity of kv_indices (the room for indices), not the blocks: the "
            "counts are kv_num_blocks and full_kv_num_blocks."
        ): block_mask.kv_indices.numel() + block_mask.full_kv_indices.numel(),
    }


@exercise(
    "flex/computed-blocks",
    title="Explain a timing ratio: the blocks computed",
    hint=(
        """
            A BlockMask records, for each query block, how many key blocks are partial and
            how many are full. Which of them does the kernel compute?
        """,
        """
            A BlockMask stores, for each batch entry, head and block of queries, how many key blocks
            are partial (kv_num_blocks) and how many are full (full_kv_num_blocks). The kernel
            computes both kinds and skips the rest. Sum both counts over everything.
        """,
    ),
    solution=_computed_blocks_solution,
    name="computed_blocks",
    forbids=(block_counts,),
)
def _check_computed_blocks(fn) -> str:
    available, why = flex_available()
    if not available:
        raise Mistake(why)
    for what, block_mask in _block_masks():
        answer = call(fn, block_mask)
        value = _whole(answer, _("number of blocks"), what)
        expected = block_counts(block_mask)["kept"]
        if value == expected:
            continue
        found = [
            message
            for message, wrong in _blocks_mistakes(block_mask).items()
            if wrong is not None and value == wrong
        ]
        if found:
            raise Mistake(_("{what}: {message}").format(what=what, message=several(found)))
        raise Mistake(
            _(
                "{what}: {value} is not the number of blocks computed. Which fields of the "
                "BlockMask count the kept blocks?"
            ).format(what=what, value=value)
        )
    return _(
        "Right: these are the blocks the kernel computes, once for every head of the input when "
        "the mask was built with H=None. On this chapter's CPU the time roughly followed them; on "
        "the GPU report it fell far less than the blocks."
    )
