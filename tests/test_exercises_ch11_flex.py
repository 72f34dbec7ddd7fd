"""Chapter 11 checkers accept right programs written in several styles and reject realistic wrong
ones with the right diagnosis (in English, and in Chinese through tests/conftest.py)."""

import math
import re

import numpy as np
import pytest
import torch
from exercise_helpers import assert_fails, assert_passes, stub

from attncourse import flex
from attncourse.exercises import check, solution
from attncourse.exercises._core import NOT_ATTEMPTED, _get
from attncourse.exercises.ch11_flex import _BLOCK_CASES, _classify, _counted
from attncourse.kv_cache import sliding_window_mask
from attncourse.masks import causal_mask
from attncourse.positions import alibi_bias, alibi_slopes

available, why = flex.flex_available()
pytestmark = pytest.mark.skipif(not available, reason=why)
if available:
    from torch.nn.attention.flex_attention import and_masks, create_block_mask

IDS = [
    "flex/document-window-mask",
    "flex/alibi-score-mod",
    "flex/predict-blocks",
    "flex/fix-causal",
    "flex/computed-blocks",
]


@pytest.mark.parametrize("exercise_id", IDS)
def test_reference_passes_and_stub_is_not_attempted(exercise_id):
    namespace = {"torch": torch, "math": math, "alibi_slopes": alibi_slopes}
    exec(solution(exercise_id).text, namespace)
    fn = next(
        v
        for k, v in namespace.items()
        if callable(v) and k not in ("torch", "math", "alibi_slopes") and not k.startswith("__")
    )
    assert check(exercise_id, fn).passed, check(exercise_id, fn)
    assert check(exercise_id, stub).status == NOT_ATTEMPTED
    assert _get(exercise_id).hint


# -- 1. causal, window, document ---------------------------------------------------------------------


def _with_and_masks(document, window):
    def same(b, h, q, k):
        return document[q] == document[k]

    def causal(b, h, q, k):
        return k <= q

    def near(b, h, q, k):
        return q - k < window

    return and_masks(same, causal, near)


def _with_negations(document, window):
    return lambda b, h, q, k: ~((k > q) | (q - k >= window) | (document[q] != document[k]))


def _with_where(document, window):
    def mask_mod(b, h, q_idx, kv_idx):
        distance = q_idx - kv_idx
        ok = torch.where(
            distance >= 0, distance < window, torch.zeros_like(distance, dtype=torch.bool)
        )
        return ok & (document[q_idx] == document[kv_idx])

    return mask_mod


def _with_a_table(document, window):
    """A program may index a table it captures: here the whole mask, computed once."""
    n = document.numel()
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    table = (j <= i) & (i - j < window) & (document[:, None] == document[None, :])
    return lambda b, h, q_idx, kv_idx: table[q_idx, kv_idx]


@pytest.mark.parametrize("answer", [_with_and_masks, _with_negations, _with_where, _with_a_table])
def test_document_window_accepts_programs_in_several_styles(answer):
    assert_passes("flex/document-window-mask", answer)


def _window(op):
    def factory(document, window):
        def mask_mod(b, h, q, k):
            same = document[q] == document[k]
            return op(same, q, k, window)

        return mask_mod

    return factory


def _first_batch_entry_only(document, window):
    def mask_mod(b, h, q, k):
        return (document[q] == document[k]) & (k <= q) & (q - k < window) & (b == 0)

    return mask_mod


DOCUMENT_MISTAKES = {
    # a mask of positions only: the same for every batch entry and head
    "differs between heads or batch entries": _first_batch_entry_only,
    "one key too wide": _window(lambda s, q, k, w: s & (k <= q) & (q - k <= w)),
    "one key too short": _window(lambda s, q, k, w: s & (k <= q) & (q - k < w - 1)),
    "Future keys are kept": _window(lambda s, q, k, w: s & (q - k < w)),
    "looks both ways": _window(lambda s, q, k, w: s & ((q - k).abs() < w)),
    "looks at the future": _window(lambda s, q, k, w: s & (k >= q) & (k - q < w)),
    "documents are ignored": _window(lambda s, q, k, w: (k <= q) & (q - k < w)),
    "window is ignored": _window(lambda s, q, k, w: s & (k <= q)),
    "diagonal is missing": _window(lambda s, q, k, w: s & (k < q) & (q - k < w)),
    "combined with |": _window(lambda s, q, k, w: s | ((k <= q) & (q - k < w))),
    "mask is inverted": _window(lambda s, q, k, w: ~(s & (k <= q) & (q - k < w))),
}


