// test_sigbus.cpp: a GGUF model that shrinks while a tool has it mapped. Reading past the new end raises SIGBUS;
// interrupts.h's handler must end the tool with one line naming the file, remove the run's temporary files and exit
// 128 + SIGBUS. Run in a child process (the handler ends the process it runs in).
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "oscar/01_core/interrupts.h"
#include "oscar/01_core/output_files.h"
#include "oscar/02_model/formats/gguf.h"
#include "test_data.h"

namespace fs = std::filesystem;

TEST_CASE("a GGUF truncated while mapped: one line naming it, temporaries removed, exit 128+SIGBUS") {
  const fs::path dir = oscar::test::scratch() / "sigbus";
  fs::create_directories(dir);
  const fs::path model = dir / "m.gguf", out = dir / "out.h5", err = dir / "stderr.txt";
  fs::copy_file(std::string(OSCAR_DATA_DIR) + "/../tests/fixtures/tiny_llama.gguf", model,
                fs::copy_options::overwrite_existing);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // the "tool": maps the model, starts an output, then reads a tensor after the file shrank
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    oscar::interrupts::install("oscar-test");
    const oscar::GgufFile f = oscar::GgufFile::open(model.string());
    oscar::AtomicOutput tmp(out);  // a temporary the handler must remove
    const oscar::GgufTensor& t = f.tensors().back();
    ::truncate(model.c_str(), 0);
    volatile unsigned sum = 0;
    for (uint64_t i = 0; i < t.n_bytes; i += 64) sum = sum + t.data[i];  // faults: the pages are gone
    ::_exit(0);  // not reached when the handler works
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 128 + SIGBUS);
  std::string msg;
  {
    std::ifstream in(err);
    std::getline(in, msg);
  }
  CHECK(msg.find("oscar-test: error: " + model.string() + ": changed or truncated while in use") == 0);
  int leftovers = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp") != std::string::npos) ++leftovers;
  CHECK(leftovers == 0);
  CHECK_FALSE(fs::exists(out));
}
