"""Every module real XLA produces for the corpus verifies: the shape rules agree with XLA's
on unoptimized and optimized HLO (fusions, bitcasts, copies with layouts, while loops, ...).

Also checks that the verifier is not vacuous on these modules (changing one
declared shape in a real module is caught), and verifies a few extra modules
XLA compiles from tf2xla ops with attributes the corpus does not reach
(batch groups, dilations, negative padding, gather batching dims, ...).
"""

from __future__ import annotations

import pytest

import hlo
from hlo.shapes import Shape, TupleShape
from tests.hlo_corpus.cases import CASES
from tests.hlo_corpus.generate import STAGES, hlo_text

PARAMS = [pytest.param(case.name, stage, id=f"{case.name}-{stage}") for case in CASES for stage in STAGES]


@pytest.mark.parametrize("case_name, stage", PARAMS)
def test_corpus_module_verifies(case_name: str, stage: str) -> None:
    module = hlo.parse_module(hlo_text(case_name, stage))
    hlo.verify(module)


# Opcodes whose shape comes from the declaration alone: growing it changes nothing to check.
_DECLARED_ONLY = {hlo.Opcode.PARAMETER, hlo.Opcode.IOTA, hlo.Opcode.CUSTOM_CALL, hlo.Opcode.RNG,
                  hlo.Opcode.RNG_BIT_GENERATOR}


def _grown(shape):
    """The shape with its first array leaf's leading dim grown by one (None if it has no dims)."""
    if isinstance(shape, TupleShape):
        return None
    if not shape.dims:
        return None
    return Shape(shape.dtype, (shape.dims[0] + 1, *shape.dims[1:]), shape.layout)


@pytest.mark.parametrize("case_name, stage", [("matmul", "hlo"), ("conv2d_same_stride2", "optimized_hlo"),
                                              ("reduce_max_min", "hlo")])
def test_corpus_tampering_is_caught(case_name: str, stage: str) -> None:
    assert case_name in {c.name for c in CASES}, f"corpus has no case {case_name}"
    module = hlo.parse_module(hlo_text(case_name, stage))
    for comp in module.computations:
        for i, inst in enumerate(comp.instructions):
            grown = _grown(inst.shape)
            if inst.opcode in _DECLARED_ONLY or grown is None:
                continue
            insts = list(comp.instructions)
            insts[i] = inst.replace(shape=grown)
            tampered = module.with_computation(comp.replace(instructions=tuple(insts)))
            with pytest.raises(hlo.HloVerifierError, match=f"instruction %{inst.name}"):
                hlo.verify(tampered)
            return
    pytest.fail("found no instruction to tamper with")


# --- extra real-XLA modules for the formulas the corpus does not reach ---------------------------------------


def _extra_cases():
    """(name, fn, args, opcode that must appear): tf2xla ops with unusual attributes, compiled by XLA."""
    import numpy as np
    import tensorflow as tf
    from tensorflow.compiler.tf2xla.python import xla
    from tensorflow.compiler.xla import xla_data_pb2 as pb

    f32 = np.float32
    nhwc = pb.ConvolutionDimensionNumbers(
        input_batch_dimension=0, input_feature_dimension=3, input_spatial_dimensions=[1, 2],
        kernel_input_feature_dimension=2, kernel_output_feature_dimension=3, kernel_spatial_dimensions=[0, 1],
        output_batch_dimension=0, output_feature_dimension=3, output_spatial_dimensions=[1, 2])
    batched_gather = pb.GatherDimensionNumbers(offset_dims=[2], collapsed_slice_dims=[1], start_index_map=[1],
                                               index_vector_dim=2, operand_batching_dims=[0],
                                               start_indices_batching_dims=[0])
    add = tf.function(lambda a, b: a + b, autograph=False).get_concrete_function(
        tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.float32))

    def conv(**kw):
        base = dict(window_strides=[1, 1], padding=[(0, 0), (0, 0)], lhs_dilation=[1, 1], rhs_dilation=[1, 1],
                    dimension_numbers=nhwc)
        return lambda x, k: xla.conv(x, k, **{**base, **kw})

    def max_pool_grad(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.nn.max_pool2d(x, 3, 2, "SAME")
        return tape.gradient(y, x)

    return [
        ("conv_batch_groups", conv(batch_group_count=2), (np.ones((4, 5, 5, 2), f32), np.ones((3, 3, 2, 6), f32)),
         "convolution"),
        ("conv_dilations_negative_pad", conv(window_strides=[2, 1], padding=[(-1, 0), (2, 2)], lhs_dilation=[2, 1],
                                             rhs_dilation=[1, 2]),
         (np.ones((1, 6, 7, 2), f32), np.ones((3, 3, 2, 4), f32)), "convolution"),
        ("gather_batching_dims", lambda x, i: xla.gather(x, i, dimension_numbers=batched_gather,
                                                         slice_sizes=[1, 1, 3], indices_are_sorted=False),
         (np.ones((2, 5, 3), f32), np.zeros((2, 4, 1), np.int32)), "gather"),
        ("reduce_window_dilations", lambda x: xla.reduce_window(
            x, tf.constant(0, tf.float32), add, window_dimensions=[3], window_strides=[2], base_dilations=[2],
            window_dilations=[2], padding=[(1, 1)]), (np.ones((5,), f32),), "reduce-window"),
        ("pad_negative_interior", lambda x: xla.pad(x, tf.constant(0, tf.float32), [1, -1], [2, 0], [1, 0]),
         (np.ones((3, 4), f32),), "pad"),
        ("bitcast_convert_widths", lambda x, y: (tf.bitcast(x, tf.uint8), tf.bitcast(y, tf.float32)),
         (np.ones((2, 3), f32), np.ones((3, 2), np.uint16)), "bitcast-convert"),
        ("dot_preferred_type", lambda a, b: xla.dot_general(
            a, b, pb.DotDimensionNumbers(lhs_contracting_dimensions=[1], rhs_contracting_dimensions=[0]),
            preferred_element_type=tf.int32), (np.ones((2, 3), np.int8), np.ones((3, 4), np.int8)), "dot"),
        ("rng_bit_generator", lambda s: tf.random.stateless_uniform([3, 4], seed=s, alg="philox"),
         (np.array([1, 2], np.int32),), "rng-bit-generator"),
        ("select_and_scatter", max_pool_grad, (np.ones((1, 5, 5, 1), f32),), "select-and-scatter"),
    ]


@pytest.fixture(scope="module")
def extra_modules():
    import tensorflow as tf

    out = {}
    for name, fn, args, opcode in _extra_cases():
        jitted = tf.function(fn, jit_compile=True, autograph=False)
        ir = jitted.experimental_get_compiler_ir(*[tf.constant(a) for a in args])
        out[name] = ([ir(stage=s) for s in STAGES], opcode)
    return out


EXTRA_NAMES = ["conv_batch_groups", "conv_dilations_negative_pad", "gather_batching_dims", "reduce_window_dilations",
               "pad_negative_interior", "bitcast_convert_widths", "dot_preferred_type", "rng_bit_generator",
               "select_and_scatter"]


@pytest.mark.parametrize("name", EXTRA_NAMES)
def test_extra_xla_module_verifies(extra_modules, name: str) -> None:
    texts, opcode = extra_modules[name]
    seen = set()
    for text in texts:
        module = hlo.parse_module(text)
        hlo.verify(module)
        seen.update(inst.opcode.text for _, inst in module.instructions())
    assert opcode in seen, f"XLA emitted no {opcode} for {name}"
