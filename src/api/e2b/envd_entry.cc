// filesystem.EntryInfo as envd fills it (envd_fs.h).
#include <sys/stat.h>

#include <boost/json.hpp>
#include <cstdio>
#include <ctime>

#include "api/e2b/envd_files.h"
#include "api/e2b/envd_fs.h"

namespace cela::api::e2b {
namespace json = boost::json;

std::string go_permissions(uint32_t format, uint32_t mode) {
  std::string out;
  // Go's os.FileMode.String(): type letters first ("dalTLDpSugct?"), then rwx x 3.
  if (format == S_IFDIR) out += 'd';
  if (format == S_IFLNK) out += 'L';
  if (format == S_IFBLK || format == S_IFCHR) out += 'D';
  if (format == S_IFIFO) out += 'p';
  if (format == S_IFSOCK) out += 'S';
  if (mode & S_ISUID) out += 'u';
  if (mode & S_ISGID) out += 'g';
  if (format == S_IFCHR) out += 'c';
  if (mode & S_ISVTX) out += 't';
  if (out.empty()) out += '-';
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) out += (mode & (0400u >> i)) ? rwx[i] : '-';
  return out;
}

std::string rfc3339_ms(int64_t ms) {
  std::time_t secs = static_cast<std::time_t>(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
  int frac = static_cast<int>(ms - static_cast<int64_t>(secs) * 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
  return buf;
}

namespace {

const char* file_type_name(const std::string& type) {
  if (type == "file") return "FILE_TYPE_FILE";
  if (type == "dir") return "FILE_TYPE_DIRECTORY";
  if (type == "symlink") return "FILE_TYPE_SYMLINK";
  return nullptr;  // FILE_TYPE_UNSPECIFIED: the default, omitted
}

}  // namespace

json::object entry_json(session::SessionFs& fs, const session::FileInfo& info) {
  json::object o{{"name", info.name}, {"path", info.path}, {"size", std::to_string(info.size)}};
  uint32_t mode = info.mode & 0777;
  const char* type = file_type_name(info.type);
  if (info.type == "symlink") {
    type = nullptr;
    std::string target = info.path;
    if (auto real = fs.real_path(info.path); real) {
      target = *real;
      if (auto t = fs.stat(*real); t) {
        type = file_type_name(t->type);
        mode = t->mode & 0777;
      }
    }
    o["symlinkTarget"] = target;
  }
  if (type) o["type"] = type;
  o["mode"] = mode;
  o["permissions"] = go_permissions(info.format, info.mode);
  o["owner"] = fs.user_name(info.uid);
  o["group"] = fs.group_name(info.gid);
  o["modifiedTime"] = rfc3339_ms(info.mtime_ms);
  if (auto attrs = fs.xattrs(info.path, kMetadataXattr); attrs && !attrs->empty()) {
    json::object m;
    for (auto& [k, v] : *attrs) m[k] = v;
    o["metadata"] = std::move(m);
  }
  return o;
}

}  // namespace cela::api::e2b
