"""The ``tf.function`` surface of ``tfxla_plugin.function`` objects, compared with ``tf.function`` where
TensorFlow defines the behaviour: ``python_function``, ``input_signature``, ``get_concrete_function``
(whose graph runs ``TfxlaLaunch``) and its errors, ``experimental_get_tracing_count``,
``pretty_printed_concrete_signatures`` and the ``experimental_get_compiler_ir`` stages."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest
import tensorflow as tf

import hlo
import tfxla_plugin
from tfxla_plugin.compiler_ir import STAGES

RNG = np.random.default_rng(0)
SIGNATURE = [tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([3], tf.float32)]


def fn(x, y):
    return tf.tanh(x) * y + 1.0


def _ops(cf) -> set[str]:
    gd = cf.graph.as_graph_def()
    return {n.op for n in gd.node} | {n.op for f in gd.library.function for n in f.node_def}


def test_python_function_and_input_signature_are_tf_functions() -> None:
    for signature in (None, SIGNATURE):
        ours, theirs = tfxla_plugin.function(fn, input_signature=signature), tf.function(fn, input_signature=signature)
        assert ours.python_function is fn and theirs.python_function is fn
        assert ours.input_signature == theirs.input_signature
        assert isinstance(ours, tf.types.experimental.PolymorphicFunction)


def test_a_methods_python_function_is_bound_and_its_signature_has_no_self() -> None:
    class M(tf.Module):
        @tfxla_plugin.function(input_signature=[tf.TensorSpec([None, 2])])
        def __call__(self, x):
            return x * 2.0

    m = M()
    assert m.__call__.input_signature == (tf.TensorSpec([None, 2]),)
    assert m.__call__.python_function(tf.constant([[1.0, 2.0]])).numpy().tolist() == [[2.0, 4.0]]


@pytest.mark.parametrize("signature", [None, SIGNATURE], ids=["no_signature", "signature"])
def test_tracing_count_and_printed_signatures_match_tf_function(signature) -> None:
    ours, theirs = tfxla_plugin.function(fn, input_signature=signature), tf.function(fn, input_signature=signature)
    y = tf.constant([1.0, 2.0, 3.0])
    for batch in (2, 2, 5):
        x = tf.constant(RNG.standard_normal((batch, 3)).astype(np.float32))
        np.testing.assert_allclose(ours(x, y).numpy(), theirs(x, y).numpy(), rtol=1e-5, atol=1e-6)
    # without a signature both trace per shape (2); with one, once: our kernels serve every batch size
    assert ours.experimental_get_tracing_count() == theirs.experimental_get_tracing_count() == (2 if signature is None else 1)
    assert ours.pretty_printed_concrete_signatures() == theirs.pretty_printed_concrete_signatures()
    assert ours.pretty_printed_concrete_signatures(verbose=False) == theirs.pretty_printed_concrete_signatures(verbose=False)


def test_get_concrete_function_runs_the_launch_op() -> None:
    f = tfxla_plugin.function(fn, input_signature=SIGNATURE)
    cf = f.get_concrete_function()
    assert "TfxlaLaunch" in _ops(cf)
    x, y = tf.constant(RNG.standard_normal((4, 3)).astype(np.float32)), tf.constant([0.5, -1.0, 2.0])
    np.testing.assert_allclose(cf(x, y).numpy(), fn(x, y).numpy(), rtol=1e-5, atol=1e-6)
    assert f.get_concrete_function(tf.TensorSpec([None, 3]), tf.TensorSpec([3])) is not None

    unsigned = tfxla_plugin.function(fn)
    cf = unsigned.get_concrete_function(tf.TensorSpec([4, 3]), tf.TensorSpec([3]))
    assert "TfxlaLaunch" in _ops(cf)
    np.testing.assert_allclose(cf(x, y).numpy(), fn(x, y).numpy(), rtol=1e-5, atol=1e-6)
    assert "TfxlaLaunch" not in _ops(tfxla_plugin.function(fn, jit_compile=False).get_concrete_function(x, y))


BAD_SPECS = {
    "wrong_dim": (tf.TensorSpec([None, 4]), tf.TensorSpec([3])),
    "wrong_dtype": (tf.TensorSpec([None, 3], tf.int32), tf.TensorSpec([3])),
    "missing": (tf.TensorSpec([None, 3]),),
    "not_a_tensor": ("junk", 1),
}


@pytest.mark.parametrize("name", BAD_SPECS)
def test_get_concrete_function_rejects_bad_specs_as_tf_function_does(name) -> None:
    args = BAD_SPECS[name]
    errors = []
    for f in (tfxla_plugin.function(fn, input_signature=SIGNATURE), tf.function(fn, input_signature=SIGNATURE)):
        with pytest.raises(TypeError, match="Binding inputs to tf.function failed") as info:
            f.get_concrete_function(*args)
        errors.append(str(info.value))
    assert errors[0] == errors[1]


def test_get_concrete_function_of_dims_it_cannot_compile_names_them() -> None:
    f = tfxla_plugin.function(fn)
    with pytest.raises(tfxla_plugin.UnsupportedGraphError, match=r"dynamic shape: 'x:0' has shape \[2,\?\]"):
        f.get_concrete_function(tf.TensorSpec([2, None]), tf.TensorSpec([None]))
    with pytest.raises(TypeError, match="too many positional arguments"):  # TensorFlow's own binding error
        f.get_concrete_function(tf.TensorSpec([2, 3]), tf.TensorSpec([3]), tf.TensorSpec([3]))


def test_compiler_ir_dot_graph_of_the_optimized_hlo() -> None:
    f = tfxla_plugin.function(lambda x: tf.reduce_sum(tf.exp(x) * 2.0, axis=0))
    x = tf.constant(RNG.standard_normal((3, 4)).astype(np.float32))
    ir = f.experimental_get_compiler_ir(x)
    dot = ir(stage="optimized_hlo_dot")
    module = hlo.parse_module(ir(stage="optimized_hlo"))
    assert dot.startswith(f'digraph "{module.name}" {{') and dot.rstrip().endswith("}")
    boxes = re.findall(r'^\s+"([^"]+)" \[label=', dot, flags=re.M)
    assert sorted(boxes) == sorted(f"{c.name}/{i.name}" for c, i in module.instructions())
    edges = re.findall(r'^\s+"[^"]+" -> "[^"]+"(?: \[label=\d+\])?;$', dot, flags=re.M)
    assert len(edges) == sum(len(i.operands) for _, i in module.instructions())
    called = sum(len(i.called_computations) for _, i in module.instructions())
    assert dot.count("[style=dashed]") == called and called > 0  # the reduce's computation, the fusion's
    assert dot.count("subgraph cluster_") == len(module.computations)


@pytest.mark.parametrize("stage", ["hlo_serialized", "optimized_hlo_serialized", "optimized_hlo_proto_serialized"])
def test_serialized_proto_stages_are_the_text_stages_module_as_hlo_module_proto(stage) -> None:
    from tensorflow.compiler.xla.service import hlo_pb2

    from hlo.serialize import module_proto

    f = tfxla_plugin.function(lambda x: x * 2.0)
    ir = f.experimental_get_compiler_ir(tf.constant([1.0]))
    text = "optimized_hlo" if stage.startswith("optimized") else "hlo"  # tests/test_hlo_proto.py tests the rest
    assert hlo_pb2.HloModuleProto.FromString(ir(stage=stage)) == module_proto(hlo.parse_module(ir(stage=text)))


def test_compiler_ir_from_tensor_specs_and_its_errors() -> None:
    f = tfxla_plugin.function(lambda x: tf.exp(x) + 1.0)
    module = hlo.parse_module(f.experimental_get_compiler_ir(tf.TensorSpec([3, 4], tf.float32))(stage="hlo"))
    assert module.entry.parameters[0].shape.dims == (3, 4)
    ir = f.experimental_get_compiler_ir(tf.constant([1.0]))
    with pytest.raises(ValueError, match="device_name/platform_name"):
        ir(stage="hlo", platform_name="TPU")
    with pytest.raises(ValueError, match="unknown stage 'llvm'; stages: " + ", ".join(STAGES)):
        ir(stage="llvm")
    with pytest.raises(ValueError, match="Compiler IR can only be returned for functions marked with 'jit_compile=True'"):
        tfxla_plugin.function(lambda x: x, jit_compile=False).experimental_get_compiler_ir(tf.constant(1.0))


def test_a_saved_function_that_is_no_method_needs_its_kernel_assets_tracked(tmp_path, caplog) -> None:
    spec = [tf.TensorSpec([None, 2], tf.float32)]
    module = tf.Module()
    module.f = tfxla_plugin.function(lambda x: tf.tanh(x) * 3.0, input_signature=spec)
    with caplog.at_level(logging.WARNING, logger="tfxla_plugin"):
        tf.saved_model.save(module, str(tmp_path / "untracked"), signatures=module.f)
    assert any("module.kernels = f.kernel_assets" in r.getMessage() for r in caplog.records)

    module.kernels = module.f.kernel_assets
    tf.saved_model.save(module, str(tmp_path / "tracked"), signatures=module.f)
    assert b"tfxla_assets_" not in (tmp_path / "tracked" / "saved_model.pb").read_bytes()
    assert {p.suffix for p in (tmp_path / "tracked" / "assets").iterdir()} == {".so", ".c", ".txt"}
    loaded = tf.saved_model.load(str(tmp_path / "tracked"))
    x = tf.constant([[0.5, -1.0]])
    np.testing.assert_allclose(loaded.signatures["serving_default"](x)["output_0"].numpy(),
                               (tf.tanh(x) * 3.0).numpy(), rtol=1e-5, atol=1e-6)
