"""The compile harness (attncourse.kernels.compile): chapter 10's kernels compiled for GPUs without one.

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

from attncourse.kernels import compile as kc  # no triton import at module level


def run_child(script: str, timeout: int = 600) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    cache = tmp_path_factory.mktemp("compile-cache")
    return run_child(f"""
        import json, torch, triton
        from triton.runtime.driver import driver
        from triton import knobs
        from attncourse.kernels import compile as kc
        cache = {str(cache)!r}
        out = {{}}
        before = (driver._active, knobs.runtime.jit_cache_hook, torch.cuda.is_available,
                  torch.cuda.get_device_capability)
        launches = kc.capture_launches("sm_80", "causal", torch.float16, 64)
        out["kernels"] = [l.kernel for l in launches]
        out["restored"] = before == (driver._active, knobs.runtime.jit_cache_hook, torch.cuda.is_available,
                                     torch.cuda.get_device_capability)
        forward = {{}}
        for target in ("sm_75", "sm_80", "sm_90"):
            for dtype in ("float16", "float32"):
                launch = kc.capture_launches(target, "causal", dtype, 64, backward=False)[0]
                r = kc.compile_launch(launch, target, cache=cache)
                forward[target + " " + dtype] = dict(r.summary(), sass_has_hmma="HMMA" in r.sass,
                                                     sass_has_hgmma="HGMMA" in r.sass, cached=r.cached)
        out["forward"] = forward
        again = kc.compile_launch(kc.capture_launches("sm_80", "causal", "float16", 64, backward=False)[0],
                                  "sm_80", cache=cache)
        out["again_cached"] = again.cached
        out["again_summary"] = again.summary()
        from attncourse.kernels import flash
        agree = []
        for target, variant, dtype, d in [("sm_80", "causal", "float16", 64), ("sm_75", "span", "float32", 128),
                                          ("sm_90", "lengths", "bfloat16", 32), ("sm_86", "plain", "float16", 48)]:
            specs = flash.compile_specs(kc.TARGETS[target].capability, kc.DTYPES[dtype], d,
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
    assert any("dq" in name for name in facts["kernels"]) and any("dkdv" in name or "dk" in name for name in facts["kernels"])


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
    assert {k: v for k, v in facts["again_summary"].items()} == {k: v for k, v in first.items()
                                                                 if k not in ("sass_has_hmma", "sass_has_hgmma", "cached")}


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
    assert {t for t, *_ in subset} == set(kc.TARGETS)
    assert ("sm_75", "span", "bfloat16", 64) in subset  # must be refused by the launcher


def test_capture_agrees_with_the_launchers_own_specs(facts):
    """The hook sees what Triton's binder makes of the launcher's real arguments; the launcher's
    compile_specs builds the same from its launch functions: signature, constants, divisibility
    attributes and options agree kernel by kernel."""
    assert len(facts["agree"]) == 16
    for target, variant, kernel, *same in facts["agree"]:
        assert all(same), (target, variant, kernel, same)


def test_bfloat16_on_a_t4_is_refused_by_name(facts):
    assert facts["refused"] is not None
    assert "bfloat16" in facts["refused"] and "7.5" in facts["refused"]
