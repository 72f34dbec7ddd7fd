"""The grading harness under attack: ``check()`` copies the learner's inputs, limits the
learner's time, never raises, reads numbers and shapes as learners write them, and every
checker rejects the mutants of its own solution (``tools/mutate_checkers.py``) while it
accepts right answers written in other styles.

The exercises are discovered from the registry, so exercises added later get the generic
attacks, the generic right-answer styles and the mutation test without a change here.
"""

import copy
import decimal
import fractions
import importlib.util
import inspect
import json
import math
import signal
import threading
import time

import numpy as np
import pytest
import torch
from exercise_helpers import REGISTRY, number_exercises
from project_tools import ROOT, tool

import attncourse.exercises  # noqa: F401 - registers every exercise
from attncourse.exercises import _core, check
from attncourse.exercises._core import (
    FAILED,
    NOT_ATTEMPTED,
    UNGRADABLE,
    Exercise,
    Mistake,
    call,
    reveal,
)

mutate = tool("mutate_checkers")

# the answer is a function
CODING = sorted(eid for eid, ex in REGISTRY.items() if ex.answer_is_function)
MUTATED = sorted(mutate.coding_exercises())
ALL = sorted(REGISTRY)
# Triton kernels (chapter 10): the checker launches the answer, so a Python wrapper around the
# solution is no answer; their right answers in other styles are in test_exercises_ch10_gpu.py
KERNELS = {eid for eid in CODING if "constexpr" in str(inspect.signature(REGISTRY[eid].reference))}


# -- generic answers built from an exercise's own solution -------------------------------------


def _map(fn, value):
    """Apply ``fn`` to every tensor in ``value`` (a tensor, or tuples/lists of them)."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_map(fn, v) for v in value)
    return value


def _vandalise(value):
    """Overwrite every tensor in ``value`` in place with something else."""
    for t in value if isinstance(value, (tuple, list)) else [value]:
        if not isinstance(t, torch.Tensor):
            continue
        if t.dtype == torch.bool:
            t.logical_not_()
        elif t.is_floating_point():
            t.mul_(-3.0).add_(0.5)
        else:
            t.add_(1)


def vandal(reference):
    """A right answer that afterwards overwrites every input in place (the checker must not care)."""

    def answer(*args, **kwargs):
        out = _map(torch.clone, reference(*copy.deepcopy(args), **copy.deepcopy(kwargs)))
        _vandalise(args)
        _vandalise(list(kwargs.values()))
        return out

    return answer


def float64_inside(reference):
    """A right answer that computes in float64 and converts back to the inputs' dtype."""

    def answer(*args, **kwargs):
        dtypes = [
            a.dtype
            for a in list(args) + list(kwargs.values())
            if isinstance(a, torch.Tensor) and a.is_floating_point()
        ]
        up = lambda t: t.double() if t.is_floating_point() else t  # noqa: E731
        out = reference(*_map(up, list(args)), **{k: _map(up, v) for k, v in kwargs.items()})
        if not dtypes:
            return out
        dtype = dtypes[0]
        for d in dtypes[1:]:
            dtype = torch.promote_types(dtype, d)
        return _map(lambda t: t.to(dtype) if t.is_floating_point() else t, out)

    return answer


def numpy_round_trip(reference):
    """A right answer whose outputs went through numpy and came back (non-contiguous too)."""

    def answer(*args, **kwargs):
        out = reference(*args, **kwargs)
        back = lambda t: torch.from_numpy(np.array(t.detach().numpy(), copy=True))  # noqa: E731 (0-d stays 0-d)
        return _map(lambda t: back(t).mT.contiguous().mT if t.dim() >= 2 else back(t), out)

    return answer


def complex_output(reference):
    """A wrong answer: the right values as complex numbers (an imaginary part must not be dropped)."""

    def answer(*args, **kwargs):
        return _map(lambda t: (t + 1j) if t.is_floating_point() else t, reference(*args, **kwargs))

    return answer


def float32_output(reference):
    """A near miss: float64 inputs answered in float32."""

    def answer(*args, **kwargs):
        return _map(
            lambda t: t.float() if t.dtype == torch.float64 else t, reference(*args, **kwargs)
        )

    return answer


