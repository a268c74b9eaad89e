// gguf.cpp: the GGUF reader (see gguf.h). Layout (little-endian): "GGUF", uint32 version, uint64
// tensor count, uint64 key/value count; the key/values (string key, uint32 value type, value; strings
// are uint64 length + bytes, arrays uint32 element type + uint64 count + elements); the tensor infos
// (string name, uint32 n_dims, n_dims uint64 dims, uint32 ggml type, uint64 offset); padding to
// general.alignment; the tensor data, each tensor at its offset from there.
#include "oscar/02_model/formats/gguf.h"

#include "oscar/02_model/architecture.h"

#include <cmath>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <unordered_map>

#include "oscar/01_core/error.h"
#include "oscar/01_core/interrupts.h"
#include "oscar/01_core/printable.h"

namespace oscar {

namespace {

constexpr const char* kRefetch = "the file is incomplete or damaged; download or convert it again";

bool is_integer(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::U16: case GgufValueType::I16:
    case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::U64: case GgufValueType::I64:
      return true;
    default:
      return false;
  }
}

// Bytes of one value of a fixed-size type; 0 for string and array.
uint64_t fixed_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::BOOL: return 1;
    case GgufValueType::U16: case GgufValueType::I16: return 2;
    case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::F32: return 4;
    case GgufValueType::U64: case GgufValueType::I64: case GgufValueType::F64: return 8;
    default: return 0;
  }
}

bool valid_value_type(uint32_t t) { return t <= 12; }

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

__int128 load_int(GgufValueType t, const uint8_t* p) {
  switch (t) {
    case GgufValueType::U8: return load<uint8_t>(p);
    case GgufValueType::I8: return load<int8_t>(p);
    case GgufValueType::U16: return load<uint16_t>(p);
    case GgufValueType::I16: return load<int16_t>(p);
    case GgufValueType::U32: return load<uint32_t>(p);
    case GgufValueType::I32: return load<int32_t>(p);
    case GgufValueType::U64: return load<uint64_t>(p);
    case GgufValueType::I64: return load<int64_t>(p);
    default: return 0;
  }
}

double load_float(GgufValueType t, const uint8_t* p) {
  if (t == GgufValueType::F32) return load<float>(p);
  if (t == GgufValueType::F64) return load<double>(p);
  return static_cast<double>(load_int(t, p));
}

std::string int128_string(__int128 v) {
  if (v >= 0) return fmt::format("{}", static_cast<unsigned long long>(v));
  return fmt::format("-{}", static_cast<unsigned long long>(-v));
}

struct Value {
  GgufValueType type = GgufValueType::U8;
  const uint8_t* p = nullptr;  // scalar payload, or the first array element
  std::string_view str;        // STRING
  GgufValueType elem = GgufValueType::U8;  // ARRAY
  uint64_t count = 0;
  std::vector<std::string_view> strs;  // ARRAY of STRING
};

}  // namespace

const char* gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8: return "uint8";
    case GgufValueType::I8: return "int8";
    case GgufValueType::U16: return "uint16";
    case GgufValueType::I16: return "int16";
    case GgufValueType::U32: return "uint32";
    case GgufValueType::I32: return "int32";
    case GgufValueType::F32: return "float32";
    case GgufValueType::BOOL: return "bool";
    case GgufValueType::STRING: return "string";
    case GgufValueType::ARRAY: return "array";
    case GgufValueType::U64: return "uint64";
    case GgufValueType::I64: return "int64";
    case GgufValueType::F64: return "float64";
  }
  return "unknown";
}

int64_t GgufTensor::n_rows() const {
  int64_t r = 1;
  for (size_t i = 1; i < dims.size(); ++i) r *= dims[i];
  return dims.empty() ? 0 : r;
}

std::string GgufTensor::shape_string() const {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += fmt::format("{}{}", i ? "x" : "", dims[i]);
  return s;
}

