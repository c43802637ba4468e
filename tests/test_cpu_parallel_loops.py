"""Which loops of a loop nest run as tasks on the caller's threads (backends/cpu/parallel.py
``parallel_loops``), and how a reduction is cut into parts (``reduction_parts``).

Batch-1 NHWC tensors start with a size-1 loop; splitting only the outermost loop left every
elementwise kernel of a batch-1 ResNet50 on one thread. Checked: the choice for typical shapes, and
kernels over such shapes outline the right loops into a shard (the loops before the split ones decoded
from the task number, size-1 ones included) and still match the evaluator.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import backends.cpu
import hlo
from backends.cpu.parallel import PARALLEL_CHUNKS, REDUCTION_PARTS, parallel_loops, reduction_parts


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


@pytest.mark.parametrize("sizes,want", [
    ((1024, 1024), (1, 16, 1)),      # rows enough: 16 ranges of rows, each row's loop whole
    ((3, 100000), (1, 15, 5)),       # 3 rows: each row's loop in 5 ranges
    ((70000,), (0, 16, 16)),         # one loop: 16 ranges of it
    ((1, 3, 256, 256), (3, 16, 1)),  # collapse until 16 iterations (the innermost never)
    ((5000,), (0, 2, 2)),            # small: as many parts as 2048 iterations each allow, at least 2
])
def test_reduction_parts(sizes, want) -> None:
    m, parts, s = reduction_parts(sizes)
    assert (m, parts, s) == want and parts <= REDUCTION_PARTS


@pytest.mark.parametrize("dims,decoded", [((1, 56, 56, 64), 3), ((1, 1, 40000), 3)])
def test_batch_one_kernels_split_the_right_loop_and_match(dims, decoded) -> None:
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
    src = exe.source
    assert "#pragma omp parallel" not in src
    nest = src.split("/* %bs = ")[1].split("/* %")[0]
    call = re.search(r"tfxla_parallel\((\d+), (comp_0_par\d+), &ctx_\);", nest)
    assert call is not None and "for (int64_t" not in nest  # the whole nest is in the shard
    first, count = parallel_loops(dims)
    assert int(call.group(1)) == math.prod(dims[:first + count])
    shard = src[src.index(f"static void {call.group(2)}("):]
    shard = shard[:shard.index("\n}\n")]
    assert shard.count("const int64_t i") == decoded - (first + count == len(dims))  # the task's indices
    assert shard.count("for (int64_t") == 1 + len(dims) - first - count
    x = np.random.default_rng(0).standard_normal(dims).astype(np.float32)
    s = np.float32(1.5)
    (got,) = exe(x, s)
    np.testing.assert_array_equal(got, np.maximum(x * s, 0.0))
