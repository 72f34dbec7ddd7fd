"""The classes of feedback defects of issue 21, each as a test over every registered exercise.

1. a value that several known mistakes give names all of them;
2. an untouched notebook stub gets the not-attempted message of its own form, and no
   solution shows a private name;
4. multiple-choice answers are validated whole, never by substring;
5. a find-the-bug line inside the function's body never gets "not a line of the body";
6. every tolerance is tighter than the distance to the nearest named mistake;
7. an exercise text that forbids a helper has a checker that refuses it;
8. check() leaves the learner's objects (modules, parameters, tensors, torch's RNG) as found.
"""

import functools
import json
import re
import sys

import pytest
import torch
from exercise_helpers import REGISTRY, number_exercises
from helpers import CHAPTERS, EXERCISE_START, ROOT

import attncourse.exercises  # noqa: F401 - registers every exercise
from attncourse.exercises import _core, check, solution
from attncourse.exercises._core import (
    FAILED,
    NOT_ATTEMPTED,
    PASSED,
    STUB_FUNCTION,
    STUB_VALUE,
)

NUMBERS = number_exercises()


def test_the_number_exercises_are_found():
    assert len(NUMBERS) >= 15, sorted(NUMBERS)


# -- 1. several mistakes, one value -------------------------------------------------------------


@pytest.mark.parametrize("exercise_id", sorted(NUMBERS))
def test_a_value_of_several_known_mistakes_names_all_of_them(exercise_id):
    right, rel_tol, mistakes, mtol, _ = NUMBERS[exercise_id]
    for value, _message in mistakes:
        result = check(exercise_id, value)
        # class 6 too: no named mistake is accepted
        assert result.status == FAILED, (value, result.message)
        for other, other_message in mistakes:
            if abs(value - other) <= mtol * max(1.0, abs(other)):
                assert other_message in result.message, (value, other, result.message)


@pytest.mark.parametrize("exercise_id", sorted(NUMBERS))
def test_every_tolerance_is_tighter_than_the_nearest_named_mistake(exercise_id):
    right, rel_tol, mistakes, mtol, _ = NUMBERS[exercise_id]
    for value, message in mistakes:
        gap = abs(value - right)
        assert gap > rel_tol * abs(right) + mtol * max(1.0, abs(value)), (
            value,
            right,
            rel_tol,
            mtol,
            message,
        )


def test_diagnose_names_every_mistake_that_gives_the_output():
    out = torch.zeros(3)
    message = _core.diagnose(
        out,
        {
            "first": torch.zeros(3),
            "second": torch.zeros(3),
            "third": torch.ones(3),
            "undefined": None,
        },
        default="d",
    )
    assert "first" in message and "second" in message and "third" not in message
    assert _core.diagnose(out, {"only": torch.zeros(3)}, default="d") == "only"
    assert _core.diagnose(out, {"none": None}, default="d") == "d"


@pytest.mark.parametrize(
    "exercise_id, answer, words",
    [
        # the standard deviation of single dropped weights is also the variance of the row sums
        ("multi-head/dropout-row-sum", 0.1, [".sum(-1)", "variance of the row sums"]),
        # bits for bytes is also the 64 query heads
        ("inference/cache-bytes", 10737418240, ["bits", "64 query heads"]),
        # W keys before the block instead of W - 1 is also W = 57
        ("adaptive-span/cells", 147456, ["W - 1 = 55", "W = 57"]),
        # a percentage: draws, not a value
        ("language-model/temperature-experiment", 65.5, ["not a number", "drawn token ids"]),
        # the softmax counted in the FLOPs (+0.78 %)
        ("complexity/multihead-flops", 8053063680 * 1.0078, ["softmax"]),
    ],
)
def test_the_coinciding_mistakes_of_the_issue_are_named(exercise_id, answer, words):
    result = check(exercise_id, answer)
    assert result.status == FAILED and all(w in result.message for w in words), result.message
    assert "Divide the logits" not in result.message


