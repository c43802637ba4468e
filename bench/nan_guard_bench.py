"""What keeping NaN costs in oneDNN output fusions ending in relu/relu6/clip: three builds, one process.

    taskset -c 0 python -m bench.nan_guard_bench [--rounds N] [--calls N] [--filter TEXT]

(``taskset -c 0``: one CPU for our loops' pool and oneDNN's TBB pool, which both follow the affinity mask.)

* ``masking``: the clamp as oneDNN post-ops, always (the code before NaN was kept; wrong for NaN): the
  module annotated by ``DnnlEpilogues(exact_nan=False)``;
* ``loop``: the NaN-keeping primitive and the clamp loop after it, always;
* ``guarded``: what the backend emits: both, the fast one when the per-call check (``dnnl_guard``)
  proves no NaN can arise (always, for these inputs).

Each round times every build (median of ``--calls`` calls, in turn, so machine load hits all alike);
the table gives the median over rounds of ms and of the per-round ratios to ``masking``. Weights are
parameters, as the TF lowering gives them (conv weights reordered per call). Results are checked
against TF (rtol 1e-4) first.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from unittest import mock

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import backends.cpu as cpu  # noqa: E402
from backends.cpu import kernels_dnnl  # noqa: E402
from backends.cpu.dnnl_epilogues import DnnlEpilogues  # noqa: E402
from backends.cpu.pipeline import optimize  # noqa: E402
from hlo.lowering.tf_function import lower_concrete_function  # noqa: E402


def _conv(act):
    return lambda x, w, b: act(tf.nn.conv2d(x, w, 1, "SAME") + b)


def _dw(act):
    return lambda x, w, b: act(tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME") + b)


def _clip6(x):
    return tf.clip_by_value(x, 0.0, 6.0)


CASES = [  # (name, fn, shapes)
    ("conv1x1+relu6 [1,56,56,24->144]", _conv(tf.nn.relu6), ((1, 56, 56, 24), (1, 1, 24, 144), (144,))),
    ("conv1x1+clip [1,28,28,32->192]", _conv(_clip6), ((1, 28, 28, 32), (1, 1, 32, 192), (192,))),
    ("dw3x3+relu6 [1,56,56,144]", _dw(tf.nn.relu6), ((1, 56, 56, 144), (3, 3, 144, 1), (144,))),
    ("dw3x3+relu6 [1,112,112,32]", _dw(tf.nn.relu6), ((1, 112, 112, 32), (3, 3, 32, 1), (32,))),
    # MobileNetV2's expansion feeding its depthwise: the depthwise reuses the expansion's bound, no re-read
    ("conv1x1+relu6 -> dw3x3+relu6 [56,56,24->144]",
     lambda x, w, b, k, c: _dw(tf.nn.relu6)(_conv(tf.nn.relu6)(x, w, b), k, c),
     ((1, 56, 56, 24), (1, 1, 24, 144), (144,), (3, 3, 144, 1), (144,))),
    ("conv3x3+relu6 [1,56,56,64->64]", _conv(tf.nn.relu6), ((1, 56, 56, 64), (3, 3, 64, 64), (64,))),
    ("dense relu [64,784]x[784,512]", lambda x, w, b: tf.nn.relu(tf.matmul(x, w) + b),
     ((64, 784), (784, 512), (512,))),
    ("dense relu [1024,256]x[256,256]", lambda x, w, b: tf.nn.relu(tf.matmul(x, w) + b),
     ((1024, 256), (256, 256), (256,))),
]


BUILDS = {  # build -> (the module's post-op annotation, a patch of the code generator)
    "masking": (DnnlEpilogues(exact_nan=False).run, contextlib.nullcontext),
    "loop": (lambda m: m, lambda: mock.patch.object(kernels_dnnl, "_fast_primitive", lambda *a, **k: None)),
    "guarded": (lambda m: m, contextlib.nullcontext),
}


def _median_ms(fn, calls: int) -> float:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--filter", default=None)
    args = parser.parse_args()
    print(f"CPUs {len(os.sched_getaffinity(0))}, load {os.getloadavg()[0]:.1f}; "
          f"medians over {args.rounds} interleaved rounds of {args.calls} calls")
    print(f"{'workload':34s} {'masking':>8s} {'loop':>8s} {'guarded':>8s} {'loop/m':>7s} {'guard/m':>8s}")
    cache = tempfile.mkdtemp(prefix="nan_guard_bench_")
    for name, fn, shapes in CASES:
        if args.filter and args.filter not in name:
            continue
        rng = np.random.default_rng(0)
        xs = [(rng.standard_normal(s) / np.sqrt(np.prod(s[:-1]) if i else 1)).astype(np.float32)
              for i, s in enumerate(shapes)]
        want = fn(*[tf.constant(a) for a in xs]).numpy()
        cf = tf.function(fn, autograph=False).get_concrete_function(*[tf.TensorSpec(a.shape) for a in xs])
        module = optimize(lower_concrete_function(cf, name="nan_guard"))
        exes = {}
        for build, (annotate, patch) in BUILDS.items():
            with patch():
                exes[build] = cpu.compile(annotate(module), cpu.CompileOptions(cache_dir=cache, prepared=True))
            np.testing.assert_allclose(exes[build](*xs)[0], want, rtol=1e-4, atol=1e-4, err_msg=f"{name} {build}")
        ms: dict[str, list[float]] = {b: [] for b in BUILDS}
        for _ in range(args.rounds):
            for build, exe in exes.items():
                ms[build].append(_median_ms(lambda: exe(*xs), args.calls))
        med = {b: statistics.median(v) for b, v in ms.items()}
        ratio = {b: statistics.median(x / m for x, m in zip(ms[b], ms["masking"])) for b in ("loop", "guarded")}
        print(f"{name:34s} {med['masking']:8.3f} {med['loop']:8.3f} {med['guarded']:8.3f} "
              f"{ratio['loop']:7.2f} {ratio['guarded']:8.2f}", flush=True)


if __name__ == "__main__":
    main()