struct GgufFile::Impl {
  std::string path;
  int fd = -1;
  const uint8_t* base = nullptr;
  uint64_t size = 0;
  uint32_t version = 0;
  uint32_t alignment = 32;
  uint64_t data_offset = 0;
  std::vector<std::string> keys;
  std::unordered_map<std::string, Value> kv;
  std::vector<GgufTensor> tensors;
  std::unordered_map<std::string, size_t> by_name;

  ~Impl() {
    if (base) ::munmap(const_cast<uint8_t*>(base), size);
    if (fd >= 0) ::close(fd);
  }

  const Value& value(const std::string& key) const {
    auto it = kv.find(key);
    if (it == kv.end())
      fail("{}: metadata key '{}' is missing; use a GGUF that carries it (llama.cpp's convert_hf_to_gguf.py writes it)",
           path, key);
    return it->second;
  }
  [[noreturn]] void wrong_type(const std::string& key, const Value& v, const char* wanted) const {
    std::string have = gguf_value_type_name(v.type);
    if (v.type == GgufValueType::ARRAY) have = std::string("array of ") + gguf_value_type_name(v.elem);
    fail("{}: metadata key '{}' holds a value of type {}, expected {}; the file's metadata is malformed, convert the model again",
         path, key, have, wanted);
  }
  __int128 integer(const std::string& key, const char* wanted, __int128 lo, __int128 hi) const {
    const Value& v = value(key);
    if (!is_integer(v.type)) wrong_type(key, v, wanted);
    const __int128 x = load_int(v.type, v.p);
    if (x < lo || x > hi)
      fail("{}: metadata key '{}' = {} does not fit {}; the file's metadata is malformed, convert the model again", path,
           key, int128_string(x), wanted);
    return x;
  }
  const Value& array(const std::string& key) const {
    const Value& v = value(key);
    if (v.type != GgufValueType::ARRAY) wrong_type(key, v, "an array");
    return v;
  }
};

namespace {

// Bounds-checked reading of the mapped header and tensor infos.
struct Cursor {
  struct Src {
    const std::string& path;
    const uint8_t* base;
    uint64_t size;
  } f;
  uint64_t pos = 0;

  const uint8_t* take(uint64_t n, const std::string& what) {
    if (n > f.size || pos > f.size - n)
      fail("{}: truncated: {} needs {} bytes at offset {}, but the file has only {} bytes; {}", f.path, what, n, pos,
           f.size, kRefetch);
    const uint8_t* p = f.base + pos;
    pos += n;
    return p;
  }
  template <class T>
  T get(const std::string& what) {
    return load<T>(take(sizeof(T), what));
  }
  std::string_view string(const std::string& what) {
    const uint64_t n = get<uint64_t>(what + " (its length)");
    const uint8_t* p = take(n, what);
    return {reinterpret_cast<const char*>(p), static_cast<size_t>(n)};
  }

  // Reads a value of type `t` (announced by the file) into v; arrays may nest (depth-limited).
  void value(GgufValueType t, Value& v, const std::string& what, int depth) {
    v.type = t;
    if (const uint64_t n = fixed_size(t)) {
      v.p = take(n, what);
      return;
    }
    if (t == GgufValueType::STRING) {
      v.str = string(what);
      return;
    }
    // ARRAY
    if (depth > 3) fail("{}: {} nests arrays more than 3 deep; {}", f.path, what, kRefetch);
    const uint32_t et = get<uint32_t>(what + " (its element type)");
    if (!valid_value_type(et))
      fail("{}: {} has element type {}, not a GGUF value type (0-12); {}", f.path, what, et, kRefetch);
    v.elem = static_cast<GgufValueType>(et);
    v.count = get<uint64_t>(what + " (its length)");
    v.p = f.base + pos;
    if (const uint64_t n = fixed_size(v.elem)) {
      if (v.count > (f.size - pos) / n)
        fail("{}: truncated: {} claims {} elements of {} bytes at offset {}, but the file has only {} bytes; {}", f.path,
             what, v.count, n, pos, f.size, kRefetch);
      take(v.count * n, what);
    } else if (v.elem == GgufValueType::STRING) {
      if (v.count > (f.size - pos) / 8)
        fail("{}: truncated: {} claims {} strings at offset {}, but the file has only {} bytes; {}", f.path, what,
             v.count, pos, f.size, kRefetch);
      v.strs.reserve(v.count);
      for (uint64_t i = 0; i < v.count; ++i) v.strs.push_back(string(what + " (element " + std::to_string(i) + ")"));
    } else {
      if (v.count > (f.size - pos) / 12)
        fail("{}: truncated: {} claims {} arrays at offset {}, but the file has only {} bytes; {}", f.path, what, v.count,
             pos, f.size, kRefetch);
      for (uint64_t i = 0; i < v.count; ++i) {
        Value inner;
        value(GgufValueType::ARRAY, inner, what + " (element " + std::to_string(i) + ")", depth + 1);
      }
    }
  }
};

}  // namespace

