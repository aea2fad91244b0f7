"""Canonical value serialisation, and the one literal grammar that reads it back (here and in the student parser).

Values computed by model-written code are canonicalised *inside* the sandbox, where a hostile object can do no
harm; the parent only ever compares canonical strings, so ``__eq__`` tricks, ``int``/``str`` subclasses and
NaN cannot fool a check. Student answers are parsed in the parent by :func:`parse_literal` (a safe AST walk,
no code runs) and canonicalised by the same function; the student-side answer parser
(``populora.training.tasks.parsing.literal``) calls it too, so an answer is well-formed exactly when the
verifier can read it, and every canonical text (the form a student is shown) is a well-formed answer.

Rules (also in docs/sandbox.md):
- only exact builtin types: ``None, bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset``;
  subclasses and anything else raise ``TypeError`` (the program "returned an unsupported type").
- types are strict: ``1``, ``1.0`` and ``True`` are three different values; so are ``0.0`` and ``-0.0``,
  ``[1]`` and ``(1,)``, ``{1}`` and ``frozenset({1})``.
- every NaN is the same value, written ``float('nan')``; infinities are ``float('inf')`` / ``float('-inf')``;
  a complex is ``complex(re, im)`` with both parts written as floats (``1+2j`` and ``2j`` are read too).
- dicts and sets are order-insensitive: items are sorted by their canonical text.
- ints beyond ~4200 digits are written in hex, which Python parses without its int-to-str digit limit.

The canonical text is valid Python that :func:`parse_literal` (and ``eval``) maps back to an equal value, so it
doubles as the output shown to a student.

>>> canonical({"b": [1, 2.0], "a": (True, None)})
"{'a': (True, None), 'b': [1, 2.0]}"
>>> canonical(parse_literal("{3, 1, float('nan')}"))
"{1, 3, float('nan')}"
>>> canonical(1) == canonical(1.0)
False
"""

from __future__ import annotations

import ast
import math

MAX_LITERAL_CHARS = 1_000_000
_BIG_INT_BITS = 14_000  # below Python's 4300-digit int<->str limit


def _float(x: float) -> str:
    if math.isnan(x):
        return "float('nan')"
    if math.isinf(x):
        return "float('inf')" if x > 0 else "float('-inf')"
    return float.__repr__(x)


def _int(x: int) -> str:
    if x.bit_length() > _BIG_INT_BITS:
        return ("-" if x < 0 else "") + int.__format__(abs(x), "#x")
    return int.__repr__(x)


def _items(xs) -> list[str]:
    return sorted(canonical(x) for x in xs)


def canonical(v) -> str:
    """Canonical text of a builtin value; ``TypeError`` for anything else. Recursion depth bounds nesting."""
    t = type(v)  # exact types only: a subclass could override __repr__, __iter__ or __eq__
    if v is None or t is bool:
        return repr(v)
    if t is int:
        return _int(v)
    if t is float:
        return _float(v)
    if t is complex:
        return f"complex({_float(v.real)}, {_float(v.imag)})"
    if t is str:
        return str.__repr__(v)
    if t is bytes:
        return bytes.__repr__(v)
    if t is list:
        return "[" + ", ".join(canonical(x) for x in list.__iter__(v)) + "]"
    if t is tuple:
        parts = [canonical(x) for x in tuple.__iter__(v)]
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    if t is dict:
        pairs = sorted(f"{canonical(k)}: {canonical(x)}" for k, x in dict.items(v))
        return "{" + ", ".join(pairs) + "}"
    if t is set:
        return "{" + ", ".join(_items(set.__iter__(v))) + "}" if v else "set()"
    if t is frozenset:
        return "frozenset({" + ", ".join(_items(frozenset.__iter__(v))) + "})" if v else "frozenset()"
    raise TypeError(f"unsupported type {t.__name__!r}: only None, bool, int, float, complex, str, bytes, list, "
                    "tuple, dict, set and frozenset values can be compared")


# ------------------------------------------------------------------------------------ parsing answers

_CALLS = {"float": float, "complex": complex, "set": set, "frozenset": frozenset, "tuple": tuple, "list": list,
          "dict": dict}
_NUMBERS = (int, float, complex)


def _call(node: ast.Call):
    name = node.func.id if isinstance(node.func, ast.Name) else None
    if name not in _CALLS or node.keywords or len(node.args) > (2 if name == "complex" else 1):
        raise ValueError(f"not a literal: call to {ast.unparse(node.func)}")
    if name == "complex":  # complex(re, im) from two real numbers, as canonical text writes it
        parts = [_node(a) for a in node.args]
        if any(type(p) not in (int, float) for p in parts):
            raise ValueError("complex(...) takes real numbers")
        return complex(*parts)
    if name == "float":
        arg = node.args[0] if node.args else None
        if not (isinstance(arg, ast.Constant) and type(arg.value) is str):
            raise ValueError("float(...) takes a string such as 'nan' or 'inf'")
        return float(arg.value)
    return _CALLS[name](*(_node(a) for a in node.args))


def _number(node: ast.UnaryOp):
    value = _node(node.operand)
    if type(value) not in _NUMBERS:
        raise ValueError("unary +/- applies to numbers only")
    return -value if isinstance(node.op, ast.USub) else +value


def _complex(node: ast.BinOp) -> complex:
    """``1+2j`` / ``-1-2j``: a real number plus or minus an imaginary one, as Python writes complex literals."""
    left, right = _node(node.left), _node(node.right)
    if type(left) not in (int, float) or type(right) is not complex or right.real:
        raise ValueError("not a literal: only a real +/- an imaginary number may be added")
    return left + right if isinstance(node.op, ast.Add) else left - right


def _node(node: ast.AST):
    if isinstance(node, ast.Constant) and type(node.value) in (*_NUMBERS, str, bytes, bool, type(None)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _number(node)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        return _complex(node)
    if isinstance(node, ast.List):
        return [_node(x) for x in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_node(x) for x in node.elts)
    if isinstance(node, ast.Set):
        return {_node(x) for x in node.elts}
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {_node(k): _node(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Call):
        return _call(node)
    raise ValueError(f"not a literal: {type(node).__name__}")


def parse_literal(text: str):
    """Parse a literal answer without running any code. Accepts Python literals plus the forms canonical text
    uses (``float('nan')``, ``complex(1.0, 2.0)``, ``set()``, ``frozenset({...})``); raises ``ValueError`` on
    anything else.

    >>> parse_literal("[1, -2.5, 'x', (None,)]")
    [1, -2.5, 'x', (None,)]
    >>> parse_literal("__import__('os')")
    Traceback (most recent call last):
    ...
    ValueError: not a literal: call to __import__
    """
    if len(text) > MAX_LITERAL_CHARS:
        raise ValueError(f"literal longer than {MAX_LITERAL_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
        return _node(tree.body)
    except (SyntaxError, RecursionError, MemoryError, TypeError, OverflowError) as e:
        raise ValueError(f"not a literal: {type(e).__name__}: {e}") from None


def canonical_literal(text: str) -> str:
    """Canonical text of a literal answer; ``ValueError`` if it is not one (or holds an unhashable set item)."""
    try:
        return canonical(parse_literal(text))
    except (TypeError, RecursionError) as e:
        raise ValueError(str(e)) from None
