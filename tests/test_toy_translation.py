"""The toy translation task: its sentences, alignments, batches, loss, training and scores."""

import pytest
import torch
from torch import nn

from attncourse.course.toy_translation import (
    BOS,
    EOS,
    MAX_TGT_LEN,
    PAD,
    SRC_VOCAB,
    TENS,
    TGT_VOCAB,
    UNITS,
    AttentionTranslator,
    alignment_accuracy,
    all_numbers,
    cross_attention,
    make_data,
    number_to_words,
    split_numbers,
    train_translator,
    translate,
    translation_loss,
)


@pytest.mark.parametrize(
    "n, words, alignment",
    [
        (7, "seven", [0]),
        (24, "four and twenty", [2, 0]),
        (13, "three and ten", [2, 0]),
        (999, "nine hundred nine and ninety", [0, 4, 2]),
        (3241, "three thousand two hundred one and forty", [0, 2, 6, 4]),
    ],
)
def test_number_to_words_examples(n, words, alignment):
    assert number_to_words(n) == (words.split(), alignment)


def test_every_alignment_points_at_the_word_of_its_digit():
    for n in all_numbers():
        words, alignment = number_to_words(n)
        digits = [int(c) for c in str(n)]
        assert sorted(set(alignment)) == sorted(alignment)  # one word per digit
        for i, (d, j) in enumerate(zip(digits, alignment)):
            # the tens digit is said as a tens word
            vocabulary = TENS if i == len(digits) - 2 else UNITS
            assert words[j] == vocabulary[d - 1], (n, words, alignment)


def test_all_numbers_and_split():
    numbers = all_numbers()
    assert len(numbers) == sum(9**k for k in range(1, 5))  # 1 to 4 digits, each in 1..9
    train, test = split_numbers(0.25, seed=3)
    assert len(test) == round(0.25 * len(numbers)) and not set(train) & set(test)
    assert sorted(train + test) == numbers
    assert split_numbers(0.25, seed=3) == (train, test)
    assert split_numbers(0.25, seed=4) != (train, test)


@pytest.mark.parametrize(
    "n, error",
    [(0, ValueError), (10000, ValueError), (105, ValueError), (-4, ValueError)]
    + [(3.0, TypeError), (True, TypeError)],
)
def test_number_to_words_rejects(n, error):
    with pytest.raises(error, match="n must"):
        number_to_words(n)


def test_split_rejects_bad_fraction():
    with pytest.raises(ValueError, match="test_fraction"):
        split_numbers(1.0)


def test_make_data_layout():
    data = make_data([24, 3241])
    assert data.src.shape == (
        2,
        7,
    ) and data.tgt_in.shape == data.tgt_out.shape == data.alignment.shape == (2, 5)
    assert data.source_words(0) == ["four", "and", "twenty"]
    assert data.target_tokens(0) == ["2", "4", "<eos>"]
    assert data.src[0, 3:].eq(PAD).all()
    assert data.tgt_in[0].tolist() == [BOS, TGT_VOCAB.index("2"), TGT_VOCAB.index("4"), PAD, PAD]
    assert data.tgt_out[0].tolist() == [TGT_VOCAB.index("2"), TGT_VOCAB.index("4"), EOS, PAD, PAD]
    assert data.alignment.tolist() == [[2, 0, -1, -1, -1], [0, 2, 6, 4, -1]]
    # the decoder input is the target shifted right by one, after BOS
    assert torch.equal(data.tgt_in[1, 1:], data.tgt_out[1, :-1])
    picked = data[torch.tensor([1])]
    assert picked.numbers == [3241] and torch.equal(picked.src, data.src[1:])
    assert data[1:].numbers == [3241]
    with pytest.raises(ValueError, match="empty"):
        make_data([])


def test_translation_loss_ignores_padding():
    data = make_data([5, 3241])

    class Fixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.logits = torch.randn(
                2, 5, len(TGT_VOCAB), generator=torch.Generator().manual_seed(0)
            )

        def forward(self, src, tgt_in):
            return self.logits

    model = Fixed()
    terms = [
        -torch.log_softmax(model.logits[b, t], -1)[data.tgt_out[b, t]]
        for b in range(2)
        for t in range(5)
        if data.tgt_out[b, t] != PAD
    ]
    assert len(terms) == 2 + 5
    torch.testing.assert_close(translation_loss(model, data), torch.stack(terms).mean())