GgufFile::GgufFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::open(const std::string& path) {
  auto im = std::make_unique<Impl>();
  Impl& f = *im;
  f.path = path;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // O_NONBLOCK: a FIFO is refused below, not waited on
  if (f.fd < 0) fail("{}: cannot open: {}; check the path (a GGUF model file is expected)", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) fail("{}: cannot stat: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("{}: not a regular file; pass a GGUF model file", path);
  f.size = static_cast<uint64_t>(st.st_size);
  if (f.size < 24)
    fail("{}: truncated: {} bytes, shorter than a GGUF header (24 bytes); {}", path, f.size, kRefetch);
  void* m = ::mmap(nullptr, f.size, PROT_READ, MAP_PRIVATE, f.fd, 0);
  if (m == MAP_FAILED) fail("{}: cannot memory-map {} bytes: {}", path, f.size, std::strerror(errno));
  f.base = static_cast<const uint8_t*>(m);
  interrupts::register_mapping(path.c_str());  // a file truncated while mapped: one line naming it (SIGBUS)

  Cursor c{{f.path, f.base, f.size}};
  const uint8_t* magic = c.take(4, "the magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    std::string shown;
    for (int i = 0; i < 4; ++i)
      shown += (magic[i] >= 32 && magic[i] < 127) ? std::string(1, static_cast<char>(magic[i]))
                                                    : fmt::format("\\x{:02x}", magic[i]);
    fail("{}: not a GGUF file (magic '{}', expected 'GGUF'); pass a .gguf model file", path, shown);
  }
  f.version = c.get<uint32_t>("the version");
  if (f.version != 2 && f.version != 3) {
    const bool swapped = f.version == __builtin_bswap32(2u) || f.version == __builtin_bswap32(3u);
    fail("{}: GGUF version {} is not supported (supported: 2 and 3{}); convert the model with a current llama.cpp", path,
         f.version, swapped ? ", little-endian; this file is big-endian" : "");
  }
  const uint64_t n_tensors = c.get<uint64_t>("the tensor count");
  const uint64_t n_kv = c.get<uint64_t>("the metadata count");
  // Every key/value takes at least 13 bytes, every tensor info at least 28: counts beyond that are
  // a damaged header, reported before anything is reserved.
  if (n_kv > f.size / 13 || n_tensors > f.size / 28)
    fail("{}: the header claims {} metadata entries and {} tensors, more than a {}-byte file can hold; {}", path, n_kv,
         n_tensors, f.size, kRefetch);

  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string what = "metadata entry " + std::to_string(i);
    std::string key(c.string(what + " (its key)"));
    const uint32_t t = c.get<uint32_t>("the type of metadata key '" + key + "'");
    if (!valid_value_type(t))
      fail("{}: metadata key '{}' has value type {}, not a GGUF value type (0-12); {}", path, key, t, kRefetch);
    Value v;
    c.value(static_cast<GgufValueType>(t), v, "the value of metadata key '" + key + "'", 0);
    if (f.kv.count(key)) fail("{}: metadata key '{}' appears twice; {}", path, key, kRefetch);
    f.keys.push_back(key);
    f.kv.emplace(std::move(key), std::move(v));
  }

  if (f.kv.count("general.alignment")) {
    const auto a = f.integer("general.alignment", "a uint32", 1, UINT32_MAX);
    f.alignment = static_cast<uint32_t>(a);
    if ((f.alignment & (f.alignment - 1)) != 0)
      fail("{}: general.alignment = {} is not a power of two; {}", path, f.alignment, kRefetch);
  }

  f.tensors.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.file = path;
    t.name = std::string(c.string("the name of tensor " + std::to_string(i)));
    const std::string what = "tensor '" + t.name + "'";
    const uint32_t nd = c.get<uint32_t>("the dimension count of " + what);
    if (nd < 1 || nd > 4) fail("{}: {} has {} dimensions (1 to 4 supported); {}", path, what, nd, kRefetch);
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t dim = c.get<uint64_t>("the dimensions of " + what);
      if (dim == 0 || dim > (uint64_t{1} << 40) || __builtin_mul_overflow(n_el, dim, &n_el) || n_el > (uint64_t{1} << 50))
        fail("{}: {} has an implausible dimension {}; {}", path, what, dim, kRefetch);
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    t.type = c.get<uint32_t>("the type of " + what);
    t.offset = c.get<uint64_t>("the data offset of " + what);
    if (!ggml_type_known(t.type))
      fail("{}: {} has ggml type id {}, which oscar-kv does not know; supported types: {}; convert or quantize the "
           "model to one of them",
           path, what, t.type, ggml_dequantizable_types());
    const int64_t bs = ggml_block_size(t.type);
    if (t.dims[0] % bs != 0)
      fail("{}: {} ({}) has rows of {} values, not a multiple of {}'s block size {}; {}", path, what, t.type_name(),
           t.dims[0], t.type_name(), bs, kRefetch);
    t.n_bytes = static_cast<uint64_t>(ggml_row_bytes(t.type, t.dims[0])) * static_cast<uint64_t>(t.n_rows());
    if (t.offset % f.alignment != 0)
      fail("{}: {} starts at data offset {}, not a multiple of the alignment {}; {}", path, what, t.offset, f.alignment,
           kRefetch);
    if (f.by_name.count(t.name)) fail("{}: two tensors are named '{}'; {}", path, t.name, kRefetch);
    f.by_name.emplace(t.name, f.tensors.size());
    f.tensors.push_back(std::move(t));
  }

  f.data_offset = (c.pos + f.alignment - 1) / f.alignment * f.alignment;
  for (GgufTensor& t : f.tensors) {
    const uint64_t begin = f.data_offset + t.offset;
    if (t.offset > f.size || begin > f.size || t.n_bytes > f.size - begin)
      fail("{}: tensor '{}' ({} {}, {} bytes at data offset {}) ends at byte {}, past the end of the file ({} bytes); {}",
           path, t.name, t.type_name(), t.shape_string(), t.n_bytes, t.offset,
           static_cast<unsigned __int128>(f.data_offset) + t.offset + t.n_bytes > UINT64_MAX
               ? std::string("(beyond 2^64)")
               : std::to_string(f.data_offset + t.offset + t.n_bytes),
           f.size, kRefetch);
    t.data = f.base + begin;
  }
  return GgufFile(std::move(im));
}

