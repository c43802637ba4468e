// KernelRunner: the one thread that runs every kernel with OpenMP parallel regions.
//
// libgomp gives each thread that starts a parallel region a team of its own, and once the threads
// of all teams outnumber the CPUs it stops spinning between regions (its "throttled" spin count),
// so every region then pays a futex wake-up. TensorFlow runs ops on many threads; if each ran its
// kernels directly, each would grow a team and every parallel region in the process would slow
// down for good (measured: a 64x512 elementwise kernel went from 0.03 ms to 0.27 ms after the
// launch op had run on TF's threads). Funnelling parallel kernels through one thread keeps one team.
// The runner adopts the caller's floating-point mode (MXCSR) for the call, so results are what the
// calling thread would have computed. Kernels without parallel regions run on the caller's thread.
#ifndef TFXLA_OPS_RUNNER_H_
#define TFXLA_OPS_RUNNER_H_

#include <deque>
#include <functional>
#include <thread>

#include "absl/synchronization/mutex.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace tfxla {

class KernelRunner {
 public:
  static KernelRunner& Get() {
    static auto* runner = new KernelRunner;  // never destroyed: the thread lives until exit
    return *runner;
  }

  // Runs `fn` on the runner thread and returns its result; blocks the caller until then.
  int Run(const std::function<int()>& fn) {
    Task task{&fn};
#if defined(__SSE__)
    task.csr = _mm_getcsr();
#endif
    {
      absl::MutexLock lock(&mu_);
      queue_.push_back(&task);
    }
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&task.done));
    return task.result;
  }

 private:
  struct Task {
    const std::function<int()>* fn;
    unsigned int csr = 0;
    int result = 0;
    bool done = false;
  };

  KernelRunner() : thread_([this] { Loop(); }) { thread_.detach(); }

  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty(); }

  void Loop() {
    for (;;) {
      Task* task;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &KernelRunner::HasWork));
        task = queue_.front();
        queue_.pop_front();
      }
#if defined(__SSE__)
      const unsigned int mine = _mm_getcsr();
      _mm_setcsr(task->csr);
#endif
      const int result = (*task->fn)();
#if defined(__SSE__)
      _mm_setcsr(mine);
#endif
      absl::MutexLock lock(&mu_);
      task->result = result;
      task->done = true;
    }
  }

  absl::Mutex mu_;
  std::deque<Task*> queue_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace tfxla

#endif  // TFXLA_OPS_RUNNER_H_
