"""Task semantics: validate / code_o / code_i / code_f (each kind's Check run by the generic verifier), canonical
values, tricks that must not pass."""

from __future__ import annotations

import math

import pytest

from populora.platform.sandbox import Sandbox
from populora.platform.sandbox.values import canonical, canonical_literal, parse_literal
from populora.platform.sandbox.verifier import (DEFAULT_BANNED, Check, Validate, Verifier, banned_reason, check_program,
                                        literal_arguments)
from populora.training.tasks import code_f, code_i, code_o

ECHO = "def f(a):\n    return a"
PAIR = "def f(xs, k):\n    return [x * k for x in xs], {'n': len(xs)}"


@pytest.fixture(scope="module")
def v():
    with Sandbox(workers=2, timeout_s=2.0) as sb:
        yield Verifier(sb, timeout_s=2.0)


def check_code_o(v, program, input, answer, mode="strict"):
    return v.check(code_o.check(program, input, answer, mode=mode))


def check_code_i(v, program, output, answer, mode="strict"):
    return v.check(code_i.check(program, output, answer, mode))


def check_code_f(v, program, inputs, answer, outputs=None, mode="strict"):
    return v.check(code_f.check(program, inputs, answer, outputs, mode))


# ------------------------------------------------------------------------------- canonical values (pure)


@pytest.mark.parametrize("a, b, same", [
    (1, 1.0, False), (1, True, False), (0.0, -0.0, False), (float("nan"), float("nan"), True),
    ({"a": 1, "b": 2}, {"b": 2, "a": 1}, True), ({3, 1, 2}, {1, 2, 3}, True), ([1], (1,), False),
    ({1}, frozenset({1}), False), ("a", b"a", False), (((1, (2,)),), ((1, (2,)),), True),
])
def test_canonical_equality(a, b, same):
    assert (canonical(a) == canonical(b)) is same


@pytest.mark.parametrize("value", [
    None, True, -0.0, float("inf"), float("-inf"), 10**5000, -(10**5000), 2**64, "it's \"q\"\n", b"\x00\xff",
    [], (), (1,), {}, set(), frozenset(), {(1, 2): [{"x": None}]}, {frozenset({1}), 2.5}, [1, "1", 1.0],
    1j, complex(1, -0.0), complex(float("nan"), float("-inf")), [(1 + 2j, {3j})],
], ids=lambda x: type(x).__name__)
def test_canonical_roundtrips(value):
    text = canonical(value)
    assert canonical_literal(text) == text
    assert canonical(eval(text)) == text  # plain Python reads it back too


def test_nan_roundtrip_and_rejects():
    assert math.isnan(parse_literal(canonical(float("nan"))))
    for bad in ("__import__('os')", "f(1)", "1 + 2", "x", "[i for i in range(3)]", "complex('1j')", "{**a}", "float(1)",
                "1j + 1", "1 + (2 + 3j)", "complex(1j)"):
        with pytest.raises(ValueError):
            canonical_literal(bad)

    class Sneaky(int):
        def __eq__(self, other):
            return True
    with pytest.raises(TypeError):
        canonical([Sneaky(1)])
    with pytest.raises(TypeError):
        canonical(iter([1]))


def test_static_checks():
    assert check_program("x = 1")[0] == "invalid"
    assert check_program("def f(:")[0] == "parse_error"
    assert check_program("def g(x):\n    return x\ndef f(x):\n    return g(x)") is None  # helpers allowed
    for prog in ("import os.path\ndef f(): pass", "from time import time\ndef f(): pass",
                 "def f():\n    return __import__('os')", "def f():\n    return open('x')",
                 "def f():\n    return ().__class__.__base__.__subclasses__()", "import random as r\ndef f(): pass",
                 "def f():\n    return eval('1')", "def f():\n    return input()"):
        assert check_program(prog)[0] == "banned", prog
    assert banned_reason(__import__("ast").parse("import numpy"), ("numpy",)) is not None
    # the program's own variables may share a name with a banned builtin or module
    assert check_program("def f(input, time):\n    id = 3\n    return input * time + id") is None
    assert check_program("def f(x):\n    return __builtins__")[0] == "banned"
    assert "random" in DEFAULT_BANNED and "os" in DEFAULT_BANNED
    assert literal_arguments("[1, 2], 3") and literal_arguments("x=-1.5")
    assert not literal_arguments("print(1)") and not literal_arguments("1), g(2") and not literal_arguments("*a")


