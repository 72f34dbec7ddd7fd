"""Hostile input to the benchmarks (attncourse.benchmarks): every bad argument is refused, before
anything is measured, with a TypeError (wrong type or dtype) or a ValueError (wrong value) whose
message names the caller's argument, and the inputs that used to give a silently wrong result
(numpy sizes, truthy flags, NaN in JSON, names that leave their folder) no longer do."""

import json
import math
import re
import time

import numpy as np
import pytest
import torch
from helpers import TINY_GPU_RUN
from torch import nn

from attncourse.benchmarks import attention as ab
from attncourse.benchmarks import common
from attncourse.benchmarks import kernels as kb
from attncourse.benchmarks import measure as m
from attncourse.masks import causal_mask

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
GOOD_TARGET = "attncourse.benchmarks.attention:build"
ROW = {"kind": "attention", "impl": "naive", "length": 8, "causal": False}
TIMED = {**ROW, "flops": 10, "seconds": 1.0, "peak_bytes": 1}
CACHE_ROW = {"context": 2, "cached_s": 1.0, "uncached_s": 2.0, "speedup": 2.0}
SPAN_ROW = {"span": 4, "window": 4, "cells": 16, "seconds": 1.0}


class Measured(Exception):
    """Raised by a measuring function that ran before the arguments were checked."""


@pytest.fixture
def nothing_measured(monkeypatch):
    """Every measurement in the benchmark drivers raises: the checks must come first."""

    def refuse(*args, **kwargs):
        raise Measured("a measurement started before the arguments were checked")

    for name in ("machine", "matmul_throughput", "cpu_peak_memory", "time_interleaved"):
        monkeypatch.setattr(ab, name, refuse)
    for name in ("machine", "time_interleaved"):
        monkeypatch.setattr(kb, name, refuse)


def _a_file(tmp):
    (tmp / "afile").write_text("x")
    return tmp / "afile"


def _a_folder(tmp):
    (tmp / "out").mkdir(exist_ok=True)
    return "out"


def _gpu_run(**changes):
    return kb.run_gpu(**{**TINY_GPU_RUN, **changes})


def _nothing():
    return None


def case(finding, call, error, words, **kw):
    return pytest.param(call, error, words, id=finding, **kw)