@pytest.mark.parametrize("words, answer", DOCUMENT_MISTAKES.items(), ids=list(DOCUMENT_MISTAKES))
def test_document_window_names_the_mistake(words, answer):
    assert_fails("flex/document-window-mask", answer, words)


def test_document_window_explains_python_and_and_a_value_for_a_program():
    def python_and(document, window):
        return lambda b, h, q, k: (k <= q) and (q - k < window)

    assert_fails("flex/document-window-mask", python_and, "&, | and ~")
    dense = lambda document, window: torch.ones(3, 3, dtype=torch.bool)  # noqa: E731
    assert_fails("flex/document-window-mask", dense, "return the program itself")
    ints = lambda document, window: lambda b, h, q, k: (k <= q).int()  # noqa: E731
    assert_fails("flex/document-window-mask", ints, "booleans")


def test_document_window_refuses_the_package_programs():
    def composed(document, window):
        return and_masks(
            flex.sliding_window_mask_mod(document.numel(), window=window),
            flex.document_mask_mod(document),
        )

    assert_fails("flex/document-window-mask", composed, "asks you to write yourself")

    def dense(document, window):  # the package's dense masks, looked up
        table = sliding_window_mask(document.numel(), window=window)
        table = table & (document[:, None] == document[None, :])
        return lambda b, h, q, k: table[q, k]

    assert_fails(
        "flex/document-window-mask", dense, "calls attncourse.kv_cache.sliding_window_mask"
    )


def test_a_program_that_fails_only_inside_flex_attention_is_told_so():
    reference = _get("flex/document-window-mask").reference

    def grids_only(document, window):
        inner = reference(document, window)

        def mask_mod(b, h, q, k):
            if q.dim() == 0:  # FlexAttention calls it through vmap
                raise ValueError("no scalar please")
            return inner(b, h, q, k)

        return mask_mod

    assert_fails("flex/document-window-mask", grids_only, "inside FlexAttention")


# -- 2. ALiBi ---------------------------------------------------------------------------------------


def _alibi_float32_slopes(num_heads, query_len, key_len):
    slopes = torch.tensor(alibi_slopes(num_heads))
    return lambda s, b, h, q, k: s - (slopes[h] * (q + key_len - query_len - k)).to(s.dtype)


def _alibi_where(num_heads, query_len, key_len):
    slopes = torch.as_tensor(alibi_slopes(num_heads), dtype=torch.float64)

    def score_mod(score, b, h, q_idx, kv_idx):
        distance = (q_idx - kv_idx + (key_len - query_len)).to(score.dtype)
        return torch.where(
            distance >= 0,
            score - slopes[h].to(score.dtype) * distance,
            score + slopes[h].to(score.dtype) * -distance,
        )

    return score_mod


@pytest.mark.parametrize("answer", [_alibi_float32_slopes, _alibi_where])
def test_alibi_accepts_programs_in_several_styles(answer):
    assert_passes("flex/alibi-score-mod", answer)


def _alibi(bias_of):
    def factory(num_heads, query_len, key_len):
        slopes = torch.tensor(alibi_slopes(num_heads), dtype=torch.float64)

        def score_mod(score, b, h, q, k):
            return bias_of(score, slopes, num_heads, h, q, k, key_len - query_len).to(score.dtype)

        return score_mod

    return factory


