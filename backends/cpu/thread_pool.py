"""The Python runtime's threads for CPU kernels: a small process-wide pthread pool behind the kernel ABI's
parallel-for (``tfxla_runtime``, ``backends/codegen/abi.py``; the TF launch op uses oneTBB's pool).

The pool is C (``POOL_C``), compiled once through the toolchain into the kernel cache like a kernel
and loaded with ctypes; ``runtime(num_threads)`` is the ``tfxla_runtime`` a ``Kernel`` hands
``tfxla_run`` (None for one thread: the kernel then runs serially). One pool per thread count, per
process (a forked child makes its own).

``parallel_for(n)`` cuts [0, n) into min(n, num_threads) contiguous blocks; the calling thread and the
pool's num_threads - 1 workers claim them. Workers spin for ``SPIN_NS`` after each job, then sleep on a
condition variable: an idle pool takes no CPU from a busy machine. A caller that finds the pool busy
(another thread's job) runs its blocks itself, serially: no waiting on another job, no more threads than
asked. Blocks are claimed from one counter tagged with the job's number, so a worker late for a job
never takes a block of the next one, and a caller whose workers are gone (after ``fork``) still finishes.
"""

from __future__ import annotations

import ctypes
import os
import threading

from backends.shared_object import load_library

SPIN_NS = 50_000  # how long a worker (or the waiting caller) spins before it sleeps

POOL_C = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TFXLA_RELAX() _mm_pause()
#else
#define TFXLA_RELAX() do { } while (0)
#endif

#define TFXLA_EXPORT __attribute__((visibility("default")))
#define SPIN_NS @SPIN_NS@

typedef void (*tfxla_task_fn)(void* ctx, int64_t begin, int64_t end);

typedef struct {
  int64_t threads;                 /* the calling thread included */
  pthread_mutex_t mu;
  pthread_cond_t wake;             /* workers sleep here between jobs */
  pthread_cond_t done;             /* the caller sleeps here until its job's blocks are done */
  atomic_int busy;                 /* a job is running (one caller at a time) */
  atomic_int sleepers;
  _Atomic uint64_t claim;          /* job number << 32 | its blocks << 16 | the next block to run */
  atomic_int_fast64_t pending;     /* blocks of the job not finished */
  tfxla_task_fn fn;                /* the job: set before its number is published */
  void* ctx;
  int64_t n;
} tfxla_pool;

#define JOB(c) ((uint32_t)((c) >> 32))
#define BLOCKS(c) ((int64_t)(((c) >> 16) & 0xffffu))
#define NEXT(c) ((int64_t)((c) & 0xffffu))

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Claim and run blocks of job `job` until none is left; the last block to finish wakes the caller. A block
   claimed is unfinished, so the job (fn, ctx, n) is still the caller's until it has run. */
static void run_blocks(tfxla_pool* p, uint32_t job) {
  for (;;) {
    uint64_t c = atomic_load(&p->claim);
    if (JOB(c) != job || NEXT(c) >= BLOCKS(c)) return;
    if (!atomic_compare_exchange_weak(&p->claim, &c, c + 1)) continue;
    const int64_t b = NEXT(c), blocks = BLOCKS(c);
    p->fn(p->ctx, b * p->n / blocks, (b + 1) * p->n / blocks);
    if (atomic_fetch_sub(&p->pending, 1) == 1) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_broadcast(&p->done);
      pthread_mutex_unlock(&p->mu);
      return;
    }
  }
}

static void* worker(void* arg) {
  tfxla_pool* p = (tfxla_pool*)arg;
  uint32_t seen = 0;  /* jobs are numbered from 1: a worker that starts late still takes the first one */
  for (;;) {
    uint32_t job = JOB(atomic_load(&p->claim));
    const int64_t until = now_ns() + SPIN_NS;
    for (int k = 0; job == seen; ++k) {
      TFXLA_RELAX();
      job = JOB(atomic_load(&p->claim));
      if ((k & 63) == 63 && now_ns() > until) break;
    }
    if (job == seen) {
      pthread_mutex_lock(&p->mu);
      atomic_fetch_add(&p->sleepers, 1);
      while ((job = JOB(atomic_load(&p->claim))) == seen) pthread_cond_wait(&p->wake, &p->mu);
      atomic_fetch_sub(&p->sleepers, 1);
      pthread_mutex_unlock(&p->mu);
    }
    seen = job;
    run_blocks(p, job);
  }
  return NULL;
}

