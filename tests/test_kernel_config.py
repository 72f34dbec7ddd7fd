"""The launch settings of chapter 10's kernels per GPU (plain Python: no triton, no GPU)."""

import pytest
import torch

from attncourse.kernels import config
from attncourse.kernels.config import KERNELS, TARGETS, LaunchConfig, launch_config

DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@pytest.mark.parametrize("capability", list(TARGETS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [16, 24, 48, 64, 80, 128])
def test_every_target_gets_tiles_the_kernels_accept(capability, dtype, head_dim):
    if dtype == torch.bfloat16 and capability < (8, 0):
        pytest.skip("refused: tested below")
    for kernel in KERNELS:
        cfg = launch_config(capability, dtype, head_dim, kernel)
        assert isinstance(cfg, LaunchConfig)
        for value in (cfg.block_m, cfg.block_n):
            assert value >= 16 and value & (value - 1) == 0  # tl.dot needs powers of two >= 16
        assert cfg.num_warps in (1, 2, 4, 8) and 1 <= cfg.num_stages <= 4
        # a tile of each operand per stage, a crude lower bound: must fit the target's shared memory
        size = dtype.itemsize * config.block_d(head_dim) * (cfg.block_m + cfg.block_n)
        assert size * cfg.num_stages <= config.shared_memory_per_block(capability)


@pytest.mark.parametrize("kernel", KERNELS)
def test_bfloat16_on_a_t4_is_refused_naming_the_gpu_and_the_dtype(kernel):
    with pytest.raises(ValueError, match=r"bfloat16.*Tesla T4.*7\.5"):
        launch_config((7, 5), torch.bfloat16, 64, kernel, device_name="Tesla T4")
    with pytest.raises(ValueError, match=r"bfloat16.*sm_75"):
        launch_config((7, 5), torch.bfloat16, 64, kernel)
    assert launch_config((8, 0), torch.bfloat16, 64, kernel) == launch_config(
        (8, 0), torch.float16, 64, kernel
    )


def test_shared_memory_per_target():
    kib = {c: config.shared_memory_per_block(c) // 1024 for c in TARGETS}
    assert kib == {(7, 5): 64, (8, 0): 163, (8, 6): 99, (8, 9): 99, (9, 0): 227}
    assert config.shared_memory_per_block((8, 7)) == 163 * 1024
    assert config.shared_memory_per_block((12, 1)) == 99 * 1024  # unknown: the smallest from 8.6 on
    with pytest.raises(ValueError, match="7.5 or later"):
        config.shared_memory_per_block((7, 0))


def test_larger_shared_memory_never_gets_smaller_tiles():
    for dtype in (torch.float16, torch.float32):
        for d in (32, 64, 128):
            for kernel in KERNELS:
                t4, h100 = (launch_config(c, dtype, d, kernel) for c in ((7, 5), (9, 0)))
                assert h100.block_m * h100.block_n >= t4.block_m * t4.block_n
                assert h100.num_stages >= t4.num_stages


@pytest.mark.parametrize(
    "args,error,match",
    [
        (((8,), torch.float16, 64, "forward"), TypeError, "capability"),
        (([8, 0], torch.float16, 64, "forward"), TypeError, "capability"),
        (((8, 0), torch.float64, 64, "forward"), TypeError, "dtype"),
        (((8, 0), torch.int32, 64, "forward"), TypeError, "dtype"),
        (((8, 0), torch.float16, 8, "forward"), ValueError, "head_dim"),
        (((8, 0), torch.float16, 129, "forward"), ValueError, "head_dim"),
        (((8, 0), torch.float16, 64.0, "forward"), ValueError, "head_dim"),
        (((8, 0), torch.float16, True, "forward"), ValueError, "head_dim"),
        (((8, 0), torch.float16, 64, "backward"), ValueError, "kernel"),
        (((6, 1), torch.float16, 64, "forward"), ValueError, "7.5"),
    ],
)
def test_bad_arguments_are_named(args, error, match):
    with pytest.raises(error, match=match):
        launch_config(*args)
