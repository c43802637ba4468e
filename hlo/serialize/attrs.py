"""Instruction attributes -> ``HloInstructionProto`` fields: one table keyed by the attribute's text name.

``WRITERS[key](proto, inst, value, ids)`` sets the fields attribute ``key`` stands for (``ids`` resolves
instruction names to ids). The called-computation attributes (``to_apply=``, ``body=``, ...) are written by
``module.py`` in XLA's order, and ``metadata=`` maps its keys onto ``OpMetadata``'s fields. A key missing
from the table has no proto field and is refused by ``write_attr``, as is a ``Raw`` value (text we never
interpreted; but for ``backend_config=``, whose proto field is that text). Our own attributes, which XLA
does not have (``index_check=`` and the backends' kernel-shape annotations, ``OWN_ATTRS``), travel in the
instruction's ``frontend_attributes`` map, XLA's place for attributes a frontend adds, as
``tfxla.<key>`` -> their text form (what ``hlo/text`` prints and parses); XLA ignores keys it does not know.
"""

from __future__ import annotations

from typing import Any, Callable

from tensorflow.compiler.xla import xla_data_pb2
from tensorflow.compiler.xla.service import hlo_pb2

from hlo.attributes import ConvDimLabels, Ident, OpMetadata, PadDim, Raw, SliceDim, StrMap, Window
from hlo.ir import HloInstruction
from hlo.opcodes import CALLED_COMPUTATION_ATTRS, Opcode
from hlo.serialize.shapes import Unrepresentable
from hlo.text import annotation_codecs
from hlo.text.attr_codecs import format_value

Proto = Any  # hlo_pb2.HloInstructionProto (TensorFlow ships no type information)
Writer = Callable[[Proto, HloInstruction, Any, Callable[[str], int]], None]


def _field(name: str) -> Writer:
    """The value goes to the proto field ``name`` unchanged (a scalar, or a list for a repeated field)."""
    def write(proto: Proto, _inst, value, _ids) -> None:
        if isinstance(value, tuple):
            getattr(proto, name).extend(value)
        else:
            setattr(proto, name, value)
    return write


def _sub(message: str, name: str) -> Writer:
    """The value goes to field ``name`` of the sub-message ``message`` (dimension numbers)."""
    def write(proto: Proto, _inst, value, _ids) -> None:
        target = getattr(getattr(proto, message), name)
        if isinstance(value, tuple):
            target.extend(value)
        else:
            setattr(getattr(proto, message), name, value)
    return write


def _index_vector_dim(proto: Proto, inst: HloInstruction, value: int, _ids) -> None:
    numbers = "scatter_dimension_numbers" if inst.opcode is Opcode.SCATTER else "gather_dimension_numbers"
    getattr(proto, numbers).index_vector_dim = value


def _enum(field: str, enum_type, prefix: str = "") -> Writer:
    """An ``Ident``/enum text (``rng_uniform``, ``API_VERSION_ORIGINAL``) as the proto enum of that name."""
    def write(proto: Proto, _inst, value, _ids) -> None:
        name = prefix + str(getattr(value, "value", value)).upper()
        if name not in enum_type.keys():
            raise Unrepresentable(f"{value} is none of {', '.join(enum_type.keys())}")
        setattr(proto, field, enum_type.Value(name))
    return write


def _algorithm(proto: Proto, inst: HloInstruction, value: Ident, ids) -> None:
    if inst.opcode is Opcode.RNG_BIT_GENERATOR:
        _enum("rng_algorithm", xla_data_pb2.RandomAlgorithm)(proto, inst, value, ids)
    else:  # a dot's or convolution's algorithm=dot_bf16_bf16_f32
        name = "ALG_" + str(value).upper()
        if name not in xla_data_pb2.PrecisionConfig.Algorithm.keys():
            raise Unrepresentable(f"{value} is no PrecisionConfig algorithm")
        proto.precision_config.algorithm = xla_data_pb2.PrecisionConfig.Algorithm.Value(name)


