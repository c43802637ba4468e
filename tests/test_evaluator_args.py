"""hlo.evaluate checks its arguments and says which one is wrong and what it expected."""

from __future__ import annotations

import numpy as np
import pytest

import hlo

MODULE = """
HloModule args
ENTRY %main (x: f32[2,3], n: s32[]) -> f32[2,3] {
  %x = f32[2,3]{1,0} parameter(0)
  %n = s32[] parameter(1)
  ROOT %neg = f32[2,3]{1,0} negate(%x)
}
"""


@pytest.fixture(scope="module")
def module() -> hlo.HloModule:
    return hlo.parse_module(MODULE)


def test_correct_arguments_evaluate(module) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (out,) = hlo.evaluate(module, x, np.int32(4))
    np.testing.assert_array_equal(out, -x)


def test_wrong_argument_count(module) -> None:
    with pytest.raises(hlo.HloEvaluationError, match=r"takes 2 argument\(s\), got 1"):
        hlo.evaluate(module, np.zeros((2, 3), np.float32))


def test_wrong_dtype_names_argument_and_expected_type(module) -> None:
    with pytest.raises(hlo.HloEvaluationError, match=r"argument 0: expected dtype f32 \(float32\), got float64"):
        hlo.evaluate(module, np.zeros((2, 3)), np.int32(1))


def test_wrong_dims_names_argument_and_expected_shape(module) -> None:
    with pytest.raises(hlo.HloEvaluationError, match=r"argument 1: expected dims \[\] \(s32\[\]\), got \[1\]"):
        hlo.evaluate(module, np.zeros((2, 3), np.float32), np.zeros((1,), np.int32))


def test_elided_constant_cannot_be_evaluated() -> None:
    m = hlo.parse_module("HloModule m\nENTRY %e () -> f32[40,50] {\n  ROOT %c = f32[40,50]{1,0} constant({...})\n}")
    with pytest.raises(hlo.HloEvaluationError, match=r"%c .*elided"):
        hlo.evaluate(m)
