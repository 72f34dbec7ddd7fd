"""Chapter 10's kernels compiled without a GPU: the committed full matrix checked, cheaply.

``make compile-matrix`` compiles the full matrix (every target, variant, dtype and head size:
300 requests, 910 distinct kernels, tens of minutes) into the package. Compiling it again is
too slow for CI, so this test checks it in two cheaper ways:

* **without compiling**, that every committed request is still what the kernels and the
  launcher give: ``python tools/kernel_compile --check`` captures all 300 requests
  again (seconds) and compares each kernel's fingerprint (triton version, target, the kernel's
  source and its callees', the constexpr globals they read, the launch's signature,
  constexprs, attributes and options; no line numbers) with the one recorded, and whether the
  launcher refuses the request. A kernel or launch configuration changed without ``make
  compile-matrix`` fails here; so does the check itself, on doctored results, if it stops
  seeing what changed;
* **by compiling a sample** (``python tools/kernel_compile --subset``, CI's subset):
  at d = 128, the largest tiles, causal float16 on sm_75 (the T4: the FMA path), sm_80
  (``mma.sync``) and sm_90 (``wgmma``), adaptive span in bfloat16 on sm_90, and the same on
  sm_75, which the launcher refuses. Each request must give exactly the committed kernels:
  what the fingerprints cannot see (the compiler and the harness that reads its output) is
  checked there.

The same facts (everything compiles and fits its target's shared memory, no spills in half
precision from sm_80 on but for one measured exception, the tensor-core instructions expected per architecture, bfloat16
refused on sm_75 only) are required of the sample and of the committed matrix. Compiles are
cached on disk (``ATTNCOURSE_COMPILE_CACHE``), so a second run takes seconds.
"""

import copy
import json
import os
import subprocess
import sys

import pytest

triton = pytest.importorskip("triton")

from project_tools import TOOLS, tool_package

from attncourse.kernels import compile as reader  # chapter 10's reader of the results

kc = tool_package("kernel_compile")  # the harness: no triton import at module level

HALF = ("float16", "bfloat16")


