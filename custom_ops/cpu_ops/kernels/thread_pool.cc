// The CPU kernels' persistent worker pool (see thread_pool.h).
//
// One job at a time: the caller writes the job (fn, ctx, num_units), then publishes it in one
// atomic word with a new generation number and the number of workers that may join. Workers poll
// that word (spinning up to kSpin after their last job, then sleeping on a condition variable) and
// join by incrementing the word's join count, then take units from a shared counter. When the
// caller runs out of units it closes the job (no more joins) and waits only for the workers that
// joined, so a worker that is descheduled or asleep never delays a call it did not join, and a job's
// fields never change under a worker still reading them. After fork() the child has no workers, so
// the pool is rebuilt there on first use.
#include "thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace specworker {
namespace {

constexpr int kDefaultMaxThreads = 8;
constexpr int kMaxThreads = 256;
// How long an idle worker polls before it sleeps: a model step calls the op every few tens of
// microseconds, so workers stay awake through a step and sleep between steps. After kPauseSpin of
// plain polling, a poller yields between polls: on a shared machine the thread it waits for (or
// another process) may be queued on the same core, and a pure spin would hold that core.
constexpr std::chrono::microseconds kSpin(200);
constexpr std::chrono::microseconds kPauseSpin(20);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Polls ready() until it holds or `limit` has passed; returns whether it held.
template <typename Ready>
bool Poll(Ready ready, std::chrono::microseconds limit) {
  const auto start = std::chrono::steady_clock::now();
  bool yielding = false;
  for (int i = 1;; ++i) {
    if (ready()) return true;
    if (yielding) {
      sched_yield();
    } else {
      CpuRelax();
    }
    if (i % 64 == 0) {
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited > limit) return false;
      yielding = waited > kPauseSpin;
    }
  }
}

struct ThreadCount {
  int threads = 1;
  std::string error;
};

ThreadCount ReadThreadCount() {
  ThreadCount c;
  const char* env = std::getenv("SPECWORKER_LINEAR_THREADS");
  if (env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (*end != '\0' || v < 1 || v > kMaxThreads) {
      c.threads = -1;
      c.error = std::string("SPECWORKER_LINEAR_THREADS=") + env + ", expected an integer from 1 to " +
                std::to_string(kMaxThreads);
      return c;
    }
    c.threads = static_cast<int>(v);
    return c;
  }
  int n = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) n = CPU_COUNT(&set);
  if (n < 1) n = static_cast<int>(std::thread::hardware_concurrency());
  c.threads = n < 1 ? 1 : (n > kDefaultMaxThreads ? kDefaultMaxThreads : n);
  return c;
}

const ThreadCount& Count() {
  static const ThreadCount count = ReadThreadCount();  // once per process
  return count;
}

// The job word: generation << 32 | closed << 31 | max joins << 16 | joins.
constexpr uint64_t kClosed = uint64_t{1} << 31;
constexpr int kLimitShift = 16;
constexpr uint64_t kCountMask = 0x7FFF;

class Pool {
 public:
  explicit Pool(int threads) : num_workers_(threads - 1) {
    for (int i = 0; i < num_workers_; ++i) {
      std::thread t([this] { Work(); });
      pthread_setname_np(t.native_handle(), "specworker-pool");
      t.detach();  // the pool lives until the process ends
    }
  }

  // False when another thread's job holds the pool (the caller then runs the units itself).
  bool TryRun(int64_t num_units, UnitFn fn, const void* ctx, int threads) {
    std::unique_lock<std::mutex> call(call_mutex_, std::try_to_lock);
    if (!call.owns_lock()) return false;
    fn_ = fn;
    ctx_ = ctx;
    num_units_ = num_units;
    next_.store(0, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    generation_ += 1;
    job_.store(generation_ << 32 | static_cast<uint64_t>(threads - 1) << kLimitShift);  // seq_cst
    if (sleeping_.load() > 0) {
      { std::lock_guard<std::mutex> lock(sleep_mutex_); }
      wake_.notify_all();
    }
    RunUnits();
    const int joined = static_cast<int>(job_.fetch_or(kClosed) & kCountMask);
    const auto finished = [&] { return done_.load(std::memory_order_acquire) >= joined; };
    while (!Poll(finished, std::chrono::seconds(1))) {  // (no duration::max(): it overflows in nanoseconds)
    }
    return true;
  }

 private:
  void RunUnits() {
    for (int64_t u; (u = next_.fetch_add(1, std::memory_order_relaxed)) < num_units_;) fn_(ctx_, u);
  }

  void Work() {
    uint64_t seen = 0;  // the generation of the last job this worker looked at
    for (;;) {
      uint64_t job = WaitForJob(seen);
      seen = job >> 32;
      // Join unless the job is closed, full or already replaced by the next one (the CAS fails then).
      while (!(job & kClosed) && (job & kCountMask) < ((job >> kLimitShift) & kCountMask)) {
        if (job_.compare_exchange_weak(job, job + 1)) {
          RunUnits();
          done_.fetch_add(1, std::memory_order_release);
          break;
        }
        if ((job >> 32) != seen) break;  // a newer job: look at it in the next round
      }
    }
  }

  uint64_t WaitForJob(uint64_t seen) {
    const auto fresh = [&] { return (job_.load(std::memory_order_acquire) >> 32) != seen; };
    if (Poll(fresh, kSpin)) return job_.load(std::memory_order_acquire);
    std::unique_lock<std::mutex> lock(sleep_mutex_);
    sleeping_.fetch_add(1);  // seq_cst, before the predicate check: see TryRun
    wake_.wait(lock, [&] { return (job_.load() >> 32) != seen; });
    sleeping_.fetch_sub(1);
    return job_.load(std::memory_order_acquire);
  }

  const int num_workers_;
  std::mutex call_mutex_;    // one job at a time
  uint64_t generation_ = 0;  // written by the caller holding call_mutex_
  UnitFn fn_ = nullptr;
  const void* ctx_ = nullptr;
  int64_t num_units_ = 0;
  alignas(64) std::atomic<uint64_t> job_{0};
  alignas(64) std::atomic<int64_t> next_{0};
  alignas(64) std::atomic<int> done_{0};
  std::atomic<int> sleeping_{0};
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
};

std::mutex g_pool_mutex;
Pool* g_pool = nullptr;  // leaked on purpose: detached workers use it until the process ends

void ForgetPoolInChild() { g_pool = nullptr; }  // the child of fork() has none of the workers

Pool* GetPool(int threads) {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  if (g_pool == nullptr) {
    static const int registered = pthread_atfork(nullptr, nullptr, ForgetPoolInChild);
    (void)registered;
    g_pool = new Pool(threads);
  }
  return g_pool;
}

}  // namespace

int PoolThreads(std::string* error) {
  const ThreadCount& c = Count();
  if (c.threads < 0 && error != nullptr) *error = c.error;
  return c.threads;
}

int ParallelThreads(int max_threads) {
  const int threads = Count().threads;
  return max_threads > 0 && max_threads < threads ? max_threads : threads;
}

void ParallelFor(int64_t num_units, UnitFn fn, const void* ctx, int max_threads) {
  int threads = ParallelThreads(max_threads);
  if (num_units < threads) threads = static_cast<int>(num_units);
  if (threads > 1) {
    if (GetPool(Count().threads)->TryRun(num_units, fn, ctx, threads)) return;
  }
  for (int64_t u = 0; u < num_units; ++u) fn(ctx, u);
}

}  // namespace specworker
