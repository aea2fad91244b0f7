"""The differential corpus: teacher proposals, student answers and solve-rate estimates, written for this test (not
by either side), judged by the AZR reference (``azr.py``) and by our training path (``differential.py``).

Every case names its category (side and kind) and what it probes; tasks of the student and estimate cases are
proposed through each side's own teacher path first, so each side judges answers against its own gold.
"""

from __future__ import annotations

from dataclasses import dataclass, field

T, A = "plan</think>\n<answer>\n", "\n</answer>"  # a well-formed completion's frame (the prompt ends in <think>)


@dataclass
class Case:
    id: str
    side: str                # teacher | student | estimate
    kind: str                # code_o | code_i | code_f
    response: str = ""       # teacher / student: the completion after the prompt's <think>
    responses: list[str] = field(default_factory=list)  # estimate: the 8 answers
    task: str = ""           # student / estimate: a TASKS key; code_f teacher: the source program's TASKS key

    @property
    def category(self) -> str:
        return f"{self.side} {self.kind}"


@dataclass
class Spec:
    program: str
    input: str
    out: str                       # a right code_o answer
    alt: str                       # another right code_o answer (an expression, another type Python calls equal)
    bad: str                       # a wrong code_o answer
    bad_in: str                    # a wrong code_i answer
    alt_in: str | None = None      # another input giving the same output
    f_inputs: list[str] | None = None  # code_f: 10 inputs
    f_right: str = ""              # code_f: a right program (may rely on the task's imports)
    f_wrong: str = ""


_STR10 = ["'a'", "'xy'", "''", "'abc'", "'z'", "'qq'", "'hello'", "'12'", "' '", "'ab'"]
_INT10 = [str(n) for n in (17, 0, 5, 100, 3, 64, 9, 2, 50, 8)]
_LIST10 = ["[1, 2]", "[]", "[5]", "[-1, 4, 0]", "[2, 2]", "[-3]", "[10, -10, 7]", "[0]", "[6, 1]", "[-5, -6, 8]"]

