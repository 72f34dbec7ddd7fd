"""Hostile input to the course's scaffolding (attncourse.course): every bad argument is refused
with a TypeError (wrong type or dtype) or a ValueError (wrong value or shape) whose message names
the caller's argument, and the inputs that used to give a silently wrong result no longer do."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from attncourse.course.lookup_task import (
    MODEL_KINDS,
    build_lookup_model,
    compare_on_lookup,
    load_seed_results,
    load_step_times,
    lookup_entropy,
    lookup_sequences,
    make_table,
    time_training_steps,
)
from attncourse.course.span_task import near_far_copy_task, near_far_entropy
from attncourse.course.text import CharTokenizer, get_batch, train_val_split
from attncourse.course.toy_translation import (
    BOS,
    SRC_VOCAB,
    TGT_VOCAB,
    AttentionTranslator,
    alignment_accuracy,
    cross_attention,
    make_data,
    number_to_words,
    split_numbers,
    train_translator,
    translate,
    translation_loss,
)
from attncourse.transformer import CausalLM

NEAR_FAR = dict(near=2, far=4)  # near_far_copy_task(2, 10, **NEAR_FAR) is valid
TABLE = make_table(4, generator=torch.Generator().manual_seed(0))
QUICK = dict(steps=1, progress=False)  # compare_on_lookup: stop soon if the bad input is missed
HERE = Path(__file__)


def translator(tgt_vocab=12, **kwargs):  # 12 = len(TGT_VOCAB)
    """A small AttentionTranslator, built without touching the global random stream."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return AttentionTranslator(len(SRC_VOCAB), tgt_vocab, d_model=8, **kwargs).eval()


class IntegerLogits(nn.Module):
    def forward(self, src, tgt_in):
        return torch.zeros(*tgt_in.shape, len(TGT_VOCAB), dtype=torch.long)


DATA = make_data([24, 3241, 7, 58])
MODEL = translator()  # max_len=8
with torch.no_grad():
    MEMORY = MODEL.encode(DATA.src)
WEIGHTS = torch.rand(4, 5, 7, generator=torch.Generator().manual_seed(0))
NAN_ROW = WEIGHTS.clone()
NAN_ROW[0, 0] = float("nan")
QUICK_TRAIN = dict(steps=1, batch_size=2, progress=False)
TOK = CharTokenizer("hello world")  # 8 characters: ' ', 'd', 'e', 'h', 'l', 'o', 'r', 'w'
IDS = torch.arange(20)


def bad(call, *args, error, match, **kwargs):
    """One row: ``call(*args, **kwargs)`` raises ``error`` whose message contains ``match``."""
    name = getattr(call, "__qualname__", repr(call))
    shown = ", ".join([*(type(a).__name__ for a in args), *kwargs])
    return pytest.param(call, args, kwargs, error, match, id=f"{name}({shown})-{match}")