# (finding, call given a tmp folder, exception, words the message must hold)
REFUSED = [
    # -- measure -------------------------------------------------------------------------------
    case(
        "104 attention_flops causal='no'",
        lambda t: m.attention_flops(1, 1, 4, 4, 8, causal="no"),
        TypeError,
        "causal",
    ),
    case(
        "104 multihead_flops causal=1",
        lambda t: m.multihead_flops(1, 4, 4, 8, 2, causal=1),
        TypeError,
        "causal",
    ),
    case("105 Timing negative time", lambda t: m.Timing([-1.0, 1.0]), ValueError, "times[0]"),
    case("106 Timing no times", lambda t: m.Timing([]), ValueError, "times"),
    case("106 Timing str", lambda t: m.Timing("abc"), TypeError, "times"),
    case("107 time_call int", lambda t: m.time_call(5), TypeError, "fn"),
    case(
        "107 time_call needs an argument",
        lambda t: m.time_call(lambda x: x),
        TypeError,
        "fn must be callable with no arguments",
    ),
    case(
        "107 time_interleaved value int",
        lambda t: m.time_interleaved({"a": 3}),
        TypeError,
        "fns['a']",
    ),
    case(
        "108 time_interleaved list",
        lambda t: m.time_interleaved([_nothing]),
        TypeError,
        "fns must be a dict",
    ),
    case(
        "108 time_interleaved None",
        lambda t: m.time_interleaved(None),
        TypeError,
        "fns must be a dict",
    ),
    case("109 time_interleaved empty", lambda t: m.time_interleaved({}), ValueError, "fns"),
    case(
        "110 time_call device 'gpu'",
        lambda t: m.time_call(_nothing, device="gpu"),
        ValueError,
        "device",
    ),
    case(
        "110 time_interleaved device 0",
        lambda t: m.time_interleaved({"a": _nothing}, device=0),
        TypeError,
        "device",
    ),
    case(
        "110 time_call device cuda",
        lambda t: m.time_call(_nothing, device="cuda"),
        ValueError,
        "CUDA",
        marks=NO_CUDA,
    ),
    case(
        "110 matmul_throughput device 'gpu'",
        lambda t: m.matmul_throughput(4, device="gpu"),
        ValueError,
        "device",
    ),
    case(
        "111 matmul_throughput int64",
        lambda t: m.matmul_throughput(4, dtype=torch.int64),
        TypeError,
        "dtype",
    ),
    case(
        "111 matmul_throughput bool",
        lambda t: m.matmul_throughput(4, dtype=torch.bool),
        TypeError,
        "dtype",
    ),
    case(
        "112 matmul_throughput dtype str",
        lambda t: m.matmul_throughput(4, dtype="float32"),
        TypeError,
        "dtype must be a torch.dtype",
    ),
    case(
        "112 matmul_throughput numpy dtype",
        lambda t: m.matmul_throughput(4, dtype=np.float32),
        TypeError,
        "dtype must be a torch.dtype",
    ),
    case(
        "113 matmul_throughput complex",
        lambda t: m.matmul_throughput(4, dtype=torch.complex64),
        TypeError,
        "dtype",
    ),
    case(
        "114 fit_slope generator",
        lambda t: m.fit_slope((x for x in [1, 2]), [1, 2]),
        TypeError,
        "lengths",
    ),
    case("114 fit_slope int", lambda t: m.fit_slope(3, [1, 2]), TypeError, "lengths"),
    case("114 fit_slope None", lambda t: m.fit_slope(None, None), TypeError, "lengths"),
    case(
        "117 fit_slope dict",
        lambda t: m.fit_slope({1: 1, 2: 2}, {1: 1, 2: 2}),
        TypeError,
        "lengths",
    ),
    case(
        "118 cpu_peak_memory no ':function'",
        lambda t: m.cpu_peak_memory("attncourse.benchmarks.attention", {}),
        ValueError,
        "target",
    ),
    case(
        "118 cpu_peak_memory kwargs None",
        lambda t: m.cpu_peak_memory(GOOD_TARGET, None),
        TypeError,
        "kwargs",
    ),
    case("119 cpu_peak_memory target int", lambda t: m.cpu_peak_memory(3, {}), TypeError, "target"),
    case(
        "119 cpu_peak_memory kwargs object",
        lambda t: m.cpu_peak_memory(GOOD_TARGET, {"x": object()}),
        TypeError,
        "kwargs",
    ),
    case(
        "119 cpu_peak_memory timeout str",
        lambda t: m.cpu_peak_memory(GOOD_TARGET, {}, timeout="x"),
        TypeError,
        "timeout",
    ),
    case(
        "119 cpu_peak_memory timeout -1",
        lambda t: m.cpu_peak_memory(GOOD_TARGET, {}, timeout=-1),
        ValueError,
        "timeout",
    ),
    case(
        "120 cuda_peak_memory on the CPU",
        lambda t: m.cuda_peak_memory(_nothing, device="cpu"),
        ValueError,
        "device",
    ),
    case(
        "120 cuda_peak_memory fn int",
        lambda t: m.cuda_peak_memory(5, device="cpu"),
        TypeError,
        "fn",
    ),
    case(
        "120 cuda_peak_memory no CUDA",
        lambda t: m.cuda_peak_memory(_nothing),
        ValueError,
        "CUDA",
        marks=NO_CUDA,
    ),
    # -- common --------------------------------------------------------------------------------
    case(
        "121 write_result NaN",
        lambda t: common.write_result({"a": [1.0, float("nan")]}, t, "r.json"),
        ValueError,
        "result['a'][1]",
    ),
    case(
        "121 write_result inf",
        lambda t: common.write_result({"a": float("inf")}, t, "r.json"),
        ValueError,
        "result['a']",
    ),
    case(
        "122 write_result folder is a file",
        lambda t: common.write_result({}, _a_file(t), "r.json"),
        ValueError,
        "folder",
    ),
    case(
        "123 write_result name ''",
        lambda t: common.write_result({}, t / "new", ""),
        ValueError,
        "name",
    ),
    case(
        "124 write_result absolute name",
        lambda t: common.write_result({}, t, str(t / "abs.json")),
        ValueError,
        "name",
    ),
    case(
        "124 write_result name '../x'",
        lambda t: common.write_result({}, t / "in", "../x.json"),
        ValueError,
        "name",
    ),
    case(
        "124 write_result name 'sub/x'",
        lambda t: common.write_result({}, t, "sub/x.json"),
        ValueError,
        "name",
    ),
    case(
        "125 write_result name is a folder",
        lambda t: common.write_result({}, t, _a_folder(t)),
        ValueError,
        "name",
    ),
    case(
        "126 write_result folder None",
        lambda t: common.write_result({}, None, "r.json"),
        TypeError,
        "folder",
    ),
    case(
        "126 write_result folder int",
        lambda t: common.write_result({}, 3, "r.json"),
        TypeError,
        "folder",
    ),
    case("126 write_result name int", lambda t: common.write_result({}, t, 3), TypeError, "name"),
    case(
        "126 write_result name None", lambda t: common.write_result({}, t, None), TypeError, "name"
    ),
    case(
        "127 write_result tensor",
        lambda t: common.write_result({"a": torch.tensor(1.0)}, t, "r.json"),
        TypeError,
        "result['a']",
    ),
    case(
        "127 write_result object",
        lambda t: common.write_result({"b": {"a": object()}}, t, "r.json"),
        TypeError,
        "result['b']['a']",
    ),
    case("128 read_result None", lambda t: common.read_result(None), TypeError, "name"),
    case("128 read_result int", lambda t: common.read_result(3), TypeError, "name"),
    case(
        "128 read_result folder is a file",
        lambda t: common.read_result("r.json", _a_file(t)),
        ValueError,
        "folder",
    ),
    case(
        "128 read_result name is a folder",
        lambda t: common.read_result(_a_folder(t), t),
        ValueError,
        "name",
    ),
    case(
        "128 read_result missing",
        lambda t: common.read_result("r.json", t),
        ValueError,
        "r.json is missing",
    ),
    case(
        "129 read_result absolute name",
        lambda t: common.read_result("/etc/hostname"),
        ValueError,
        "name",
    ),
    case("130 machine cuda", lambda t: common.machine("cuda"), ValueError, "CUDA", marks=NO_CUDA),
    case("131 machine 'tpu'", lambda t: common.machine("tpu"), ValueError, "device"),
    case("131 machine int", lambda t: common.machine(3), TypeError, "device"),
    case("131 machine None", lambda t: common.machine(None), TypeError, "device"),
    case("132 meminfo_gib int", lambda t: common.meminfo_gib(3), TypeError, "field"),
    case("132 meminfo_gib None", lambda t: common.meminfo_gib(None), TypeError, "field"),
    # -- attention -----------------------------------------------------------------------------
    case(
        "135 build_decode misspelt size",
        lambda t: ab.build_decode("cached", 4, num_layer=1),
        ValueError,
        "num_layer",
    ),
    case(
        "136 build_decode batch -1",
        lambda t: ab.build_decode("cached", 4, batch=-1),
        ValueError,
        "batch",
    ),
    case(
        "136 build_decode batch True",
        lambda t: ab.build_decode("cached", 4, batch=True),
        TypeError,
        "batch",
    ),
    case(
        "137 build_decode batch 0",
        lambda t: ab.build_decode("uncached", 4, batch=0),
        ValueError,
        "batch",
    ),
    case("137 run_cache batch 0", lambda t: ab.run_cache([4], batch=0), ValueError, "batch"),
    case("138 build length -1", lambda t: ab.build("naive", -1, False), ValueError, "length"),
    case("138 build length 8.0", lambda t: ab.build("naive", 8.0, False), TypeError, "length"),
    case(
        "138 build head_dim 0",
        lambda t: ab.build("tiled", 8, False, head_dim=0),
        ValueError,
        "head_dim",
    ),
    case(
        "138 build_layer length -1",
        lambda t: ab.build_layer("ours", -1, False, 1, 8, 2),
        ValueError,
        "length",
    ),
    case("139 build length True", lambda t: ab.build("naive", True, False), TypeError, "length"),
    case("139 build length 0", lambda t: ab.build("naive", 0, False), ValueError, "length"),
    case("139 build batch 0", lambda t: ab.build("torch", 8, False, batch=0), ValueError, "batch"),
    case("139 build causal 'no'", lambda t: ab.build("naive", 8, "no"), TypeError, "causal"),
    case(
        "139 build_layer causal 'no'",
        lambda t: ab.build_layer("ours", 8, "no", 1, 8, 2),
        TypeError,
        "causal",
    ),
    case(
        "140 build_layer heads not dividing",
        lambda t: ab.build_layer("ours", 8, False, 1, 8, 3),
        ValueError,
        "num_heads",
    ),
    case("141 build seed 'a'", lambda t: ab.build("naive", 8, False, seed="a"), TypeError, "seed"),
    case(
        "141 build_layer seed 1.5",
        lambda t: ab.build_layer("ours", 8, False, 1, 8, 2, seed=1.5),
        TypeError,
        "seed",
    ),
    case(
        "141 build_decode seed 'a'",
        lambda t: ab.build_decode("cached", 4, seed="a"),
        TypeError,
        "seed",
    ),
    case(
        "143 build device 'gpu'",
        lambda t: ab.build("naive", 8, False, device="gpu"),
        ValueError,
        "device",
    ),
    case(
        "143 build_decode device 'tpu'",
        lambda t: ab.build_decode("cached", 4, device="tpu"),
        ValueError,
        "device",
    ),
    case(
        "143 build device cuda",
        lambda t: ab.build("naive", 8, False, device="cuda"),
        ValueError,
        "CUDA",
        marks=NO_CUDA,
    ),
    case(
        "143 run_cache device 'gpu'",
        lambda t: ab.run_cache([4], device="gpu"),
        ValueError,
        "device",
    ),
    case("143 run device 'gpu'", lambda t: ab.run([8], device="gpu"), ValueError, "device"),
    case("144 run length 0", lambda t: ab.run([0]), ValueError, "lengths[0]"),
    case("145 run length True", lambda t: ab.run([True]), TypeError, "lengths[0]"),
    case("146 run length -4", lambda t: ab.run([8, -4]), ValueError, "lengths[1]"),
    case(
        "147 run memory_fraction -1",
        lambda t: ab.run([8], memory_fraction=-1),
        ValueError,
        "memory_fraction",
    ),
    case(
        "148 run memory_fraction 'x'",
        lambda t: ab.run([8], memory_fraction="x"),
        TypeError,
        "memory_fraction",
    ),
    case("149 run lengths int", lambda t: ab.run(8), TypeError, "lengths"),
    case(
        "149 run layer_lengths int",
        lambda t: ab.run([], layer_lengths=8),
        TypeError,
        "layer_lengths",
    ),
    case("149 run_cache contexts int", lambda t: ab.run_cache(4), TypeError, "contexts"),
    case("150 run_cache no contexts", lambda t: ab.run_cache([]), ValueError, "contexts"),
    case(
        "150 run nothing to measure", lambda t: ab.run([], layer_lengths=[]), ValueError, "lengths"
    ),
    case("152 table whole result", lambda t: ab.table({"rows": [TIMED]}), TypeError, "rows"),
    case("152 table None", lambda t: ab.table(None), TypeError, "rows"),
    case("152 cache_table whole result", lambda t: ab.cache_table({"rows": []}), TypeError, "rows"),
    case(
        "153 table row without length",
        lambda t: ab.table([{"kind": "attention", "impl": "naive"}]),
        ValueError,
        "rows[0]",
    ),
    case(
        "153 table peak_bytes None",
        lambda t: ab.table([{**TIMED, "peak_bytes": None}]),
        TypeError,
        "peak_bytes",
    ),
    case(
        "153 cache_table row without times",
        lambda t: ab.cache_table([{"context": 2}]),
        ValueError,
        "rows[0]",
    ),
    case(
        "153 cache_table cached_s str",
        lambda t: ab.cache_table([{**CACHE_ROW, "cached_s": "1"}]),
        TypeError,
        "cached_s",
    ),
    case("154 plot None", lambda t: ab.plot(None), TypeError, "result"),
    case("154 plot {}", lambda t: ab.plot({}), ValueError, "result"),
    case("154 plot the rows", lambda t: ab.plot([TIMED]), TypeError, "result"),
    case(
        "154 plot the cache result",
        lambda t: ab.plot(ab.load_cache()),
        ValueError,
        "result['rows'][0]",
    ),
    case(
        "154 plot peak_bytes None",
        lambda t: ab.plot({"rows": [{**TIMED, "peak_bytes": None}]}),
        TypeError,
        "peak_bytes",
    ),
    case(
        "155 plot seconds str",
        lambda t: ab.plot({"rows": [{**TIMED, "seconds": "1"}]}),
        TypeError,
        "seconds",
    ),
    case("155 plot no rows", lambda t: ab.plot({"rows": []}), ValueError, "result"),
    case("156 load device int", lambda t: ab.load(3), TypeError, "device"),
    case("156 load device None", lambda t: ab.load(None), TypeError, "device"),
    case("156 load tag int", lambda t: ab.load("cpu", tag=3), TypeError, "tag"),
    case("156 load_constants tag None", lambda t: ab.load_constants(tag=None), TypeError, "tag"),
    case(
        "156 load missing", lambda t: ab.load("cpu", tag="_nowhere"), ValueError, "tag='_nowhere'"
    ),
    case("156 load_constants missing", lambda t: ab.load_constants(t), ValueError, "is missing"),
    case("157 load folder is a file", lambda t: ab.load("cpu", _a_file(t)), ValueError, "folder"),
    case("157 load_cache folder int", lambda t: ab.load_cache("cpu", 3), TypeError, "folder"),
    case("158 constants no sizes", lambda t: ab.constants(()), ValueError, "sizes"),
    case("158 constants sizes int", lambda t: ab.constants(8), TypeError, "sizes"),
    case(
        "159 constants score_length -1",
        lambda t: ab.constants((8,), repeats=1, score_length=-1),
        ValueError,
        "score_length",
    ),
    case(
        "159 constants score_length '8'",
        lambda t: ab.constants((8,), repeats=1, score_length="8"),
        TypeError,
        "score_length",
    ),
    case(
        "160 constants score_length 0",
        lambda t: ab.constants((8,), repeats=1, score_length=0),
        ValueError,
        "score_length",
    ),
    case(
        "160 constants score_length True",
        lambda t: ab.constants((8,), repeats=1, score_length=True),
        TypeError,
        "score_length",
    ),
    # -- kernels -------------------------------------------------------------------------------
    case("161 run_gpu no spans", lambda t: _gpu_run(spans=()), ValueError, "spans"),
    case("162 run_gpu no lengths", lambda t: _gpu_run(lengths=()), ValueError, "lengths"),
    case("162 run_gpu lengths int", lambda t: _gpu_run(lengths=16), TypeError, "lengths"),
    case(
        "163 run_gpu dtype 'float8'",
        lambda t: _gpu_run(dtypes=("float8",)),
        ValueError,
        "dtypes[0]",
    ),
    case("163 run_gpu dtypes str", lambda t: _gpu_run(dtypes="float32"), TypeError, "dtypes"),
    case(
        "163 run_gpu dtype 'Tensor'",
        lambda t: _gpu_run(dtypes=("Tensor",)),
        ValueError,
        "dtypes[0]",
    ),
    case(
        "163 run_gpu dtype 'int64'", lambda t: _gpu_run(dtypes=("int64",)), ValueError, "dtypes[0]"
    ),
    case("165 run_gpu length 0", lambda t: _gpu_run(lengths=(0,)), ValueError, "lengths[0]"),
    case("165 run_gpu span_length 0", lambda t: _gpu_run(span_length=0), ValueError, "span_length"),
    case("166 run_gpu device 'gpu'", lambda t: _gpu_run(device="gpu"), ValueError, "device"),
    case(
        "167 run_gpu memory_fraction 'x'",
        lambda t: _gpu_run(memory_fraction="x"),
        TypeError,
        "memory_fraction",
    ),
    case(
        "167 run_gpu max_tiled_length -1",
        lambda t: _gpu_run(max_tiled_length=-1),
        ValueError,
        "max_tiled_length",
    ),
    case("168 targets rows None", lambda t: kb.targets(None), TypeError, "rows"),
    case("168 targets row int", lambda t: kb.targets([1]), TypeError, "rows[0]"),
    case("168 targets no spans", lambda t: kb.targets([], spans=[]), ValueError, "spans"),
    case("168 targets spans int", lambda t: kb.targets([], spans=5), TypeError, "spans"),
    case(
        "170 targets dtype without rows",
        lambda t: kb.targets([{"dtype": "float16"}], dtype="float8"),
        ValueError,
        "float8",
    ),
    case(
        "171 build_gpu dtype str",
        lambda t: kb.build_gpu("naive", 8, False, "float16", False, device="cpu"),
        TypeError,
        "dtype must be a torch.dtype",
    ),
    case(
        "171 build_gpu int64 backward",
        lambda t: kb.build_gpu("naive", 8, False, torch.int64, True, device="cpu"),
        TypeError,
        "dtype",
    ),
    case(
        "172 build_gpu int64 forward",
        lambda t: kb.build_gpu("naive", 8, False, torch.int64, False, device="cpu"),
        TypeError,
        "dtype",
    ),
    case(
        "173 build_gpu backward 'no'",
        lambda t: kb.build_gpu("naive", 8, False, torch.float32, "no", device="cpu"),
        TypeError,
        "backward",
    ),
    case(
        "174 build_gpu causal 'no'",
        lambda t: kb.build_gpu("naive", 8, "no", torch.float32, False, device="cpu"),
        TypeError,
        "causal",
    ),
    case(
        "174 build_gpu length 0",
        lambda t: kb.build_gpu("tiled", 0, False, torch.float32, False, device="cpu"),
        ValueError,
        "length",
    ),
    case(
        "175 build_gpu length -1",
        lambda t: kb.build_gpu("naive", -1, False, torch.float32, False, device="cpu"),
        ValueError,
        "length",
    ),
    case(
        "175 build_gpu head_dim 0",
        lambda t: kb.build_gpu("naive", 8, False, torch.float32, False, head_dim=0, device="cpu"),
        ValueError,
        "head_dim",
    ),
    case(
        "176 build_gpu span 'a'",
        lambda t: kb.build_gpu("span", 8, True, torch.float32, False, span="a", device="cpu"),
        TypeError,
        "span",
    ),
    case(
        "177 build_gpu default cuda",
        lambda t: kb.build_gpu("naive", 8, False, torch.float32, False),
        ValueError,
        "CUDA",
        marks=NO_CUDA,
    ),
    case("178 gpu_file_name None", lambda t: kb.gpu_file_name(None), TypeError, "gpu"),
    case("178 gpu_file_name int", lambda t: kb.gpu_file_name(3), TypeError, "gpu"),
    case("179 run_span_time no spans", lambda t: kb.run_span_time(16, ()), ValueError, "spans"),
    case(
        "180 run_span_time repeated span",
        lambda t: kb.run_span_time(16, (4, 4)),
        ValueError,
        "spans",
    ),
    case("181 run_span_time spans int", lambda t: kb.run_span_time(16, 4), TypeError, "spans"),
    case(
        "181 run_span_time length -1", lambda t: kb.run_span_time(-1, (4, 8)), ValueError, "length"
    ),
    case(
        "181 run_span_time seed 'a'",
        lambda t: kb.run_span_time(16, (4, 8), seed="a"),
        TypeError,
        "seed",
    ),
    case("182 span_table no rows", lambda t: kb.span_table({"rows": []}), ValueError, "rows"),
    case("182 span_table None", lambda t: kb.span_table(None), TypeError, "result"),
    case("182 span_table the rows", lambda t: kb.span_table([SPAN_ROW]), TypeError, "result"),
    case(
        "183 load_span_time missing folder",
        lambda t: kb.load_span_time(t / "nowhere"),
        ValueError,
        "is missing",
    ),
    case("183 load_span_time folder int", lambda t: kb.load_span_time(3), TypeError, "folder"),
    case(
        "184 time_triton_against_torch 'gpu'",
        lambda t: kb.time_triton_against_torch("gpu"),
        ValueError,
        "device",
    ),
    case(
        "184 time_triton_against_torch None",
        lambda t: kb.time_triton_against_torch(None),
        TypeError,
        "device must be 'cpu' or 'cuda'",
    ),
    case(
        "185 time_triton_against_torch dtype str",
        lambda t: kb.time_triton_against_torch("cpu", dtype="float16"),
        TypeError,
        "dtype must be a torch.dtype",
    ),
    case(
        "185 time_triton_against_torch int64",
        lambda t: kb.time_triton_against_torch("cpu", dtype=torch.int64),
        TypeError,
        "dtype",
    ),
    case(
        "186 time_triton_against_torch length 0",
        lambda t: kb.time_triton_against_torch("cpu", length=0),
        ValueError,
        "length",
    ),
    case(
        "186 time_triton_against_torch batch -1",
        lambda t: kb.time_triton_against_torch("cpu", batch=-1),
        ValueError,
        "batch",
    ),
    case(
        "186 time_triton_against_torch seed 'a'",
        lambda t: kb.time_triton_against_torch("cpu", length=8, seed="a"),
        TypeError,
        "seed",
    ),
]


