"""calculator: arithmetic through an AST whitelist. Never `eval`: only numbers, operators, parentheses and a
few named math functions are evaluated, with bounds on input size, work and result size."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any, TypeAlias

from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, Field

from reinloop.tools.registry import POLICY_KEY

__all__ = ["CalculatorInput", "CalculatorTool", "evaluate", "format_number"]

MAX_EXPRESSION_CHARS = 200
MAX_NODES = 100  # operators, operands and calls in one expression
MAX_INT_BITS = 4_096  # integer results up to about 1,230 decimal digits
MAX_ARGS = 8

Number: TypeAlias = int | float
_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., Number]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "exp": math.exp,
    "log": math.log,
    "log10": math.log10,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "floor": math.floor,
    "ceil": math.ceil,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}
_SYMBOLS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
}


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression; raises ToolException saying what is wrong."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolException(f"the expression is {len(expression)} characters long; the limit is {MAX_EXPRESSION_CHARS}")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ToolException(f"invalid syntax ({exc.msg}) in {expression.strip()!r}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise ToolException(f"the expression is too complex (more than {MAX_NODES} parts); split it up")
    try:
        value = _eval(tree.body)
    except ZeroDivisionError:
        raise ToolException("division by zero") from None
    except OverflowError:
        raise ToolException("the result is too large") from None
    except ValueError as exc:  # math domain errors: sqrt(-1), log(0)
        raise ToolException(f"math error: {exc}") from None
    if isinstance(value, complex):
        raise ToolException("the result is not a real number (a fractional power of a negative number?)")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolException("the result is not a finite number")
    return value


def _eval(node: ast.expr) -> int | float:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise ToolException(f"only numbers are allowed, not {node.value!r}")
        return node.value
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise ToolException(f"unknown name {node.id!r}; known constants: {', '.join(_CONSTANTS)}")
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        _check_size(type(node.op), left, right)
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.Call):
        return _call(node)
    raise ToolException(
        f"{type(node).__name__} is not allowed; use numbers, + - * / // % ** and parentheses, "
        f"the constants {', '.join(_CONSTANTS)} and the functions {', '.join(_FUNCTIONS)}"
    )


def _call(node: ast.Call) -> int | float:
    if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
        raise ToolException(f"only these functions can be called: {', '.join(_FUNCTIONS)}")
    if node.keywords or not node.args or len(node.args) > MAX_ARGS:
        raise ToolException(f"{node.func.id}() takes 1 to {MAX_ARGS} numbers, without names")
    args = [_eval(arg) for arg in node.args]
    try:
        return _FUNCTIONS[node.func.id](*args)
    except TypeError as exc:
        raise ToolException(f"{node.func.id}(): {exc}") from None


def _check_size(op: type[ast.operator], left: int | float, right: int | float) -> None:
    """Refuse integer operations whose result would be huge before computing them (`9**9**9`)."""
    if not (isinstance(left, int) and isinstance(right, int)):
        return
    if op is ast.Pow and right > 0 and left not in (0, 1, -1):
        bits = left.bit_length() * right
    elif op is ast.Mult:
        bits = left.bit_length() + right.bit_length()
    else:
        return
    if bits > MAX_INT_BITS:
        raise ToolException(
            f"the result of {_SYMBOLS[op]} would have about {bits} bits (the limit is {MAX_INT_BITS}); it is too large"
        )


def format_number(value: int | float) -> str:
    """A calculator result as the tool writes it: a whole float without its ".0", others to 12 digits."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return format(value, ".12g")
    return str(value)


class CalculatorInput(BaseModel):
    expression: str = Field(
        min_length=1,
        max_length=MAX_EXPRESSION_CHARS,
        description=(
            "An arithmetic expression such as '(12.5 + 7) * 3 / 4' or 'sqrt(2) ** 2'. Supports + - * / // % **, "
            f"parentheses, the constants pi and e, and {', '.join(_FUNCTIONS)}."
        ),
    )


class CalculatorTool(BaseTool):
    """Exact arithmetic for the agent, with no code execution."""

    name: str = "calculator"
    description: str = (
        "Evaluate an arithmetic expression and return the number. Use it for every calculation instead of "
        "computing in your head."
    )
    args_schema: type[BaseModel] = CalculatorInput
    # It bounds its work up front, but big-integer arithmetic runs in C holding the GIL, where a thread
    # cannot be stopped at the deadline; a worker process can. A pure function: safe to retry in place.
    metadata: dict[str, Any] | None = Field(
        default_factory=lambda: {POLICY_KEY: {"isolation": "process", "retryable": True}}
    )

    def _run(self, expression: str, **_: Any) -> str:
        return format_number(evaluate(expression))
