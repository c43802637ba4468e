// The threads a kernel runs its parallel loops on (kernel ABI version 2, backends/codegen/abi.py).
//
// `tfxla_runtime` is the struct tfxla_run receives, declared as the generated CPU prelude and the CUDA
// host launcher declare it. The op builds one per Compute (PoolRuntime, on the stack: no allocation)
// over oneTBB's process-wide pool, the pool oneDNN's TBB build runs its primitives on, so a kernel's
// loops and its oneDNN calls share one set of threads, and every thread that runs the op (TF's
// inter-op threads, the caller on the eager path) shares them too (docs/design.md §7 says why not TF's
// intra-op pool: measured, its wake-ups made short loops slower than running them serially):
// * num_threads is min(TBB's concurrency, TF's intra-op thread count for this device): TF's intra-op
//   setting still bounds how many threads our loops use;
// * parallel_for(pool, n, fn, ctx) cuts [0, n) into min(n, 4 * num_threads) contiguous blocks of
//   near-equal size and runs them as TBB tasks (the calling thread takes part; idle threads steal, so a
//   thread another process preempts does not hold the loop up), returning after every fn call has
//   returned. Each index is in exactly one block; every block runs in the caller's floating-point mode
//   (MXCSR: the job's TBB context captures it), as the kernel's own task trampoline also ensures.
// With one thread the kernel gets NULL and runs serially.
#ifndef TFXLA_OPS_PARALLEL_H_
#define TFXLA_OPS_PARALLEL_H_

#include <algorithm>
#include <cstdint>

#include "oneapi/tbb/parallel_for.h"
#include "oneapi/tbb/partitioner.h"
#include "oneapi/tbb/task_arena.h"
#include "oneapi/tbb/task_group.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/platform/threadpool.h"

extern "C" {
typedef void (*tfxla_task_fn)(void* ctx, int64_t begin, int64_t end);
typedef struct tfxla_runtime {
  int64_t struct_size;  // sizeof(tfxla_runtime) as the caller knows it: a kernel reads no field past it
  int64_t num_threads;  // threads parallel_for runs blocks on at once, the calling thread included;
                        // < 2: the kernel runs everything on the calling thread
  void* pool;           // opaque, handed back to parallel_for
  // Calls fn(ctx, b, e) on disjoint, contiguous, non-empty ranges that cover [0, n) exactly once,
  // concurrently on up to num_threads threads (the calling thread takes part), and returns after every
  // call has returned. n >= 1. fn never fails and never calls parallel_for itself. May be NULL (serial).
  void (*parallel_for)(void* pool, int64_t n, tfxla_task_fn fn, void* ctx);
} tfxla_runtime;
}

namespace tfxla {
namespace {

// tfxla_runtime over oneTBB's pool.
class PoolRuntime {
 public:
  explicit PoolRuntime(tensorflow::OpKernelContext* ctx) {
    int64_t threads = tbb::this_task_arena::max_concurrency();
    const auto* workers = ctx->device()->tensorflow_cpu_worker_threads();
    if (workers != nullptr && workers->workers != nullptr)
      threads = std::min<int64_t>(threads, workers->workers->NumThreads());
    rt_.struct_size = sizeof(tfxla_runtime);
    rt_.num_threads = threads;
    rt_.pool = &rt_;  // parallel_for reads num_threads from it
    rt_.parallel_for = &ParallelFor;
  }

  // What tfxla_run gets: null for one thread (serial).
  const tfxla_runtime* get() const { return rt_.num_threads < 2 ? nullptr : &rt_; }

 private:
  static void ParallelFor(void* pool, int64_t n, tfxla_task_fn fn, void* ctx) {
    const int64_t threads = static_cast<const tfxla_runtime*>(pool)->num_threads;
    const int64_t blocks = std::min<int64_t>(n, 4 * threads);
    if (blocks <= 1) {
      if (n > 0) fn(ctx, 0, n);
      return;
    }
    // TBB runs a job's tasks in the floating-point mode its context captured (else the arena's, from
    // whichever thread first used TBB): capture the caller's, so every block, on any thread, runs in it.
    tbb::task_group_context job(tbb::task_group_context::isolated);
    job.capture_fp_settings();
    // Block i is [i * n / blocks, (i + 1) * n / blocks): contiguous, non-empty (n >= blocks), covering [0, n).
    tbb::parallel_for(
        tbb::blocked_range<int64_t>(0, blocks, 1),
        [=](const tbb::blocked_range<int64_t>& r) {
          for (int64_t i = r.begin(); i < r.end(); ++i) fn(ctx, i * n / blocks, (i + 1) * n / blocks);
        },
        tbb::simple_partitioner(), job);
  }

  tfxla_runtime rt_{};
};

}  // namespace
}  // namespace tfxla

#endif  // TFXLA_OPS_PARALLEL_H_
