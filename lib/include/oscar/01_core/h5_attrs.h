// h5_attrs.h: HDF5 scalar attributes for oscar-kv's files (dumps, rotations): writers, and a reader whose
// errors name the file, the attribute and what to do (`fix`, e.g. "re-run the calibration").
#pragma once
#include <H5Cpp.h>

#include <string>

namespace oscar::h5 {

void silence();  // HDF5's own error stack printing off (errors become our exceptions)
void put_str(H5::H5Object& o, const char* name, const std::string& v);  // variable-length UTF-8
void put_i64(H5::H5Object& o, const char* name, long long v);
void put_f64(H5::H5Object& o, const char* name, double v);

struct AttrReader {
  const H5::H5File& f;
  const std::string& path;
  std::string fix;  // appended to "missing root attribute" errors
  H5::Attribute attr(const char* name) const;
  std::string str(const char* name) const;   // fixed or variable length
  long long i64(const char* name) const;     // any integer type
  double f64(const char* name) const;        // any float or integer type
};

}  // namespace oscar::h5
