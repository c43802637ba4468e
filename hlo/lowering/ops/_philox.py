"""TensorFlow's Philox-4x32-10 counter-based generator as HLO integer ops (tensorflow/core/lib/random/
philox_random.h), and the key/counter TF derives from a stateless seed (``GenerateKey``).

Everything is written against a ``ComputationBuilder`` (not a lowering context) so that loop bodies
(the truncated normal's rejection loop) can call it too. Values are u32 arrays of one shape; the
32x32 -> 64 bit product of a round is a u64 multiply split by a shift.

A generator state is a 128-bit counter (four u32 words, least significant first) and a 64-bit key
(two u32 words). One call returns the ten-round function of the counter and then adds one to it;
``Skip(n)`` adds ``n``. TF's V2 stateless ops carry the state as a u64 ``key[1]`` (``k0 | k1 << 32``)
and a u64 ``counter[2]`` (``c0 | c1 << 32``, ``c2 | c3 << 32``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from hlo.attributes import ComparisonDirection, SliceDim
from hlo.builder import ComputationBuilder, Value
from hlo.dtypes import PrimitiveType as P
from hlo.opcodes import Opcode
from hlo.shapes import Shape

_M0, _M1 = 0xD2511F53, 0xCD9E8D57  # round multipliers
_W0, _W1 = 0x9E3779B9, 0xBB67AE85  # key increments (the golden ratio, sqrt(3) - 1)
_SEED_KEY = (0x3EC8F720, 0x02461E29)  # the fixed key GenerateKey scrambles a seed with
ROUNDS = 10


def _array(v: Value) -> Shape:
    if not isinstance(v.shape, Shape):
        raise TypeError(f"expected an array, got the tuple {v.shape}")
    return v.shape


def dims_of(v: Value) -> tuple[int, ...]:
    return _array(v).dims


def dtype_of(v: Value) -> P:
    return _array(v).dtype


class Ops:
    """Small typed helpers over a builder: constants, converts, shifts, static slices."""

    def __init__(self, b: ComputationBuilder) -> None:
        self.b = b

    def full(self, value: int | float, dtype: P, dims: Sequence[int] = ()) -> Value:
        c = self.b.constant(np.asarray(value).astype(dtype.numpy), dtype)
        dims = tuple(dims)
        return c if not dims else self.b.broadcast(c, dimensions=(), shape=Shape.array(dtype, dims))

    def like(self, value: int | float, v: Value) -> Value:
        return self.full(value, dtype_of(v), dims_of(v))

    def convert(self, v: Value, dtype: P) -> Value:
        return v if dtype_of(v) == dtype else self.b.convert(v, shape=Shape.array(dtype, dims_of(v)))

    def bitcast(self, v: Value, dtype: P) -> Value:
        return self.b.bitcast_convert(v, shape=Shape.array(dtype, dims_of(v)))

    def reshape(self, v: Value, dims: Sequence[int]) -> Value:
        dims = tuple(dims)
        return v if dims_of(v) == dims else self.b.reshape(v, shape=Shape.array(dtype_of(v), dims))

    def broadcast(self, v: Value, dims: Sequence[int], mapping: Sequence[int]) -> Value:
        dims = tuple(dims)
        if dims_of(v) == dims:
            return v
        return self.b.broadcast(v, dimensions=tuple(mapping), shape=Shape.array(dtype_of(v), dims))

    def op(self, opcode: Opcode, x: Value, y: Value | int) -> Value:
        """A binary op; an int ``y`` is a constant of ``x``'s type and dims."""
        return self.b.op(opcode, x, self.like(y, x) if isinstance(y, int) else y)

    def shr(self, x: Value, n: int) -> Value:
        return self.op(Opcode.SHIFT_RIGHT_LOGICAL, x, n)

    def shl(self, x: Value, n: int) -> Value:
        return self.op(Opcode.SHIFT_LEFT, x, n)

    def compare(self, x: Value, y: Value, direction: str) -> Value:
        return self.b.compare(x, y, direction=ComparisonDirection(direction))

    def element(self, v: Value, i: int) -> Value:
        """Element ``i`` of a vector, as a scalar."""
        s = self.b.slice(v, slice=(SliceDim(i, i + 1, 1),))
        return self.reshape(s, ())

    def take(self, v: Value, axis: int, i: int) -> Value:
        """``v[..., i, ...]`` along ``axis`` (the axis dropped)."""
        dims = dims_of(v)
        spec = tuple(SliceDim(i if a == axis else 0, i + 1 if a == axis else d, 1) for a, d in enumerate(dims))
        return self.reshape(self.b.slice(v, slice=spec), dims[:axis] + dims[axis + 1:])

    def stack_last(self, values: Sequence[Value]) -> Value:
        """Stack same-shape arrays along a new last axis."""
        dims = dims_of(values[0])
        parts = [self.reshape(v, dims + (1,)) for v in values]
        return parts[0] if len(parts) == 1 else self.b.concatenate(*parts, dimensions=(len(dims),))

    def u64(self, lo: Value, hi: Value) -> Value:
        """``lo | hi << 32`` from two u32 arrays."""
        return self.b.op(Opcode.OR, self.convert(lo, P.U64), self.shl(self.convert(hi, P.U64), 32))

    def halves(self, x: Value) -> tuple[Value, Value]:
        """The low and high u32 words of a u64 array."""
        return self.convert(x, P.U32), self.convert(self.shr(x, 32), P.U32)


