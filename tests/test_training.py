"""The training loop and the next-token loss."""

import numpy as np
import pytest
import torch
from torch import nn

from attncourse.training import ProgressBar, next_token_loss, train
from attncourse.transformer import CausalLM


def _tiny_run(steps=40, progress=False, after_step=None):
    torch.manual_seed(0)
    model = CausalLM.standard(6, d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=8)
    data = torch.tensor([[1, 2, 3, 4, 5, 1, 2, 3]] * 4)  # one sequence to memorise
    losses = train(
        model,
        lambda step: data,
        lambda m, batch: next_token_loss(m(batch), batch),
        steps=steps,
        optimizer=torch.optim.Adam(model.parameters(), lr=1e-2),
        after_step=after_step,
        progress=progress,
    )
    return model, losses


def test_loss_decreases_and_runs_are_deterministic():
    model, losses = _tiny_run()
    assert len(losses) == 40
    assert losses[0] > 1.0  # about log(6) before training
    assert losses[-1] < 0.1 * losses[0]
    assert not model.training  # left in eval mode
    assert _tiny_run()[1] == losses  # the same seed gives the same losses


def test_after_step_sees_every_step_in_order():
    seen = []
    _tiny_run(steps=5, after_step=lambda model, step: seen.append((step, model.training)))
    assert seen == [(s, True) for s in range(5)]


def test_progress_bar_in_a_terminal(capsys):
    _tiny_run(steps=3, progress=True)
    err = capsys.readouterr().err
    assert "3/3" in err and "loss=" in err


def test_progress_disabled_prints_nothing(capsys):
    _tiny_run(steps=3, progress=False)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_progress_bar_text():
    bar = ProgressBar(2, "demo", enabled=False)
    bar.update(loss=0.5)
    assert bar.n == 1 and bar.postfix == "loss=0.5000"
    assert bar._text().startswith("demo:") and "1/2" in bar._text()


def test_train_rejects_bad_arguments():
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = torch.randn(3, 2)
    with pytest.raises(ValueError, match="steps must be a positive integer"):
        train(
            model,
            lambda s: batch,
            lambda m, b: m(b).sum(),
            steps=0,
            optimizer=optimizer,
            progress=False,
        )
    with pytest.raises(ValueError, match=r"loss_fn must return a scalar, got shape \(3, 1\)"):
        train(
            model, lambda s: batch, lambda m, b: m(b), steps=1, optimizer=optimizer, progress=False
        )


def test_next_token_loss_against_a_direct_computation():
    torch.manual_seed(1)
    logits = torch.randn(2, 5, 7, dtype=torch.float64)
    tokens = torch.randint(7, (2, 5))
    by_hand = [
        -torch.log_softmax(logits[b, t - 1], -1)[tokens[b, t]]
        for b in range(2)
        for t in range(1, 5)
    ]
    torch.testing.assert_close(next_token_loss(logits, tokens), torch.stack(by_hand).mean())
    later = [
        -torch.log_softmax(logits[b, t - 1], -1)[tokens[b, t]]
        for b in range(2)
        for t in range(3, 5)
    ]
    torch.testing.assert_close(next_token_loss(logits, tokens, start=3), torch.stack(later).mean())
    torch.testing.assert_close(
        next_token_loss(logits, tokens, start=0), next_token_loss(logits, tokens, start=1)
    )


def test_next_token_loss_shape_errors():
    with pytest.raises(ValueError, match=r"\(2, 5, 7\) vs \(2, 4\)"):
        next_token_loss(torch.randn(2, 5, 7), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"logits must have exactly 3 dimensions .* \(2, 5\)"):
        next_token_loss(torch.randn(2, 5), torch.zeros(2, 5, dtype=torch.long))


@pytest.mark.parametrize("start", [5, -1])
def test_next_token_loss_rejects_a_bad_start(start):
    with pytest.raises(ValueError, match="start must be an integer in"):
        next_token_loss(torch.randn(2, 5, 7), torch.zeros(2, 5, dtype=torch.long), start=start)


def test_next_token_loss_start_is_an_integer():
    logits, tokens = torch.randn(2, 5, 7), torch.randint(7, (2, 5))
    with pytest.raises(TypeError, match="start must be an integer, got float"):
        next_token_loss(logits, tokens, start=1.0)
    assert next_token_loss(logits, tokens, start=np.int64(2)) == next_token_loss(
        logits, tokens, start=2
    )


def test_progress_bar_line_shows_as_plain_text_in_a_notebook():
    """A notebook shows the bar's text/plain form: the bar itself, not a quoted Python string."""
    from IPython.core.formatters import PlainTextFormatter

    from attncourse.training import _BarLine

    line = "char GPT: 100%|██████████| 500/500 [00:41<00:00, loss=2.0]"
    shown = PlainTextFormatter()(_BarLine(line))
    assert shown == line
    assert PlainTextFormatter()(line) != line  # what a bare string would have shown: quoted
