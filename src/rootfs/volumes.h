// Where volumes live: one directory per volume, <dir>/<tenant id>/<name>/, holding
// `image.ext4` (the filesystem, made by the runtime) and `volume.json` (what the API
// shows), written last: a directory without it is a create that did not finish and
// is removed by open(). Only metadata and paths here; mounting is runtime/storage.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"

namespace cela::rootfs {

struct VolumeRecord {
  std::string tenant_id;
  std::string name;
  uint64_t size_mb = 0;
  std::string created_at;
  uint64_t allocated_bytes = 0;  // of the image on the host disk (it is sparse)
};

// 1-63 characters: lowercase letters, digits, '.', '_' and '-', starting with a
// letter or digit.
bool valid_volume_name(const std::string& name);

class VolumeStore {
 public:
  explicit VolumeStore(std::string dir) : dir_(std::move(dir)) {}
  // Creates the directory; removes unfinished creates. Returns how many it removed.
  Result<int> open();
  std::string image_path(const std::string& tenant_id, const std::string& name) const;
  // Reserves `name` (conflict when it exists) and returns the image path to fill.
  Result<std::string> begin_create(const std::string& tenant_id, const std::string& name);
  // Writes the record: the volume exists from here on.
  Result<VolumeRecord> commit(const std::string& tenant_id, const std::string& name, uint64_t size_mb);
  // Removes a reserved or existing volume's directory.
  Result<void> remove(const std::string& tenant_id, const std::string& name);
  Result<VolumeRecord> get(const std::string& tenant_id, const std::string& name) const;
  Result<std::vector<VolumeRecord>> list(const std::string& tenant_id) const;

 private:
  std::string volume_dir(const std::string& tenant_id, const std::string& name) const;
  std::string dir_;
};

}  // namespace cela::rootfs