@pytest.mark.parametrize("call, error, words", REFUSED)
def test_refused_before_measuring_naming_the_argument(
    call, error, words, tmp_path, nothing_measured
):
    with pytest.raises(error, match=re.escape(words)):
        call(tmp_path)


# -- measure: FLOP counts, times, fits ---------------------------------------------------------


def _old_causal_pairs(L, S):
    """The loop the closed form replaced (one step per query)."""
    return sum(min(S, max(0, i + S - L + 1)) for i in range(L))


def test_flop_counts_of_numpy_sizes_are_the_exact_python_ints():
    big = m.attention_flops(np.int64(10**6), 1000, 10**5, 10**5, 128)
    assert big == 2 * 10**6 * 1000 * 10**10 * 256 and type(big) is int
    small = m.attention_flops(np.int32(1000), np.int32(16), 4096, 4096, np.int16(64))
    assert small == m.attention_flops(1000, 16, 4096, 4096, 64) == 68719476736000
    layer = m.multihead_flops(np.int64(10**6), 10**5, 10**5, np.int64(4096), 32)
    assert layer == m.multihead_flops(10**6, 10**5, 10**5, 4096, 32) > 0 and type(layer) is int


def test_the_causal_count_is_the_masks_count_in_closed_form():
    for L in range(1, 41):
        for S in range(1, 41):
            pairs = _old_causal_pairs(L, S)
            assert m.attention_flops(1, 1, L, S, 3, 5, causal=True) == 2 * pairs * 8, (L, S)
            if L <= 12 and S <= 12:
                assert pairs == int(causal_mask(L, S).sum())
    start = time.perf_counter()
    huge = m.attention_flops(1, 1, 10**7, 10**7, 8, causal=True)  # the loop took seconds
    assert huge == 2 * (10**7 * (10**7 + 1) // 2) * 16 and time.perf_counter() - start < 0.1
    assert m.attention_flops(1, 1, 10**12, 10**12, 8, causal=True) > 0  # and this one hung


def test_a_zero_median_has_a_spread_not_a_zero_division():
    assert m.Timing([0.0, 0.0]).spread == 0.0
    assert m.Timing([0.0, 0.0, 1e-9]).spread == math.inf
    assert m.Timing([1.0, 2.0, 3.0]).spread == 1.0


def test_fit_slope_takes_tensors_arrays_and_huge_ints():
    assert m.fit_slope(torch.tensor([1.0, 2.0, 4.0]), torch.tensor([1.0, 4.0, 16.0])) == 2.0
    assert m.fit_slope(np.array([1, 2, 4]), np.array([1.0, 4.0, 16.0])) == 2.0
    assert m.fit_slope([10**400, 10**401], [1, 2]) == pytest.approx(math.log10(2))


def test_the_command_refuses_a_tag_that_is_a_path_before_measuring(tmp_path, nothing_measured):
    from attncourse.benchmarks.__main__ import main

    with pytest.raises(SystemExit):
        main(
            [
                "--cache",
                "--contexts",
                "8",
                "--device",
                "cpu",
                "--output",
                str(tmp_path),
                "--tag",
                "a/b",
            ]
        )
    assert not list(tmp_path.iterdir())


def test_cpu_peak_memory_names_a_builder_without_fn():
    with pytest.raises(RuntimeError, match="under 'fn'"):
        m.cpu_peak_memory(
            "attncourse.benchmarks.measure:fit_slope", {"lengths": [1, 2], "values": [1, 2]}
        )


# -- common: result files and the machine ------------------------------------------------------


def test_write_result_refuses_nan_and_writes_nothing(tmp_path):
    with pytest.raises(ValueError, match=re.escape("result['rows'][0]['seconds'] is nan")):
        common.write_result({"rows": [{"seconds": float("nan")}]}, tmp_path, "r.json")
    assert not list(tmp_path.iterdir())
    path = common.write_result({"rows": [{"seconds": 0.5}]}, tmp_path, "r.json")
    assert json.loads(path.read_text()) == {"rows": [{"seconds": 0.5}]}


@pytest.mark.parametrize("name", ["", ".", "..", "../x.json", "sub/x.json", "ABSOLUTE"])
def test_write_result_never_writes_outside_its_folder(tmp_path, name):
    folder = tmp_path / "results"
    name = str(tmp_path / "escaped.json") if name == "ABSOLUTE" else name
    with pytest.raises(ValueError, match="plain file name"):
        common.write_result({"a": 1}, folder, name)
    assert not list(tmp_path.iterdir())  # not even the folder


def test_an_empty_folder_is_the_working_directory_not_the_committed_results(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="is missing"):
        common.read_result("constants_cpu.json", "")
    with pytest.raises(ValueError, match="is missing"):
        ab.load("cpu", "")
    common.write_result({"a": 1}, "", "constants_cpu.json")
    assert common.read_result("constants_cpu.json", "") == {"a": 1}


def test_machine_names_the_gpu_of_any_cuda_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")
    for device in ("cuda", "cuda:0", torch.device("cuda"), torch.device("cuda", 0)):
        assert common.machine(device)["gpu"] == "Fake GPU"
    assert "gpu" not in common.machine(torch.device("cpu"))


@pytest.mark.skipif("HugePages_Total" not in open("/proc/meminfo").read(), reason="no such field")
def test_meminfo_gib_refuses_a_count_that_is_not_a_size():
    assert common.meminfo_gib("MemTotal") > 0
    with pytest.raises(ValueError, match="'HugePages_Total'.*not a size in kB"):
        common.meminfo_gib("HugePages_Total")


# -- attention and kernels: builders, tables, targets ------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: ab.build_layer("ours", 4, False, 1, 8, 2),
        lambda: ab.build_decode(
            "cached", 3, vocab_size=8, d_model=8, num_heads=2, d_ff=8, num_layers=1
        ),
        lambda: kb.run_span_time(16, (4, 16), embed_dim=8, num_heads=2, ramp=4.0, repeats=1),
    ],
    ids=["build_layer", "build_decode", "run_span_time"],
)
def test_builders_leave_the_global_random_state_alone(build):
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    build()
    assert torch.equal(torch.rand(4), expected)


