"""TF's gather and scatter index checks in generated C (``index_check=``; the spec is hlo/index_check.py).

Before the loop nest of an instruction that computes checked gathers (the gather itself, or a fusion
whose checked gathers read their indices from a fusion parameter), one branch-free (vectorized) pass
per gather reads each index vector once and compares each component once (``(uint64_t)v >= n`` also
catches negatives). Only when it finds a bad index does a second pass find the first in row-major
order, write TF's message into ``err`` and return ``STATUS_INVALID_ARGUMENT``, before anything of
the gather is read. The message is
hlo/index_check.py's text with the run-time numbers as ``%lld`` conversions, so the evaluator and
the kernel say the same. The loop nest's elemental emitter is told which gathers were checked
(``ElementalEmitter.index_checked``); the gather rule refuses one that was not.

A checked scatter (the serial kernel backends/codegen/serial/scatter.py, through the CPU emitter's
``emit_scatter_check``) is checked the same way before it copies its operand or writes an update; the second pass reports the
last bad row, as TF does. Shapes TF refuses whatever the indices hold fail unconditionally. The
status leaves the computation's function with ``return``, and callers (fusions run as calls, while
bodies, conditionals) pass a nonzero status on.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from backends.codegen.abi import STATUS_INVALID_ARGUMENT
from backends.codegen.buffer import IndentedBuffer
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.names import Names
from hlo import index_check as spec
from hlo.attributes import IndexCheck
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.opcodes import Opcode

Reader = Callable[[tuple[str, ...]], str]


def emit_index_checks(buf: IndentedBuffer, names: Names, module: HloModule, comp: HloComputation,
                      inst: HloInstruction, readers: Sequence[Reader]) -> frozenset[str]:
    """Emit the checks of the checked gathers ``inst`` computes, reading its operands through
    ``readers``; returns the names of the gathers checked."""
    if inst.opcode is Opcode.GATHER:
        if inst.attr("index_check", None) is None:
            return frozenset()
        _emit_check(buf, names, inst, comp[inst.operands[0]].shape, comp[inst.operands[1]].shape, readers[1])
        return frozenset({inst.name})
    if inst.opcode is not Opcode.FUSION:
        return frozenset()
    fused = module.computation(inst.attr("calls").name)
    checked = set()
    for g in fused.instructions:
        if g.opcode is not Opcode.GATHER or g.attr("index_check", None) is None:
            continue
        source = fused[g.operands[1]]
        if source.opcode is not Opcode.PARAMETER:
            raise CodegenUnsupported(f"%{g.name}: the indices of a gather with index_check= must be a parameter "
                                     f"of fusion %{inst.name} to be checked before its loop")
        _emit_check(buf, names, g, fused[g.operands[0]].shape, source.shape, readers[source.parameter_number])
        checked.add(g.name)
    return frozenset(checked)


def c_string(text: str) -> str:
    """A C string literal of ``text``."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif " " <= ch < "\x7f":
            out.append(ch)
        else:
            out.extend(f"\\{b:03o}" for b in ch.encode())
    return '"' + "".join(out) + '"'


def _format(template: str, fields: dict[str, str]) -> str:
    """``template`` (spec text with ``@name@`` placeholders) as a printf format: ``%`` doubled, fields in."""
    text = template.replace("%", "%%")
    for key, conversion in fields.items():
        text = text.replace(f"@{key}@", conversion)
    return c_string(text)


def _emit_check(buf: IndentedBuffer, names: Names, gather: HloInstruction, operand, indices, read: Reader) -> None:
    kind = gather.attr("index_check")
    node = spec.node_name(gather)
    smap = gather.attr("start_index_map", ())
    if kind is IndexCheck.TF_GATHER:
        if gather.shape.num_elements == 0:
            return
        row_dims, depth = tuple(indices.dims), None
    else:
        row_dims, depth = tuple(indices.dims[:-1]), indices.dims[-1]
        if math.prod(row_dims) == 0:
            return
        if operand.num_elements == 0:
            _emit_failure(buf, f"%{gather.name} ({kind.value}): index rows into an empty operand",
                          spec.empty_params_message(operand.dims))
            return
    limits = [operand.dims[d] for d in smap]
    if depth is None:
        template = spec.range_message("@P@", "@V0@", limits[0] if limits else 0, node)
    else:
        template = spec.nd_message("@P@", [f"@V{k}@" for k in range(len(limits))], operand.dims, node)
    _emit_rows_check(buf, names, f"%{gather.name} ({kind.value}): TF's check of every index before the gather "
                     "reads", row_dims, depth, limits, read, template, last=False)


