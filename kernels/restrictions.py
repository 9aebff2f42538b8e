"""Safe boolean restriction expressions over design-space parameters.

A restriction such as ``"UNROLL * VEC <= 64"`` is parsed with :mod:`ast` and checked
against a whitelist; evaluation walks the tree itself (no ``eval``/``exec``/``compile``).

Allowed: int/float/bool literals, parameter names, ``+ - * / // % **``, unary ``- + not``,
``and``/``or``, comparisons (chained too), parentheses, and calls to ``min``, ``max``, ``abs``
with positional arguments. A restriction as a whole must be a condition: a comparison, a
parameter name (a flag, true when not 0), ``not``/``and``/``or`` of conditions, or
``True``/``False``.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field

MAX_LENGTH = 500
# Exponents beyond this could make ``2 ** 10 ** 10`` hang the web process.
MAX_EXPONENT = 64

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMPOPS = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_FUNCS = {"min": min, "max": max, "abs": abs}


def _is_condition(node: ast.AST) -> bool:
    """A comparison, a parameter name (a 0/1 flag: true when not 0), ``not``/``and``/``or``
    of conditions, or True/False: what a restriction must be (``"A + B"`` would be taken by
    its truthiness, surely not what was meant: ``"A + B != 0"`` says it)."""
    match node:
        case ast.Compare() | ast.Name():
            return True
        case ast.Constant(value=value):
            return isinstance(value, bool)
        case ast.UnaryOp(op=ast.Not(), operand=operand):
            return _is_condition(operand)
        case ast.BoolOp(values=values):
            return all(_is_condition(v) for v in values)
    return False


class RestrictionError(ValueError):
    """A restriction string is not a safe expression over known parameters."""


class _EvalError(Exception):
    """Arithmetic failure while evaluating (division by zero, huge power): point invalid."""


def _describe(node: ast.AST) -> str:
    """A short human name for a disallowed node."""
    match node:
        case ast.Attribute(attr=attr):
            return f"attribute access '.{attr}' is not allowed"
        case ast.Subscript():
            return "subscripts ('a[i]') are not allowed"
        case ast.Lambda():
            return "lambda is not allowed"
        case ast.Constant(value=value):
            return f"literal {value!r} is not allowed (only numbers)"
        case ast.BinOp(op=op):
            return f"operator {type(op).__name__} is not allowed"
        case ast.Compare(ops=ops):
            bad = [type(o).__name__ for o in ops if type(o) not in _CMPOPS]
            return f"comparison {', '.join(bad)} is not allowed"
        case ast.UnaryOp(op=op):
            return f"unary operator {type(op).__name__} is not allowed"
    return f"{type(node).__name__} expressions are not allowed"


@dataclass(frozen=True)
class Restriction:
    """One parsed, whitelisted restriction.

    Args:
        text: the expression as the engineer wrote it.
        names: parameter names it may refer to.

    Raises:
        RestrictionError: syntax error, disallowed construct or unknown parameter; the
            message starts with ``restriction '<text>':`` and names the offending part.
    """

    text: str
    names: frozenset[str]
    _tree: ast.expr = field(init=False, repr=False, compare=False)
    kind = "restriction"  # how messages name it (class attribute, not a field)
    condition = True  # the whole expression must be a condition (class attribute)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise RestrictionError(f"{self.kind} {self.text!r}: must be a string")
        if len(self.text) > MAX_LENGTH:
            raise RestrictionError(
                f"{self.kind} '{self.text[:40]}...': longer than {MAX_LENGTH} characters"
            )
        try:
            tree = ast.parse(self.text.strip(), mode="eval").body
        except SyntaxError as exc:
            raise RestrictionError(f"{self.kind} '{self.text}': syntax error: {exc.msg}") from None
        except (RecursionError, MemoryError):
            raise RestrictionError(f"{self.kind} '{self.text}': nested too deeply") from None
        self._check_names(tree)
        self._check(tree)
        if self.condition and not _is_condition(tree):
            raise self._fail("is not a condition: write a comparison, a flag parameter, or a boolean "
                             "combination of them, e.g. 'UNROLL * VEC <= 64', 'N % TILE == 0' or "
                             "'not USE_SMEM or BLOCK >= 64'")
        object.__setattr__(self, "_tree", tree)

    def _fail(self, why: str) -> RestrictionError:
        return RestrictionError(f"{self.kind} '{self.text}': {why}")

    def _check_names(self, tree: ast.AST) -> None:
        """Raise one error naming every unknown function and parameter, in order of appearance."""
        calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        funcs: list[str] = []
        params: list[str] = []
        named = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Name)), key=lambda n: (n.lineno, n.col_offset))
        for n in named:
            if id(n) in calls:
                if n.id not in _FUNCS and n.id not in funcs:
                    funcs.append(n.id)
            elif n.id not in self.names and n.id not in params:
                params.append(n.id)
        why = []
        if funcs:
            quoted = ", ".join(f"'{f}'" for f in funcs)
            why.append(f"call{'s' if len(funcs) > 1 else ''} to {quoted} {'are' if len(funcs) > 1 else 'is'} "
                       f"not allowed (only {', '.join(_FUNCS)})")
        if params:
            quoted = ", ".join(f"'{p}'" for p in params)
            known = ", ".join(sorted(self.names)) or "none"
            why.append(f"unknown parameter{'s' if len(params) > 1 else ''} {quoted} (known: {known})")
        if why:
            raise self._fail("; ".join(why))

    def failure(self, params: Mapping[str, int | float]) -> str | None:
        """Why the expression cannot be evaluated at ``params`` (e.g. ``exponent 100 is over
        the cap of 64``), or None when it evaluates (to true or false)."""
        try:
            self._eval(self._tree, params)
        except _EvalError as exc:
            return str(exc)
        except KeyError as exc:
            return f"no value for '{exc.args[0]}'"
        except (ArithmeticError, ValueError, TypeError) as exc:
            return str(exc) or type(exc).__name__
        return None

    def _check(self, node: ast.AST) -> None:
        match node:
            case ast.Constant(value=value) if isinstance(value, (int, float)):
                return
            case ast.Name(id=name):
                if name not in self.names:
                    known = ", ".join(sorted(self.names)) or "none"
                    raise self._fail(f"unknown parameter '{name}' (known: {known})")
            case ast.BinOp(left=left, op=op, right=right) if type(op) in _BINOPS:
                self._check(left)
                self._check(right)
            case ast.UnaryOp(op=ast.USub() | ast.UAdd() | ast.Not(), operand=operand):
                self._check(operand)
            case ast.BoolOp(values=values):
                for v in values:
                    self._check(v)
            case ast.Compare(left=left, ops=ops, comparators=comps) if all(
                type(o) in _CMPOPS for o in ops
            ):
                self._check(left)
                for c in comps:
                    self._check(c)
            case ast.Call(func=ast.Name(id=fname), args=args, keywords=kws):
                if fname not in _FUNCS:
                    raise self._fail(f"call to '{fname}' is not allowed (only min, max, abs)")
                if kws or not args or any(isinstance(a, ast.Starred) for a in args):
                    raise self._fail(f"'{fname}' takes plain positional arguments only")
                for a in args:
                    self._check(a)
            case ast.Call(func=ast.Attribute(attr=attr)):
                raise self._fail(f"call to method '.{attr}' is not allowed")
            case ast.Call():
                raise self._fail("calls are only allowed to min, max, abs")
            case _:
                raise self._fail(_describe(node))

    def __call__(self, params: Mapping[str, int | float]) -> bool:
        """Evaluate at one point; arithmetic errors (e.g. division by zero) give False."""
        try:
            return bool(self._eval(self._tree, params))
        except (_EvalError, ArithmeticError, ValueError, TypeError, KeyError):
            return False

    def _eval(self, node: ast.AST, p: Mapping[str, int | float]):
        match node:
            case ast.Constant(value=value):
                return value
            case ast.Name(id=name):
                return p[name]
            case ast.BinOp(left=left, op=op, right=right):
                a, b = self._eval(left, p), self._eval(right, p)
                if isinstance(op, ast.Pow) and abs(b) > MAX_EXPONENT:
                    raise _EvalError(f"exponent {b:g} is over the cap of {MAX_EXPONENT} "
                                     f"(larger powers could hang evaluation)")
                if isinstance(op, ast.Pow) and abs(a) > 2**32:
                    raise _EvalError(f"base {a:g} of a power is over the cap of 2**32")
                result = _BINOPS[type(op)](a, b)
                if isinstance(result, complex) or (
                    isinstance(result, float) and not math.isfinite(result)
                ):
                    raise _EvalError("non-finite")
                return result
            case ast.UnaryOp(op=op, operand=operand):
                v = self._eval(operand, p)
                return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}[
                    type(op)
                ](v)
            case ast.BoolOp(op=op, values=values):
                # Python semantics: short-circuit, return the deciding operand.
                result = None
                for v in values:
                    result = self._eval(v, p)
                    if isinstance(op, ast.And) and not result:
                        return result
                    if isinstance(op, ast.Or) and result:
                        return result
                return result
            case ast.Compare(left=left, ops=ops, comparators=comps):
                a = self._eval(left, p)
                for op, c in zip(ops, comps):
                    b = self._eval(c, p)
                    if not _CMPOPS[type(op)](a, b):
                        return False
                    a = b
                return True
            case ast.Call(func=ast.Name(id=fname), args=args):
                return _FUNCS[fname](*(self._eval(a, p) for a in args))
        raise _EvalError(f"unexpected node {type(node).__name__}")  # unreachable after _check


class Expression(Restriction):
    """A safe arithmetic expression with the same whitelist, evaluated to its value.

    Used for launch-plan grid/block/shared-memory sizes, e.g.
    ``Expression("(rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK", names)``.

    Raises:
        RestrictionError: as :class:`Restriction`, with messages starting ``expression '<text>':``.
    """

    kind = "expression"
    condition = False

    def value(self, params: Mapping[str, int | float]) -> int | float | bool:
        """The expression's value at ``params``.

        Raises:
            RestrictionError: a name has no value in ``params``, or arithmetic failed
                (division by zero, a power too large, a non-finite result).
        """
        try:
            return self._eval(self._tree, params)
        except KeyError as exc:
            raise self._fail(f"no value for '{exc.args[0]}'") from None
        except (_EvalError, ArithmeticError, ValueError, TypeError) as exc:
            raise self._fail(f"cannot be evaluated: {exc or type(exc).__name__}") from None
