"""``HloModule`` -> ``xla.HloModuleProto``: ids, computations, instructions (see ``hlo/serialize/__init__``)."""

from __future__ import annotations

from tensorflow.compiler.xla import xla_data_pb2
from tensorflow.compiler.xla.service import hlo_pb2

from hlo.attributes import CompRef, ProgramShape
from hlo.errors import HloError
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.opcodes import Opcode
from hlo.serialize.attrs import write_attr
from hlo.serialize.shapes import Unrepresentable, literal_proto, shape_proto
from hlo.shapes import array_shape

# The order XLA keeps an instruction's called computations in, where it is not the text's attribute order.
_CALL_ORDER: dict[Opcode, tuple[str, ...]] = {
    Opcode.WHILE: ("body", "condition"),
    Opcode.CONDITIONAL: ("true_computation", "false_computation", "branch_computations"),
}


def _default_precision(proto: hlo_pb2.HloInstructionProto, inst: HloInstruction, _comp: HloComputation) -> None:
    if not proto.precision_config.operand_precision:
        proto.precision_config.operand_precision.extend([xla_data_pb2.PrecisionConfig.DEFAULT] * len(inst.operands))


def _default_groups(proto: hlo_pb2.HloInstructionProto, inst: HloInstruction, comp: HloComputation) -> None:
    _default_precision(proto, inst, comp)
    proto.feature_group_count = proto.feature_group_count or 1
    proto.batch_group_count = proto.batch_group_count or 1


def _default_comparison_type(proto: hlo_pb2.HloInstructionProto, inst: HloInstruction,
                             comp: HloComputation) -> None:
    """XLA's ``DefaultComparisonType`` of the operands' element type."""
    if not proto.comparison_type:
        dtype = array_shape(comp[inst.operands[0]].shape).dtype
        proto.comparison_type = ("FLOAT" if dtype.is_float or dtype.is_complex
                                 else "SIGNED" if dtype.is_signed_int else "UNSIGNED")


# What XLA's parser fills in where the text leaves an attribute out (it prints none of these defaults).
_XLA_DEFAULTS = {Opcode.DOT: _default_precision, Opcode.CONVOLUTION: _default_groups,
                 Opcode.COMPARE: _default_comparison_type}
# Module header attributes with no HloModuleProto field (HloModuleConfig state), and the one value each may
# have: the one that needs no field. (entry_computation_layout is host_program_shape; is_scheduled=true the
# schedule ``_schedule`` writes.)
_HEADER_DEFAULTS = {"alias_passthrough_params": False}


class ProtoConversionError(HloError):
    """A module that cannot be an ``HloModuleProto`` faithfully; names the computation, instruction, attribute."""

    def __init__(self, message: str, computation: str | None = None, instruction: str | None = None):
        where = f"computation %{computation}" if computation else "module header"
        if instruction is not None:
            where += f", instruction %{instruction}"
        super().__init__(f"cannot serialize as xla.HloModuleProto: {where}: {message}")
        self.computation = computation
        self.instruction = instruction


def instruction_id(computation_id: int, index: int) -> int:
    """XLA's unique id of the ``index``-th (from 0) instruction of computation ``computation_id``."""
    return computation_id << 32 | (index + 1)


def _program_shape(params, result, names) -> xla_data_pb2.ProgramShapeProto:
    return xla_data_pb2.ProgramShapeProto(parameters=[shape_proto(p) for p in params], result=shape_proto(result),
                                          parameter_names=names)


def _called_ids(inst: HloInstruction, comp_ids: dict[str, int]) -> list[int]:
    order = _CALL_ORDER.get(inst.opcode)
    keys = order if order is not None else [k for k in inst.attrs if k in inst.opcode.calls]
    ids: list[int] = []
    for key in keys:
        value = inst.attrs.get(key)
        refs = value if isinstance(value, tuple) else (value,) if value is not None else ()
        ids.extend(comp_ids[r.name] for r in refs if isinstance(r, CompRef))
    return ids


