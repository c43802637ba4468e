"""The main job's demo: the HLO layer, ``tfxla_plugin.function`` against TensorFlow, and wrapped SavedModels.

Run as ``python -m tfxla_plugin.demo [--models mlp,small_cnn,...]``: parses, verifies and
evaluates an HLO module; compiles a gelu layer and a small MLP with ``tfxla_plugin.function``,
checks the results against TF and prints the speed-up over ``tf.function`` and
``tf.function(jit_compile=True)`` (medians); then builds the sample SavedModels (``saved_models``),
wraps each (``tfxla_plugin.saved_model.wrap``), loads the wrapped model, checks it against the
original at batch sizes 1, 3 and 8 (one set of kernels for all) and prints clusters, coverage and
the latency of the original against the wrapped model (TF's default threads, as ``tfxla serve``
runs it), and the original signature compiled in-process with ``tfxla_plugin.function`` (one eager
op per call) against the signature itself.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import hlo

# A softmax over the last axis, written as XLA would emit it.
DEMO_HLO = """
HloModule softmax_demo, entry_computation_layout={(f32[2,5]{1,0})->f32[2,5]{1,0}}

%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(f32[] %a, f32[] %b)
}

%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}

ENTRY %main (x: f32[2,5]) -> f32[2,5] {
  %x = f32[2,5]{1,0} parameter(0), metadata={op_type="Softmax" op_name="softmax"}
  %ninf = f32[] constant(-inf)
  %rowmax = f32[2]{0} reduce(f32[2,5]{1,0} %x, f32[] %ninf), dimensions={1}, to_apply=%max
  %bmax = f32[2,5]{1,0} broadcast(f32[2]{0} %rowmax), dimensions={0}
  %shifted = f32[2,5]{1,0} subtract(f32[2,5]{1,0} %x, f32[2,5]{1,0} %bmax)
  %e = f32[2,5]{1,0} exponential(f32[2,5]{1,0} %shifted)
  %zero = f32[] constant(0)
  %denom = f32[2]{0} reduce(f32[2,5]{1,0} %e, f32[] %zero), dimensions={1}, to_apply=%sum
  %bden = f32[2,5]{1,0} broadcast(f32[2]{0} %denom), dimensions={0}
  ROOT %y = f32[2,5]{1,0} divide(f32[2,5]{1,0} %e, f32[2,5]{1,0} %bden)
}
"""


def _median_ms(fn, repeats: int = 30, budget_s: float | None = None) -> float:
    """Median of ``repeats`` timed calls after a warm-up; with ``budget_s``, as many calls (20 to 300)
    as fit in that many seconds instead (fast calls are noisy: more of them steady the median)."""
    import statistics

    fn()
    if budget_s is not None:
        t0 = time.perf_counter()
        fn()
        repeats = int(min(300, max(20, budget_s / max(time.perf_counter() - t0, 1e-6))))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def function_demo() -> bool:
    import math

    import tensorflow as tf

    import tfxla_plugin

    rng = np.random.default_rng(0)
    w1 = tf.Variable(rng.standard_normal((784, 512)).astype(np.float32) / 28)
    w2 = tf.Variable(rng.standard_normal((512, 10)).astype(np.float32) / 22)

    def gelu(x):
        return 0.5 * x * (1.0 + tf.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))

    def mlp(x):
        return tf.nn.softmax(tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2))

    workloads = [("gelu [2048,1024]", gelu, tf.constant(rng.standard_normal((2048, 1024)).astype(np.float32))),
                 ("MLP 784-512-10 batch 64", mlp, tf.constant(rng.standard_normal((64, 784)).astype(np.float32)))]
    ok = True
    print(f"\n{'workload':26s} {'tf.function':>12s} {'TF XLA':>9s} {'tfxla':>9s} {'vs graph':>9s} {'vs XLA':>8s}")
    for name, fn, x in workloads:
        ours, graph, xla = tfxla_plugin.function(fn), tf.function(fn), tf.function(fn, jit_compile=True)
        ok &= bool(np.allclose(ours(x).numpy(), graph(x).numpy(), rtol=1e-4, atol=1e-5))
        t = [_median_ms(lambda f=f: f(x)) for f in (graph, xla, ours)]
        print(f"{name:26s} {t[0]:12.3f} {t[1]:9.3f} {t[2]:9.3f} {t[0] / t[2]:8.2f}x {t[1] / t[2]:7.2f}x")
    print("\n" + ours.explain(x))
    print(f"results match TensorFlow: {ok}")
    return ok


DEMO_MODELS = ("mlp", "small_cnn", "text_classifier", "mobilenet_v2")


def saved_model_demo(models=DEMO_MODELS) -> bool:
    import tempfile
    from pathlib import Path

    import tensorflow as tf

    import saved_models
    from tfxla_plugin import saved_model

    ok = True
    rows = []
    with tempfile.TemporaryDirectory(prefix="tfxla_demo_") as tmp:
        jobs = []
        for name in models:
            src = saved_models.build(name)
            dst = Path(tmp) / name
            jobs.append([name, str(src), str(dst)])
            print(f"\n== {name}: wrapping {src}")
            report = saved_model.wrap(src, dst, progress=False)
            print(report)
            loaded = [tf.saved_model.load(str(d)) for d in (src, dst)]  # kept: their variables must live
            original, wrapped = (m.signatures["serving_default"] for m in loaded)
            for batch in (1, 3, 8):
                inputs = {k: tf.constant(v) for k, v in saved_models.example_inputs(src, batch).items()}
                same = _same(wrapped(**inputs), original(**inputs))
                ok &= same
                if batch != 3:
                    t = [_median_ms(lambda f=f: f(**inputs), budget_s=0.5) for f in (original, wrapped)]
                    rows.append((name, batch, t[0], t[1], same))
        print("\nWrapped SavedModels at TensorFlow's default threads, as tfxla serve runs them (ms, medians):")
        print(f"{'SavedModel':18s} {'batch':>5s} {'original':>10s} {'wrapped':>10s} {'speed-up':>9s}  matches")
        for name, batch, t_orig, t_ours, same in rows:
            print(f"{name:18s} {batch:5d} {t_orig:8.3f}ms {t_ours:8.3f}ms {t_orig / t_ours:8.2f}x  {same}")
        print(f"wrapped SavedModels match the originals at batch 1, 3 and 8: {ok}")
        print("\nThe original's signature compiled in-process, tfxla_plugin.function(loaded.signatures[...])")
        print("(TensorFlow's default threads; one eager op per call):")
        print(f"{'SavedModel':18s} {'batch':>5s} {'original':>10s} {'function':>10s} {'speed-up':>9s}  matches")
        for name, src, _ in jobs:
            for batch, t_orig, t_ours, same in _time_function(src):
                ok &= same
                print(f"{name:18s} {batch:5d} {t_orig:8.3f}ms {t_ours:8.3f}ms {t_orig / t_ours:8.2f}x  {same}")
    return ok


def _same(got, want) -> bool:
    return all(np.allclose(got[k].numpy(), want[k].numpy(), rtol=1e-4, atol=1e-5) for k in want)


def _time_function(src: str) -> list:
    """[batch, original ms, ours ms, ours matches] at batch 1 and 8 for ``tfxla_plugin.function`` of the
    original signature of the SavedModel at ``src``."""
    import tensorflow as tf

    import saved_models
    import tfxla_plugin

    loaded = tf.saved_model.load(src)
    original = loaded.signatures["serving_default"]
    ours = tfxla_plugin.function(original)
    out = []
    for batch in (1, 8):
        inputs = {k: tf.constant(v) for k, v in saved_models.example_inputs(src, batch).items()}
        same = _same(ours(**inputs), original(**inputs))
        t = [_median_ms(lambda f=f: f(**inputs), budget_s=0.5) for f in (original, ours)]
        out.append([batch, t[0], t[1], bool(same)])
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tfxla_plugin.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(DEMO_MODELS),
                        help=f"sample SavedModels to wrap (default: {','.join(DEMO_MODELS)}; empty: none)")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    module = hlo.parse_module(DEMO_HLO)
    hlo.verify(module)
    print(module.to_text())
    x = np.array([[1.0, 2.0, 3.0, 4.0, 5.0], [0.0, -1.0, 100.0, 2.0, 1.0]], np.float32)
    (y,) = hlo.evaluate(module, x)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        ref = e / e.sum(axis=1, keepdims=True)
    print("input:\n", x)
    print("softmax (HLO evaluator):\n", y)
    ok = np.allclose(y, ref, rtol=1e-6, atol=1e-7, equal_nan=True)
    assert hlo.parse_module(module.to_text()) == module, "text round trip changed the module"
    print(f"matches NumPy: {ok}; parse+verify+evaluate took {1e3 * (time.perf_counter() - t0):.1f} ms")
    ok = function_demo() and ok
    models = [m for m in args.models.split(",") if m]
    if models:
        ok = saved_model_demo(models) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