const std::string& GgufFile::path() const { return impl_->path; }
uint32_t GgufFile::version() const { return impl_->version; }
uint64_t GgufFile::file_size() const { return impl_->size; }
uint32_t GgufFile::alignment() const { return impl_->alignment; }
uint64_t GgufFile::data_offset() const { return impl_->data_offset; }
const std::vector<std::string>& GgufFile::keys() const { return impl_->keys; }
bool GgufFile::has(const std::string& key) const { return impl_->kv.count(key) != 0; }
GgufValueType GgufFile::value_type(const std::string& key) const { return impl_->value(key).type; }
GgufValueType GgufFile::array_type(const std::string& key) const { return impl_->array(key).elem; }
uint64_t GgufFile::array_size(const std::string& key) const { return impl_->array(key).count; }

std::string GgufFile::get_string(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (v.type != GgufValueType::STRING) impl_->wrong_type(key, v, "a string");
  return std::string(v.str);
}

bool GgufFile::get_bool(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (v.type != GgufValueType::BOOL) impl_->wrong_type(key, v, "a bool");
  return *v.p != 0;
}

uint32_t GgufFile::get_u32(const std::string& key) const {
  return static_cast<uint32_t>(impl_->integer(key, "a uint32", 0, UINT32_MAX));
}
int32_t GgufFile::get_i32(const std::string& key) const {
  return static_cast<int32_t>(impl_->integer(key, "an int32", INT32_MIN, INT32_MAX));
}
uint64_t GgufFile::get_u64(const std::string& key) const {
  return static_cast<uint64_t>(impl_->integer(key, "a uint64", 0, UINT64_MAX));
}
int64_t GgufFile::get_i64(const std::string& key) const {
  return static_cast<int64_t>(impl_->integer(key, "an int64", INT64_MIN, INT64_MAX));
}

