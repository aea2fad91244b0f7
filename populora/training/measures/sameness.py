"""When are two tasks the same? At three grains, finest last:

- **exact structure**: the same AST once names and constants are abstracted (``curriculum.structure_key``);
- **near-duplicate**: token shingles (runs of ``SHINGLE`` tokens of the abstracted token stream) whose Jaccard
  similarity is at least ``NEAR_THRESHOLD``: programs that differ by a statement or an operator;
- **semantic duplicate**: an earlier program gave the same output on every one of this task's inputs (its
  behaviour as observed on the inputs the tasks were run on; no extra sandbox run);

and, for the degenerate-teaching monitor, **the same task re-proposed**: the same program text (up to
formatting) with the same inputs.

``SamenessIndex`` keeps what the run has seen (near-duplicates: the last ``memory`` programs, found through
MinHash LSH (``datasketch``) and then checked with the exact Jaccard, so a reported pair is always truly above
the threshold) and tells, for each new program, which grains it repeats. It is checkpointed as plain data.
"""

from __future__ import annotations

import ast
import hashlib
import io
import keyword
import tokenize
from collections import deque
from collections.abc import Iterable

from datasketch import MinHash, MinHashLSH

SHINGLE = 3                # tokens per shingle
NEAR_THRESHOLD = 0.7       # Jaccard of shingle sets at or above which two programs are near-duplicates
MEMORY = 2000              # programs the near-duplicate index remembers (the most recent)
NUM_PERM = 64              # MinHash permutations (LSH candidates only: every pair is checked exactly)
_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER,
         tokenize.ENCODING}