# exercises whose checker also asks for the gradient of the answer (the soft span mask's to z)
NEEDS_A_GRADIENT = {"adaptive-span/soft-mask"}


@pytest.mark.parametrize("style", [vandal, float64_inside, numpy_round_trip])
@pytest.mark.parametrize("exercise_id", CODING)
def test_generic_right_answers_pass(exercise_id, style):
    if exercise_id in KERNELS:
        pytest.skip("a Triton kernel: wrappers in Python are no kernel")
    if exercise_id in NEEDS_A_GRADIENT and style in (numpy_round_trip, vandal):
        pytest.skip("its answer must pass the gradient on: numpy, or copies of the inputs, cut it")
    result = check(exercise_id, style(REGISTRY[exercise_id].reference))
    assert result.passed, result.message


@pytest.mark.parametrize("exercise_id", CODING)
def test_complex_outputs_are_rejected(exercise_id):
    if not _uses_float64(exercise_id) and exercise_id != "adaptive-span/soft-mask":
        pytest.skip("no floating output to make complex")
    result = check(exercise_id, complex_output(REGISTRY[exercise_id].reference))
    assert result.status == FAILED and UNGRADABLE not in result.message, result.message


def _uses_float64(exercise_id):
    seen = []

    def spy(*args, **kwargs):
        seen.extend(
            a.dtype for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)
        )
        return REGISTRY[exercise_id].reference(*args, **kwargs)

    check(exercise_id, spy)
    return torch.float64 in seen


@pytest.mark.parametrize("exercise_id", CODING)
def test_float64_inputs_answered_in_float32_are_rejected(exercise_id):
    if not _uses_float64(exercise_id):
        pytest.skip("no float64 input")
    result = check(exercise_id, float32_output(REGISTRY[exercise_id].reference))
    assert result.status == FAILED and "keep the input's dtype" in result.message, result.message


# -- mutation testing of the checkers ----------------------------------------------------------


def test_mutation_covers_at_least_200_mutants_over_every_coding_exercise():
    counts = {eid: len(mutate.mutants_of(eid, REGISTRY[eid].reference)) for eid in MUTATED}
    assert sum(counts.values()) >= 200, counts
    assert all(n >= 2 for n in counts.values()), counts


# check()'s time limit while the mutants are judged on the CPU, and the mutants it stops. A mutant
# that never ends is killed by the time limit alone: at the learner's 10 s the three below cost
# half a minute (the mutants are judged in English only: conftest.py). Without a GPU every
# solution checks within 0.5 s and every other mutant ends within 1 s, even in Triton's
# interpreter on a loaded machine, so 2 s gives every mutant the verdict it gets at 10 s
# (tools/mutate_checkers.py kills the same set, with the same messages, with either). A mutant
# that the short limit stops must be listed here: a slow one that is right would otherwise pass
# as killed. (With a GPU the limit stays: there it also counts the seconds Triton takes to
# compile each kernel.)
MUTANT_TIME_LIMIT_S = 2.0
ENDLESS_MUTANTS = {  # loops up to a pointer: in the interpreter S, V and O are addresses
    f"gpu/online-softmax-kernel :: for start in range(0, n_keys, BLOCK_N): => "
    f"for start in range(0, {pointer}, BLOCK_N):"
    for pointer in ("S", "V", "O")
}


@pytest.mark.parametrize("exercise_id", MUTATED)
def test_every_mutant_of_the_solution_is_rejected_or_a_listed_equivalent(exercise_id, monkeypatch):
    short = not torch.cuda.is_available()
    if short:
        monkeypatch.setattr(_core, "TIME_LIMIT_S", MUTANT_TIME_LIMIT_S)
    build, judge = mutate.compile_mutant, mutate._judge
    current, stopped = [], set()  # the mutant being judged; those stopped by the time limit

    def building(mutant, solution):
        current[:] = [mutant.key]
        return build(mutant, solution)

    def judging(eid, fn):
        result = judge(eid, fn)
        if current and result.message.startswith(_core._timeout_message()):
            stopped.add(current[0])
        return result

    monkeypatch.setattr(mutate, "compile_mutant", building)
    monkeypatch.setattr(mutate, "_judge", judging)
    equivalents = mutate.load_equivalents()
    report = mutate.run(exercise_id, REGISTRY[exercise_id].reference, equivalents)
    assert not report.survivors, "mutants the checker accepts:\n" + "\n".join(report.survivors)
    listed = {k for k in equivalents if k.startswith(exercise_id + " :: ")}
    assert listed <= set(report.equivalent), (
        f"listed as equivalent but killed or gone: {listed - set(report.equivalent)}"
    )
    if not short:
        return
    endless = {k for k in ENDLESS_MUTANTS if k.startswith(exercise_id + " :: ")}
    assert stopped <= endless, (
        f"stopped by the {MUTANT_TIME_LIMIT_S:g} s time limit but not listed as endless (a slow "
        f"mutant that is right?): {stopped - endless}"
    )
    if endless and importlib.util.find_spec("triton") is not None:  # without it: killed at once
        assert stopped == endless, f"listed as endless but not stopped: {endless - stopped}"


