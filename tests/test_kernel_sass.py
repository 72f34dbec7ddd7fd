"""The SASS loop counter of chapter 10's efficiency comparison (plain text parsing; the
compiling test needs triton and its bundled nvdisasm, and skips without them)."""

import pytest
from project_tools import tool_package

sass = tool_package("kernel_compile.sass")  # tools/kernel_compile/sass.py

LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_0:
        /*0010*/                   HMMA.16816.F32 R4, R8, R12, R4 ;
        /*0020*/                   FFMA R2, R3, R4, R5 ;
        /*0030*/              @P0 BRA `(.L_x_0) ;
        /*0040*/                   ISETP.GE.AND P0, PT, R0, RZ, PT ;
.L_x_1:
        /*0050*/                   IADD3 R0, R0, 0x1, RZ ;
        /*0060*/              @!P1 BRA `(.L_x_1) ;
        /*0070*/                   BRA `(.L_x_2) ;
.L_x_2:
        /*0080*/                   EXIT ;
"""


def test_loops_are_backward_branches_and_count_their_body():
    found = sass.loops(LISTING)
    # the forward BRA is no loop
    assert [(lp.instructions, lp.mma) for lp in found] == [(3, 1), (2, 0)]
    assert found[0].histogram() == {"HMMA": 1, "FFMA": 1, "BRA": 1}
    assert [lp.instructions for lp in sass.mma_loops(LISTING)] == [3]


def test_per_scores_scales_by_warps_and_tile():
    assert sass.per_scores(300, 4, 64 * 64) == 1200
    assert sass.per_scores(300, 8, 32 * 64) == 300 * 8 * 2
    with pytest.raises(ValueError):
        sass.per_scores(300, 0, 4096)


def test_compiled_kernels_have_a_whole_tile_loop_cheaper_than_the_boundary_loops():
    pytest.importorskip("triton")
    try:
        sass.tool_path("nvdisasm")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    import torch

    from attncourse.kernels import flash

    if flash.interpreting():
        pytest.skip(
            "TRITON_INTERPRET=1 makes the kernels interpreted functions: run this file without it"
        )
    fn, signature, consts, attrs, options = tool_package("kernel_compile").compile_specs(
        (9, 0), torch.float16, 64, causal=True
    )["forward"]
    cubin = sass.compile_cubin(fn, signature, consts, attrs, options, (9, 0))
    loops = sass.mma_loops(sass.disassemble(cubin))
    # whole tiles, then the diagonal (masked); no span: its ramp loop is gone
    assert len(loops) == 2
    whole = sass.whole_tile_loop(cubin)
    assert whole == loops[0] and whole.instructions < loops[1].instructions
