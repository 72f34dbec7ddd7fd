"""Hostile and edge-case input to the models and the training loop (transformer.py, training.py).

Each row is an input that once failed deep inside torch, named an internal variable instead of
the caller's argument, or was accepted silently; now each is refused with the argument named.
Below the table: the inputs that must now work, and give exactly what the ordinary input gives.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from attncourse.training import ProgressBar, next_token_loss, train
from attncourse.transformer import CausalLM, FeedForward, Seq2SeqTransformer, TransformerBlock


def lm(**kw):
    torch.manual_seed(0)
    return CausalLM.standard(10, d_model=8, num_heads=2, d_ff=16, num_layers=1, max_len=6, **kw)


def seq2seq():
    torch.manual_seed(0)
    return Seq2SeqTransformer(10, 12, d_model=8, num_heads=2, d_ff=8, num_layers=1, max_len=6)


SRC = torch.tensor([[3, 4, 5, 0, 0], [6, 2, 7, 8, 0]])
TGT = torch.tensor([[1, 3, 2, 0], [1, 4, 5, 2]])
X = torch.randn(2, 3, 8)


def block(**kw):
    return TransformerBlock(8, 2, 16, **kw)


def cached_batch_of_two_then_three():
    model = lm()
    cache = model.new_cache()
    model(torch.randint(10, (2, 2)), cache)
    model(torch.randint(10, (3, 1)), cache)


def train_with(loss_fn, model=None, optimizer=None, **kw):
    model = model or nn.Linear(2, 1)
    optimizer = optimizer or torch.optim.SGD(model.parameters(), lr=0.1)
    return train(
        model,
        lambda step: torch.randn(4, 2),
        loss_fn,
        steps=2,
        optimizer=optimizer,
        progress=False,
        **kw,
    )


def bar_update(**postfix):
    ProgressBar(2, enabled=False).update(**postfix)


CASES = [
    # training.next_token_loss
    ("loss: 0-d logits", lambda: next_token_loss(torch.tensor(1.0), SRC), ValueError, "logits"),
    (
        "loss: 4-D logits",
        lambda: next_token_loss(torch.randn(2, 5, 10, 1), SRC),
        ValueError,
        "logits must have exactly 3",
    ),
    (
        "loss: L = 0",
        lambda: next_token_loss(torch.randn(2, 0, 5), torch.zeros(2, 0, dtype=torch.long)),
        ValueError,
        "no next token",
    ),
    (
        "loss: start a str",
        lambda: next_token_loss(torch.randn(2, 5, 10), SRC, start="1"),
        TypeError,
        "start must be an integer",
    ),
    (
        "loss: devices differ",
        lambda: next_token_loss(torch.randn(2, 5, 10, device="meta"), SRC),
        ValueError,
        "same device",
    ),
    # training.ProgressBar
    ("bar: total a str", lambda: ProgressBar("x"), TypeError, "total"),
    ("bar: total a bool", lambda: ProgressBar(True), TypeError, "total"),
    ("bar: total a float", lambda: ProgressBar(2.5), TypeError, "total"),
    ("bar: negative total", lambda: ProgressBar(-1), ValueError, "total"),
    ("bar: desc an int", lambda: ProgressBar(3, 5), TypeError, "desc"),
    ("bar: a str to show", lambda: bar_update(loss="a"), TypeError, "loss must be a real number"),
    ("bar: None to show", lambda: bar_update(loss=None), TypeError, "loss"),
    ("bar: a vector", lambda: bar_update(loss=torch.ones(2)), TypeError, "loss"),
    # training.train
    ("train: desc an int", lambda: train_with(lambda m, b: m(b).sum(), desc=5), TypeError, "desc"),
    (
        "train: a loss without grad",
        lambda: train_with(lambda m, b: torch.tensor(1.0)),
        ValueError,
        "does not depend on any trainable parameter",
    ),
    (
        "train: an integer loss",
        lambda: train_with(lambda m, b: torch.tensor(1)),
        TypeError,
        "real floating-point scalar",
    ),
    (
        "train: a complex loss",
        lambda: train_with(lambda m, b: m(b).mean() * (1 + 1j)),
        TypeError,
        "real floating-point scalar",
    ),
    (
        "train: an optimiser over another module",
        lambda: train_with(
            lambda m, b: m(b).sum(), optimizer=torch.optim.SGD(nn.Linear(2, 1).parameters(), 0.1)
        ),
        ValueError,
        "none of the model's parameters",
    ),
    # transformer.FeedForward
    ("ffn: wrong width", lambda: FeedForward(4, 8)(torch.randn(2, 3, 5)), ValueError, "x has"),
    ("ffn: integer x", lambda: FeedForward(4, 8)(torch.ones(2, 4).long()), TypeError, "x must"),
    ("ffn: float64 x", lambda: FeedForward(4, 8)(torch.randn(2, 4).double()), TypeError, "x must"),
    ("ffn: 0-d x", lambda: FeedForward(4, 8)(torch.tensor(1.0)), ValueError, "x must have"),
    # transformer.TransformerBlock
    ("block: d_model 0", lambda: TransformerBlock(0, 2, 8), ValueError, "d_model"),
    ("block: d_model a bool", lambda: TransformerBlock(True, 1, 8), TypeError, "d_model"),
    ("block: d_model a str", lambda: TransformerBlock("8", 2, 8), TypeError, "d_model"),
    ("block: heads do not divide", lambda: TransformerBlock(8, 3, 8), ValueError, "d_model=8"),
    (
        "block: memory of another batch",
        lambda: block(cross_attention=True)(X, None, torch.randn(3, 5, 8)),
        ValueError,
        "x and memory must have the same batch size",
    ),
    (
        "block: memory_mask of the wrong shape",
        lambda: block(cross_attention=True)(
            X, None, torch.randn(2, 5, 8), torch.ones(2, 1, 4, dtype=torch.bool)
        ),
        ValueError,
        "memory_mask of shape (2, 1, 4)",
    ),
    (
        "block: an integer memory_mask",
        lambda: block(cross_attention=True)(
            X, None, torch.randn(2, 5, 8), torch.ones(2, 1, 5, dtype=torch.long)
        ),
        TypeError,
        "memory_mask must be boolean",
    ),
    (
        "block: memory_mask without cross-attention",
        lambda: block()(X, None, None, torch.ones(2, 1, 5, dtype=torch.bool)),
        ValueError,
        "memory_mask was given but this block has no cross-attention",
    ),
    # transformer.CausalLM
    ("lm: blocks an int", lambda: CausalLM(10, 8, 6, 5), TypeError, "blocks must be a list"),
    ("lm: blocks of ints", lambda: CausalLM(10, 8, 6, [1]), TypeError, "blocks[0]"),
    ("lm: a single block", lambda: CausalLM(10, 8, 6, block()), TypeError, "pass [block]"),
    (
        "lm: a block of another width",
        lambda: CausalLM(10, 8, 6, [TransformerBlock(4, 2, 16)]),
        ValueError,
        "blocks[0] has width 4",
    ),
    ("lm: no layers", lambda: _standard(0), ValueError, "num_layers"),
    ("lm: negative layers", lambda: _standard(-2), ValueError, "num_layers"),
    ("lm: layers a bool", lambda: _standard(True), TypeError, "num_layers"),
    ("lm: layers a float", lambda: _standard(2.0), TypeError, "num_layers"),
    (
        "lm: a cached batch continued with another",
        cached_batch_of_two_then_three,
        ValueError,
        "tokens has batch size 3 but the cache holds 2",
    ),
    (
        "lm: a cache of no blocks",
        lambda: CausalLM(10, 8, 6, []).new_cache(),
        ValueError,
        "no blocks",
    ),
    # transformer.Seq2SeqTransformer
    (
        "seq2seq: one sentence's src for two",
        lambda: _decode(src=SRC[:1]),
        ValueError,
        "must agree in B and S",
    ),
    ("seq2seq: src shorter than memory", lambda: _decode(src=SRC[:, :3]), ValueError, "src (2, 3)"),
    ("seq2seq: float src", lambda: _decode(src=SRC.float()), TypeError, "src must be an integer"),
    ("seq2seq: 3-D src", lambda: _decode(src=SRC[:, None]), ValueError, "src must have exactly 2"),
    ("seq2seq: 1-D src", lambda: _decode(src=SRC[0]), ValueError, "src must have exactly 2"),
    ("seq2seq: src a list", lambda: _decode(src=[[1]]), TypeError, "src must be a torch.Tensor"),
    ("seq2seq: encode float src", lambda: seq2seq().encode(SRC.float()), TypeError, "src"),
    ("seq2seq: encode src out of range", lambda: seq2seq().encode(SRC + 10), ValueError, "src"),
    (
        "seq2seq: greedy max_len past the model's",
        lambda: seq2seq().greedy_decode(SRC, 1, 10**9),
        ValueError,
        "max_len=1000000000 is longer than the model's max_len=6",
    ),
    ("seq2seq: bos_id a str", lambda: seq2seq().greedy_decode(SRC, "1", 3), TypeError, "bos_id"),
]


def _standard(num_layers):
    return CausalLM.standard(10, d_model=8, num_heads=2, d_ff=16, num_layers=num_layers)


def _decode(src):
    model = seq2seq()
    return model.decode(TGT, model.encode(SRC), src)


@pytest.mark.parametrize("call, error, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_with_the_argument_named(call, error, words):
    with pytest.raises(error) as raised:
        call()
    assert words in str(raised.value)


def test_narrow_integer_tokens_are_token_ids():
    """int8/int16/int32/uint8 ids (accepted as ids) give what int64 ids give, not a raw error."""
    tokens = torch.randint(10, (2, 5))
    logits = torch.randn(2, 5, 10)
    model, translator = lm(), seq2seq()
    for dtype in (torch.int32, torch.int16, torch.int8, torch.uint8):
        assert torch.equal(
            next_token_loss(logits, tokens.to(dtype)), next_token_loss(logits, tokens)
        )
        assert torch.equal(model(tokens.to(dtype)), model(tokens))
        assert torch.equal(translator(SRC.to(dtype), TGT.to(dtype)), translator(SRC, TGT))


def test_numpy_integers_are_integers():
    translator = seq2seq()
    assert torch.equal(
        translator.greedy_decode(SRC, np.int64(1), np.int64(3)), translator.greedy_decode(SRC, 1, 3)
    )


def test_a_failed_training_leaves_the_model_in_its_mode_and_closes_the_bar(monkeypatch):
    closed = []
    monkeypatch.setattr(ProgressBar, "close", lambda self: closed.append(self))
    for before in (False, True):
        model = nn.Linear(2, 1).train(before)
        for loss_fn in (
            lambda m, b: m(b).sum() * float("nan"),  # the loop's own ValueError
            lambda m, b: m(b).squeeze(-1),  # a vector: ValueError
            lambda m, b: 1 / 0,  # the learner's own error
        ):
            with pytest.raises((ValueError, ZeroDivisionError)):
                train_with(loss_fn, model=model)
            assert model.training is before
    assert len(closed) == 6
    model = nn.Linear(2, 1).train()
    train_with(lambda m, b: m(b).pow(2).mean(), model=model)
    assert not model.training  # eval() at the end of a training that finished


def test_progress_bar_shows_a_0d_tensor_and_numpy_numbers():
    bar = ProgressBar(3, enabled=False)
    bar.update(loss=torch.tensor(0.25), lr=np.float32(0.5), step=np.int64(1))
    assert bar.postfix == "loss=0.2500, lr=0.5000, step=1.0000"