# ------------------------------------------------------------------------------------------- validate


def test_validate_azr_inputs(v):
    vd = v.validate(ECHO, '"Hello world"')
    assert (vd.valid, vd.status, vd.output) == (True, "ok", "'Hello world'")
    vd = v.validate(PAIR, "[1, 2], 3")
    assert vd.valid and vd.output == "([3, 6], {'n': 2})"
    assert v.validate(ECHO, "{'b': 1, 'a': {3, 2}}").output == "{'a': {2, 3}, 'b': 1}"


@pytest.mark.parametrize("program, inp, status", [
    ("def f(a):\n    return a", "1), print(2", "invalid"),
    ("def g(a):\n    return a", "1", "invalid"),
    ("import time\ndef f(a):\n    return time.time()", "1", "banned"),
    ("def f(a):\n    return a", "__import__('os').getpid()", "banned"),
    ("def f(a):\n    return 1 / a", "0", "error"),
    ("def f(a):\n    while True:\n        pass", "1", "timeout"),
    ("def f(a):\n    return object()", "1", "error"),
    ("def f(a):\n    return (x for x in a)", "[1]", "error"),
    ("seen = []\ndef f(a):\n    seen.append(a)\n    return len(seen)", "1", "nondeterministic"),
    ("def f(a):\n    return str(f)", "1", "nondeterministic"),  # '<function f at 0x...>': another in every process
    ("def f(a):\n    return [a, repr(object())]", "1", "nondeterministic"),
    ("def f(a):\n    return a * 2_000_000", "'x'", "output_limit"),
    ("def f(a):\n    return [a] * 10**8", "'x'", "memory"),
])
def test_validate_rejects(v, program, inp, status):
    vd = v.validate(program, inp)
    assert (vd.valid, vd.status) == (False, status), vd


def test_eq_tricks_do_not_fool_checks(v):
    always_eq = ("class E:\n    def __eq__(self, o):\n        return True\n    __hash__ = object.__hash__\n"
                 "def f(a):\n    return E()")
    assert not v.validate(always_eq, "1").valid
    assert check_code_o(v, always_eq, "1", "3").correct is not True
    sub = "class I(int):\n    def __eq__(self, o):\n        return True\ndef f(a):\n    return I(a)"
    assert check_code_o(v, sub, "1", "2").correct is not True
    # a student's code_f program returning a trick object gets no credit either
    assert check_code_f(v, ECHO, ["1", "2"], always_eq.replace("E()", "E()")).correct is False


# -------------------------------------------------------------------------------------- code_o / code_i


@pytest.mark.parametrize("program, inp, answer, correct", [
    (ECHO, "1", "1", True), (ECHO, "1", "1.0", False), (ECHO, "1", "True", False),
    (ECHO, "1.0", "1.0", True), (ECHO, "-0.0", "0.0", False), (ECHO, "-0.0", "-0.0", True),
    ("def f(a):\n    return a * float('nan')", "1", "float('nan')", True),
    ("def f(a):\n    return a * float('nan')", "1", "0", False),
    (ECHO, "{'x': 1, 'y': 2}", "{'y': 2, 'x': 1}", True), (ECHO, "{3, 1}", "{1, 3}", True),
    (ECHO, "{3, 1}", "[1, 3]", False), (ECHO, "((1, (2,)), [])", "((1, (2,)), [])", True),
    ("def f(n):\n    return 7 ** n", "2000", str(7 ** 2000), True),
    (PAIR, "[1, 2], 3", "([3, 6], {'n': 2})", True), (PAIR, "[1, 2], 3", "[3, 6], {'n': 2}", True),
    (ECHO, "'a'", "a", None), (ECHO, "1", "__import__('os')", None),
])
def test_code_o(v, program, inp, answer, correct):
    vd = check_code_o(v, program, inp, answer)
    if correct is None:
        assert (vd.correct, vd.status) == (False, "bad_answer")
    else:
        assert vd.valid and vd.correct is correct, vd