ALIBI_MISTAKES = {
    "wrong sign": _alibi(lambda s, m, n, h, q, k, o: s + m[h] * (q + o - k)),
    "top-left aligned": _alibi(lambda s, m, n, h, q, k, o: s - m[h] * (q - k)),
    "offset has the wrong sign": _alibi(lambda s, m, n, h, q, k, o: s - m[h] * (q - o - k)),
    "wrong order": _alibi(lambda s, m, n, h, q, k, o: s - m.flip(0)[h] * (q + o - k)),
    "slope is missing": _alibi(lambda s, m, n, h, q, k, o: s - (q + o - k)),
    "multiplies the score": _alibi(lambda s, m, n, h, q, k, o: s * (-m[h] * (q + o - k))),
    "score is dropped": _alibi(lambda s, m, n, h, q, k, o: -m[h] * (q + o - k) + 0 * s),
    "power of two heads only": _alibi(
        lambda s, m, n, h, q, k, o: s - torch.exp2(-8.0 * (h + 1) / n) * (q + o - k)
    ),
}


@pytest.mark.parametrize("words, answer", ALIBI_MISTAKES.items(), ids=list(ALIBI_MISTAKES))
def test_alibi_names_the_mistake(words, answer):
    assert_fails("flex/alibi-score-mod", answer, words)


def test_alibi_refuses_the_stored_table_and_a_python_list_and_float64_in_float32():
    def table(num_heads, query_len, key_len):
        bias = alibi_bias(num_heads, query_len, key_len, dtype=torch.float64)
        return lambda s, b, h, q, k: s + bias[h, q, k].to(s.dtype)

    assert_fails("flex/alibi-score-mod", table, "asks you to write yourself")

    def own_table(num_heads, query_len, key_len):  # the right biases, stored
        bias = _bias_table(num_heads, query_len, key_len)
        return lambda s, b, h, q, k: s + bias[h, q, k].to(s.dtype)

    assert_fails("flex/alibi-score-mod", own_table, "a table, stored or built as it runs")

    def python_list(num_heads, query_len, key_len):
        slopes = alibi_slopes(num_heads)
        return lambda s, b, h, q, k: s - slopes[h] * (q + key_len - query_len - k)

    assert_fails("flex/alibi-score-mod", python_list, "raised TypeError")

    def promoted(num_heads, query_len, key_len):
        slopes = torch.tensor(alibi_slopes(num_heads), dtype=torch.float64)
        return lambda s, b, h, q, k: s - slopes[h] * (q + key_len - query_len - k)

    assert_fails("flex/alibi-score-mod", promoted, "keep the input's dtype")


def _bias_table(num_heads, query_len, key_len):
    """The right (h, L, S) biases, as a learner computes them once."""
    slopes = torch.tensor(alibi_slopes(num_heads), dtype=torch.float64)
    i = torch.arange(query_len)[:, None] + key_len - query_len
    return -slopes[:, None, None] * (i - torch.arange(key_len)[None, :])


def _table_as_default(num_heads, query_len, key_len):
    table = _bias_table(num_heads, query_len, key_len)

    def score_mod(score, b, h, q, k, bias=table):
        return score + bias[h, q, k].to(score.dtype)

    return score_mod


class _TableModule(torch.nn.Module):  # a buffer, as PyTorch users keep constants
    def __init__(self, num_heads, query_len, key_len):
        super().__init__()
        self.register_buffer("bias", _bias_table(num_heads, query_len, key_len))

    def forward(self, score, b, h, q, k):
        return score + self.bias[h, q, k].to(score.dtype)


def _table_in_a_module(num_heads, query_len, key_len):
    return _TableModule(num_heads, query_len, key_len)


def _table_built_on_first_call(num_heads, query_len, key_len):
    cache = {}

    def score_mod(score, b, h, q, k):
        if "bias" not in cache:
            cache["bias"] = _bias_table(num_heads, query_len, key_len)
        return score + cache["bias"][h, q, k].to(score.dtype)

    return score_mod


def _table_built_every_call(num_heads, query_len, key_len):
    def score_mod(score, b, h, q, k):
        return score + _bias_table(num_heads, query_len, key_len)[h, q, k].to(score.dtype)

    return score_mod


