// isolated.cpp: probe_in_child (isolated.h): fork, limits, wait, and the one-line verdict.
#include "oscar/01_core/isolated.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "oscar/01_core/error.h"

#if defined(__SANITIZE_ADDRESS__)
#define OSCAR_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OSCAR_ASAN 1
#endif
#endif
#ifndef OSCAR_ASAN
#define OSCAR_ASAN 0
#endif

namespace oscar {

namespace {
constexpr int kFinished = 0, kOutOfMemory = 3, kOther = 4;
}  // namespace

void probe_in_child(const std::string& file, const std::string& what, const std::string& advice,
                    const std::function<void()>& probe, unsigned seconds, unsigned long long max_bytes) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return;  // no child to spare: the parent's own run is all there is
  if (pid == 0) {
#if !OSCAR_ASAN  // AddressSanitizer reserves terabytes of address space: a limit on it would stop the child at once
    struct rlimit as {max_bytes, max_bytes};
    ::setrlimit(RLIMIT_AS, &as);
#endif
    // the default action for every signal a crash, the time limit or the parent's handlers would use: the parent then
    // sees the signal (the parent's own handlers would remove the parent's temporaries; a fuzzer's would report the
    // child as its own, and libFuzzer's SIGALRM handler returns without ending the child)
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGBUS, SIGSEGV, SIGABRT, SIGFPE, SIGILL, SIGALRM})
      ::signal(sig, SIG_DFL);
    ::alarm(seconds);
    int code = kFinished;
    try {
      probe();
    } catch (const std::bad_alloc&) {
      code = kOutOfMemory;
    } catch (const Error&) {
      code = kFinished;  // a clean refusal: the parent's run says it
    } catch (...) {
      code = kOther;
    }
    ::_exit(code);  // no exit-time teardown of the libraries (it may crash on a damaged state)
  }
  // the parent keeps its own deadline (a little after the child's alarm): a child that outlives it is killed
  int status = 0;
  bool overdue = false;
  for (unsigned long waited_ms = 0;; waited_ms += 10) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid) break;
    if (got < 0 && errno != EINTR) return;
    if (!overdue && waited_ms >= 1000ul * seconds + 2000) {
      overdue = true;
      ::kill(pid, SIGKILL);
    }
    ::usleep(10'000);
  }
  if (WIFEXITED(status)) {
    if (WEXITSTATUS(status) == kOutOfMemory)
      fail("{}: {} needed more than {} GB of memory; the file is damaged or crafted: {}", file, what, max_bytes >> 30,
           advice);
    if (WEXITSTATUS(status) == kFinished || WEXITSTATUS(status) == kOther)
      return;  // finished (kOther: an unexpected exception, which the parent's run reports in its own words)
    // another code: the child was ended by a handler of its own (a sanitizer's or a fuzzer's report, an out-of-memory
    // hook): the parent must not repeat what ended it
    fail("{}: {} ended abnormally (exit status {}); the file is damaged or crafted: {}", file, what, WEXITSTATUS(status),
         advice);
  }
  const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  if (sig == SIGALRM || overdue)
    fail("{}: {} did not finish within {} s (a hang inside the library); the file is damaged or crafted: {}", file, what,
         seconds, advice);
  fail("{}: {} crashed (SIG{}); the file is damaged or crafted: {}", file, what, sig ? sigabbrev_np(sig) : "?",
       advice);
}

}  // namespace oscar
