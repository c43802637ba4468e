"""``hlo/serialize`` (our HloModule as XLA's ``HloModuleProto``) and the ``*_serialized`` compiler-IR stages.

The reference is XLA itself: for each function, ``tf.function(jit_compile=True)``'s ``hlo`` and
``optimized_hlo`` texts are parsed by our parser and serialized by ours, and every instruction of the result
must equal the one in XLA's own ``hlo_serialized`` / ``optimized_hlo_serialized`` bytes of the same module (matched by computation and instruction name, ids replaced by
the names they refer to), field by field: opcode, shape, operands, called computations, literal, every
attribute field, metadata, backend_config; so must the computations' roots, signatures and fusion marks and
the optimized module's schedule.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.compiler.xla import xla_data_pb2
from tensorflow.compiler.xla.service import hlo_pb2

import hlo
import tfxla_plugin
from hlo.serialize import ProtoConversionError, module_proto

RNG = np.random.default_rng(0)


def _conv(x, k):
    return tf.nn.relu(tf.nn.conv2d(x, k, strides=2, padding="SAME") + 0.5)


def _loop(x):
    return tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 2.0), (0, x))[1]


def _constants(x):  # a constant of each element type XLA's LiteralProto stores differently
    h = tf.cast(x, tf.float16) * tf.constant([1.5, -2.0], tf.float16)
    b = tf.cast(x, tf.bfloat16) + tf.constant([0.25, 3.0], tf.bfloat16)
    c = tf.complex(x, x) * tf.constant([1 + 2j, -3j], tf.complex64)
    i = tf.cast(x, tf.int8) + tf.constant([-7, 5], tf.int8)
    u = tf.cast(x, tf.uint8) + tf.constant([200, 1], tf.uint8)
    d = tf.cast(x, tf.float64) * tf.constant([1e-300, 2.5], tf.float64)
    p = tf.logical_and(x > 0, tf.constant([True, False]))
    n = tf.cast(x, tf.int64) + tf.constant([2**40, -3], tf.int64)
    return h, b, c, i, u, d, p, n


def _max_pool_grad(x):  # select-and-scatter
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.nn.max_pool2d(x, 2, 2, "VALID")
    return tape.gradient(y, x)


def _f32(*dims):
    return tf.constant(RNG.standard_normal(dims).astype(np.float32))


CASES = {
    "matmul_softmax": (lambda x, w: tf.nn.softmax(tf.matmul(x, w) + 1.5), (_f32(2, 3), _f32(3, 4))),
    "conv_layer": (_conv, (_f32(1, 8, 8, 3), _f32(3, 3, 3, 4))),
    "while_loop": (_loop, (_f32(4),)),
    "reduce": (lambda x: tf.reduce_max(x, axis=1) + tf.reduce_sum(x), (_f32(3, 5),)),
    "gather": (lambda x, i: tf.gather(x, i, axis=1), (_f32(3, 5), tf.constant([0, 2, 4]))),
    "sort": (lambda x: tf.sort(x, axis=-1, direction="DESCENDING"), (_f32(3, 5),)),
    "scatter": (lambda x: tf.tensor_scatter_nd_add(x, [[0], [2]], tf.ones((2, 4))), (_f32(3, 4),)),
    "slice_pad_batch_dot": (lambda x: tf.einsum("bij,bjk->bik", tf.pad(x[:, 1:, ::2], [[0, 0], [1, 0], [0, 1]]), x),
                            (_f32(2, 3, 3),)),
    "fft": (lambda x: tf.signal.rfft(x), (_f32(3, 8),)),
    "max_pool": (lambda x: tf.nn.max_pool2d(x, 2, 2, "VALID"), (_f32(1, 4, 4, 2),)),
    "max_pool_grad": (_max_pool_grad, (_f32(1, 4, 4, 2),)),
    "cond": (lambda x: tf.cond(tf.reduce_sum(x) > 0, lambda: x * 2.0, lambda: -x), (_f32(3),)),
    "case": (lambda i, x: tf.switch_case(i, [lambda: x + 1.0, lambda: x * 3.0, lambda: tf.sin(x)]),
             (tf.constant(1), _f32(3))),
    "constants": (_constants, (_f32(2),)),
}


def _by_name(module: hlo_pb2.HloModuleProto) -> dict:
    """(computation, instruction) name -> (the instruction with ids cleared, operand names, called names)."""
    computations = {c.id: c.name for c in module.computations}
    instructions = {i.id: i.name for c in module.computations for i in c.instructions}
    out = {}
    for comp in module.computations:
        for inst in comp.instructions:
            plain = hlo_pb2.HloInstructionProto()
            plain.CopyFrom(inst)
            for field in ("id", "operand_ids", "called_computation_ids"):
                plain.ClearField(field)
            out[comp.name, inst.name] = (plain, [instructions[i] for i in inst.operand_ids],
                                         [computations[c] for c in inst.called_computation_ids])
    return out


def _computations(module: hlo_pb2.HloModuleProto) -> dict:
    instructions = {i.id: i.name for c in module.computations for i in c.instructions}
    return {c.name: (instructions[c.root_id], c.program_shape, c.is_fusion_computation) for c in module.computations}


def _schedule(module: hlo_pb2.HloModuleProto) -> dict[str, list[str]]:
    names = {i.id: i.name for c in module.computations for i in c.instructions}
    computations = {c.id: c.name for c in module.computations}
    return {computations[k]: [names[i] for i in seq.instruction_ids] for k, seq in module.schedule.sequences.items()}


@pytest.mark.parametrize("stage", ["hlo", "optimized_hlo"])
@pytest.mark.parametrize("case", CASES)
def test_our_proto_of_xlas_hlo_equals_xlas_own(case, stage) -> None:
    fn, args = CASES[case]
    ir = tf.function(fn, jit_compile=True).experimental_get_compiler_ir(*args)
    xla = hlo_pb2.HloModuleProto.FromString(ir(stage=stage + "_serialized"))
    module = hlo.parse_module(ir(stage=stage))
    if stage == "optimized_hlo":  # HloModuleConfig state XLA's text prints and its proto has no field for
        assert module.attrs["alias_passthrough_params"] is True and module.attrs["is_scheduled"] is True
        module = module.replace(attrs=module.attrs.remove("alias_passthrough_params"))
    ours = hlo_pb2.HloModuleProto.FromString(module_proto(module).SerializeToString())
    theirs, mine = _by_name(xla), _by_name(ours)
    assert theirs.keys() == mine.keys()
    for key in theirs:
        assert mine[key] == theirs[key], key
    assert _computations(ours) == _computations(xla)
    assert _schedule(ours) == _schedule(xla) and bool(_schedule(ours)) == (stage == "optimized_hlo")
    entry = {c.id: c.name for c in xla.computations}[xla.entry_computation_id]
    assert (ours.name, ours.entry_computation_name, ours.host_program_shape) == (
        xla.name, xla.entry_computation_name, xla.host_program_shape)
    assert {c.id: c.name for c in ours.computations}[ours.entry_computation_id] == entry
    ids = [i.id for c in ours.computations for i in c.instructions]
    assert len(set(ids)) == len(ids) and all(i.id >> 32 == c.id for c in ours.computations for i in c.instructions)
    # callees before callers, as XLA requires of a module's computations
    position = {c.id: k for k, c in enumerate(ours.computations)}
    for k, comp in enumerate(ours.computations):
        assert all(position[c] < k for i in comp.instructions for c in i.called_computation_ids)


def test_hlo_serialized_stage_of_our_function_is_the_clusters_module() -> None:
    x, w = _f32(2, 3), _f32(3, 4)
    ir = tfxla_plugin.function(lambda x, w: tf.nn.softmax(tf.matmul(x, w))).experimental_get_compiler_ir(x, w)
    blob = ir(stage="hlo_serialized")
    assert isinstance(blob, bytes)
    proto = hlo_pb2.HloModuleProto.FromString(blob)
    assert proto == module_proto(hlo.parse_module(ir(stage="hlo")))
    entry = next(c for c in proto.computations if c.id == proto.entry_computation_id)
    params = sorted((i for i in entry.instructions if i.opcode == "parameter"), key=lambda i: i.parameter_number)
    assert [(list(p.shape.dimensions), p.shape.element_type) for p in params] == [
        ([2, 3], xla_data_pb2.F32), ([3, 4], xla_data_pb2.F32)]
    root = next(i for i in entry.instructions if i.id == entry.root_id)
    assert root.opcode == "tuple" and [list(s.dimensions) for s in root.shape.tuple_shapes] == [[2, 4]]
    assert list(proto.host_program_shape.result.tuple_shapes[0].dimensions) == [2, 4]


def test_a_function_of_two_clusters_gets_a_proto_per_cluster() -> None:
    def fn(x):  # the string round trip stays in TensorFlow, splitting the math into two clusters
        y = tf.sin(tf.exp(x) * 2.0 + 1.0) - 3.0
        z = tf.strings.to_number(tf.strings.as_string(y))
        return tf.cos(tf.tanh(z) + 1.0) * 4.0 - 2.0

    ir = tfxla_plugin.function(fn, jit_compile="auto").experimental_get_compiler_ir(_f32(3))
    blobs = ir(stage="hlo_serialized")
    texts = ir(stage="hlo").split("\nHloModule ")
    assert isinstance(blobs, list) and len(blobs) == len(texts) == 2
    for blob, text in zip(blobs, texts):
        module = hlo.parse_module(text if text.startswith("HloModule") else "HloModule " + text)
        assert hlo_pb2.HloModuleProto.FromString(blob) == module_proto(module)


def test_optimized_serialized_stages_mark_fusion_computations() -> None:
    ir = tfxla_plugin.function(lambda x: x * 2.0 + 1.0).experimental_get_compiler_ir(_f32(3))
    blob = ir(stage="optimized_hlo_serialized")
    assert blob == ir(stage="optimized_hlo_proto_serialized")
    proto = hlo_pb2.HloModuleProto.FromString(blob)
    assert proto == module_proto(hlo.parse_module(ir(stage="optimized_hlo")))
    fusions = [i for c in proto.computations for i in c.instructions if i.opcode == "fusion"]
    assert fusions and all(i.fusion_kind == "kLoop" for i in fusions)
    called = {c for i in fusions for c in i.called_computation_ids}
    assert called == {c.id for c in proto.computations if c.is_fusion_computation}


def test_raw_attribute_is_refused_naming_the_instruction() -> None:
    module = hlo.parse_module("""HloModule m
