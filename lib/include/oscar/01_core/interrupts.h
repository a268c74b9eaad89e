// interrupts.h: what happens on SIGINT, SIGTERM and SIGHUP: every live temporary file is removed, a running
// plot script is stopped, and the tool exits 128+signal after one line "TOOL: error: interrupted".
// Contract: the registry below is the only global mutable state of lib/, and exists only because a signal
// handler cannot reach anything else. It is async-signal-safe: a fixed table of paths, atomics only.
// Library code registers through AtomicOutput / OutputLock (output_files.h); apps call install() once
// (apps/app_main.h does). Without install() the registry is kept but nothing handles signals.
#pragma once
#include <sys/types.h>

namespace oscar::interrupts {

// Installs the handlers for SIGINT, SIGTERM and SIGHUP (exit 128+signal after removing every registered path), and
// for SIGBUS (a mapped file truncated while in use: register_mapping)
// and ignores SIGXFSZ, so that a file-size limit (ulimit -f) makes write() fail with EFBIG instead of
// killing the tool. `tool` is copied (the message's prefix).
void install(const char* tool);

// Registers a file path to unlink when a handled signal arrives; returns a slot for forget(), or -1 when the
// table is full or the path too long (then the path is simply not removed on a signal).
int remember(const char* path);
// Registers a folder made by this run, removed (rmdir: only when empty) after the files on a signal.
int remember_folder(const char* path);
void forget(int slot);  // -1 is ignored

// The memory-mapped input file (one at a time: the GGUF model): when it shrinks while mapped, the read past its end
// (SIGBUS, handled by install()) removes every registered path and ends the tool with one line naming this file.
void register_mapping(const char* path);

// The plot script being waited for: sent the same signal (and waited for) before the temporaries go.
void set_child(pid_t pid);  // 0: none

// An output was moved into place (AtomicOutput::commit): a signal after that says the finished outputs are
// complete instead of "earlier outputs left as they were".
void note_committed();

// While an object of this type lives (in any thread), handled signals are held back: a run's outputs are
// renamed into place all together, or not at all. The held-back signal is acted on in the destructor.
class HoldSignals {
 public:
  HoldSignals();
  ~HoldSignals();
  HoldSignals(const HoldSignals&) = delete;
  HoldSignals& operator=(const HoldSignals&) = delete;
};

}  // namespace oscar::interrupts
