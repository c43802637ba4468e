"""The TfxlaLaunch op hands kernels oneTBB's pool, bounded by TF's intra-op count (kernel ABI 2,
tfxla_plugin/ops/parallel.h).

* A hand-written ABI-2 kernel (``BLOCKS_RUN``) calls ``rt->parallel_for`` and records, per index, how
  often it ran, on which thread, in which block and under which MXCSR. In fresh processes with 1 and 3
  intra-op threads (set with ``tf.config.threading``): ``num_threads`` is min(TF's intra-op count, the
  CPUs TBB uses), and with fewer than 2 the kernel gets no runtime (serial); every index runs exactly
  once, in min(n, 4 * num_threads) contiguous blocks of near-equal size, the calling thread takes
  part, and the blocks run on more than one thread and on at most num_threads; eagerly, inside a
  ``tf.function`` (the op on an inter-op thread) and from 8 Python threads at once alike, and a
  batch-tiled launch gets the runtime too.
* MXCSR: every block, on the caller or a pool thread, runs in the caller's floating-point mode (the
  job's TBB context captures it), with or without the kernel's own trampoline.
* Many TF threads at once: compiled functions (``tfxla_plugin.function``) whose kernels have parallel
  loops, called from 8 Python threads at once, and a graph of independent clusters on TF's inter-op
  threads, against TF eager; a generated kernel's bytes at 1 and 3 intra-op threads are the same, and
  its tasks take CPU time on the pool's threads (those the probe saw) when there are 2 or more.

The refusal of ABI-1 kernels is in tests/test_launch_op.py (``test_bad_kernels_are_refused_by_name``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf

import tfxla_plugin
from tests.test_launch_op import REPO, _abi_kernel, _spec

N_MAX = 64  # indices the probe records
PARALLEL_LOOP = re.compile(r"\btfxla_parallel\(\d+, \w+, &ctx_\);")  # a loop run as tasks (backends/cpu/parallel.py)
FTZ, DAZ, ROUNDING = 0x8000, 0x0040, 0x6000  # MXCSR bits: flush-to-zero, denormals-are-zero, rounding control
ROUND_TOWARD_ZERO = 0x6000
CONTROL = 0xFFC0  # the mode bits (the low six are sticky exception flags, which differ between threads)

# Per index i < n: how often a block covered it, the thread (gettid), the block's begin, the MXCSR seen.
# info: rt != NULL, num_threads, struct_size, the calling thread, its MXCSR during the call.
# args[0] = n, args[1] = mode: 0 plain; 1 the caller switches to round-toward-zero without FTZ/DAZ for the call;
# 2 as 1, and every block runs through a trampoline that installs the caller's MXCSR and restores its own;
# plus 4: every block waits (bounded) until a second thread has run one (the single-caller calls).
BLOCKS_EXTRA = r"""
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
struct probe { int64_t *count, *tid, *begin, *csr; unsigned caller_csr; int trampoline, wait; int64_t first; int other; };
static void block(void* ctx, int64_t b, int64_t e) {
  struct probe* p = (struct probe*)ctx;
  const unsigned own = _mm_getcsr();
  if (p->trampoline && own != p->caller_csr) _mm_setcsr(p->caller_csr);
  const int64_t tid = (int64_t)syscall(SYS_gettid);
  const unsigned csr = _mm_getcsr();
  usleep(3000);  /* long enough that idle pool threads take the other blocks */
  int64_t none = 0;
  __atomic_compare_exchange_n(&p->first, &none, tid, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  if (__atomic_load_n(&p->first, __ATOMIC_ACQUIRE) != tid) __atomic_store_n(&p->other, 1, __ATOMIC_RELEASE);
  /* wait (up to 5 s) until a second thread has run a block: a loaded machine may start the pool late */
  for (int k = 0; p->wait && k < 5000 && !__atomic_load_n(&p->other, __ATOMIC_ACQUIRE); ++k) usleep(1000);
  for (int64_t i = b; i < e; ++i) {
    __atomic_fetch_add(&p->count[i], 1, __ATOMIC_RELAXED);
    p->tid[i] = tid; p->begin[i] = b; p->csr[i] = csr;
  }
  if (p->trampoline && own != p->caller_csr) _mm_setcsr(own);
}
"""
BLOCKS_RUN = f"""
  const int64_t* a = (const int64_t*)in[0];
  const int64_t n = a[0], mode = a[1] & 3;
  int64_t* info = (int64_t*)out[4];
  struct probe p = {{(int64_t*)out[0], (int64_t*)out[1], (int64_t*)out[2], (int64_t*)out[3], 0, mode == 2,
                     (a[1] & 4) && n >= 2 && rt != NULL && rt->num_threads >= 2, 0, 0}};
  for (int k = 0; k < 4; ++k) memset(out[k], 0, {N_MAX} * sizeof(int64_t));
  const unsigned saved = _mm_getcsr();
  if (mode != 0) _mm_setcsr((saved & ~0x8040u & ~0x6000u) | 0x6000u);
  p.caller_csr = _mm_getcsr();
  info[0] = rt != NULL; info[1] = rt ? rt->num_threads : 0; info[2] = rt ? rt->struct_size : 0;
  info[3] = (int64_t)syscall(SYS_gettid); info[4] = p.caller_csr;
  if (rt != NULL && rt->parallel_for != NULL) rt->parallel_for(rt->pool, n, block, &p); else block(&p, 0, n);
  _mm_setcsr(saved);
  return 0;"""
BLOCKS_SIG = {"abi_version": 2, "module": "blocks", "inputs": [_spec("s64", [2])],
              "outputs": [_spec("s64", [N_MAX])] * 4 + [_spec("s64", [5])], "scratch_bytes": 0}
# The same probe as a batch-tiled kernel: a tile of 2 rows, one s64 per row; result row r = num_threads.
TILED_SIG = {"abi_version": 2, "module": "tiled", "inputs": [_spec("s64", [2])], "outputs": [_spec("s64", [2])],
             "scratch_bytes": 0}
TILED_RUN = """
  int64_t* o = (int64_t*)out[0];
  o[0] = o[1] = rt ? rt->num_threads : -1; return 0;"""

CHILD = """
import json, re, sys, threading, time
import numpy as np
import tensorflow as tf
threads = int(sys.argv[3])
tf.config.threading.set_intra_op_parallelism_threads(threads)
from tfxla_plugin import _op
op = _op.load_op_library()
blocks, tiled = sys.argv[1], sys.argv[2]

def call(n, mode):
    return op.tfxla_launch(kernel_path=blocks, args=[tf.stack([n, mode])], Tout=[tf.int64] * 5,
                           output_shapes=[[64]] * 4 + [[5]], cluster="blocks", kernel_hash="")

graph_call = tf.function(call)
results = {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(), "calls": []}
for how, fn in (("eager", call), ("graph", graph_call)):
    for n in (1, 2, 3, 7, 64):
        for mode in (0, 1, 2, 0):
            r = [t.numpy().tolist() for t in fn(tf.constant(n, tf.int64), tf.constant(mode | 4, tf.int64))]
            results["calls"].append({"how": how, "n": n, "mode": mode, "out": r})
def from_thread(k):  # 8 Python threads at once, each op asking the one pool for its blocks
    barrier.wait()
    for _ in range(3):
        r = [t.numpy().tolist() for t in call(tf.constant(64, tf.int64), tf.constant(0, tf.int64))]
        results["calls"].append({"how": f"thread {k}", "n": 64, "mode": 0, "out": r})
barrier = threading.Barrier(8)
workers = [threading.Thread(target=from_thread, args=(k,)) for k in range(8)]
for w in workers:
    w.start()
for w in workers:
    w.join()
t = op.tfxla_launch(kernel_path=[tiled], args=[tf.zeros([5], tf.int64)], Tout=[tf.int64], output_shapes=[[None]],
                    cluster="tiled", kernel_hash="", batch_tiles=[2], batched_args=[1], batched_results=[1])
results["tiled"] = t[0].numpy().tolist()

import tfxla_plugin  # a generated kernel with parallel loops and a long reduction: its bytes at this count
rng = np.random.default_rng(3)
x, w = rng.standard_normal((512, 256)).astype(np.float32), rng.standard_normal((256, 256)).astype(np.float32)
def generated(x, w):
    h = tf.matmul(x, w)
    return tf.nn.softmax(h, axis=-1) * tf.tanh(x), tf.reduce_sum(x * 1.5 - 0.25)
f = tfxla_plugin.function(generated, jit_compile=True)
got = [t.numpy() for t in f(x, w)]
want = [t.numpy() for t in generated(tf.constant(x), tf.constant(w))]
results["generated"] = {"bytes": [g.tobytes().hex() for g in got],
                        "parallel_loops": len(re.findall(sys.argv[4], f.compiled_graph(x, w).clusters[0].c_source)),
                        "error": [float(np.max(np.abs(g - v) / (1e-5 + np.abs(v)))) for g, v in zip(got, want)]}
# The pool's threads: those that ran probe blocks without calling the op. Do a generated kernel's tasks use them?
callers = {c["out"][4][3] for c in results["calls"]}
pool = sorted({t for c in results["calls"] for t in c["out"][1][:c["n"]]} - callers)
def cpu_ticks():
    return sum(sum(map(int, open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()[11:13]))
               for t in pool)
soft = tfxla_plugin.function(lambda x: tf.nn.softmax(x, axis=-1) * tf.tanh(x), jit_compile=True)
y = tf.constant(rng.standard_normal((1024, 1024)).astype(np.float32))
soft(y)
before, calls, deadline = cpu_ticks(), 0, time.monotonic() + 20
while calls < 100 or (pool and cpu_ticks() == before and time.monotonic() < deadline):  # a loaded machine
    soft(y)                                                                             # may need more calls
    calls += 1
results["pool"] = {"threads": len(pool), "ticks": cpu_ticks() - before, "calls": calls}
print("RESULT " + json.dumps(results), flush=True)
"""


@pytest.fixture(scope="module")
def probes(tmp_path_factory) -> tuple[str, str]:
    tmp = tmp_path_factory.mktemp("threads")
    blocks = _abi_kernel(tmp, "blocks", BLOCKS_SIG, BLOCKS_RUN, extra=BLOCKS_EXTRA)
    return blocks, _abi_kernel(tmp, "tiled", TILED_SIG, TILED_RUN)


@pytest.fixture(scope="module")
def children(probes) -> dict[int, dict]:
    """What the probes saw in fresh processes with 1 and 3 intra-op threads (run side by side)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    procs = {n: subprocess.Popen([sys.executable, "-c", CHILD, *probes, str(n), PARALLEL_LOOP.pattern], cwd=REPO,
                                 env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for n in (1, 3)}
    out = {}
    try:
        for n, proc in procs.items():
            stdout, stderr = proc.communicate(timeout=300)
            assert proc.returncode == 0, stderr[-3000:]
            out[n] = json.loads(stdout.split("RESULT ", 1)[1])
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return out


@pytest.fixture(params=[1, 3], ids=lambda t: f"intra_op_{t}")
def child(request, children) -> dict:
    return children[request.param]


CPUS = len(os.sched_getaffinity(0))  # what TBB's pool uses


def _threads(child) -> int:
    return min(child["intra_op"], CPUS)


def test_num_threads_is_bounded_by_tfs_intra_op_count(child):
    threads = _threads(child)
    for c in child["calls"]:
        present, num_threads, struct_size = c["out"][4][:3]
        want = (1, threads, 32) if threads >= 2 else (0, 0, 0)  # one thread: no runtime, serial
        assert (present, num_threads, struct_size) == want, c["how"]
    # every tile of a batch-tiled launch gets the runtime too
    assert child["tiled"] == [threads if threads >= 2 else -1] * 5


def test_every_index_runs_once_in_contiguous_blocks_one_on_the_caller(child):
    threads = _threads(child)
    for c in child["calls"]:
        n, (count, tid, begin, _, info) = c["n"], c["out"]
        assert count == [1] * n + [0] * (N_MAX - n), c
        starts = sorted(set(begin[:n]))
        want = min(n, 4 * threads) if threads >= 2 else 1
        assert len(starts) == want, c
        ends = starts[1:] + [n]
        sizes = [e - b for b, e in zip(starts, ends)]
        assert max(sizes) - min(sizes) <= 1, sizes  # near-equal
        for b, e in zip(starts, ends):  # contiguous: one block, one thread
            assert begin[b:e] == [b] * (e - b) and len(set(tid[b:e])) == 1, c
        assert info[3] in tid[:n], c  # the calling thread took part
        distinct = len(set(tid[:n]))
        assert distinct <= min(want, threads if threads >= 2 else 1), c
        if want >= 2 and not c["how"].startswith("thread"):
            # one caller: other blocks ran on the pool's threads (with 8 callers at once, TBB's workers
            # serve some of them, and a caller may run all its blocks itself: no oversubscription)
            assert distinct >= 2, c


def test_every_block_runs_in_the_callers_fp_mode(child):
    """Modes 1 and 2: the caller rounds toward zero without FTZ/DAZ, unlike TF's threads and TBB's; every
    block sees the caller's mode anyway, the pool's threads too (mode 2 adds the kernel's own trampoline)."""
    on_pool_seen = False
    for c in child["calls"]:
        n, mode, (_, tid, _, csr, info) = c["n"], c["mode"], c["out"]
        caller, caller_mode = info[3], info[4] & CONTROL
        if mode:
            assert caller_mode & ROUNDING == ROUND_TOWARD_ZERO and caller_mode & (FTZ | DAZ) == 0, c
        assert {csr[i] & CONTROL for i in range(n)} == {caller_mode}, c
        on_pool_seen |= any(tid[i] != caller for i in range(n)) and mode != 0
    assert on_pool_seen == (_threads(child) >= 2)  # the check covered pool threads where there are any


# --- many TF threads at once, generated kernels ------------------------------------------------------
RNG = np.random.default_rng(7)


def _in_threads(work, count: int) -> list[str]:
    """Runs ``work(k)`` on ``count`` Python threads at once (a barrier lines up their first calls)."""
    barrier, failures = threading.Barrier(count), []

    def run(k):
        try:
            barrier.wait()
            work(k)
        except Exception as e:  # reported by the caller
            failures.append(f"thread {k}: {e!r}")

    threads = [threading.Thread(target=run, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failures


def test_a_compiled_function_called_from_8_threads_at_once_matches_tf():
    w = tf.constant(RNG.standard_normal((256, 256)).astype(np.float32) / 16.0)

    def fn(x):
        h = tf.matmul(x, w)
        return tf.nn.softmax(h, axis=-1) * tf.tanh(x) + tf.reduce_sum(tf.exp(-h * h), axis=-1, keepdims=True)

    f = tfxla_plugin.function(fn, jit_compile=True)
    inputs = [tf.constant(RNG.standard_normal((512, 256)).astype(np.float32)) for _ in range(8)]
    want = [fn(x).numpy() for x in inputs]  # TF eager
    graph = f.compiled_graph(inputs[0])
    assert len(graph.clusters) == 1 and PARALLEL_LOOP.search(graph.clusters[0].c_source)

    def work(k):
        for _ in range(5):
            np.testing.assert_allclose(f(inputs[k]).numpy(), want[k], rtol=1e-5, atol=1e-5)

    assert _in_threads(work, 8) == []


def test_a_graph_of_independent_clusters_on_tfs_inter_op_threads_matches_tf():
    """Three clusters share no edge (a string op after each), so TF's executor runs their launches on
    inter-op threads at once; four Python threads call the graph at the same time."""

    def fn(x, y, z):
        outs = []
        for k, v in enumerate((x, y, z)):
            a = tf.nn.softmax(v * (k + 1.0), axis=-1) + tf.tanh(v)
            s = tf.strings.to_number(tf.strings.as_string(a, precision=9))  # stays in TF
            outs.append(tf.exp(s) * 0.5 - s)
        return outs

    f = tfxla_plugin.function(fn, jit_compile="auto")
    calls = [[tf.constant(RNG.standard_normal((256, 512)).astype(np.float32)) for _ in range(3)] for _ in range(4)]
    want = [[t.numpy() for t in fn(*args)] for args in calls]
    graph = f.compiled_graph(*calls[0])
    assert graph._fast is None  # run as a TF graph, by TF's executor
    assert len(graph.clusters) == 3 and all(PARALLEL_LOOP.search(c.c_source) for c in graph.clusters)

    def work(k):
        for _ in range(4):
            for got, w in zip(f(*calls[k]), want[k]):
                np.testing.assert_allclose(got.numpy(), w, rtol=1e-5, atol=1e-5)

    assert _in_threads(work, 4) == []


def test_a_generated_kernels_results_do_not_depend_on_the_thread_count(children):
    """ABI 2's rule, through the op: the bytes at 1 and 3 intra-op threads are the same (a split reduction
    has a part count fixed at code generation), and match TF (|got - TF| < 1e-4 * (|TF| + 1e-5))."""
    for child in children.values():
        assert child["generated"]["parallel_loops"] >= 2  # the softmax's loops and the split reduction
        assert max(child["generated"]["error"]) < 1e-4, child["generated"]["error"]
    assert children[1]["generated"]["bytes"] == children[3]["generated"]["bytes"]


def test_a_generated_kernels_tasks_run_on_the_pools_threads(child):
    """CPU time on the pool's threads (those that ran probe blocks without calling the op) while a generated
    softmax runs 100 times on the calling thread: none with one thread (there is no pool to use)."""
    pool = child["pool"]
    if _threads(child) < 2:
        assert pool["threads"] == 0  # every probe block ran on its caller
    else:
        assert pool["threads"] >= 1 and pool["ticks"] >= 1, pool