@pytest.mark.parametrize(
    "answer",
    [_table_as_default, _table_in_a_module, _table_built_on_first_call, _table_built_every_call],
)
def test_alibi_refuses_a_table_however_it_is_kept(answer):
    assert_fails("flex/alibi-score-mod", answer, "a table, stored or built as it runs")


def test_alibi_refuses_a_table_of_one_row_per_head():
    """(h, S): each head's bias by distance, looked up; fewer numbers than the scores."""

    def per_head(num_heads, query_len, key_len):
        slopes = torch.tensor(alibi_slopes(num_heads), dtype=torch.float64)
        table = -slopes[:, None] * torch.arange(key_len, dtype=torch.float64)[None, :]
        offset = key_len - query_len

        def score_mod(score, b, h, q, k):
            distance = (q + offset - k).clamp(0, key_len - 1)
            return score + table[h, distance].to(score.dtype)

        return score_mod

    assert_fails("flex/alibi-score-mod", per_head, "a table, stored or built as it runs")


def test_alibi_accepts_a_stored_vector_of_positions():
    def positions(num_heads, query_len, key_len):
        slopes = torch.tensor(alibi_slopes(num_heads), dtype=torch.float64)
        position = torch.arange(64)  # up to a maximum length, as a model keeps them

        def score_mod(score, b, h, q, k):
            distance = position[q + key_len - query_len] - position[k]
            return (score - slopes[h] * distance).to(score.dtype)

        return score_mod

    assert_passes("flex/alibi-score-mod", positions)


# -- 3. predict the blocks ----------------------------------------------------------------------------


def _window_block_mask(length, window, block):
    """PyTorch's block mask of a causal sliding window over ``length`` queries and keys, in
    blocks of ``block`` (``create_block_mask`` itself, as a learner would call it)."""
    return create_block_mask(
        flex.sliding_window_mask_mod(length, window=window),
        None,
        None,
        length,
        length,
        device="cpu",
        BLOCK_SIZE=block,
    )


@pytest.mark.parametrize("length, window, block", _BLOCK_CASES)
def test_the_expected_counts_are_create_block_mask_s(length, window, block):
    counts = flex.block_counts(_window_block_mask(length, window, block))
    assert _counted(length, window, block, _classify(0, window - 1)) == (
        counts["full"],
        counts["partial"],
    )


