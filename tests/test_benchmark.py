"""The benchmark command runs end to end at tiny sizes and writes a table and JSON that agree."""

import json

import pytest
import torch

from attncourse.attention import scaled_dot_product_attention
from attncourse.benchmarks import attention as benchmark
from attncourse.benchmarks import measure
from attncourse.benchmarks.__main__ import build_parser, main
from attncourse.benchmarks.common import RESULTS, write_result
from attncourse.masks import causal_mask


def test_builders_compute_the_same_attention():
    for causal in (False, True):
        outputs = [benchmark.build(impl, 40, causal)["fn"]() for impl in benchmark.IMPLEMENTATIONS]
        q, k, v = benchmark.build("naive", 40, causal)["inputs"]
        expected = scaled_dot_product_attention(q, k, v, causal_mask(40) if causal else None)[0]
        for out in outputs:
            torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
        layers = [benchmark.build_layer(impl, 30, causal)["fn"]() for impl in ("ours", "torch")]
        torch.testing.assert_close(layers[0], layers[1], atol=1e-5, rtol=1e-4)


def test_command_writes_json(tmp_path, capsys, monkeypatch):
    # Tiny all through: the machine's ceiling from a 64 x 64 product, not the command's 2048, and
    # each builder's peak memory measured in a fresh process once (the command's target and its
    # JSON kwargs, as cpu_peak_memory sends them; test_measure.py checks the measure itself).
    # The other rows' peaks run the same child code in this process: 2 interpreters importing
    # torch, not 10.
    seen = []

    def peak_once_per_builder(target, kwargs, **options):
        if target in seen:
            return measure._child_peak(target, json.loads(json.dumps(kwargs)))
        seen.append(target)
        return measure.cpu_peak_memory(target, kwargs, **options)

    monkeypatch.setattr(benchmark, "cpu_peak_memory", peak_once_per_builder)
    monkeypatch.setattr(
        benchmark,
        "matmul_throughput",
        lambda size, **kw: measure.matmul_throughput(64, **kw),
    )
    main(
        [
            "--lengths",
            "32",
            "--layer-lengths",
            "32",
            "--device",
            "cpu",
            "--output",
            str(tmp_path),
            "--tag",
            "_t",
        ]
    )
    result = json.loads((tmp_path / "ch07_benchmark_cpu_t.json").read_text())
    assert result["machine"]["torch"] == torch.__version__
    rows = result["rows"]
    assert {(r["impl"], r["causal"]) for r in rows if r["kind"] == "attention"} == {
        (impl, c) for impl in benchmark.IMPLEMENTATIONS for c in (False, True)
    }
    assert all(r["seconds"] > 0 and r["peak_bytes"] >= 0 for r in rows)
    printed = capsys.readouterr().out
    assert "tiled" in printed and "x torch" in printed
    assert benchmark.load("cpu", tmp_path, "_t") == result
    assert seen == [
        "attncourse.benchmarks.attention:build",
        "attncourse.benchmarks.attention:build_layer",
    ]


def test_command_writes_to_the_working_directory_not_the_package(tmp_path, monkeypatch):
    """Without --output, results land where the command runs; the committed ones stay untouched."""
    committed = {p.name: p.stat().st_mtime_ns for p in RESULTS.iterdir()}
    monkeypatch.chdir(tmp_path)
    main(["--cache", "--contexts", "8", "--device", "cpu", "--tag", "_cwd"])
    assert (tmp_path / "ch06_cache_benchmark_cpu_cwd.json").is_file()
    assert {p.name: p.stat().st_mtime_ns for p in RESULTS.iterdir()} == committed


