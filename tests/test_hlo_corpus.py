"""Every module real XLA produces for the corpus parses, prints like XLA, re-parses equal, verifies,
and evaluates to TensorFlow's own result.

The corpus (``tests/hlo_corpus``) is generated at test time with
``tf.function(fn, jit_compile=True).experimental_get_compiler_ir(*args)(stage=...)``
for the stages ``hlo`` and ``optimized_hlo``.
"""

from __future__ import annotations

import numpy as np
import pytest

import hlo
from tests.hlo_corpus.cases import CASES
from tests.hlo_corpus.generate import STAGES, case_args, hlo_text, tf_reference

PARAMS = [pytest.param(case, stage, id=f"{case.name}-{stage}") for case in CASES for stage in STAGES]


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip().splitlines() if line.strip()]


@pytest.mark.parametrize("case, stage", PARAMS)
def test_corpus_text_round_trip(case, stage: str) -> None:
    text = hlo_text(case, stage)
    module = hlo.parse_module(text)
    # XLA prints operand shapes before optimization and omits them after.
    printed = module.to_text(print_operand_shapes=(stage == "hlo"))
    assert _lines(printed) == _lines(text), "our printer differs from XLA's text"
    assert hlo.parse_module(printed) == module
    assert hlo.parse_module(module.to_text(print_operand_shapes=stage != "hlo")) == module


@pytest.mark.parametrize("case, stage", PARAMS)
def test_corpus_evaluates_to_tf_result(case, stage: str) -> None:
    module = hlo.parse_module(hlo_text(case, stage))
    hlo.verify(module)
    args = case_args(case)
    got = hlo.evaluate(module, *args)
    want = tf_reference(case)
    assert len(got) == len(want), f"{len(got)} results, TF returned {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"result {i}: dims {g.shape} != TF {w.shape}"
        assert g.dtype == w.dtype, f"result {i}: dtype {g.dtype} != TF {w.dtype}"
        rtol, atol = case.tolerance(w.dtype)
        if rtol == 0 and atol == 0:
            np.testing.assert_array_equal(g, w, err_msg=f"result {i}")
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                       equal_nan=True, err_msg=f"result {i} (rtol={rtol}, atol={atol})")


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 40