TASKS: dict[str, Spec] = {
    "double": Spec("def f(s):\n    return s * 2", "'ab'", "'abab'", "'ab' * 2", "'ab'", "'a'",
                   f_inputs=_STR10, f_right="def f(s):\n    return s + s", f_wrong="def f(s):\n    return s"),
    "sum": Spec("def f(xs):\n    return sum(xs)", "[1, 2, 3]", "6", "2 * 3", "5", "[1]", "[6]", _LIST10,
                "def f(xs):\n    t = 0\n    for x in xs:\n        t += x\n    return t", "def f(xs):\n    return len(xs)"),
    "half": Spec("def f(x):\n    return x / 2", "5", "2.5", "5 / 2", "2", "4", "5.0", _INT10,
                 "def f(x):\n    return x * 0.5", "def f(x):\n    return x // 2"),
    "lens": Spec("def f(words):\n    return {w: len(w) for w in words}", "['a', 'bb']", "{'a': 1, 'bb': 2}",
                 "{'bb': 2, 'a': 1}", "{'a': 1}", "['a']", "['bb', 'a']"),
    "uniq": Spec("def f(xs):\n    return set(xs)", "[3, 1, 3]", "{1, 3}", "set([3, 1])", "[1, 3]", "[1]", "[1, 3]"),
    "swap": Spec("def f(a, b):\n    return (b, a)", "1, 'x'", "('x', 1)", "'x', 1", "(1, 'x')", "'x', 1", "a=1, b='x'"),
    "even": Spec("def f(n):\n    return n % 2 == 0", "4", "True", "1", "False", "3", "2", _INT10,
                 "def f(n):\n    return not n % 2", "def f(n):\n    return n > 4"),
    "tri": Spec("def f(n):\n    return [[i] * i for i in range(n)]", "3", "[[], [1], [2, 2]]",
                "[[i] * i for i in range(3)]", "[[1], [2, 2]]", "2"),
    "mathimp": Spec("import math\ndef f(x):\n    return math.isqrt(x) + x % 3", "17", "6", "4 + 2", "5", "16", None, _INT10,
                    "def f(x):\n    return math.isqrt(x) + x % 3", "def f(x):\n    return math.floor(math.sqrt(x))"),
    "counter": Spec("from collections import Counter\ndef f(s):\n    return Counter(s).most_common(1)[0][0]", "'abca'",
                    "'a'", "'a' + ''", "'b'", "'bcb'", "'a'", _STR10[:2] + ["'aab'"] + _STR10[3:],
                    "def f(s):\n    return Counter(s).most_common(1)[0][0]", "def f(s):\n    return s[0]"),
    "fact": Spec("def fact(n):\n    return 1 if n < 2 else n * fact(n - 1)", "5", "120", "5 * 24", "24", "4"),
    "bytes": Spec("def f(s):\n    return s.encode()", "'hi'", "b'hi'", "'hi'.encode()", "'hi'", "'ho'"),
    "cplx": Spec("def f(x):\n    return complex(x, 1)", "2", "(2+1j)", "2 + 1j", "2", "1", "2.0"),
    "fset": Spec("def f(xs):\n    return frozenset(xs)", "[1, 2]", "frozenset({1, 2})", "{2, 1}", "frozenset({1})",
                 "[1]", "[2, 1]"),
    "none": Spec("def f(xs):\n    xs.append(1)", "[]", "None", "print('x')", "[1]", "1"),
    "kw": Spec("def f(a, b=2):\n    return a * b", "3, b=4", "12", "3 * 4", "6", "3", "4, 3"),
    "strgold": Spec("def f(a, b):\n    return f'{a}+{b}'", "1, 1", "'1+1'", "'1' + '+1'", "'2'", "2, 2", "'1', '1'"),
    "inf": Spec("def f(x):\n    return float('inf') * x", "1", "float('inf')", "1e999", "0", "-1", "2"),
    "negzero": Spec("def f(x):\n    return -0.0 * x", "1", "-0.0", "0.0", "1.0", "-1"),
    "top2": Spec("def f(xs):\n    ys = sorted(xs, reverse=True)\n    return ys[:2]", "[4, 9, 1]", "[9, 4]",
                 "sorted([4, 9])[::-1]", "[4, 9]", "[1, 2, 3]", "[9, 4]"),
    "pow": Spec("def f(n):\n    return 2 ** n", "100", "1267650600228229401496703205376", "2 ** 100", "2 ** 99", "99"),
}


def proposal(program: str, inp: str) -> str:
    return f"{T}```python\n{program}\n```\n```input\n{inp}\n```{A}"


def f_proposal(inputs: list[str], message: str = "```message\nit transforms its input\n```") -> str:
    return T + "\n".join(f"```input\n{x}\n```" for x in inputs) + "\n" + message + A


def answer(kind: str, text: str) -> str:
    label = {"code_o": "output", "code_i": "input", "code_f": "python"}[kind]
    return f"{T}```{label}\n{text}\n```{A}"


# --------------------------------------------------------------------------------------------- teachers