@pytest.mark.parametrize("program, output, answer, correct", [
    ("def f(n):\n    return n + 1", "8", "7", True), ("def f(n):\n    return n + 1", "8", "8", False),
    ("def f(n):\n    return n + 1", "8", "7.0", False),  # gives 8.0, not 8
    (PAIR, "([3, 6], {'n': 2})", "[1, 2], 3", True), (PAIR, "([3, 6], {'n': 2})", "[3, 6], 1", True),
    (PAIR, "([3, 6], {'n': 2})", "xs=[1, 2], k=3", True), ("def f(s):\n    return s[::-1]", "'cba'", "'abc'", True),
    ("def f(a):\n    return 1 / a", "1.0", "0", False),
])
def test_code_i(v, program, output, answer, correct):
    vd = check_code_i(v, program, output, answer)
    assert vd.valid and vd.correct is correct, vd


def test_code_i_answers_must_be_literals(v):
    # the student knows the output; code in the answer could forge it next to the check
    forged = "__import__('os')._exit(0)"
    for answer in (forged, "[1] * 3", "f(1)(2)", "open('x')"):
        vd = check_code_i(v, "def f(n):\n    return n", "1", answer)
        assert (vd.correct, vd.status) == (False, "bad_answer"), answer


# ------------------------------------------------------------- AZR's checks (tasks.answer_check: azr, the default)


@pytest.mark.parametrize("program, inp, answer, correct", [
    (ECHO, "'abab'", "'ab' * 2", True), (ECHO, "2", "2.0", True), (ECHO, "1", "True", True),
    (ECHO, "[1, 2]", "[1, 1 + 1]", True), (ECHO, "(1, 2)", "1, 2", True), (ECHO, "2", "3", False),
    (ECHO, "'a'", "a", False), (ECHO, "1", "1 / 0", False), ("def f(a):\n    return a + 1", "1", "f(1)", False),  # no task f in scope
    (ECHO, "1", "__import__('os')", False), (ECHO, "1", "1)\nimport os\n(", False),
    (ECHO, "1", "[0] * 10**10", False), (ECHO, "1", "object()", False),
    ("def f(a):\n    return a * float('nan')", "1", "float('nan')", False),  # nan != nan, as eval compares
])
def test_code_o_azr_any_expression_python_equality(v, program, inp, answer, correct):
    vd = check_code_o(v, program, inp, answer, mode="azr")
    assert (vd.valid, vd.correct) == (True, correct), vd
    gold = v.validate(program, inp).output  # the solve phase passes the gold output: the program need not rerun
    assert v.check(code_o.check(program, inp, answer, gold)).correct is correct


@pytest.mark.parametrize("program, output, answer, correct", [
    ("def f(n):\n    return n + 1", "8", "7.0", True), ("def f(n):\n    return n + 1", "8", "3 + 4", True),
    ("def f(s):\n    return s[::-1]", "'cbacba'", "'abc' * 2", True), ("def f(n):\n    return n", "1", "True", True),
    ("def f(n):\n    return n + 1", "8", "8", False), ("def f(a):\n    return 1 / a", "1.0", "0", False),
    ("def f(n):\n    return n", "1", "__import__('os')._exit(0)", False),
    ("def f(n):\n    while n: pass\n    return 1", "1", "1", False),  # the answer's run times out: wrong
])
def test_code_i_azr_any_expression_python_equality(v, program, output, answer, correct):
    vd = check_code_i(v, program, output, answer, mode="azr")
    assert (vd.valid, vd.correct) == (True, correct), vd


def test_code_f_azr_python_equality(v):
    ref = "def f(xs):\n    return [x * 2 for x in xs if x > 0]"
    inputs = ["[1, -2, 3]", "[]", "[5]"]
    assert check_code_f(v, ref, inputs, "def f(xs):\n    return [2.0 * x for x in xs if x > 0]", mode="azr").correct is True
    assert check_code_f(v, ref, inputs, "def f(xs):\n    return xs", mode="azr").correct is False


# -------------------------------------------------------------------------------------------- code_f


