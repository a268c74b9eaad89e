// parallel.cpp: the chunk loop of parallel.h. One shared 64-bit word holds the loop's generation (20 bits),
// its chunk count (22 bits) and the next unclaimed chunk (22 bits); a thread claims chunk i by a
// compare-exchange from (g, n, i) to (g, n, i+1), so a helper that wakes late cannot claim a chunk of a
// finished loop. The caller waits for `done` to reach n.
#include "oscar/01_core/parallel.h"

#include <immintrin.h>
#include <omp.h>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace oscar {

namespace {

constexpr int kGenBits = 20, kCountBits = 22;
constexpr uint64_t kCountMask = (uint64_t{1} << kCountBits) - 1;
constexpr int64_t kMaxChunks = int64_t{1} << kCountBits;  // above this, chunks are grouped
constexpr int kSpinBeforeSleep = 1 << 12;                 // some 0.1 ms of pause instructions

uint64_t pack(uint64_t gen, uint64_t n, uint64_t next) { return (gen << (2 * kCountBits)) | (n << kCountBits) | next; }

thread_local bool t_in_chunk = false;

class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i)
      workers_.emplace_back([this] {
        omp_set_num_threads(1);  // Eigen parallelises a product by OpenMP unless told not to: a chunk is one thread's work
        work();
      });
  }
  ~Pool() {
    stop_.store(true);
    wake();
    for (auto& t : workers_) t.join();
  }
  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // False when the pool is busy (another thread's loop): the caller runs serially then.
  bool run(int64_t n, const std::function<void(int64_t)>& fn) {
    std::unique_lock lock(busy_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    job_ = &fn;
    error_ = nullptr;
    done_.store(0, std::memory_order_relaxed);
    gen_ = (gen_ + 1) & ((uint64_t{1} << kGenBits) - 1);
    state_.store(pack(gen_, static_cast<uint64_t>(n), 0), std::memory_order_release);
    wake();
    const int omp_threads = omp_get_max_threads();  // per-thread setting: this thread's chunks stay single-threaded too
    omp_set_num_threads(1);
    claim_all();
    omp_set_num_threads(omp_threads);
    for (int spins = 0; done_.load(std::memory_order_acquire) < n; ++spins) {
      if (spins < kSpinBeforeSleep) _mm_pause();
      else std::this_thread::yield();  // a helper holding a chunk was descheduled
    }
    job_ = nullptr;
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  // A new signal for the workers: spinning ones see it at once, sleeping ones are notified. The signal changes under
  // the mutex the sleepers wait with, so none can miss it between its check and its sleep (std::atomic::wait lost a
  // wake-up here once: a test's exit hung joining a worker that slept through the pool's last signal).
  void wake() {
    {
      std::lock_guard g(sleep_mutex_);
      signal_.fetch_add(1, std::memory_order_release);
    }
    sleep_cv_.notify_all();
  }

  // Claims and runs chunks of the current loop until none is left.
  void claim_all() {
    uint64_t s = state_.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t next = s & kCountMask, n = (s >> kCountBits) & kCountMask;
      if (next >= n) return;
      if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
      // The loop cannot finish before this chunk does, so job_ is this loop's.
      t_in_chunk = true;
      try {
        (*job_)(static_cast<int64_t>(next));
      } catch (...) {
        std::lock_guard g(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
      t_in_chunk = false;
      done_.fetch_add(1, std::memory_order_acq_rel);
      s = state_.load(std::memory_order_acquire);
    }
  }

  void work() {
    uint32_t seen = signal_.load(std::memory_order_acquire);
    for (;;) {
      int spins = 0;
      while (signal_.load(std::memory_order_acquire) == seen) {
        if (++spins < kSpinBeforeSleep) {
          _mm_pause();
        } else {
          std::unique_lock lock(sleep_mutex_);
          sleep_cv_.wait(lock, [&] { return signal_.load(std::memory_order_acquire) != seen; });
          spins = 0;
        }
      }
      seen = signal_.load(std::memory_order_acquire);
      if (stop_.load()) return;
      claim_all();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex busy_, error_mutex_, sleep_mutex_;
  std::condition_variable sleep_cv_;
  std::atomic<uint64_t> state_{0};
  std::atomic<uint32_t> signal_{0};
  std::atomic<int64_t> done_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t)>* job_ = nullptr;
  std::exception_ptr error_;
  uint64_t gen_ = 0;
};

Pool& pool() {
  static Pool p(std::max(1, omp_get_max_threads()));
  return p;
}

}  // namespace

int parallel_threads() { return pool().threads(); }

void parallel_chunks(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  const bool serial = n == 1 || t_in_chunk || omp_in_parallel() || pool().threads() == 1;
  if (!serial) {
    if (n < kMaxChunks) {
      if (pool().run(n, fn)) return;
    } else {
      const int64_t per = (n + kMaxChunks - 1) / kMaxChunks, groups = (n + per - 1) / per;
      const std::function<void(int64_t)> group = [&](int64_t g) {
        for (int64_t i = g * per; i < std::min(n, (g + 1) * per); ++i) fn(i);
      };
      if (pool().run(groups, group)) return;
    }
  }
  const bool outer = !t_in_chunk && !omp_in_parallel();
  const int omp_threads = omp_get_max_threads();
  if (outer) omp_set_num_threads(1), t_in_chunk = true;  // as on the pool: each chunk single-threaded
  try {
    for (int64_t i = 0; i < n; ++i) fn(i);
  } catch (...) {
    if (outer) omp_set_num_threads(omp_threads), t_in_chunk = false;
    throw;
  }
  if (outer) omp_set_num_threads(omp_threads), t_in_chunk = false;
}

void set_threads(int n) {
  if (n > 0) omp_set_num_threads(n);
}

}  // namespace oscar
