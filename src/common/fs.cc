#include "common/fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <limits>

#include "common/fd.h"

namespace cela {

namespace {
Result<std::string> read_all(const std::string& path, bool short_read_ends) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return sys_fail("open " + path);
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_fail("read " + path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (short_read_ends && static_cast<size_t>(n) < sizeof buf) break;
  }
  return out;
}
}  // namespace

Result<std::string> read_file(const std::string& path) { return read_all(path, false); }
Result<std::string> read_interface_file(const std::string& path) { return read_all(path, true); }

Result<void> write_file(const std::string& path, std::string_view data) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return sys_fail("open " + path);
  ssize_t n = ::write(fd.get(), data.data(), data.size());
  if (n < 0) return sys_fail("write '" + std::string(data) + "' to " + path);
  if (static_cast<size_t>(n) != data.size()) return fail(ErrorCode::system, "short write to " + path);
  return {};
}

Result<uint64_t> read_u64(const std::string& path) {
  auto text = read_file(path);
  if (!text) return std::unexpected(text.error());
  return parse_u64(*text, path);
}

Result<uint64_t> parse_u64(std::string_view s, const std::string& path) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  if (s == "max") return std::numeric_limits<uint64_t>::max();
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size())
    return fail(ErrorCode::internal, "not a number in " + path + ": '" + std::string(s) + "'");
  return value;
}

Result<void> make_dirs(const std::string& path, unsigned mode) {
  if (path.empty()) return {};
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    std::string prefix = path.substr(0, pos);
    unsigned m = pos == path.size() ? mode : 0755;
    if (::mkdir(prefix.c_str(), m) != 0 && errno != EEXIST) return sys_fail("mkdir " + prefix);
  }
  return {};
}

std::vector<std::string_view> path_components(std::string_view path) {
  std::vector<std::string_view> out;
  for (size_t pos = 0; pos <= path.size();) {
    size_t end = path.find('/', pos);
    if (end == std::string_view::npos) end = path.size();
    std::string_view c = path.substr(pos, end - pos);
    if (!c.empty() && c != ".") out.push_back(c);
    pos = end + 1;
  }
  return out;
}

}  // namespace cela
