// test_isolated.cpp: probe_in_child turns a crash, a hang or an exhausted memory limit of a third-party library into
// one error naming the file, and returns quietly when the probe finishes or refuses cleanly.
#include <catch2/catch.hpp>

#include <signal.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include "oscar/01_core/error.h"
#include "oscar/01_core/isolated.h"

using oscar::probe_in_child;

// AddressSanitizer (GCC: __SANITIZE_ADDRESS__; clang: __has_feature): probe_in_child sets no address-space limit there
#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#ifndef TEST_ASAN
#define TEST_ASAN 0
#endif

namespace {
std::string verdict(const std::function<void()>& probe, unsigned seconds = 2) {
  try {
    probe_in_child("f.h5", "reading it", "fetch it again", probe, seconds, 1ull << 30);
  } catch (const oscar::Error& e) {
    return e.what();
  }
  return "";
}
extern "C" void ignore_alarm(int) {}
}  // namespace

TEST_CASE("probe_in_child: a finished probe or a clean refusal returns", "[isolated]") {
  CHECK(verdict([] {}).empty());
  CHECK(verdict([] { oscar::fail("refused"); }).empty());
}

TEST_CASE("probe_in_child: a crash is one error naming the file and the signal", "[isolated]") {
  const auto e = verdict([] { std::raise(SIGSEGV); });
  CHECK_THAT(e, Catch::Contains("f.h5: reading it crashed (SIGSEGV)"));
  CHECK_THAT(e, Catch::Contains("fetch it again"));
}

TEST_CASE("probe_in_child: a hang ends at the limit even under a parent's SIGALRM handler", "[isolated]") {
  // libFuzzer installs a SIGALRM handler that returns; a child inheriting it must still end at its limit
  struct sigaction sa {}, old{};
  sa.sa_handler = ignore_alarm;
  ::sigaction(SIGALRM, &sa, &old);
  const auto t0 = std::chrono::steady_clock::now();
  const auto e = verdict([] {
    for (volatile unsigned long i = 0;; i = i + 1) {
    }
  }, 1);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::sigaction(SIGALRM, &old, nullptr);
  CHECK_THAT(e, Catch::Contains("did not finish within 1 s"));
  CHECK(s < 10);
}

TEST_CASE("probe_in_child: a child that blocks its time limit is killed by the parent's deadline", "[isolated]") {
  const auto t0 = std::chrono::steady_clock::now();
  const auto e = verdict([] {
    sigset_t alarm_only;
    sigemptyset(&alarm_only);
    sigaddset(&alarm_only, SIGALRM);
    ::sigprocmask(SIG_BLOCK, &alarm_only, nullptr);
    for (volatile unsigned long i = 0;; i = i + 1) {
    }
  }, 1);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK_THAT(e, Catch::Contains("did not finish within 1 s"));
  CHECK(s < 10);
}

TEST_CASE("probe_in_child: memory past the limit is named as such", "[isolated]") {
  const auto e = verdict([] {  // address space without touching it: the limit, not the machine's speed, ends it
    std::vector<std::unique_ptr<char[]>> hog;
    for (int i = 0; i < 64; ++i) {
      hog.emplace_back(new char[std::size_t(256) << 20]);
      *static_cast<volatile char*>(hog.back().get()) = 1;
    }
  }, 20);
#if TEST_ASAN
  SUCCEED("no address-space limit under AddressSanitizer (it reserves terabytes)");
#else
  CHECK_THAT(e, Catch::Contains("needed more than 1 GB of memory"));
#endif
}