BAD = [
    # course.text
    bad(
        get_batch,
        IDS,
        4,
        3,
        generator=0,
        error=TypeError,
        match="generator must be a torch.Generator",
    ),
    bad(
        get_batch,
        IDS,
        4,
        3,
        generator="x",
        error=TypeError,
        match="generator must be a torch.Generator",
    ),
    bad(
        get_batch,
        IDS,
        4,
        3,
        np.random.default_rng(0),
        error=TypeError,
        match="generator must be a torch.Generator",
    ),
    bad(get_batch, torch.randn(20), 4, 3, error=TypeError, match="data must be an integer"),
    bad(get_batch, IDS > 5, 4, 3, error=TypeError, match="data must be an integer"),
    bad(train_val_split, torch.randn(10), error=TypeError, match="data must be an integer"),
    bad(
        train_val_split,
        torch.ones(10, dtype=torch.bool),
        error=TypeError,
        match="data must be an integer",
    ),
    bad(train_val_split, IDS, np.float32(float("nan")), error=ValueError, match="val_fraction"),
    bad(TOK.decode, 3, error=TypeError, match="ids must"),
    bad(TOK.decode, None, error=TypeError, match="ids must"),
    bad(TOK.decode, "ab", error=TypeError, match="ids must"),
    bad(TOK.decode, b"ab", error=TypeError, match="ids must"),
    bad(TOK.decode, {0: 1}, error=TypeError, match="ids must"),
    bad(TOK.decode, [1.0], error=TypeError, match="ids must"),
    bad(TOK.decode, torch.tensor([1.0, 2.0]), error=TypeError, match="ids must"),
    # course.span_task
    bad(near_far_copy_task, 2, 10, near=2, far=10, error=ValueError, match="near < far < length"),
    bad(near_far_copy_task, 2, 10, near=4, far=4, error=ValueError, match="near < far < length"),
    bad(near_far_entropy, 16, -0.1, error=ValueError, match="noise must be"),
    bad(near_far_entropy, 16, float("nan"), error=ValueError, match="noise must be"),
    bad(near_far_entropy, 16, 1.5, error=ValueError, match="noise must be"),
    bad(near_far_entropy, 16, True, error=TypeError, match="noise must be"),
    bad(near_far_entropy, 16, "0.1", error=TypeError, match="noise must be"),
    bad(near_far_entropy, 0, 0.1, error=ValueError, match="vocab_size must be"),
    bad(near_far_entropy, -1, 0.1, error=ValueError, match="vocab_size must be"),
    bad(near_far_entropy, 1, 0.1, error=ValueError, match="vocab_size must be at least 2"),
    bad(near_far_entropy, 2.5, 0.1, error=TypeError, match="vocab_size must be"),
    bad(near_far_entropy, True, 0.1, error=TypeError, match="vocab_size must be"),
    bad(near_far_entropy, "16", 0.1, error=TypeError, match="vocab_size must be"),
    bad(near_far_entropy, 10**400, 0.1, error=ValueError, match="vocab_size is too large"),
    bad(near_far_copy_task, 2, 10, noise="0.1", **NEAR_FAR, error=TypeError, match="noise must"),
    bad(near_far_copy_task, 2, 10, noise=None, **NEAR_FAR, error=TypeError, match="noise must"),
    bad(near_far_copy_task, 2, 10, noise=0.1j, **NEAR_FAR, error=TypeError, match="noise must"),
    bad(near_far_copy_task, 2, 10, seed=1.5, **NEAR_FAR, error=TypeError, match="seed must"),
    bad(near_far_copy_task, 2, 10, seed="a", **NEAR_FAR, error=TypeError, match="seed must"),
    bad(near_far_copy_task, 2, 10, seed=True, **NEAR_FAR, error=TypeError, match="seed must"),
    bad(near_far_copy_task, 2, 10, seed=None, **NEAR_FAR, error=TypeError, match="seed must"),
    bad(near_far_copy_task, 2, 10, seed=2**70, **NEAR_FAR, error=ValueError, match="seed must"),
    bad(
        near_far_copy_task,
        *(2, 10),
        seed=torch.Generator(),
        **NEAR_FAR,
        error=TypeError,
        match="seed must",
    ),
    # course.lookup_task
    bad(lookup_sequences, TABLE - 1, 3, 5, noise=0.0, error=ValueError, match="table must hold"),
    bad(lookup_sequences, TABLE.clamp(max=0) - 4, 3, 5, error=ValueError, match="table must hold"),
    bad(lookup_sequences, TABLE + 10, 3, 5, error=ValueError, match="table must hold"),
    bad(lookup_sequences, TABLE - 10, 3, 5, error=ValueError, match="table must hold"),
    bad(
        lookup_sequences,
        *(torch.zeros(0, 0, dtype=torch.long), 3, 5),
        error=ValueError,
        match="table must be non-empty",
    ),
    bad(make_table, 4, generator=3, error=TypeError, match="generator must be a torch.Generator"),
    bad(
        lookup_sequences,
        *(TABLE, 3, 5),
        generator=3,
        error=TypeError,
        match="generator must be a torch.Generator",
    ),
    bad(lookup_sequences, TABLE, 3, 5, noise="0.2", error=TypeError, match="noise must be"),
    bad(lookup_entropy, 8, "0.2", error=TypeError, match="noise must be"),
    bad(lookup_entropy, 10**400, 0.2, error=ValueError, match="vocab_size is too large"),
    bad(build_lookup_model, "FFN Transformer", seed=1.5, error=TypeError, match="seed must"),
    bad(build_lookup_model, "FFN Transformer", seed="a", error=TypeError, match="seed must"),
    bad(build_lookup_model, "FFN Transformer", seed=None, error=TypeError, match="seed must"),
    bad(build_lookup_model, "all-attention", 8, 0, error=ValueError, match="length must be"),
    bad(build_lookup_model, "attention-only", 8, -1, error=ValueError, match="length must be"),
    bad(compare_on_lookup, kinds="FFN Transformer", **QUICK, error=TypeError, match="kinds must"),
    bad(compare_on_lookup, kinds=["x"], **QUICK, error=ValueError, match="kinds must"),
    bad(compare_on_lookup, kinds=[], **QUICK, error=ValueError, match="kinds must"),
    bad(compare_on_lookup, kinds=None, **QUICK, error=TypeError, match="kinds must"),
    bad(compare_on_lookup, batch=0, **QUICK, error=ValueError, match="batch must"),
    bad(compare_on_lookup, batch=-1, **QUICK, error=ValueError, match="batch must"),
    bad(compare_on_lookup, batch=True, **QUICK, error=TypeError, match="batch must"),
    bad(compare_on_lookup, batch=2.0, **QUICK, error=TypeError, match="batch must"),
    bad(compare_on_lookup, 1.5, **QUICK, error=TypeError, match="seed must"),
    bad(compare_on_lookup, 2**62, **QUICK, error=ValueError, match="1_000_003 * seed"),
    bad(compare_on_lookup, "a", **QUICK, error=TypeError, match="seed must"),
    bad(compare_on_lookup, None, **QUICK, error=TypeError, match="seed must"),
    bad(time_training_steps, seed="a", error=TypeError, match="seed must"),
    bad(time_training_steps, kinds=None, error=TypeError, match="kinds must"),
    bad(
        time_training_steps,
        kinds=[MODEL_KINDS[0]] * 2,
        rounds=1,
        error=ValueError,
        match="kinds must not repeat",
    ),
    bad(load_seed_results, 3, error=TypeError, match="path must"),
    bad(load_seed_results, b"/tmp/x", error=TypeError, match="path must"),
    bad(load_seed_results, str(HERE.parent), error=ValueError, match="path must name a JSON"),
    bad(load_seed_results, "", error=ValueError, match="path must name a JSON"),
    bad(load_seed_results, str(HERE), error=ValueError, match="does not hold JSON"),
    bad(load_step_times, 3, error=TypeError, match="path must"),
    bad(load_step_times, HERE, error=ValueError, match="does not hold JSON"),
    # course.toy_translation
    bad(translator, pad_id=-1, error=ValueError, match="pad_id must be"),
    bad(translator, pad_id=99, error=ValueError, match="pad_id=99"),
    bad(translator, pad_id=True, error=TypeError, match="pad_id must be"),
    bad(translator, pad_id=1.5, error=TypeError, match="pad_id must be"),
    bad(translator, pad_id="0", error=TypeError, match="pad_id must be"),
    bad(translator, pad_id=None, error=TypeError, match="pad_id must be"),
    bad(MODEL.decode, DATA.tgt_in, MEMORY, DATA.src[:1], error=ValueError, match="memory must"),
    bad(MODEL.decode, DATA.tgt_in, MEMORY, DATA.src[0], error=ValueError, match="src must"),
    bad(MODEL.decode, DATA.tgt_in, DATA.src, DATA.src, error=TypeError, match="memory must"),
    bad(MODEL.greedy_decode, DATA.src, BOS, 20, error=ValueError, match="max_len=20"),
    bad(MODEL.greedy_decode, DATA.src, 1.0, 3, error=TypeError, match="bos_id must"),
    bad(MODEL, DATA.src.float(), DATA.tgt_in, error=TypeError, match="src must be an integer"),
    bad(translation_loss, MODEL, (DATA.src, DATA.tgt_in), error=TypeError, match="batch must"),
    bad(
        translation_loss,
        *(MODEL, replace(DATA, tgt_out=DATA.tgt_out + 50)),
        error=ValueError,
        match="batch.tgt_out must hold token ids",
    ),
    bad(
        translation_loss,
        *(MODEL, replace(DATA, tgt_out=torch.zeros_like(DATA.tgt_out))),
        error=ValueError,
        match="batch.tgt_out holds only padding",
    ),
    bad(translation_loss, lambda a, b: a, DATA, error=TypeError, match="model must be"),
    bad(translation_loss, IntegerLogits(), DATA, error=TypeError, match="floating-point"),
    bad(cross_attention, MODEL, (DATA.src, DATA.tgt_in), error=TypeError, match="data must"),
    bad(cross_attention, "m", DATA, error=TypeError, match="model must"),
    bad(translate, translator(40, max_len=7), DATA, error=ValueError, match="TGT_VOCAB"),
    bad(translate, MODEL, (DATA.src,), error=TypeError, match="data must"),
    bad(train_translator, (DATA.src,), **QUICK_TRAIN, error=TypeError, match="data must"),
    bad(alignment_accuracy, WEIGHTS.long(), DATA.alignment, error=TypeError, match="weights must"),
    bad(alignment_accuracy, NAN_ROW, DATA.alignment, error=ValueError, match="weights must be"),
    bad(alignment_accuracy, WEIGHTS > 0.5, DATA.alignment, error=TypeError, match="weights must"),
    bad(
        alignment_accuracy,
        *(WEIGHTS.to(torch.complex64), DATA.alignment),
        error=TypeError,
        match="weights must",
    ),
    bad(
        alignment_accuracy,
        *(WEIGHTS, DATA.alignment.clamp(min=-5) - 4),
        error=ValueError,
        match="alignment must hold",
    ),
    bad(alignment_accuracy, WEIGHTS.to("meta"), DATA.alignment, error=ValueError, match="device"),
    bad(split_numbers, 1e-9, error=ValueError, match="leaves an empty part"),
    bad(split_numbers, 0.99999, error=ValueError, match="leaves an empty part"),
    bad(split_numbers, seed=1.5, error=TypeError, match="seed must"),
    bad(split_numbers, seed="a", error=TypeError, match="seed must"),
    bad(split_numbers, seed=True, error=TypeError, match="seed must"),
    bad(split_numbers, seed=None, error=TypeError, match="seed must"),
    bad(make_data, 12, error=TypeError, match="numbers must"),
    bad(make_data, None, error=TypeError, match="numbers must"),
    bad(make_data, [12, 3.0], error=TypeError, match="numbers[1]"),
    bad(DATA.to, torch.float32, error=TypeError, match="device must"),
    bad(DATA.__getitem__, "a", error=TypeError, match="index must"),
    bad(DATA.__getitem__, torch.tensor([[0, 1]]), error=ValueError, match="index must"),
    bad(DATA.__getitem__, torch.tensor([0.0]), error=TypeError, match="index must"),
    bad(DATA.source_words, torch.tensor([0, 1]), error=TypeError, match="i must"),
    bad(DATA.target_tokens, True, error=TypeError, match="i must"),
    bad(DATA.source_words, 1.0, error=TypeError, match="i must"),
    bad(train_translator, DATA, lr="x", **QUICK_TRAIN, error=TypeError, match="lr must"),
    bad(train_translator, DATA, seed=1.5, **QUICK_TRAIN, error=TypeError, match="seed must"),
    bad(train_translator, DATA, seed="a", **QUICK_TRAIN, error=TypeError, match="seed must"),
    bad(
        train_translator,
        DATA,
        max_len=3,
        **QUICK_TRAIN,
        error=ValueError,
        match="max_len=3 is too short",
    ),
]