def test_code_f(v):
    ref = "def f(xs):\n    return [x * 2 for x in xs if x > 0]"
    inputs = ["[1, -2, 3]", "[]", "[5]"]
    assert check_code_f(v, ref, inputs, "def f(xs):\n    return [2 * x for x in xs if x > 0]").correct is True
    assert check_code_f(v, ref, inputs, "def f(xs):\n    return [2 * x for x in xs]").correct is False
    assert check_code_f(v, ref, inputs, "def f(xs):\n    return [2.0 * x for x in xs if x > 0]").correct is False
    assert check_code_f(v, ref, inputs, "def g(xs):\n    return xs").status == "invalid"
    assert check_code_f(v, ref, inputs, "import os\ndef f(xs):\n    return xs").status == "banned"
    assert check_code_f(v, ref, inputs, "def f(xs):\n    while True: pass").status == "timeout"
    outs = ["[2, 6]", "[]", "[10]"]
    assert check_code_f(v, ref, inputs, ref, outputs=outs).correct is True
    vd = check_code_f(v, "def f(x):\n    return 1 / x", ["1", "0"], "def f(x):\n    return 1")
    assert (vd.valid, vd.correct) == (False, None)


def test_check_without_calls_is_invalid_not_correct(v):
    vd = v.check(Check(ECHO, [], [], expected=[]))
    assert (vd.valid, vd.correct, vd.status) == (False, None, "invalid")


def test_check_runs_no_student_arguments_that_are_not_literals(v):
    # arguments that are not the task's own inputs come from a student: only literals may run
    vd = v.check(Check(ECHO, ["1"], ["1", "__import__('os').getpid()"], expected=["1", "1"]))
    assert (vd.correct, vd.status) == (False, "bad_answer")


def test_check_many_mixed_batch_in_order(v):
    tasks = [
        Validate(ECHO, "[1, 2]"), code_o.check(ECHO, "2", "2"), code_i.check(ECHO, "2", "3", "strict"),
        code_f.check(ECHO, ["1", "'a'"], "def f(x):\n    return x"), Validate("import os\ndef f(a): return a", "1"),
    ] * 20
    verdicts = v.check_many(tasks)
    assert [(x.valid, x.correct) for x in verdicts[:5]] == [
        (True, None), (True, True), (True, False), (True, True), (False, None)]
    assert verdicts[5:] == verdicts[:5] * 19
    assert verdicts[0].to_json()["output"] == "[1, 2]"
    with pytest.raises(TypeError):
        v.check({"type": "nope"})  # jobs are Validate / Check, built by the task kinds


# ------------------------------------------------------------------- validity rules (tasks.* switches; AZR's in presets)


def test_azr_validity_rules_one_def_import_bans_only_error_keywords(v):
    from populora.platform.sandbox.verifier import AZR_RULES, ProgramRules

    nested = "def f(x):\n    def g(y):\n        return y + 1\n    return g(x)"
    helper = "def g(y):\n    return y\ndef f(x):\n    return g(x)"
    method = "class A:\n    def get(self):\n        return 1\ndef f(x):\n    return A().get() + x"
    for program in (nested, helper, method):  # AZR's regex counts every def, nested ones and methods included
        assert v.check(Validate(program, "1")).valid, program
        vd = v.check(Validate(program, "1", AZR_RULES))
        assert (vd.valid, vd.status) == (False, "invalid") and "only one is allowed" in vd.reason
    # AZR bans imports of its list only: open() and os are ours (extra_bans)
    uses_os = "import os\ndef f(x):\n    return len(os.sep) + x"
    assert v.check(Validate(uses_os, "1")).status == "banned"
    assert v.check(Validate(uses_os, "1", AZR_RULES)).valid
    assert v.check(Validate("import time\ndef f(x):\n    return x", "1", AZR_RULES)).status == "banned"
    raises = "def f(x):\n    if x < 0:\n        raise ValueError(x)\n    return x"
    assert v.check(Validate(raises, "1", AZR_RULES)).valid
    vd = v.check(Validate(raises, "1", ProgramRules(error_keywords=("raise",))))
    assert (vd.valid, vd.status) == (False, "banned") and "'raise'" in vd.reason


def test_code_i_answer_expressions_cannot_forge_the_result(v):
    # evaluated apart from the program and required to be plain values: no rebinding, no objects with own operators
    counts = "def f(xs):\n    return len(xs) + 1"
    assert check_code_i(v, counts, "4", "[1, 2, 3]", mode="azr").correct is True
    assert check_code_i(v, counts, "4", "[0] * 3", mode="azr").correct is True
    for forged in ("(len := lambda x: 3) and []", "type('A', (), {'__len__': lambda s: 3})()",
                   "[(xs := 0)] * 3 and f.__defaults__"):
        vd = check_code_i(v, counts, "4", forged, mode="azr")
        assert (vd.valid, vd.correct) == (True, False), (forged, vd)