double GgufFile::get_f64(const std::string& key) const {
  const Value& v = impl_->value(key);
  if (v.type != GgufValueType::F32 && v.type != GgufValueType::F64 && !is_integer(v.type))
    impl_->wrong_type(key, v, "a number");
  return load_float(v.type, v.p);
}
float GgufFile::get_f32(const std::string& key) const { return static_cast<float>(get_f64(key)); }

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const Value& v = impl_->array(key);
  if (v.elem != GgufValueType::STRING) impl_->wrong_type(key, v, "an array of strings");
  return {v.strs.begin(), v.strs.end()};
}

std::vector<float> GgufFile::get_f32_array(const std::string& key) const {
  const Value& v = impl_->array(key);
  if (v.elem != GgufValueType::F32 && v.elem != GgufValueType::F64) impl_->wrong_type(key, v, "an array of floats");
  std::vector<float> out(v.count);
  const uint64_t w = fixed_size(v.elem);
  for (uint64_t i = 0; i < v.count; ++i) out[i] = static_cast<float>(load_float(v.elem, v.p + i * w));
  return out;
}

std::vector<int64_t> GgufFile::get_i64_array(const std::string& key) const {
  const Value& v = impl_->array(key);
  if (!is_integer(v.elem)) impl_->wrong_type(key, v, "an array of integers");
  std::vector<int64_t> out(v.count);
  const uint64_t w = fixed_size(v.elem);
  for (uint64_t i = 0; i < v.count; ++i) {
    const __int128 x = load_int(v.elem, v.p + i * w);
    if (x > INT64_MAX)
      fail("{}: metadata array '{}' element {} = {} does not fit an int64; the file's metadata is malformed", path(), key,
           i, int128_string(x));
    out[i] = static_cast<int64_t>(x);
  }
  return out;
}

std::vector<int32_t> GgufFile::get_i32_array(const std::string& key) const {
  const std::vector<int64_t> w = get_i64_array(key);
  std::vector<int32_t> out(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] < INT32_MIN || w[i] > INT32_MAX)
      fail("{}: metadata array '{}' element {} = {} does not fit an int32; the file's metadata is malformed", path(), key,
           i, w[i]);
    out[i] = static_cast<int32_t>(w[i]);
  }
  return out;
}

std::vector<uint8_t> GgufFile::get_bool_array(const std::string& key) const {
  const Value& v = impl_->array(key);
  if (v.elem != GgufValueType::BOOL) impl_->wrong_type(key, v, "an array of bools");
  std::vector<uint8_t> out(v.count);
  for (uint64_t i = 0; i < v.count; ++i) out[i] = v.p[i] != 0;
  return out;
}

