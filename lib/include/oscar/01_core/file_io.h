// file_io.h: whole-file reads (plain, gzip, or split into NAME.part00, NAME.part01, ...) and sha256.
// Writing outputs (AtomicOutput, OutputSet, location checks, write errors): output_files.h, included here.
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "oscar/01_core/output_files.h"

namespace oscar {

// Reads `path` whole. When `path` does not exist but `path.part00` does, reads and concatenates
// path.part00, path.part01, ... in order. Throws Error naming the file when it cannot be read.
std::vector<uint8_t> read_file_bytes(const std::string& path);

// The name of part i of a split file: BASE.partII.
std::string part_name(const std::string& base, int i);
// Removes BASE.partFIRST, BASE.partFIRST+1, ... up to the first missing one: what an earlier, longer file left.
void remove_parts_from(const std::string& base, int first);

// Reads a text file; transparently gunzips when the file starts with the gzip magic bytes.
std::string read_text_file(const std::string& path);

// "-" for an input or output file: standard input or standard output.
inline bool is_standard_stream(const std::string& path) { return path == "-"; }
// Everything `in` holds until its end (standard input for a `-` input); Error naming `what` on a read error.
std::vector<char> read_stream(std::FILE* in, const std::string& what);
// Writes `bytes` to `out` and flushes it (standard output for a `-` output); a write error names `what`.
void write_stream(std::FILE* out, const std::vector<char>& bytes, const std::string& what);

// Lower-case hex sha256 of a byte range.
std::string sha256_hex(const void* data, size_t n);

}  // namespace oscar
