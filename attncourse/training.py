"""The training loop every chapter uses, with a seeded, quiet progress bar.

In a notebook the bar is one line that updates in place (and only its final state is
kept in the built book); in a terminal it is an ordinary tqdm bar.
"""

from __future__ import annotations

import numbers
import sys
import time
from typing import Any, Callable, List, Optional

import torch
from torch import Tensor, nn
from tqdm import tqdm

from ._checks import (
    _is_int,
    fmt_shape,
    require_bool,
    require_floating,
    require_module,
    require_non_negative_int,
    require_positive_int,
    require_rank,
    require_str,
    require_token_ids,
)


def _require_callable(name: str, value: object, form: str) -> None:
    if not callable(value):
        raise TypeError(f"{name} must be a function {form}, got {type(value).__name__}")


__all__ = ["train", "next_token_loss", "ProgressBar"]


def _in_notebook() -> bool:
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


class _BarLine:
    """The bar's text as a notebook output: shown as plain text, without a string's quotes."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


class ProgressBar:
    """A progress bar over ``total`` steps: ``update(loss=...)`` each step, ``close()`` at the end."""

    def __init__(self, total: int, desc: str = "", *, enabled: bool = True) -> None:
        require_non_negative_int("total", total)
        require_str("desc", desc)
        require_bool("enabled", enabled)
        self.total, self.desc, self.enabled = total, desc, enabled
        self.n, self.start, self.postfix = 0, time.perf_counter(), ""
        self._last_draw = -1.0
        self._handle = None
        self._bar = None
        if not enabled:
            return
        if _in_notebook():
            from IPython.display import display

            self._handle = display(_BarLine(self._text()), display_id=True)
        else:
            self._bar = tqdm(total=total, desc=desc, leave=True)

    def _text(self) -> str:
        elapsed = time.perf_counter() - self.start
        return tqdm.format_meter(
            self.n, self.total, elapsed, prefix=self.desc, postfix=self.postfix or None, ncols=80
        )

    def update(self, **postfix: float) -> None:
        """One step done; ``postfix`` are real numbers shown after the bar (``loss=0.25``)."""
        for name, value in postfix.items():
            if isinstance(value, Tensor) and value.numel() == 1 and not value.is_complex():
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(
                    f"{name} must be a real number to show, got {type(value).__name__} {value!r}"
                )
        self.n += 1
        self.postfix = ", ".join(f"{k}={float(v):.4f}" for k, v in postfix.items())
        if self._bar is not None:
            self._bar.set_postfix_str(self.postfix, refresh=False)
            self._bar.update(1)
        elif self._handle is not None and (
            time.perf_counter() - self._last_draw > 0.5 or self.n == self.total
        ):
            self._last_draw = time.perf_counter()
            self._handle.update(_BarLine(self._text()))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self._handle is not None:
            self._handle.update(_BarLine(self._text()))


def train(
    model: nn.Module,
    get_batch: Callable[[int], Any],
    loss_fn: Callable[[nn.Module, Any], Tensor],
    *,
    steps: int,
    optimizer: torch.optim.Optimizer,
    after_step: Optional[Callable[[nn.Module, int], None]] = None,
    progress: bool = True,
    desc: str = "training",
) -> List[float]:
    """Run ``steps`` optimiser steps and return the loss of each.

    Args:
        model: the module to train; left in ``eval()`` mode at the end (in the mode it had
            before the call when an error stops the training). A loss that is not finite
            (NaN or infinite) stops the training with a ``ValueError`` naming the step, before
            it reaches the parameters.
        get_batch: ``get_batch(step)`` returns the batch for that step (seed it for determinism).
        loss_fn: ``loss_fn(model, batch)`` returns the scalar loss to minimise (add any
            regulariser, such as chapter 8's span penalty, here).
        steps: number of optimiser steps.
        optimizer: an optimiser over the model's parameters (a ``ValueError`` if it holds none
            of them: the training would change nothing).
        after_step: ``after_step(model, step)`` runs after each optimiser step (for example
            to clamp parameters back into range).
        progress: show a progress bar.
        desc: the progress bar's label.
    """
    require_module("model", model)
    _require_callable("get_batch", get_batch, "get_batch(step) -> batch")
    _require_callable("loss_fn", loss_fn, "loss_fn(model, batch) -> scalar tensor")
    if after_step is not None:
        _require_callable("after_step", after_step, "after_step(model, step)")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"optimizer must be a torch.optim.Optimizer over the model's parameters, got"
            f" {type(optimizer).__name__}"
        )
    owned = {id(p) for p in model.parameters()}
    if not any(id(p) in owned for group in optimizer.param_groups for p in group["params"]):
        raise ValueError(
            "optimizer holds none of the model's parameters, so training would change nothing:"
            " build it from model.parameters()"
        )
    require_positive_int("steps", steps)
    require_bool("progress", progress)
    require_str("desc", desc)
    was_training = model.training
    model.train()
    losses: List[float] = []
    bar = ProgressBar(int(steps), desc, enabled=progress)
    try:
        for step in range(int(steps)):
            loss = loss_fn(model, get_batch(step))
            _check_loss(loss, step)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if after_step is not None:
                after_step(model, step)
            losses.append(loss.item())
            bar.update(loss=losses[-1])
    except BaseException:
        model.train(was_training)
        raise
    finally:
        bar.close()
    model.eval()
    return losses


def _check_loss(loss: object, step: int) -> None:
    """What ``loss_fn`` returned at ``step``: a finite real scalar that depends on parameters."""
    if not isinstance(loss, Tensor):
        raise TypeError(
            f"loss_fn must return a scalar tensor (to call .backward() on), got"
            f" {type(loss).__name__} at step {step}"
        )
    if not loss.is_floating_point():
        raise TypeError(
            f"loss_fn must return a real floating-point scalar, got dtype {loss.dtype} at step"
            f" {step}"
        )
    if loss.dim() != 0:
        raise ValueError(f"loss_fn must return a scalar, got shape {fmt_shape(loss.shape)}")
    if not loss.requires_grad:
        raise ValueError(
            f"loss_fn returned a loss that does not depend on any trainable parameter at step"
            f" {step} (no grad_fn): was it computed under torch.no_grad(), or from .detach()ed or"
            " .item() values?"
        )
    if not bool(torch.isfinite(loss.detach())):
        raise ValueError(
            f"loss_fn returned {loss.item()} at step {step}: the training diverged (a"
            " learning rate too large, a log of 0, a fully masked row?); the parameters"
            " were not updated with it"
        )


def next_token_loss(logits: Tensor, tokens: Tensor, *, start: int = 0) -> Tensor:
    """Mean cross-entropy of predicting ``tokens[:, t + 1]`` from ``logits[:, t]``, for targets
    at positions ``>= start``.

    Args:
        logits: ``(B, L, V)`` next-token logits of a causal model.
        tokens: ``(B, L)`` the input tokens.
        start: first target position counted (earlier targets lack context in some tasks);
            position 0 has no prediction, so ``start=0`` and ``start=1`` are the same.

    A sequence needs ``L >= 2`` (a length-1 sequence has no next token to predict: the mean
    over no targets would be NaN, so it raises ``ValueError``).
    """
    require_floating("logits", logits)
    require_rank("logits", logits, 3, "(B, L, V)")
    require_token_ids("tokens", tokens, logits.size(-1))
    if tokens.shape != logits.shape[:2]:
        raise ValueError(
            f"logits (B, L, V) and tokens (B, L) disagree: {fmt_shape(logits.shape)} vs"
            f" {fmt_shape(tokens.shape)}"
        )
    if tokens.device != logits.device:
        raise ValueError(
            f"logits and tokens must be on the same device, got {logits.device} and {tokens.device}"
        )
    if tokens.size(1) < 2 or tokens.size(0) == 0:
        raise ValueError(
            f"tokens {fmt_shape(tokens.shape)} holds no next token to predict: it needs B >= 1 and"
            " L >= 2"
        )
    if not _is_int(start):
        raise TypeError(f"start must be an integer, got {type(start).__name__} {start!r}")
    if not 0 <= start < tokens.size(1):
        raise ValueError(
            f"start must be an integer in [0, {tokens.size(1) - 1}] for tokens"
            f" {fmt_shape(tokens.shape)}, got {start!r}"
        )
    first = max(int(start), 1)
    predicted = logits[:, first - 1 : -1]
    return nn.functional.cross_entropy(
        predicted.reshape(-1, predicted.size(-1)), tokens[:, first:].reshape(-1).long()
    )