def tokens(program: str) -> list[str]:
    """The program's token stream with identifiers as ``ID`` and literals as ``NUM``/``STR`` (keywords, operators
    and builtins' names kept as they are); comments and layout dropped.

    >>> tokens("def f(a):\\n    return a + 1  # one")
    ['def', 'ID', '(', 'ID', ')', ':', 'return', 'ID', '+', 'NUM']
    """
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(program).readline):
            if tok.type in _SKIP:
                continue
            if tok.type == tokenize.NAME:
                out.append(tok.string if keyword.iskeyword(tok.string) or tok.string in _BUILTINS else "ID")
            elif tok.type == tokenize.NUMBER:
                out.append("NUM")
            elif tok.type == tokenize.STRING:
                out.append("STR")
            else:
                out.append(tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # an unparseable tail: the tokens before it
    return out


_BUILTINS = frozenset("abs all any bool dict enumerate filter float int len list map max min range reversed set "
                      "sorted str sum tuple zip".split())  # kept by name: calling sorted is not calling len


def shingles(program: str, k: int = SHINGLE) -> frozenset[str]:
    """The set of k-token runs of ``tokens(program)`` (the whole stream if it is shorter than k).

    >>> sorted(shingles("x = 1", 2))
    ['= NUM', 'ID =']
    """
    toks = tokens(program)
    if len(toks) <= k:
        return frozenset([" ".join(toks)]) if toks else frozenset()
    return frozenset(" ".join(toks[i:i + k]) for i in range(len(toks) - k + 1))


def jaccard(a: frozenset, b: frozenset) -> float:
    """|a & b| / |a | b| (1.0 for two empty sets).

    >>> jaccard(frozenset("abc"), frozenset("bcd"))
    0.5
    """
    return len(a & b) / len(a | b) if a or b else 1.0


def near_duplicates(a: str, b: str, threshold: float = NEAR_THRESHOLD) -> bool:
    """Whether two programs' shingle sets are at least ``threshold`` alike."""
    return jaccard(shingles(a), shingles(b)) >= threshold


def behaviour(inputs: Iterable[str], outputs: Iterable[str]) -> frozenset[tuple[str, str]]:
    """What a program was seen to do: its (input, output) pairs, as the sandbox wrote them."""
    return frozenset(zip(inputs, outputs))


def task_behaviour(task) -> frozenset[tuple[str, str]]:
    """A valid task's observed behaviour: code_f's inputs and outputs, code_o/code_i's one input and output."""
    if task.inputs:
        return behaviour(task.inputs, task.outputs)
    return behaviour([task.input], [task.output]) if task.input or task.output else frozenset()


def task_key(program: str, inputs: Iterable[str]) -> str:
    """The same task, up to formatting and comments: the program's exact AST (names and constants kept) and its
    inputs. Equal keys: the task was proposed again.

    >>> task_key("def f(a): return a", ["1"]) == task_key("def f(a):\\n    return a  # same", ["1"])
    True
    """
    try:
        text = ast.dump(ast.parse(program))
    except SyntaxError:
        text = program.strip()
    return hashlib.sha1("\x00".join([text, *inputs]).encode()).hexdigest()[:16]


_FIRST = MinHash(num_perm=NUM_PERM, seed=1)
_PERMUTATIONS, _SCHEME = _FIRST.permutations, _FIRST.scheme  # drawn once (a third of a MinHash's cost)


def _minhash(shingle_set: frozenset[str]) -> MinHash:
    mh = MinHash(num_perm=NUM_PERM, seed=1, permutations=_PERMUTATIONS, scheme=_SCHEME)
    mh.update_batch([s.encode() for s in shingle_set])
    return mh


class SamenessIndex:
    """What the run has seen, and for each new program which grains repeat an earlier one.

    >>> idx = SamenessIndex()
    >>> idx.add("def f(a):\\n    return a * 2", {("1", "2"), ("3", "6")}, ["1", "3"])["semantic"]
    False
    >>> idx.add("def f(b):\\n    return b + b", {("1", "2"), ("3", "6")}, ["1", "3"])["semantic"]
    True
    """

    def __init__(self, memory: int = MEMORY, threshold: float = NEAR_THRESHOLD):
        self.memory, self.threshold = memory, threshold
        self.recent: deque[tuple[int, str]] = deque()   # (id, program) of the remembered programs, oldest first
        self.shingles: dict[int, frozenset[str]] = {}
        self.lsh = MinHashLSH(threshold=threshold * 0.75, num_perm=NUM_PERM)  # a low LSH bar: fewer misses
        self.behaviours: dict[tuple[str, str], set[int]] = {}  # (input, output) -> programs seen doing it
        self.task_keys: set[str] = set()
        self.next_id = 0

    def near(self, program_shingles: frozenset[str]) -> bool:
        """Whether a remembered program is a near-duplicate (exact Jaccard of LSH candidates)."""
        if not self.shingles:
            return False
        candidates = self.lsh.query(_minhash(program_shingles))
        return any(jaccard(program_shingles, self.shingles[c]) >= self.threshold for c in candidates)

    def semantic(self, pairs: frozenset[tuple[str, str]]) -> bool:
        """Whether one earlier program was seen giving all of these (input, output) pairs."""
        if not pairs:
            return False
        holders = None
        for pair in pairs:
            seen = self.behaviours.get(pair, set())
            holders = set(seen) if holders is None else holders & seen
            if not holders:
                return False
        return bool(holders)

    def add(self, program: str, pairs: Iterable[tuple[str, str]], inputs: Iterable[str]) -> dict[str, bool]:
        """Judge a program against what came before (near, semantic, re-proposed), then remember it."""
        pairs, inputs = frozenset(pairs), list(inputs)
        sh = shingles(program)
        key = task_key(program, inputs)
        verdict = {"near": self.near(sh), "semantic": self.semantic(pairs), "reproposed": key in self.task_keys}
        pid, self.next_id = self.next_id, self.next_id + 1
        self.recent.append((pid, program))
        self.shingles[pid] = sh
        self.lsh.insert(pid, _minhash(sh))
        for pair in pairs:
            self.behaviours.setdefault(pair, set()).add(pid)
        self.task_keys.add(key)
        while len(self.recent) > self.memory:  # forget the oldest program's shingles (behaviours stay: small)
            old, _ = self.recent.popleft()
            self.lsh.remove(old)
            del self.shingles[old]
        return verdict

    def reproposed(self, program: str, inputs: Iterable[str]) -> bool:
        """Whether this task (program and inputs) was proposed before; remembers it (code_f: the program is a
        buffered one, only the task counts)."""
        key = task_key(program, list(inputs))
        seen = key in self.task_keys
        self.task_keys.add(key)
        return seen

    # ------------------------------------------------------------------ checkpoint
    def to_dict(self) -> dict:
        behaviours = {}
        for (x, y), ids in self.behaviours.items():
            behaviours.setdefault(x, []).append([y, sorted(ids)])
        return {"recent": list(self.recent), "behaviours": behaviours, "task_keys": sorted(self.task_keys),
                "next_id": self.next_id}

    @classmethod
    def from_dict(cls, data: dict | None, memory: int = MEMORY, threshold: float = NEAR_THRESHOLD) -> "SamenessIndex":
        idx = cls(memory, threshold)
        if not data:
            return idx
        for pid, program in data["recent"]:
            idx.recent.append((pid, program))
            idx.shingles[pid] = shingles(program)
            idx.lsh.insert(pid, _minhash(idx.shingles[pid]))
        idx.behaviours = {(x, y): set(ids) for x, rows in data["behaviours"].items() for y, ids in rows}
        idx.task_keys, idx.next_id = set(data["task_keys"]), data["next_id"]
        return idx