ENTRY %e (p: f32[2]) -> f32[2] {
  %p = f32[2]{0} parameter(0)
  ROOT %neg.7 = f32[2]{0} negate(f32[2]{0} %p), sharding={replicated}
}""")
    with pytest.raises(ProtoConversionError, match=r"computation %e, instruction %neg\.7: attribute "
                                                   r"sharding=\{replicated\} is text we keep uninterpreted"):
        module_proto(module)


def test_elided_constant_and_verbatim_layout_are_refused() -> None:
    elided = hlo.parse_module("""HloModule m
ENTRY %e () -> f32[20] {
  ROOT %c = f32[20]{0} constant({...})
}""")
    with pytest.raises(ProtoConversionError, match=r"instruction %c: the constant's values were elided"):
        module_proto(elided)
    tiled = hlo.parse_module("""HloModule m
ENTRY %e (p: f32[8,128]) -> f32[8,128] {
  ROOT %p = f32[8,128]{1,0:T(8,128)} parameter(0)
}""")
    with pytest.raises(ProtoConversionError, match=r"instruction %p: layout \{1,0:T\(8,128\)\} carries text"):
        module_proto(tiled)


def test_our_own_attributes_travel_as_frontend_attributes_in_their_text_form() -> None:
    # our lowering of GatherV2 checks its indices as TF does (index_check=), which XLA has no field for
    gather = tfxla_plugin.function(lambda x, i: tf.gather(x, i))
    ir = gather.experimental_get_compiler_ir(_f32(4, 2), tf.constant([1, 3]))
    module = hlo_pb2.HloModuleProto.FromString(ir(stage="hlo_serialized"))
    marked = [i for c in module.computations for i in c.instructions if "tfxla.index_check" in i.frontend_attributes.map]
    assert [i.opcode for i in marked] == ["gather"]
    assert f"index_check={marked[0].frontend_attributes.map['tfxla.index_check']}" in ir(stage="hlo")
    # the C backend's kernel-shape annotation of a row reduction (softmax): its printed text, verbatim
    softmax = tfxla_plugin.function(tf.nn.softmax).experimental_get_compiler_ir(_f32(2, 4))
    module = hlo_pb2.HloModuleProto.FromString(softmax(stage="optimized_hlo_serialized"))
    programs = [i.frontend_attributes.map["tfxla.row_program"] for c in module.computations for i in c.instructions
                if "tfxla.row_program" in i.frontend_attributes.map]
    assert programs and all(f"row_program={p}" in softmax(stage="optimized_hlo") for p in programs)
