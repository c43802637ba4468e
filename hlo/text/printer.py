"""Printer for XLA's HLO text format (``HloModule.to_text()``).

Output follows XLA's layout: header line, then each computation (callees
first, ENTRY last) separated by blank lines, one instruction per line,
attributes in their stored order. ``parse_module(print_module(m)) == m``.
"""

from __future__ import annotations

from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.literal import format_literal
from hlo.opcodes import Opcode
from hlo.shapes import join_indexed
from hlo.text.attr_codecs import format_value


def format_instruction(inst: HloInstruction, comp: HloComputation | None = None, *,
                       is_root: bool = False, print_operand_shapes: bool = True,
                       print_metadata: bool = True) -> str:
    if inst.opcode is Opcode.PARAMETER:
        args = str(inst.parameter_number)
    elif inst.opcode is Opcode.CONSTANT:
        # an unverified module may lack the value: print it elided, as XLA does for large literals
        args = format_literal(inst.literal) if inst.literal is not None else "{...}"
    else:
        parts = []
        for op in inst.operands:
            operand = comp.by_name.get(op) if (comp is not None and print_operand_shapes) else None
            parts.append(f"{operand.shape} %{op}" if operand is not None else f"%{op}")
        args = join_indexed(parts)
    text = f"{'ROOT ' if is_root else ''}%{inst.name} = {inst.shape} {inst.opcode.text}({args})"
    for key, value in inst.attrs.items():
        if key == "metadata" and not print_metadata:
            continue
        text += f", {key}={format_value(value)}"
    return text


def format_computation(comp: HloComputation, *, is_entry: bool = False, print_operand_shapes: bool = True,
                       print_metadata: bool = True) -> str:
    params = ", ".join(f"{p.name}: {p.shape.short()}" for p in comp.parameters)
    root = comp.by_name.get(comp.root_name)
    result = root.shape.short() if root is not None else "()"
    lines = [f"{'ENTRY ' if is_entry else ''}%{comp.name} ({params}) -> {result} {{"]
    for inst in comp.instructions:
        lines.append("  " + format_instruction(
            inst, comp, is_root=inst.name == comp.root_name,
            print_operand_shapes=print_operand_shapes, print_metadata=print_metadata))
    tail = "".join(f", {k}={format_value(v)}" for k, v in comp.attrs.items())
    lines.append("}" + tail)
    return "\n".join(lines)


def print_module(module: HloModule, *, print_operand_shapes: bool = True, print_metadata: bool = True) -> str:
    header = f"HloModule {module.name}"
    for key, value in module.attrs.items():
        header += f", {key}={format_value(value)}"
    if "entry_computation_layout" not in module.attrs and module.entry_name in module.by_name:
        entry = module.entry
        if entry.root_name in entry.by_name:  # else the verifier reports the missing root
            header += f", entry_computation_layout={format_value(entry.program_shape)}"
    blocks = [header]
    for comp in module.computations:
        blocks.append(format_computation(
            comp, is_entry=comp.name == module.entry_name,
            print_operand_shapes=print_operand_shapes, print_metadata=print_metadata))
    return "\n\n".join(blocks) + "\n"