std::string GgufFile::value_string(const std::string& key) const {
  const Value& v = impl_->value(key);
  auto scalar = [](GgufValueType t, const uint8_t* p) -> std::string {
    if (is_integer(t)) return int128_string(load_int(t, p));
    if (t == GgufValueType::BOOL) return *p ? "true" : "false";
    return fmt::format("{}", load_float(t, p));
  };
  if (v.type == GgufValueType::STRING) return std::string(v.str);
  if (v.type != GgufValueType::ARRAY) return scalar(v.type, v.p);
  std::string s = fmt::format("array of {} {} [", v.count, gguf_value_type_name(v.elem));
  const uint64_t shown = std::min<uint64_t>(v.count, 8);
  for (uint64_t i = 0; i < shown; ++i) {
    if (i) s += ", ";
    if (v.elem == GgufValueType::STRING) s += fmt::format("'{}'", v.strs[i]);
    else if (fixed_size(v.elem)) s += scalar(v.elem, v.p + i * fixed_size(v.elem));
    else s += "...";
  }
  return s + (shown < v.count ? ", ...]" : "]");
}

const std::vector<GgufTensor>& GgufFile::tensors() const { return impl_->tensors; }
bool GgufFile::has_tensor(const std::string& name) const { return impl_->by_name.count(name) != 0; }

const GgufTensor& GgufFile::tensor(const std::string& name) const {
  auto it = impl_->by_name.find(name);
  if (it == impl_->by_name.end())
    fail("{}: tensor '{}' is missing; the model lacks it (is it the architecture expected?)", path(), name);
  return impl_->tensors[it->second];
}

void GgufFile::require_dequantizable() const {
  const GgufTensor* first = nullptr;
  size_t count = 0;
  for (const auto& t : impl_->tensors)
    if (!ggml_type_dequantizable(t.type)) {
      if (!first) first = &t;
      ++count;
    }
  if (first)
    fail("{}: tensor '{}' is stored as {} (ggml type {}), which oscar-kv cannot dequantize ({} such tensors); supported "
         "types: {}; use a file quantized to one of them (e.g. Q8_0, Q4_K_M, Q5_K_M)",
         path(), first->name, first->type_name(), first->type, count, ggml_dequantizable_types());
}

namespace {

template <class Out, class Fn>
void rows_impl(const GgufTensor& t, int64_t row0, int64_t nrows, Out* dst, Fn&& convert) {
  if (!ggml_type_dequantizable(t.type))
    fail("{}: tensor '{}' is stored as {} (ggml type {}), which oscar-kv cannot dequantize; supported types: {}; use a "
         "file quantized to one of them",
         t.file, t.name, t.type_name(), t.type, ggml_dequantizable_types());
  if (row0 < 0 || nrows < 0 || row0 > t.n_rows() || nrows > t.n_rows() - row0)
    fail("{}: tensor '{}' ({}): rows {}..{} requested, it has {} rows", t.file, t.name, t.shape_string(), row0,
         row0 + nrows, t.n_rows());
  const int64_t len = t.row_length();
  const uint64_t rb = t.row_bytes();
  const GgmlType type = t.ggml_type();
#pragma omp parallel for schedule(static) if (nrows * len >= (int64_t{1} << 18) && nrows > 1)
  for (int64_t r = 0; r < nrows; ++r) convert(type, t.data + static_cast<uint64_t>(row0 + r) * rb, dst + r * len, len);
}

}  // namespace

void dequantize_rows(const GgufTensor& t, int64_t row0, int64_t nrows, float* dst) {
  rows_impl(t, row0, nrows, dst, [](GgmlType ty, const uint8_t* s, float* d, int64_t n) { dequantize(ty, s, d, n); });
}

void dequantize_rows_bf16(const GgufTensor& t, int64_t row0, int64_t nrows, uint16_t* dst) {
  rows_impl(t, row0, nrows, dst,
            [](GgmlType ty, const uint8_t* s, uint16_t* d, int64_t n) { dequantize_bf16(ty, s, d, n); });
}

