"""The stateless random ops, bit for bit as TF's CPU kernels compute them with the Philox algorithm.

* ``StatelessRandomGetKeyCounter(seed)`` -> ``key u64[1], counter u64[2]`` (TF's ``GenerateKey``);
  ``...GetKeyCounterAlg`` adds ``alg = 1`` (Philox) and ``StatelessRandomGetAlg`` returns 1, as on
  TF's CPU.
* The V2 samplers ``(shape, key, counter, alg[, minval, maxval])``: ``alg`` must be a compile-time
  constant, 1 (Philox) or 3 (auto-select, which is Philox on CPU); 2 (ThreeFry) is refused with TF's
  message. ``shape`` must be a compile-time constant.
* The V1 samplers ``(shape, seed[, minval, maxval])`` derive key and counter from the seed first.

Element ``i`` comes from Philox block ``i // k`` (``k`` values per block, see ``_random_dist``), so
results do not depend on how TF shards the work; the truncated normal runs TF's rejection loop (group
``g`` of ``k`` outputs starts ``g * k * 64`` blocks in and draws until it has ``k`` values within
two standard deviations) as an HLO while loop over all groups at once.

``StatelessRandomUniformIntV2``: TF requires ``minval < maxval`` (checked here when both are
compile-time constants); run-time bounds that violate it give unspecified values instead of an error.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from hlo.attributes import SliceDim
from hlo.builder import ComputationBuilder, Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.errors import LoweringError
from hlo.lowering.ops import _philox as philox
from hlo.lowering.ops import _random_dist as dist
from hlo.lowering.ops._philox import Ops, State
from hlo.lowering.context import LoweringContext
from hlo.lowering.registry import register_lowering
from hlo.opcodes import Opcode
from hlo.shapes import Shape, TupleShape, scalar

PHILOX, THREEFRY, AUTO_SELECT = 1, 2, 3
_FLOATS = frozenset({P.F16, P.BF16, P.F32, P.F64})
_INTS = frozenset({P.S32, P.S64})
_FULL_INTS = frozenset({P.S32, P.S64, P.U32, P.U64})


def _seed_state(ctx: LoweringContext, ops: Ops, seed: Value) -> State:
    if ctx.dims(seed) != (2,) or ctx.dtype(seed) not in (P.S32, P.S64):
        raise ctx.invalid_argument(f"seed must have shape [2] of int32 or int64, not {seed.shape.short()}")
    return philox.from_seed(ops, seed)


def _key_counter_state(ctx: LoweringContext, ops: Ops) -> State:
    _, key, counter, _ = ctx.inputs[:4]
    if ctx.dims(key) != (1,) or ctx.dtype(key) != P.U64:
        raise ctx.invalid_argument(f"key must have shape [1] of uint64, not {key.shape.short()}")
    if len(ctx.dims(counter)) != 1 or ctx.dims(counter)[0] < 2 or ctx.dtype(counter) != P.U64:
        raise ctx.invalid_argument(f"counter must be a uint64 vector of at least 2 elements for the Philox "
                                   f"algorithm, not {counter.shape.short()}")
    alg = ctx.const_ints(3)
    if len(alg) != 1:
        raise ctx.invalid_argument(f"alg must be a scalar, got {len(alg)} values")
    if alg[0] not in (PHILOX, AUTO_SELECT):
        raise ctx.invalid_argument(f"Unsupported algorithm id: {alg[0]} (TF's CPU kernels, and this "
                                   "compiler, implement Philox (1) and auto-select (3) only)")
    return philox.from_key_counter(ops, key, counter)


def _shape(ctx: LoweringContext) -> tuple[int, ...]:
    dims = tuple(ctx.const_ints(0))
    if any(d < 0 for d in dims):
        raise ctx.invalid_argument(f"shape must not have negative dimensions, got {list(dims)}")
    return dims


def _sample(ctx: LoweringContext, ops: Ops, state: State, dims: tuple[int, ...], dtype: P,
            make: Callable[[Value], Value]) -> Value:
    """``make(words u32[blocks, 4]) -> [blocks * k]`` sliced to the shape's element count."""
    count = int(np.prod(dims, dtype=np.int64))
    k = dist.per_block(dtype)
    n_blocks = max(1, -(-count // k))
    flat = make(philox.words(ops, state, n_blocks))
    if count != n_blocks * k:
        flat = ops.b.slice(flat, slice=(SliceDim(0, count, 1),))
    return ops.reshape(flat, dims)


# --- key, counter and algorithm ----------------------------------------------------------------------


@register_lowering("StatelessRandomGetKeyCounter", dtypes=_INTS, type_attrs=("Tseed",))
def get_key_counter(ctx: LoweringContext) -> list[Value]:
    ops = Ops(ctx.b)
    return list(philox.key_counter_outputs(ops, _seed_state(ctx, ops, ctx.inputs[0])))


@register_lowering("StatelessRandomGetKeyCounterAlg", dtypes=_INTS, type_attrs=("Tseed",))
def get_key_counter_alg(ctx: LoweringContext) -> list[Value]:
    return [*get_key_counter(ctx), ctx.scalar(PHILOX, P.S32)]


@register_lowering("StatelessRandomGetAlg")
def get_alg(ctx: LoweringContext) -> Value:
    return ctx.scalar(PHILOX, P.S32)


# --- samplers ----------------------------------------------------------------------------------------


def _distribution(name: str) -> tuple[Callable[[LoweringContext], Value], Callable[[LoweringContext], Value]]:
    def v2(ctx: LoweringContext) -> Value:
        ops = Ops(ctx.b)
        dtype = ctx.dtype_attr("dtype")
        return _sample(ctx, ops, _key_counter_state(ctx, ops), _shape(ctx), dtype,
                       lambda words: dist.DISTRIBUTIONS[name](ops, words, dtype))

    def v1(ctx: LoweringContext) -> Value:
        ops = Ops(ctx.b)
        dtype = ctx.dtype_attr("dtype")
        return _sample(ctx, ops, _seed_state(ctx, ops, ctx.inputs[1]), _shape(ctx), dtype,
                       lambda words: dist.DISTRIBUTIONS[name](ops, words, dtype))
    return v2, v1


for _name, _v2, _v1, _dtypes in [
    ("uniform", "StatelessRandomUniformV2", "StatelessRandomUniform", _FLOATS),
    ("normal", "StatelessRandomNormalV2", "StatelessRandomNormal", _FLOATS),
    ("full_int", "StatelessRandomUniformFullIntV2", "StatelessRandomUniformFullInt", _FULL_INTS),
]:
    _rule_v2, _rule_v1 = _distribution(_name)
    register_lowering(_v2, dtypes=_dtypes, type_attrs=("dtype",), const_inputs=(0, 3))(_rule_v2)
    register_lowering(_v1, dtypes=_dtypes, type_attrs=("dtype",), const_inputs=(0,))(_rule_v1)


def _int_bounds(ctx: LoweringContext, lo_index: int) -> tuple[Value, Value]:
    lo, hi = ctx.inputs[lo_index], ctx.inputs[lo_index + 1]
    for what, v in (("minval", lo), ("maxval", hi)):
        if ctx.dims(v):
            raise ctx.invalid_argument(f"{what} must be 0-D, got shape {list(ctx.dims(v))}")
    try:
        a, b = int(ctx.const_input(lo_index)), int(ctx.const_input(lo_index + 1))
    except LoweringError:
        return lo, hi  # known at run time only
    if not a < b:
        raise ctx.invalid_argument(f"Need minval < maxval, got {a} >= {b}")
    return lo, hi


@register_lowering("StatelessRandomUniformIntV2", dtypes=_INTS, type_attrs=("dtype",), const_inputs=(0, 3))
def uniform_int_v2(ctx: LoweringContext) -> Value:
    ops = Ops(ctx.b)
    dtype = ctx.dtype_attr("dtype")
    lo, hi = _int_bounds(ctx, 4)
    return _sample(ctx, ops, _key_counter_state(ctx, ops), _shape(ctx), dtype,
                   lambda words: dist.uniform_int(ops, words, dtype, lo, hi))


@register_lowering("StatelessRandomUniformInt", dtypes=_INTS, type_attrs=("dtype",), const_inputs=(0,))
def uniform_int_v1(ctx: LoweringContext) -> Value:
    ops = Ops(ctx.b)
    dtype = ctx.dtype_attr("dtype")
    lo, hi = _int_bounds(ctx, 2)
    return _sample(ctx, ops, _seed_state(ctx, ops, ctx.inputs[1]), _shape(ctx), dtype,
                   lambda words: dist.uniform_int(ops, words, dtype, lo, hi))


# --- truncated normal --------------------------------------------------------------------------------


def _truncated(ctx: LoweringContext, state: State, dims: tuple[int, ...], dtype: P) -> Value:
    ops = Ops(ctx.b)
    count = int(np.prod(dims, dtype=np.int64))
    k = dist.per_block(dtype)
    groups = max(1, -(-count // k))
    compute = P.F64 if dtype == P.F64 else P.F32
    stride = dist.truncated_blocks_per_group(dtype)
    shapes = (scalar(P.U64), Shape.array(P.S32, (groups,)), Shape.array(compute, (groups, k)),
              scalar(P.U32), scalar(P.U32), scalar(P.U64), scalar(P.U64))
    loop_shape = TupleShape(shapes)
    key = f"truncated_normal_{groups}_{dtype.value}"

    def body(cb: ComputationBuilder) -> Value:
        o = Ops(cb)
        p = cb.parameter(loop_shape, name="state")
        t, filled, results, k0, k1, lo, hi = (cb.get_tuple_element(p, index=i) for i in range(len(shapes)))
        words = philox.words(o, State((k0, k1), (lo, hi)), groups, stride=stride, offset=t)
        filled, results = dist.truncated_round(o, words, dtype, filled, results)
        return cb.tuple(o.op(Opcode.ADD, t, 1), filled, results, k0, k1, lo, hi)

    def cond(cb: ComputationBuilder) -> Value:
        o = Ops(cb)
        p = cb.parameter(loop_shape, name="state")
        filled = cb.get_tuple_element(p, index=1)
        least = cb.reduce(filled, o.full(k, P.S32), dimensions=(0,),
                          to_apply=ctx.scalar_computation(Opcode.MINIMUM, P.S32))
        return o.compare(least, o.full(k, P.S32), "LT")

    init = ctx.b.tuple(ops.full(0, P.U64), ops.full(0, P.S32, (groups,)), ops.full(0, compute, (groups, k)),
                       *state.key, *state.counter)
    loop = ctx.b.op(Opcode.WHILE, init, condition=ctx.computation(f"{key}_cond", cond),
                    body=ctx.computation(f"{key}_body", body))
    flat = ops.reshape(ctx.b.get_tuple_element(loop, index=2), (groups * k,))
    if count != groups * k:
        flat = ctx.b.slice(flat, slice=(SliceDim(0, count, 1),))
    return ops.reshape(ops.convert(flat, dtype), dims)


@register_lowering("StatelessTruncatedNormalV2", dtypes=_FLOATS, type_attrs=("dtype",), const_inputs=(0, 3))
def truncated_normal_v2(ctx: LoweringContext) -> Value:
    return _truncated(ctx, _key_counter_state(ctx, Ops(ctx.b)), _shape(ctx), ctx.dtype_attr("dtype"))


@register_lowering("StatelessTruncatedNormal", dtypes=_FLOATS, type_attrs=("dtype",), const_inputs=(0,))
def truncated_normal_v1(ctx: LoweringContext) -> Value:
    return _truncated(ctx, _seed_state(ctx, Ops(ctx.b), ctx.inputs[1]), _shape(ctx), ctx.dtype_attr("dtype"))
