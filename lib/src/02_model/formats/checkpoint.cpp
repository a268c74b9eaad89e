// checkpoint.cpp: parsing and validation of llama2.c legacy and OSCKF16 checkpoints.
#include "oscar/02_model/formats/checkpoint.h"

#include <cstring>
#include <filesystem>

#include "oscar/01_core/error.h"
#include "oscar/01_core/file_io.h"
#include "oscar/float_formats.h"

namespace oscar {

namespace {
constexpr char kMagic16[8] = {'O', 'S', 'C', 'K', 'F', '1', '6', '\0'};
constexpr size_t kLegacyHeader = 7 * sizeof(int32_t);
constexpr size_t kF16Header = 8 + 4 + 4 + kLegacyHeader + 32 + 8;

ModelConfig parse_header(const int32_t h[7], const std::string& path) {
  ModelConfig c;
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.vocab_size = h[5] == INT32_MIN ? 0 : (h[5] < 0 ? -h[5] : h[5]);  // -INT32_MIN would overflow: refused below
  c.shared_classifier = h[5] > 0;
  c.seq_len = h[6];
  auto bad = [&](const char* what) {
    fail("{}: not a llama2.c checkpoint: implausible header ({}): dim={} hidden_dim={} n_layers={} n_heads={} "
         "n_kv_heads={} vocab_size={} seq_len={}",
         path, what, h[0], h[1], h[2], h[3], h[4], h[5], h[6]);
  };
  if (c.dim <= 0 || c.dim > (1 << 16) || c.hidden_dim <= 0 || c.hidden_dim > (1 << 18)) bad("dim");
  if (c.n_layers <= 0 || c.n_layers > 1024) bad("n_layers");
  if (c.n_heads <= 0 || c.dim % c.n_heads != 0) bad("n_heads must divide dim");
  if (c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0) bad("n_kv_heads must divide n_heads");
  if (c.head_dim() % 2 != 0) bad("head_dim must be even for RoPE");
  if (c.vocab_size <= 0 || c.vocab_size > (1 << 22) || c.seq_len <= 0 || c.seq_len > (1 << 22)) bad("vocab/seq_len");
  return c;
}

void assign_views(Checkpoint& ck) {
  const ModelConfig& c = ck.config;
  const int64_t d = c.dim, hd = c.head_dim(), L = c.n_layers, kv = c.kv_dim(), qd = c.n_heads * hd, hid = c.hidden_dim;
  const float* p = ck.values.data();
  auto take = [&p](int64_t n) { const float* r = p; p += n; return r; };
  ck.token_embedding = take(c.vocab_size * d);
  const float* rms_att = take(L * d);
  const float* wq = take(L * d * qd);
  const float* wk = take(L * d * kv);
  const float* wv = take(L * d * kv);
  const float* wo = take(L * qd * d);
  const float* rms_ffn = take(L * d);
  const float* w1 = take(L * d * hid);
  const float* w2 = take(L * hid * d);
  const float* w3 = take(L * d * hid);
  ck.rms_final = take(d);
  take(c.seq_len * hd / 2);  // freq_cis_real (unused: RoPE is recomputed)
  take(c.seq_len * hd / 2);  // freq_cis_imag
  ck.classifier = c.shared_classifier ? ck.token_embedding : take(c.vocab_size * d);
  ck.layers.resize(L);
  for (int64_t l = 0; l < L; ++l) {
    ck.layers[l] = LayerWeights{rms_att + l * d, wq + l * d * qd, wk + l * d * kv, wv + l * d * kv, wo + l * qd * d,
                                rms_ffn + l * d, w1 + l * d * hid, w2 + l * hid * d, w3 + l * d * hid};
  }
}

std::string base_name(const std::string& path) {
  std::string n = std::filesystem::path(path).filename().string();
  for (const char* suf : {".f16", ".bin"})
    if (n.size() > std::strlen(suf) && n.ends_with(suf)) n.resize(n.size() - std::strlen(suf));
  return n;
}
}  // namespace

int64_t legacy_float_count(const ModelConfig& c) {
  const int64_t d = c.dim, hd = c.head_dim(), L = c.n_layers, kv = c.kv_dim(), qd = c.n_heads * hd, hid = c.hidden_dim;
  int64_t n = c.vocab_size * d + L * (2 * d + d * qd + 2 * d * kv + qd * d + 3 * d * hid) + d + c.seq_len * hd;
  if (!c.shared_classifier) n += c.vocab_size * d;
  return n;
}

Checkpoint load_checkpoint(const std::string& path) {
  const std::vector<uint8_t> raw = read_file_bytes(path);
  Checkpoint ck;
  ck.path = path;
  ck.name = base_name(path);
  if (raw.size() >= 8 && std::memcmp(raw.data(), kMagic16, 8) == 0) {
    if (raw.size() < kF16Header) fail("{}: float16 checkpoint truncated inside its header ({} bytes)", path, raw.size());
    uint32_t version;
    std::memcpy(&version, raw.data() + 8, 4);
    if (version != 1) fail("{}: float16 checkpoint version {} is not supported (this build reads version 1)", path, version);
    int32_t h[7];
    std::memcpy(h, raw.data() + 16, kLegacyHeader);
    ck.config = parse_header(h, path);
    std::string stored_sha;
    for (int i = 0; i < 32; ++i) stored_sha += fmt::format("{:02x}", raw[16 + kLegacyHeader + i]);
    uint64_t n;
    std::memcpy(&n, raw.data() + 16 + kLegacyHeader + 32, 8);
    const auto expect = static_cast<uint64_t>(legacy_float_count(ck.config));
    if (n != expect || raw.size() != kF16Header + 2 * expect)
      fail("{}: float16 checkpoint size disagrees with its header: {} bytes, expected {} ({} values); the file is "
           "truncated or was written for another model",
           path, raw.size(), kF16Header + 2 * expect, expect);
    ck.values.resize(n);
    const uint8_t* p = raw.data() + kF16Header;
    for (uint64_t i = 0; i < n; ++i) {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      ck.values[i] = half_bits_to_float(b);
    }
    std::vector<uint8_t> f32(kLegacyHeader + 4 * n);
    std::memcpy(f32.data(), h, kLegacyHeader);
    std::memcpy(f32.data() + kLegacyHeader, ck.values.data(), 4 * n);
    ck.sha256 = sha256_hex(f32.data(), f32.size());
    if (ck.sha256 != stored_sha)
      fail("{}: float16 checkpoint is corrupt: rebuilt float32 sha256 {} differs from the recorded {}", path, ck.sha256, stored_sha);
    ck.storage = "float16";
  } else {
    if (raw.size() < kLegacyHeader) fail("{}: too short to be a llama2.c checkpoint ({} bytes)", path, raw.size());
    int32_t h[7];
    std::memcpy(h, raw.data(), kLegacyHeader);
    ck.config = parse_header(h, path);
    const auto expect = static_cast<uint64_t>(legacy_float_count(ck.config));
    if (raw.size() != kLegacyHeader + 4 * expect)
      fail("{}: checkpoint size {} bytes disagrees with its header (dim={}, n_layers={}, vocab={}, seq_len={} imply {} "
           "bytes); the file is truncated or not a llama2.c legacy checkpoint",
           path, raw.size(), ck.config.dim, ck.config.n_layers, ck.config.vocab_size, ck.config.seq_len,
           kLegacyHeader + 4 * expect);
    ck.values.resize(expect);
    std::memcpy(ck.values.data(), raw.data() + kLegacyHeader, 4 * expect);
    ck.sha256 = sha256_hex(raw.data(), raw.size());
    ck.storage = "float32";
  }
  assign_views(ck);
  return ck;
}

std::vector<uint8_t> encode_float16_checkpoint(const Checkpoint& ck) {
  const ModelConfig& c = ck.config;
  const int32_t h[7] = {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                        c.shared_classifier ? c.vocab_size : -c.vocab_size, c.seq_len};
  const uint64_t n = ck.values.size();
  std::vector<uint8_t> out(kF16Header + 2 * n);
  std::memcpy(out.data(), kMagic16, 8);
  const uint32_t version = 1, reserved = 0;
  std::memcpy(out.data() + 8, &version, 4);
  std::memcpy(out.data() + 12, &reserved, 4);
  std::memcpy(out.data() + 16, h, kLegacyHeader);
  for (int i = 0; i < 32; ++i) out[16 + kLegacyHeader + i] = static_cast<uint8_t>(std::stoi(ck.sha256.substr(2 * i, 2), nullptr, 16));
  std::memcpy(out.data() + 16 + kLegacyHeader + 32, &n, 8);
  for (uint64_t i = 0; i < n; ++i) {
    const uint16_t b = float_to_half_bits(ck.values[i]);
    if (half_bits_to_float(b) != ck.values[i] && !(ck.values[i] != ck.values[i]))
      fail("{}: value {} at index {} is not exactly representable in float16; float16 storage would be lossy", ck.path,
           ck.values[i], i);
    std::memcpy(out.data() + kF16Header + 2 * i, &b, 2);
  }
  return out;
}

}  // namespace oscar