namespace {

// Every shape is bounded far above any real model, so that products of them (n_heads * head_dim, dim * vocab) cannot
// overflow the int64 arithmetic that sizes tensors and checks shapes.
int positive(const GgufFile& f, const std::string& key, int32_t most = 1 << 20) {
  const int32_t v = f.get_i32(key);
  if (v <= 0 || v > most)
    fail("{}: metadata key '{}' = {} must be between 1 and {}; the file's metadata is malformed", f.path(), key, v, most);
  return static_cast<int>(v);
}

// Layers, widths, heads and the head size (`a`: the architecture's key prefix).
void read_shapes(const GgufFile& f, const std::string& a, GgufModelConfig& c) {
  const std::string& path = f.path();
  c.n_layers = positive(f, a + "block_count", 4096);
  c.dim = positive(f, a + "embedding_length");
  c.ffn_dim = positive(f, a + "feed_forward_length", 1 << 22);
  c.n_heads = positive(f, a + "attention.head_count", 4096);
  if (f.has(a + "attention.head_count_kv") && f.value_type(a + "attention.head_count_kv") == GgufValueType::ARRAY)
    fail("{}: '{}attention.head_count_kv' varies per layer, which oscar-kv does not support; use a model with one KV "
         "head count",
         path, a);
  c.n_kv_heads = f.has(a + "attention.head_count_kv") ? positive(f, a + "attention.head_count_kv", 4096) : c.n_heads;
  if (c.n_heads % c.n_kv_heads != 0)
    fail("{}: {} query heads are not a multiple of {} KV heads; the file's metadata is malformed", path, c.n_heads, c.n_kv_heads);
  if (f.has(a + "attention.key_length")) {
    c.head_dim = positive(f, a + "attention.key_length", 8192);
  } else {
    if (c.dim % c.n_heads != 0)
      fail("{}: embedding length {} is not a multiple of {} heads and '{}attention.key_length' is absent; the file's "
           "metadata is malformed",
           path, c.dim, c.n_heads, a);
    c.head_dim = c.dim / c.n_heads;
  }
  if (f.has(a + "attention.value_length") && positive(f, a + "attention.value_length") != c.head_dim)
    fail("{}: value head size {} differs from key head size {}, which oscar-kv does not support", path,
         f.get_i32(a + "attention.value_length"), c.head_dim);
  c.rms_eps = f.get_f64(a + "attention.layer_norm_rms_epsilon");
  if (!(c.rms_eps > 0 && c.rms_eps < 1))
    fail("{}: '{}attention.layer_norm_rms_epsilon' = {} is not a small positive number; the file's metadata is malformed", path, a,
         c.rms_eps);
  c.context_length = positive(f, a + "context_length", 1 << 30);
}

// RoPE: the dimensions, base, scaling and frequency factors (the convention from the architecture table).
void read_rope(const GgufFile& f, const std::string& a, const ArchitectureFacts& facts, GgufModelConfig& c) {
  const std::string& path = f.path();
  c.rope_dims = f.has(a + "rope.dimension_count") ? positive(f, a + "rope.dimension_count") : c.head_dim;
  if (c.rope_dims > c.head_dim || c.rope_dims % 2 != 0)
    fail("{}: RoPE over {} dimensions of a {}-dimensional head is not possible; the file's metadata is malformed", path,
         c.rope_dims, c.head_dim);
  if (f.has(a + "rope.freq_base")) c.rope_base = f.get_f64(a + "rope.freq_base");
  if (!(c.rope_base > 1.0) || !std::isfinite(c.rope_base) || c.rope_base > 1e12)
    fail("{}: '{}rope.freq_base' = {} must be a finite number between 1 and 1e12; the file's metadata is malformed", path, a,
         c.rope_base);
  c.rope_convention = std::string(facts.rope_convention);
  if (f.has(a + "rope.scaling.type")) {
    c.rope_scaling = f.get_string(a + "rope.scaling.type");
    if (c.rope_scaling == "none") c.rope_scaling.clear();
  }
  if (f.has(a + "rope.scaling.factor")) c.rope_scaling_factor = f.get_f64(a + "rope.scaling.factor");
  if (!std::isfinite(c.rope_scaling_factor) || c.rope_scaling_factor <= 0)
    fail("{}: '{}rope.scaling.factor' = {} must be a finite positive number; the file's metadata is malformed", path, a,
         c.rope_scaling_factor);
  c.rope_freq_factors = f.has_tensor(std::string(kModelTensors.rope_freqs));
}

// The tokenizer's presence and the vocabulary, against the embedding's rows.
void read_vocabulary(const GgufFile& f, const std::string& a, GgufModelConfig& c) {
  const std::string& path = f.path();
  for (const char* key : {"tokenizer.ggml.model", "tokenizer.ggml.tokens"})
    if (!f.has(key))
      fail("{}: tokenizer metadata '{}' is missing; oscar-kv needs the tokenizer inside the GGUF (llama.cpp's "
           "convert_hf_to_gguf.py writes it); use a GGUF converted with its tokenizer",
           path, key);
  c.tokenizer_model = f.get_string("tokenizer.ggml.model");
  if (c.tokenizer_model == "gpt2" && !f.has("tokenizer.ggml.merges"))
    fail("{}: tokenizer metadata 'tokenizer.ggml.merges' is missing, which a gpt2 (byte-level BPE) tokenizer needs; use a "
         "GGUF converted with its tokenizer",
         path);
  const GgufTensor& emb = f.tensor(std::string(kModelTensors.token_embd));
  if (emb.dims.size() != 2 || emb.dims[0] != c.dim)
    fail("{}: token_embd.weight has shape {}, expected {}x(vocab); the file is inconsistent", path, emb.shape_string(), c.dim);
  c.vocab_size = static_cast<int>(emb.dims[1]);
  const uint64_t n_tokens = f.array_size("tokenizer.ggml.tokens");
  if (n_tokens != static_cast<uint64_t>(c.vocab_size))
    fail("{}: the tokenizer lists {} tokens but token_embd.weight has {} rows; the file is inconsistent", path, n_tokens,
         c.vocab_size);
  if (f.has(a + "vocab_size") && f.get_i64(a + "vocab_size") != c.vocab_size)
    fail("{}: '{}vocab_size' = {} but token_embd.weight has {} rows; the file is inconsistent", path, a, f.get_i64(a + "vocab_size"),
         c.vocab_size);
}

// Local (sliding-window) layers: the window from the file, the pattern and their RoPE base from the table.
void read_windows(const GgufFile& f, const std::string& a, const ArchitectureFacts& facts, GgufModelConfig& c) {
  if (facts.local_period <= 0) return;
  if (!f.has(a + "attention.sliding_window"))
    fail("{}: metadata key '{}attention.sliding_window' is missing, which a {} model's local layers need; the file is "
         "incomplete: convert the model again with a current llama.cpp",
         f.path(), a, c.architecture);
  c.sliding_window = positive(f, a + "attention.sliding_window", 1 << 30);
  for (int l = 0; l < c.n_layers; ++l) c.layer_windows.push_back(l % facts.local_period < facts.local_period - 1 ? c.sliding_window : 0);
  c.rope_base_local = facts.local_rope_theta;
}

}  // namespace

