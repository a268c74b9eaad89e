// h5_attrs.cpp: HDF5 attribute helpers.
#include "oscar/01_core/h5_attrs.h"

#include <algorithm>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "oscar/01_core/error.h"
#include "oscar/01_core/output_files.h"

namespace oscar::h5 {

namespace {

thread_local int t_errno = 0;  // errno of the last failed HDF5 call on this thread (0: none reported)

herr_t find_errno(unsigned, const H5E_error2_t* e, void*) {
  // The POSIX drivers describe system failures as "..., errno = 28, error message = '...'".
  if (e && e->desc) {
    if (const char* p = std::strstr(e->desc, "errno = ")) {
      const int v = std::atoi(p + 8);
      if (v > 0) t_errno = v;
    }
  }
  return 0;
}

herr_t record_failure(hid_t stack, void*) {
  H5Ewalk2(stack, H5E_WALK_DOWNWARD, find_errno, nullptr);
  return 0;
}

}  // namespace

void silence() {
  t_errno = 0;
  H5Eset_auto2(H5E_DEFAULT, record_failure, nullptr);
}

void fail_write(const std::string& file, const H5::Exception& e) {
  const int err = t_errno;
  t_errno = 0;
  if (err > 0) oscar::fail_write(file, err);
  fail("{}: could not write (HDF5: {}); choose another output location", file, e.getDetailMsg());
}

bool is_image(const std::vector<char>& image) {
  static constexpr char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  return image.size() >= sizeof kSignature && std::equal(std::begin(kSignature), std::end(kSignature), image.begin());
}

namespace {

H5::FileAccPropList core_driver() {
  H5::FileAccPropList fapl;
  fapl.setCore(1 << 20, false);  // grows in 1 MiB steps; never written to a backing file
  return fapl;
}

}  // namespace

H5::H5File open_image(const std::vector<char>& image) {
  H5::FileAccPropList fapl = core_driver();
  if (H5Pset_file_image(fapl.getId(), const_cast<char*>(image.data()), image.size()) < 0)
    throw H5::FileIException("open_image", "H5Pset_file_image failed");
  return H5::H5File("in-memory.h5", H5F_ACC_RDONLY, H5::FileCreatPropList::DEFAULT, fapl);
}

H5::H5File create_in_memory() { return H5::H5File("in-memory.h5", H5F_ACC_TRUNC, H5::FileCreatPropList::DEFAULT, core_driver()); }

std::vector<char> image_of(H5::H5File& f) {
  f.flush(H5F_SCOPE_GLOBAL);
  const ssize_t n = H5Fget_file_image(f.getId(), nullptr, 0);
  if (n < 0) throw H5::FileIException("image_of", "H5Fget_file_image failed");
  std::vector<char> bytes(static_cast<size_t>(n));
  if (H5Fget_file_image(f.getId(), bytes.data(), bytes.size()) < 0) throw H5::FileIException("image_of", "H5Fget_file_image failed");
  return bytes;
}

OutputFile::OutputFile(const std::string& final_path) : out_(final_path) {
  silence();
  try {
    file_ = std::make_unique<H5::H5File>(out_.temp_path().string(), H5F_ACC_TRUNC);
  } catch (const H5::Exception& e) {
    fail(e);
  }
}

OutputFile::~OutputFile() { abandon(); }

void OutputFile::discard_writes() noexcept {
  // The descriptor is pointed at an anonymous in-memory file: the flushes of the closes that follow then succeed
  // on a full disk (not past a file-size limit, which applies to every file; see abandon()).
  void* handle = nullptr;
  if (file_ && H5Fget_vfd_handle(file_->getId(), H5P_DEFAULT, &handle) >= 0 && handle) {
    const int nul = ::memfd_create("oscar-discarded-output", MFD_CLOEXEC);
    if (nul >= 0) {
      ::dup2(nul, *static_cast<int*>(handle));
      ::close(nul);
    }
  }
}

void OutputFile::abandon() noexcept {
  if (!file_) return;
  discard_writes();
  try {
    file_->close();
    file_.reset();
  } catch (...) {
    // HDF5 1.10 leaves a file whose close failed half torn down: never touch it again (its destructor would
    // retry), and apps/app_main.h ends the process without HDF5's exit-time teardown, which would crash on it.
    t_errno = 0;
    (void)file_.release();  // its destructor would retry and print; the process keeps one dead handle
  }
}

void OutputFile::fail(const H5::Exception& e) {
  try {
    fail_write(out_.final_path().string(), e);
  } catch (...) {
    discard_writes();
    throw;
  }
}

void OutputFile::commit() {
  if (!file_) oscar::fail("internal: {} was already committed or abandoned", final_path());
  try {
    file_->close();
  } catch (const H5::Exception& e) {
    fail(e);
  }
  file_.reset();
  out_.commit();
}

void put_str(H5::H5Object& o, const char* name, const std::string& v) {
  H5::StrType st(H5::PredType::C_S1, H5T_VARIABLE);
  st.setCset(H5T_CSET_UTF8);
  H5::Attribute a = o.createAttribute(name, st, H5::DataSpace(H5S_SCALAR));
  a.write(st, v);
}
void put_i64(H5::H5Object& o, const char* name, long long v) {
  H5::Attribute a = o.createAttribute(name, H5::PredType::STD_I64LE, H5::DataSpace(H5S_SCALAR));
  a.write(H5::PredType::NATIVE_LLONG, &v);
}
void put_f64(H5::H5Object& o, const char* name, double v) {
  H5::Attribute a = o.createAttribute(name, H5::PredType::IEEE_F64LE, H5::DataSpace(H5S_SCALAR));
  a.write(H5::PredType::NATIVE_DOUBLE, &v);
}

void put_i64s(H5::H5Object& o, std::initializer_list<std::pair<const char*, long long>> values) {
  for (const auto& [name, v] : values) put_i64(o, name, v);
}

void put_identity(H5::H5Object& o, const FileIdentity& id) {
  put_str(o, "format", id.format);
  put_i64(o, id.version_key, id.version);
  if (!id.model_optional || !id.model_name.empty()) put_str(o, "model_name", id.model_name);
  if (!id.model_optional || !id.checkpoint_sha256.empty()) put_str(o, "checkpoint_sha256", id.checkpoint_sha256);
}

namespace {
struct LinkVisit {
  std::string name;   // the first link that is not a hard link
  H5L_type_t type = H5L_TYPE_HARD;
};
herr_t visit_link(hid_t, const char* name, const H5L_info_t* info, void* data) {
  if (info->type == H5L_TYPE_HARD) return 0;
  auto* v = static_cast<LinkVisit*>(data);
  v->name = name;
  v->type = info->type;
  return 1;  // stop: one is enough
}
}  // namespace

void refuse_links(const H5::H5File& f, const std::string& path, const std::string& fix) {
  LinkVisit v;
  if (H5Lvisit(f.getId(), H5_INDEX_NAME, H5_ITER_NATIVE, visit_link, &v) < 0)
    fail("{}: HDF5 could not list the file's objects; the file is truncated or corrupt: {}", path, fix);
  if (!v.name.empty())
    fail("{}: /{} is {} link, which an oscar-kv file never holds (it would make the reader open {}); {}", path, v.name,
         v.type == H5L_TYPE_EXTERNAL ? "an external" : v.type == H5L_TYPE_SOFT ? "a soft" : "a user-defined",
         v.type == H5L_TYPE_EXTERNAL ? "another file" : "another object", fix);
}

void check_dataset_storage(const H5::DataSet& ds, const std::string& path, const std::string& name, const std::string& fix) {
  const hid_t id = ds.getId();
  const hid_t dcpl = H5Dget_create_plist(id);
  if (dcpl < 0) fail("{}: /{}: HDF5 cannot read its storage properties; the file is damaged: {}", path, name, fix);
  const H5D_layout_t layout = H5Pget_layout(dcpl);
  const H5::DataSpace sp = ds.getSpace();
  const hssize_t points = sp.getSimpleExtentNpoints();
  const size_t elem = ds.getDataType().getSize();
  std::string why;
  if (layout == H5D_COMPACT || layout == H5D_CONTIGUOUS) {
    const hsize_t stored = H5Dget_storage_size(id);
    const hsize_t want = static_cast<hsize_t>(points) * elem;
    if (elem > 0 && !ds.getDataType().isVariableStr() && stored != want)
      why = fmt::format("stores {} bytes for {} values of {} bytes", stored, points, elem);
  } else if (layout == H5D_CHUNKED) {
    const int rank = sp.getSimpleExtentNdims();
    hsize_t chunk[H5S_MAX_RANK] = {};
    if (H5Pget_chunk(dcpl, H5S_MAX_RANK, chunk) != rank) why = "has chunks of another rank than the dataset";
    for (int i = 0; why.empty() && i < rank; ++i)
      if (chunk[i] == 0) why = "has an empty chunk dimension";
    const int nf = H5Pget_nfilters(dcpl);
    // every stored chunk: exactly a chunk's bytes without filters (a shorter one is read past its end), at most a
    // little more with them (deflate never grows data by more than 0.1% and a few bytes)
    hsize_t chunk_bytes = elem;
    for (int i = 0; i < rank; ++i) chunk_bytes *= chunk[i];
    hsize_t dims[H5S_MAX_RANK] = {};
    sp.getSimpleExtentDims(dims);
    double grid = 1;  // chunks in the grid: bounded, or walking it would take forever
    for (int i = 0; why.empty() && i < rank; ++i) grid *= std::ceil(static_cast<double>(dims[i]) / static_cast<double>(chunk[i]));
    if (why.empty() && grid > double(1 << 22)) why = fmt::format("is cut into {:.0f} chunks (oscar-kv writes far fewer)", grid);
    hsize_t offset[H5S_MAX_RANK] = {};  // the chunk grid, walked by coordinates (each look-up is one index search)
    for (bool more = why.empty() && points > 0; more;) {
      hsize_t size = 0;
      unsigned mask = 0;
      haddr_t addr = 0;
      if (H5Dget_chunk_info_by_coord(id, offset, &mask, &addr, &size) < 0) why = "has an unreadable chunk index";
      else if (addr != HADDR_UNDEF && (nf == 0 ? size != chunk_bytes : size > chunk_bytes + chunk_bytes / 512 + 64))
        why = fmt::format("has a stored chunk of {} bytes where a chunk holds {}", size, chunk_bytes);
      more = why.empty();
      for (int d = rank - 1; more; --d) {  // next grid position; done after the last
        if (d < 0) { more = false; break; }
        offset[d] += chunk[d];
        if (offset[d] < dims[d]) break;
        offset[d] = 0;
      }
    }
    for (int i = 0; why.empty() && i < nf; ++i) {
      unsigned flags = 0;
      size_t n = 0;
      const H5Z_filter_t f = H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &n, nullptr, 0, nullptr, nullptr);
      if (f != H5Z_FILTER_DEFLATE && f != H5Z_FILTER_SHUFFLE && f != H5Z_FILTER_FLETCHER32)
        why = fmt::format("uses the filter {}, which oscar-kv files never use", static_cast<int>(f));
    }
  } else {
    why = "has a storage layout oscar-kv files never use (virtual or unknown)";
  }
  H5Pclose(dcpl);
  if (!why.empty()) fail("{}: /{} {}; the file is damaged or crafted: {}", path, name, why, fix);
}