def test_every_listed_equivalent_has_a_reason_and_a_known_exercise():
    equivalents = json.loads((ROOT / "tools" / "checker_mutants_equivalent.json").read_text())
    for key, reason in equivalents.items():
        assert key.split(" :: ")[0] in REGISTRY and " => " in key, key
        assert len(reason) > 20, key


def test_the_mutation_run_reports_a_weak_checker(monkeypatch):
    """The measure can fail: a checker that looks only at the shape lets mutants through."""

    def solution(x):
        return (x * 2 + 1).clamp(min=0)

    def weak_checker(fn):
        out = call(fn, torch.randn(3, dtype=torch.float64))
        if not isinstance(out, torch.Tensor) or out.shape != (3,):
            raise Mistake("wrong shape")
        return "ok"

    monkeypatch.setitem(
        _core._REGISTRY,  # a test exercise, registered for this test only
        "test/weak",
        Exercise("test/weak", "weak", weak_checker, "", lambda: "", True, solution),
    )
    report = mutate.run("test/weak", solution, {})
    assert report.generated >= 5 and len(report.survivors) >= 3, report


# -- inputs are copied -------------------------------------------------------------------------


def test_call_hands_the_learner_copies_even_of_expanded_and_non_contiguous_tensors():
    expanded = torch.zeros(3).expand(4, 3)
    transposed = torch.arange(6.0).reshape(2, 3).T
    mask = torch.tensor([True, False])
    originals = [t.clone() for t in (expanded, transposed, mask)]

    def learner(a, b, m, pair):
        a.add_(1)  # would raise on the expanded original (overlapping memory)
        b.mul_(-1)
        m.logical_not_()
        pair[0].fill_(9)
        assert pair[0] is a  # one object passed twice stays one object
        return a.sum()

    assert call(learner, expanded, transposed, mask, [expanded]).item() == 9 * 12
    for t, before in zip((expanded, transposed, mask), originals):
        assert torch.equal(t, before)


def test_the_dtype_rule_promotes_as_torch_does():
    x32, x64, zero_d64 = (
        torch.ones(3),
        torch.ones(3, dtype=torch.float64),
        torch.tensor(2.0, dtype=torch.float64),
    )
    # a 0-d tensor does not promote
    assert call(lambda x, s: x * s, x32, zero_d64).dtype == torch.float32
    assert call(lambda x, y: x + y, x32, x64).dtype == torch.float64
    with pytest.raises(Mistake, match="keep the input's dtype"):
        call(lambda x, y: x, x32, x64)
    with pytest.raises(Mistake, match="keep the input's dtype"):
        call(lambda x: (x.float(), x), x64)
    assert call(lambda n: torch.ones(n), 3).dtype == torch.float32  # no floating input: no rule


