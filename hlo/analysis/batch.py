"""Batch polymorphism: may a kernel compiled at batch size T serve any batch size, tile by tile?

A cluster traced with a ``None`` batch dimension is lowered twice, at two batch sizes ``ba != bb``
(both > 1). ``batch_polymorphism(a, b, ba, bb, batched)`` proves two things or raises
``NotBatchPolymorphic`` naming the instruction at fault:

1. *The batch size is only a size.* The two modules are the same instruction for instruction
   (opcodes, operands, attributes, literals); shapes differ only in one tracked dimension per value,
   ``ba`` in ``a`` and ``bb`` in ``b``. A constant folded from the batch size (``x / tf.shape(x)[0]``)
   differs between the two and is refused.
2. *Rows are independent.* Each value's batch dimension is followed through every instruction by a
   rule for its opcode (elementwise ops keep it, transposes move it, a dot keeps it as a free or
   paired batch dimension, a reduction must not reduce it, a window must not span it, ...): row ``i``
   of every output depends only on row ``i`` of the batched inputs. Opcodes without a rule are
   refused when they touch a batched value.

The caller then runs the kernel for ``T`` rows at a time (padding the last tile) and gets the
result the whole batch would have given.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

from hlo.attributes import ConvDimLabels, Window
from hlo.errors import HloError
from hlo.ir import HloInstruction, HloModule
from hlo.opcodes import Opcode as O
from hlo.passes.dce import DeadCodeElimination
from hlo.shapes import TupleShape, array_shape


@dataclass(frozen=True)
class Batch:
    """Where an array value carries the batch: dim ``dim`` has ``factor`` entries per batch row, rows
    outermost (``[B*6, 8]`` from reshaping ``[B, 6, 8]`` is ``Batch(0, 6)``)."""

    dim: int
    factor: int = 1

    def at(self, dim: int) -> "Batch":
        return Batch(dim, self.factor)


ArrayInfo = Optional[Batch]  # an array's batch, None if batch-free
Info = Union[ArrayInfo, tuple]  # a tuple (of Infos) for tuple values


class NotBatchPolymorphic(HloError):
    """The module cannot be tiled over its batch dimension; the message says where and why."""


@dataclass(frozen=True)
class BatchPolymorphism:
    parameters: tuple[bool, ...]  # parameter k is batched along dim 0
    outputs: tuple[bool, ...]  # ROOT tuple element k is batched along dim 0


@dataclass(frozen=True)
class _Ctx:
    ins: HloInstruction
    other: HloInstruction  # the same instruction in the module lowered at batch ``bb``
    ops: tuple  # operand infos
    shapes: tuple  # operand shapes in module a
    other_shapes: tuple  # operand shapes in module b
    ba: int
    bb: int

    def fail(self, why: str) -> NotBatchPolymorphic:
        meta = self.ins.metadata
        node = meta.get("op_name") if meta is not None else None
        where = f", TF node {node}" if node else ""
        return NotBatchPolymorphic(f"%{self.ins.name} ({self.ins.opcode.text}{where}): {why}")

    @property
    def dims(self) -> tuple[int, ...]:
        """The dims of the instruction's array result (in module a)."""
        return array_shape(self.ins.shape).dims

    def batched(self) -> list[int]:
        return [k for k, i in enumerate(self.ops) if i is not None]


_RULES: dict[O, Callable[[_Ctx], Info]] = {}


def _rule(*opcodes: O):
    def register(fn):
        for op in opcodes:
            _RULES[op] = fn
        return fn
    return register


def _diff_dims(a, b) -> set[int] | None:
    """Dims in which two array shapes differ; None when rank or dtype differ."""
    if a.dtype != b.dtype or len(a.dims) != len(b.dims):
        return None
    return {i for i, (x, y) in enumerate(zip(a.dims, b.dims)) if x != y}


