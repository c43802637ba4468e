"""The launch op runs parallel kernels on one runner thread (tfxla_plugin/ops/runner.h).

libgomp gives every thread that starts a parallel region its own team; kernels run directly on
TF's (or the user's) threads would grow one team per thread and throttle every region in the
process. Checked in a fresh process (so no earlier test's teams count): kernels called from four
threads at once give the right numbers (matmuls through oneDNN, and an elementwise loop large
enough to be split over threads), and those calls add no OpenMP worker threads beyond the
runner's one team, which exists under its name. A kernel with no parallel region runs on the
calling thread and starts no runner.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import os, threading
    import numpy as np, tensorflow as tf
    import tfxla_plugin

    def tasks():
        return {int(t) for t in os.listdir("/proc/self/task")}

    def names():
        out = []
        for t in os.listdir("/proc/self/task"):
            try:
                out.append(open(f"/proc/self/task/{t}/comm").read().strip())
            except OSError:
                pass
        return out

    mode = os.environ["RUNNER_CASE"]
    if mode == "serial":
        f = tfxla_plugin.function(lambda x: x * 2.0 + 1.0)  # 8 elements: no parallel region
        got = f(tf.constant(np.arange(8, dtype=np.float32))).numpy()
        assert np.array_equal(got, np.arange(8) * 2.0 + 1.0), got
        print("RUNNER", names().count("tfxla-runner"))
        raise SystemExit(0)

    rng = np.random.default_rng(0)
    w1 = tf.constant(rng.standard_normal((256, 512)).astype(np.float32))
    w2 = tf.constant(rng.standard_normal((512, 64)).astype(np.float32))

    def model(x, w1, w2):  # weights as arguments: the call is one eager launch on the calling thread
        h = tf.nn.relu(tf.matmul(x, w1))
        return tf.matmul(h, w2), tf.tanh(h) * 3.0 + h  # the second is an elementwise 128x512 fusion

    f = tfxla_plugin.function(model)
    xs = [tf.constant(rng.standard_normal((128, 256)).astype(np.float32)) for _ in range(4)]
    want = [[t.numpy() for t in model(x, w1, w2)] for x in xs]
    f(xs[0], w1, w2)  # compile, and start the runner and its team on this thread's first call
    before = tasks()
    barrier = threading.Barrier(5)
    errors = []

    def work(k):
        try:
            for _ in range(20):
                got = f(xs[k], w1, w2)
                for g, w in zip(got, want[k]):
                    np.testing.assert_allclose(g.numpy(), w, rtol=1e-4, atol=1e-3)
        except Exception as e:  # reported below
            errors.append(repr(e))
        barrier.wait()  # stay alive until the main thread counted

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    barrier.wait()
    added = len(tasks() - before) - len(threads)
    for t in threads:
        t.join()
    assert not errors, errors
    print("ADDED", added)
    print("EAGER", f.compiled_graph(xs[0], w1, w2)._fast is not None)
    print("RUNNER", names().count("tfxla-runner"))
""")


def _run(case: str) -> str:
    import os

    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "RUNNER_CASE": case})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _value(out: str, key: str) -> int:
    return int(out.split(key)[-1].split()[0])


def test_kernels_from_many_threads_share_one_openmp_team() -> None:
    out = _run("threads")
    assert "EAGER True" in out  # each call runs the kernel on the thread that made it
    # Without the runner each of the 4 threads grows a team of cpu_count - 1 workers.
    assert _value(out, "ADDED") <= 1, f"{_value(out, 'ADDED')} threads were added by 4 calling threads"
    # The runner thread (its OpenMP workers inherit its name) exists.
    assert _value(out, "RUNNER") >= 1


def test_a_kernel_without_parallel_regions_runs_on_the_calling_thread() -> None:
    assert _value(_run("serial"), "RUNNER") == 0