def _blocks_vectorised(length, window, block_size):
    rows = torch.arange(length // block_size)
    nearest = (rows[:, None] - rows[None, :]) * block_size - (block_size - 1)
    farthest = nearest + 2 * (block_size - 1)
    kept = (farthest >= 0) & (nearest < window)
    full = kept & (nearest >= 0) & (farthest < window)
    return torch.stack([full.sum(), (kept & ~full).sum()])


def _blocks_per_row(length, window, block_size):
    full = partial = 0
    for row in range(length // block_size):
        for col in range(row + 1):
            lo, hi = (
                (row - col) * block_size - block_size + 1,
                (row - col) * block_size + block_size - 1,
            )
            if lo >= window:
                continue
            if lo >= 0 and hi < window:
                full += 1
            else:
                partial += 1
    return [full, partial]


@pytest.mark.parametrize("answer", [_blocks_vectorised, _blocks_per_row])
def test_predict_blocks_accepts_programs_in_several_styles(answer):
    assert_passes("flex/predict-blocks", answer)


def _reference_then(transform):
    reference = _get("flex/predict-blocks").reference

    def answer(length, window, block_size):
        full, partial = reference(length, window, block_size)
        return transform(full, partial, length, window, block_size)

    return answer


def _wider(length, window, block_size):
    return _get("flex/predict-blocks").reference(length, window + 1, block_size)


def _diagonal_as_full(length, window, block_size):
    """A learner's count that calls a block full when no key lies past the block's last query."""
    full = partial = 0
    for row in range(length // block_size):
        first_q, last_q = row * block_size, (row + 1) * block_size - 1
        for col in range(row + 1):
            first_k, last_k = col * block_size, (col + 1) * block_size - 1
            if first_q - last_k >= window:
                continue
            if last_k <= last_q and last_q - first_k < window:
                full += 1
            else:
                partial += 1
    return full, partial


BLOCK_MISTAKES = {
    "(partial, full)": _reference_then(lambda f, p, n, w, b: (p, f)),
    "every kept block as full": _reference_then(lambda f, p, n, w, b: (f + p, 0)),
    "every kept block as partial": _reference_then(lambda f, p, n, w, b: (0, f + p)),
    "one key too wide": _wider,
    "skipped blocks": _reference_then(lambda f, p, n, w, b: (0, (n // b) ** 2 - f - p)),
    "diagonal blocks are missing": _reference_then(lambda f, p, n, w, b: (f, p - n // b)),
    "diagonal blocks as full": _diagonal_as_full,
}


@pytest.mark.parametrize("words, answer", BLOCK_MISTAKES.items(), ids=list(BLOCK_MISTAKES))
def test_predict_blocks_names_the_mistake(words, answer):
    assert_fails("flex/predict-blocks", answer, words)


@pytest.mark.parametrize(
    "style",
    [tuple, list, lambda pair: np.array(pair), lambda pair: torch.tensor(pair)],
    ids=["tuple", "list", "numpy", "tensor"],
)
def test_predict_blocks_accepts_the_pair_in_several_containers(style):
    assert_passes("flex/predict-blocks", _reference_then(lambda f, p, n, w, b: style((f, p))))


def test_a_count_that_is_nearly_whole_is_shown_as_it_is_with_its_case():
    """15.0000001 is not 15: the message prints the value as given and names the case."""
    nearly = _reference_then(lambda f, p, n, w, b: (f + 1e-7, p))
    message = check("flex/predict-blocks", nearly).message
    shown = re.search(r"whole number, got (\S+)\.", message).group(1)
    assert not float(shown).is_integer(), message
    assert message.startswith("L = S = "), message


def test_predict_blocks_wants_a_pair_and_refuses_create_block_mask():
    kept_only = _reference_then(lambda f, p, n, w, b: f + p)
    assert_fails("flex/predict-blocks", kept_only, "return a pair (full, partial)")

    def revealed(length, window, block_size):
        # create_block_mask reached through a helper of the learner's
        mask = _window_block_mask(length, window, block_size)
        return int(mask.full_kv_num_blocks.sum()), int(mask.kv_num_blocks.sum())

    assert_fails("flex/predict-blocks", revealed, "asks you to write yourself")
    # and called directly (refused before it runs)
    assert_fails(
        "flex/predict-blocks",
        lambda length, window, block_size: create_block_mask(None, None, None, length, length),
        "asks you to write yourself",
    )
    both_ways = _reference_then(lambda f, p, n, w, b: (f, p + 1))
    assert_fails("flex/predict-blocks", both_ways, "is not it")


# -- 4. find the bug: top-left causal ------------------------------------------------------------------


def _causal_ge(query_len, key_len):
    return lambda b, h, q, k: q + key_len - query_len >= k


def _causal_torch_ge(query_len, key_len):
    return lambda b, h, q, k: torch.ge(q - k, query_len - key_len)


@pytest.mark.parametrize("answer", [_causal_ge, _causal_torch_ge])
def test_fix_causal_accepts_programs_in_several_styles(answer):
    assert_passes("flex/fix-causal", answer)


CAUSAL_MISTAKES = {
    "still the given mask": lambda L, S: lambda b, h, q, k: q >= k,
    "Off by one on the diagonal": lambda L, S: lambda b, h, q, k: k < q + S - L,
    "Off by one the other way": lambda L, S: lambda b, h, q, k: k <= q + S - L + 1,
    "shift has the wrong sign": lambda L, S: lambda b, h, q, k: k <= q - (S - L),
    "future instead of the past": lambda L, S: lambda b, h, q, k: k >= q + S - L,
    "Do not clamp the shift at 0": lambda L, S: lambda b, h, q, k: k <= q + max(S - L, 0),
    # a mask of positions only: no head or batch entry may be left out, or shifted
    "differs between heads or batch entries": lambda L, S: (
        lambda b, h, q, k: (k <= q + S - L) & (h == 0)
    ),
    "depends on the positions only": lambda L, S: lambda b, h, q, k: k <= q + S - L + b,
}


@pytest.mark.parametrize("words, answer", CAUSAL_MISTAKES.items(), ids=list(CAUSAL_MISTAKES))
def test_fix_causal_names_the_mistake(words, answer):
    assert_fails("flex/fix-causal", answer, words)


def test_fix_causal_refuses_the_package_masks():
    assert_fails(
        "flex/fix-causal",
        lambda L, S: flex.causal_mask_mod(L, S),
        "calls attncourse.flex.causal_mask_mod",
    )

    def looked_up(query_len, key_len):
        table = causal_mask(query_len, key_len)
        return lambda b, h, q, k: table[q, k]

    assert_fails("flex/fix-causal", looked_up, "calls attncourse.masks.causal_mask")


def test_fix_causal_names_the_first_wrong_entry_otherwise():
    answer = lambda L, S: lambda b, h, q, k: (k <= q + S - L) & (k != 0)  # noqa: E731
    assert_fails("flex/fix-causal", answer, "first wrong entry: query 0, key 0")


def test_fix_causal_names_the_case_and_keeps_the_formula_for_the_solution():
    """The feedback says which case failed, and names the mistake without writing the fix."""
    clamped = lambda L, S: lambda b, h, q, k: k <= q + (S - L if S >= L else 0)  # noqa: E731
    assert_fails("flex/fix-causal", clamped, "10 queries after 4 keys: ")
    given = lambda L, S: lambda b, h, q, k: q >= k  # noqa: E731
    for answer in (clamped, given, *CAUSAL_MISTAKES.values()):
        message = check("flex/fix-causal", answer).message
        assert "key_len - query_len)" not in message and "q_idx +" not in message, message


# -- 5. the blocks behind a timing ratio ---------------------------------------------------------------


def _blocks_dense(block_mask):
    return block_mask.to_dense().sum()


def _blocks_items(block_mask):
    return sum(t.sum().item() for t in (block_mask.kv_num_blocks, block_mask.full_kv_num_blocks))


@pytest.mark.parametrize("answer", [_blocks_dense, _blocks_items])
def test_computed_blocks_accepts_programs_in_several_styles(answer):
    assert_passes("flex/computed-blocks", answer)


COUNT_MISTAKES = {
    "partial blocks only": lambda m: m.kv_num_blocks.sum(),
    "full blocks only": lambda m: m.full_kv_num_blocks.sum(),
    "skipped blocks": lambda m: flex.block_counts(m)["skipped"] + 0 * m.kv_num_blocks.sum(),
    "first batch entry and head only": lambda m: (
        m.kv_num_blocks[0, 0].sum() + m.full_kv_num_blocks[0, 0].sum()
    ),
    "capacity of kv_indices": lambda m: m.kv_indices.numel() + m.full_kv_indices.numel(),
}


@pytest.mark.parametrize("words, answer", COUNT_MISTAKES.items(), ids=list(COUNT_MISTAKES))
def test_computed_blocks_names_the_mistake(words, answer):
    if words == "skipped blocks":  # block_counts is forbidden: count the skipped ones by hand
        answer = lambda m: (
            m.kv_num_blocks.numel()
            * math.ceil(  # noqa: E731
                m.shape[-1] / m.BLOCK_SIZE[1]
            )
            - m.kv_num_blocks.sum()
            - m.full_kv_num_blocks.sum()
        )
    assert_fails("flex/computed-blocks", answer, words)


def test_computed_blocks_refuses_the_package_count():
    assert_fails(
        "flex/computed-blocks", lambda m: flex.block_counts(m)["kept"], "asks you to write yourself"
    )
