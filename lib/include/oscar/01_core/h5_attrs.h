// h5_attrs.h: HDF5 for oscar-kv's files (dumps, rotations): scalar attribute writers and a reader whose errors
// name the file, the attribute and what to do (`fix`, e.g. "re-run the calibration"); OutputFile, an HDF5 output
// whose failures become one write error and whose temporary never outlives a failure.
#pragma once
#include <H5Cpp.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "oscar/01_core/output_files.h"

namespace oscar::h5 {

// HDF5's own error printing off (errors become our exceptions, one line each). Instead, a failing HDF5 call
// records the operating system's errno found on its error stack (the C++ wrapper's exception drops it), for
// fail_write below. That record is per thread and read only by fail_write (the C library's hook has no
// other place to put it).
void silence();
// Throws the write error of `file` (output_files.h's message: reason and advice) for an HDF5 failure `e`
// while writing it: the system's reason when HDF5 reported one (ENOSPC, EFBIG, EACCES...), else HDF5's own.
[[noreturn]] void fail_write(const std::string& file, const H5::Exception& e);
void put_str(H5::H5Object& o, const char* name, const std::string& v);  // variable-length UTF-8
void put_i64(H5::H5Object& o, const char* name, long long v);
void put_f64(H5::H5Object& o, const char* name, double v);
// Integer attributes, in order: {{"n_layers", 30}, {"head_dim", 64}}.
void put_i64s(H5::H5Object& o, std::initializer_list<std::pair<const char*, long long>> values);

// What an oscar-kv HDF5 file is and which model it comes from, written first in every file: its format name, its
// version (under `version_key`: dumps and covariance fits say format_version, kernel rotations version), and the
// model's name and checkpoint sha256 (left out when empty and `model_optional`).
struct FileIdentity {
  std::string format;
  const char* version_key = "format_version";
  long long version = 1;
  std::string model_name, checkpoint_sha256;
  bool model_optional = false;
};
void put_identity(H5::H5Object& o, const FileIdentity& id);

// An HDF5 output written through AtomicOutput. After fail() (any HDF5 failure while writing), the file's
// descriptor points at an in-memory file, so that the closes that follow (they flush HDF5's caches again) do not
// fail a second time or print from a C++ destructor; the destructor then closes and removes the temporary. Writers declare their HDF5 objects before a `try` and close them explicitly inside it, so that a
// failing close is caught there and not in a destructor.
class OutputFile {
 public:
  explicit OutputFile(const std::string& final_path);  // checks the folder, creates the temporary HDF5 file
  ~OutputFile();                                        // abandons an uncommitted file; never throws
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  H5::H5File& file() { return *file_; }
  bool open() const { return file_ != nullptr; }
  std::string final_path() const { return out_.final_path().string(); }
  [[noreturn]] void fail(const H5::Exception& e);  // throws the write error; the file is abandoned
  void commit();  // closes (a full disk may show only here) and renames into place

 private:
  void discard_writes() noexcept;
  void abandon() noexcept;
  AtomicOutput out_;
  std::unique_ptr<H5::H5File> file_;
};

// HDF5 files held in memory (HDF5's core driver), for a file read from standard input or written to standard output:
// no temporary file. is_image() checks the HDF5 signature at the start; open_image() opens a copy of `image` read-only
// (H5::Exception on a corrupt image); create_in_memory() makes an empty file that never touches a disk, whose bytes
// image_of() returns once its objects are closed.
bool is_image(const std::vector<char>& image);
H5::H5File open_image(const std::vector<char>& image);
H5::H5File create_in_memory();
std::vector<char> image_of(H5::H5File& f);

// Attribute readers for files from strangers: the type class, the dataspace (scalar or one element; a string array,
// a null or empty space is refused before HDF5 reads anything) and the size of a fixed-length string are checked first.
// `o` is the file (root attributes) or a group; errors read "PATH: WHERE 'NAME' ...; FIX".
// Refuses a file holding a soft or external link anywhere (one error naming the file, the link and `fix`): an
// oscar-kv file holds only hard links, and an external link would make the reader open another file silently.
void refuse_links(const H5::H5File& f, const std::string& path, const std::string& fix);

// Refuses a dataset whose storage cannot hold what its dataspace says (libhdf5 1.10.8 then reads past its own
// buffers): a compact or contiguous layout must store exactly points x element bytes; a chunked one needs chunks of
// the dataset's rank and at most the filters HDF5 itself ships (deflate, shuffle, fletcher32). Errors name `path`,
// the dataset `name` and `fix`.
void check_dataset_storage(const H5::DataSet& ds, const std::string& path, const std::string& name, const std::string& fix);

struct AttrReader {
  const H5::H5Object& o;
  const std::string& path;
  std::string fix;                        // appended to every error: what to do
  std::string where = "root attribute";   // how errors name the attribute's place, e.g. "/layer_03 attribute"
  H5::Attribute attr(const char* name) const;
  std::string str(const char* name) const;   // fixed or variable length
  long long i64(const char* name) const;     // any integer type that fits in 64 bits
  long long i64_in(const char* name, long long lo, long long hi) const;  // an integer within [lo, hi]
  double f64(const char* name) const;        // any float or integer type
};

}  // namespace oscar::h5
