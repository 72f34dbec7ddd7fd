"""The GPU benchmark's plumbing, run tiny on the CPU through Triton's interpreter (its figures mean nothing there)."""

import json

import pytest
import torch
from helpers import TINY_GPU_RUN

pytest.importorskip("triton")
from attncourse.benchmarks import kernels as kb  # noqa: E402
from attncourse.benchmarks.common import write_result  # noqa: E402
from attncourse.kernels import flash  # noqa: E402


@pytest.mark.skipif(
    not flash.interpreting(), reason="a GPU is present: the real benchmark runs there"
)
def test_fake_tiny_gpu_run_writes_rows_targets_and_json(tmp_path):
    result = kb.run_gpu(**TINY_GPU_RUN)
    assert result["triton_interpreter"] is True
    rows = result["rows"]
    settings = {(r["impl"], r["causal"], r["pass"]) for r in rows if r["kind"] == "attention"}
    assert settings == {
        (i, c, p)
        for i in kb.GPU_IMPLEMENTATIONS
        for c in (False, True)
        for p in ("forward", "forward+backward")
    }
    assert {r["span"] for r in rows if r["kind"] == "span"} == {4.0, 8.0}
    assert all(r["seconds"] > 0 for r in rows)
    assert set(result["targets"]) == set(kb.TARGETS)
    # no float16 rows were asked for
    assert all(t["measured"] is None for t in result["targets"].values())
    ratios = kb.targets(rows, length=16, dtype="float32", span_length=16, spans=(4.0, 8.0))
    assert all(t["measured"] > 0 and t["met"] in (True, False) for t in ratios.values())
    path = write_result(result, tmp_path, kb.gpu_file_name("Fake GPU"))
    assert path.name == "gpu_benchmark_fake_gpu.json" and json.loads(path.read_text()) == result
    assert "x flash" in kb.gpu_table(rows)


def test_builders_agree():
    """Every implementation the benchmark times computes the same attention, with and without the backward."""
    if not flash.interpreting() and not torch.cuda.is_available():
        pytest.skip("no way to run the kernels")
    device = "cpu" if flash.interpreting() else "cuda"

    def run(impl, causal, backward, **span):
        """What ``impl`` computes on one float32 input of length 24, two heads of 16."""
        return kb.build_gpu(
            impl,
            24,
            causal,
            torch.float32,
            backward,
            batch=1,
            num_heads=2,
            head_dim=16,
            device=device,
            **span,
        )()

    for causal in (False, True):
        outs = [run(i, causal, False) for i in kb.GPU_IMPLEMENTATIONS]
        for out in outs[1:]:
            torch.testing.assert_close(out, outs[0], atol=1e-5, rtol=1e-5)
    full = run("span", True, True, span=24.0, ramp=4.0)
    causal = run("triton", True, True)
    # a span past L is plain causal attention
    torch.testing.assert_close(full, causal, atol=1e-5, rtol=1e-5)