def _instruction(inst: HloInstruction, comp: HloComputation, inst_ids: dict[str, int], comp_ids: dict[str, int]) -> hlo_pb2.HloInstructionProto:
    proto = hlo_pb2.HloInstructionProto(name=inst.name, opcode=inst.opcode.text, shape=shape_proto(inst.shape),
                                        id=inst_ids[inst.name], operand_ids=[inst_ids[o] for o in inst.operands],
                                        called_computation_ids=_called_ids(inst, comp_ids))
    for always in ("metadata", "frontend_attributes", "statistics_viz"):  # XLA writes them, empty or not
        getattr(proto, always).SetInParent()
    if inst.parameter_number is not None:
        proto.parameter_number = inst.parameter_number
    if inst.literal is not None:
        proto.literal.CopyFrom(literal_proto(inst.literal))
    for key, value in inst.attrs.items():
        write_attr(proto, inst, key, value, inst_ids.__getitem__)
    fill_defaults = _XLA_DEFAULTS.get(inst.opcode)
    if fill_defaults is not None:
        fill_defaults(proto, inst, comp)
    return proto


def _computation(comp: HloComputation, comp_id: int, comp_ids: dict[str, int],
                 fusion_bodies: set[str]) -> hlo_pb2.HloComputationProto:
    inst_ids = {inst.name: instruction_id(comp_id, k) for k, inst in enumerate(comp.instructions)}
    proto = hlo_pb2.HloComputationProto(name=comp.name, id=comp_id, root_id=inst_ids[comp.root_name],
                                        is_fusion_computation=comp.name in fusion_bodies)
    for inst in comp.instructions:
        try:
            proto.instructions.append(_instruction(inst, comp, inst_ids, comp_ids))
        except Unrepresentable as e:
            raise ProtoConversionError(str(e), comp.name, inst.name) from None
    for key, value in comp.attrs.items():
        if key != "execution_thread" or not isinstance(value, str):
            raise ProtoConversionError(f"computation attribute {key}={value} has no HloComputationProto field",
                                       comp.name)
        proto.execution_thread = value
    try:
        proto.program_shape.CopyFrom(_program_shape([p.shape for p in comp.parameters], comp.root.shape,
                                                     [p.name for p in comp.parameters]))
    except Unrepresentable as e:
        raise ProtoConversionError(str(e), comp.name) from None
    return proto


def _check_header(module: HloModule) -> None:
    for key, value in module.attrs.items():
        if (key, type(value)) in (("entry_computation_layout", ProgramShape), ("is_scheduled", bool)):
            continue
        if key in _HEADER_DEFAULTS and value == _HEADER_DEFAULTS[key]:
            continue
        raise ProtoConversionError(f"module attribute {key}={value} has no HloModuleProto field")


def _schedule(proto: hlo_pb2.HloModuleProto) -> None:
    """An ``is_scheduled=true`` module's schedule: each non-fusion computation runs its instructions in the
    order the text lists them (what XLA's printer writes and its parser reads back as the sequence)."""
    for comp in proto.computations:
        if not comp.is_fusion_computation:
            proto.schedule.sequences[comp.id].instruction_ids.extend(i.id for i in comp.instructions)


def module_proto(module: HloModule) -> hlo_pb2.HloModuleProto:
    """``module`` as XLA's ``HloModuleProto``; ``ProtoConversionError`` for what has no faithful proto form."""
    _check_header(module)
    comp_ids = {comp.name: k + 1 for k, comp in enumerate(module.computations)}
    fusion_bodies = {name for _c, inst in module.instructions() if inst.opcode is Opcode.FUSION
                     for name in inst.called_computations}
    proto = hlo_pb2.HloModuleProto(name=module.name, entry_computation_name=module.entry_name,
                                   entry_computation_id=comp_ids[module.entry_name])
    proto.computations.extend(_computation(c, comp_ids[c.name], comp_ids, fusion_bodies)
                              for c in module.computations)
    if module.attrs.get("is_scheduled", False):
        _schedule(proto)
    layout = module.entry_layout
    try:
        proto.host_program_shape.CopyFrom(_program_shape(layout.parameters, layout.result,
                                                         [f"p{k}" for k in range(len(layout.parameters))]))
    except Unrepresentable as e:
        raise ProtoConversionError(f"entry_computation_layout: {e}") from None
    return proto


def serialize_module(module: HloModule) -> bytes:
    """``module_proto(module).SerializeToString()``: the bytes of TensorFlow's ``hlo_serialized`` stage."""
    return module_proto(module).SerializeToString()


__all__ = ["ProtoConversionError", "instruction_id", "module_proto", "serialize_module"]
