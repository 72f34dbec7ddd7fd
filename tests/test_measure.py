"""Measurement helpers: FLOP formulas against counted products, memory against known allocations."""

import sys

import pytest
import torch

from attncourse.benchmarks import measure
from attncourse.benchmarks.measure import (
    Timing,
    attention_flops,
    autograd_pass,
    cpu_peak_memory,
    cuda_peak_memory,
    fit_slope,
    multihead_flops,
    time_call,
    time_interleaved,
)
from attncourse.masks import causal_mask


def allocate(size_mib: int, touch: bool = True):
    """Builder for cpu_peak_memory: a call that allocates ``size_mib`` MiB of float32."""
    n = size_mib * 2**20 // 4
    return {
        "fn": (lambda: torch.ones(n)) if touch else (lambda: torch.empty(n)),
        "warmup": lambda: torch.ones(16),
    }


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_cpu_peak_memory_sees_a_known_allocation(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(__import__("pathlib").Path(__file__).parent))
    peak = cpu_peak_memory("test_measure:allocate", {"size_mib": 200})
    assert 195 * 2**20 <= peak <= 215 * 2**20
    untouched = cpu_peak_memory("test_measure:allocate", {"size_mib": 200, "touch": False})
    assert untouched < 20 * 2**20  # the documented limit: untouched pages are not resident


def per_thread(size_mib: int):
    """Builder for cpu_peak_memory: ``size_mib`` MiB for each torch thread of the process."""
    return allocate(size_mib * torch.get_num_threads())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_cpu_peak_memory_runs_on_the_callers_threads(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(__import__("pathlib").Path(__file__).parent))
    threads = torch.get_num_threads()
    try:
        peaks = {}
        for n in (1, 2):
            torch.set_num_threads(n)
            peaks[n] = cpu_peak_memory("test_measure:per_thread", {"size_mib": 60})
    finally:
        torch.set_num_threads(threads)
    assert 55 * 2**20 <= peaks[1] <= 75 * 2**20
    assert 115 * 2**20 <= peaks[2] <= 135 * 2**20


def test_cpu_peak_memory_reports_errors():
    with pytest.raises(RuntimeError, match="measuring process failed"):
        cpu_peak_memory("attncourse.benchmarks.measure:no_such_builder", {})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
def test_cuda_peak_memory():
    peak = cuda_peak_memory(lambda: torch.ones(2**20, device="cuda"))
    assert peak >= 4 * 2**20


def test_attention_flops_counts_products():
    assert attention_flops(2, 3, 5, 7, 4, 6) == 2 * 3 * 5 * 7 * 2 * (4 + 6)
    # causal: count the allowed pairs of causal_mask itself
    for L, S in [(6, 6), (4, 9), (9, 4)]:
        pairs = int(causal_mask(L, S).sum())
        assert attention_flops(1, 1, L, S, 8, causal=True) == 2 * pairs * 16
    assert attention_flops(1, 1, 1000, 1000, 64, causal=True) / attention_flops(
        1, 1, 1000, 1000, 64
    ) == pytest.approx(0.5, abs=1e-3)


def test_multihead_flops_matches_counted_matmuls():
    """Count the multiply-adds of the layer's matrix products with a dispatch-level counter."""
    from torch.utils.flop_counter import FlopCounterMode

    from attncourse.multihead import MultiHeadAttention

    layer = MultiHeadAttention(32, 4).double()
    x, y = torch.randn(2, 6, 32, dtype=torch.float64), torch.randn(2, 9, 32, dtype=torch.float64)
    with FlopCounterMode(display=False) as counter:
        layer(x, y, y)
    assert counter.get_total_flops() == multihead_flops(2, 6, 9, 32, 4)
    # causal: the four projections and the products of the pairs the mask allows, counted from
    # the mask itself (query i sees key j when j <= i + S - L)
    pairs = int(causal_mask(6, 9).sum())
    projections = 2 * 2 * 32 * 32 * (6 + 9 + 9 + 6)
    assert multihead_flops(2, 6, 9, 32, 4, causal=True) == projections + 2 * 2 * pairs * 32 * 2
    with pytest.raises(ValueError, match="num_heads"):
        multihead_flops(1, 2, 2, 10, 3)


def test_timing_helpers():
    calls = []
    timing = time_call(lambda: calls.append(1), repeats=4, warmup=2)
    assert len(calls) == 6 and len(timing.times) == 4 and timing.median >= 0
    order = []
    result = time_interleaved(
        {"a": lambda: order.append("a"), "b": lambda: order.append("b")}, repeats=3, warmup=0
    )
    assert order == ["a", "b"] * 3 and set(result) == {"a", "b"}
    with pytest.raises(ValueError, match="repeats"):
        time_call(lambda: None, repeats=0)


def test_timers_record_the_time_each_call_takes(monkeypatch):
    # a fake clock that only the timed functions advance: each time must be its call's own
    # duration (not a clock reading, not a neighbour's), and the median the middle one
    clock = [100.0]
    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock[0])

    def takes(seconds):
        return lambda: clock.__setitem__(0, clock[0] + seconds.pop(0))

    timing = time_call(takes([50.0, 3.0, 1.0, 2.0, 10.0]), repeats=4, warmup=1)
    assert timing.times == [3.0, 1.0, 2.0, 10.0] and timing.median == 2.5
    assert Timing([1.0, 10.0, 2.0]).median == 2.0 and Timing([4.0, 2.0, 3.0]).spread == 2 / 3
    result = time_interleaved({"a": takes([1.0, 2.0]), "b": takes([5.0, 7.0])}, repeats=2, warmup=0)
    assert result["a"].times == [1.0, 2.0] and result["b"].times == [5.0, 7.0]


def test_autograd_pass_runs_forward_alone_or_with_its_backward():
    x = torch.arange(3.0, requires_grad=True)
    forward = lambda: x * x
    out = autograd_pass(forward, False, (x,))()
    assert not out.requires_grad and x.grad is None
    seen = []
    x.register_hook(lambda grad: seen.append(grad.clone()))
    assert torch.equal(autograd_pass(forward, True, (x,))(), x * x) and x.grad is None
    autograd_pass(forward, True, (x,), dout=torch.tensor([1.0, 0.0, 2.0]))()
    # the gradient of out.float().sum(), then of dout; the leaves' gradients cleared each time
    assert [g.tolist() for g in seen] == [[0.0, 2.0, 4.0], [0.0, 0.0, 8.0]] and x.grad is None
    with pytest.raises(TypeError, match="backward"):
        autograd_pass(forward, "no", (x,))
    with pytest.raises(TypeError, match="forward"):
        autograd_pass(x, True, (x,))


def test_fit_slope_recovers_a_power_law():
    from attncourse.benchmarks.measure import fit_slope

    lengths = [128, 256, 512, 1024]
    assert fit_slope(lengths, [3e-9 * n**2 for n in lengths]) == pytest.approx(2.0)
    assert fit_slope(lengths, [5.0 * n for n in lengths]) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        fit_slope([1], [1])


@pytest.mark.parametrize(
    "lengths, values, words",
    [
        ([8, 8, 8], [1.0, 2.0, 3.0], "all be equal"),
        ([0, 8], [1.0, 2.0], "lengths must be positive"),
        ([8, 16], [1.0, 0.0], "values must be positive"),
        ([8, float("nan")], [1.0, 2.0], "lengths"),
        ([8, 16], [1.0, -2.0], "values"),
    ],
)
def test_fit_slope_refuses_what_has_no_log_log_slope(lengths, values, words):
    with pytest.raises(ValueError, match=words):
        fit_slope(lengths, values)
