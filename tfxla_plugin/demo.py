"""The main job's demo: parse, verify and evaluate an HLO module, and check it against NumPy.

Run as ``python -m tfxla_plugin.demo``. Later issues grow this into the
end-to-end demo (compile sample models, print clusters and speed-ups vs TF).
"""

from __future__ import annotations

import sys
import time

import numpy as np

import hlo

# A softmax over the last axis, written as XLA would emit it.
DEMO_HLO = """
HloModule softmax_demo, entry_computation_layout={(f32[2,5]{1,0})->f32[2,5]{1,0}}

%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(f32[] %a, f32[] %b)
}

%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}

ENTRY %main (x: f32[2,5]) -> f32[2,5] {
  %x = f32[2,5]{1,0} parameter(0), metadata={op_type="Softmax" op_name="softmax"}
  %ninf = f32[] constant(-inf)
  %rowmax = f32[2]{0} reduce(f32[2,5]{1,0} %x, f32[] %ninf), dimensions={1}, to_apply=%max
  %bmax = f32[2,5]{1,0} broadcast(f32[2]{0} %rowmax), dimensions={0}
  %shifted = f32[2,5]{1,0} subtract(f32[2,5]{1,0} %x, f32[2,5]{1,0} %bmax)
  %e = f32[2,5]{1,0} exponential(f32[2,5]{1,0} %shifted)
  %zero = f32[] constant(0)
  %denom = f32[2]{0} reduce(f32[2,5]{1,0} %e, f32[] %zero), dimensions={1}, to_apply=%sum
  %bden = f32[2,5]{1,0} broadcast(f32[2]{0} %denom), dimensions={0}
  ROOT %y = f32[2,5]{1,0} divide(f32[2,5]{1,0} %e, f32[2,5]{1,0} %bden)
}
"""


def main() -> int:
    t0 = time.perf_counter()
    module = hlo.parse_module(DEMO_HLO)
    hlo.verify(module)
    print(module.to_text())
    x = np.array([[1.0, 2.0, 3.0, 4.0, 5.0], [0.0, -1.0, 100.0, 2.0, 1.0]], np.float32)
    (y,) = hlo.evaluate(module, x)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        ref = e / e.sum(axis=1, keepdims=True)
    print("input:\n", x)
    print("softmax (HLO evaluator):\n", y)
    ok = np.allclose(y, ref, rtol=1e-6, atol=1e-7, equal_nan=True)
    assert hlo.parse_module(module.to_text()) == module, "text round trip changed the module"
    print(f"matches NumPy: {ok}; parse+verify+evaluate took {1e3 * (time.perf_counter() - t0):.1f} ms")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
