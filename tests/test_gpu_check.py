"""`make gpu-check` (tools/gpu_check.py) and its reader attncourse.benchmarks.gpu_report, on the CPU.

No GPU here: the tool must refuse to run. Its orchestration runs end to end on a faked machine
(the environment, the CUDA-event clock and the peak-memory reader replaced by stubs, tiny sizes,
the kernels through Triton's interpreter), so every figure in these reports is made up: the
tests check the plumbing, never a timing. tests/data/gpu_report_example.json is a synthetic
report (made-up numbers) for the reader.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from project_tools import ROOT, tool

from attncourse.benchmarks import gpu_report

gpu_check = tool("gpu_check")
EXAMPLE = ROOT / "tests" / "data" / "gpu_report_example.json"

FAKE_ENV = {
    "gpu": "Fake GPU 80GB",
    "gpu_count": 1,
    "compute_capability": "9.0",
    "sm": "sm_90",
    "memory_gib": 79.1,
    "torch": "2.99.0",
    "triton": "9.9.0",
    "cuda": "13.0",
    "cudnn": "91000",
    "driver": "580.1",
    "driver_source": "test",
    "python": "3.12.0",
    "platform": "test",
    "cpu_cores": 2,
    "tools": {},
}


def tiny_plan(**changes):
    """The quick plan at interpreter sizes: one length of 16, d = 16, two repeats, no warm-up jobs."""
    plan = replace(
        gpu_check.plan_for(True),
        lengths=(16,),
        head_dims=(16,),
        tokens=32,
        width=32,
        repeats=2,
        warmup=0,
        target_length=16,
        span_length=16,
        spans=(4.0, 16.0),
        design_head_dims=(16,),
        warm_shards=0,
    )
    return replace(plan, **changes)


def stub_clock(fns, repeats, warmup):
    """Instead of CUDA events: call each function once (so the plumbing runs), then report
    1 ms for the first, 2 ms for the second, ..."""
    timed = {}
    for i, (name, fn) in enumerate(fns.items()):
        fn()
        timed[name] = gpu_check.summarize([1.0 + i, 1.1 + i, 0.9 + i])
    return timed


@pytest.fixture
def fake_machine(monkeypatch):
    """A faked GPU machine: its environment, the timing clock and the memory reader stubbed;
    returns a function that runs the check with arguments and a plan."""
    monkeypatch.setattr(gpu_check, "environment", lambda device="cuda": dict(FAKE_ENV))
    monkeypatch.setattr(gpu_check, "time_round_robin", stub_clock)
    monkeypatch.setattr(gpu_check, "peak_mib", lambda fn, device: 1.0)

    def run(argv, plan):
        monkeypatch.setattr(gpu_check, "plan_for", lambda quick, budget_s=None: plan)
        return gpu_check.run_check(gpu_check.parse_args(argv), device="cpu")

    return run


def read_report(folder):
    (path,) = folder.glob("*.json")
    return path, gpu_report.load_report(path)


def run_child(command, *, env, cwd=ROOT, status=0):
    """``command`` in a child process (its output captured as text, at most 300 s); asserts its
    exit status is ``status``, showing the ends of its output where not."""
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == status, done.stdout[-3000:] + done.stderr[-3000:]
    return done


# -- the command line and the refusal -------------------------------------------------------------


def test_arguments():
    args = gpu_check.parse_args([])
    assert (args.quick, args.only, args.budget_s, args.memcheck_case) == (False, None, None, None)
    assert args.out == ROOT / "reports" / "gpu"
    args = gpu_check.parse_args(
        ["--quick", "--out", "x", "--only", "sweep", "timings", "--budget-s", "50"]
    )
    assert args.quick and str(args.out) == "x" and args.only == ["sweep", "timings"]
    assert args.budget_s == 50.0
    assert gpu_check.parse_args(["--memcheck-case", "span"]).memcheck_case == "span"
    for bad in (
        ["--only", "everything"],
        ["--budget-s", "0"],
        ["--memcheck-case", "nothing"],
        ["--sweep-shard", "0/2"],  # a worker needs --result
        ["--sweep-shard", "a/b", "--result", "r.json"],
    ):
        with pytest.raises(SystemExit):
            gpu_check.parse_args(bad)


def test_plans_fit_their_budgets_and_time_the_targets_first():
    full, quick = gpu_check.plan_for(False), gpu_check.plan_for(True)
    assert full.budget_s <= 7 * 60 and quick.budget_s <= 2 * 60
    assert full.phase1_s < full.budget_s and quick.phase1_s < quick.budget_s
    assert gpu_check.plan_for(True, 30).budget_s == 30.0
    for plan in (full, quick):
        settings = gpu_check.timing_settings(plan)
        targets = [s for s in settings if s.length == 4096 and s.dtype == "float16"]
        assert settings[: len(targets)] == targets  # measured first, whatever the budget
        assert {(s.head_dim, s.causal, s.backward) for s in targets} == {
            (d, c, b) for d in (64, 128) for c in (False, True) for b in (False, True)
        }
        assert all(s.batch * s.length == 16384 and s.heads * s.head_dim == 1024 for s in settings)


def test_refuses_without_a_gpu(tmp_path):
    """No CUDA GPU: a one-sentence refusal, exit status 2, no report written."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    tool = [sys.executable, str(ROOT / "tools" / "gpu_check.py")]
    done = run_child([*tool, "--out", str(tmp_path)], env=env, status=2)
    message = done.stderr.strip()
    assert "needs a CUDA GPU" in message and len(message.splitlines()) == 1, message
    assert not list(tmp_path.iterdir())