def _shape_batch(ctx: _Ctx) -> ArrayInfo:
    """The batch of a value made without batched operands (iota, broadcast of a batch-free value)."""
    diff = _diff_dims(ctx.ins.shape, ctx.other.shape)
    if not diff:
        return None
    if len(diff) > 1:
        raise ctx.fail(f"shape changes with the batch size in dims {sorted(diff)}")
    e = diff.pop()
    if ctx.dims[e] % ctx.ba:
        raise ctx.fail(f"dim {e} changes with the batch size but is not a multiple of it")
    return Batch(e, ctx.dims[e] // ctx.ba)


def _same(ctx: _Ctx) -> ArrayInfo:
    """Operands that are batched must all be batched alike, which the result keeps."""
    found = {ctx.ops[k] for k in ctx.batched()}
    if len(found) > 1:
        raise ctx.fail(f"operands are batched differently: {sorted(found, key=str)}")
    return found.pop() if found else None


@_rule(O.PARAMETER, O.CONSTANT)
def _leaf(ctx: _Ctx) -> Info:
    return None  # parameters are seeded by the caller; constants must not change (checked)


@_rule(O.IOTA)
def _iota(ctx: _Ctx) -> Info:
    b = _shape_batch(ctx)
    if b is not None and b.dim == ctx.ins.attr("iota_dimension"):
        raise ctx.fail("iota along the batch dimension numbers the rows")
    return b


@_rule(O.BROADCAST)
def _broadcast(ctx: _Ctx) -> Info:
    b = ctx.ops[0]
    if b is None:
        return _shape_batch(ctx)
    return b.at(tuple(ctx.ins.attr("dimensions", ()))[b.dim])


@_rule(O.RESHAPE, O.BITCAST)
def _reshape(ctx: _Ctx) -> Info:
    b = ctx.ops[0]
    if b is None:
        return None
    diff = _diff_dims(ctx.ins.shape, ctx.other.shape)
    if not diff or len(diff) != 1:
        raise ctx.fail("the reshape spreads the batch over several dims")
    e = next(iter(diff))
    # Rows stay whole and outermost in dim e when the dims before it hold the same elements.
    for shape_in, shape_out in ((ctx.shapes[0], ctx.ins.shape), (ctx.other_shapes[0], ctx.other.shape)):
        if math.prod(shape_in.dims[:b.dim]) != math.prod(array_shape(shape_out).dims[:e]):
            raise ctx.fail("the reshape merges the batch dimension with a dimension outside it")
    if ctx.dims[e] % ctx.ba:
        raise ctx.fail("the reshape splits the batch dimension")
    return Batch(e, ctx.dims[e] // ctx.ba)


@_rule(O.TRANSPOSE)
def _transpose(ctx: _Ctx) -> Info:
    b = ctx.ops[0]
    return None if b is None else b.at(tuple(ctx.ins.attr("dimensions")).index(b.dim))


@_rule(O.SLICE)
def _slice(ctx: _Ctx) -> Info:
    b = ctx.ops[0]
    if b is None:
        return None
    for inst, size in ((ctx.ins, ctx.ba), (ctx.other, ctx.bb)):
        s = inst.attr("slice")[b.dim]
        if (s.start, s.limit, s.stride) != (0, size * b.factor, 1):
            raise ctx.fail("the slice does not keep every row")
    return b


@_rule(O.CONCATENATE)
def _concatenate(ctx: _Ctx) -> Info:
    b = _same(ctx)
    if b is not None and (len(ctx.batched()) != len(ctx.ops) or b.dim == tuple(ctx.ins.attr("dimensions"))[0]):
        raise ctx.fail("concatenates along the batch dimension")
    return b


@_rule(O.PAD)
def _pad(ctx: _Ctx) -> Info:
    b = ctx.ops[0]
    if ctx.ops[1] is not None:
        raise ctx.fail("the padding value depends on the batch")
    if b is not None:
        p = ctx.ins.attr("padding")[b.dim]
        if (p.low, p.high, p.interior) != (0, 0, 0):
            raise ctx.fail("pads the batch dimension")
    return b


@_rule(O.REVERSE)
def _reverse(ctx: _Ctx) -> Info:
    b = ctx.ops[0]
    if b is not None and b.dim in tuple(ctx.ins.attr("dimensions", ())):
        raise ctx.fail("reverses the batch dimension")
    return b


def _reduced(ctx: _Ctx, n_inputs: int) -> ArrayInfo:
    if any(i is not None for i in ctx.ops[n_inputs:]):
        raise ctx.fail("the init value depends on the batch")
    b = _same(dataclasses.replace(ctx, ops=ctx.ops[:n_inputs]))
    if b is not None and any(ctx.ops[k] is None for k in range(n_inputs)):
        raise ctx.fail("some inputs are batched and some are not")
    return b


def _per_output(ctx: _Ctx, b: Info) -> Info:
    return tuple(b for _ in ctx.ins.shape.elements) if isinstance(ctx.ins.shape, TupleShape) else b


@_rule(O.REDUCE)
def _reduce(ctx: _Ctx) -> Info:
    b = _reduced(ctx, len(ctx.ops) // 2)
    if b is None:
        return _per_output(ctx, None)
    dims = tuple(ctx.ins.attr("dimensions"))
    if b.dim in dims:
        raise ctx.fail("reduces over the batch dimension")
    return _per_output(ctx, b.at(b.dim - sum(1 for x in dims if x < b.dim)))


@_rule(O.REDUCE_WINDOW)
def _reduce_window(ctx: _Ctx) -> Info:
    b = _reduced(ctx, len(ctx.ops) // 2)
    if b is not None:
        w = ctx.ins.attr("window", Window()).dims
        if w and (w[b.dim].size, w[b.dim].stride, w[b.dim].pad_low, w[b.dim].pad_high, w[b.dim].lhs_dilate,
                  w[b.dim].rhs_dilate) != (1, 1, 0, 0, 1, 1):
            raise ctx.fail("the window spans the batch dimension")
    return _per_output(ctx, b)


@_rule(O.DOT)
def _dot(ctx: _Ctx) -> Info:
    l, r = ctx.ops
    lb, rb = tuple(ctx.ins.attr("lhs_batch_dims", ())), tuple(ctx.ins.attr("rhs_batch_dims", ()))
    lc, rc = tuple(ctx.ins.attr("lhs_contracting_dims", ())), tuple(ctx.ins.attr("rhs_contracting_dims", ()))
    lfree = [i for i in range(len(ctx.shapes[0].dims)) if i not in lb and i not in lc]
    rfree = [i for i in range(len(ctx.shapes[1].dims)) if i not in rb and i not in rc]
    if l is not None and r is not None:
        if l.dim in lb and r.dim == rb[lb.index(l.dim)] and l.factor == r.factor:
            return l.at(lb.index(l.dim))
        raise ctx.fail("both operands are batched, but not along a paired batch dimension")
    if l is not None:
        if l.dim not in lfree:
            raise ctx.fail("contracts over the batch dimension")
        return l.at(len(lb) + lfree.index(l.dim))
    if r is not None:
        if r.dim not in rfree:
            raise ctx.fail("contracts over the batch dimension")
        return r.at(len(lb) + len(lfree) + rfree.index(r.dim))
    return None


@_rule(O.CONVOLUTION)
def _convolution(ctx: _Ctx) -> Info:
    labels: ConvDimLabels = ctx.ins.attr("dim_labels")
    l, r = ctx.ops
    if r is not None:
        raise ctx.fail("the kernel depends on the batch")
    if l is None:
        return None
    if l.dim != labels.input_batch or ctx.ins.attr("batch_group_count", 1) != 1:
        raise ctx.fail("the batch dimension is not the convolution's batch dimension")
    return l.at(labels.output_batch)


@_rule(O.GATHER)
def _gather(ctx: _Ctx) -> Info:
    operand, indices = ctx.ops
    if operand is not None:
        raise ctx.fail("gathers from a batched operand")
    if indices is None:
        return None
    ivd = ctx.ins.attr("index_vector_dim")
    if indices.dim == ivd or ctx.ins.attr("operand_batching_dims", ()):
        raise ctx.fail("the batch dimension indexes the operand")
    index_batch = [i for i in range(len(ctx.shapes[1].dims)) if i != ivd]
    offset = set(ctx.ins.attr("offset_dims", ()))
    out_batch = [i for i in range(len(ctx.dims)) if i not in offset]
    return indices.at(out_batch[index_batch.index(indices.dim)])


@_rule(O.SORT)
def _sort(ctx: _Ctx) -> Info:
    b = _same(ctx)
    if b is not None and (len(ctx.batched()) != len(ctx.ops) or b.dim == tuple(ctx.ins.attr("dimensions"))[0]):
        raise ctx.fail("sorts along the batch dimension")
    return _per_output(ctx, b)


@_rule(O.TOPK)
def _topk(ctx: _Ctx) -> Info:
    b = ctx.ops[0]
    if b is not None and b.dim == len(ctx.shapes[0].dims) - 1:
        raise ctx.fail("top-k along the batch dimension")
    return _per_output(ctx, b)


@_rule(O.FFT)
def _fft(ctx: _Ctx) -> Info:
    b = ctx.ops[0]
    if b is not None and b.dim >= len(ctx.shapes[0].dims) - len(tuple(ctx.ins.attr("fft_length"))):
        raise ctx.fail("transforms along the batch dimension")
    return b


@_rule(O.TUPLE)
def _tuple(ctx: _Ctx) -> Info:
    return tuple(ctx.ops)


@_rule(O.GET_TUPLE_ELEMENT)
def _gte(ctx: _Ctx) -> Info:
    info = ctx.ops[0]
    return None if info is None else info[ctx.ins.attr("index")]


def _elementwise_or_refuse(ctx: _Ctx) -> Info:
    same_rank = ctx.ins.opcode == O.BITCAST_CONVERT and len(ctx.shapes[0].dims) == len(ctx.dims)
    if ctx.ins.opcode.is_elementwise or ctx.ins.opcode in (O.MAP, O.COPY, O.REDUCE_PRECISION) or same_rank:
        return _same(ctx)
    if ctx.batched() or _diff_dims_any(ctx.ins.shape, ctx.other.shape):
        raise ctx.fail("has no batch-polymorphism rule and touches the batch")
    return None if not isinstance(ctx.ins.shape, TupleShape) else tuple(None for _ in ctx.ins.shape.elements)


def _diff_dims_any(a, b) -> bool:
    if isinstance(a, TupleShape):
        return any(_diff_dims_any(x, y) for x, y in zip(a.elements, b.elements))
    return a.dims != b.dims


def _check_shape(ctx: _Ctx, info: Info, a, b) -> None:
    if isinstance(a, TupleShape):
        if not isinstance(b, TupleShape) or len(a.elements) != len(b.elements):
            raise ctx.fail("the two lowerings disagree on the result's tuple shape")
        infos = info if isinstance(info, tuple) else (None,) * len(a.elements)
        for i, x, y in zip(infos, a.elements, b.elements):
            _check_shape(ctx, i, x, y)
        return
    diff = _diff_dims(a, b)
    if diff is None:
        raise ctx.fail("the two lowerings disagree on the result's type or rank")
    if info is None:
        if diff:
            raise ctx.fail(f"its shape changes with the batch size (dims {sorted(diff)}) in a way the "
                           f"rules cannot follow")
        return
    if isinstance(info, tuple):
        raise ctx.fail("a tuple of batches for an array result (a rule's bug)")
    d, f = info.dim, info.factor
    if diff != {d} or a.dims[d] != ctx.ba * f or b.dims[d] != ctx.bb * f:
        raise ctx.fail(f"its batch dimension {d} does not scale with the batch size "
                       f"({list(a.dims)} vs {list(b.dims)})")


def _same_instruction(x: HloInstruction, y: HloInstruction) -> str | None:
    if x.opcode != y.opcode or x.operands != y.operands or x.parameter_number != y.parameter_number:
        return "the two lowerings differ here (opcode or operands)"
    if x.literal != y.literal:
        return "a constant depends on the batch size (a value computed from the batch dimension)"
    keys = set(x.attrs.keys()) | set(y.attrs.keys())
    for key in keys - {"slice", "metadata"}:
        if x.attr(key) != y.attr(key):
            return f"attribute {key} depends on the batch size"
    return None


def batch_polymorphism(a: HloModule, b: HloModule, ba: int, bb: int,
                       batched: Sequence[bool]) -> BatchPolymorphism:
    """Check that ``a`` (lowered at batch ``ba``) and ``b`` (at ``bb``) tile over dim 0 of the parameters
    marked in ``batched``; see the module docstring. Raises ``NotBatchPolymorphic``."""
    if ba == bb or min(ba, bb) < 2:
        raise ValueError(f"need two distinct batch sizes > 1, got {ba} and {bb}")
    dce = DeadCodeElimination()  # a dead constant folded from the batch size changes nothing
    ea, eb = dce.run(a).entry, dce.run(b).entry
    if len(ea) != len(eb):
        raise NotBatchPolymorphic(f"the lowerings at batch {ba} and {bb} have {len(ea)} and {len(eb)} "
                                  f"instructions")
    shapes_a = {i.name: i.shape for i in ea}
    shapes_b = {i.name: i.shape for i in eb}
    infos: dict[str, Info] = {}
    for x, y in zip(ea, eb):
        ctx = _Ctx(x, y, tuple(infos[o] for o in x.operands), tuple(shapes_a[o] for o in x.operands),
                   tuple(shapes_b[o] for o in y.operands), ba, bb)
        if x.name != y.name:
            raise ctx.fail(f"the lowering at batch {bb} names this instruction %{y.name}")
        problem = _same_instruction(x, y)
        if problem:
            raise ctx.fail(problem)
        info: Info
        if x.opcode == O.PARAMETER:
            k = x.parameter_number  # a verified module's parameters have their numbers
            info = Batch(0) if k is not None and k < len(batched) and batched[k] else None
        else:
            info = _RULES.get(x.opcode, _elementwise_or_refuse)(ctx)
        if x.opcode == O.SLICE and info is None and x.attr("slice") != y.attr("slice"):
            raise ctx.fail("attribute slice depends on the batch size")
        _check_shape(ctx, info, x.shape, y.shape)
        infos[x.name] = info
    root = infos[ea.root.name]
    root_infos = root if isinstance(root, tuple) else (root,)
    outputs = []
    for k, info in enumerate(root_infos):
        if isinstance(info, tuple) or (info is not None and info != Batch(0)):
            where = f"at dim {info.dim}" if isinstance(info, Batch) and info.dim else "merged with another dim"
            raise NotBatchPolymorphic(f"output {k} has its batch dimension {where}, not alone at dim 0")
        outputs.append(info is not None)
    params = tuple(bool(k < len(batched) and batched[k]) for k in range(len(ea.parameters)))
    return BatchPolymorphism(params, tuple(outputs))
