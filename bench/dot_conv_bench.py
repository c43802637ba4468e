"""Benchmark dot and convolution: oneDNN kernels vs our naive elemental loops vs TF graph mode and TF XLA.

    python -m bench.dot_conv_bench [--repeats N] [--filter TEXT] [--no-naive]

Each workload is a TF function of (x, w[, b]); TF graph (tf.function) and TF XLA (jit_compile=True)
run it on the same inputs in this process. Ours runs the lowered, optimized HLO three ways: oneDNN with
the weights as parameters (as the lowering gives them: conv weights are reordered per call), oneDNN
with the weights made HLO constants (packed once at init), and the elemental loops
(``CodegenOptions(dnnl=False)``). Prints median milliseconds and ratios (other / ours-oneDNN: above 1
means oneDNN-ours is faster). Results are checked against TF first (rtol 1e-4).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import backends.cpu as cpu  # noqa: E402
from backends.cpu.pipeline import optimize  # noqa: E402
from hlo.ir import HloInstruction, HloModule  # noqa: E402
from hlo.literal import Literal  # noqa: E402
from hlo.lowering.tf_function import lower_concrete_function  # noqa: E402
from hlo.opcodes import Opcode  # noqa: E402


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable
    shapes: tuple[tuple[int, ...], ...]  # x first; the rest are weights (made constants in the packed run)


def _dense(x, w, b):
    return tf.nn.relu(tf.matmul(x, w) + b)


def _conv_relu6(x, w, b):
    return tf.nn.relu6(tf.nn.conv2d(x, w, 1, "SAME") + b)


def _dw_relu6(x, w, b):
    return tf.nn.relu6(tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME") + b)


CASES = [
    Case("matmul [64,784]x[784,512]", tf.matmul, ((64, 784), (784, 512))),
    Case("matmul [64,512]x[512,512]", tf.matmul, ((64, 512), (512, 512))),
    Case("matmul [1,784]x[784,512]", tf.matmul, ((1, 784), (784, 512))),
    Case("dense relu(xW+b) [64,784]x[784,512]", _dense, ((64, 784), (784, 512), (512,))),
    Case("depthwise 3x3 [1,56,56,144]", lambda x, w: tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME"),
         ((1, 56, 56, 144), (3, 3, 144, 1))),
    Case("conv 1x1 [1,56,56,24->144]", lambda x, w: tf.nn.conv2d(x, w, 1, "SAME"), ((1, 56, 56, 24), (1, 1, 24, 144))),
    Case("conv 3x3 [1,56,56,64->64]", lambda x, w: tf.nn.conv2d(x, w, 1, "SAME"), ((1, 56, 56, 64), (3, 3, 64, 64))),
    Case("conv 3x3+bias+relu6 [1,56,56,64->64]", _conv_relu6, ((1, 56, 56, 64), (3, 3, 64, 64), (64,))),
    # MobileNetV2's expansion and depthwise layers (bench/nan_guard_bench.py: what keeping NaN costs on them)
    Case("conv 1x1+bias+relu6 [1,56,56,24->144]", _conv_relu6, ((1, 56, 56, 24), (1, 1, 24, 144), (144,))),
    Case("depthwise 3x3+bias+relu6 [1,56,56,144]", _dw_relu6, ((1, 56, 56, 144), (3, 3, 144, 1), (144,))),
]


def median_ms(fn, repeats: int, min_time: float = 0.3) -> float:
    fn()
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < repeats or (time.perf_counter() - start < min_time and len(times) < 20 * repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def with_constant_parameters(module: HloModule, values: dict[int, np.ndarray]) -> HloModule:
    """``module`` with ENTRY parameters ``values`` replaced by constants (the others renumbered)."""
    entry = module.entry
    keep = [p.parameter_number for p in entry.parameters if p.parameter_number not in values]
    insts = []
    for inst in entry.instructions:
        if inst.opcode is Opcode.PARAMETER and inst.parameter_number in values:
            lit = Literal.from_array(values[inst.parameter_number])
            insts.append(HloInstruction(inst.name, Opcode.CONSTANT, inst.shape, literal=lit))
        elif inst.opcode is Opcode.PARAMETER:
            insts.append(inst.replace(parameter_number=keep.index(inst.parameter_number)))
        else:
            insts.append(inst)
    attrs = module.attrs.remove("entry_computation_layout") if "entry_computation_layout" in module.attrs \
        else module.attrs
    return module.replace(attrs=attrs).with_computation(entry.replace(instructions=tuple(insts)))


def run(repeats: int, name_filter: str | None, naive: bool) -> None:
    print(f"{'workload':38s} {'TF graph':>9s} {'TF XLA':>9s} {'ours':>9s} {'ours pk':>9s} {'naive':>9s} "
          f"{'graph/us':>9s} {'XLA/us':>8s} {'naive/us':>9s}", flush=True)
    cache = tempfile.mkdtemp(prefix="dot_conv_bench_")
    for case in CASES:
        if name_filter and name_filter not in case.name:
            continue
        rng = np.random.default_rng(0)
        args = [(rng.standard_normal(s) / np.sqrt(np.prod(s[:-1]) if i else 1)).astype(np.float32)
                for i, s in enumerate(case.shapes)]
        tf_args = [tf.constant(a) for a in args]
        graph, xla = tf.function(case.fn), tf.function(case.fn, jit_compile=True)
        want = graph(*tf_args).numpy()
        cf = tf.function(case.fn, autograph=False).get_concrete_function(*[tf.TensorSpec(a.shape) for a in args])
        module = optimize(lower_concrete_function(cf, name="bench"))
        packed = optimize(with_constant_parameters(lower_concrete_function(cf, name="bench_packed"),
                                                   {i: a for i, a in enumerate(args) if i}))
        exe = cpu.compile(module, cpu.CompileOptions(cache_dir=cache, prepared=True))
        exe_packed = cpu.compile(packed, cpu.CompileOptions(cache_dir=cache, prepared=True))
        for e, a in ((exe, args), (exe_packed, args[:1])):
            np.testing.assert_allclose(e(*a)[0], want, rtol=1e-4, atol=1e-4, err_msg=case.name)
        ours = median_ms(lambda: exe(*args), repeats)
        row = {"graph": median_ms(lambda: graph(*tf_args), repeats), "xla": median_ms(lambda: xla(*tf_args), repeats),
               "ours": ours, "packed": median_ms(lambda: exe_packed(args[0]), repeats), "naive": float("nan")}
        if naive:
            exe_naive = cpu.compile(module, cpu.CompileOptions(cache_dir=cache, prepared=True,
                                                                codegen=cpu.CodegenOptions(dnnl=False)))
            np.testing.assert_allclose(exe_naive(*args)[0], want, rtol=1e-4, atol=1e-4, err_msg=case.name)
            row["naive"] = median_ms(lambda: exe_naive(*args), max(3, repeats // 10), min_time=0.0)
        print(f"{case.name:38s} {row['graph']:9.3f} {row['xla']:9.3f} {row['ours']:9.3f} {row['packed']:9.3f} "
              f"{row['naive']:9.2f} {row['graph'] / ours:9.2f} {row['xla'] / ours:8.2f} {row['naive'] / ours:9.1f}",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--filter", default=None)
    parser.add_argument("--no-naive", action="store_true", help="skip the (slow) elemental-loop column")
    args = parser.parse_args()
    print(f"threads (ours and oneDNN's TBB pool follow the affinity mask): {len(os.sched_getaffinity(0))}; "
          f"ms are medians; 'ours pk' = weights as constants packed at init")
    run(args.repeats, args.filter, not args.no_naive)


if __name__ == "__main__":
    main()