def _operand_precision(proto: Proto, _inst, value: tuple[Ident, ...], _ids) -> None:
    precisions = xla_data_pb2.PrecisionConfig.Precision
    for p in value:
        if str(p).upper() not in precisions.keys():
            raise Unrepresentable(f"{p} is none of {', '.join(precisions.keys())}")
        proto.precision_config.operand_precision.append(precisions.Value(str(p).upper()))


def _slice(proto: Proto, _inst, value: tuple[SliceDim, ...], _ids) -> None:
    proto.slice_dimensions.extend(
        hlo_pb2.HloInstructionProto.SliceDimensions(start=d.start, limit=d.limit, stride=d.stride) for d in value)


def _padding(proto: Proto, _inst, value: tuple[PadDim, ...], _ids) -> None:
    proto.padding_config.dimensions.extend(
        xla_data_pb2.PaddingConfig.PaddingConfigDimension(edge_padding_low=d.low, edge_padding_high=d.high,
                                                          interior_padding=d.interior) for d in value)


def _window(proto: Proto, _inst, value: Window, _ids) -> None:
    proto.window.dimensions.extend(
        xla_data_pb2.WindowDimension(size=d.size, stride=d.stride, padding_low=d.pad_low, padding_high=d.pad_high,
                                     window_dilation=d.rhs_dilate, base_dilation=d.lhs_dilate,
                                     window_reversal=d.reversal) for d in value.dims)


def _dim_labels(proto: Proto, _inst, d: ConvDimLabels, _ids) -> None:
    proto.convolution_dimension_numbers.CopyFrom(xla_data_pb2.ConvolutionDimensionNumbers(
        input_batch_dimension=d.input_batch, input_feature_dimension=d.input_feature,
        input_spatial_dimensions=d.input_spatial, kernel_input_feature_dimension=d.kernel_input_feature,
        kernel_output_feature_dimension=d.kernel_output_feature, kernel_spatial_dimensions=d.kernel_spatial,
        output_batch_dimension=d.output_batch, output_feature_dimension=d.output_feature,
        output_spatial_dimensions=d.output_spatial))


# metadata keys XLA's printer writes -> their OpMetadata field's value type (profile_type is a list: none)
_METADATA_FIELDS: dict[str, type] = {
    **{k: str for k in ("op_type", "op_name", "source_file", "deduplicated_name", "scheduling_name")},
    **{k: int for k in ("source_line", "source_end_line", "source_column", "source_end_column", "stack_frame_id",
                        "size_of_generated_code_in_bytes", "size_of_memory_working_set_in_bytes")},
}


def _metadata(proto: Proto, _inst, value: OpMetadata, _ids) -> None:
    for key, v in value.fields:
        if not isinstance(v, _METADATA_FIELDS.get(key, type(None))):
            raise Unrepresentable(f"metadata key {key}={v} has no OpMetadata field of its type")
        setattr(proto.metadata, key, v)


def _frontend_attributes(proto: Proto, _inst, value: StrMap, _ids) -> None:
    proto.frontend_attributes.map.update(dict(value.items))


def _parameter_replication(proto: Proto, _inst, value: tuple[bool, ...], _ids) -> None:
    proto.parameter_replication.replicated_at_leaf_buffers.extend(value)


def _control_predecessors(proto: Proto, _inst, value, ids) -> None:
    proto.control_predecessor_ids.extend(ids(ref.name) for ref in value)


def _called(_proto: Proto, _inst, _value, _ids) -> None:
    """Written by ``module.py`` (XLA orders a while's ``body`` before its ``condition``)."""


def _backend_config(proto: Proto, _inst, value: str | Raw, _ids) -> None:
    """XLA's backend_config is an opaque string in the proto too: quoted or as bare JSON, the text is it."""
    proto.backend_config = (value.text if isinstance(value, Raw) else value).encode()


