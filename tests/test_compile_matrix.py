"""Chapter 10's kernels compiled for every target without a GPU: CI's subset of the matrix.

``python -m attncourse.kernels.compile --subset`` compiles, per target (sm_75, sm_80, sm_86,
sm_89, sm_90), the kernels at d = 128 (the largest tiles: nearest to the shared-memory and
register limits), causal in float16 and float32 and adaptive span in bfloat16, forward and
backward, as the launcher would launch them on that GPU. ``make
compile-matrix`` compiles the full matrix (every variant, dtype and head size) into the package;
this test checks the subset against what the compiler gives now, the committed results
against the subset, and the same facts (everything compiles and fits, no spills in half
precision, the tensor-core instructions expected) on both. Compiles are cached on disk, so a
second run takes seconds.
"""

import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

from attncourse.kernels import compile as kc  # no triton import at module level

HALF = ("float16", "bfloat16")


@pytest.fixture(scope="module")
def subset(tmp_path_factory):
    out = tmp_path_factory.mktemp("compile") / "subset.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "attncourse.kernels.compile",
            "--subset",
            "--quiet",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=1500,
        env=env,
        check=False,
    )
    assert out.exists(), done.stderr[-4000:]
    print(
        done.stderr.strip().splitlines()[-1]
    )  # requests, kernels and seconds (pytest -s shows it)
    return kc.load_results(out)


@pytest.fixture(scope="module", params=["subset", "committed"])
def results(request):
    """What the compiler gives now (CI's subset) and the package's full matrix (make
    compile-matrix, compiled with the same kernels and launcher): each must hold the facts."""
    if request.param == "subset":
        return request.getfixturevalue("subset")
    committed = kc.load_results()
    assert set(rows(committed)) == set(kc.matrix_requests()), (
        "the committed results are not the full matrix: rerun make compile-matrix"
    )
    return committed


def rows(results):
    return {(r["target"], r["variant"], r["dtype"], r["head_dim"]): r for r in results["rows"]}


def test_the_subset_is_what_ci_compiles(subset):
    assert set(rows(subset)) == set(kc.matrix_requests(subset=True))


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


def test_half_precision_spills_nothing_from_sm80_on(results):
    """From an A100 on, every half-precision kernel keeps to its registers (none spill)."""
    spilled = []
    for (target, variant, dtype, d), row in rows(results).items():
        if target != "sm_75" and dtype in HALF:
            spilled += [
                (target, variant, dtype, d, k["kernel"], k["spill_stores"])
                for k in map(results["kernels"].get, row["kernels"])
                if k["spill_stores"]
            ]
    assert not spilled


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
    same facts as compiling now: rerun make compile-matrix after changing a kernel or its launch."""
    committed = kc.load_results()
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


def test_the_chapter_tables_render(subset):
    table = kc.compile_table(subset)
    assert table.count("\n") == 1 + 3 * len(kc.TARGETS)  # header, rule, 3 kernels per target
    assert "wgmma" in table and "mma.sync" in table and "none (FMA)" in table
    summary = kc.summary_table(subset)
    assert summary.count("\n") == 1 + len(kc.TARGETS)
    assert "(bfloat16 refused)" in summary
