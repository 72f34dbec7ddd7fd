"""The benchmark command runs end to end at tiny sizes and writes a table and JSON that agree."""

import json

import pytest
import torch

from attncourse.attention import scaled_dot_product_attention
from attncourse.benchmarks import attention as benchmark
from attncourse.benchmarks import measure, positions
from attncourse.benchmarks.__main__ import build_parser, main
from attncourse.benchmarks.common import RESULTS, command_line, write_result
from attncourse.benchmarks.positions import ENCODINGS, load_positions, train_positional
from attncourse.masks import causal_mask


def run_on_the_cpu(tmp_path, *args: str) -> None:
    """``python -m attncourse.benchmarks ARGS`` on the CPU, its results written to ``tmp_path``
    under the tag ``_t``."""
    main([*args, "--device", "cpu", "--output", str(tmp_path), "--tag", "_t"])


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
    run_on_the_cpu(tmp_path, "--lengths", "32", "--layer-lengths", "32")
    result = json.loads((tmp_path / "ch07_benchmark_cpu_t.json").read_text())
    assert result["machine"]["torch"] == torch.__version__
    assert result["command"] == (  # what reruns it, recorded beside the numbers
        "python -m attncourse.benchmarks --lengths 32 --layer-lengths 32 --device cpu"
        f" --output {tmp_path} --tag _t"
    )
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
    main(["--cache", "--contexts", "8", "--device", "cpu", "--tag", "_cwd", "--force"])
    written = json.loads((tmp_path / "ch06_cache_benchmark_cpu_cwd.json").read_text())
    assert written["command"] == (
        "python -m attncourse.benchmarks --cache --contexts 8 --device cpu --tag _cwd --force"
    )
    assert command_line("m", ["--tag", "a b"]) == "python -m m --tag 'a b'"  # quoted for a shell
    assert {p.name: p.stat().st_mtime_ns for p in RESULTS.iterdir()} == committed


def test_cache_benchmark_steps_agree_and_write_json(tmp_path):
    """Both decoding steps give the same logits; the --cache command writes rows that match its table."""
    for context in (1, 9):
        cached = benchmark.build_decode("cached", context)["fn"]()
        uncached = benchmark.build_decode("uncached", context)["fn"]()
        torch.testing.assert_close(cached, uncached, rtol=1e-4, atol=1e-5)
    step = benchmark.build_decode("cached", 9)["fn"]
    # every call starts from the same cache
    torch.testing.assert_close(step(), step(), rtol=0, atol=0)
    # --force: this test's machine may be busy (the refusal is tested below)
    run_on_the_cpu(tmp_path, "--cache", "--contexts", "8", "16", "--force")
    result = json.loads((tmp_path / "ch06_cache_benchmark_cpu_t.json").read_text())
    assert [r["context"] for r in result["rows"]] == [8, 16]
    assert len(result["machine"]["load_average_at_start"]) == 3
    assert len(result["machine"]["load_average_at_end"]) == 3
    for r in result["rows"]:
        assert r["speedup"] == r["uncached_s"] / r["cached_s"]
        times = r["cached_times"]
        assert r["cached_s"] == sorted(times)[len(times) // 2]
        assert r["cached_spread"] == pytest.approx((max(times) - min(times)) / r["cached_s"])
    assert "cached range" in benchmark.cache_table(result["rows"])
    with pytest.raises(ValueError, match="impl"):
        benchmark.build_decode("other", 4)


def test_cache_timings_of_a_busy_machine_are_refused_unless_forced(tmp_path, monkeypatch):
    """The load is checked before the timing and after it; the refusal names load and threshold;
    nothing is written; --force writes, with the load in the file."""
    from attncourse.benchmarks import __main__ as command
    from attncourse.benchmarks import common

    monkeypatch.setattr(common.os, "getloadavg", lambda: (9.5, 9.0, 8.0))
    monkeypatch.setattr(common.os, "cpu_count", lambda: 2)
    with pytest.raises(ValueError, match=r"load average 9.5 at the start > 1 \(0.5 per core x 2"):
        command.main(["--cache", "--contexts", "4", "--device", "cpu", "--output", str(tmp_path)])
    common.require_quiet(common.machine("cpu"), 19)  # 9.5 < 19 x 2 cores: quiet enough
    assert not list(tmp_path.iterdir())
    quiet = {"cpu_cores": 2, "load_average_at_start": [0.4, 1, 1], "load_average_at_end": [3, 1, 1]}
    with pytest.raises(ValueError, match="at the end"):
        common.require_quiet(quiet)  # a machine that got busy during the run
    common.require_quiet(quiet, force=True)
    common.require_quiet({"cpu_cores": 2})  # no load average (Windows): nothing to refuse
    with pytest.raises(ValueError, match="max_load_per_core"):
        common.require_quiet(quiet, 0)
    with pytest.raises(TypeError, match="max_load_per_core"):
        common.require_quiet(quiet, "1")
    command.main(
        ["--cache", "--contexts", "4", "--device", "cpu", "--output", str(tmp_path)] + ["--force"]
    )
    written = json.loads((tmp_path / "ch06_cache_benchmark_cpu.json").read_text())
    assert written["machine"]["load_average_at_start"] == [9.5, 9.0, 8.0]


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
    # the thread count is restored
    assert torch.get_num_threads() == int(max(result["thread_flops_per_s"], key=int))


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


# -- chapter 5's comparison of positional encodings ------------------------------------------

_TINY = dict(d_model=8, num_heads=2, d_ff=8, num_layers=1, context=8, batch_size=2, val_batches=1)


def test_train_positional_is_seeded_and_names_its_arguments():
    first = train_positional("rope", seed=3, steps=2, **_TINY)
    assert first == train_positional("rope", seed=3, steps=2, **_TINY)  # deterministic
    assert 0 < first < 10
    with pytest.raises(ValueError, match="positional"):
        train_positional("rotary", steps=1, **_TINY)
    with pytest.raises(ValueError, match="steps"):
        train_positional("rope", steps=0)


def test_compare_positions_writes_what_the_chapter_prints(tmp_path, monkeypatch):
    monkeypatch.setattr(
        positions, "train_positional", lambda e, *, seed, steps: {"none": 3.0}.get(e, 2.0) + seed
    )
    result = positions.compare_positions(seeds=[0, 1], steps=5)
    assert result["seeds"] == [0, 1] and result["steps"] == 5
    assert result["summary"]["none"]["mean"] == 3.5 and result["summary"]["rope"]["std"] > 0
    assert "load_average_at_start" in result["machine"] or not hasattr(
        __import__("os"), "getloadavg"
    )
    table = positions.positions_table(result)
    assert table.splitlines()[-1].startswith("none")  # the worst last
    write_result(result, tmp_path, positions.NAME)
    assert positions.load_positions(tmp_path) == json.loads((tmp_path / positions.NAME).read_text())
    with pytest.raises(ValueError, match="encodings"):
        positions.compare_positions(encodings=["rotary"])


def test_committed_positions_comparison_is_complete():
    result = load_positions()
    assert set(result["summary"]) == set(ENCODINGS) and len(result["seeds"]) >= 3
    assert all(len(result["runs"][e]) == len(result["seeds"]) for e in ENCODINGS)