def test_a_buffer_recording_slots_is_told_so():
    def slots(keys, positions, new_key, position):
        keys, positions = keys.clone(), positions.clone()
        keys[:, :, position % keys.size(-2)] = new_key[:, :, 0]
        positions[position % keys.size(-2)] = position % keys.size(-2)
        return keys, positions

    result = check("inference/rolling-buffer", slots)
    assert (
        result.status == FAILED
        and "not the slot" in result.message
        and "first ones" not in result.message
    )


def test_a_cached_step_hiding_its_own_key_is_not_told_to_append():
    from attncourse.attention import scaled_dot_product_attention

    def hides(query, new_key, new_value, past_key, past_value):
        key, value = torch.cat([past_key, new_key], -2), torch.cat([past_value, new_value], -2)
        length, size = query.size(-2), key.size(-2)
        mask = torch.ones(length, size, dtype=torch.bool).tril(size - length - 1)
        return scaled_dot_product_attention(query, key, value, mask)[0], key, value

    result = check("inference/cached-step", hides)
    assert (
        result.status == FAILED and "own key" in result.message and "append" not in result.message
    ), result.message


# -- 2. stubs in their own terms; solutions under public names -------------------------------------


def _notebook_stubs():
    """``[(exercise id, stub cell source, name passed to check)]`` from every chapter of book/."""
    found = []
    # every chapter but 10, whose stubs are Triton kernels (tests/test_exercises_ch10_gpu.py)
    for path in (p for p in CHAPTERS if p.name[:2] != "10"):
        cells = json.loads(path.read_text())["cells"]
        for before, cell in zip(cells, cells[1:]):
            source = "".join(cell["source"])
            match = re.search(r'^check\("([^"]+)", (\w+)\)', source, re.M)
            if cell["cell_type"] == "code" and match:
                found.append((match.group(1), "".join(before["source"]), match.group(2)))
    return found


STUBS = _notebook_stubs()


class _Anything(dict):
    """A namespace in which every name the stub cell reads from the notebook exists."""

    def __missing__(self, name):
        return object()


def test_every_exercise_outside_chapter_10_has_a_notebook_stub():
    ids = {eid for eid, _, _ in STUBS}
    assert {eid for eid in REGISTRY if not eid.startswith("gpu/")} <= ids


@pytest.mark.parametrize("exercise_id, source, name", STUBS, ids=[s[0] for s in STUBS])
def test_an_untouched_notebook_stub_is_not_attempted_in_its_own_terms(exercise_id, source, name):
    namespace = _Anything(torch=torch, Tensor=torch.Tensor)
    exec(
        compile("from __future__ import annotations\n" + source, "<stub>", "exec"),
        {"__builtins__": __builtins__},
        namespace,
    )
    answer = namespace[name]
    result = check(exercise_id, answer)
    assert result.status == NOT_ATTEMPTED, result.message
    if callable(answer):
        assert result.message == STUB_FUNCTION
    elif isinstance(answer, dict):
        field = next(k for k, v in answer.items() if v is Ellipsis)
        assert (
            result.message.startswith(f"{field} is still the placeholder")
            and "NotImplementedError" not in result.message
        )
    else:
        assert result.message == STUB_VALUE


@pytest.mark.parametrize("exercise_id", sorted(REGISTRY))
def test_no_solution_shows_a_private_name(exercise_id):
    text = solution(exercise_id).text
    assert not re.findall(r"(?<![\w.])_[A-Za-z]\w*", text), text


def test_solutions_use_the_notebook_names():
    stubs = {eid: name for eid, source, name in STUBS}
    for eid, ex in REGISTRY.items():
        if ex.answer_is_function and eid in stubs:
            assert f"def {stubs[eid]}(" in solution(eid).text, eid


# -- 4 and 5. choices and line numbers ---------------------------------------------------------------


def _choice_exercises():
    """Exercises whose checker validates with ``choice``: found by spying."""
    found = {}
    for eid, ex in sorted(REGISTRY.items()):
        module = sys.modules[ex.checker.__module__]
        if getattr(module, "choice", None) is not _core.choice:
            continue
        seen = []

        def spy(answer, choices, what="answer", seen=seen):
            seen.append(tuple(choices))
            return _core.choice(answer, choices, what)

        module.choice = spy
        try:
            check(eid, "a")
        finally:
            module.choice = _core.choice
        if seen:
            found[eid] = seen[0]
    return found


