// file_io.h: whole-file reads (plain, gzip, or split into NAME.part00, NAME.part01, ...), sha256,
// and AtomicOutput, which writes under a temporary name and renames only on commit().
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace oscar {

// Reads `path` whole. When `path` does not exist but `path.part00` does, reads and concatenates
// path.part00, path.part01, ... in order. Throws Error naming the file when it cannot be read.
std::vector<uint8_t> read_file_bytes(const std::string& path);

// Reads a text file; transparently gunzips when the file starts with the gzip magic bytes.
std::string read_text_file(const std::string& path);

// Lower-case hex sha256 of a byte range.
std::string sha256_hex(const void* data, size_t n);

// Writes to `final_path` through a temporary file in the same folder: nothing appears under the
// final name until commit(); the destructor removes the temporary when commit() was not reached.
class AtomicOutput {
 public:
  explicit AtomicOutput(std::filesystem::path final_path);
  ~AtomicOutput();
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;
  const std::filesystem::path& temp_path() const { return temp_; }
  const std::filesystem::path& final_path() const { return final_; }
  void commit();  // renames the temporary to the final name

 private:
  std::filesystem::path final_, temp_;
  bool committed_ = false;
};

}  // namespace oscar
