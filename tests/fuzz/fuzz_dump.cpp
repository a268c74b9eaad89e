// fuzz_dump.cpp: an HDF5 dump from a stranger: the reader's structure checks (attributes, links, token ids and
// texts, per-layer attention) and then every layer's tensors. A refusal (oscar::Error) is the expected answer. The
// reader opens the file in a child process first (isolated.h), so a crash inside libhdf5 itself is a refusal here;
// a crash in oscar-kv's own code still shows in this process, which reads the file again after the child.
#include <cstdint>

#include "fuzz_input.h"
#include "oscar/01_core/error.h"
#include "oscar/03_dump/dump.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = oscar::fuzz::as_file(data, size, ".h5");
  try {
    const oscar::DumpReader r(path);
    for (int l = 0; l < r.info().n_layers && l < 4; ++l) (void)r.read_layer(l, {"q", "k", "v"});
  } catch (const oscar::Error&) {
  }
  return 0;
}