def test_in_place_idioms_of_the_issue_are_right_answers():
    def scores(query, key):
        query *= query.size(-1) ** -0.5  # q *= scale
        return query @ key.transpose(-2, -1)

    def attention(query, key, value, mask=None, *, scale=None):
        query *= query.size(-1) ** -0.5 if scale is None else scale
        s = query @ key.transpose(-2, -1)
        if mask is not None and mask.dtype == torch.bool:
            mask.logical_not_()  # now True = masked
            s.masked_fill_(mask, float("-inf"))
        elif mask is not None:
            s += mask
        empty = torch.isneginf(s).all(-1, keepdim=True)
        w = s.masked_fill(empty, 0).softmax(-1).masked_fill(empty, 0)
        return w @ value, w

    def padding(lengths, max_len):
        lengths.unsqueeze_(1)
        return torch.arange(max_len) < lengths

    def online(running_max, running_sum, acc, scores, value):
        new_max = torch.maximum(running_max, scores.amax(-1))
        correction = (running_max - new_max).exp()
        scores.sub_(new_max[:, None]).exp_()  # the package's own idiom
        running_sum.mul_(correction).add_(scores.sum(-1))
        acc.mul_(correction[:, None]).add_(scores @ value)
        return new_max, running_sum, acc

    for exercise_id, answer in [
        ("dot-product/scores", scores),
        ("dot-product/attention", attention),
        ("masking/padding-mask", padding),
        ("complexity/online-softmax", online),
    ]:
        result = check(exercise_id, answer)
        assert result.passed, (exercise_id, result.message)


# -- right answers in other styles, per exercise ----------------------------------------------


def _attention_einsum(query, key, value, mask=None, *, scale=None):
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    s = torch.einsum("...ld,...sd->...ls", query, key) * scale
    if mask is not None:
        s = torch.where(mask, s, -math.inf) if mask.dtype == torch.bool else s + mask
    w = torch.nan_to_num(torch.softmax(s, -1), nan=0.0)
    return torch.einsum("...ls,...sv->...lv", w, value), w


def _split_chunks(x, num_heads):
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)


def _forward_einsum(x_q, x_kv, w_q, w_k, w_v, w_o, num_heads):
    b, length, e = x_q.shape
    q = torch.einsum("ble,fe->blf", x_q, w_q).unflatten(-1, (num_heads, -1))
    k = torch.einsum("ble,fe->blf", x_kv, w_k).unflatten(-1, (num_heads, -1))
    v = torch.einsum("ble,fe->blf", x_kv, w_v).unflatten(-1, (num_heads, -1))
    w = torch.einsum("blhd,bshd->bhls", q, k).div(q.shape[-1] ** 0.5).softmax(-1)
    heads = torch.einsum("bhls,bshd->blhd", w, v).flatten(-2)
    return heads @ w_o.mT


def _causal_numpy(query_len, key_len):
    return torch.from_numpy(np.tri(query_len, key_len, key_len - query_len, dtype=bool))


def _attention_mask_loops(lengths, max_len, causal):
    mask = torch.zeros(len(lengths), max_len, max_len, dtype=torch.bool)
    for b, n in enumerate(lengths.tolist()):
        for i in range(max_len):
            for j in range(max_len):
                mask[b, i, j] = j < n and (j <= i or not causal)
    return mask


def _cross_in_place(target, source, w_q, w_k, w_v, source_mask):
    query, key, value = target @ w_q, source @ w_k, source @ w_v
    query /= query.size(-1) ** 0.5
    source_mask.logical_not_()
    scores = torch.einsum("bld,bsd->bls", query, key).masked_fill_(
        source_mask.unsqueeze_(1), -math.inf
    )
    weights = scores.softmax(-1)
    return weights @ value, weights


def _soft_mask_in_place(distance, span, ramp):
    out = span - distance
    return out.add_(ramp).div_(ramp).clamp_(0, 1)


def _window_numpy(spans, ramp):
    return np.ceil(spans.numpy().max() + ramp).astype(np.int64)


def _window_tensor(spans, ramp):
    spans.add_(ramp)
    return spans.max().ceil()  # a 0-d float tensor holding a whole number


def _weights_in_place(scores, span, ramp):
    n = scores.shape[-1]
    distance = torch.arange(n)[:, None] - torch.arange(n)
    scores.masked_fill_(distance < 0, -math.inf)
    probs = scores.softmax(-1)
    probs.mul_(((ramp + span - distance.to(probs)) / ramp).clamp(0, 1))
    return probs.div_(probs.sum(-1, keepdim=True))


def _persistent_pad(query, key, value, memory_key, memory_value, mask):
    n = memory_key.shape[-2]
    full = torch.nn.functional.pad(mask, (0, n), value=True)
    keys, values = torch.cat((key, memory_key), -2), torch.cat((value, memory_value), -2)
    weights = torch.einsum("...ld,...sd->...ls", query, keys).div(math.sqrt(query.shape[-1]))
    weights = weights.masked_fill(~full, -math.inf).softmax(-1)
    output = torch.nn.functional.scaled_dot_product_attention(query, keys, values, attn_mask=full)
    return output, weights


