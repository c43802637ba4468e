"""Benchmark our compiled kernels against TF graph mode and TF XLA on the single-cluster workloads.

    python -m bench.hlo_bench [--repeats N] [--filter TEXT]

For each workload: TF graph (tf.function), TF XLA (jit_compile=True) and ours
(lowered from the same traced function, optimized, compiled to C) on the same
inputs in this process; prints median milliseconds, ratios (TF time / ours:
above 1 means we are faster), our compile times (cold: empty cache; warm:
cache hit) and the fusion count. Results are checked against TF first.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import backends.cpu as cpu  # noqa: E402
import hlo  # noqa: E402
from backends.cpu.pipeline import optimize  # noqa: E402
from bench.workloads import WORKLOADS  # noqa: E402
from hlo.lowering.tf_function import lower_concrete_function  # noqa: E402


def median_ms(fn, repeats: int, min_time: float = 0.2) -> float:
    fn()
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < repeats or (time.perf_counter() - start < min_time and len(times) < 50 * repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def run(repeats: int, name_filter: str | None) -> list[dict]:
    rows = []
    for wl in WORKLOADS:
        if name_filter and name_filter not in wl.name:
            continue
        args = wl.make_inputs(np.random.default_rng(0))
        tf_args = [tf.constant(a) for a in args]
        graph = tf.function(wl.fn)
        xla = tf.function(wl.fn, jit_compile=True)
        want = graph(*tf_args).numpy()
        cf = tf.function(wl.fn, autograph=False).get_concrete_function(
            *[tf.TensorSpec(np.shape(a), tf.as_dtype(np.asarray(a).dtype)) for a in args])
        module = optimize(lower_concrete_function(cf, name="bench"))
        with tempfile.TemporaryDirectory() as cache:
            t0 = time.perf_counter()
            exe = cpu.compile(module, cpu.CompileOptions(cache_dir=cache, prepared=True))
            cold = time.perf_counter() - t0
            t0 = time.perf_counter()
            cpu.compile(module, cpu.CompileOptions(cache_dir=cache, prepared=True))
            warm = time.perf_counter() - t0
            exe.kernel  # load the shared object before its cache directory goes away
        np_args = [np.asarray(a) for a in args]
        (got,) = exe(*np_args)
        np.testing.assert_allclose(got, want, rtol=wl.rtol, atol=wl.atol, err_msg=wl.name)
        row = {
            "workload": wl.name,
            "tf_graph": median_ms(lambda: graph(*tf_args), repeats),
            "tf_xla": median_ms(lambda: xla(*tf_args), repeats),
            "ours": median_ms(lambda: exe(*np_args), repeats),
            "compile_cold_s": cold, "compile_warm_s": warm,
            "fusions": sum(1 for _, i in module.instructions() if i.opcode is hlo.Opcode.FUSION),
        }
        rows.append(row)
        print(format_row(row), flush=True)
    return rows


HEADER = (f"{'workload':34s} {'TF graph':>9s} {'TF XLA':>9s} {'ours':>9s} {'vs graph':>9s} {'vs XLA':>8s} "
          f"{'compile cold/warm s':>20s} {'fusions':>7s}")


def format_row(r: dict) -> str:
    return (f"{r['workload']:34s} {r['tf_graph']:9.3f} {r['tf_xla']:9.3f} {r['ours']:9.3f} "
            f"{r['tf_graph'] / r['ours']:8.2f}x {r['tf_xla'] / r['ours']:7.2f}x "
            f"{r['compile_cold_s']:11.2f}/{r['compile_warm_s']:.3f} {r['fusions']:7d}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--filter", default=None)
    args = parser.parse_args()
    print("median ms; ratio = TF time / our time (> 1: we are faster)")
    print(HEADER)
    run(args.repeats, args.filter)


if __name__ == "__main__":
    main()
