"""The benchmark command runs end to end at tiny sizes and writes a table and JSON that agree."""
import json

import pytest
import torch

from attncourse import benchmark
from attncourse.attention import scaled_dot_product_attention
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


def test_command_writes_json(tmp_path, capsys):
    benchmark.main(["--lengths", "32", "--layer-lengths", "32", "--device", "cpu", "--output", str(tmp_path), "--tag", "_t"])
    result = json.loads((tmp_path / "ch05_benchmark_cpu_t.json").read_text())
    assert result["machine"]["torch"] == torch.__version__
    rows = result["rows"]
    assert {(r["impl"], r["causal"]) for r in rows if r["kind"] == "attention"} == {
        (impl, c) for impl in benchmark.IMPLEMENTATIONS for c in (False, True)
    }
    assert all(r["seconds"] > 0 and r["peak_bytes"] >= 0 for r in rows)
    printed = capsys.readouterr().out
    assert "tiled" in printed and "x torch" in printed
    assert benchmark.load("cpu", tmp_path, "_t") == result


def test_cache_benchmark_steps_agree_and_write_json(tmp_path):
    """Both decoding steps give the same logits; the --cache command writes rows that match its table."""
    for context in (1, 9):
        cached = benchmark.build_decode("cached", context)["fn"]()
        uncached = benchmark.build_decode("uncached", context)["fn"]()
        torch.testing.assert_close(cached, uncached, rtol=1e-4, atol=1e-5)
    step = benchmark.build_decode("cached", 9)["fn"]
    torch.testing.assert_close(step(), step(), rtol=0, atol=0)  # every call starts from the same cache
    benchmark.main(["--cache", "--contexts", "8", "16", "--device", "cpu", "--output", str(tmp_path), "--tag", "_t"])
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
    assert result["softmax_flops_per_s"] > 0 and result["qk_flops_per_s"] > 0 and result["copy_bytes_per_s"] > 0
    assert "1" in result["thread_flops_per_s"]
    assert torch.get_num_threads() == int(max(result["thread_flops_per_s"], key=int))  # the thread count is restored


def test_committed_constants_load():
    result = benchmark.load_constants()
    assert {"machine", "matmul_flops_per_s", "softmax_flops_per_s", "qk_flops_per_s", "copy_bytes_per_s"} <= set(result)