STYLES = {
    "dot-product/scores": [
        lambda q, k: torch.einsum("...ld,...sd->...ls", q, k) / math.sqrt(k.shape[-1]),
        lambda q, k: torch.matmul(q / q.shape[-1] ** 0.5, k.mT),
    ],
    "dot-product/attention": [_attention_einsum],
    "multi-head/split-heads": [
        _split_chunks,
        lambda x, h: x.unflatten(-1, (h, -1)).permute(0, 2, 1, 3),
    ],
    "multi-head/forward": [_forward_einsum],
    "masking/padding-mask": [
        lambda lengths, max_len: (
            torch.arange(max_len).expand(len(lengths), -1) < lengths.view(-1, 1)
        ),
        lambda lengths, max_len: torch.from_numpy(
            np.arange(max_len)[None, :] < lengths.numpy()[:, None]
        ),
    ],
    "masking/causal-mask": [
        _causal_numpy,
        lambda q, k: torch.ones(q, k, dtype=torch.bool).tril(k - q),
    ],
    "masking/attention-mask": [_attention_mask_loops],
    "cross-attention/single-head": [_cross_in_place],
    "complexity/online-softmax": [],  # in test_in_place_idioms_of_the_issue_are_right_answers
    "adaptive-span/soft-mask": [
        _soft_mask_in_place,
        lambda x, z, r: torch.clamp(1 + (z - x) / r, min=0, max=1),
    ],
    "adaptive-span/window": [
        _window_numpy,
        _window_tensor,
        lambda spans, ramp: float(math.ceil(spans.max().item() + ramp)),
    ],
    "adaptive-span/weights": [_weights_in_place],
    "all-attention/persistent-head": [_persistent_pad],
    "all-attention/ffn-as-attention": [
        lambda w1, w2: (w1.clone(), w2.t().contiguous()),
        lambda w1, w2: (torch.from_numpy(w1.numpy().copy()), torch.from_numpy(w2.numpy().T.copy())),
    ],
}


@pytest.mark.parametrize(
    "exercise_id, index", [(eid, i) for eid, answers in STYLES.items() for i in range(len(answers))]
)
def test_right_answers_in_other_styles_pass(exercise_id, index):
    result = check(exercise_id, STYLES[exercise_id][index])
    assert result.passed, result.message


# -- check() never raises ------------------------------------------------------------------------


class Hostile:
    """An object every operation of which raises."""

    def _raise(self, *args, **kwargs):
        raise RuntimeError("hostile")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = _raise
    __float__ = __int__ = __index__ = __len__ = __iter__ = __bool__ = __getitem__ = _raise
    __repr__ = __str__ = __format__ = _raise


class NotAnInt(int):
    def __eq__(self, other):
        raise RuntimeError("hostile int")

    __hash__ = int.__hash__


def _gen():
    yield 1


def _exits(*args, **kwargs):
    raise SystemExit(1)


class _Callable:
    def __call__(self, *args, **kwargs):
        return Hostile()


