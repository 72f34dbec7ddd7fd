"""Every flag of the public API is a bool, and every dtype of a table of real values is floating.

The signatures are read from the code: a parameter whose default is ``True``/``False`` is a
flag. Each flag, given the string ``"False"`` (truthy, the classic silent mistake), must be
refused with a ``TypeError`` that names it; a new flag without a builder below fails the
inventory test, so the class stays covered as the package grows.
"""

import importlib
import inspect

import pytest
import torch

LIBRARY = [
    "attention",
    "masks",
    "multihead",
    "kv_cache",
    "positions",
    "sampling",
    "transformer",
    "training",
    "efficient",
    "adaptive_span",
    "all_attention",
]


def _flags():
    found = {}
    for module_name in LIBRARY:
        module = importlib.import_module(f"attncourse.{module_name}")
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if not callable(obj):
                continue
            try:
                parameters = inspect.signature(obj).parameters.values()
            except (TypeError, ValueError):
                continue
            for p in parameters:
                if isinstance(p.default, bool):
                    found[f"{module_name}.{name}.{p.name}"] = obj
    return found


def _tiny_model():
    from attncourse.transformer import CausalLM

    return CausalLM.standard(5, d_model=8, num_heads=2, d_ff=8, num_layers=1, max_len=8)


def _train_one_step(**kw):
    from attncourse.training import train

    model = _tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    return train(
        model,
        lambda step: torch.tensor([[1, 2, 3]]),
        lambda m, batch: m(batch).sum(),
        steps=1,
        optimizer=optimizer,
        **kw,
    )


def _batch():
    return torch.randn(1, 3, 8)


# how to call each public callable validly, given one keyword argument to add
BUILDERS = {
    "multihead.MultiHeadAttention": (
        lambda **kw: __import__("attncourse.multihead", fromlist=["x"]).MultiHeadAttention(
            8, 2, **kw
        )
    ),
    "sampling.generate": (
        lambda **kw: __import__("attncourse.sampling", fromlist=["x"]).generate(
            _tiny_model(), torch.tensor([[1, 2]]), 1, **kw
        )
    ),
    "transformer.TransformerBlock": (
        lambda **kw: __import__("attncourse.transformer", fromlist=["x"]).TransformerBlock(
            8, 2, 16, **kw
        )
    ),
    "transformer.CausalLM": (
        lambda **kw: __import__("attncourse.transformer", fromlist=["x"]).CausalLM(
            5, 8, 8, [], **kw
        )
    ),
    "training.train": _train_one_step,
    "training.ProgressBar": (
        lambda **kw: __import__("attncourse.training", fromlist=["x"]).ProgressBar(2, **kw)
    ),
    "efficient.tiled_attention": (
        lambda **kw: __import__("attncourse.efficient", fromlist=["x"]).tiled_attention(
            _batch(), _batch(), _batch(), **kw
        )
    ),
    "efficient.tile_schedule": (
        lambda **kw: __import__("attncourse.efficient", fromlist=["x"]).tile_schedule(
            4, 4, block_m=2, block_n=2, **kw
        )
    ),
    "adaptive_span.AdaptiveSpan": (
        lambda **kw: __import__("attncourse.adaptive_span", fromlist=["x"]).AdaptiveSpan(
            2, 8, 2.0, **kw
        )
    ),
    "adaptive_span.AdaptiveSpanAttention": (
        lambda **kw: __import__("attncourse.adaptive_span", fromlist=["x"]).AdaptiveSpanAttention(
            8, 2, 8, 2.0, **kw
        )
    ),
    "all_attention.AllAttention": (
        lambda **kw: __import__("attncourse.all_attention", fromlist=["x"]).AllAttention(
            8, 2, 4, **kw
        )
    ),
    "all_attention.AllAttentionBlock": (
        lambda **kw: __import__("attncourse.all_attention", fromlist=["x"]).AllAttentionBlock(
            8, 2, 4, **kw
        )
    ),
    "all_attention.transformer_layer_parameters": (
        lambda **kw: __import__(
            "attncourse.all_attention", fromlist=["x"]
        ).transformer_layer_parameters(8, 32, **kw)
    ),
    "all_attention.all_attention_layer_parameters": (
        lambda **kw: __import__(
            "attncourse.all_attention", fromlist=["x"]
        ).all_attention_layer_parameters(8, 4, **kw)
    ),
}

FLAGS = _flags()


def test_every_flag_has_a_builder():
    missing = sorted({flag.rsplit(".", 1)[0] for flag in FLAGS} - set(BUILDERS))
    assert not missing, f"add a builder for {missing} to BUILDERS"


@pytest.mark.parametrize("flag", sorted(FLAGS))
def test_a_flag_given_a_string_is_refused_by_name(flag):
    owner, name = flag.rsplit(".", 1)
    build = BUILDERS[owner]
    build(**{name: True})  # the builder is valid with the flag set either way
    build(**{name: False})
    for wrong in ("False", 0, 1, None):
        with pytest.raises(TypeError, match=name):
            build(**{name: wrong})