# (name, program, input): what makes a program a task, one probe each
PROGRAMS = [
    ("raises ValueError", "def f(x):\n    raise ValueError('no')", "1"),
    ("raises Exception", "def f(x):\n    raise Exception('no')", "1"),
    ("raises StopIteration", "def f(x):\n    raise StopIteration", "1"),
    ("custom exception", "class Boom(Exception):\n    pass\n\nclass Q:\n    pass\n\ndef f(x):\n    raise Boom()", "1"),
    ("sys.exit", "import sys\ndef f(x):\n    sys.exit(1)", "1"),
    ("assert fails", "def f(x):\n    assert x > 5\n    return x", "1"),
    ("nondeterministic counter", "calls = [0]\ndef f(x):\n    calls[0] += 1\n    return x + calls[0]", "1"),
    ("nondeterministic object", "def f(x):\n    return object()", "1"),
    ("generator output", "def f(n):\n    return (i for i in range(n))", "3"),
    ("nan output", "def f(x):\n    return float('nan')", "1"),
    ("timeout", "def f(x):\n    while True:\n        x += 1", "1"),
    ("recursion error", "def f(n):\n    return f(n + 1)", "1"),
    ("zero division", "def f(x):\n    return x / 0", "1"),
    ("name error", "def f(x):\n    return y", "1"),
    ("import random", "import random\ndef f(x):\n    return x", "1"),
    ("from random import", "from random import randint\ndef f(x):\n    return x", "1"),
    ("import datetime inside f", "def f(x):\n    import datetime\n    return x", "1"),
    ("time as a name", "def f(time):\n    return time * 2", "3"),
    ("import os.path", "import os.path\ndef f(x):\n    return x + 1", "1"),
    ("input( in a comment", "def f(x):\n    # never call input() here\n    return x", "1"),
    ("two functions", "def g(x):\n    return x\n\ndef f(x):\n    return g(x)", "1"),
    ("nested def", "def f(x):\n    def g(y):\n        return y\n    return g(x)", "1"),
    ("class with method", "class A:\n    def get(self):\n        return 1\n\ndef f(x):\n    return x", "1"),
    ("print inside f", "def f(x):\n    print(x)\n    return x + 1", "1"),
    ("main block", "def f(x):\n    return x + 1\n\nif __name__ == '__main__':\n    print(f(1))", "1"),
    ("collections Counter output", "from collections import Counter\ndef f(s):\n    return Counter(s)", "'aab'"),
    ("defaultdict output", "from collections import defaultdict\ndef f(s):\n    d = defaultdict(int)\n    d[s] += 1\n    return d", "'a'"),
    ("namedtuple output", "from collections import namedtuple\nP = namedtuple('P', 'x y')\ndef f(a):\n    return P(a, a)", "1"),
    ("range output", "def f(n):\n    return range(n)", "3"),
    ("fraction output", "from fractions import Fraction\ndef f(a, b):\n    return Fraction(a, b)", "1, 3"),
    ("numpy import", "import numpy as np\ndef f(xs):\n    return int(np.sum(xs))", "[1, 2]"),
    ("queue import", "import queue\ndef f(x):\n    q = queue.Queue()\n    q.put(x)\n    return q.get()", "5"),
    ("base64 import", "import base64\ndef f(s):\n    return base64.b64encode(s.encode()).decode()", "'hi'"),
    ("big stdout", "def f(n):\n    print('x' * n)\n    return n", "70000"),
    ("big value", "def f(n):\n    return 'x' * n", "2000000"),
    ("int over 4300 digits", "def f(n):\n    return 10 ** n", "5000"),
    ("long output cut at 400", "def f(n):\n    return list(range(n))", "200"),
    ("eval in the input", "def f(xs):\n    return sum(xs)", "eval('[1, 2]')"),
    ("input is f(5)", "def f(x):\n    return x + 1", "f(5)"),
    ("input x = 5, parameter n", "def f(n):\n    return n + 1", "x = 5"),
    ("input n = 5, parameter n", "def f(n):\n    return n + 1", "n = 5"),
    ("empty input, no parameter", "def f():\n    return 7", ""),
    ("input with a comment", "def f(x):\n    return x + 1", "5  # five"),
    ("multi-line input", "def f(xs):\n    return len(xs)", "[1,\n 2,\n 3]"),
    ("input( in the input", "def f(x):\n    return x", "'input(1)'"),
    ("mutates its argument", "def f(xs):\n    xs.append(0)\n    return xs", "[1]"),
    ("keyword arguments", "def f(a, b=1):\n    return a - b", "b=5, a=2"),
    ("unicode string", "def f(s):\n    return s[::-1]", "'héllo'"),
    ("nested containers", "def f(n):\n    return {i: (i, [i] * i, {i}) for i in range(n)}", "3"),
    ("bool output", "def f(x):\n    return x > 2", "3"),
]