def test_cache_benchmark_steps_agree_and_write_json(tmp_path):
    """Both decoding steps give the same logits; the --cache command writes rows that match its table."""
    for context in (1, 9):
        cached = benchmark.build_decode("cached", context)["fn"]()
        uncached = benchmark.build_decode("uncached", context)["fn"]()
        torch.testing.assert_close(cached, uncached, rtol=1e-4, atol=1e-5)
    step = benchmark.build_decode("cached", 9)["fn"]
    torch.testing.assert_close(
        step(), step(), rtol=0, atol=0
    )  # every call starts from the same cache
    main(
        [
            "--cache",
            "--contexts",
            "8",
            "16",
            "--device",
            "cpu",
            "--output",
            str(tmp_path),
            "--tag",
            "_t",
        ]
    )
    result = json.loads((tmp_path / "ch06_cache_benchmark_cpu_t.json").read_text())
    assert [r["context"] for r in result["rows"]] == [8, 16]
    for r in result["rows"]:
        assert r["speedup"] == r["uncached_s"] / r["cached_s"]
    with pytest.raises(ValueError, match="impl"):
        benchmark.build_decode("other", 4)


def test_constants_at_tiny_sizes(tmp_path, capsys):
    result = benchmark.constants(sizes=(8, 16), repeats=1, score_length=16)
    assert set(result["matmul_flops_per_s"]) == {"8", "16"}
    assert all(v > 0 for v in result["matmul_flops_per_s"].values())
    assert (
        result["softmax_flops_per_s"] > 0
        and result["qk_flops_per_s"] > 0
        and result["copy_bytes_per_s"] > 0
    )
    assert "1" in result["thread_flops_per_s"]
    assert torch.get_num_threads() == int(
        max(result["thread_flops_per_s"], key=int)
    )  # the thread count is restored


def test_committed_constants_load():
    result = benchmark.load_constants()
    assert {
        "machine",
        "matmul_flops_per_s",
        "softmax_flops_per_s",
        "qk_flops_per_s",
        "copy_bytes_per_s",
    } <= set(result)


def test_committed_cache_benchmark_loads_and_rejects_a_missing_one(tmp_path):
    result = benchmark.load_cache()
    assert {"machine", "device", "model", "rows"} <= set(result) and result["device"] == "cpu"
    for row in result["rows"]:
        assert row["speedup"] == pytest.approx(row["uncached_s"] / row["cached_s"])
    with pytest.raises(ValueError, match="tag='_nowhere'"):
        benchmark.load_cache(tag="_nowhere")
    with pytest.raises(TypeError, match="device and tag must be strings"):
        benchmark.load_cache(device=0)


def test_command_line_of_the_kernel_benchmarks():
    args = build_parser().parse_args(
        [
            "--device",
            "cuda",
            "--gpu-lengths",
            "512",
            "1024",
            "--gpu-dtypes",
            "bfloat16",
            "--span-time",
        ]
    )
    assert (
        args.gpu_lengths == [512, 1024]
        and args.gpu_dtypes == ["bfloat16"]
        and args.span_time
        and not args.no_kernels
    )
    defaults = build_parser().parse_args([])
    assert defaults.gpu_lengths[0] == 512 and defaults.gpu_lengths[-1] == 32768
    assert defaults.gpu_dtypes == ["float16", "bfloat16"]


def test_gpu_file_name():
    from attncourse.benchmarks.kernels import gpu_file_name

    assert gpu_file_name("NVIDIA H100 80GB HBM3") == "gpu_benchmark_nvidia_h100_80gb_hbm3.json"
    assert gpu_file_name("Tesla T4") == "gpu_benchmark_tesla_t4.json"


def test_span_time_writes_json(tmp_path):
    from attncourse.benchmarks import kernels as kb

    result = kb.run_span_time(
        length=96, spans=(4, 96), embed_dim=32, num_heads=2, ramp=8.0, repeats=1
    )
    rows = result["rows"]
    assert (
        [r["span"] for r in rows] == [4, 96] and rows[0]["window"] == 12 and rows[1]["window"] == 96
    )
    assert rows[0]["cells"] < rows[1]["cells"] and all(r["seconds"] > 0 for r in rows)
    path = write_result(result, tmp_path, "span_time_cpu.json")
    assert kb.load_span_time(tmp_path) == json.loads(path.read_text()) == result
    assert "x longest" in kb.span_table(result)


def test_committed_span_time_falls_with_the_span():
    from attncourse.benchmarks import kernels as kb

    result = kb.load_span_time()
    assert result["length"] == 4096
    seconds = [r["seconds"] for r in sorted(result["rows"], key=lambda r: r["span"])]
    assert seconds == sorted(seconds) and seconds[0] < 0.5 * seconds[-1]
