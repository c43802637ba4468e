"""Keras ``fit`` and ``predict`` through the Grappler hook against TF and XLA (issue 17's benchmark rows).

    python -m bench.keras_bench [--rows overhead,mlp,small_cnn,mobilenet_v2] [--epochs 3] [--rounds 3]

Each engine runs in a process of its own (the hook is process-wide; XLA keeps compiled steps), all with
the same seeded model, data and optimizer (SGD with momentum), in interleaved rounds:

* ``tf``: ``model.compile(jit_compile=False)``, TF graph mode;
* ``xla``: ``model.compile(jit_compile=True)`` without the hook, TF's XLA;
* ``ours``: ``tfxla_plugin.enable()`` before the model is built, then ``jit_compile=False`` (the hook
  compiles Keras's steps; with ``jit_compile=True`` it would take them from XLA the same way).

``overhead`` is the 10-way head alone (one ``Dense(10)`` on 4 features), batch 8: its step computes
next to nothing, so its ``fit_step_ms`` is what Keras's step costs each engine around the compiled work
(the tf.function call, the iterator, the callbacks, variable reads and assigns). Subtract it from a
row's ``fit_step_ms`` before comparing that with a step timed directly (as ``bench.function_bench``'s
"MLP train step", which is also plain SGD, not SGD with momentum as here).

``mobilenet_v2`` is ``keras.applications.MobileNetV2(alpha=0.35, weights=None, include_top=False)`` at
96x96 with global average pooling and a 10-way head (``MOBILENET_ALPHA``): BatchNormalization (training
statistics and gradients), depthwise and pointwise convolutions, ReLU6, batch 32. Alpha 1.0 and 224x224
are the inference table's model (issue 19); for training on a 2-core machine they take too long per row
(TF's XLA alone was ~20 s a step at alpha 1.0, 96x96), so this row keeps each process to a few minutes.

Reported per row, medians over rounds: ``fit`` milliseconds per training step (one epoch of a data set
divisible by the batch, after a warm-up epoch: every step has a static batch), and ``predict_on_batch``
latency at batch 1 and at the training batch (Keras relaxes its predict step to a ``None`` batch at the
second size: ours runs it through a static-shape twin, ``shape_twins``, docs/hook.md "Shapes"); then ours/tf and ours/xla (< 1: we are faster). Run it
on a quiet machine (check ``uptime`` first).

``fit_ms`` is an epoch's wall time over its steps, so it includes what every ``fit`` call costs once
(Keras's data adapter, the ``tf.data`` pipeline, callbacks: ~0.1-0.3 s here, the same for all engines),
which at 16 steps an epoch is a large share of a small model's number. ``fit_step_ms`` is the step alone:
the median interval between consecutive ``on_train_batch_begin`` calls (a callback that keeps Keras's
asynchronous dispatch of batch-end callbacks), and ``fit_step_cpu_ms`` the process CPU time of those
intervals (all threads), which a shared machine's load distorts less than wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap

ROWS = {  # name: (input shape, batch, samples)
    "overhead": ((4,), 8, 2048),
    "mlp": ((784,), 64, 2048),
    "small_cnn": ((32, 32, 3), 32, 512),
    "mobilenet_v2": ((96, 96, 3), 32, 128),
}
ENGINES = ("tf", "xla", "ours")
MOBILENET_ALPHA = 0.35

CHILD = textwrap.dedent("""
    import json, statistics, sys, time
    import numpy as np
    engine, row, shape, batch, samples, epochs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), *map(int, sys.argv[4:7])
    alpha = float(sys.argv[7])
    import tensorflow as tf, keras
    import tfxla_plugin
    if engine == "ours":
        tfxla_plugin.enable()
    keras.utils.set_random_seed(0)
    inputs = keras.Input(tuple(shape))
    if row == "overhead":
        h = inputs
    elif row == "mlp":
        h = keras.layers.Dense(512, activation="relu")(inputs)
        h = keras.layers.Dense(512, activation="relu")(h)
    elif row == "small_cnn":
        h = keras.layers.Conv2D(32, 3, activation="relu")(inputs)
        h = keras.layers.MaxPooling2D()(h)
        h = keras.layers.Conv2D(64, 3, activation="relu")(h)
        h = keras.layers.GlobalAveragePooling2D()(h)
    else:
        base = keras.applications.MobileNetV2(input_shape=tuple(shape), alpha=alpha, include_top=False,
                                              weights=None)
        h = keras.layers.GlobalAveragePooling2D()(base(inputs))
    model = keras.Model(inputs, keras.layers.Dense(10)(h))
    class StepTimer(keras.callbacks.Callback):  # intervals between batch begins: the steps without fit's setup
        def __init__(self):
            super().__init__()
            self.wall, self.cpu, self.last = [], [], None
        def on_train_batch_begin(self, batch, logs=None):
            now = (time.perf_counter(), time.process_time())
            if self.last is not None and batch > 0:
                self.wall.append(now[0] - self.last[0])
                self.cpu.append(now[1] - self.last[1])
            self.last = now
    timer = StepTimer()
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=engine == "xla")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((samples, *shape)).astype("float32")
    y = rng.integers(0, 10, samples)
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0)  # warm-up: traces and compiles the step
    steps = []
    for _ in range(epochs):
        t = time.perf_counter()
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0, callbacks=[timer])
        steps.append((time.perf_counter() - t) / (samples // batch) * 1e3)
    out = {"fit_ms": statistics.median(steps), "fit_step_ms": statistics.median(timer.wall) * 1e3,
           "fit_step_cpu_ms": statistics.median(timer.cpu) * 1e3}
    for b in (1, batch):
        xb = x[:b]
        model.predict_on_batch(xb)
        ts = []
        for _ in range(30):
            t = time.perf_counter()
            model.predict_on_batch(xb)
            ts.append((time.perf_counter() - t) * 1e3)
        out[f"predict_b{b}_ms"] = statistics.median(ts)
    if engine == "ours":
        s = tfxla_plugin.stats()
        out["graphs_rewritten"], out["clusters"], out["shape_twins"] = s.graphs_rewritten, s.clusters_compiled, s.shape_twins
    print("RESULT " + json.dumps(out), flush=True)
""")


def run_child(engine: str, row: str, epochs: int) -> dict:
    shape, batch, samples = ROWS[row]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, "-c", CHILD, engine, row, json.dumps(shape), str(batch), str(samples),
                           str(epochs), str(MOBILENET_ALPHA)], capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0 or "RESULT " not in proc.stdout:
        raise RuntimeError(f"{engine} {row} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.split("RESULT ", 1)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of {', '.join(ROWS)}")
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs per process")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (one process per engine each)")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} (run on a quiet machine); medians over {args.rounds} rounds")
    results = {}
    for row in args.rows.split(","):
        runs = {e: [] for e in ENGINES}
        for _ in range(args.rounds):
            for engine in ENGINES:
                runs[engine].append(run_child(engine, row, args.epochs))
        med = {e: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for e, rs in runs.items()}
        results[row] = med
        batch = ROWS[row][1]
        print(f"\n== {row} (batch {batch}; ours: {med['ours'].get('graphs_rewritten', 0):.0f} graphs rewritten, "
              f"{med['ours'].get('clusters', 0):.0f} clusters, {med['ours'].get('shape_twins', 0):.0f} static-shape twins)")
        print(f"   {'metric':18s} {'tf':>9s} {'xla':>9s} {'ours':>9s} {'ours/tf':>8s} {'ours/xla':>9s}")
        for k in ("fit_ms", "fit_step_ms", "fit_step_cpu_ms", "predict_b1_ms", f"predict_b{batch}_ms"):
            t, x, o = (med[e][k] for e in ENGINES)
            print(f"   {k:18s} {t:9.3f} {x:9.3f} {o:9.3f} {o / t:7.2f}x {o / x:8.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
