"""Chapter 10's host code on the CPU under a faked T4, A100, H100: SDPA backend, launch config.

PyTorch's flash SDPA backend needs compute capability 8.0: on Colab's T4 (7.5), asking for it
alone raises "No available kernel". The package picks the fastest backend each GPU has.
"""

import pytest
import torch
import torch.nn.functional as F

from attncourse.benchmarks import kernels as kernel_timing
from attncourse.kernels import sdpa

GPUS = {"T4": (7, 5), "A100": (8, 0), "H100": (9, 0)}


@pytest.fixture
def fake_gpu(monkeypatch):
    """Make torch.cuda answer as a GPU of the given capability would (no kernel is launched)."""

    def install(name):
        capability = GPUS[name]
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: f"fake {name}")
        return capability

    return install


@pytest.mark.parametrize(
    "gpu, dtype, expected",
    [
        ("T4", torch.float16, "efficient"),  # no flash backend before 8.0
        ("T4", torch.float32, "efficient"),
        ("T4", torch.bfloat16, "math"),  # no bfloat16 before 8.0 but in the math backend
        ("A100", torch.float16, "flash"),
        ("A100", torch.bfloat16, "flash"),
        ("A100", torch.float32, "efficient"),  # flash takes only half precision
        ("H100", torch.float16, "flash"),
        ("H100", torch.float32, "efficient"),
    ],
)
def test_backend_per_gpu(fake_gpu, gpu, dtype, expected):
    fake_gpu(gpu)
    assert sdpa.sdpa_backend_for("cuda", dtype, 64) == expected
    assert sdpa.sdpa_backend(GPUS[gpu], dtype, 64) == expected


def test_head_size_limits():
    assert sdpa.sdpa_backend((9, 0), torch.float16, 256) == "flash"
    assert sdpa.sdpa_backend((9, 0), torch.float16, 512) == "efficient"  # flash stops at 256
    # flash takes any head size up to 256 (sdp_utils.cpp's check_head_dim_size_flash: the
    # multiple of 8 is its nested-tensor variant's rule); the memory-efficient kernel wants
    # multiples of 8 in half precision, so a T4 falls back to math at d = 60
    assert sdpa.sdpa_backend((9, 0), torch.float16, 60) == "flash"
    assert sdpa.sdpa_backend((7, 5), torch.float16, 60) == "math"
    assert sdpa.sdpa_backend((6, 0), torch.float16, 64) == "efficient"
    assert sdpa.sdpa_backend((3, 7), torch.float16, 64) == "math"


def test_cpu_leaves_the_choice_to_torch(fake_gpu):
    fake_gpu("H100")  # a GPU present does not change what CPU tensors get
    assert sdpa.sdpa_backend_for("cpu", torch.float32, 64) == "default"


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="capability"):
        sdpa.sdpa_backend("8.0", torch.float16, 64)
    with pytest.raises(TypeError, match="dtype"):
        sdpa.sdpa_backend((8, 0), torch.int32, 64)
    with pytest.raises(ValueError, match="head_dim"):
        sdpa.sdpa_backend((8, 0), torch.float16, 0)
    with pytest.raises(ValueError, match="backend"):
        with sdpa.restrict_sdpa("cudnnn"):
            pass
    with pytest.raises(TypeError, match="is_causal"):
        sdpa.torch_choice(
            torch.ones(1, 1, 2, 8), torch.ones(1, 1, 2, 8), torch.ones(1, 1, 2, 8), is_causal=1
        )


def test_torch_choice_names_what_torch_runs():
    """On CPU tensors torch picks its CPU flash kernel; restricted to the backend it names,
    the call gives the unrestricted call's output."""
    q, k, v = torch.randn(3, 1, 2, 5, 16).unbind(0)
    choice = sdpa.torch_choice(q, k, v)
    assert choice == "flash"
    with sdpa.restrict_sdpa(choice):
        restricted = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(restricted, F.scaled_dot_product_attention(q, k, v), rtol=0, atol=0)


def test_cudnn_is_a_backend_restrict_takes():
    q = torch.randn(1, 1, 2, 8)
    with pytest.raises(RuntimeError, match="No viable backend"):  # no cuDNN attention on a CPU
        with sdpa.restrict_sdpa("cudnn"):
            F.scaled_dot_product_attention(q, q, q)
    with pytest.raises(ValueError, match="query"):
        sdpa.torch_attention(torch.ones(3, 4), torch.ones(3, 4), torch.ones(3, 4))