HOSTILE = {
    "a generator": _gen(),
    "a class": type("Attention", (), {}),
    "a class taking anything": type("Anything", (), {"__init__": lambda self, *a, **k: None}),
    "a builtin": print,
    "no parameters": lambda: 1,
    "returns None": lambda *a, **k: None,
    "returns a string": lambda *a, **k: "64",
    "returns a hostile object": lambda *a, **k: Hostile(),
    "returns a pair of hostile objects": lambda *a, **k: (Hostile(), Hostile()),
    "returns three hostile objects": lambda *a, **k: (Hostile(), Hostile(), Hostile()),
    "returns a hostile int": lambda *a, **k: NotAnInt(3),
    "returns a huge int": lambda *a, **k: 10**400,
    "returns NaN": lambda *a, **k: float("nan"),
    "returns a complex number": lambda *a, **k: 3 + 4j,
    "returns a meta tensor": lambda *a, **k: torch.empty(3, device="meta"),
    "returns a sparse tensor": lambda *a, **k: torch.eye(3).to_sparse(),
    "returns an empty tensor": lambda *a, **k: torch.empty(0),
    "returns a dict": lambda *a, **k: {"a": 1},
    "raises SystemExit": _exits,
    "raises a hostile exception": (
        lambda *a, **k: (_ for _ in ()).throw(
            type("E", (Exception,), {"__str__": Hostile._raise})()
        )
    ),
    "a callable object": _Callable(),
    "a hostile object": Hostile(),
    "a hostile int": NotAnInt(3),
    "a huge int": 10**400,
    "a complex number": 1 + 2j,
    "NaN": float("nan"),
    "infinity": -math.inf,
    "a string": "64",
    "a boolean": True,
    "a tensor": torch.ones(2, 2),
    "a complex tensor": torch.ones(1, dtype=torch.complex64),
    "a list": [1, 2],
    "a dict of hostile objects": {
        "weights": Hostile(),
        "output": Hostile(),
        "key_padding_mask": Hostile(),
    },
}


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", list(HOSTILE))
@pytest.mark.parametrize("exercise_id", ALL)
def test_check_never_raises_and_says_what_is_wrong(exercise_id, name):
    result = check(exercise_id, HOSTILE[name])
    assert result.status in (FAILED, NOT_ATTEMPTED) and not result.passed
    assert result.message and UNGRADABLE not in result.message, result.message
    assert str(result) and result._repr_html_()


def test_a_keyboard_interrupt_is_let_through():
    def pressed_stop(*args, **kwargs):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        check("dot-product/scores", pressed_stop)


def test_unknown_or_non_string_exercise_ids_raise_key_error():
    for bad in ("no/such", 3, ("dot-product/scores",)):
        with pytest.raises(KeyError):
            check(bad, 1)


def test_a_checker_that_crashes_is_reported_not_raised(monkeypatch):
    def broken(answer):
        return answer.no_such_attribute

    monkeypatch.setitem(
        _core._REGISTRY,  # a test exercise, registered for this test only
        "test/broken",
        Exercise("test/broken", "broken", broken, "", lambda: "", False),
    )
    result = check("test/broken", 3)
    assert result.status == FAILED and result.message.startswith(UNGRADABLE)


def test_a_learner_changing_torch_defaults_does_not_leak():
    def rude(query, key):
        torch.set_default_dtype(torch.float64)
        torch.set_grad_enabled(False)
        return query @ key.transpose(-2, -1) / query.size(-1) ** 0.5

    assert check("dot-product/scores", rude).passed
    assert torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled()


# -- the time limit ---------------------------------------------------------------------------------


@pytest.fixture
def short_limit(monkeypatch):
    monkeypatch.setattr(_core, "TIME_LIMIT_S", 0.3)
    return monkeypatch


def _forever(*args, **kwargs):
    while True:
        try:
            time.sleep(0.05)
        except Exception:  # a learner swallowing every error cannot swallow the time-out
            pass


def test_a_hanging_function_is_stopped_and_reported(short_limit):
    handler = signal.getsignal(signal.SIGALRM)
    for hang in (_forever, lambda *a: time.sleep(600)):
        start = time.perf_counter()
        result = check("dot-product/attention", hang)
        assert result.status == FAILED and "time limit" in result.message, result.message
        # stopped, not waited for (a generous bound: the machine may be loaded)
        assert time.perf_counter() - start < 300
    assert signal.getsignal(signal.SIGALRM) is handler and signal.getitimer(signal.ITIMER_REAL) == (
        0.0,
        0.0,
    )
    # the reference's 0.3 s can run out on a loaded machine
    short_limit.setattr(_core, "TIME_LIMIT_S", 10.0)
    # usable afterwards
    assert check("dot-product/attention", REGISTRY["dot-product/attention"].reference).passed


def test_an_outer_timer_is_put_back(short_limit):
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *args: fired.append(True))
    try:
        signal.setitimer(signal.ITIMER_REAL, 100.0)
        assert check("dot-product/scores", REGISTRY["dot-product/scores"].reference).passed
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 0 < left <= 100.0 and not fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_the_limit_counts_the_learner_time_of_all_calls(short_limit):
    reference = REGISTRY["dot-product/attention"].reference

    def slow(*args, **kwargs):  # 0.1 s per call: fine once, too slow over the checker's 8 calls
        time.sleep(0.1)
        return reference(*args, **kwargs)

    result = check("dot-product/attention", slow)
    assert result.status == FAILED and "time limit" in result.message