_GATHER = ("offset_dims", "collapsed_slice_dims", "start_index_map", "operand_batching_dims",
           "start_indices_batching_dims")
_SCATTER = ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims", "input_batching_dims",
            "scatter_indices_batching_dims")
_DOT = {"lhs_batch_dims": "lhs_batch_dimensions", "rhs_batch_dims": "rhs_batch_dimensions",
        "lhs_contracting_dims": "lhs_contracting_dimensions", "rhs_contracting_dims": "rhs_contracting_dimensions"}
_SAME_NAME = ("dimensions", "dynamic_slice_sizes", "fft_length", "feature_group_count", "batch_group_count",
              "exponent_bits", "mantissa_bits", "k", "is_stable", "indices_are_sorted", "unique_indices", "largest",
              "custom_call_has_side_effect", "constrain_layout", "custom_call_target")

WRITERS: dict[str, Writer] = {
    **{key: _field(key) for key in _SAME_NAME},
    **{key: _sub("gather_dimension_numbers", key) for key in _GATHER},
    **{key: _sub("scatter_dimension_numbers", key) for key in _SCATTER},
    **{key: _sub("dot_dimension_numbers", name) for key, name in _DOT.items()},
    **{key: _called for key in CALLED_COMPUTATION_ATTRS},
    "index_vector_dim": _index_vector_dim,
    "slice_sizes": _field("gather_slice_sizes"),
    "index": _field("tuple_index"),
    "iota_dimension": lambda proto, _inst, value, _ids: proto.dimensions.append(value),
    "direction": lambda proto, _inst, value, _ids: setattr(proto, "comparison_direction", value.value),
    "type": lambda proto, _inst, value, _ids: setattr(proto, "comparison_type", value.value),
    "fft_type": _enum("fft_type", xla_data_pb2.FftType),
    "kind": lambda proto, _inst, value, _ids: setattr(proto, "fusion_kind", value.value),
    "distribution": _enum("distribution", xla_data_pb2.RandomDistribution),
    "algorithm": _algorithm,
    "api_version": _enum("custom_call_api_version", hlo_pb2.CustomCallApiVersion),
    "custom_call_schedule": _enum("custom_call_schedule", hlo_pb2.CustomCallSchedule),
    "operand_precision": _operand_precision,
    "slice": _slice,
    "padding": _padding,
    "window": _window,
    "dim_labels": _dim_labels,
    "metadata": _metadata,
    "frontend_attributes": _frontend_attributes,
    "backend_config": _backend_config,
    "parameter_replication": _parameter_replication,
    "control-predecessors": _control_predecessors,
}


# our attributes with no XLA counterpart: written to frontend_attributes as "tfxla.<key>" -> text
OWN_ATTRS = frozenset(annotation_codecs.READERS) | {"index_check"}
OWN_PREFIX = "tfxla."


# attributes whose proto field is itself text, so that text we keep verbatim is their value
_TEXT_FIELDS = frozenset({"backend_config"})


def write_attr(proto: Proto, inst: HloInstruction, key: str, value, ids: Callable[[str], int]) -> None:
    """Set the fields of attribute ``key``; ``Unrepresentable`` when it is raw text or has no proto field."""
    if isinstance(value, Raw) and key not in _TEXT_FIELDS:
        raise Unrepresentable(f"attribute {key}={value} is text we keep uninterpreted")
    if key in OWN_ATTRS:
        proto.frontend_attributes.map[OWN_PREFIX + key] = format_value(value)
        return
    writer = WRITERS.get(key)
    if writer is None:
        raise Unrepresentable(f"attribute {key}= has no HloInstructionProto field")
    try:
        writer(proto, inst, value, ids)
    except Unrepresentable as e:
        raise Unrepresentable(f"attribute {key}: {e}") from None


__all__ = ["OWN_ATTRS", "OWN_PREFIX", "WRITERS", "write_attr"]