TFXLA_EXPORT void* tfxla_pool_create(int64_t threads) {
  tfxla_pool* p = (tfxla_pool*)calloc(1, sizeof(tfxla_pool));
  if (!p) return NULL;
  p->threads = threads < 0xffff ? threads : 0xffff;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done, NULL);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  for (int64_t k = 1; k < p->threads; ++k) {
    pthread_t t;
    if (pthread_create(&t, &attr, worker, p) != 0) { p->threads = k; break; }
  }
  pthread_attr_destroy(&attr);
  return p;
}

TFXLA_EXPORT void tfxla_pool_parallel_for(void* pool, int64_t n, tfxla_task_fn fn, void* ctx) {
  tfxla_pool* p = (tfxla_pool*)pool;
  if (n < 2 || p->threads < 2 || atomic_exchange(&p->busy, 1)) {  /* busy: another caller's job runs */
    fn(ctx, 0, n);
    return;
  }
  p->fn = fn;
  p->ctx = ctx;
  p->n = n;
  const int64_t blocks = n < p->threads ? n : p->threads;
  atomic_store(&p->pending, blocks);
  const uint32_t job = JOB(atomic_load(&p->claim)) + 1;
  atomic_store(&p->claim, (uint64_t)job << 32 | (uint64_t)blocks << 16);
  if (atomic_load(&p->sleepers) > 0) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
  }
  run_blocks(p, job);
  const int64_t until = now_ns() + SPIN_NS;
  for (int k = 0; atomic_load(&p->pending) != 0; ++k) {
    TFXLA_RELAX();
    if ((k & 63) == 63 && now_ns() > until) {
      pthread_mutex_lock(&p->mu);
      while (atomic_load(&p->pending) != 0) pthread_cond_wait(&p->done, &p->mu);
      pthread_mutex_unlock(&p->mu);
      break;
    }
  }
  atomic_store(&p->busy, 0);
}
""".replace("@SPIN_NS@", str(SPIN_NS))


class Runtime(ctypes.Structure):
    """``tfxla_runtime`` (``backends/codegen/abi.py``)."""

    _fields_ = [("struct_size", ctypes.c_int64), ("num_threads", ctypes.c_int64), ("pool", ctypes.c_void_p),
                ("parallel_for", ctypes.c_void_p)]


_lock = threading.Lock()
_pools: dict[tuple[int, int], Runtime] = {}  # (pid, threads) -> the runtime of that pool
_library = None


def default_threads() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0))


def build():
    """The pool's shared object in the kernel cache (compiled on first use)."""
    from backends.toolchain import CompilerOptions, compile_shared_object

    options = CompilerOptions(openmp=False, extra_flags=("-pthread",), libraries=())
    return compile_shared_object(POOL_C, options, name="tfxla_thread_pool")


def _load():
    global _library
    if _library is None:
        built = build()
        lib = load_library(built.path, built.sha256 or None)
        lib.tfxla_pool_create.restype = ctypes.c_void_p
        lib.tfxla_pool_create.argtypes = [ctypes.c_int64]
        _library = lib
    return _library


def runtime(num_threads: int | None = None) -> Runtime | None:
    """The runtime a kernel runs on with ``num_threads`` threads (None: ``default_threads()``): the
    process-wide pool of that size; None for one thread (serial)."""
    threads = default_threads() if num_threads is None else int(num_threads)
    if threads < 1:
        raise ValueError(f"num_threads must be at least 1, got {num_threads}")
    if threads == 1:
        return None
    key = (os.getpid(), threads)
    with _lock:
        rt = _pools.get(key)
        if rt is None:
            lib = _load()
            pool = lib.tfxla_pool_create(threads)
            if not pool:
                raise MemoryError("cannot allocate the kernel thread pool")
            parallel_for = ctypes.cast(lib.tfxla_pool_parallel_for, ctypes.c_void_p).value
            rt = _pools[key] = Runtime(ctypes.sizeof(Runtime), threads, pool, parallel_for)
        return rt
