// file_io.cpp: whole-file reads, gzip and sha256 (OpenSSL EVP).
#include "oscar/01_core/file_io.h"

#include <openssl/evp.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>

#include "oscar/01_core/error.h"

namespace fs = std::filesystem;

namespace oscar {

static std::vector<uint8_t> read_one(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("{}: no such file", path);
  if (fs::is_directory(path, ec)) fail("{}: is a directory, expected a file", path);
  if (!fs::is_regular_file(path, ec))  // a FIFO would block in open(), a device never ends
    fail("{}: is not a regular file (a FIFO, device or socket); give a file", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open for reading ({})", path, std::strerror(errno));
  in.seekg(0, std::ios::end);
  const auto size = static_cast<size_t>(in.tellg());
  in.seekg(0);
  std::vector<uint8_t> buf(size);
  if (size && !in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(size)))
    fail("{}: read failed after {} bytes", path, in.gcount());
  return buf;
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::error_code ec;
  if (fs::exists(path, ec) || !fs::exists(path + ".part00", ec)) return read_one(path);
  std::vector<uint8_t> all;
  for (int i = 0;; ++i) {
    const std::string part = part_name(path, i);
    if (!fs::exists(part, ec)) break;
    auto b = read_one(part);
    all.insert(all.end(), b.begin(), b.end());
  }
  return all;
}

std::string part_name(const std::string& base, int i) { return fmt::format("{}.part{:02d}", base, i); }

void remove_parts_from(const std::string& base, int first) {
  std::error_code ec;
  for (int i = first; fs::exists(part_name(base, i), ec); ++i) {
    if (!fs::remove(part_name(base, i), ec) && ec)
      fail("{}: could not remove this part of an earlier, longer file (reason: {}); remove it by hand, or the parts "
           "before it will not read back as one file",
           part_name(base, i), ec.message());
  }
}

std::string read_text_file(const std::string& path) {
  auto raw = read_file_bytes(path);
  if (raw.size() < 2 || raw[0] != 0x1f || raw[1] != 0x8b) return std::string(raw.begin(), raw.end());
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 32) != Z_OK) fail("{}: zlib initialisation failed", path);
  std::string out;
  std::vector<char> chunk(1 << 20);
  zs.next_in = raw.data();
  zs.avail_in = static_cast<uInt>(raw.size());
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    zs.next_out = reinterpret_cast<Bytef*>(chunk.data());
    zs.avail_out = static_cast<uInt>(chunk.size());
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&zs);
      fail("{}: corrupt or truncated gzip data ({}); re-copy the file", path, zs.msg ? zs.msg : "inflate error");
    }
    out.append(chunk.data(), chunk.size() - zs.avail_out);
    if (rc != Z_STREAM_END && zs.avail_in == 0 && zs.avail_out != 0) {
      inflateEnd(&zs);
      fail("{}: gzip stream ends early (truncated file); re-copy the file", path);
    }
  }
  inflateEnd(&zs);
  return out;
}

std::vector<char> read_stream(std::FILE* in, const std::string& what) {
  std::vector<char> all, buf(1 << 20);
  for (;;) {
    const size_t n = std::fread(buf.data(), 1, buf.size(), in);
    all.insert(all.end(), buf.begin(), buf.begin() + static_cast<long>(n));
    if (n < buf.size()) break;
  }
  if (std::ferror(in)) fail("{}: read error ({}); give a file path instead of -", what, std::strerror(errno));
  return all;
}

void write_stream(std::FILE* out, const std::vector<char>& bytes, const std::string& what) {
  if (std::fwrite(bytes.data(), 1, bytes.size(), out) != bytes.size() || std::fflush(out) != 0) fail_write(what, errno);
}

std::string sha256_hex(const void* data, size_t n) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data, n, md, &len, EVP_sha256(), nullptr) != 1) fail("sha256: OpenSSL digest failed");
  std::string hex;
  for (unsigned i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

}  // namespace oscar