def test_build_layer_draws_what_its_seed_draws_and_leaves_the_global_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    built = ab.build_layer("torch", 4, False, 2, 8, 2, seed=5)
    assert torch.equal(torch.rand(4), expected)
    torch.manual_seed(5)  # what the builder did before: reseed the global state
    reference = nn.MultiheadAttention(8, 2, batch_first=True)
    assert torch.equal(built["inputs"][0], torch.randn(2, 4, 8))
    with torch.no_grad():
        out = reference.eval()(*built["inputs"] * 3, need_weights=False)[0]
    torch.testing.assert_close(built["fn"](), out, rtol=0, atol=0)  # the same weights


def test_tables_survive_zero_times():
    torch_row = {**TIMED, "impl": "torch", "seconds": 0.0, "peak_bytes": 0}
    lines = ab.table([{**TIMED, "seconds": 0.0}, torch_row]).splitlines()
    assert len(lines) == 3 and "nan" in lines[1]
    text = kb.span_table({"rows": [{**SPAN_ROW, "seconds": 0.0}, {**SPAN_ROW, "span": 8}]})
    assert "nan" not in text and "0.000" in text
    assert "nan" in kb.span_table({"rows": [{**SPAN_ROW, "seconds": 0.0}]})


def test_plot_makes_no_figure_for_a_bad_result():
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    for bad in (None, {}, [TIMED], {"rows": [{**TIMED, "peak_bytes": None}]}):
        with pytest.raises((TypeError, ValueError)):
            ab.plot(bad)
    assert plt.get_fignums() == before