def test_alignment_accuracy():
    alignment = torch.tensor([[2, 0, -1], [1, 1, 0]])
    truth = torch.nn.functional.one_hot(alignment.clamp(min=0), 3).float()
    assert alignment_accuracy(truth, alignment) == 1.0
    assert alignment_accuracy(truth.roll(1, dims=-1), alignment) == 0.0
    half = truth.clone()
    half[1] = torch.tensor([1.0, 0, 0])  # row 1 now looks at word 0 only: one hit of three
    assert alignment_accuracy(half, alignment) == pytest.approx(3 / 5)
    with pytest.raises(ValueError, match=r"alignment must have shape \(N, L\) = \(2, 3\)"):
        alignment_accuracy(truth, alignment[:, :2])
    with pytest.raises(ValueError, match="weights must have exactly 3 dimensions"):
        alignment_accuracy(truth[0], alignment)
    with pytest.raises(ValueError, match="nothing to score"):
        alignment_accuracy(truth, torch.full((2, 3), -1))


def test_short_training_is_seeded_and_learns(device):
    data = make_data(all_numbers()[:500]).to(device)
    model, losses = train_translator(
        data, steps=40, batch_size=32, seed=1, progress=False, d_model=16, num_decoder_layers=1
    )
    assert len(losses) == 40 and not model.training
    assert sum(losses[-5:]) / 5 < 0.75 * sum(losses[:5]) / 5
    assert (
        train_translator(
            data, steps=40, batch_size=32, seed=1, progress=False, d_model=16, num_decoder_layers=1
        )[1]
        == losses
    )
    weights = cross_attention(model, data[:8])
    assert weights.shape == (1, 8, 2, 5, 7)
    assert weights.device.type == device.type
    torch.testing.assert_close(weights.sum(-1), torch.ones(1, 8, 2, 5, device=device))
    words = translate(model, data[:8])
    assert len(words) == 8 and all(set(w) <= set("123456789?") and len(w) <= 5 for w in words)


def test_translate_cuts_at_eos():
    class Scripted(nn.Module):
        def greedy_decode(self, src, bos_id, max_len):
            assert bos_id == BOS and max_len == 5
            return torch.tensor([[5, 4, EOS, 7, 7], [3, BOS, 3, 3, 3]])

    assert translate(Scripted(), make_data([31, 1])) == ["32", "1?111"]
    assert TGT_VOCAB[5] == "3" and SRC_VOCAB[PAD] == "<pad>"


def test_attention_translator_decodes_as_it_trains_and_ignores_padding():
    """Greedy decoding equals teacher forcing on its own output; padded source words change nothing."""
    torch.manual_seed(0)
    model = (
        AttentionTranslator(len(SRC_VOCAB), len(TGT_VOCAB), d_model=16, num_heads=2).double().eval()
    )
    assert all(layer.ffn is None for layer in list(model.encoder) + list(model.decoder))
    assert not any(isinstance(m, nn.LayerNorm) for m in model.modules())
    data = make_data([3241, 7, 58])
    out = model.greedy_decode(data.src, BOS, MAX_TGT_LEN)
    tgt_in = torch.cat([torch.full((3, 1), BOS), out[:, :-1]], dim=1)
    assert torch.equal(model(data.src, tgt_in).argmax(-1), out)
    memory = model.encode(data.src)
    logits = model.decode(data.tgt_in, memory, data.src)
    model.src_tokens.weight.data[PAD] += 100.0  # the pad embedding must not matter either
    torch.testing.assert_close(model(data.src, data.tgt_in), logits)
    with pytest.raises(ValueError, match="src .B, S. and tgt_in"):
        model(data.src[0], data.tgt_in)
    with pytest.raises(ValueError, match="max_len=8"):
        model(torch.zeros(1, 9, dtype=torch.long), data.tgt_in[:1])


def test_edges_a_mutation_audit_found(monkeypatch):
    from attncourse.course import toy_translation

    data = make_data([12, 345, 6789])
    one = data[0]  # an int index keeps the batch dimension
    assert one.numbers == [12] and torch.equal(one.src, data.src[:1])
    model = AttentionTranslator(len(SRC_VOCAB), len(TGT_VOCAB), pad_id=PAD).eval()
    # as many tokens as the model has target positions for
    assert model.greedy_decode(data.src, BOS, model.max_len).shape == (3, model.max_len)
    # the same token at two positions is embedded differently: the positions are added
    embedded = model._embed_target(torch.tensor([[5, 5]]))
    assert not torch.allclose(embedded[0, 0], embedded[0, 1])
    # a layer adds its attention to its input (the residual)
    layer = model.encoder[0]
    x = torch.randn(2, 4, model.src_tokens.embedding_dim)
    attended, _ = layer.self_attn(x, x, x, None)
    torch.testing.assert_close(layer(x, None), x + attended)

    # the batches: drawn from every row, in an order that the seed decides
    def drawn(seed):
        seen = []

        def fake_train(model, get_batch, loss, *, steps, **options):
            seen.extend(n for step in range(steps) for n in get_batch(step).numbers)
            return [0.0] * steps

        monkeypatch.setattr(toy_translation, "train", fake_train)
        train_translator(data, steps=5, batch_size=8, seed=seed, progress=False)
        return seen

    assert set(drawn(1)) == {12, 345, 6789} and drawn(1) != drawn(2)