CHOICES = _choice_exercises()


def test_the_choice_exercises_are_found():
    assert "cross-attention/which-bug" in CHOICES


@pytest.mark.parametrize("exercise_id", sorted(CHOICES))
def test_every_choice_is_validated_whole(exercise_id):
    choices = CHOICES[exercise_id]
    statuses = [check(exercise_id, c).status for c in choices]
    assert statuses.count(PASSED) == 1 and statuses.count(FAILED) == len(choices) - 1
    right = choices[statuses.index(PASSED)]
    for answer in (right.upper(), f" ({right}) ", f'"{right}"'):
        assert check(exercise_id, answer).passed, answer
    for answer in (
        "",
        "   ",
        "".join(choices[:2]),
        f"{choices[0]}, {choices[1]}",
        "zz",
        "?",
        3,
        None,
        [right],
        right * 2,
    ):
        result = check(exercise_id, answer)
        assert (
            result.status in (FAILED, NOT_ATTEMPTED) and _core.UNGRADABLE not in result.message
        ), (answer, result.message)
        if result.status == FAILED:
            assert all(f'"{c}"' in result.message for c in choices), result.message


@pytest.mark.parametrize(
    "exercise_id", sorted(e for e, v in NUMBERS.items() if "Line {value" in v[4])
)
def test_no_line_of_the_body_is_called_outside_it(exercise_id):
    # the range the checker states for an answer far outside it (each find-the-bug words it its own way)
    first, last = map(
        int, re.search(r"lines (\d+) to (\d+)", check(exercise_id, 10**6).message).groups()
    )
    for line in range(first, last + 1):
        message = check(exercise_id, line).message
        assert not any(w in message for w in ("outside", "not a line", "not one of them")), (
            line,
            message,
        )
    for line in (first - 1, last + 1):
        assert f"lines {first} to {last}" in check(exercise_id, line).message


# -- 7. a helper the text forbids ------------------------------------------------------------------


def test_the_forbidden_helpers_are_refused():
    import attncourse
    from attncourse import training

    attention = lambda q, k, v, mask=None, *, scale=None: attncourse.scaled_dot_product_attention(  # noqa: E731
        q, k, v, mask, scale=scale
    )
    for eid, answer, name in [
        (
            "dot-product/attention",
            attncourse.scaled_dot_product_attention,
            "scaled_dot_product_attention",
        ),
        ("dot-product/attention", attention, "scaled_dot_product_attention"),
        ("language-model/shifted-loss", training.next_token_loss, "next_token_loss"),
        (
            "language-model/shifted-loss",
            lambda logits, tokens: training.next_token_loss(logits, tokens),
            "next_token_loss",
        ),
    ]:
        result = check(eid, answer)
        assert result.status == FAILED and name in result.message, result.message


FORBIDDEN = [
    (exercise_id, name, helper)
    for exercise_id, ex in REGISTRY.items()
    for name, helper in ex.forbidden.items()
]


#: The exercises whose texts ask the learner not to call some of the package's (or torch's)
#: functions: each must declare them with @exercise(forbids=...).
FORBIDDING = {
    "dot-product/attention",
    "dot-product/fix-mask-after-softmax",
    "multi-head/split-heads",
    "multi-head/fix-merge",
    "masking/padding-mask",
    "masking/causal-mask",
    "masking/attention-mask",
    "language-model/sinusoidal",
    "language-model/rope",
    "language-model/top-k",
    "language-model/shifted-loss",
    "inference/repeat-kv",
    "complexity/online-softmax",
    "adaptive-span/soft-mask",
    "adaptive-span/window",
    "gpu/causal-key-blocks",
    "flex/document-window-mask",
    "flex/alibi-score-mod",
    "flex/predict-blocks",
    "flex/fix-causal",
    "flex/computed-blocks",
}


