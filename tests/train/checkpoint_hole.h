// Tests' damaged checkpoints: a hole in a saved checkpoint (checkpoint_damage_test, load_bounds_test).
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>

#include "io/hdf5.h"
#include "train/checkpoint.h"

namespace hz::test {

// Adds a never-written dataset of `bytes` bytes (f32) to `group` of a saved checkpoint: its storage is
// allocated (the file grows by that much) but never written, so the file holds a hole there, as a
// crafted or damaged file would. Then reseals the file.
inline void add_hole(const std::string& p, const std::string& group, const std::string& key, int64_t bytes) {
  namespace h5 = hz::io::h5;
  {
    h5::File f = h5::File::open(p, /*writable=*/true);
    const h5::Group g = f.root().open_group(group);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_layout(dcpl, H5D_CONTIGUOUS);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    const hsize_t dims[1] = {static_cast<hsize_t>(bytes / 4)};
    const hid_t sp = H5Screate_simple(1, dims, nullptr);
    const std::string link = hz::train::escape_key(key);
    h5::Dataset d(h5::Id(H5Dcreate2(g.id(), link.c_str(), H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose),
                  "/" + group + "/" + link);
    H5Sclose(sp);
    H5Pclose(dcpl);
    d.write_attr_string("key", key);
    d.write_attr_string("dtype", "f32");
    d.close();
    f.close();
  }
  hz::train::seal_checkpoint_file(p);
}

}  // namespace hz::test
