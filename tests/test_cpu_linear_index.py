"""``backends.codegen.layout.linear_index``: the C offset expression of a multi-index, shared by the CPU
and CUDA generators. Index terms may be compound expressions (``x + q``); each is scaled as a whole.
The expressions are evaluated with Python's integer arithmetic (the same precedence as C for ``+``,
``*``, ``/`` (as ``//``) and ``%`` on non-negative values) against NumPy's ``ravel_multi_index``."""

from __future__ import annotations

import itertools

import numpy as np

import hlo
from backends.codegen.layout import linear_index


def _offset(expr: str, env: dict) -> int:
    return eval(expr.replace("/", "//"), {}, dict(env))  # noqa: S307 (our own generated arithmetic)


def test_compound_index_terms_are_scaled_as_a_whole() -> None:
    shape = hlo.parse_shape("f32[3,4,5]")
    expr = linear_index(shape, ("(i) % 3", "x + q", "a + b"))
    for i, x, q, a, b in itertools.product(range(3), range(3), range(2), range(3), range(3)):
        if a + b >= 5:
            continue
        want = np.ravel_multi_index((i % 3, x + q, a + b), (3, 4, 5))
        assert _offset(expr, dict(i=i, x=x, q=q, a=a, b=b)) == want, expr


def test_layouts_and_parenthesized_terms() -> None:
    shape = hlo.parse_shape("f32[3,4,5]{0,2,1}")  # dim 0 minor, then 2, then 1
    expr = linear_index(shape, ("(i + 1) - 1", "(j) * 1 + 0", "(k)"))
    for i, j, k in itertools.product(range(3), range(4), range(5)):
        want = i + 3 * k + 15 * j
        assert _offset(expr, dict(i=i, j=j, k=k)) == want, expr