# (name, completion): the layout of a proposal (program double, input 'ab' unless it says otherwise)
_P, _I = "def f(s):\n    return s * 2", "'ab'"
LAYOUTS = [
    ("standard", proposal(_P, _I)),
    ("no </think>", f"plan\n<answer>\n```python\n{_P}\n```\n```input\n{_I}\n```{A}"),
    ("no <answer>", f"plan</think>\n```python\n{_P}\n```\n```input\n{_I}\n```"),
    ("input block first", f"{T}```input\n{_I}\n```\n```python\n{_P}\n```{A}"),
    ("py label", f"{T}```py\n{_P}\n```\n```input\n{_I}\n```{A}"),
    ("python3 label", f"{T}```python3\n{_P}\n```\n```input\n{_I}\n```{A}"),
    ("Python label", f"{T}```Python\n{_P}\n```\n```input\n{_I}\n```{A}"),
    ("no label", f"{T}```\n{_P}\n```\n```input\n{_I}\n```{A}"),
    ("INPUT label", f"{T}```python\n{_P}\n```\n```INPUT\n{_I}\n```{A}"),
    ("# Input: line", f"{T}```python\n{_P}\n```\n# Input: {_I}{A}"),
    ("unclosed input block", f"{T}```python\n{_P}\n```\n```input\n{_I}{A}"),
    ("no fence on the code", f"{T}{_P}\n```input\n{_I}\n```{A}"),
    ("prose inside the python block", f"{T}```python\n{_P}\nThis doubles s.\n```\n```input\n{_I}\n```{A}"),
    ("prose after the blocks", proposal(_P, _I)[:-len(A)] + "\nThat is my task." + A),
    ("renamed function", proposal("def twice(s):\n    return s * 2", _I)),
    ("renamed recursive", proposal("def fact(n):\n    return 1 if n < 2 else n * fact(n - 1)", "5")),
    ("two python blocks", f"{T}```python\n{_P}\n```\n```python\ndef f(s):\n    return s * 3\n```\n```input\n{_I}\n```{A}"),
    ("two input blocks", f"{T}```python\n{_P}\n```\n```input\n'x'\n```\n```input\n{_I}\n```{A}"),
    ("<answer> in the reasoning", f"I put it in <answer> later.</think>\n<answer>\n```python\n{_P}\n```\n```input\n{_I}\n```{A}"),
    ("draft answer then final", f"plan</think>\n<answer>nothing</answer>\n<answer>\n```python\n{_P}\n```\n```input\n{_I}\n```{A}"),
    ("Assistant: in the reasoning", f"The Assistant: thinks</think>\n<answer>\n```python\n{_P}\n```\n```input\n{_I}\n```{A}"),
    ("text after </answer>", proposal(_P, _I) + "\nUser: thanks"),
    ("empty input block", f"{T}```python\n{_P}\n```\n```input\n\n```{A}"),
    ("inline blocks", f"{T}```python def f(s): return s * 2```\n```input 'ab'```{A}"),
    ("empty answer", f"{T}{A}"),
]


def teacher_cases() -> list[Case]:
    cases = []
    for kind in ("code_o", "code_i"):
        for name, spec in TASKS.items():
            cases.append(Case(f"{kind} task {name}", "teacher", kind, proposal(spec.program, spec.input)))
        for name, text in LAYOUTS:
            cases.append(Case(f"{kind} layout: {name}", "teacher", kind, text))
    for name, program, inp in PROGRAMS:
        cases.append(Case(f"code_o program: {name}", "teacher", "code_o", proposal(program, inp)))
    return cases