def test_the_exercises_that_forbid_helpers_are_found():
    assert {eid for eid, _, _ in FORBIDDEN} == FORBIDDING


@pytest.mark.parametrize(
    "exercise_id, name, helper", FORBIDDEN, ids=[f"{e}:{n}" for e, n, _ in FORBIDDEN]
)
def test_every_forbidden_helper_is_refused_by_its_name(exercise_id, name, helper):
    def answer(*args, **kwargs):
        return helper(*args, **kwargs)

    result = check(exercise_id, answer)
    assert result.status == FAILED and name in result.message, result.message


#: The package's functions that are a forbidden helper without its checks (``_repeat_kv``):
#: each is refused too, naming the helper it stands for.
PRIVATE_PARTS = [
    (exercise_id, name, private)
    for exercise_id, name, helper in FORBIDDEN
    for private in _core._private_parts(helper)
]


def test_the_helpers_without_their_checks_are_found():
    found = {(name, f"{p.__module__}.{p.__name__}") for _, name, p in PRIVATE_PARTS}
    assert found == {
        ("attncourse.attention.scaled_dot_product_attention", "attncourse.attention._attention"),
        ("attncourse.kv_cache.repeat_kv", "attncourse.kv_cache._repeat_kv"),
        ("attncourse.multihead.merge_heads", "attncourse.multihead._merge_heads"),
        ("attncourse.multihead.split_heads", "attncourse.multihead._split_heads"),
        # not called by apply_rope, but in its module (MultiHeadAttention's RoPE calls it)
        ("attncourse.positions.apply_rope", "attncourse.positions._rope"),
        # torch's fused backends of its attention operator
        *(
            ("torch.ops.aten.scaled_dot_product_attention", f"torch._ops.aten._{backend}")
            for backend in (
                "scaled_dot_product_attention_math",
                "scaled_dot_product_attention_math_for_mps",
                "scaled_dot_product_cudnn_attention",
                "scaled_dot_product_efficient_attention",
                "scaled_dot_product_flash_attention",
                "scaled_dot_product_flash_attention_for_cpu",
                "scaled_dot_product_fused_attention_overrideable",
            )
        ),
    }


@pytest.mark.parametrize(
    "exercise_id, name, private",
    PRIVATE_PARTS,
    ids=[f"{e}:{p.__name__}" for e, _, p in PRIVATE_PARTS],
)
def test_a_helper_without_its_checks_is_refused_by_the_helpers_name(exercise_id, name, private):
    def answer(*args, **kwargs):
        return private(*args, **kwargs)

    result = check(exercise_id, answer)
    assert result.status == FAILED and f"{private.__name__}, which is {name}" in result.message, (
        result.message
    )


def test_two_forbidden_functions_of_one_name_are_refused_at_registration():
    """A wrapper copies its function's name (functools.wraps): as one key, one would hide the other."""
    from attncourse.masks import causal_mask

    wrapper = functools.wraps(causal_mask)(lambda *args: causal_mask(*args))
    with pytest.raises(ValueError, match="attncourse.masks.causal_mask"):
        _core._named_by_home((causal_mask, wrapper))


