"""Real XLA as a test oracle for single evaluator rules.

``xla_single_op(fn, args, opcode)`` compiles ``fn`` with ``jit_compile=True``,
takes the one instruction of ``opcode`` from the HLO that XLA emits (so the
attribute forms are exactly XLA's), and wraps it in a module of its own whose
parameters are its operands. It returns that module, the operand values
(resolved through the parameter/reshape/convert/constant/negate/... chain TF puts in
front of it, so no other evaluator rule is needed) and XLA's own outputs.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hlo  # noqa: E402
from hlo.ir import HloComputation, HloInstruction, HloModule  # noqa: E402
from hlo.opcodes import Opcode  # noqa: E402


def scalar_fn(fn, *dtypes):
    """A concrete TF function of scalars (two f32 unless ``dtypes`` says), as the tf2xla ops
    (reduce_window, scatter, variadic_sort, ...) take for computations."""
    specs = [tf.TensorSpec([], d) for d in (dtypes or (tf.float32, tf.float32))]
    return tf.function(fn, autograph=False).get_concrete_function(*specs)


def xla_hlo_and_result(fn, args):
    """(HLO text at stage "hlo", XLA outputs as a list of arrays) of ``fn`` jit-compiled."""
    targs = [tf.constant(a) for a in args]
    jitted = tf.function(fn, jit_compile=True, autograph=False)
    text = jitted.experimental_get_compiler_ir(*targs)(stage="hlo")
    out = jitted(*targs)
    outs = [np.asarray(t) for t in tf.nest.flatten(out)]
    return text, outs


def _resolve(comp: HloComputation, name: str, args) -> np.ndarray:
    inst = comp[name]
    op = inst.opcode
    if op is Opcode.PARAMETER:
        return np.asarray(args[inst.parameter_number])
    if op is Opcode.CONSTANT:
        return inst.literal.to_numpy()
    if op is Opcode.IOTA:
        d = inst.attr("iota_dimension")
        shape = [1] * inst.shape.rank
        shape[d] = inst.shape.dims[d]
        iota = np.arange(inst.shape.dims[d]).reshape(shape)
        return np.broadcast_to(iota, inst.shape.dims).astype(inst.shape.dtype.numpy)
    if op is Opcode.GET_TUPLE_ELEMENT and comp[inst.operands[0]].opcode is Opcode.TUPLE:
        return _resolve(comp, comp[inst.operands[0]].operands[inst.attr("index")], args)
    x = _resolve(comp, inst.operands[0], args)
    dtype = inst.shape.dtype.numpy
    if op in (Opcode.RESHAPE, Opcode.COPY, Opcode.BITCAST):
        return x.reshape(inst.shape.dims)
    if op is Opcode.CONVERT:
        return x.astype(dtype)
    if op is Opcode.NEGATE:
        return np.negative(x)
    if op is Opcode.REVERSE:
        return np.flip(x, inst.attr("dimensions"))
    if op is Opcode.TRANSPOSE:
        return np.transpose(x, inst.attr("dimensions"))
    if op is Opcode.PAD and all(p.low >= 0 and p.high >= 0 and not p.interior for p in inst.attr("padding")):
        fill = _resolve(comp, inst.operands[1], args)
        return np.pad(x, [(p.low, p.high) for p in inst.attr("padding")], constant_values=fill)
    if op is Opcode.SLICE:
        return x[tuple(slice(d.start, d.limit, d.stride) for d in inst.attr("slice"))]
    if op is Opcode.BROADCAST and x.ndim == 0:
        return np.broadcast_to(x, inst.shape.dims).copy()
    raise NotImplementedError(f"test oracle cannot resolve {op.text} feeding the op under test")


def single_op(module: HloModule, opcode: Opcode, args, which: int = 0):
    """(single-op module, operand values) for the ``which``-th ``opcode`` instruction of the entry."""
    entry = module.entry
    insts = [i for i in entry.instructions if i.opcode is opcode]
    inst = insts[which]
    params = [HloInstruction(f"p{k}", Opcode.PARAMETER, entry[o].shape, parameter_number=k)
              for k, o in enumerate(inst.operands)]
    op = inst.replace(operands=tuple(p.name for p in params))
    needed: set[str] = set()

    def visit(comp_name: str) -> None:
        if comp_name not in needed:
            needed.add(comp_name)
            for i in module.computation(comp_name).instructions:
                for callee in i.called_computations:
                    visit(callee)

    for callee in inst.called_computations:
        visit(callee)
    comps = [c for c in module.computations if c.name in needed]
    main = HloComputation("main", tuple(params) + (op,), op.name)
    values = [_resolve(entry, o, args) for o in inst.operands]
    return HloModule("single_op", tuple(comps) + (main,), "main"), values


def xla_single_op(fn, args, opcode: Opcode, which: int = 0):
    """(single-op module, operand values, XLA outputs of ``fn``)."""
    text, outs = xla_hlo_and_result(fn, args)
    module, values = single_op(hlo.parse_module(text), opcode, args, which)
    return module, values, outs


def evaluate_single(fn, args, opcode: Opcode, which: int = 0):
    """(evaluator outputs of the single op, XLA outputs of ``fn``)."""
    module, values, outs = xla_single_op(fn, args, opcode, which)
    return hlo.evaluate(module, *values), outs


def assert_close(got, want, rtol=1e-5, atol=1e-5):
    assert len(got) == len(want), (len(got), len(want))
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        if w.dtype.kind in "fc" or "float" in w.dtype.name:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, w)