def test_the_limit_works_off_the_main_thread(short_limit):
    box = {}
    worker = threading.Thread(
        target=lambda: box.update(result=check("dot-product/scores", lambda q, k: time.sleep(600)))
    )
    worker.start()
    worker.join(300)  # the abandoned learner thread sleeps on as a daemon; the check has returned
    assert not worker.is_alive() and "time limit" in box["result"].message, box


# -- numbers and shapes as learners give them ---------------------------------------------------

from attncourse.exercises import (
    ch01_dot_product,
    ch02_multihead,
    ch04_cross_attention,
    ch07_complexity,
    ch09_all_attention,
)  # noqa: E402

VALUES = {
    "dot-product/score-variance": ch01_dot_product._VARIANCE,
    "multi-head/parameter-count": ch02_multihead._COUNT,
    "complexity/multihead-flops": ch07_complexity._FLOPS,
    "all-attention/parameter-count": ch09_all_attention._COUNT,
}


@pytest.mark.parametrize("exercise_id", sorted(VALUES))
def test_numbers_are_accepted_in_every_usual_type(exercise_id):
    value = int(float(reveal(VALUES[exercise_id])))
    for answer in (
        value,
        float(value),
        np.int64(value),
        np.uint64(value),
        np.float64(value),
        np.float32(value),
        np.array(value),
        np.array([value]),
        torch.tensor(value),
        torch.tensor([value]),
        torch.tensor(float(value)),
        torch.tensor([[value]], dtype=torch.float64),
        fractions.Fraction(value),
        decimal.Decimal(value),
    ):
        result = check(exercise_id, answer)
        assert result.passed, (type(answer), answer, result.message)


@pytest.mark.parametrize(
    "answer, words",
    [
        (64 + 0j, "complex"),
        (64 + 1j, "complex"),
        (torch.tensor(64 + 0j), "complex"),
        (10**400, "far too large"),
        (float("nan"), "NaN"),
        (math.inf, "infinite"),
        (np.float64("inf"), "infinite"),
        ("64", "string"),
        (True, "boolean"),
        (np.bool_(True), "boolean"),
        (torch.tensor([64, 64]), "single number"),
        (np.array([64, 64]), "single number"),
        (Hostile(), "should be a number"),
        (torch.tensor(64.0, device="meta"), "could not be read"),
    ],
)
def test_odd_numbers_get_a_clear_message(answer, words):
    result = check("dot-product/score-variance", answer)
    assert result.status == FAILED and words in result.message, result.message


def test_shapes_are_accepted_as_learners_write_them():
    expected = {k: tuple(v) for k, v in json.loads(reveal(ch04_cross_attention._SHAPES)).items()}
    for convert in (
        tuple,
        list,
        torch.Size,
        lambda s: tuple(np.int64(n) for n in s),
        np.array,
        torch.tensor,
        lambda s: tuple(torch.tensor(n) for n in s),
    ):
        result = check("cross-attention/shapes", {k: convert(v) for k, v in expected.items()})
        assert result.passed, (convert, result.message)
    floats = {k: tuple(float(n) for n in v) for k, v in expected.items()}
    assert "integers" in check("cross-attention/shapes", floats).message


# -- near misses and diagnoses that used to go wrong --------------------------------------------


def test_a_scale_from_the_wrong_dimension_is_not_blamed_on_key_T():
    result = check("dot-product/scores", lambda q, k: q @ k.transpose(-2, -1) / q.shape[1] ** 0.5)
    assert "query.size(-1)" in result.message and "key.T" not in result.message, result.message


def test_each_wrong_scale_gets_its_own_diagnosis():
    """With L = 3 = sqrt(d_k) (the old first case) d_k ** 0.25 was blamed on sqrt(L), and q.size(0) passed."""
    for wrong, words in [
        (lambda q, k: q @ k.mT / q.size(-1) ** 0.25, "differ"),
        (lambda q, k: q @ k.mT / q.size(0), "differ"),
        (lambda q, k: q @ k.mT / q.size(0) ** 0.5, "sqrt(L)"),
    ]:
        result = check("dot-product/scores", wrong)
        assert result.status == FAILED and words in result.message, result.message