def _exercise_texts(path):
    """``{exercise id: its Markdown, from the exercise's start to its check() cell}``."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    texts, chunks = {}, []
    for cell in cells:
        source = "".join(cell["source"])
        start = EXERCISE_START.search(source) if cell["cell_type"] == "markdown" else None
        if start:
            chunks = [source[start.start() :]]
        elif cell["cell_type"] == "markdown":
            chunks.append(source)
        for exercise_id in re.findall(r'^check\("([^"]+)"', source, re.MULTILINE):
            texts.setdefault(exercise_id, "\n".join(chunks))
    return texts


#: A sentence (or a clause between semicolons) that forbids: English or Chinese.
_FORBIDDING = re.compile(
    r"\b(?:not|without|nor)\b|不要|不用|不通过|不可以|不从|不调用|不借助", re.IGNORECASE
)


def _forbidding_sentences(text):
    return [s for s in re.split(r"(?<=[.;!?])\s+|[。；;]", text) if _FORBIDDING.search(s)]


@pytest.mark.parametrize("edition", ["book", "notebooks/zh"])
def test_every_exercise_text_names_the_helpers_it_forbids(edition):
    texts = {}
    for path in sorted((ROOT / edition).glob("[0-9][0-9]_*.ipynb")):
        texts.update(_exercise_texts(path))
    unnamed = [
        (exercise_id, helper.__name__)
        for exercise_id, _, helper in FORBIDDEN
        if not any(
            re.search(rf"\b{helper.__name__}\b", sentence)
            for sentence in _forbidding_sentences(texts[exercise_id])
        )
    ]
    assert not unnamed, f"texts that do not forbid the helpers their checker refuses: {unnamed}"


def _notebook_function(source, **names):
    """The function ``source`` defines, written in a notebook whose globals are ``names``."""
    scope = dict(names)
    exec(source, scope)  # noqa: S102 - a learner's cell, as the notebook runs it
    return next(
        v for k, v in scope.items() if k not in names and callable(v) and k != "__builtins__"
    )


def test_a_forbidden_helper_is_found_through_dotted_names_and_imports():
    import attncourse

    answers = [
        # two modules deep from a global
        _notebook_function(
            "def loss(logits, tokens):\n"
            "    return attncourse.training.next_token_loss(logits, tokens)\n",
            attncourse=attncourse,
        ),
        # imported inside the function
        _notebook_function(
            "def loss(logits, tokens):\n"
            "    from attncourse.training import next_token_loss\n"
            "    return next_token_loss(logits, tokens)\n"
        ),
        _notebook_function(
            "def loss(logits, tokens):\n"
            "    import attncourse.training as t\n"
            "    return t.next_token_loss(logits, tokens)\n"
        ),
    ]
    for answer in answers:
        result = check("language-model/shifted-loss", answer)
        assert result.status == FAILED and "next_token_loss" in result.message, result.message


CHAPTER_2_GLOBALS = "import functools\nimport torch\nfrom attncourse.multihead import merge_heads\n"

#: Answers to multi-head/fix-merge that call the package's merge_heads, each a way a learner
#: writes code: through a helper, a default, a partial, a callable object, a method, a table.
MERGE_HEADS_CALLED = {
    "partial": "merge = functools.partial(merge_heads)",
    "default argument": "def merge(heads, f=merge_heads):\n    return f(heads)",
    "keyword-only default": "def merge(heads, *, f=merge_heads):\n    return f(heads)",
    "callable object": (
        "class Merge:\n    def __call__(self, heads):\n        return merge_heads(heads)\n"
        "merge = Merge()"
    ),
    "module": (
        "class Merge(torch.nn.Module):\n    def forward(self, heads):\n"
        "        return merge_heads(heads)\nmerge = Merge()"
    ),
    "method through self": (
        "class M:\n    def helper(self, heads):\n        return merge_heads(heads)\n"
        "    def merge(self, heads):\n        return self.helper(heads)\nmerge = M().merge"
    ),
    "staticmethod": (
        "class Ops:\n    @staticmethod\n    def merge(heads):\n        return merge_heads(heads)\n"
        "def merge(heads):\n    return Ops.merge(heads)"
    ),
    "table": 'OPS = {"merge": merge_heads}\ndef merge(heads):\n    return OPS["merge"](heads)',
    "lru_cache": "@functools.lru_cache\ndef merge(heads):\n    return merge_heads(heads)",
    "six helpers deep": "\n".join(
        [f"def h{i}(x):\n    return h{i + 1}(x)" for i in range(6)]
        + ["def h6(x):\n    return merge_heads(x)", "def merge(heads):\n    return h0(heads)"]
    ),
    # reached late by a long path and early by a short one: breadth first, whatever the order
    "two paths": (
        "def inner(h):\n    return merge_heads(h)\ndef helper(h):\n    return inner(h)\n"
        "def x2(h):\n    return helper(h)\ndef x1(h):\n    return x2(h)\n"
        "def merge(heads):\n    return x1(heads) if heads.dim() == 0 else helper(heads)"
    ),
    # wrappers that copy the helper's __module__ (functools.wraps) and hold it as __wrapped__
    "no_grad wrapper": "fast = torch.no_grad()(merge_heads)\ndef merge(heads):\n    return fast(heads)",
    "torch.compile": "fast = torch.compile(merge_heads)\ndef merge(heads):\n    return fast(heads)",
    "vmap": "fast = torch.vmap(merge_heads)\ndef merge(heads):\n    return fast(heads[None])[0]",
    # an object on the way whose code cannot be read (FunctionType's __code__ is a descriptor)
    "inspect on the way": (
        "import inspect\ndef merge(heads):\n    assert inspect.isfunction(merge_heads)\n"
        "    return merge_heads(heads)"
    ),
    # the name as a string: getattr and a module's dict read it all the same
    "getattr with the name": (
        "import attncourse.multihead as mh\ndef merge(heads):\n"
        "    return getattr(mh, 'merge_heads')(heads)"
    ),
    "a module's vars": (
        "import attncourse.multihead as mh\ndef merge(heads):\n"
        "    return vars(mh)['merge_heads'](heads)"
    ),
    # a module passed as a default argument holds the name it reads
    "module as a default": (
        "import attncourse.multihead\ndef merge(heads, lib=attncourse.multihead):\n"
        "    return lib.merge_heads(heads)"
    ),
    # an attribute whose reading raises (torch.classes) must not switch the check off
    "unreadable attribute": (
        "class Cfg:\n    classes = [1, 2]\ncfg = Cfg()\n"
        "def merge(heads):\n    assert len(cfg.classes) == 2\n    return merge_heads(heads)"
    ),
}


@pytest.mark.parametrize("style", sorted(MERGE_HEADS_CALLED))
def test_a_forbidden_helper_is_found_however_it_is_called(style):
    scope: dict = {}
    exec(CHAPTER_2_GLOBALS + MERGE_HEADS_CALLED[style], scope)  # noqa: S102 - a learner's cell
    result = check("multi-head/fix-merge", scope["merge"])
    assert result.status == FAILED and "merge_heads" in result.message, result.message


def test_a_check_against_the_package_inside_the_answer_is_named():
    scope: dict = {}
    exec(  # noqa: S102 - a learner's cell
        CHAPTER_2_GLOBALS + "def merge(heads):\n    B, h, L, d = heads.shape\n"
        "    out = heads.transpose(1, 2).reshape(B, L, h * d)\n"
        "    assert torch.equal(out, merge_heads(heads))\n    return out",
        scope,
    )
    message = check("multi-head/fix-merge", scope["merge"]).message
    assert "merge_heads" in message and "comparison" in message, message


def test_chapter_1s_attention_refuses_torchs_function_too():
    import torch.nn.functional as F

    answer = _notebook_function(
        "def attention(q, k, v, mask=None, *, scale=None):\n"
        "    weights = torch.softmax(q @ k.transpose(-2, -1) * (scale or q.size(-1) ** -0.5), -1)\n"
        "    return F.scaled_dot_product_attention(q, k, v, scale=scale), weights\n",
        F=F,
        torch=torch,
    )
    message = check("dot-product/attention", answer).message
    assert "torch.nn.functional.scaled_dot_product_attention" in message, message


def test_an_attribute_does_not_reach_a_global_of_the_same_name():
    """Chapter 1's notebook imports the package's scaled_dot_product_attention; an answer that
    calls torch's F.scaled_dot_product_attention calls torch's, not the package's."""
    import torch.nn.functional as F

    import attncourse

    answer = _notebook_function(
        "def attention(q, k, v, mask=None, *, scale=None):\n"
        "    return F.scaled_dot_product_attention(q, k, v), None\n",
        F=F,
        scaled_dot_product_attention=attncourse.scaled_dot_product_attention,
    )
    reached = _core._referenced(answer)
    assert F.scaled_dot_product_attention in reached
    assert not any(obj is attncourse.scaled_dot_product_attention for obj in reached)
    message = check("dot-product/attention", answer).message
    assert "torch.nn.functional.scaled_dot_product_attention" in message, message
    assert "attncourse.attention.scaled_dot_product_attention" not in message, message