@pytest.mark.parametrize("call, args, kwargs, error, match", BAD)
def test_bad_input_is_refused_naming_the_argument(call, args, kwargs, error, match):
    with pytest.raises(error) as raised:
        call(*args, **kwargs)
    assert match in str(raised.value), str(raised.value)


# -- course.text: numpy numbers are numbers ------------------------------------------------------


def test_decode_takes_numpy_integers_and_arrays():
    assert TOK.decode([np.int64(3), np.int32(2)]) == TOK.decode([3, 2]) == "he"
    assert TOK.decode(np.array([3, 2, 4])) == "hel"


def test_train_val_split_takes_numpy_fractions():
    for fraction in (np.float32(0.5), np.float64(0.5)):
        train, val = train_val_split(IDS, fraction)
        assert torch.equal(train, IDS[:10]) and torch.equal(val, IDS[10:])


# -- course.span_task ---------------------------------------------------------------------------


def test_near_far_copy_task_takes_a_numpy_seed_and_sizes():
    expected = near_far_copy_task(4, 12, near=2, far=5, seed=3)
    got = near_far_copy_task(np.int64(4), np.int32(12), near=np.int64(2), far=5, seed=np.int64(3))
    assert torch.equal(got, expected)


# -- course.lookup_task -------------------------------------------------------------------------