def emit_scatter_check(buf: IndentedBuffer, names: Names, scatter: HloInstruction, operand, indices, updates,
                       read: Reader) -> None:
    """Emit TF's check of a scatter with ``index_check=`` (nothing for one without), reading its indices
    through ``read``: before the scatter writes anything, so a refused scatter leaves its result alone."""
    kind = scatter.attr("index_check", None)
    if kind is None:
        return
    node = spec.node_name(scatter)
    problem = spec.scatter_shape_problem(kind, operand.dims, indices.dims, updates.num_elements, node)
    if problem:
        _emit_failure(buf, f"%{scatter.name} ({kind.value}): shapes TF refuses whatever the indices", problem)
        return
    if operand.num_elements == 0:
        return
    row_dims, depth = tuple(indices.dims[:-1]), indices.dims[-1]
    limits = list(operand.dims[:depth])
    template = spec.scatter_row_message("@P@", [f"@V{k}@" for k in range(depth)], operand.dims, node)
    _emit_rows_check(buf, names, f"%{scatter.name} ({kind.value}): TF's check of every index row before the "
                     "scatter writes", row_dims, depth, limits, read, template, last=True)


_STATUS = f"return {STATUS_INVALID_ARGUMENT}; /* TFXLA_STATUS_INVALID_ARGUMENT */"


def _emit_failure(buf: IndentedBuffer, what: str, message: str) -> None:
    """A check that fails whatever the data (the shapes decide): TF's message, status 3."""
    buf.line(f"/* {what} */")
    buf.line(f"snprintf(err, errlen, {_format(message, {})}); {_STATUS}")


def _emit_rows_check(buf: IndentedBuffer, names: Names, what: str, row_dims: tuple[int, ...], depth: int | None,
                     limits: Sequence[int], read: Reader, template: str, last: bool) -> None:
    """Check index component k of every row against ``limits[k]``: a branch-free (vectorized) pass, and only
    on failure a second pass that finds the first (``last``: the last) bad row in row-major order and
    fails with ``template`` (spec text with ``@P@`` for the position, ``@Vk@`` for component k)."""
    if not limits or math.prod(row_dims) == 0:
        return
    buf.line(f"/* {what} */")
    with buf.block(""):
        anybad, pos, bad, vals, done = (names.fresh("anybad"), names.fresh("pos"), names.fresh("bad"),
                                        names.fresh("badv"), names.fresh("checked"))
        buf.line(f"int {anybad} = 0;")
        comps = _row_loops(buf, names, row_dims, depth, limits, read)
        buf.line(f"{anybad} |= {' | '.join(f'((uint64_t){v} >= UINT64_C({n}))' for v, n in zip(comps, limits))};")
        _close_loops(buf, row_dims)
        with buf.block(f"if ({anybad})"):
            buf.line(f"int64_t {pos} = 0, {bad} = -1;")
            buf.line(f"int64_t {vals}[{len(limits)}] = {{0}};")
            comps = _row_loops(buf, names, row_dims, depth, limits, read)
            cond = " || ".join(f"(uint64_t){v} >= UINT64_C({n})" for v, n in zip(comps, limits))
            with buf.block(f"if ({cond})"):
                for k, v in enumerate(comps):
                    buf.line(f"{vals}[{k}] = {v};")
                buf.line(f"{bad} = {pos};")
                if not last:
                    buf.line(f"goto {done};")
            buf.line(f"++{pos};")
            _close_loops(buf, row_dims)
            if not last:
                buf.line(f"{done}:;")
            with buf.block(f"if ({bad} >= 0)"):
                position, args = _position(bad, row_dims)
                fmt = _format(template, {"P": position, **{f"V{k}": "%lld" for k in range(len(limits))}})
                args += [f"(long long){vals}[{k}]" for k in range(len(limits))]
                buf.line(f"snprintf(err, errlen, {fmt}, {', '.join(args)});")
                buf.line(_STATUS)


def _row_loops(buf: IndentedBuffer, names: Names, row_dims, depth, limits, read: Reader) -> list[str]:
    """Open loops over the index rows; returns the row's index components (int64_t locals)."""
    loop_vars = [names.fresh("c") for _ in row_dims]
    for var, n in zip(loop_vars, row_dims):
        buf.line(f"for (int64_t {var} = 0; {var} < {n}; ++{var}) {{")
        buf._level += 1
    comps = []
    for k in range(len(limits)):
        full = tuple(loop_vars) if depth is None else tuple(loop_vars) + (str(k),)
        comps.append(names.fresh("v"))
        buf.line(f"const int64_t {comps[-1]} = (int64_t)({read(full)});")
    return comps


def _close_loops(buf: IndentedBuffer, row_dims) -> None:
    for _ in row_dims:
        buf._level -= 1
        buf.line("}")


def _position(flat: str, dims: Sequence[int]) -> tuple[str, list[str]]:
    """TF's SliceDebugString of row-major position ``flat`` in ``dims``: printf conversions and arguments."""
    if not dims:
        return "", []
    args, stride = [], 1
    for n in reversed(dims):
        args.append(f"(long long)(({flat} / {stride}) % {n})" if stride != 1 else f"(long long)({flat} % {n})")
        stride *= n
    args.reverse()
    return "[" + ",".join("%lld" for _ in dims) + "]", args