# -- 8. no side effects ------------------------------------------------------------------------------


def _state(obj):
    modules = [
        m
        for m in (obj.values() if isinstance(obj, dict) else [obj])
        if isinstance(m, torch.nn.Module)
    ]
    return (
        [[m.training for m in module.modules()] for module in modules],
        [
            [(p.detach().clone(), p.requires_grad) for p in module.parameters()]
            for module in modules
        ],
        torch.get_rng_state(),
    )


def _same(a, b):
    flags_a, params_a, rng_a = a
    flags_b, params_b, rng_b = b
    return (
        flags_a == flags_b
        and torch.equal(rng_a, rng_b)
        and all(
            torch.equal(x, y) and ga == gb
            for pa, pb in zip(params_a, params_b)
            for (x, ga), (y, gb) in zip(pa, pb)
        )
    )


def _tiny_model(num_heads=4):
    from attncourse import CausalLM

    torch.manual_seed(0)
    return CausalLM.standard(11, d_model=12, num_heads=num_heads, d_ff=16, num_layers=1, max_len=16)


@pytest.mark.parametrize("training, frozen", [(True, False), (False, True), (True, True)])
def test_the_mqa_check_leaves_the_model_as_found(training, frozen):
    model = _tiny_model()
    model.train(training)
    for p in list(model.parameters())[:2]:
        p.requires_grad_(not frozen)
    tokens = torch.randint(11, (2, 8), generator=torch.Generator().manual_seed(1))
    before = _state({"model": model})
    result = check("inference/mqa-gap", {"model": model, "tokens": tokens, "gap": 0.123})
    assert result.status == FAILED
    assert _same(before, _state({"model": model})), "check() changed the learner's model"