def code_f_teacher_cases() -> list[Case]:
    d = TASKS["double"].f_inputs
    layouts = [
        ("standard", f_proposal(d)),
        ("nine inputs", f_proposal(d[:9])),
        ("twelve inputs, last ten", f_proposal(["[1]", "[2]"] + d)),
        ("<message> tags", f_proposal(d, "<message>doubles</message>")),
        ("# Message: line", f_proposal(d, "# Message: doubles")),
        ("empty message block", f_proposal(d, "```message\n```")),
        ("no message", f_proposal(d, "")),
        ("INPUT labels", f_proposal(d).replace("```input", "```INPUT")),
        ("# Input: lines", T + "\n".join(f"# Input: {x}" for x in d) + "\n```message\nm\n```" + A),
        ("duplicate inputs", f_proposal(["'a'"] * 10)),
        ("an input failing", f_proposal(d[:9] + ["5"])),
        ("input f(...)", f_proposal(d[:9] + ["f('a')"])),
        ("no </think>", f_proposal(d).replace("</think>", "")),
    ]
    cases = [Case(f"code_f layout: {n}", "teacher", "code_f", text, task="double") for n, text in layouts]
    for name in ("sum", "half", "even", "mathimp", "counter"):
        cases.append(Case(f"code_f inputs for {name}", "teacher", "code_f", f_proposal(TASKS[name].f_inputs), task=name))
    cases.append(Case("code_f an input raising Exception", "teacher", "code_f",
                      f_proposal(["[1]"] * 9 + ["None"]), task="raiser"))
    cases.append(Case("code_f every output the same", "teacher", "code_f", f_proposal(_LIST10), task="const"))
    return cases


# source programs of code_f teachers that are not student tasks
EXTRA_SOURCES = {"raiser": Spec("def f(xs):\n    if xs is None:\n        raise Exception('none')\n    return len(xs)", "[1]",
                                "", "", "", ""),
                 "const": Spec("def f(xs):\n    return 7", "[1]", "", "", "", "")}

# --------------------------------------------------------------------------------------------- students


def _layouts(kind: str, right: str) -> list[tuple[str, str]]:
    label = {"code_o": "output", "code_i": "input", "code_f": "python"}[kind]
    return [
        ("bare", f"{T}{right}{A}"),
        ("no </think>", f"plan\n<answer>\n```{label}\n{right}\n```{A}"),
        ("no <answer>", f"plan</think>\n```{label}\n{right}\n```"),
        ("<answer> in the reasoning", f"the <answer> comes last</think>\n<answer>\n```{label}\n{right}\n```{A}"),
        ("two blocks, last right", f"{T}```{label}\nNone\n```\nno:\n```{label}\n{right}\n```{A}"),
        ("uppercase label", f"{T}```{label.upper()}\n{right}\n```{A}"),
        ("Assistant: in the reasoning", f"Assistant: hmm</think>\n<answer>\n```{label}\n{right}\n```{A}"),
        ("empty answer", f"{T}{A}"),
    ]


