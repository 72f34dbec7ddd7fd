"""The shipped text, its character tokenizer, the split and the batches (chapter 5)."""

import math
from collections import Counter

import pytest
import torch

from attncourse.course.text import TEXT_SOURCE, CharTokenizer, get_batch, load_text, train_val_split


@pytest.fixture(scope="module")
def text():
    return load_text()


def test_text_is_the_three_plays_in_plain_ascii(text):
    assert 300_000 < len(text) < 450_000
    assert text.isascii() and "\r" not in text
    assert text.startswith("BERNARDO:\nWho's there?")  # Hamlet, I.i
    assert "To be, or not to be: that is the question:" in text
    assert "To-morrow, and to-morrow, and to-morrow," in text  # Macbeth, V.v
    assert text.rstrip().endswith("Than this of Juliet and her Romeo.")
    # markup and stage directions are gone
    for leftover in ("**", "_[", "\\", "#", "Exeunt", "\nEnter "):
        assert leftover not in text, leftover
    assert "public domain" in TEXT_SOURCE and "MIT licence" in TEXT_SOURCE


def test_every_speech_is_a_speaker_line_then_lines(text):
    for speech in text.strip().split("\n\n"):
        speaker, *lines = speech.split("\n")
        assert speaker.endswith(":") and speaker[:-1].upper() == speaker[:-1], speaker
        assert lines and all(lines), speech


def test_tokenizer_round_trip_and_vocabulary(text):
    tok = CharTokenizer(text)
    assert tok.vocab_size == len(set(text)) == 63
    assert tok.chars == sorted(tok.chars) and tok.chars[0] == "\n"
    ids = tok.encode(text[:5000])
    assert ids.dtype == torch.long and ids.shape == (5000,)
    assert tok.decode(ids) == text[:5000]
    assert tok.decode(ids.tolist()) == text[:5000]
    assert tok.encode("AB").tolist() == [tok.chars.index("A"), tok.chars.index("B")]
    counts = Counter(text)
    assert torch.bincount(tok.encode(text), minlength=tok.vocab_size).tolist() == [
        counts[c] for c in tok.chars
    ]


def test_tokenizer_rejects_unknown_characters_and_bad_ids():
    tok = CharTokenizer("abc")
    with pytest.raises(ValueError, match="'z'"):
        tok.encode("abz")
    with pytest.raises(TypeError, match="text must be a str"):
        tok.encode(["a"])
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        tok.decode([0, 3])
    with pytest.raises(ValueError, match="1-D integer"):
        tok.decode(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="non-empty"):
        CharTokenizer("")


def test_split_is_contiguous_and_disjoint():
    data = torch.arange(1000)
    train, val = train_val_split(data, 0.1)
    assert train.tolist() == list(range(900)) and val.tolist() == list(range(900, 1000))
    for bad, error in ((0, ValueError), (1, ValueError), (1.5, ValueError)) + (
        (True, TypeError),
        ("0.1", TypeError),
    ):
        with pytest.raises(error, match="val_fraction"):
            train_val_split(data, bad)
    with pytest.raises(ValueError, match=r"data must have rank 1|\(N,\)"):
        train_val_split(data.view(10, 100))


def test_get_batch_windows_are_consecutive_seeded_and_cover_the_ends():
    data = torch.arange(50)
    batch = get_batch(data, 8, 4000, torch.Generator().manual_seed(0))
    assert batch.shape == (4000, 8) and batch.dtype == data.dtype
    assert torch.equal(batch[:, 1:] - batch[:, :-1], torch.ones(4000, 7, dtype=torch.long))
    starts = batch[:, 0]
    # every start, the last full window included
    assert starts.min() == 0 and starts.max() == 50 - 8
    # starts are uniform over the 43 possible offsets (chi-square far from its tail)
    counts = torch.bincount(starts, minlength=43).double()
    chi2 = ((counts - 4000 / 43) ** 2 / (4000 / 43)).sum().item()
    assert chi2 < 80, chi2
    again = get_batch(data, 8, 4000, torch.Generator().manual_seed(0))
    assert torch.equal(batch, again)
    assert torch.equal(get_batch(data, 50, 2), torch.stack([data, data]))


def test_get_batch_checks_its_arguments():
    data = torch.arange(10)
    with pytest.raises(ValueError, match="block_size=11"):
        get_batch(data, 11, 2)
    with pytest.raises(ValueError, match="block_size"):
        get_batch(data, 0, 2)
    with pytest.raises(ValueError, match="batch_size"):
        get_batch(data, 2, 0)
    with pytest.raises(ValueError, match=r"\(N,\)"):
        get_batch(data.view(2, 5), 2, 2)


def test_unigram_entropy_is_below_log_v(text):
    """The bar the chapter's model must beat: a model ignoring context scores the unigram entropy."""
    counts = torch.tensor(list(Counter(text).values()), dtype=torch.float64)
    p = counts / counts.sum()
    entropy = -(p * p.log()).sum().item()
    assert 3.0 < entropy < math.log(63) - 0.7


def test_edges_a_mutation_audit_found():
    tok = CharTokenizer("abc")
    with pytest.raises(ValueError, match=r"ids must be integers in \[0, 3\)"):
        tok.decode([-1])  # a negative id is not Python's index from the end
    # n_val = round(0.35 * 10) = round(3.5) = 4 validation ids; int() would give 3
    assert [len(part) for part in train_val_split(torch.arange(10), 0.35)] == [6, 4]
    with pytest.raises(ValueError, match="empty part"):
        train_val_split(torch.arange(10), 0.96)  # round(9.6) = 10: no training data left
