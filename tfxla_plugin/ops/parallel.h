// The threads a kernel runs its parallel loops on (kernel ABI version 2, backends/codegen/abi.py).
//
// `tfxla_runtime` is the struct tfxla_run receives, declared as the generated CPU prelude and the CUDA
// host launcher declare it. The op builds one per Compute (PoolRuntime, on the stack: no allocation)
// over TensorFlow's intra-op pool, `ctx->device()->tensorflow_cpu_worker_threads()->workers`, so kernels
// share TF's threads instead of starting teams of their own:
// * num_threads is the pool's NumThreads() (TF's intra-op parallelism);
// * parallel_for(pool, n, fn, ctx) cuts [0, n) into min(n, num_threads) contiguous blocks of near-equal
//   size, hands them to ThreadPool::ParallelFor (fixed blocks of one unit: the calling thread runs the
//   first block itself and waits for the rest), and returns after every fn call has returned. Each
//   index is in exactly one block; blocks run in the pool threads' floating-point mode (TF sets FTZ/DAZ
//   on them), which is why a kernel's task trampoline installs the caller's MXCSR (ABI 2's rule).
// With no pool (a device without CPU worker threads) the kernel gets NULL and runs serially.
#ifndef TFXLA_OPS_PARALLEL_H_
#define TFXLA_OPS_PARALLEL_H_

#include <algorithm>
#include <cstdint>

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

// tfxla_runtime over one tsl::thread::ThreadPool.
class PoolRuntime {
 public:
  explicit PoolRuntime(tensorflow::OpKernelContext* ctx) {
    const auto* workers = ctx->device()->tensorflow_cpu_worker_threads();
    tsl::thread::ThreadPool* pool = workers == nullptr ? nullptr : workers->workers;
    if (pool == nullptr) return;
    rt_.struct_size = sizeof(tfxla_runtime);
    rt_.num_threads = pool->NumThreads();
    rt_.pool = pool;
    rt_.parallel_for = &ParallelFor;
  }

  // What tfxla_run gets: null without a pool (serial).
  const tfxla_runtime* get() const { return rt_.pool == nullptr ? nullptr : &rt_; }

 private:
  struct Task {
    tfxla_task_fn fn;
    void* ctx;
    int64_t size;   // n / blocks
    int64_t extra;  // n % blocks: the first `extra` blocks are one longer

    int64_t Begin(int64_t i) const { return i * size + std::min(i, extra); }
  };

  static void ParallelFor(void* pool_ptr, int64_t n, tfxla_task_fn fn, void* ctx) {
    auto* pool = static_cast<tsl::thread::ThreadPool*>(pool_ptr);
    const int64_t blocks = std::min<int64_t>(n, pool->NumThreads());
    if (blocks <= 1) {
      if (n > 0) fn(ctx, 0, n);
      return;
    }
    const Task task{fn, ctx, n / blocks, n % blocks};
    const Task* t = &task;  // the closure holds one pointer: std::function keeps it inline
    // Unit i is block i, [Begin(i), Begin(i + 1)): contiguous, non-empty (n >= blocks), covering [0, n).
    pool->ParallelFor(blocks, tsl::thread::ThreadPool::SchedulingParams::Fixed(1), [t](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) t->fn(t->ctx, t->Begin(i), t->Begin(i + 1));
    });
  }

  tfxla_runtime rt_{};
};

}  // namespace
}  // namespace tfxla

#endif  // TFXLA_OPS_PARALLEL_H_
