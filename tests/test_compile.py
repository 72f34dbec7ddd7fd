"""The compile harness (tools/kernel_compile) and chapter 10's reader of its results
(attncourse.kernels.compile): chapter 10's kernels compiled, no GPU.

The harness needs triton imported without its interpreter, which conftest switches on for the
kernel tests, so the compiling runs in a child process (a fresh interpreter without
TRITON_INTERPRET) and reports JSON.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

pytest.importorskip("triton")

from project_tools import TOOLS, tool_package

from attncourse.kernels import compile as reader  # chapter 10's reader of the results

kc = tool_package("kernel_compile")  # the harness: no triton import at module level


def run_child(script: str, timeout: int = 600) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# The head dimension of the forward kernels compiled below: what tl.dot becomes on each target,
# the counts ptxas reports and the cache do not depend on it, and at 32 the six compiles cost
# half their time at 64 (sm_75's float16 kernel, tl.dot unrolled into FMAs: 3 s, not 6).
HEAD_DIM = 32


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    cache = tmp_path_factory.mktemp("compile-cache")
    return run_child(f"""
        import json, torch, triton
        from triton.runtime.driver import driver
        from triton import knobs
        import sys
        sys.path.insert(0, {str(TOOLS)!r})
        import kernel_compile as kc
        from kernel_compile.specs import compile_specs
        cache = {str(cache)!r}
        out = {{}}
        def state():
            return (driver._active, knobs.runtime.jit_cache_hook, torch.cuda.is_available,
                    torch.cuda.get_device_capability)
        before = state()
        launches = kc.capture_launches("sm_80", "causal", torch.float16, 64)
        out["kernels"] = [l.kernel for l in launches]
        out["restored"] = before == state()
        forward = {{}}
        for target in ("sm_75", "sm_80", "sm_90"):
            for dtype in ("float16", "float32"):
                launch = kc.capture_launches(target, "causal", dtype, {HEAD_DIM},
                                             backward=False)[0]
                r = kc.compile_launch(launch, target, cache=cache)
                forward[target + " " + dtype] = dict(
                    r.summary(), sass_has_hmma="HMMA" in r.sass, sass_has_hgmma="HGMMA" in r.sass,
                    cached=r.cached)
        out["forward"] = forward
        first = kc.capture_launches("sm_80", "causal", "float16", {HEAD_DIM}, backward=False)[0]
        again = kc.compile_launch(first, "sm_80", cache=cache)
        out["again_cached"] = again.cached
        out["again_summary"] = again.summary()
        from attncourse.kernels import flash
        agree = []
        requests = [("sm_80", "causal", "float16", 64), ("sm_75", "span", "float32", 128),
                    ("sm_90", "lengths", "bfloat16", 32), ("sm_86", "plain", "float16", 48)]
        for target, variant, dtype, d in requests:
            specs = compile_specs(kc.TARGETS[target].capability, kc.DTYPES[dtype], d,
                                        causal=variant == "causal", lengths=variant == "lengths",
                                        span=variant == "span", batch=2, heads=16, length=256)
            for launch in kc.capture_launches(target, variant, dtype, d):
                fn, signature, constants, attrs, options = specs[launch.kernel]
                agree.append([target, variant, launch.kernel, fn is launch.function(),
                              signature == launch.signature, constants == launch.constants,
                              attrs == {{k: v for k, v in launch.attrs.items() if v}},
                              options == {{k: launch.options[k] for k in options}}])
        out["agree"] = agree
        try:
            kc.capture_launches("sm_75", "plain", "bfloat16", 64)
            out["refused"] = None
        except (TypeError, ValueError) as error:
            out["refused"] = str(error)
        print(json.dumps(out))
    """)


def test_capture_sees_the_launchers_four_kernels(facts):
    assert len(facts["kernels"]) == 4
    assert facts["kernels"][0] == "forward"
    assert any("dq" in name for name in facts["kernels"]) and any(
        "dkdv" in name or "dk" in name for name in facts["kernels"]
    )


def test_capture_restores_triton_and_torch(facts):
    assert facts["restored"]


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_tl_dot_per_architecture(facts, dtype):
    """What Triton 3.7's AccelerateMatmul does with tl.dot: below sm_80 the FMA path, sm_80-89
    mma.sync (MMA v2, HMMA in SASS), sm_90 wgmma (MMA v3, HGMMA); float32 in "ieee" precision
    never reaches the tensor cores."""
    sm75, sm80, sm90 = (facts["forward"][f"{t} {dtype}"] for t in ("sm_75", "sm_80", "sm_90"))
    assert sm75["tensor_cores"] == "none (FMA)" and not sm75["sass_has_hmma"]
    if dtype == "float16":
        assert sm80["tensor_cores"] == "mma.sync" and sm80["mma_version"] == 2 and sm80["hmma"] > 0
        assert sm90["tensor_cores"] == "wgmma" and sm90["mma_version"] == 3 and sm90["hgmma"] > 0
    else:
        for r in (sm80, sm90):
            assert r["tensor_cores"] == "none (FMA)" and r["hmma"] == r["hgmma"] == 0


def test_results_are_complete_and_consistent(facts):
    for name, r in facts["forward"].items():
        target = kc.TARGETS[r["target"]]
        assert r["fits"] == (r["shared"] <= target.shared_per_block)
        assert 16 <= r["registers"] <= 255, name
        assert r["spill_stores"] >= 0 and r["spill_loads"] >= 0 and r["sass_instructions"] > 100
        assert all(b >= 16 for b in r["blocks"])


def test_second_compile_comes_from_the_cache(facts):
    assert facts["again_cached"]
    first = facts["forward"]["sm_80 float16"]
    assert {k: v for k, v in facts["again_summary"].items()} == {
        k: v for k, v in first.items() if k not in ("sass_has_hmma", "sass_has_hgmma", "cached")
    }


def test_targets_match_the_cuda_programming_guide():
    """Shared memory per thread block (CUDA C++ Programming Guide, technical specifications per
    compute capability): 64 KiB on 7.5, 163 KiB on 8.0, 99 KiB on 8.6 and 8.9, 227 KiB on 9.0."""
    kib = {name: t.shared_per_block // 1024 for name, t in kc.TARGETS.items()}
    assert kib == {"sm_75": 64, "sm_80": 163, "sm_86": 99, "sm_89": 99, "sm_90": 227}
    assert [t.bf16 for t in kc.TARGETS.values()] == [False, True, True, True, True]
    assert kc.TARGETS["sm_86"].arch == 86


def test_bad_requests_are_named():
    with pytest.raises(ValueError, match="target"):
        kc.capture_launches("sm_70", "plain", torch.float16, 64)
    with pytest.raises(ValueError, match="variant"):
        kc.capture_launches("sm_80", "sliding", torch.float16, 64)
    with pytest.raises(ValueError, match="dtype"):
        kc.capture_launches("sm_80", "plain", "float64", 64)
    with pytest.raises(TypeError, match="dtype"):
        kc.capture_launches("sm_80", "plain", torch.float64, 64)
    with pytest.raises(TypeError, match="launch"):
        kc.compile_launch("forward", "sm_80")


def test_tensor_core_kind_names_each_case():
    assert kc.tensor_core_kind(3, 0, 8) == "wgmma"
    assert kc.tensor_core_kind(2, 64, 0) == "mma.sync"
    assert kc.tensor_core_kind(0, 0, 0) == "none (FMA)"
    assert kc.tensor_core_kind(2, 0, 0) == "mma v2 in IR only"


def test_subset_is_a_part_of_the_matrix():
    full = set(kc.matrix_requests())
    subset = kc.matrix_requests(subset=True)
    assert set(subset) <= full and len(subset) < len(full) / 10
    # each code tl.dot becomes: the FMA path (sm_75), mma.sync (sm_80), wgmma (sm_90)
    assert {t for t, *_ in subset} == {"sm_75", "sm_80", "sm_90"}
    assert ("sm_75", "span", "bfloat16", 128) in subset  # must be refused by the launcher


def test_capture_agrees_with_the_launchers_own_specs(facts):
    """The hook sees what Triton's binder makes of the launcher's real arguments; the launcher's
    compile_specs builds the same from the launcher's kernel_launches: signature, constants, divisibility
    attributes and options agree kernel by kernel."""
    assert len(facts["agree"]) == 16
    for target, variant, kernel, *same in facts["agree"]:
        assert all(same), (target, variant, kernel, same)


def test_bfloat16_on_a_t4_is_refused_by_name(facts):
    assert facts["refused"] is not None
    assert "bfloat16" in facts["refused"] and "7.5" in facts["refused"]


def test_tables_need_no_triton():
    """Chapter 10's compile tables read committed JSON: no triton (nor GPU) needed to show them."""
    script = textwrap.dedent("""
        import sys
        sys.modules["triton"] = None  # as if triton were not installed
        from attncourse.kernels import compile as reader, sdpa
        import torch
        results = reader.load_results()
        assert reader.summary_table(results).count("sm_") == len(results["targets"]) == 5
        assert "| GPU (target) |" in reader.compile_table(results)
        assert sdpa.sdpa_backend((7, 5), torch.float16, 64) == "efficient"
        print("ok")
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


def fake_results():
    """Two targets, three requests, known facts: what the tables must count."""

    def kernel(target, name, shared, spills, kind, blocks=(64, 32, 128)):
        mma = {"none (FMA)": 0, "mma.sync": 2, "wgmma": 3}[kind]
        return {
            "target": target,
            "kernel": name,
            "num_warps": 4,
            "num_stages": 2,
            "shared": shared,
            "registers": 200,
            "spill_stores": spills,
            "spill_loads": spills,
            "stack": spills,
            "mma_version": mma,
            "hmma": 8 * (kind == "mma.sync"),
            "hgmma": 8 * (kind == "wgmma"),
            "sass_instructions": 999,
            "blocks": list(blocks),
            "fits": None,
            "tensor_cores": kind,
        }

    kib = 1024
    kernels = {
        "a/f": kernel("sm_75", "forward", 48 * kib, 100, "none (FMA)"),
        "a/p": kernel("sm_75", "backward_preprocess", 256, 0, "none (FMA)", (64, None, 128)),
        "a/kv": kernel("sm_75", "backward_dkdv", 96 * kib, 0, "none (FMA)"),
        "a/q": kernel("sm_75", "backward_dq", 64 * kib, 0, "none (FMA)"),
        "b/f": kernel("sm_90", "forward", 64 * kib, 0, "wgmma"),
        "b/p": kernel("sm_90", "backward_preprocess", 256, 0, "none (FMA)", (64, None, 128)),
        "b/kv": kernel("sm_90", "backward_dkdv", 70 * kib, 8, "wgmma"),
        "b/q": kernel("sm_90", "backward_dq", 80 * kib, 0, "wgmma"),
    }
    targets = {
        "sm_75": {"gpus": "T4", "shared_per_block": 64 * kib},
        "sm_90": {"gpus": "H100", "shared_per_block": 227 * kib},
    }
    row = dict(variant="causal", head_dim=128)
    rows = [
        {
            **row,
            "target": "sm_75",
            "dtype": "float16",
            "refused": None,
            "kernels": ["a/f", "a/p", "a/kv", "a/q"],
        },
        {
            **row,
            "target": "sm_75",
            "dtype": "bfloat16",
            "refused": "ValueError: bfloat16 ...",
            "kernels": [],
        },
        {
            **row,
            "target": "sm_90",
            "dtype": "float16",
            "refused": None,
            "kernels": ["b/f", "b/p", "b/kv", "b/q"],
        },
    ]
    return {"targets": targets, "kernels": kernels, "rows": rows}


def test_tables_count_what_the_results_hold():
    results = fake_results()
    t4, h100 = reader.target_summary(results)
    assert (t4["requests"], t4["compiled"], t4["refused"], t4["fit"]) == (2, 1, ["bfloat16"], 0)
    assert (t4["max_shared"], t4["half"], t4["half_spill_free"], t4["max_spill"]) == (
        96 * 1024,
        1,
        0,
        100,
    )
    assert t4["tensor_cores"]["float16"] == ["none (FMA)"]
    assert (h100["fit"], h100["half_spill_free"], h100["max_spill"]) == (1, 0, 8)
    assert h100["tensor_cores"]["float16"] == ["wgmma"]  # the preprocess kernel has no tl.dot
    assert reader.exceeding(results) == [
        {
            "target": "sm_75",
            "variant": "causal",
            "dtype": "float16",
            "head_dim": 128,
            "kernel": "backward_dkdv",
            "shared": 96 * 1024,
            "limit": 64 * 1024,
        }
    ]
    table = reader.compile_table(results).splitlines()
    assert len(table) == 2 + 3 + 3  # header, rule, three kernels per target (no preprocess)
    assert "96 of 64 KiB **too much**" in table[3] and "none (FMA)" in table[3]
    assert "64 of 64 KiB |" in table[4]  # exactly the limit fits
    assert reader.request_kernels(results, "sm_75", "causal", "bfloat16", 128) is None
    with pytest.raises(KeyError):
        reader.request_kernels(results, "sm_80", "causal", "float16", 128)
    summary = reader.summary_table(results)
    assert "| T4 (sm_75) | 1 of 2 (bfloat16 refused) | 0 of 1 | 96 of 64 KiB |" in summary