@dataclass(frozen=True)
class State:
    """A Philox generator state: key words (k0, k1) and the 128-bit counter as two u64 scalars."""

    key: tuple[Value, Value]
    counter: tuple[Value, Value]  # (low 64 bits, high 64 bits)


def _mul_hi_lo(ops: Ops, m: int, x: Value) -> tuple[Value, Value]:
    prod = ops.op(Opcode.MULTIPLY, ops.convert(x, P.U64), m)
    return ops.halves(prod)[::-1]


def rounds(ops: Ops, counter: Sequence[Value], key: Sequence[Value]) -> list[Value]:
    """The ten Philox rounds of ``counter`` (four u32 arrays) under ``key`` (two u32 arrays, same dims)."""
    c = list(counter)
    k0, k1 = key
    for r in range(ROUNDS):
        hi0, lo0 = _mul_hi_lo(ops, _M0, c[0])
        hi1, lo1 = _mul_hi_lo(ops, _M1, c[2])
        xor = lambda a, b: ops.b.op(Opcode.XOR, a, b)  # noqa: E731
        c = [xor(xor(hi1, c[1]), k0), lo1, xor(xor(hi0, c[3]), k1), lo0]
        if r + 1 < ROUNDS:
            k0, k1 = ops.op(Opcode.ADD, k0, _W0), ops.op(Opcode.ADD, k1, _W1)
    return c


def blocks(ops: Ops, state: State, index: Value) -> list[Value]:
    """The generator's output after ``Skip(index)`` for each u64 ``index``: four u32 arrays of its dims."""
    dims = dims_of(index)
    lo, hi = (ops.broadcast(c, dims, ()) for c in state.counter)
    lo2 = ops.b.add(lo, index)
    carry = ops.convert(ops.compare(lo2, index, "LT"), P.U64)  # the 128-bit add's carry
    hi2 = ops.b.add(hi, carry)
    counter = [*ops.halves(lo2), *ops.halves(hi2)]
    key = [ops.broadcast(k, dims, ()) for k in state.key]
    return rounds(ops, counter, key)


def words(ops: Ops, state: State, n_blocks: int, stride: int = 1, offset: Value | None = None) -> Value:
    """u32[n_blocks, 4]: block ``g`` is the output after ``Skip(g * stride + offset)``."""
    index = ops.b.iota(shape=Shape.array(P.U64, (n_blocks,)), iota_dimension=0)
    if stride != 1:
        index = ops.op(Opcode.MULTIPLY, index, stride)
    if offset is not None:
        index = ops.b.add(index, ops.broadcast(offset, (n_blocks,), ()))
    return ops.stack_last(blocks(ops, state, index))


def from_key_counter(ops: Ops, key: Value, counter: Value) -> State:
    """The state the V2 ops read from ``key`` (u64[1]) and ``counter`` (u64[2], Philox's size)."""
    return State(ops.halves(ops.element(key, 0)), (ops.element(counter, 0), ops.element(counter, 1)))


def from_seed(ops: Ops, seed: Value) -> State:
    """TF's ``GenerateKey``: the seed (s32[2] or s64[2], sign-extended to 64 bits) is the counter of one
    Philox call under a fixed key; its output words 0-1 are the key and words 2-3 the counter's upper half."""
    s = [ops.bitcast(ops.convert(ops.element(seed, i), P.S64), P.U64) for i in (0, 1)]
    counter = [w for x in s for w in ops.halves(x)]
    mix = rounds(ops, counter, [ops.full(k, P.U32) for k in _SEED_KEY])
    return State((mix[0], mix[1]), (ops.full(0, P.U64), ops.u64(mix[2], mix[3])))


def key_counter_outputs(ops: Ops, state: State) -> tuple[Value, Value]:
    """``(key u64[1], counter u64[2])`` as StatelessRandomGetKeyCounter returns them."""
    key = ops.reshape(ops.u64(*state.key), (1,))
    counter = ops.b.concatenate(*(ops.reshape(c, (1,)) for c in state.counter), dimensions=(0,))
    return key, counter
