"""Which loops of a loop nest OpenMP splits (backends/cpu/parallel.py ``parallel_loops``).

Batch-1 NHWC tensors start with a size-1 loop; splitting only the outermost loop left every
elementwise kernel of a batch-1 ResNet50 on one thread. Checked: the choice for typical shapes, and
kernels over such shapes put the pragma on the right loop and still match the evaluator.
"""

from __future__ import annotations

import numpy as np
import pytest

import backends.cpu
import hlo
from backends.cpu.parallel import PARALLEL_CHUNKS, parallel_loops


@pytest.mark.parametrize("dims,want", [
    ((1, 56, 56, 64), (1, 2)),    # skip the batch loop, collapse H and W, keep C as the vector loop
    ((4096, 1024), (0, 1)),       # enough rows: the outer loop alone
    ((2, 3, 50000), (0, 2)),      # 2 rows are too few chunks: collapse with the next loop
    ((1, 1, 40000), (2, 1)),      # only the innermost is left: split it
    ((7,), (0, 1)),
    ((1, 1), (0, 0)),              # nothing to split
    ((), (0, 0)),
])
def test_parallel_loops(dims, want) -> None:
    assert parallel_loops(dims) == want


def test_split_loops_offer_enough_chunks() -> None:
    first, count = parallel_loops((1, 8, 9, 128))
    assert (first, count) == (1, 2) and 8 * 9 >= PARALLEL_CHUNKS


@pytest.mark.parametrize("dims,pragma_loop", [((1, 56, 56, 64), 1), ((1, 1, 40000), 2)])
def test_batch_one_kernels_split_the_right_loop_and_match(dims, pragma_loop) -> None:
    shape = ",".join(map(str, dims))
    module = hlo.parse_module(f"""HloModule bn_relu
ENTRY e {{
  x = f32[{shape}] parameter(0)
  s = f32[] parameter(1)
  bs = f32[{shape}] broadcast(s), dimensions={{}}
  y = f32[{shape}] multiply(x, bs)
  zero = f32[] constant(0)
  bz = f32[{shape}] broadcast(zero), dimensions={{}}
  ROOT r = f32[{shape}] maximum(y, bz)
}}""")
    exe = backends.cpu.compile(module)  # no fusion here: one loop nest per instruction
    nest = exe.source.split("/* %bs = ")[1]
    assert "#pragma omp parallel for" in nest
    assert nest.split("#pragma omp parallel for")[0].count("for (int64_t") == pragma_loop
    x = np.random.default_rng(0).standard_normal(dims).astype(np.float32)
    s = np.float32(1.5)
    (got,) = exe(x, s)
    np.testing.assert_array_equal(got, np.maximum(x * s, 0.0))