def test_nvidia_smi_gives_the_driver_and_the_compute_mode(monkeypatch):
    def run(command, **kwargs):
        assert "--query-gpu=driver_version,compute_mode,name" in command
        out = "580.65.06, Exclusive_Process, NVIDIA H100 80GB HBM3\n"
        return subprocess.CompletedProcess(command, 0, out, "")

    monkeypatch.setattr(gpu_check.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(gpu_check.subprocess, "run", run)
    assert gpu_check.nvidia_smi() == {
        "driver": "580.65.06",
        "compute_mode": "Exclusive_Process",
        "name": "NVIDIA H100 80GB HBM3",
    }
    monkeypatch.setattr(gpu_check.shutil, "which", lambda name: None)
    assert gpu_check.nvidia_smi() is None


def test_report_names_come_from_the_gpu_model():
    assert gpu_check.report_slug("NVIDIA H100 80GB HBM3", False) == "nvidia-h100-80gb-hbm3"
    assert gpu_check.report_slug("NVIDIA H200", True) == "nvidia-h200-quick"
    assert gpu_check.report_slug("NVIDIA H200", False, ["span", "sweep"]) == (
        "nvidia-h200-only-sweep-span"
    )


# -- the whole run on a faked machine ---------------------------------------------------------


def test_timings_span_and_design_end_to_end(fake_machine, monkeypatch, tmp_path):
    """Phase 2 on the CPU: rows for every implementation, the build's missing backends (cuDNN,
    FlexAttention) recorded as unavailable with a reason, the report written as JSON and as
    the reader's Markdown."""
    monkeypatch.setattr(
        gpu_check,
        "sdpa_backends_of_build",
        lambda: (["flash", "efficient"], {"cudnn": "this torch has no SDPBackend.CUDNN_ATTENTION"}),
    )
    monkeypatch.setitem(sys.modules, "torch.nn.attention.flex_attention", None)
    plan = tiny_plan(flex_lengths=(16,))
    status = fake_machine(["--only", "timings", "span", "design", "--out", str(tmp_path)], plan)
    assert status == 0  # timings never fail the run
    path, report = read_report(tmp_path)
    assert path.name == "fake-gpu-80gb-quick-only-timings-span-design.json"
    assert report["complete"] and report["environment"]["gpu"] == "Fake GPU 80GB"
    assert {n: s["status"] for n, s in report["sections"].items()} == {
        **{n: "done" for n in ("timings", "span", "design")},
        **{n: "skipped" for n in ("sweep", "tests", "chapter", "memcheck", "masks")},
    }
    rows = report["timings"]["rows"]
    assert {r["impl"] for r in rows} == {
        "course",
        "sdpa-flash",
        "sdpa-efficient",
        "sdpa-cudnn",
        "flex",
    }
    by_impl = {r["impl"]: r for r in rows if r["pass"] == "forward" and not r["causal"]}
    assert by_impl["course"]["status"] == "ok" and by_impl["course"]["median_ms"] == 1.0
    assert by_impl["sdpa-flash"]["tflops"] == pytest.approx(by_impl["sdpa-flash"]["flops"] / 2e9)
    assert by_impl["sdpa-efficient"]["status"] == "unavailable"  # no such kernel for CPU tensors
    assert "No viable backend" in by_impl["sdpa-efficient"]["reason"]
    assert by_impl["sdpa-cudnn"]["reason"] == "this torch has no SDPBackend.CUDNN_ATTENTION"
    assert "no FlexAttention" in by_impl["flex"]["reason"]
    skipped = {entry["what"]: entry["reason"] for entry in report["skipped"]}
    assert "no FlexAttention" in skipped["timings of FlexAttention"]
    assert "CUDNN" in skipped["timings of sdpa-cudnn"]
    assert report["span"]["speedup"] == {"forward": 2.0, "forward+backward": 2.0}
    grid = report["design"]["grid_order"]["comparisons"]
    assert len(grid) == 4 and all(c["winner"] == "blocks first" and c["by"] == 2.0 for c in grid)
    assert "not in this plan" in skipped["design questions block_m, num_stages and dkdv_tile"]
    markdown = path.with_suffix(".md").read_text()
    assert markdown == (
        gpu_report.summary_markdown(report) + "\n" + gpu_report.targets_markdown(report)
    )


def test_chapter_11s_masks_are_timed_with_the_chapters_own_function(
    fake_machine, monkeypatch, tmp_path
):
    """The masks section calls benchmarks.flex.time_flex_against_sdpa on the GPU in float16
    (stubbed here: its compile takes seconds) and keeps what it returns."""
    from attncourse.benchmarks import flex as flex_timing

    calls = []

    def measured(device, **kwargs):
        calls.append((device, kwargs))
        return {"rows": [{"mask": "causal", "flex_over_sdpa": 0.5}], "compile_s": 1.0}

    monkeypatch.setattr(flex_timing, "time_flex_against_sdpa", measured)
    status = fake_machine(["--only", "masks", "--out", str(tmp_path)], tiny_plan())
    assert status == 0
    _, report = read_report(tmp_path)
    assert report["sections"]["masks"]["status"] == "done"
    assert report["masks"]["rows"][0]["flex_over_sdpa"] == 0.5
    ((device, kwargs),) = calls
    assert kwargs["dtype"] == torch.float16 and kwargs["length"] == gpu_check.MASKS_QUICK_LENGTH


@pytest.mark.parametrize("why", ["no FlexAttention", "budget"])
def test_chapter_11s_masks_are_skipped_with_the_reason(fake_machine, monkeypatch, tmp_path, why):
    from attncourse import flex
    from attncourse.benchmarks import flex as flex_timing

    def never(device, **kwargs):
        raise AssertionError("nothing may be timed")

    monkeypatch.setattr(flex_timing, "time_flex_against_sdpa", never)
    if why == "no FlexAttention":
        monkeypatch.setattr(flex, "flex_available", lambda: (False, "this torch has none"))
        plan = tiny_plan()
    else:
        plan = tiny_plan(budget_s=1.0)
    assert fake_machine(["--only", "masks", "--out", str(tmp_path)], plan) == 0
    _, report = read_report(tmp_path)
    assert report["sections"]["masks"]["status"] == "skipped"
    reason = {e["what"]: e["reason"] for e in report["skipped"]}["chapter 11's masks"]
    assert ("this torch has none" if why == "no FlexAttention" else "time budget") in reason


def test_a_crashed_section_is_recorded_and_the_report_saved_after_each(
    fake_machine, monkeypatch, tmp_path
):
    def crash(*args):
        raise RuntimeError("boom: a kernel failed to launch")

    def design(plan, device, budget, report, env, checkpoint):
        (path,) = tmp_path.glob("*.json")  # what a run killed now would leave behind
        on_disk = json.loads(path.read_text())
        assert on_disk["timings"]["rows"] == [] and not on_disk["complete"]
        assert on_disk["sections"]["span"]["status"] == "crashed"
        return {"target": env["sm"], "gpu": env["gpu"]}

    monkeypatch.setattr(gpu_check, "timing_settings", lambda plan: [])
    monkeypatch.setattr(gpu_check, "span_section", crash)
    monkeypatch.setattr(gpu_check, "design_section", design)
    argv = ["--only", "timings", "span", "design", "--out", str(tmp_path)]
    assert fake_machine(argv, tiny_plan()) == 0
    _, report = read_report(tmp_path)
    span = report["sections"]["span"]
    assert span["status"] == "crashed" and "boom" in span["error"]
    assert "RuntimeError" in span["traceback"]
    assert report["sections"]["design"]["status"] == "done" and report["complete"]


def test_a_crash_in_one_timing_setting_keeps_the_others_and_each_is_saved_at_once(
    fake_machine, monkeypatch, tmp_path
):
    """On a GPU a backend can fail after its probe (in the timed rounds, or reading its peak
    memory): that setting is recorded as crashed, the others are measured, and the report on
    disk holds every setting measured so far (a run killed in the middle keeps them)."""
    calls = []

    def clock(fns, repeats, warmup):
        (path,) = tmp_path.glob("*.json")
        calls.append(len(json.loads(path.read_text()).get("timings", {"rows": []})["rows"]))
        if len(calls) == 2:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return stub_clock(fns, repeats, warmup)

    monkeypatch.setattr(gpu_check, "time_round_robin", clock)
    monkeypatch.setattr(gpu_check, "sdpa_backends_of_build", lambda: (["flash"], {}))
    plan = tiny_plan(head_dims=(16, 32))
    argv = ["--only", "timings", "--out", str(tmp_path)]
    assert fake_machine(argv, plan) == 0
    _, report = read_report(tmp_path)
    assert report["sections"]["timings"]["status"] == "done"
    assert len(calls) == 8 and calls[:3] == [0, 2, 2] and calls[-1] == 12  # 2 rows a setting
    timings = report["timings"]
    assert len(timings["rows"]) == 14 and len(timings["errors"]) == 1
    assert "illegal memory access" in timings["errors"][0]["error"]
    crashed = [e for e in report["skipped"] if e["reason"].startswith("crashed")]
    assert [e["what"] for e in crashed] == [timings["errors"][0]["what"]]


def test_span_and_design_keep_what_they_measured_when_one_step_crashes(
    fake_machine, monkeypatch, tmp_path
):
    calls = []

    def clock(fns, repeats, warmup):
        calls.append(sorted(fns))
        if len(calls) in (1, 3):  # span's forward, and design's second comparison
            raise RuntimeError("triton.runtime.errors.OutOfResources: out of resource")
        return stub_clock(fns, repeats, warmup)

    monkeypatch.setattr(gpu_check, "time_round_robin", clock)
    argv = ["--only", "span", "design", "--out", str(tmp_path)]
    assert fake_machine(argv, tiny_plan()) == 0
    _, report = read_report(tmp_path)
    assert report["sections"]["span"]["status"] == report["sections"]["design"]["status"] == "done"
    assert list(report["span"]["speedup"]) == ["forward+backward"]
    assert len(report["span"]["errors"]) == 1
    grid = report["design"]["grid_order"]
    assert len(grid["comparisons"]) == 3 and len(grid["errors"]) == 1


def test_flexattention_is_not_compiled_again_after_two_failures(
    fake_machine, monkeypatch, tmp_path
):
    """A FlexAttention whose compile fails (no working Inductor here) costs seconds per try:
    after two failures in a row the remaining settings say why instead of trying."""
    tries = []

    def compiled(q, k, v, block_mask=None):
        tries.append(q.shape)
        raise RuntimeError("BackendCompilerFailed: backend='inductor' raised: no C compiler")

    flex = {"compiled": compiled, "block_mask": lambda *args, **kwargs: None}
    monkeypatch.setattr(gpu_check, "flex_support", lambda: (flex, None))
    monkeypatch.setattr(gpu_check, "sdpa_backends_of_build", lambda: ([], {}))
    plan = tiny_plan(flex_lengths=(16,), head_dims=(16, 32), budget_s=600.0)
    assert fake_machine(["--only", "timings", "--out", str(tmp_path)], plan) == 0
    _, report = read_report(tmp_path)
    assert len(tries) == 2
    flex_rows = [r for r in report["timings"]["rows"] if r["impl"] == "flex"]
    assert len(flex_rows) == 8 and all(r["status"] == "unavailable" for r in flex_rows)
    assert all("no C compiler" in r["reason"] for r in flex_rows)
    assert "failed twice in a row" in flex_rows[-1]["reason"]
    course = [r for r in report["timings"]["rows"] if r["impl"] == "course"]
    assert len(course) == 8 and all(r["status"] == "ok" for r in course)


def test_a_failing_block_mask_costs_only_flexattentions_rows(fake_machine, monkeypatch, tmp_path):
    """create_block_mask (the causal settings' mask) raising, as a torch whose signature
    differs would: FlexAttention's row says why, the course's and SDPA's rows are measured."""

    def block_mask(*args, **kwargs):
        raise TypeError("create_block_mask() got an unexpected keyword argument 'device'")

    flex = {"compiled": lambda q, k, v, block_mask=None: q.clone(), "block_mask": block_mask}
    monkeypatch.setattr(gpu_check, "flex_support", lambda: (flex, None))
    monkeypatch.setattr(gpu_check, "sdpa_backends_of_build", lambda: ([], {}))
    plan = tiny_plan(flex_lengths=(16,), budget_s=600.0)
    assert fake_machine(["--only", "timings", "--out", str(tmp_path)], plan) == 0
    _, report = read_report(tmp_path)
    rows = report["timings"]["rows"]
    assert "errors" not in report["timings"]
    for causal in (False, True):
        course = [r for r in rows if r["impl"] == "course" and r["causal"] == causal]
        flex_rows = [r for r in rows if r["impl"] == "flex" and r["causal"] == causal]
        assert len(course) == len(flex_rows) == 2 and all(r["status"] == "ok" for r in course)
        if causal:
            assert all("unexpected keyword argument" in r["reason"] for r in flex_rows)
        else:
            assert all(r["status"] == "ok" for r in flex_rows)


def test_flexattention_that_failed_every_warmup_compile_is_not_tried():
    warm = {
        "items": [
            {"what": "course L=16 d=16 float16 full forward", "seconds": 1.0},
            {"what": "flex L=16 d=16 float16 full forward", "error": "RuntimeError: no cc"},
            {"what": "flex L=16 d=16 float16 causal forward", "error": "RuntimeError: no cc"},
        ]
    }
    assert "all failed: RuntimeError: no cc" in gpu_check.flex_broken_in_warmup(warm)
    warm["items"][2] = {"what": "flex L=16 d=16 float16 causal forward", "seconds": 30.0}
    assert gpu_check.flex_broken_in_warmup(warm) is None
    assert gpu_check.flex_broken_in_warmup({}) is None


def test_an_interrupted_run_kills_phase1_and_saves_the_report(fake_machine, monkeypatch, tmp_path):
    """SIGTERM (a time limit) or Ctrl-C during phase 1: its processes live in their own
    sessions, so the signal does not reach them; the tool kills them and saves the report."""
    sleeper = gpu_check.Job(
        "sweep",
        "sweep 0/1",
        [sys.executable, "-c", "import time; time.sleep(120)"],
        tmp_path / "sleeper.log",
        tmp_path / "sleeper.json",
    )
    monkeypatch.setattr(gpu_check, "phase1_jobs", lambda *args: {"sweep": [sleeper]})

    def interrupted(jobs, deadline):
        assert sleeper.process.poll() is None
        gpu_check._terminate(15, None)  # what the SIGTERM handler of main() does

    def rmtree(path, *args, **kwargs):  # the work folder goes: its processes must be dead
        assert sleeper.process.poll() is not None, "work folder removed under a running job"
        real_rmtree(path, *args, **kwargs)

    real_rmtree = gpu_check.tempfile._shutil.rmtree
    monkeypatch.setattr(gpu_check.tempfile._shutil, "rmtree", rmtree)

    monkeypatch.setattr(gpu_check, "wait_for", interrupted)
    with pytest.raises(gpu_check.Terminated):
        fake_machine(["--only", "sweep", "--out", str(tmp_path / "out")], tiny_plan())
    assert sleeper.process.poll() is not None  # killed, not left running on the GPU
    _, report = read_report(tmp_path / "out")
    assert not report["complete"] and "SIGTERM" in report["interrupted"]
    assert "sweep 0/1" in report["interrupted"]


def test_a_second_sigterm_does_not_cut_the_last_save_short(fake_machine, monkeypatch, tmp_path):
    previous = signal.signal(signal.SIGTERM, gpu_check._terminate)  # as main() installs it
    try:
        real_save = gpu_check.save

        def save(report, folder, slug):
            if "interrupted" in report:
                os.kill(os.getpid(), signal.SIGTERM)  # the time limit signals again
            return real_save(report, folder, slug)

        def design(*args):
            raise KeyboardInterrupt

        monkeypatch.setattr(gpu_check, "save", save)
        monkeypatch.setattr(gpu_check, "design_section", design)
        with pytest.raises(KeyboardInterrupt):
            fake_machine(["--only", "design", "--out", str(tmp_path)], tiny_plan())
    finally:
        signal.signal(signal.SIGTERM, previous)
    _, report = read_report(tmp_path)
    assert report["interrupted"].startswith("KeyboardInterrupt")


def test_the_report_is_written_even_when_its_summary_fails(tmp_path, monkeypatch):
    def broken(report):
        raise KeyError("shapes")

    monkeypatch.setattr(gpu_report, "summary_markdown", broken)
    report = gpu_check.new_report(gpu_check.parse_args([]), tiny_plan(), dict(FAKE_ENV))
    report["odd"] = {1: float("nan"), "set": {3}}  # not JSON as it is
    path = gpu_check.save(report, tmp_path, "x")
    saved = json.loads(path.read_text())
    assert saved["odd"] == {"1": None, "set": "{3}"}
    assert "could not be written (KeyError" in (tmp_path / "x.md").read_text()


def test_a_rerun_keeps_a_complete_report_until_it_completes_itself(
    fake_machine, monkeypatch, tmp_path
):
    """A complete report is never replaced by a run that has not finished: a rerun writes to
    <gpu>-partial.* (a kill leaves the complete one as it was), and only once it completes does
    it take the report's own name."""
    argv = ["--only", "design", "--out", str(tmp_path)]
    monkeypatch.setattr(gpu_check, "design_questions", lambda plan: {})
    real_design = gpu_check.design_section
    assert fake_machine(argv, tiny_plan()) == 0
    (first,) = tmp_path.glob("*.json")
    assert json.loads(first.read_text())["complete"]
    complete = json.dumps({**json.loads(first.read_text()), "first_run": True})
    first.write_text(complete)  # marked: two quick runs can write the very same text

    def killed(*args, **kwargs):
        assert first.read_text() == complete  # untouched while the rerun runs
        assert json.loads((tmp_path / f"{first.stem}-partial.json").read_text())["sections"]
        raise KeyboardInterrupt  # the run is killed here

    monkeypatch.setattr(gpu_check, "design_section", killed)
    with pytest.raises(KeyboardInterrupt):
        fake_machine(argv, tiny_plan())
    assert first.read_text() == complete
    partial = json.loads((tmp_path / f"{first.stem}-partial.json").read_text())
    assert not partial["complete"] and "KeyboardInterrupt" in partial["interrupted"]
    assert (tmp_path / f"{first.stem}-partial.md").is_file()

    # a rerun that completes replaces the complete report, and no partial file is left
    monkeypatch.setattr(gpu_check, "design_section", real_design)
    assert fake_machine(argv, tiny_plan()) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name, f"{first.stem}.md"]
    replaced = json.loads(first.read_text())
    assert replaced["complete"] and "first_run" not in replaced


