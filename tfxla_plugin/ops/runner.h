// KernelRunner: the one thread that runs every kernel with OpenMP parallel regions.
//
// Why: libgomp gives each thread that starts a parallel region a team of its own. Once the threads
// of all teams outnumber the CPUs it stops spinning between regions for good (its "throttled" spin
// count), and every region in the process then pays a futex wake-up of its workers. TensorFlow runs
// ops on many threads, so kernels run directly on them grew one team per thread (measured on the
// MLP train step kernel: 1.2 ms on a fresh process, 2.4 ms once TF's threads had run it).
// Funnelling kernels through one thread keeps one team, and its workers keep spinning between the
// regions of a run.
//
// The hand-off is what decides whether this pays (an earlier version parked the runner on a mutex
// condition after each call and cost ~0.5 ms per call in the benchmark):
// * the runner spins for kSpinMicros after a call before it parks, so back-to-back calls find it
//   awake; while spinning it yields its CPU every few iterations, so a thread woken on that CPU
//   (the caller whose kernel just finished, or a TF op) runs at once;
// * the caller parks at once (condition variable): spinning there would take a CPU from the team.
// Callers are served one at a time (a kernel already uses every CPU). The runner adopts the
// caller's floating-point mode (MXCSR) for each call, so results are what the calling thread
// would have computed. After fork() the child gets a fresh runner on first use.
#ifndef TFXLA_OPS_RUNNER_H_
#define TFXLA_OPS_RUNNER_H_

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#if defined(__SSE__)
#include <immintrin.h>
#endif

namespace tfxla {

class KernelRunner {
 public:
  static constexpr int kSpinMicros = 200;

  static KernelRunner& Get() {
    static std::once_flag once;
    std::call_once(once, [] { pthread_atfork(nullptr, nullptr, [] { current_ = nullptr; }); });
    KernelRunner* r = current_.load(std::memory_order_acquire);
    if (r != nullptr) return *r;
    static std::mutex create;
    std::lock_guard<std::mutex> lock(create);
    r = current_.load(std::memory_order_acquire);
    if (r == nullptr) {
      r = new KernelRunner;  // never destroyed: its thread runs until exit
      current_.store(r, std::memory_order_release);
    }
    return *r;
  }

  // Runs `fn` on the runner thread and returns its result; blocks the caller until then.
  int Run(const std::function<int()>& fn) {
    std::lock_guard<std::mutex> one_at_a_time(submit_);
    fn_ = &fn;
#if defined(__SSE__)
    csr_ = _mm_getcsr();
#endif
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = false;
      posted_.store(true, std::memory_order_release);
      if (parked_) wake_runner_.notify_one();
    }
    std::unique_lock<std::mutex> lock(mu_);
    wake_caller_.wait(lock, [this] { return done_; });
    return result_;
  }

 private:
  KernelRunner() {
    std::thread([this] {
      pthread_setname_np(pthread_self(), "tfxla-runner");
      Loop();
    }).detach();
  }

  // Spins (yielding now and then) until a call is posted or kSpinMicros pass; false if none came.
  bool SpinForWork() const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
    for (int i = 1;; ++i) {
      if (posted_.load(std::memory_order_acquire)) return true;
      if (i % 16 == 0) {
        if (std::chrono::steady_clock::now() > until) return false;
        std::this_thread::yield();
      }
#if defined(__SSE__)
      _mm_pause();
#endif
    }
  }

  void Loop() {
    for (;;) {
      if (!SpinForWork()) {
        std::unique_lock<std::mutex> lock(mu_);
        parked_ = true;
        wake_runner_.wait(lock, [this] { return posted_.load(std::memory_order_acquire); });
        parked_ = false;
      }
      posted_.store(false, std::memory_order_relaxed);
#if defined(__SSE__)
      const unsigned int mine = _mm_getcsr();
      _mm_setcsr(csr_);
#endif
      const int result = (*fn_)();
#if defined(__SSE__)
      _mm_setcsr(mine);
#endif
      std::lock_guard<std::mutex> lock(mu_);
      result_ = result;
      done_ = true;
      wake_caller_.notify_one();
    }
  }

  static inline std::atomic<KernelRunner*> current_{nullptr};

  std::mutex submit_;  // one call at a time
  std::mutex mu_;      // guards done_, parked_, result_ and the waits
  std::condition_variable wake_runner_, wake_caller_;
  std::atomic<bool> posted_{false};
  bool parked_ = false;
  bool done_ = false;
  int result_ = 0;
  const std::function<int()>* fn_ = nullptr;
  unsigned int csr_ = 0;
};

}  // namespace tfxla

#endif  // TFXLA_OPS_RUNNER_H_