def test_the_mqa_check_grades_a_valid_model_with_an_odd_number_of_heads():
    """3 heads: 2 K/V heads (a known mistake's value) are not defined; the answer is graded all the same."""
    model = _tiny_model(num_heads=3)
    tokens = torch.randint(11, (2, 8), generator=torch.Generator().manual_seed(1))
    right = REGISTRY["inference/mqa-gap"].reference(model, tokens)
    assert check("inference/mqa-gap", right).passed
    wrong = check(
        "inference/mqa-gap", {"model": model, "tokens": tokens, "gap": right["gap"] + 1.0}
    )
    assert wrong.status == FAILED and _core.UNGRADABLE not in wrong.message, wrong.message


@pytest.mark.parametrize("exercise_id", sorted(REGISTRY))
def test_check_leaves_torch_random_state_and_answers_as_found(exercise_id):
    ex = REGISTRY[exercise_id]
    answer = ex.reference if ex.answer_is_function else 1.0
    torch.manual_seed(123)
    rng = torch.get_rng_state()
    check(exercise_id, answer)
    assert torch.equal(rng, torch.get_rng_state())


# -- 1. the mistakes the README promises to name: softmax over the queries, a missing 1/sqrt(d) ----------

SOFTMAX_EXERCISES = sorted(
    eid
    for eid, ex in REGISTRY.items()
    # kernel exercises (gpu/*) are excluded: their softmax is tl.exp and tl.sum inside a Triton
    # kernel, which softmax_over() cannot turn; their checkers name a kernel's own mistakes
    if ex.answer_is_function
    and not eid.startswith("gpu/")
    and "softmax" in __import__("inspect").getsource(ex.reference)
    # multi-head/forward's reference calls the package's attention, which takes the softmax
    or eid == "multi-head/forward"
)


def test_the_softmax_exercises_are_found():
    assert {
        "dot-product/attention",
        "multi-head/forward",
        "language-model/top-k",
        "adaptive-span/weights",
        "all-attention/persistent-head",
    } <= set(SOFTMAX_EXERCISES)