def test_lookup_takes_numpy_noise_and_sizes():
    def sample(*args, **kwargs):
        return lookup_sequences(TABLE, *args, generator=torch.Generator().manual_seed(1), **kwargs)

    expected = sample(3, 6, noise=0.5)
    assert torch.equal(sample(np.int64(3), np.int32(6), noise=np.float32(0.5)), expected)
    assert lookup_entropy(np.int64(8), np.float32(0.25)) == lookup_entropy(8, 0.25)


def test_build_lookup_model_leaves_the_global_generator_alone():
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    model = build_lookup_model("FFN Transformer", 8, 4, seed=np.int64(3))
    assert torch.equal(torch.rand(3), expected)  # the caller's stream goes on undisturbed
    torch.manual_seed(3)  # and the weights are those the global generator seeded with 3 gives
    reference = CausalLM.standard(8, d_model=64, num_heads=4, d_ff=256, num_layers=2, max_len=4)
    for (name, got), want in zip(model.state_dict().items(), reference.state_dict().values()):
        assert torch.equal(got, want), name


# -- course.toy_translation ---------------------------------------------------------------------


def test_translator_takes_numpy_bos_and_int32_ids():
    expected = MODEL.greedy_decode(DATA.src, BOS, 5)
    assert torch.equal(MODEL.greedy_decode(DATA.src, np.int64(BOS), np.int64(5)), expected)
    with torch.no_grad():
        logits = MODEL(DATA.src, DATA.tgt_in)
        torch.testing.assert_close(MODEL(DATA.src.int(), DATA.tgt_in.int()), logits)


def test_split_numbers_takes_numpy_numbers():
    assert split_numbers(np.float32(0.2), seed=np.int64(1)) == split_numbers(0.2, seed=1)


def test_make_data_takes_numpy_and_torch_integers():
    assert number_to_words(np.int64(12)) == number_to_words(12)
    expected = make_data([12, 13])
    for numbers in (np.array([12, 13]), torch.tensor([12, 13])):
        got = make_data(numbers)
        assert got.numbers == [12, 13] and all(type(n) is int for n in got.numbers)
        for field in ("src", "tgt_in", "tgt_out", "alignment"):
            assert torch.equal(getattr(got, field), getattr(expected, field))


def test_train_translator_leaves_the_global_generator_alone():
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    _, losses = train_translator(DATA, seed=np.int64(2), d_model=8, **QUICK_TRAIN)
    assert torch.equal(torch.rand(3), expected)  # the caller's stream goes on undisturbed
    _, again = train_translator(DATA, seed=2, d_model=8, **QUICK_TRAIN)
    assert again == losses  # and the result depends on seed alone
