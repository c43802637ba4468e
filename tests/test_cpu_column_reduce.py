"""Column reductions (leading dims reduced) stream the input once and match the evaluator."""

from __future__ import annotations

import numpy as np
import pytest

import backends.cpu as cpu
import hlo

TEMPLATE = """
HloModule col
%red (a: {t}[], b: {t}[]) -> {t}[] {{
  %a = {t}[] parameter(0)
  %b = {t}[] parameter(1)
  ROOT %r = {t}[] {op}(%a, %b)
}}
ENTRY %main (x: {t}[{dims}]) -> {t}[{out}] {{
  %x = {t}[{dims}] parameter(0)
  %e = {t}[{dims}] multiply(%x, %x)
  %i = {t}[] constant({init})
  ROOT %s = {t}[{out}] reduce(%e, %i), dimensions={{{reduced}}}, to_apply=%red
}}
"""


@pytest.mark.parametrize("t, op, init, dims, reduced, out", [
    ("f32", "add", "0", "257,33", "0", "33"),
    ("f32", "maximum", "-inf", "5,7,19", "0,1", "19"),
    ("s32", "add", "0", "64,3,5", "0", "3,5"),
    ("f64", "minimum", "inf", "9,1", "0", "1"),
])
def test_column_reduction_uses_the_streaming_loop_and_matches(t, op, init, dims, reduced, out) -> None:
    m = hlo.parse_module(TEMPLATE.format(t=t, op=op, init=init, dims=dims, reduced=reduced, out=out))
    exe = cpu.compile(m)
    assert "column reduction: the input is streamed once" in exe.source
    shape = tuple(int(d) for d in dims.split(","))
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 10).astype(m.entry.parameters[0].shape.dtype.numpy)
    (got,) = exe(x)
    (want,) = hlo.evaluate(m, x)
    np.testing.assert_allclose(got, want, rtol=1e-5 if t == "f32" else 1e-12)


def test_row_reductions_keep_the_generic_loop() -> None:
    m = hlo.parse_module(TEMPLATE.format(t="f32", op="add", init="0", dims="8,16", reduced="1", out="8"))
    assert "column reduction" not in cpu.compile(m).source