@pytest.mark.parametrize("exercise_id", SOFTMAX_EXERCISES)
def test_a_softmax_over_the_wrong_dimension_is_named(exercise_id):
    reference = REGISTRY[exercise_id].reference

    def over_queries(*args, **kwargs):
        with _core.softmax_over(-2):
            return reference(*args, **kwargs)

    result = check(exercise_id, over_queries)
    assert result.status == FAILED and (
        "wrong dimension" in result.message
        or "softmax runs over" in result.message
        or "dim=-2" in result.message
    ), result.message


def test_a_forgotten_scale_is_named_in_multi_head_forward():
    import inspect
    import textwrap

    reference = REGISTRY["multi-head/forward"].reference
    source = textwrap.dedent(inspect.getsource(reference))
    unscaled = source.replace("scale=q.size(-1) ** -0.5", "scale=1.0").replace(
        "/ q.size(-1) ** 0.5", ""
    )
    assert unscaled != source
    namespace = dict(reference.__globals__)
    exec(unscaled, namespace)
    result = check("multi-head/forward", namespace[reference.__name__])
    assert result.status == FAILED and "not scaled" in result.message, result.message


def test_keeping_k_minus_one_tokens_is_named():
    def fewer(logits, k, temperature):
        kth = torch.topk(logits, k, dim=-1).values[..., -1:]
        return torch.softmax(
            (logits / temperature).masked_fill(logits <= kth, float("-inf")), dim=-1
        )

    result = check("language-model/top-k", fewer)
    assert result.status == FAILED and "k - 1" in result.message, result.message


# -- 3. a valid object is always graded -------------------------------------------------------------


@pytest.mark.parametrize(
    "num_heads, layers, train, dtype, batch",
    [
        (3, 1, False, torch.float32, 2),
        (1, 1, False, torch.float32, 2),
        (5, 2, True, torch.float32, 1),
        (4, 1, True, torch.float64, 3),
        (6, 1, False, torch.float32, 1),
    ],
)
def test_the_mqa_gap_grades_every_valid_model(num_heads, layers, train, dtype, batch):
    from attncourse import CausalLM

    torch.manual_seed(num_heads)
    model = (
        CausalLM.standard(
            11, d_model=6 * num_heads, num_heads=num_heads, d_ff=16, num_layers=layers, max_len=16
        )
        .to(dtype)
        .train(train)
    )
    tokens = torch.randint(11, (batch, 9), generator=torch.Generator().manual_seed(2))
    before = _state({"model": model})
    right = REGISTRY["inference/mqa-gap"].reference(model, tokens)
    model.train(train)  # the reference measures in eval mode
    before = _state({"model": model})
    assert check("inference/mqa-gap", right).passed
    for gap in (right["gap"] + 0.5, -right["gap"] - 0.5, 0.0 if right["gap"] else 1.0):
        result = check("inference/mqa-gap", {"model": model, "tokens": tokens, "gap": gap})
        assert result.status == FAILED and _core.UNGRADABLE not in result.message, result.message
    assert _same(before, _state({"model": model}))


@pytest.mark.parametrize("exercise_id", sorted(NUMBERS))
def test_a_tensor_answer_is_left_as_found(exercise_id):
    right = NUMBERS[exercise_id][0]
    for value in (right, right * 1.5 + 7):
        answer = torch.tensor([value], dtype=torch.float64, requires_grad=True)
        check(exercise_id, answer)
        assert answer.requires_grad and answer.grad is None and answer.item() == value


def test_a_right_answer_with_helpers_of_its_own_is_not_refused():
    namespace = {}
    # no __name__: the helpers' __module__ is None
    exec(
        "def helper(l, t):\n    import torch\n    return torch.nn.functional.cross_entropy(l[:,"
        " :-1].reshape(-1, l.size(-1)), t[:, 1:].reshape(-1))\ndef lm_loss(logits, tokens):\n   "
        " return helper(logits, tokens)\n",
        namespace,
    )
    assert check("language-model/shifted-loss", namespace["lm_loss"]).passed