def test_a_rerun_after_a_killed_run_overwrites_the_partial_report(
    fake_machine, monkeypatch, tmp_path
):
    monkeypatch.setattr(gpu_check, "design_questions", lambda plan: {})
    argv = ["--only", "design", "--out", str(tmp_path)]
    assert fake_machine(argv, tiny_plan()) == 0
    (path,) = tmp_path.glob("*.json")
    report = json.loads(path.read_text())
    path.write_text(json.dumps({**report, "complete": False}))  # as a killed run leaves it
    assert fake_machine(argv, tiny_plan()) == 0
    assert [p.name for p in tmp_path.glob("*.json")] == [path.name]
    assert json.loads(path.read_text())["complete"]


def test_without_compute_sanitizer_memcheck_is_skipped(fake_machine, monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_check.shutil, "which", lambda name: None)
    assert fake_machine(["--only", "memcheck", "--out", str(tmp_path)], tiny_plan()) == 0
    _, report = read_report(tmp_path)
    assert report["sections"]["memcheck"] == {
        "status": "skipped",
        "reason": "compute-sanitizer is not on the PATH",
    }
    assert {"what": "memcheck", "reason": "compute-sanitizer is not on the PATH"} in report[
        "skipped"
    ]
    memcheck_target = report["targets"][-1]
    assert memcheck_target["met"] is None and memcheck_target["measured"] is None


