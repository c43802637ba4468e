"""LayoutAssignment: missing layouts become row-major, explicit ones are kept, numbers unchanged."""

import numpy as np

import hlo
from hlo.passes.layout_assignment import LayoutAssignment

TEXT = """
HloModule layouts
ENTRY %main (x: f32[2,3]) -> (f32[3,2], f32[2,3]) {
  %x = f32[2,3] parameter(0)
  %t = f32[3,2]{0,1} transpose(%x), dimensions={1,0}
  %n = f32[2,3] negate(%x)
  ROOT %r = (f32[3,2]{0,1}, f32[2,3]) tuple(%t, %n)
}
"""


def test_missing_layouts_become_row_major_and_explicit_ones_stay() -> None:
    m = hlo.parse_module(TEXT)
    out = LayoutAssignment().run(m)
    hlo.verify(out)
    main = out.entry
    assert str(main["x"].shape) == "f32[2,3]{1,0}" and str(main["n"].shape) == "f32[2,3]{1,0}"
    assert str(main["t"].shape) == "f32[3,2]{0,1}"
    assert str(main["r"].shape) == "(f32[3,2]{0,1}, f32[2,3]{1,0})"
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for a, b in zip(hlo.evaluate(out, x), hlo.evaluate(m, x)):
        np.testing.assert_array_equal(a, b)
    assert LayoutAssignment().run(out) is out