GgufModelConfig read_model_config(const GgufFile& f) {
  GgufModelConfig c;
  const std::string& path = f.path();
  c.architecture = f.get_string("general.architecture");
  const ArchitectureFacts* facts = nullptr;
  try {
    facts = &architecture_facts(c.architecture);
  } catch (const Error& e) {
    fail("{}: {}; use a model of a supported architecture", path, e.what());
  }
  const std::string a = c.architecture + ".";
  c.name = printable_short(f.has("general.name") ? f.get_string("general.name") : std::filesystem::path(path).stem().string(),
                           120);  // shown in tables and on the terminal: the file's author's text, made safe
  read_shapes(f, a, c);
  read_rope(f, a, *facts, c);
  read_vocabulary(f, a, c);
  c.tied_output = !f.has_tensor(std::string(kModelTensors.output));
  c.qk_norm = f.has_tensor(block_tensor(0, facts->block().tensors.q_norm));
  c.qkv_bias = f.has_tensor(block_tensor(0, facts->block().tensors.q_bias));
  read_windows(f, a, *facts, c);
  if (facts->attention_scale) c.attention_scale = facts->attention_scale(c.dim, c.n_heads, c.head_dim, c.n_layers);
  f.require_dequantizable();
  return c;
}

}  // namespace oscar