def test_a_float_mask_added_before_the_scale_is_rejected():
    reference = REGISTRY["dot-product/attention"].reference

    def before(query, key, value, mask=None, *, scale=None):
        if mask is None or mask.dtype == torch.bool:
            return reference(query, key, value, mask, scale=scale)
        scale = query.size(-1) ** -0.5 if scale is None else scale
        weights = torch.softmax((query @ key.transpose(-2, -1) + mask) * scale, dim=-1)
        return weights @ value, weights

    result = check("dot-product/attention", before)
    assert result.status == FAILED and "before the scale" in result.message, result.message


def test_max_len_ignored_is_rejected_with_its_diagnosis():
    def ignores(lengths, max_len, causal):
        return REGISTRY["masking/attention-mask"].reference(lengths, int(lengths.max()), causal)

    result = check("masking/attention-mask", ignores)
    assert result.status == FAILED and "max_len is ignored" in result.message, result.message


def test_where_the_ceil_goes_matters():
    result = check(
        "adaptive-span/window", lambda spans, ramp: math.ceil(spans.max().item()) + math.ceil(ramp)
    )
    assert result.status == FAILED and "separately" in result.message, result.message


def test_a_sqrt_length_scale_is_caught_in_multi_head_forward():
    reference = REGISTRY["multi-head/forward"].reference
    source = (
        __import__("inspect").getsource(reference).replace("q.size(-1) ** 0.5", "q.size(-2) ** 0.5")
    )
    namespace = dict(reference.__globals__)
    exec(__import__("textwrap").dedent(source), namespace)
    result = check("multi-head/forward", namespace[reference.__name__])
    assert result.status == FAILED and "1/sqrt(L)" in result.message, result.message


def test_a_solution_that_computes_a_value_answer_is_not_a_coding_exercise():
    """inference/mqa-gap's solution takes (model, tokens) but the answer is a dict with the gap: no generic
    right-answer styles call it, and its mutants are run on the tool's inputs, their values checked.
    """
    assert (
        not REGISTRY["inference/mqa-gap"].answer_is_function and "inference/mqa-gap" not in CODING
    )
    assert "inference/mqa-gap" in MUTATED and "inference/mqa-gap" in mutate.VALUE_INPUTS
    reference = REGISTRY["inference/mqa-gap"].reference
    # it has parameters
    assert reference is not None and __import__("inspect").signature(reference).parameters
    flagged = Exercise(
        "test/value", "value", lambda a: "ok", "", lambda: "", True, lambda x: x, True, False
    )
    assert not flagged.answer_is_function
    assert Exercise(
        "test/fn", "fn", lambda a: "ok", "", lambda: "", True, lambda x: x
    ).answer_is_function


# {exercise id: (right value, rel_tol)}
NUMBER_EXERCISES = {eid: found[:2] for eid, found in number_exercises().items()}


def test_the_number_exercises_are_found():
    assert set(VALUES) <= set(NUMBER_EXERCISES) and len(NUMBER_EXERCISES) >= 15, sorted(
        NUMBER_EXERCISES
    )


@pytest.mark.parametrize("exercise_id", sorted(NUMBER_EXERCISES))
def test_every_number_exercise_accepts_its_value_in_every_usual_type(exercise_id):
    value, rel_tol = NUMBER_EXERCISES[exercise_id]
    answers = [
        value,
        np.float64(value),
        np.array(value),
        np.array([value]),
        torch.tensor(value, dtype=torch.float64),
        torch.tensor([[value]], dtype=torch.float64),
        decimal.Decimal(value),
        fractions.Fraction(value),
    ]
    if value.is_integer() and abs(value) < 2**62:
        n = int(value)
        answers += [n, np.int64(n), torch.tensor(n), torch.tensor([n]), tuple([n])[0]]
    # float32 holds it closely enough
    if abs(float(np.float32(value)) - value) <= rel_tol * abs(value):
        answers += [np.float32(value), torch.tensor(value)]
    for answer in answers:
        result = check(exercise_id, answer)
        assert result.passed, (type(answer), answer, result.message)
    wrong = check(exercise_id, value * 1.5 + 7)
    assert wrong.status == FAILED and UNGRADABLE not in wrong.message, wrong.message
