// h5_attrs.cpp: HDF5 attribute helpers.
#include "oscar/01_core/h5_attrs.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

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

H5::Attribute AttrReader::attr(const char* name) const {
  if (!f.attrExists(name)) fail("{}: missing root attribute '{}'; {}", path, name, fix);
  return f.openAttribute(name);
}
std::string AttrReader::str(const char* name) const {
  H5::Attribute a = attr(name);
  if (a.getTypeClass() != H5T_STRING) fail("{}: root attribute '{}' must be a string", path, name);
  std::string s;
  a.read(a.getStrType(), s);
  return s;
}
long long AttrReader::i64(const char* name) const {
  H5::Attribute a = attr(name);
  if (a.getTypeClass() != H5T_INTEGER || a.getSpace().getSimpleExtentNpoints() != 1)
    fail("{}: root attribute '{}' must be a scalar integer", path, name);
  long long v;
  a.read(H5::PredType::NATIVE_LLONG, &v);
  return v;
}
double AttrReader::f64(const char* name) const {
  H5::Attribute a = attr(name);
  const auto cls = a.getTypeClass();
  if ((cls != H5T_FLOAT && cls != H5T_INTEGER) || a.getSpace().getSimpleExtentNpoints() != 1)
    fail("{}: root attribute '{}' must be a scalar number", path, name);
  double v;
  a.read(H5::PredType::NATIVE_DOUBLE, &v);
  return v;
}

}  // namespace oscar::h5
