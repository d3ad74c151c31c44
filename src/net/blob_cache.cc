// BlobCache (blob_cache.h).
#include "net/blob_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "common/fd.h"
#include "common/fs.h"
#include "common/random.h"
#include "common/sha256.h"

namespace cela::net {

Result<std::unique_ptr<BlobCache>> BlobCache::open(const std::string& dir) {
  for (const char* sub : {"", "/blobs/sha256", "/meta", "/tmp"})
    if (auto r = make_dirs(dir + sub, 0700); !r) return std::unexpected(r.error());
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/tmp", ec)) std::filesystem::remove(entry.path(), ec);
  return std::unique_ptr<BlobCache>(new BlobCache(dir));
}

std::string BlobCache::blob_path(std::string_view sha256) const {
  return dir_ + "/blobs/sha256/" + std::string(sha256.substr(0, 2)) + "/" + std::string(sha256);
}

std::string BlobCache::meta_path(std::string_view key, std::string_view kind) const {
  return dir_ + "/meta/" + sha256_hex(key) + "." + std::string(kind);
}

std::optional<std::string> BlobCache::find(std::string_view sha256) const {
  if (sha256.size() != 64 || sha256.find_first_not_of("0123456789abcdef") != std::string_view::npos) return std::nullopt;
  std::string p = blob_path(sha256);
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return p;
}

std::string BlobCache::temp_path() {
  return dir_ + "/tmp/" + std::to_string(::getpid()) + "-" + std::to_string(temp_seq_.fetch_add(1)) + "-" +
         random_id("t").substr(2);
}

Result<std::string> BlobCache::adopt(const std::string& temp, std::string_view sha256) {
  std::string p = blob_path(sha256);
  if (auto r = make_dirs(p.substr(0, p.rfind('/')), 0700); !r) return std::unexpected(r.error());
  ::chmod(temp.c_str(), 0600);
  if (::rename(temp.c_str(), p.c_str()) != 0) return sys_fail("cache: rename into " + p);
  return p;
}

std::optional<std::string> BlobCache::find_meta(std::string_view key) const {
  std::string p = meta_path(key, "body");
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return p;
}

Result<void> BlobCache::put_meta(std::string_view key, const std::string& temp) {
  std::string p = meta_path(key, "body");
  ::chmod(temp.c_str(), 0600);
  if (::rename(temp.c_str(), p.c_str()) != 0) return sys_fail("cache: rename into " + p);
  return {};
}

std::optional<std::string> BlobCache::get_note(std::string_view key) const {
  auto text = read_file(meta_path(key, "note"));
  if (!text) return std::nullopt;
  return *text;
}

Result<void> BlobCache::put_note(std::string_view key, std::string_view value) {
  std::string temp = temp_path();
  {
    UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd) return sys_fail("cache: create " + temp);
    if (::write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size())) {
      ::unlink(temp.c_str());
      return sys_fail("cache: write " + temp);
    }
  }
  std::string p = meta_path(key, "note");
  if (::rename(temp.c_str(), p.c_str()) != 0) return sys_fail("cache: rename into " + p);
  return {};
}

}  // namespace cela::net