H5::Attribute AttrReader::attr(const char* name) const {
  if (!o.attrExists(name)) fail("{}: missing {} '{}'; {}", path, where, name, fix);
  H5::Attribute a = o.openAttribute(name);
  // one value: a scalar space, or a simple space of one element (a null or empty space holds nothing to read)
  const H5::DataSpace sp = a.getSpace();
  const H5S_class_t cls = H5Sget_simple_extent_type(sp.getId());
  if (!(cls == H5S_SCALAR || (cls == H5S_SIMPLE && sp.getSimpleExtentNpoints() == 1)))
    fail("{}: {} '{}' must hold one value, found {}; {}", path, where, name,
         cls == H5S_NULL ? std::string("an empty (null) dataspace") : fmt::format("{} values", sp.getSimpleExtentNpoints()),
         fix);
  return a;
}
std::string AttrReader::str(const char* name) const {
  H5::Attribute a = attr(name);
  if (a.getTypeClass() != H5T_STRING) fail("{}: {} '{}' must be a string; {}", path, where, name, fix);
  const H5::StrType st = a.getStrType();
  constexpr size_t kMaxString = size_t{64} << 20;
  if (!st.isVariableStr() && st.getSize() > kMaxString)
    fail("{}: {} '{}' is a string of {} bytes (at most {} are read); {}", path, where, name, st.getSize(), kMaxString, fix);
  std::string s;
  a.read(st, s);  // one element, checked above: HDF5 writes one string
  return s;
}
long long AttrReader::i64(const char* name) const {
  H5::Attribute a = attr(name);
  if (a.getTypeClass() != H5T_INTEGER) fail("{}: {} '{}' must be a scalar integer; {}", path, where, name, fix);
  const H5::IntType it = a.getIntType();
  if (it.getSize() > 8 || (it.getSize() == 8 && it.getSign() == H5T_SGN_NONE)) {  // might not fit a long long
    unsigned long long u = 0;
    if (it.getSize() > 8) fail("{}: {} '{}' is a {}-byte integer; {}", path, where, name, it.getSize(), fix);
    a.read(H5::PredType::NATIVE_ULLONG, &u);
    if (u > static_cast<unsigned long long>(std::numeric_limits<long long>::max()))
      fail("{}: {} '{}' = {} is out of range; {}", path, where, name, u, fix);
    return static_cast<long long>(u);
  }
  long long v;
  a.read(H5::PredType::NATIVE_LLONG, &v);
  return v;
}
long long AttrReader::i64_in(const char* name, long long lo, long long hi) const {
  const long long v = i64(name);
  if (v < lo || v > hi) fail("{}: {} '{}' = {} must be between {} and {}; {}", path, where, name, v, lo, hi, fix);
  return v;
}
double AttrReader::f64(const char* name) const {
  H5::Attribute a = attr(name);
  const auto cls = a.getTypeClass();
  if (cls != H5T_FLOAT && cls != H5T_INTEGER) fail("{}: {} '{}' must be a scalar number; {}", path, where, name, fix);
  double v;
  a.read(H5::PredType::NATIVE_DOUBLE, &v);
  return v;
}

}  // namespace oscar::h5
