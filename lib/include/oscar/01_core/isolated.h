// isolated.h: runs a piece of work on an untrusted file in a child process first, so that a crash inside a third-party
// library (the system's libhdf5 1.10.8 crashes, hangs or exhausts memory on some crafted HDF5 files) becomes one error
// naming the file instead of the tool's death. The child's result is discarded; the parent then does the real work.
#pragma once
#include <functional>
#include <string>

namespace oscar {

// Runs `probe` in a forked child with a memory limit (`max_bytes` of address space) and a time limit (`seconds`).
// Returns normally when the child finished (an Error thrown by `probe` counts as finished: the caller's own run
// reports it). Throws Error "FILE: WHAT crashed (SIGSEGV) ...; ADVICE" when the child died by a signal, ran out of
// memory or time. Where fork is unavailable, returns without probing.
void probe_in_child(const std::string& file, const std::string& what, const std::string& advice,
                    const std::function<void()>& probe, unsigned seconds = 60, unsigned long long max_bytes = 8ull << 30);

}  // namespace oscar
