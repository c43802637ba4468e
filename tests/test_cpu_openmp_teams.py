"""A kernel without parallel regions starts no OpenMP team on the thread that calls it.

libgomp keeps a team of workers for every thread that ever started a parallel region, and once the
workers of all teams outnumber the CPUs it stops spinning between regions in the whole process
(every region then pays a futex wake-up). A serial kernel (a few elements) therefore must not
start one: its ``tfxla_run`` skips the floating-point-mode sync (``tfxla_sync_fp_mode``, itself a
parallel region). Checked in a fresh process by listing the threads born while 3 new calling threads are alive,
other than those 3: a serial kernel adds none (before the fix: 3, one worker per caller). A parallel
kernel does add workers there (1 to 3 in runs here), but how many is libgomp's business, so that
is not asserted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import os, threading
    import numpy as np, tensorflow as tf
    import tfxla_plugin

    size = int(os.environ["TEAM_CASE_SIZE"])
    f = tfxla_plugin.function(lambda x: tf.tanh(x) * 2.0 + 1.0)
    x = tf.constant(np.linspace(-2, 2, size, dtype=np.float32))
    want = np.tanh(x.numpy()) * 2.0 + 1.0
    np.testing.assert_allclose(f(x).numpy(), want, rtol=1e-5, atol=1e-6)  # compiled, run on this thread
    before = set(os.listdir("/proc/self/task"))
    barrier = threading.Barrier(4)
    errors, callers = [], set()

    def work():
        callers.add(str(threading.get_native_id()))
        try:
            np.testing.assert_allclose(f(x).numpy(), want, rtol=1e-5, atol=1e-6)
        except Exception as e:  # reported below
            errors.append(repr(e))
        barrier.wait()  # alive until counted

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    barrier.wait()
    print("ADDED", len(set(os.listdir("/proc/self/task")) - before - callers))  # threads born since, not callers
    barrier.reset()
    for t in threads:
        t.join()
    assert not errors, errors
""")


def _added(size: int) -> int:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TEAM_CASE_SIZE": str(size), "OMP_NUM_THREADS": "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return int(proc.stdout.split("ADDED")[-1].split()[0])


def test_a_serial_kernel_adds_no_openmp_workers_on_calling_threads() -> None:
    assert _added(8) == 0
