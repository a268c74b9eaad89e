// test_parallel.cpp: parallel_chunks (01_core/parallel.h): every chunk runs exactly once whatever the number of
// chunks (none, one, many, more than fit the packed counter), on more than one thread where the pool has
// helpers, a chunk's exception reaches the caller and the pool keeps working after it, a loop inside a chunk
// runs serially, and loops called from several threads at once all complete.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "oscar/01_core/parallel.h"

using namespace oscar;

TEST_CASE("parallel_chunks runs every chunk exactly once", "[parallel]") {
  for (int64_t n : std::initializer_list<int64_t>{0, 1, 2, 7, 1000, (int64_t{1} << 22) + 5}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    parallel_chunks(n, [&](int64_t i) { hits[static_cast<size_t>(i)].fetch_add(1); });
    int64_t wrong = 0;
    for (auto& h : hits) wrong += h.load() != 1;
    CHECK(wrong == 0);
  }
}

TEST_CASE("parallel_chunks uses the pool's helpers and is reusable at once", "[parallel]") {
  const int threads = parallel_threads();
  REQUIRE(threads >= 1);
  std::mutex m;
  std::set<std::thread::id> seen;
  for (int rep = 0; rep < 200 && static_cast<int>(seen.size()) < threads; ++rep)
    parallel_chunks(64, [&](int64_t) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
      while (std::chrono::steady_clock::now() < until) {
      }
      std::lock_guard g(m);
      seen.insert(std::this_thread::get_id());
    });
  CHECK(static_cast<int>(seen.size()) <= threads);
  if (threads > 1) CHECK(seen.size() > 1);  // a helper took chunks at least once in 200 loops
}

TEST_CASE("parallel_chunks rethrows a chunk's exception and keeps working", "[parallel]") {
  std::atomic<int> ran{0};
  CHECK_THROWS_WITH(parallel_chunks(100,
                                    [&](int64_t i) {
                                      ran.fetch_add(1);
                                      if (i == 37) throw std::runtime_error("chunk 37 failed");
                                    }),
                    "chunk 37 failed");
  CHECK(ran.load() >= 38);  // chunks after the failing one may be skipped
  std::atomic<int64_t> sum{0};
  parallel_chunks(100, [&](int64_t i) { sum.fetch_add(i); });
  CHECK(sum.load() == 4950);
}

TEST_CASE("parallel_chunks nests serially and serves several callers", "[parallel]") {
  std::atomic<int64_t> sum{0};
  std::atomic<int> moved{0};  // inner chunks run on another thread than their outer chunk (Catch's CHECK is not thread-safe)
  parallel_chunks(8, [&](int64_t i) {
    const auto me = std::this_thread::get_id();
    parallel_chunks(10, [&](int64_t j) {
      if (std::this_thread::get_id() != me) moved.fetch_add(1);
      sum.fetch_add(i * 10 + j);
    });
  });
  CHECK(moved.load() == 0);
  CHECK(sum.load() == 79 * 80 / 2);
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep) parallel_chunks(33, [&](int64_t i) { total.fetch_add(i + 1); });
    });
  for (auto& t : callers) t.join();
  CHECK(total.load() == 4 * 50 * (33 * 34 / 2));
}
