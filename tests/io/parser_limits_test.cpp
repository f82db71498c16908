// Issue 19: safetensors and HDF5 files are refused cleanly (an hz::Error naming the file and what
// is wrong) or read correctly; never a crash from a deep JSON value or a damaged string.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "io/hdf5.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using namespace hz::io;

namespace {

struct TmpDir {
  std::string path;
  TmpDir() {
    char t[] = "/tmp/hz_limits_XXXXXX";
    path = mkdtemp(t);
  }
  ~TmpDir() { fs::remove_all(path); }
  std::string file(const std::string& n) const { return path + "/" + n; }
};

void write_safetensors_raw(const std::string& p, const std::string& header, const std::string& data = "") {
  std::ofstream out(p, std::ios::binary);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
  out << header << data;
}

std::string nested(size_t depth) { return std::string(depth, '[') + "1" + std::string(depth, ']'); }

template <class F>
std::string refusal(F f) {
  try {
    f();
  } catch (const hz::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an hz::Error";
  return {};
}

}  // namespace

TEST(SafetensorsLimits, DeepHeaderIsRefusedBeforeParsing) {
  TmpDir d;
  const std::string p = d.file("model.safetensors");
  write_safetensors_raw(p, "{\"__metadata__\": {\"x\": " + nested(100000) + "}}");
  const std::string msg = refusal([&] { (void)SafetensorsFile::open(p); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_NE(msg.find("nested deeper than 64"), std::string::npos) << msg;
}

TEST(SafetensorsLimits, DeepShapeEntryIsRefused) {  // was: a stack overflow printing the shape
  TmpDir d;
  const std::string p = d.file("model.safetensors");
  write_safetensors_raw(p, "{\"w\": {\"dtype\": \"F32\", \"shape\": [" + nested(100000) + "], \"data_offsets\": [0, 4]}}",
                        std::string(4, '\0'));
  const std::string msg = refusal([&] { (void)SafetensorsFile::open(p); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_NE(msg.find("nested deeper"), std::string::npos) << msg;
}

TEST(SafetensorsLimits, ModerateNestingStillNamesTheTensor) {
  TmpDir d;
  const std::string p = d.file("model.safetensors");
  write_safetensors_raw(p, "{\"w\": {\"dtype\": \"F32\", \"shape\": [" + nested(20) + "], \"data_offsets\": [0, 4]}}",
                        std::string(4, '\0'));
  const std::string msg = refusal([&] { (void)SafetensorsFile::open(p); });
  EXPECT_NE(msg.find("tensor 'w'"), std::string::npos) << msg;
}

TEST(SafetensorsLimits, DeepIndexIsRefused) {
  TmpDir d;
  std::ofstream(d.file("model.safetensors.index.json")) << "{\"weight_map\": " << nested(100000) << "}";
  const std::string msg = refusal([&] { (void)SafetensorsSet::open_dir(d.path); });
  EXPECT_NE(msg.find("model.safetensors.index.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nested deeper"), std::string::npos) << msg;
}

TEST(Hdf5Strings, WrittenFixedLengthAndReadBack) {
  TmpDir d;
  const std::string p = d.file("s.h5");
  {
    h5::File f = h5::File::create(p);
    f.root().write_attr_string("a", "h\xc3\xa9llo");
    f.root().write_attr_string("empty", "");
    f.root().write_string("ds", "value");
    f.close();
  }
  h5::File f = h5::File::open(p);
  EXPECT_EQ(f.root().read_attr_string("a"), "h\xc3\xa9llo");
  EXPECT_EQ(f.root().read_attr_string("empty"), "");
  EXPECT_EQ(f.root().open_dataset("ds").read_string(), "value");
  const hid_t a = H5Aopen(f.root().id(), "a", H5P_DEFAULT);
  const hid_t t = H5Aget_type(a);
  EXPECT_EQ(H5Tis_variable_str(t), 0);  // fixed-length from now on
  H5Tclose(t);
  H5Aclose(a);
}

TEST(Hdf5Strings, VariableLengthStringsAreRefused) {
  // they live in the global heap, which libhdf5 1.10 reads without bounds checks (a flipped bit there
  // crashed it in H5HG_read or looped forever): refused from the type, before the heap is touched
  TmpDir d;
  const std::string p = d.file("vl.h5");
  {
    const hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    const hid_t sp = H5Screate(H5S_SCALAR);
    const char* v = "old value";
    const hid_t a = H5Acreate2(f, "key", t, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, &v);
    H5Aclose(a);
    const hid_t ds = H5Dcreate2(f, "meta", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Tclose(t);
    H5Fclose(f);
  }
  h5::File f = h5::File::open(p);
  EXPECT_NE(refusal([&] { (void)f.root().read_attr_string("key"); }).find("variable-length string"), std::string::npos);
  EXPECT_NE(refusal([&] { (void)f.root().open_dataset("meta"); }).find("variable-length string"), std::string::npos);
}
