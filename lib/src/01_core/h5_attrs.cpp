// h5_attrs.cpp: HDF5 attribute helpers.
#include "oscar/01_core/h5_attrs.h"

#include "oscar/01_core/error.h"

namespace oscar::h5 {

void silence() { H5::Exception::dontPrint(); }

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