SYNTHETIC_CELLS = [
    ("import subprocess  # the set-up cell: never run", ["remove-cell"]),
    ("ON_GPU = True\ndef f():\n    return 41 + 1", []),
    ("import inspect\nassert 'return 41 + 1' in inspect.getsource(f)", []),  # linecache
    ("assert f() == 43, 'wrong answer'", []),
    ("raise ValueError('shown on purpose')", ["raises-exception"]),
    ("x = 1  # tagged, but raises nothing", ["raises-exception"]),
    ("def stub():\n    raise NotImplementedError  # your code here\n\nstub()", []),
    ("from IPython.display import Markdown, display\ndisplay(Markdown('**hi**'))", []),
]


def write_notebook(path, cells):
    notebook = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# A title"]},
            *(
                {"cell_type": "code", "metadata": {"tags": tags}, "source": source.splitlines(True)}
                for source, tags in cells
            ),
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(notebook))
    return path


def test_chapter_cells_are_judged_as_nbval_would(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "IPython", None)  # as on the GPU machine: no IPython
    monkeypatch.setitem(sys.modules, "IPython.display", None)
    cells = gpu_check.code_cells(write_notebook(tmp_path / "nb.ipynb", SYNTHETIC_CELLS))
    result = gpu_check.execute_cells(cells)
    statuses = [(c["cell"], c["status"]) for c in result["cells"]]
    assert statuses == [
        (1, "skipped"),
        (2, "ok"),
        (3, "ok"),
        (4, "failed"),
        (5, "raised as expected"),
        (6, "failed"),
        (7, "stub"),
        (8, "ok"),
    ]
    details = {c["cell"]: c["detail"] for c in result["cells"]}
    assert details[4].startswith("AssertionError: wrong answer")
    assert "expected an exception" in details[6]
    assert result["on_gpu"] is True and result["ipython_stub"] is True
    assert "**hi**" in capsys.readouterr().out


def test_chapter_runs_in_a_fresh_process(fake_machine, tmp_path):
    """The chapter section end to end: its own process, each cell recorded, a failing cell
    fails the run (exit status 1)."""
    notebook = write_notebook(tmp_path / "nb.ipynb", SYNTHETIC_CELLS)
    out = tmp_path / "out"
    assert fake_machine(["--only", "chapter", "--out", str(out)], tiny_plan(notebook=notebook)) == 1
    _, report = read_report(out)
    chapter = report["chapter"]
    assert chapter["finished"] and chapter["on_gpu"] and chapter["outcome"] == "finished"
    assert (chapter["passed"], chapter["failed"]) == (6, 2)
    assert not report["correctness"]["ok"] and "chapter" in report["correctness"]["summary"]


def test_the_real_chapter_runs_cell_by_cell_through_the_interpreter(tmp_path):
    """Chapter 10 itself through the runner (about 10 s on the CPU): every cell as nbval accepts
    it, the exercise stubs and check() cells included; without a GPU its CPU branch runs."""
    result = tmp_path / "chapter.json"
    run_child(
        gpu_check.tool_command("--chapter", str(gpu_check.NOTEBOOK), "--result", str(result)),
        cwd=tmp_path,
        env=gpu_check.child_env(),
    )
    chapter = json.loads(result.read_text())
    assert chapter["finished"] and chapter["on_gpu"] is False
    assert chapter["cells"][0]["status"] == "skipped"  # the set-up cell, which would pip-install
    failed = [
        c for c in chapter["cells"] if c["status"] not in ("ok", "stub", "raised as expected")
    ]
    assert failed == [chapter["cells"][0]], failed


def test_a_phase1_process_past_its_time_is_killed(tmp_path):
    job = gpu_check.Job(
        "tests", "sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "log"
    )
    gpu_check.start_job(job, tmp_path)
    gpu_check.wait_for([job], deadline=gpu_check.time.monotonic() + 1)
    assert job.timed_out and job.outcome().startswith("timed out")
    assert job.process.poll() is not None


def test_cuda_event_timing_reads_each_pair_after_one_synchronisation(monkeypatch):
    """time_round_robin itself, the CUDA-only path the other tests stub out: a fake CUDA event
    reads a fake GPU clock that each call advances (a: 2 ms, b: 5 ms); every call between its
    own pair of events, round-robin after the warm-up, and no event read before the
    synchronisation (elapsed_time on an unfinished event raises on a GPU)."""
    gpu = {"clock": 0.0, "synchronized": False}
    calls = []

    class FakeEvent:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.at = None

        def record(self, stream=None):
            gpu["synchronized"] = False
            self.at = gpu["clock"]

        def elapsed_time(self, end):
            assert gpu["synchronized"], "elapsed_time before torch.cuda.synchronize()"
            return end.at - self.at

    def synchronize(device=None):
        gpu["synchronized"] = True

    def work(name, ms):
        def fn():
            calls.append(name)
            gpu["clock"] += ms

        return fn

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    timed = gpu_check.time_round_robin({"a": work("a", 2.0), "b": work("b", 5.0)}, 3, 2)
    assert calls == ["a", "b"] * 5
    assert timed["a"]["times_ms"] == [2.0] * 3 and timed["b"]["median_ms"] == 5.0
    assert timed["b"]["p20_ms"] == timed["b"]["p80_ms"] == 5.0