def test_restrict_really_restricts():
    """On CPU tensors torch has the flash (CPU) and math backends, not the efficient one."""
    q, k, v = (torch.randn(1, 2, 8, 16) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(
        sdpa.torch_attention(q, k, v, is_causal=True, backend="math"), expected
    )
    torch.testing.assert_close(sdpa.torch_attention(q, k, v, is_causal=True), expected)
    with pytest.raises(RuntimeError, match="No viable backend|No available kernel"):
        sdpa.torch_attention(q, k, v, backend="efficient")


def test_chapter_cell_on_the_cpu(fake_gpu):
    """The GPU cell's function end to end on the CPU: the interpreter's kernel against torch's
    default backend, a line that says it is no GPU timing, and a ratio of the two medians."""
    pytest.importorskip("triton")
    from attncourse.kernels import flash

    if not flash.interpreting():
        pytest.skip("needs Triton's interpreter on the CPU")
    fake_gpu("T4")  # the device is the CPU: the fake GPU must not leak into the choice
    result = kernel_timing.time_triton_against_torch(
        "cpu", batch=1, heads=1, length=32, head_dim=16, dtype=torch.float32, repeats=1, warmup=0
    )
    assert result["backend"] == "default"
    assert "not a GPU timing" in result["line"] and "torch SDPA (default backend)" in result["line"]
    assert result["ratio"] == pytest.approx(result["triton_ms"] / result["torch_ms"])


def test_chapter_cell_times_each_implementation_under_its_own_name(monkeypatch):
    """With a fake clock that the Triton call advances by 4 ms and torch's by 1 ms, the result
    says Triton 4 ms, torch 1 ms, ratio 4: the labels cannot be swapped."""
    pytest.importorskip("triton")
    from attncourse.benchmarks import measure
    from attncourse.kernels import flash

    clock = [0.0]

    def takes(seconds):
        def run(*args, **kwargs):
            clock[0] += seconds
            return args[0]

        return run

    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(flash, "flash_attention", takes(4e-3))
    monkeypatch.setattr(kernel_timing, "torch_attention", takes(1e-3))
    result = kernel_timing.time_triton_against_torch(
        "cpu", batch=1, heads=1, length=8, head_dim=4, dtype=torch.float32, repeats=3
    )
    assert result["triton_ms"] == pytest.approx(4.0) and result["torch_ms"] == pytest.approx(1.0)
    assert result["ratio"] == pytest.approx(4.0)
    assert "Triton 4.00 ms" in result["line"] and "(default backend) 1.00 ms" in result["line"]


def test_benchmark_uses_the_same_choice(monkeypatch):
    """kernel_benchmark's "torch-flash" implementation runs on the backend sdpa picks: told
    "efficient", which CPU tensors lack, it fails as a T4 asked for "flash" would."""
    from attncourse.benchmarks import kernels as kernel_benchmark

    fn = kernel_benchmark.build_gpu(
        "torch-flash",
        16,
        True,
        torch.float32,
        False,
        batch=1,
        num_heads=1,
        head_dim=16,
        device="cpu",
    )
    assert fn().shape == (1, 1, 16, 16)
    monkeypatch.setattr(sdpa, "sdpa_backend_for", lambda device, dtype, head_dim: "efficient")
    with pytest.raises(RuntimeError, match="No viable backend|No available kernel"):
        fn()


class FakeCudaTensor:
    """Stands in for a CUDA tensor where the launcher only asks its device, dtype and size."""

    def __init__(self, dtype, shape=(4, 16, 4096, 64)):
        self.device, self.dtype, self.shape = torch.device("cuda", 0), dtype, shape

    def size(self, dim):
        return self.shape[dim]


@pytest.mark.parametrize("gpu", GPUS)
def test_launcher_asks_the_gpu_for_its_config(fake_gpu, gpu):
    """The launcher's host code takes the tiles, warps and stages of the tensors' GPU from
    config.launch_config, and refuses bfloat16 on a T4 naming it."""
    pytest.importorskip("triton")
    from attncourse.kernels import config, flash_launch

    capability = fake_gpu(gpu)
    for kernel in config.KERNELS:
        for dtype in (torch.float16, torch.float32):
            for d in (64, 128):
                got = flash_launch._config(
                    FakeCudaTensor(dtype, (4, 16, 4096, d)), kernel, None, None
                )
                assert got == config.launch_config(capability, dtype, d, kernel), (
                    gpu,
                    kernel,
                    dtype,
                    d,
                )
        chosen = flash_launch._config(FakeCudaTensor(torch.float16), kernel, 128, None)
        assert chosen.block_m == 128  # the caller's block size wins
        chosen = flash_launch._config(FakeCudaTensor(torch.float16), kernel, None, 128)
        assert chosen.block_n == 128  # either of them
    if gpu == "T4":
        with pytest.raises(ValueError, match="bfloat16.*T4"):
            flash_launch._config(FakeCudaTensor(torch.bfloat16), "forward", None, None)
    else:
        assert (
            flash_launch._config(FakeCudaTensor(torch.bfloat16), "forward", None, None).num_warps
            >= 4
        )
