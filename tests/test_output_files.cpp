// test_output_files.cpp: lib/'s one way of writing outputs (01_core/output_files.h): multi-file commits appear
// all or none, an older file survives, location checks before the work, write-error messages, folder locks.
#include <catch2/catch.hpp>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "oscar/01_core/error.h"
#include "oscar/01_core/output_files.h"
#include "test_data.h"

using namespace oscar;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {
std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}
bool any_temporary(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.find(".tmp") != std::string::npos || n.rfind(".oscar-", 0) == 0) return true;
  }
  return false;
}
fs::path fresh(const char* name) {
  const fs::path d = test::scratch() / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
}  // namespace

TEST_CASE("an output set appears all together or not at all", "[output_files]") {
  const fs::path d = fresh("outset");
  std::ofstream(d / "a.csv") << "old a";
  {
    OutputSet set;
    set.add(d / "a.csv").write("new a");
    set.add(d / "b.json").write("new b");
    // A failure before commit (here: an exception) leaves the older file and no new one.
  }
  CHECK(slurp(d / "a.csv") == "old a");
  CHECK_FALSE(fs::exists(d / "b.json"));
  CHECK_FALSE(any_temporary(d));
  {
    OutputSet set;
    set.add(d / "a.csv").write("new a");
    set.add(d / "b.json").write("new b");
    set.commit();
  }
  CHECK(slurp(d / "a.csv") == "new a");
  CHECK(slurp(d / "b.json") == "new b");
  CHECK_FALSE(any_temporary(d));
}

TEST_CASE("output locations are checked before the work", "[output_files]") {
  const fs::path d = fresh("outcheck");
  std::ofstream(d / "file") << "x";
  CHECK_NOTHROW(check_output_file(d / "ok.h5"));
  CHECK_THROWS_WITH(check_output_file(d / "file" / "x.h5"), Contains("is a file, not a folder"));
  CHECK_NOTHROW(check_output_file(d / "missing" / "x.h5"));  // one rule for every tool: a missing folder is created
  CHECK_FALSE(fs::exists(d / "missing"));                      // when the output is written, not before the work
  CHECK_THROWS_WITH(check_output_file(d / "file" / "deeper" / "x.h5"), Contains("cannot be created"));
  CHECK_THROWS_WITH(check_output_file(d), Contains("is a folder, expected a file name"));
  CHECK_THROWS_WITH(check_output_folder(d / "file" / "sub"), Contains("cannot be created"));
  CHECK_THROWS_WITH(check_output_folder(d / "file"), Contains("is a file, expected an output folder"));
  CHECK_NOTHROW(check_output_folder(d / "new" / "deeper"));
  CHECK_FALSE(fs::exists(d / "new"));  // nothing is created before the work
  CHECK_THROWS_WITH(check_output_file(d / "big.h5", std::uint64_t(1) << 62), Contains("needs about"));
  CHECK_FALSE(any_temporary(d));
}

TEST_CASE("write errors name the file, the reason and what to do", "[output_files]") {
  CHECK(write_error_message("a.h5", ENOSPC) ==
        "a.h5: could not write (reason: No space left on device); free space on that disk or choose another output "
        "location");
  CHECK_THAT(write_error_message("a.h5", EFBIG), Contains("File too large") && Contains("ulimit -f"));
  CHECK_THAT(write_error_message("a.h5", EROFS), Contains("read-only"));
  CHECK_THROWS_AS(fail_write("a.h5", EACCES), Error);
}

TEST_CASE("a second lock on one output folder fails at once; the lock goes with its holder", "[output_files]") {
  const fs::path d = fresh("outlock");
  {
    const OutputLock first(d / "out", "oscar-sweep");
    CHECK(fs::exists(d / "out" / ".oscar-sweep.lock"));
    CHECK_THROWS_WITH(OutputLock(d / "out", "oscar-sweep"), Contains("another oscar-sweep") && Contains("is writing this folder"));
  }
  CHECK_FALSE(fs::exists(d / "out"));  // made by the lock, left empty: removed with it
  fs::create_directories(d / "kept");
  { const OutputLock again(d / "kept", "oscar-sweep"); }
  CHECK(fs::exists(d / "kept"));
  CHECK_FALSE(fs::exists(d / "kept" / ".oscar-sweep.lock"));
}
