#include "rootfs/volumes.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>

#include "common/fs.h"
#include "common/json_fields.h"
#include "common/time.h"
#include "rootfs/store_io.h"

namespace cela::rootfs {
namespace json = boost::json;
namespace {

constexpr const char* kRecord = "volume.json";
constexpr const char* kImage = "image.ext4";

std::vector<std::string> subdirs(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == ".." || e->d_type != DT_DIR) continue;
    out.push_back(std::move(name));
  }
  ::closedir(d);
  return out;
}

}  // namespace

bool valid_volume_name(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name[0])) return false;
  for (char c : name)
    if (!alnum(c) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

std::string VolumeStore::volume_dir(const std::string& tenant_id, const std::string& name) const {
  return dir_ + "/" + tenant_id + "/" + name;
}

std::string VolumeStore::image_path(const std::string& tenant_id, const std::string& name) const {
  return volume_dir(tenant_id, name) + "/" + kImage;
}

Result<int> VolumeStore::open() {
  if (auto r = make_dirs(dir_, 0700); !r) return std::unexpected(r.error());
  int removed = 0;
  for (const auto& tenant : subdirs(dir_))
    for (const auto& name : subdirs(dir_ + "/" + tenant)) {
      std::string vdir = dir_ + "/" + tenant + "/" + name;
      if (::access((vdir + "/" + kRecord).c_str(), F_OK) == 0) continue;
      if (remove_tree(vdir)) ++removed;
    }
  return removed;
}

Result<std::string> VolumeStore::begin_create(const std::string& tenant_id, const std::string& name) {
  if (!valid_volume_name(name)) return fail(ErrorCode::invalid_argument, "bad volume name `" + name + "`");
  if (auto r = make_dirs(dir_ + "/" + tenant_id, 0700); !r) return std::unexpected(r.error());
  std::string vdir = volume_dir(tenant_id, name);
  if (::mkdir(vdir.c_str(), 0700) != 0) {
    if (errno == EEXIST) return fail(ErrorCode::conflict, "volume `" + name + "` exists");
    return sys_fail("mkdir " + vdir);
  }
  return vdir + "/" + kImage;
}

Result<VolumeRecord> VolumeStore::commit(const std::string& tenant_id, const std::string& name, uint64_t size_mb) {
  VolumeRecord r{tenant_id, name, size_mb, now_rfc3339(), 0};
  json::object o{{"name", name}, {"tenant_id", tenant_id}, {"size_mb", size_mb}, {"created_at", r.created_at}};
  if (auto w = write_file_atomic(volume_dir(tenant_id, name) + "/" + kRecord, json::serialize(o), 0600); !w)
    return std::unexpected(w.error());
  return r;
}

Result<void> VolumeStore::remove(const std::string& tenant_id, const std::string& name) {
  if (!valid_volume_name(name)) return fail(ErrorCode::not_found, "no volume `" + name + "`");
  return remove_tree(volume_dir(tenant_id, name));
}

Result<VolumeRecord> VolumeStore::get(const std::string& tenant_id, const std::string& name) const {
  if (!valid_volume_name(name)) return fail(ErrorCode::not_found, "no volume `" + name + "`");
  auto text = read_file(volume_dir(tenant_id, name) + "/" + kRecord);
  if (!text) {
    if (text.error().err == ENOENT) return fail(ErrorCode::not_found, "no volume `" + name + "`");
    return std::unexpected(text.error());
  }
  auto object = parse_json_object(*text, "volume record");
  if (!object) return std::unexpected(object.error());
  JsonFields f(*object);
  VolumeRecord r;
  r.tenant_id = tenant_id;
  r.name = name;
  auto size = f.require_integer("size_mb");
  if (!size) return std::unexpected(size.error());
  r.size_mb = static_cast<uint64_t>(*size);
  auto created = f.require_string("created_at");
  if (!created) return std::unexpected(created.error());
  r.created_at = *created;
  struct stat st {};
  if (::stat(image_path(tenant_id, name).c_str(), &st) == 0) r.allocated_bytes = static_cast<uint64_t>(st.st_blocks) * 512;
  return r;
}

Result<std::vector<VolumeRecord>> VolumeStore::list(const std::string& tenant_id) const {
  std::vector<VolumeRecord> out;
  for (const auto& name : subdirs(dir_ + "/" + tenant_id)) {
    auto r = get(tenant_id, name);
    if (r) out.push_back(std::move(*r));  // an unfinished create is not a volume yet
  }
  std::ranges::sort(out, {}, &VolumeRecord::name);
  return out;
}

}  // namespace cela::rootfs