def run_compile(*args: str, timeout: int = 1500) -> subprocess.CompletedProcess:
    """``python tools/kernel_compile ARGS`` in a process that compiles (no
    TRITON_INTERPRET: conftest switches the interpreter on for the kernel tests)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run(
        [sys.executable, str(TOOLS / "kernel_compile"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


@pytest.fixture(scope="module")
def subset(tmp_path_factory):
    out = tmp_path_factory.mktemp("compile") / "subset.json"
    # one worker: CI runs the test modules on both cores already (pytest -n 2)
    done = run_compile("--subset", "--workers", "1", "--quiet", "--out", str(out))
    assert out.exists(), done.stderr[-4000:]
    # requests, kernels and seconds (pytest -s shows it)
    print(done.stderr.strip().splitlines()[-1])
    return reader.load_results(out)


@pytest.fixture(scope="module", params=["subset", "committed"])
def results(request):
    """What the compiler gives now (CI's subset) and the package's full matrix (make
    compile-matrix, compiled with the same kernels and launcher): each must hold the facts."""
    if request.param == "subset":
        return request.getfixturevalue("subset")
    committed = reader.load_results()
    assert set(rows(committed)) == set(kc.matrix_requests()), (
        "the committed results are not the full matrix: rerun make compile-matrix"
    )
    return committed


def rows(results):
    return {(r["target"], r["variant"], r["dtype"], r["head_dim"]): r for r in results["rows"]}


def test_the_subset_is_what_ci_compiles(subset):
    assert set(rows(subset)) == set(kc.matrix_requests(subset=True))


def test_the_committed_matrix_is_what_the_kernels_and_launcher_give_now():
    """Every kernel of all 300 requests, fingerprinted without compiling: a kernel's source, a
    function it calls, a constexpr it reads or its launch configuration changed since make
    compile-matrix makes its requests stale."""
    done = run_compile("--check", timeout=600)
    stale = done.stdout.splitlines()
    assert done.returncode == 0, "\n".join(
        [done.stderr.strip()[-2000:], *stale[:20], "..." if len(stale) > 20 else ""]
    )
    assert "300 requests (1120 kernels) checked without compiling: 0 stale" in done.stderr


def test_the_check_names_what_changed(tmp_path):
    """The check itself, on committed requests doctored as stale results would read: a kernel
    whose fingerprint changed, a request recorded as compiled that the launcher refuses and the
    reverse, a request recorded with a kernel fewer than it launches; the intact one passes."""
    committed = reader.load_results()
    by_request = rows(committed)
    changed = ("sm_80", "causal", "float16", 64)
    refused_now = ("sm_75", "span", "bfloat16", 64)  # to be recorded as compiled
    compiled_now = ("sm_90", "plain", "float32", 32)  # to be recorded as refused
    fewer = ("sm_89", "plain", "float16", 96)
    intact = ("sm_86", "lengths", "bfloat16", 16)
    doctored = {
        **committed,
        "rows": [
            copy.deepcopy(by_request[r])
            for r in (changed, refused_now, compiled_now, fewer, intact)
        ],
    }
    doctored["kernels"] = copy.deepcopy(committed["kernels"])
    dq = doctored["rows"][0]["kernels"][3]
    assert doctored["kernels"][dq]["kernel"] == "backward_dq"
    doctored["kernels"][dq]["fingerprint"] = "0" * 32
    assert doctored["rows"][1]["refused"]
    doctored["rows"][1]["refused"] = None
    doctored["rows"][2]["refused"] = "ValueError: recorded as refused"
    doctored["rows"][2]["kernels"] = []
    doctored["rows"][3]["kernels"] = doctored["rows"][3]["kernels"][:3]
    path = tmp_path / "doctored.json"
    path.write_text(json.dumps(doctored))

    done = run_compile("--check", str(path), timeout=600)
    assert done.returncode == 1, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 4, done.stdout
    assert lines[0] == "sm_80 causal float16 d=64: backward_dq changed (source or launch)"
    assert lines[1].startswith("sm_75 span bfloat16 d=64: compiled then, ValueError:")
    assert lines[1].endswith(" now") and "bfloat16" in lines[1].split("then")[1]
    assert lines[2] == "sm_90 plain float32 d=32: refused then, compiled now"
    assert lines[3] == (
        "sm_89 plain float16 d=96: launches ['forward', 'backward_preprocess', 'backward_dkdv', "
        "'backward_dq'] now, ['forward', 'backward_preprocess', 'backward_dkdv'] then"
    )
    assert "5 requests (11 kernels) checked without compiling: 4 stale" in done.stderr
    # results from another triton: one line, nothing captured
    assert kc.stale_requests({**committed, "triton": "0.0"}) == [
        f"compiled with triton 0.0, this is triton {triton.__version__}"
    ]


def test_every_request_compiles(results):
    failed = {k: v["error"][:300] for k, v in results["kernels"].items() if "error" in v}
    assert not failed


def test_bfloat16_refused_on_sm75_and_only_there(results):
    for (target, _, dtype, _), row in rows(results).items():
        if target == "sm_75" and dtype == "bfloat16":
            assert "bfloat16" in row["refused"] and "7.5" in row["refused"], row["refused"]
        else:
            assert row["refused"] is None, (target, dtype, row["refused"])


def too_big(results, targets):
    return [
        (k["target"], k["kernel"], k["blocks"], k["shared"])
        for k in results["kernels"].values()
        if k["target"] in targets and k["shared"] > kc.TARGETS[k["target"]].shared_per_block
    ]


def test_every_kernel_fits_its_targets_shared_memory(results):
    """A block asking for more shared memory than the GPU has fails at launch (OutOfResources)."""
    assert not too_big(results, ("sm_80", "sm_86", "sm_89", "sm_90"))


def test_every_kernel_fits_a_t4(results):
    assert not too_big(results, ("sm_75",))


def _measured_exception(target: str, d: int, kernel: str) -> bool:
    """The one spilling half-precision launch the launcher keeps on purpose: the dK/dV kernel on
    sm_90 at d > 64, 64 x 64 with 4 warps, measured faster on an H200 than the spill-free
    tiles (``attncourse.kernels.config.launch_config``; gpu-check's ``dkdv_tile`` question)."""
    return target == "sm_90" and d > 64 and kernel == "backward_dkdv"


def test_half_precision_spills_nothing_from_sm80_on(results):
    """From an A100 on, every half-precision kernel keeps to its registers (none spill), but for
    the measured exception, which spills a few hundred bytes at most."""
    spilled, excepted = [], []
    for (target, variant, dtype, d), row in rows(results).items():
        if target != "sm_75" and dtype in HALF:
            for k in map(results["kernels"].get, row["kernels"]):
                if k["spill_stores"]:
                    found = (target, variant, dtype, d, k["kernel"], k["spill_stores"])
                    exception = _measured_exception(target, d, k["kernel"])
                    (excepted if exception else spilled).append(found)
    assert not spilled
    assert all(found[-1] <= 512 for found in excepted), excepted


def test_tensor_cores_per_architecture(results):
    """Triton 3.7 (AccelerateMatmul): no MMA before sm_80 (the FMA path), mma.sync on sm_80-89,
    wgmma on sm_90 where a product's rows are a multiple of 64 and the warps come in fours
    (supportMMA, version 3), mma.sync there otherwise (the span backward's 32 x 32 tiles);
    float32 in "ieee" precision never reaches the tensor cores."""
    expected = {
        "sm_75": "none (FMA)",
        "sm_80": "mma.sync",
        "sm_86": "mma.sync",
        "sm_89": "mma.sync",
        "sm_90": "wgmma",
    }
    for (target, _, dtype, _), row in rows(results).items():
        if row["refused"]:
            continue
        for k in map(results["kernels"].get, row["kernels"]):
            if k["kernel"] == "backward_preprocess":
                assert k["tensor_cores"] == "none (FMA)"  # no tl.dot there
            elif dtype == "float32":
                assert k["tensor_cores"] == "none (FMA)", (target, k["kernel"])
            else:
                want = expected[target]
                if target == "sm_90" and (max(k["blocks"][:2]) < 64 or k["num_warps"] % 4):
                    want = "mma.sync"  # no product with 64 rows: MMA version 2
                assert k["tensor_cores"] == want, (
                    target,
                    dtype,
                    k["kernel"],
                    k["tensor_cores"],
                )


def test_committed_results_match_the_compiler(subset):
    """The package's results (make compile-matrix) hold, for every request of the subset, the
    same kernels as compiling now, fingerprints included: rerun make compile-matrix after
    changing a kernel or its launch."""
    committed = reader.load_results()
    assert committed["triton"] == subset["triton"], (
        "compiled with another triton: rerun make compile-matrix"
    )
    committed_rows = rows(committed)
    for request, row in rows(subset).items():
        assert request in committed_rows, f"{request} is missing from the committed results"
        old = committed_rows[request]
        assert bool(old["refused"]) == bool(row["refused"]), request
        now = [subset["kernels"][k] for k in row["kernels"]]
        then = [committed["kernels"][k] for k in old["kernels"]]
        assert then == now, f"{request}: the committed results are stale, rerun make compile-matrix"


def test_the_chapter_tables_render():
    """Chapter 10's tables, from the committed full matrix as the chapter reads it."""
    committed = reader.load_results()
    table = reader.compile_table(committed)
    assert table.count("\n") == 1 + 3 * len(kc.TARGETS)  # header, rule, 3 kernels per target
    assert "wgmma" in table and "mma.sync" in table and "none (FMA)" in table
    summary = reader.summary_table(committed)
    assert summary.count("\n") == 1 + len(kc.TARGETS)
    assert "(bfloat16 refused)" in summary
