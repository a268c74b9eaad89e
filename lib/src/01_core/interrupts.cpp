// interrupts.cpp: the signal-safe registry of temporary paths and the SIGINT/SIGTERM/SIGHUP handler.
// Everything the handler touches is a fixed-size table or an atomic, written by the registering thread in
// an order that keeps it consistent: a slot is filled (state 1), then published (state 2) before its file
// is created, and emptied (state 0) only after its file was renamed away or removed. The handler unlinks
// only published slots; it calls nothing but kill, waitpid, unlink, write and _exit (async-signal-safe).
#include "oscar/01_core/interrupts.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace oscar::interrupts {

namespace {

constexpr int kSlots = 128;
constexpr size_t kPathMax = 4096;  // PATH_MAX: any path open() takes fits

std::atomic<int> g_state[kSlots];  // 0 free, 1 being filled, 2 live file, 3 live folder
char g_path[kSlots][kPathMax];
std::atomic<pid_t> g_child{0};
std::atomic<int> g_hold{0};     // HoldSignals objects alive
std::atomic<int> g_pending{0};  // a signal that arrived while held
std::atomic<int> g_dying{0};
std::atomic<int> g_committed{0};  // outputs moved into place by this run (a late signal then finds them complete)
char g_mapped[kPathMax] = "";   // the memory-mapped input (register_mapping), named by the SIGBUS message
std::atomic<int> g_mapped_set{0};
char g_tool[128] = "oscar";     // set once by install(), before any thread starts
bool g_installed = false;

void put(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = ::write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

const char* sig_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

void remove_registered(int sig) {  // stops the plot script (with `sig`), then removes every registered path
  const pid_t child = g_child.load();
  if (child > 0) {
    ::kill(child, sig);
    ::waitpid(child, nullptr, 0);
  }
  for (int i = 0; i < kSlots; ++i)
    if (g_state[i].load() == 2) ::unlink(g_path[i]);
  for (int i = 0; i < kSlots; ++i)
    if (g_state[i].load() == 3) ::rmdir(g_path[i]);  // only when empty
}

// A read of a memory-mapped file past its end: the file shrank while in use (SIGBUS). Not deferrable.
void bus_handler(int) {
  if (g_dying.exchange(1) != 0)
    for (;;) ::pause();
  remove_registered(SIGTERM);
  put(g_tool);
  put(": error: ");
  put(g_mapped_set.load() ? g_mapped : "an input file");
  put(": changed or truncated while in use (a read past its end); temporary files removed; do not modify the file "
      "while a tool reads it, and check it (its sha256) before running again\n");
  ::_exit(128 + SIGBUS);
}

[[noreturn]] void die(int sig) {
  if (g_dying.exchange(1) != 0)
    for (;;) ::pause();  // another thread is already cleaning up and will _exit
  remove_registered(sig);
  put(g_tool);
  put(": error: interrupted by ");
  put(sig_name(sig));
  put(g_committed.load() > 0 ? "; temporary files removed; the outputs already moved into place are complete\n"
                              : "; temporary files removed, earlier outputs left as they were\n");
  ::_exit(128 + sig);
}

void handler(int sig) {
  if (g_hold.load() > 0) {
    g_pending.store(sig);
    // The holder may have finished between the check and the store: then act now.
    if (g_hold.load() == 0 && g_pending.exchange(0) != 0) die(sig);
    return;
  }
  die(sig);
}

}  // namespace

void install(const char* tool) {
  std::strncpy(g_tool, tool, sizeof g_tool - 1);
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGINT);
  sigaddset(&sa.sa_mask, SIGTERM);
  sigaddset(&sa.sa_mask, SIGHUP);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(s, &sa, nullptr);
  struct sigaction bus {};
  bus.sa_handler = bus_handler;
  sigfillset(&bus.sa_mask);
  ::sigaction(SIGBUS, &bus, nullptr);
  ::signal(SIGXFSZ, SIG_IGN);  // kept ignored by child processes too (plot scripts): EFBIG, not death
  g_installed = true;
}

namespace {
int publish(const char* path, int state) {
  const size_t n = std::strlen(path);
  if (n + 1 > kPathMax) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (g_state[i].compare_exchange_strong(expected, 1)) {
      std::memcpy(g_path[i], path, n + 1);
      g_state[i].store(state);
      return i;
    }
  }
  return -1;
}
}  // namespace

int remember(const char* path) { return publish(path, 2); }
int remember_folder(const char* path) { return publish(path, 3); }

void forget(int slot) {
  if (slot >= 0 && slot < kSlots) g_state[slot].store(0);
}

void register_mapping(const char* path) {
  g_mapped_set.store(0);
  const size_t n = std::strlen(path);
  if (n + 1 > kPathMax) return;
  std::memcpy(g_mapped, path, n + 1);
  g_mapped_set.store(1);
}

void set_child(pid_t pid) { g_child.store(pid); }
void note_committed() { g_committed.fetch_add(1); }

HoldSignals::HoldSignals() { g_hold.fetch_add(1); }

HoldSignals::~HoldSignals() {
  if (g_hold.fetch_sub(1) == 1) {
    const int sig = g_pending.exchange(0);
    if (sig != 0 && g_installed) die(sig);
  }
}

}  // namespace oscar::interrupts