def test_chapter_cells_plot_where_ipython_is_missing(tmp_path):
    """On the GPU machine there is no IPython, so the runner's stand-in is what matplotlib
    finds in sys.modules: pyplot's first figure asks it for get_ipython() (its REPL display
    hook) and the canvas for version_info. Run in a fresh process, IPython hidden, so that
    pyplot resolves its backend under the stand-in, as chapter 10's plotting cells do there."""
    cells = [
        ("import matplotlib.pyplot as plt\nfig = plt.figure()\nplt.plot([1, 2])\nplt.show()", []),
        ("from IPython.display import Markdown, display\ndisplay(Markdown('**hi**'))", []),
        ("from attncourse.course.runtime import set_threads\nset_threads(1)", []),
    ]
    notebook = write_notebook(tmp_path / "nb.ipynb", cells)
    result = tmp_path / "result.json"
    code = (
        "import sys\n"
        "sys.modules['IPython'] = sys.modules['IPython.display'] = None  # no IPython\n"
        "from project_tools import tool\n"
        f"sys.exit(tool('gpu_check').main(['--chapter', {str(notebook)!r},"
        f" '--result', {str(result)!r}]))\n"
    )
    env = gpu_check.child_env(PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    done = run_child([sys.executable, "-c", code], cwd=tmp_path, env=env)
    chapter = json.loads(result.read_text())
    assert chapter["ipython_stub"] is True
    assert [(c["status"], c["detail"]) for c in chapter["cells"]] == [("ok", None)] * 3
    assert "**hi**" in done.stdout


# -- the pieces ---------------------------------------------------------------------------------


def test_sweep_covers_every_variant_dtype_head_size_edge_and_layout():
    cases = gpu_check.sweep_cases(quick=False)
    assert {(c.variant, c.dtype) for c in cases} == {
        (v, t) for v in gpu_check.VARIANTS for t in gpu_check.DTYPES
    }
    assert {c.head_dim for c in cases} == {16, 32, 64, 128}
    assert any(c.length == 1 for c in cases) and any(c.keys == 1 for c in cases)
    assert any(c.length > c.keys and c.variant == "causal" for c in cases)
    assert {c.layout for c in cases} == {"contiguous", "strided", "strided-d", "offset-2^31"}
    assert all(c.length % 16 or c.keys % 16 for c in cases if c.layout == "contiguous")
    assert len({c.name for c in cases}) == len(cases)
    assert {c.name for c in gpu_check.sweep_cases(quick=True)} <= {c.name for c in cases}


def test_the_far_head_starts_past_2_31_elements():
    """The offset case's key and value heads, built on the meta device (nothing allocated)."""
    (c,) = [c for c in gpu_check.sweep_cases(quick=True) if c.layout == "offset-2^31"]
    k, v = gpu_check._far_key_values(c, "meta")
    assert k.shape == v.shape == (1, 2, c.keys, c.head_dim)
    assert k.stride(1) > 2**31 and v.storage_offset() == c.head_dim
    assert gpu_check.offset_buffer_bytes(c) < 5 * 2**30  # sane on an 80 GB card


@pytest.mark.parametrize(
    "case",
    [
        gpu_check.Case("causal", "float32", 16, 20, 13),
        gpu_check.Case("span", "float16", 16, 19, 19, heads=3),
        gpu_check.Case("lengths", "float32", 32, 17, 21, "strided-d", batch=3),
        gpu_check.Case("plain", "float16", 16, 1, 18, "strided"),
    ],
    ids=lambda c: c.name,
)
def test_sweep_cases_pass_through_the_interpreter(case):
    record = gpu_check.run_case(case, "cpu")
    assert record["status"] == "passed", record
    assert set(record["results"]) >= {"output", "dq", "dk", "dv"}


def test_a_wrong_result_fails_its_case(monkeypatch):
    real = gpu_check.reference_results

    def off_by_a_little(c, inputs):
        results = real(c, inputs)
        results["dk"] = results["dk"] + 1e-2
        return results

    monkeypatch.setattr(gpu_check, "reference_results", off_by_a_little)
    record = gpu_check.run_case(gpu_check.Case("plain", "float32", 16, 20, 13), "cpu")
    assert record["status"] == "failed" and not record["results"]["dk"]["ok"]
    assert record["results"]["output"]["ok"]


def test_missing_backends_are_reported_with_a_reason(monkeypatch):
    class OldBackends:  # an SDPBackend from before cuDNN attention
        FLASH_ATTENTION, EFFICIENT_ATTENTION, MATH = 1, 2, 0

    monkeypatch.setattr(torch.nn.attention, "SDPBackend", OldBackends)
    have, missing = gpu_check.sdpa_backends_of_build()
    assert have == ["flash", "efficient"] and "CUDNN_ATTENTION" in missing["cudnn"]
    monkeypatch.setitem(sys.modules, "torch.nn.attention.flex_attention", None)
    flex, reason = gpu_check.flex_support()
    assert flex is None and "no FlexAttention" in reason


def test_tile_ratio_is_computed_from_the_launchers_tiles():
    plan = gpu_check.plan_for(False)
    tiles = gpu_check.span_tiles((9, 0), plan)
    assert (tiles["block_m"], tiles["block_n"]) == (64, 64)
    assert tiles["tiles"] == {"short": 369, "full": 2080}
    assert tiles["tile_ratio"] == pytest.approx(2080 / 369)


def test_outputs_of_pytest_and_compute_sanitizer_are_read():
    assert gpu_check.parse_pytest("...\n61 passed, 2 failed, 30 skipped, 1 error in 80.2s\n") == {
        "passed": 61,
        "failed": 2,
        "errors": 1,
        "skipped": 30,
        "summary": True,
    }
    assert gpu_check.parse_pytest("collected nothing") == {
        "passed": 0,
        "failed": 0,
        "errors": 0,
        "skipped": 0,
        "summary": False,
    }
    clean = "memcheck case forward: done\n========= ERROR SUMMARY: 0 errors\n"
    assert gpu_check.memcheck_verdict(0, clean, "forward")["clean"]
    dirty = "========= Invalid __global__ read\n========= ERROR SUMMARY: 3 errors\n"
    verdict = gpu_check.memcheck_verdict(1, "memcheck case forward: done\n" + dirty, "forward")
    assert not verdict["clean"] and verdict["errors"] == 3
    assert not gpu_check.memcheck_verdict(0, "ERROR SUMMARY: 0 errors", "forward")["clean"]
    command = gpu_check.test_command(gpu_check.plan_for(False))
    assert command[command.index("-o") + 1] == "addopts=" and "tests/test_kernels.py" in command


def test_a_killed_pytest_still_reports_the_tests_it_had_finished():
    """Killed at phase 1's limit, pytest prints no summary: the counts come from its verbose
    per-test lines (pytest-xdist's form and the plain one), with the failing tests named."""
    command = gpu_check.test_command(gpu_check.plan_for(True))
    assert "-v" in command and "-q" not in command
    killed = (
        "created: 6/6 workers\n6 workers [40 items]\n\n"
        "[gw0] [  2%] PASSED tests/test_kernels.py::test_softmax_rows[cuda] \n"
        "[gw1] [  5%] SKIPPED tests/test_kernels.py::test_softmax_rows[cpu] \n"
        "[gw2] [  7%] FAILED tests/test_kernels.py::test_bfloat16_on_cuda[cuda] \n"
        "[gw3] [ 10%] PASSED tests/test_kernels.py::test_scale_argument[cuda] \n"
    )
    counts = gpu_check.parse_pytest(killed)
    assert counts == {"passed": 2, "failed": 1, "errors": 0, "skipped": 1, "summary": False}
    assert gpu_check.failed_tests(killed) == ["tests/test_kernels.py::test_bfloat16_on_cuda[cuda]"]
    plain = (
        "tests/test_kernels.py::test_softmax_rows[cuda] PASSED                    [ 50%]\n"
        "tests/test_kernels.py::test_scale_argument[cuda] ERROR                   [100%]\n"
    )
    assert gpu_check.parse_pytest(plain)["errors"] == 1
    finished = killed + (
        "=========================== short test summary info ============================\n"
        "FAILED tests/test_kernels.py::test_bfloat16_on_cuda[cuda] - AssertionError: x\n"
        "=================== 30 passed, 1 failed, 9 skipped in 61.0s ===================\n"
    )
    assert gpu_check.parse_pytest(finished) == {
        "passed": 30,
        "failed": 1,
        "errors": 0,
        "skipped": 9,
        "summary": True,
    }
    assert gpu_check.failed_tests(finished) == [
        "tests/test_kernels.py::test_bfloat16_on_cuda[cuda]"
    ]


def test_memcheck_names_its_errors_by_kind():
    """compute-sanitizer's error headers are kept (a long output's tail can lose them), split
    into the kernels' memory accesses and CUDA API calls that returned an error (torch's, as
    a rule): the verdict stays strict, the report tells a kernel bug from the rest."""
    output = (
        "========= COMPUTE-SANITIZER\n"
        '========= Program hit cudaErrorInvalidValue (error 1) due to "invalid argument" on'
        " CUDA API call to cudaFuncGetAttributes.\n"
        "=========     Saved host backtrace up to driver entry point at error\n"
        "=========         Host Frame: [0x1] in libtorch_cuda.so\n"
        + "memcheck case forward: done\n"
        * 200
        + "========= Invalid __global__ read of size 2 bytes\n"
        "=========     at _forward_kernel+0x1a0\n"
        "=========     by thread (3,0,0) in block (1,0,0)\n"
        "========= Target application returned an error\n"
        "========= ERROR SUMMARY: 2 errors\n"
    )
    verdict = gpu_check.memcheck_verdict(1, output, "forward")
    assert not verdict["clean"] and verdict["errors"] == 2
    assert verdict["access_errors"] == ["Invalid __global__ read of size 2 bytes"]
    assert verdict["api_errors"] == [
        'Program hit cudaErrorInvalidValue (error 1) due to "invalid argument" on CUDA API call'
        " to cudaFuncGetAttributes."
    ]
    clean = "memcheck case forward: done\n========= ERROR SUMMARY: 0 errors\n"
    verdict = gpu_check.memcheck_verdict(0, clean, "forward")
    assert verdict["clean"] and verdict["access_errors"] == verdict["api_errors"] == []


def test_targets_follow_the_measurements():
    report = json.loads(EXAMPLE.read_text())
    rows = report["timings"]["rows"]
    targets = {t["name"]: t for t in gpu_check.evaluate_targets(report)}
    for pass_name, threshold in (("forward", 0.9), ("forward+backward", 0.7)):
        want = dict(length=4096, dtype="float16", head_dim=64, causal=False, status="ok")
        course, flash = (
            next(
                r
                for r in rows
                if r["impl"] == impl
                and r["pass"] == pass_name
                and all(r[k] == v for k, v in want.items())
            )
            for impl in ("course", "sdpa-flash")
        )
        target = targets[f"{pass_name} L=4096 d=64 float16 full: course / torch flash throughput"]
        assert target["measured"] == pytest.approx(flash["median_ms"] / course["median_ms"])
        assert target["met"] == (target["measured"] >= threshold)
    span = report["span"]
    forward = targets["adaptive span forward: time at the full span / time at the short span"]
    assert forward["met"] == (span["speedup"]["forward"] >= 0.8 * 2080 / 369)
    verdict = gpu_check.correctness(report)
    assert not verdict["ok"] and verdict["problems"] == [
        "sweep: 1 of 36 cases failed or did not run"
    ]
    report["sweep"]["failed"] = 0
    assert gpu_check.correctness(report)["ok"]


# -- the reader -------------------------------------------------------------------------------


def test_load_report_checks_the_schema(tmp_path):
    report = gpu_report.load_report(EXAMPLE)
    assert report["schema_version"] == gpu_report.SCHEMA_VERSION
    with pytest.raises(TypeError, match="path"):
        gpu_report.load_report(3)
    with pytest.raises(ValueError, match="no such report"):
        gpu_report.load_report(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        gpu_report.load_report(tmp_path / "bad.json")
    for change, message in (
        ({"schema_version": 2}, "schema_version 2"),
        ({"targets": None}, "lacks the key.s. targets"),
        ({"environment": {**report["environment"], "triton": None}}, "environment lacks .* triton"),
    ):
        broken = {**report, **change}
        for key, value in change.items():
            if value is None:
                del broken[key]
            elif isinstance(value, dict):
                broken[key] = {k: v for k, v in value.items() if v is not None}
        (tmp_path / "broken.json").write_text(json.dumps(broken))
        with pytest.raises(ValueError, match=message):
            gpu_report.load_report(tmp_path / "broken.json")
    with pytest.raises(TypeError, match="report"):
        gpu_report.summary_markdown(["not", "a", "report"])
    with pytest.raises(ValueError, match="lacks the key.s. date"):
        gpu_report.targets_markdown({k: v for k, v in report.items() if k != "date"})


def test_find_reports(tmp_path, monkeypatch):
    assert gpu_report.find_reports(tmp_path) == []
    folder = tmp_path / "checkout" / "reports" / "gpu"
    folder.mkdir(parents=True)
    shutil.copy(EXAMPLE, folder / "example.json")
    (found,) = gpu_report.find_reports(folder)
    assert found["path"] == str((folder / "example.json").resolve())
    nested = tmp_path / "checkout" / "book" / "deeper"
    nested.mkdir(parents=True)
    monkeypatch.chdir(nested)  # found by walking up from the current directory
    assert str((folder / "example.json").resolve()) in [
        r["path"] for r in gpu_report.find_reports()
    ]
    with pytest.raises(TypeError, match="folder"):
        gpu_report.find_reports(3)


def test_summary_names_the_machine_and_computes_the_ratios():
    report = gpu_report.load_report(EXAMPLE)
    summary = gpu_report.summary_markdown(report)
    env = report["environment"]
    for fact in (
        env["gpu"],
        env["torch"],
        env["triton"],
        env["cuda"],
        env["cudnn"],
        report["date"],
    ):
        assert fact in summary
    lines = summary.splitlines()
    tables = [i for i, line in enumerate(lines) if line.startswith("|---")]
    assert len(tables) == 4  # the comparison, adaptive span, the design questions, the masks
    for i in tables:  # each headed by the GPU, the versions and the date
        caption = lines[i - 3]
        assert all(fact in caption for fact in (env["gpu"], env["torch"], report["date"]))
    rows = report["timings"]["rows"]
    for course in (r for r in rows if r["impl"] == "course"):
        same = lambda r, c=course: all(r[k] == c[k] for k in ("head_dim", "causal", "pass"))
        flash = next(r for r in rows if r["impl"] == "sdpa-flash" and same(r))
        cudnn = next(r for r in rows if r["impl"] == "sdpa-cudnn" and same(r))
        line = (
            f"| {course['head_dim']} | {'yes' if course['causal'] else 'no'} | {course['pass'].replace('+', ' + ')}"
            f" | {course['tflops']:.1f} | {flash['tflops']:.1f}"
            f" | {course['tflops'] / flash['tflops']:.2f}× | {cudnn['tflops']:.1f}"
            f" | {course['tflops'] / cudnn['tflops']:.2f}× |"
        )
        assert line in summary
    span = report["span"]
    forward = {r["span"]: r["median_ms"] for r in span["rows"] if r["pass"] == "forward"}
    assert f"| {forward[4096.0] / forward[256.0]:.2f}× | {2080 / 369:.2f}× |" in summary
    assert "35 of 36 cases passed" in summary and "4 of 4 cases clean" in summary
    assert "| grid_order | 4096 | 64 | yes | forward + backward | heads first | " in summary
    for row in report["masks"]["rows"]:  # chapter 11's masks, the ratio as the file has it
        assert (
            f"| {row['mask']} | {row['kept']} of {row['total']} | {row['flex_ms']:.3f}"
            f" | {row['sdpa_ms']:.3f} | {row['tiled_ms']:.3f} | {row['flex_over_sdpa']:.2f} |"
        ) in summary
    assert f"compiled ({report['masks']['compile_s']:.1f} s to compile" in summary
    targets = gpu_report.targets_markdown(report)
    assert targets.count("| missed |") == sum(t["met"] is False for t in report["targets"])
    assert env["gpu"] in targets and report["date"] in targets


# -- which code a report measured ----------------------------------------------------------------


def _copy_sources(destination):
    """The files the fingerprints read, copied to ``destination`` (a checkout elsewhere)."""
    shutil.copytree(
        ROOT / "attncourse",
        destination / "attncourse",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (destination / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "gpu_check.py", destination / "tools")
    return destination


def test_the_fingerprints_follow_the_code_not_the_checkouts_place(tmp_path):
    """A copy elsewhere has the same fingerprints; a one-byte change to a kernel changes the
    kernels' and the package's, a change outside kernels/ only the package's."""
    here = gpu_check.source_fingerprint(ROOT)
    copy = _copy_sources(tmp_path / "copy")
    assert gpu_check.source_fingerprint(copy) == here
    assert all(len(v) == 16 and int(v, 16) >= 0 for v in here.values())
    kernel = copy / "attncourse" / "kernels" / "flash.py"
    kernel.write_bytes(kernel.read_bytes() + b"\n")
    edited = gpu_check.source_fingerprint(copy)
    assert edited["kernels"] != here["kernels"] and edited["package"] != here["package"]
    assert edited["tool"] == here["tool"]
    kernel.write_bytes(kernel.read_bytes()[:-1])
    (copy / "attncourse" / "masks.py").write_text("# moved\n")
    moved = gpu_check.source_fingerprint(copy)
    assert moved["kernels"] == here["kernels"] and moved["package"] != here["package"]


def test_the_fingerprint_command_needs_no_gpu():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    done = run_child(
        [sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--fingerprint"], env=env
    )
    printed = json.loads(done.stdout)
    assert {k: printed[k] for k in ("kernels", "package", "tool")} == gpu_check.source_fingerprint()


def test_the_report_records_the_commit_and_its_summary_names_it(fake_machine, tmp_path):
    out = tmp_path / "out"
    plan = tiny_plan()
    fake_machine(["--out", str(out), "--only", "span", "--commit", "0123456789abcdef0123"], plan)
    _, report = read_report(out)
    assert report["source"] == {"commit": "0123456789abcdef0123", **gpu_check.source_fingerprint()}
    fingerprint = f"kernels' fingerprint `{report['source']['kernels']}`"
    # the commit the command passed, once, shortened in the command
    report["command"] = "python3 tools/gpu_check.py --commit 0123456789abcdef0123"
    assert "installed here" not in gpu_report.summary_markdown(report)  # a file must not go stale
    summary = gpu_report.summary_markdown(report, against_installed=True)
    assert f"--commit 0123456789ab`, {fingerprint}" in summary
    assert summary.count("0123456789ab") == 1
    # a commit git found, named after the command
    report["command"] = "python3 tools/gpu_check.py --out out"
    summary = gpu_report.summary_markdown(report, against_installed=True)
    assert f"--out out` at commit 0123456789ab, {fingerprint}" in summary
    # whether the kernels installed here are the ones the report timed
    assert "the kernels installed here are the ones it timed" in summary
    report["source"]["kernels"] = "0" * 16
    summary = gpu_report.summary_markdown(report, against_installed=True)
    assert (
        f"installed here (`{gpu_report.kernels_fingerprint()}`) differ from those it timed"
        in summary
    )
    del report["source"]  # a report from before the key: no words about it
    assert "kernels' fingerprint" not in gpu_report.summary_markdown(report)


BLOCKER = """
import sys
MISSING = {names!r}


class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in MISSING:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)


sys.meta_path.insert(0, Missing())
"""


def test_the_kernel_tests_collect_without_the_notebook_stack(tmp_path):
    """The GPU machine has torch, triton and pytest but no jupyter, nbformat, nbclient, nbval or
    ipykernel: the test files make gpu-check runs must import without them (one did not, and
    its whole file errored there)."""
    missing = ["nbformat", "nbclient", "nbval", "ipykernel", "jupyter_client", "jupyter_core"]
    (tmp_path / "sitecustomize.py").write_text(BLOCKER.format(names=missing))
    env = dict(os.environ, PYTHONPATH=str(tmp_path), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    files = sorted(set(gpu_check.plan_for(False).test_files + gpu_check.plan_for(True).test_files))
    command = [sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider"]
    done = run_child([*command, "--collect-only", "-q", *files], env=env)
    summary = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ tests collected in [\d.]+s", summary), done.stdout[-3000:]
    probe = subprocess.run(  # the blocker itself works
        [sys.executable, "-c", "import nbformat"], capture_output=True, text=True, env=env
    )
    assert "No module named 'nbformat'" in probe.stderr


# -- where adaptive span's time goes ----------------------------------------------------------------


def test_fit_line_agrees_with_numpy():
    numpy = pytest.importorskip("numpy")
    rng = numpy.random.default_rng(0)
    xs = rng.integers(1, 500, size=7).astype(float)
    ys = 0.3 + 0.002 * xs + rng.normal(0, 0.01, size=7)
    line = gpu_check.fit_line(list(xs), list(ys))
    per_unit, fixed = numpy.polyfit(xs, ys, 1)
    assert line["fixed"] == pytest.approx(fixed) and line["per_unit"] == pytest.approx(per_unit)
    assert line["r2"] == pytest.approx(numpy.corrcoef(xs, ys)[0, 1] ** 2)
    exact = gpu_check.fit_line([1.0, 2.0, 4.0], [3.0, 5.0, 9.0])
    assert exact == pytest.approx({"fixed": 1.0, "per_unit": 2.0, "r2": 1.0})
    assert gpu_check.fit_line([3.0, 3.0], [1.0, 2.0]) is None  # one x: no line


COST_SPANS = (8.0, 64.0, 256.0)


@pytest.fixture
def cheap_span_calls(monkeypatch):
    """The adaptive-span calls replaced by ones that do nothing (the kernels' numbers are the
    sweep's business): what is checked is which spans are timed and how the clocks are read."""
    calls = []

    def span_calls(plan, s, device, spans=None):
        spans = plan.spans if spans is None else spans
        calls.append((s.pass_name, tuple(spans)))
        return {f"span {z:g}": (lambda: None) for z in spans}

    monkeypatch.setattr(gpu_check, "span_calls", span_calls)
    return calls


def cost_plan():
    """L = 256 in 4 blocks of 64, B = 2 and H = 2: four heads' tiles."""
    return tiny_plan(
        span_length=256, tokens=512, width=128, spans=(8.0, 256.0), cost_spans=COST_SPANS
    )


def test_span_cost_counts_each_kernels_tiles_and_fits_each_clock(
    fake_machine, monkeypatch, tmp_path, cheap_span_calls
):
    """Every cost span is timed in both passes; the work is the tiles over all heads, each
    kernel's counted at its own tile size; the events' and the kernels' lines are fitted over
    that work, and rendered."""
    clock = iter([0.5 + 0.03 * i for i in range(6)])  # the profiler's kernel times, in turn
    order = []

    def kernel_times(fn, repeats, device):
        order.append("kernel")
        total = next(clock)
        return {"forward": total - 0.01, "assert": 0.01}  # the profiler's kernels, by name

    def host_ms(fn, repeats, device):
        order.append("host")
        return 0.25

    monkeypatch.setattr(gpu_check, "kernel_times", kernel_times)
    monkeypatch.setattr(gpu_check, "host_ms", host_ms)
    assert fake_machine(["--only", "span", "--out", str(tmp_path)], cost_plan()) == 0
    assert ("forward+backward", COST_SPANS) in cheap_span_calls
    assert order == ["host"] * 6 + ["kernel"] * 6  # no profiler before the host's clock
    _, report = read_report(tmp_path)
    cost = report["span"]["cost"]
    assert cost["spans"] == list(COST_SPANS) and cost["heads"] == 4
    # sm_90, d = 64: the forward and dQ kernels in 64 x 64 tiles, dK/dV (span) in 32 x 32
    sizes = {k: (v["block_m"], v["block_n"]) for k, v in cost["kernels"].items()}
    assert sizes == {
        "forward_span": (64, 64),
        "backward_dq": (64, 64),
        "backward_dkdv_span": (32, 32),
    }
    # span 256 with its ramp covers every causal tile: 10 of 4 x 4, and 36 of 8 x 8
    assert [k["tiles_per_head"][-1] for k in cost["kernels"].values()] == [10, 10, 36]
    forward, both = (cost["passes"][name] for name in ("forward", "forward+backward"))
    assert forward["rows"][-1]["work"] == 4 * 10
    assert both["rows"][-1]["work"] == 4 * (10 + 10 + 36 / 4)
    assert [r["work"] for r in forward["rows"]] == sorted(r["work"] for r in forward["rows"])
    assert forward["rows"][0]["work"] < forward["rows"][-1]["work"]
    for measured in (forward, both):
        assert [row["span"] for row in measured["rows"]] == list(COST_SPANS)
        assert [row["event_ms"] for row in measured["rows"]] == [1.0, 2.0, 3.0]  # the stub clock
        for row in measured["rows"]:  # the total and, beside it, what it is made of
            assert row["kernel_ms"] == pytest.approx(sum(row["kernels_ms"].values()))
            assert row["kernels_ms"]["assert"] == pytest.approx(0.01)
        work = [row["work"] for row in measured["rows"]]
        for key in ("event_ms", "kernel_ms"):
            line = gpu_check.fit_line(work, [row[key] for row in measured["rows"]])
            fitted = measured[f"fit_{key}"]
            assert fitted["fixed_ms"] == pytest.approx(line["fixed"])
            assert fitted["per_tile_ns"] == pytest.approx(line["per_unit"] * 1e6)
            assert fitted["r2"] == pytest.approx(line["r2"])
    summary = gpu_report.summary_markdown(report)
    # one table per pass, each narrow enough for a page (the browser test measures it)
    forward_part, both_part = summary.split("Where adaptive span's time goes, ")[1:]
    assert forward_part.startswith("forward:") and "over all 4 heads" in forward_part
    assert both_part.startswith("forward + backward:")
    assert "| 256 | 40 | 3.000 | 0.560 | 0.250 |" in forward_part
    assert "| 256 | 116 | 3.000 | 0.650 | 0.250 |" in both_part
    for part, measured in ((forward_part, forward), (both_part, both)):
        line = measured["fit_kernel_ms"]
        assert (
            f"- kernels: {line['fixed_ms']:.3f} ms + {line['per_tile_ns']:.2f} ns"
            f" per tile (r² {line['r2']:.3f})"
        ) in part.split("Design questions")[0]


def test_span_cost_findings_read_the_line_the_clocks_and_the_kernels():
    """span_cost_findings: kernel times made on a known line (0.1 ms + 2 ns a tile) give that
    line back, the speed-ups at the two spans by the kernels, the events and the line, the fixed
    part's share of the short span, and torch's kernels apart from the course's."""
    report = gpu_report.load_report(EXAMPLE)
    assert gpu_report.span_cost_findings(report) == {}  # no cost measured: nothing to say
    works = {64.0: 1_000.0, 256.0: 5_000.0, 1024.0: 20_000.0, 4096.0: 50_000.0}
    rows = []
    for z, work in works.items():
        ms = 0.1 + 2e-6 * work
        kernels = {"_forward_kernel": ms - 0.004, "void at::native::reduce_kernel<...>": 0.004}
        rows.append(
            {"span": z, "work": work, "event_ms": ms, "kernel_ms": ms, "kernels_ms": kernels}
        )
    line = gpu_check.fit_line(list(works.values()), [r["kernel_ms"] for r in rows])
    fit = {"fixed_ms": line["fixed"], "per_tile_ns": line["per_unit"] * 1e6, "r2": line["r2"]}
    report["span"] = {
        **report["span"],
        "spans": [256.0, 4096.0],
        "speedup": {"forward": 1.5},
        "cost": {"spans": list(works), "passes": {"forward": {"rows": rows, "fit_kernel_ms": fit}}},
    }
    found = gpu_report.span_cost_findings(report)["forward"]
    assert found["fixed_ms"] == pytest.approx(0.1) and found["per_tile_ns"] == pytest.approx(2.0)
    assert found["r2"] == pytest.approx(1.0)
    assert (found["short"], found["full"]) == (256.0, 4096.0)
    assert found["kernel_speedup"] == pytest.approx(0.2 / 0.11)  # 0.1 + 0.1 against 0.1 + 0.01
    assert found["line_speedup"] == pytest.approx(0.2 / 0.11)
    assert found["event_speedup"] == 1.5  # the report's own, not recomputed
    assert found["fixed_share"] == pytest.approx(0.1 / 0.11)
    assert found["torch_kernels_ms"] == pytest.approx(0.004)
    del rows[1]["kernels_ms"]  # a report from before kernels were listed by name
    assert "torch_kernels_ms" not in gpu_report.span_cost_findings(report)["forward"]
    del report["span"]["cost"]["passes"]["forward"]["fit_kernel_ms"]  # no profiler
    assert gpu_report.span_cost_findings(report) == {}


def test_span_cost_without_a_profiler_keeps_the_other_clocks(
    fake_machine, tmp_path, cheap_span_calls
):
    """On the CPU the profiler records no CUDA kernel: the kernel times are left out with the
    reason, the events and the host times stand."""
    assert fake_machine(["--only", "span", "--out", str(tmp_path)], cost_plan()) == 0
    _, report = read_report(tmp_path)
    for measured in report["span"]["cost"]["passes"].values():
        assert measured["kernel_error"]  # CPU-only torch: "No activities specified"
        assert all("kernel_ms" not in row for row in measured["rows"])
        assert "fit_event_ms" in measured and "fit_kernel_ms" not in measured
    error = report["span"]["cost"]["passes"]["forward"]["kernel_error"]
    summary = gpu_report.summary_markdown(report)
    forward_part = summary.split("Where adaptive span's time goes, forward:")[1]
    assert f"- kernels: not measured ({error})" in forward_part.split("time goes")[0]


def test_host_time_is_per_call_and_waits_for_the_gpu_only_outside_its_clock(monkeypatch):
    """host_ms: the GPU drained before the clock starts, the calls issued, the clock read, and
    only then the GPU waited for (a wait inside the clock would time the GPU, not the host)."""
    import time

    seen = []

    def synchronize(device):
        seen.append("sync")
        time.sleep(0.05)  # a GPU still busy

    def call():
        seen.append("call")
        time.sleep(0.002)

    monkeypatch.setattr(gpu_check, "synchronize", synchronize)
    ms = gpu_check.host_ms(call, 5, "cuda")
    assert seen == ["sync"] + ["call"] * 5 + ["sync"]
    assert 2.0 <= ms < 10.0, ms  # per call: 2 ms of issuing, none of the 50 ms waits


def test_kernel_time_counts_each_kernel_once(monkeypatch):
    """The profiler lists an operator on the CPU with its kernels' time and the kernels
    themselves: only the GPU's events are added up, per call."""
    from types import SimpleNamespace

    import torch.profiler
    from torch.autograd import DeviceType

    entries = [
        SimpleNamespace(key="aten::mm", device_type=DeviceType.CPU, self_device_time_total=900.0),
        SimpleNamespace(key="gemm", device_type=DeviceType.CUDA, self_device_time_total=600.0),
        SimpleNamespace(key="copy", device_type=DeviceType.CUDA, self_device_time_total=300.0),
    ]

    class FakeProfile:
        def __init__(self, activities):
            assert activities == [torch.profiler.ProfilerActivity.CUDA]

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def key_averages(self):
            return entries

    monkeypatch.setattr(torch.profiler, "profile", FakeProfile)
    calls = []
    by_name = gpu_check.kernel_times(lambda: calls.append(1), 3, "cpu")
    assert by_name == pytest.approx({"gemm": 0.2, "copy": 0.1})  # per call, the CPU's row out
    assert sum(by_name.values()) == pytest.approx(0.3)
    assert len(calls) == 3
    entries[1:] = []
    with pytest.raises(RuntimeError, match="no kernel time"):
        gpu_check.kernel_times(lambda: None, 3, "cpu")


def test_a_runtime_without_the_repository_is_told_where_the_reports_are(tmp_path):
    """Installed without the checkout (as on Colab), the package has no reports/gpu: the note
    says so and gives the book's page from the package's metadata; in the checkout, none
    committed yet."""
    shutil.copytree(
        ROOT / "attncourse", tmp_path / "attncourse", ignore=shutil.ignore_patterns("__pycache__")
    )
    code = (  # away from the checkout, then in it: one process, two places
        "import os\n"
        "from attncourse.benchmarks import gpu_report\n"
        "print(gpu_report.no_reports_note('GPU measurement', 'book/x.html#y'))\n"
        f"os.chdir({str(ROOT)!r})\n"
        "print(gpu_report.no_reports_note('GPU measurement', 'book/x.html#y'))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    away, here = run_child([sys.executable, "-c", code], cwd=tmp_path, env=env).stdout.splitlines()
    assert "not the repository's reports/gpu folder" in away
    home = "https://attncourse.github.io/attncourse"
    assert f"{home}/book/x.html#y (中文版: {home}/zh/book/x.html#y)" in away
    assert here.startswith("No GPU measurement has been committed yet")