def student_cases() -> list[Case]:
    cases = []
    for name, s in TASKS.items():
        cases += [Case(f"code_o {name}: right", "student", "code_o", answer("code_o", s.out), task=name),
                  Case(f"code_o {name}: equal expression", "student", "code_o", answer("code_o", s.alt), task=name),
                  Case(f"code_o {name}: wrong", "student", "code_o", answer("code_o", s.bad), task=name),
                  Case(f"code_i {name}: right", "student", "code_i", answer("code_i", s.input), task=name),
                  Case(f"code_i {name}: wrong", "student", "code_i", answer("code_i", s.bad_in), task=name)]
        if s.alt_in:
            cases.append(Case(f"code_i {name}: another input", "student", "code_i", answer("code_i", s.alt_in), task=name))
    for name in ("double", "sum", "swap"):
        s = TASKS[name]
        cases += [Case(f"code_o {name}: {n}", "student", "code_o", text, task=name) for n, text in _layouts("code_o", s.out)]
        cases += [Case(f"code_i {name}: {n}", "student", "code_i", text, task=name) for n, text in _layouts("code_i", s.input)]
        cases += [
            Case(f"code_o {name}: trailing comment", "student", "code_o", answer("code_o", s.out + "  # my answer"), task=name),
            Case(f"code_o {name}: f(input)", "student", "code_o", answer("code_o", f"f({s.input})"), task=name),
            Case(f"code_o {name}: syntax error", "student", "code_o", answer("code_o", "("), task=name),
            Case(f"code_o {name}: 'The output is'", "student", "code_o", f"{T}The output is {s.out}.{A}", task=name),
            Case(f"code_o {name}: <output> tags", "student", "code_o", f"{T}<output>{s.out}</output>{A}", task=name),
            Case(f"code_o {name}: # Output: line", "student", "code_o", f"{T}# Output: {s.out}{A}", task=name),
            Case(f"code_o {name}: python block", "student", "code_o", f"{T}```python\n{s.out}\n```{A}", task=name),
            Case(f"code_o {name}: eval(gold_output)", "student", "code_o", answer("code_o", "eval(gold_output)"), task=name),
            Case(f"code_o {name}: __import__", "student", "code_o", answer("code_o", "__import__('os').getcwd()"), task=name),
            Case(f"code_i {name}: f(input)", "student", "code_i", answer("code_i", f"f({s.input})"), task=name),
            Case(f"code_i {name}: syntax error", "student", "code_i", answer("code_i", "("), task=name),
            Case(f"code_i {name}: 'The input is'", "student", "code_i", f"{T}The input is {s.input}.{A}", task=name),
            Case(f"code_i {name}: <input> tags", "student", "code_i", f"{T}<input>{s.input}</input>{A}", task=name),
            Case(f"code_i {name}: # Input: line", "student", "code_i", f"{T}# Input: {s.input}{A}", task=name),
            Case(f"code_i {name}: python block", "student", "code_i", f"{T}```python\n{s.input}\n```{A}", task=name),
            Case(f"code_i {name}: print switches to stdout", "student", "code_i",
                 answer("code_i", f"[print(1), {s.bad_in}][1]"), task=name),
            Case(f"code_i {name}: multi-line", "student", "code_i", answer("code_i", f"(\n{s.input}\n)"), task=name),
            Case(f"code_i {name}: trailing comment", "student", "code_i", answer("code_i", s.input + "  # mine"), task=name),
        ]
    cases.append(Case("code_o double: endless", "student", "code_o", answer("code_o", "[x for x in iter(int, 1)]"), task="double"))
    cases.append(Case("code_i sum: range(4)", "student", "code_i", answer("code_i", "range(4)"), task="sum"))
    cases.append(Case("code_i double: keyword s=", "student", "code_i", answer("code_i", "s = 'ab'"), task="double"))
    cases.append(Case("code_i double: keyword x=", "student", "code_i", answer("code_i", "x = 'ab'"), task="double"))
    cases.append(Case("code_o sum: multi-line", "student", "code_o", answer("code_o", "(\n  6\n)"), task="sum"))
    return cases + code_f_student_cases()