def _seconds(impl, s, pass_="forward", **extra):
    return {"impl": impl, "dtype": "float16", "length": 4096, "causal": False, "pass": pass_,
            "seconds": s, **extra}  # fmt: skip


def test_targets_count_a_zero_time():
    rows = [
        {**_seconds("triton", 0.0), "kind": "attention"},
        {**_seconds("torch-flash", 1.0), "kind": "attention"},
        {**_seconds("triton", 1.0, "forward+backward"), "kind": "attention"},
        {**_seconds("torch-flash", 0.0, "forward+backward"), "kind": "attention"},
        {**_seconds("span", 0.0, span=256.0), "kind": "span"},
        {**_seconds("span", 1.0, span=4096.0), "kind": "span"},
    ]
    out = kb.targets(rows)
    assert out["forward x torch-flash"] == {"measured": 0.0, "target": 1.111, "met": True}
    assert out["forward+backward x torch-flash"]["measured"] is None  # no ratio to a time of 0
    assert out["span 4096 / span 256"]["measured"] is None


def test_a_gpu_run_without_float16_says_why_no_target_was_measured(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setattr(
        kb, "time_interleaved", lambda fns, **kw: {n: m.Timing([1e-3]) for n in fns}
    )
    result = _gpu_run(dtypes=(torch.float32,))
    assert {r["dtype"] for r in result["rows"]} == {"float32"}
    assert all(t["measured"] is None for t in result["targets"].values())
    assert "float16" in result["targets_note"] and "float32" in result["targets_note"]
    assert kb.targets(result["rows"], length=16, dtype="float32", span_length=16, spans=(4.0, 8.0))[
        "span 4096 / span 256"
    ]["measured"] == pytest.approx(1.0)