def code_f_student_cases() -> list[Case]:
    cases = []
    for name in ("double", "sum", "half", "even", "mathimp", "counter"):
        s = TASKS[name]
        cases += [Case(f"code_f {name}: right", "student", "code_f", answer("code_f", s.f_right), task=name),
                  Case(f"code_f {name}: wrong", "student", "code_f", answer("code_f", s.f_wrong), task=name)]
    r = TASKS["sum"].f_right
    variants = [
        ("bare code", f"{T}{r}{A}"),
        ("syntax error", answer("code_f", "def f(xs):\n    return (")),
        ("defines g", answer("code_f", "def g(xs):\n    return sum(xs)")),
        ("py label", f"{T}```py\n{r}\n```{A}"),
        ("python3 label", f"{T}```python3\n{r}\n```{A}"),
        ("no label", f"{T}```\n{r}\n```{A}"),
        ("import random", answer("code_f", "import random\n" + r)),
        ("two blocks, last right", f"{T}```python\ndef f(xs):\n    return 0\n```\nbetter:\n```python\n{r}\n```{A}"),
        ("helpers and a class", answer("code_f", "class Acc:\n    def __init__(self):\n        self.t = 0\n\n"
                                                  "def add(a, x):\n    a.t += x\n\ndef f(xs):\n    a = Acc()\n"
                                                  "    for x in xs:\n        add(a, x)\n    return a.t")),
        ("endless", answer("code_f", "def f(xs):\n    while True:\n        pass")),
        ("raises Exception on some inputs", answer("code_f", "def f(xs):\n    if len(xs) > 1:\n        raise Exception('x')\n    return sum(xs)")),
        ("input( in a comment", answer("code_f", "# no input() needed\n" + r)),
        ("numpy", answer("code_f", "import numpy as np\ndef f(xs):\n    return int(np.sum(xs)) if xs else 0")),
        ("prints", answer("code_f", "def f(xs):\n    print(xs)\n    return sum(xs)")),
        ("no </think>", f"plan\n<answer>\n```python\n{r}\n```{A}"),
        ("<answer> in the reasoning", f"the <answer> comes</think>\n<answer>\n```python\n{r}\n```{A}"),
        ("empty answer", f"{T}{A}"),
        ("empty block", f"{T}```python\n```{A}"),
    ]
    cases += [Case(f"code_f sum: {n}", "student", "code_f", text, task="sum") for n, text in variants]
    return cases


# --------------------------------------------------------------------------------------------- estimates


def estimate_cases() -> list[Case]:
    broken = lambda body: f"plan\n<answer>\n{body}\n</answer>"  # noqa: E731 -- no </think>: a format error
    o_right, o_wrong = answer("code_o", "'abab'"), answer("code_o", "'ab'")
    i_right, i_wrong = answer("code_i", "'ab'"), answer("code_i", "'a'")
    f_right, f_wrong = answer("code_f", TASKS["double"].f_right), answer("code_f", TASKS["double"].f_wrong)
    sets = [
        ("code_o", "all right", [o_right] * 8),
        ("code_o", "none right", [o_wrong] * 8),
        ("code_o", "three of eight", [o_right] * 3 + [o_wrong] * 5),
        ("code_o", "right with a broken layout", [broken("```output\n'abab'\n```")] * 2 + [o_wrong] * 6),
        ("code_o", "no answers at all", ["I give up"] * 4 + [o_right] * 4),
        ("code_o", "eval(gold_output)", [answer("code_o", "eval(gold_output)")] * 2 + [o_wrong] * 6),
        ("code_i", "half right", [i_right] * 4 + [i_wrong] * 4),
        ("code_i", "right with a broken layout", [broken("```input\n'ab'\n```")] * 3 + [i_wrong] * 5),
        ("code_i", "stdout answers left out", [answer("code_i", "[print('x'), 1][1]")] * 4 + [i_right] * 2 + [i_wrong] * 2),
        ("code_f", "one right", [f_right] + [f_wrong] * 7),
        ("code_f", "right with a broken layout", [broken(f"```python\n{TASKS['double'].f_right}\n```")] * 2 + [f_wrong] * 6),
        ("code_f", "unparsed answers", ["no code"] * 6 + [f_right] * 2),
        ("code_f", "all right", [f_right] * 8),
    ]
    return [Case(f"{kind} estimate: {name}", "estimate", kind, responses=rs, task="double") for kind, name, rs in sets]


def corpus() -> list[Case]:
    return teacher_cases() + code_f_teacher_cases() + student_cases() + estimate_cases()
