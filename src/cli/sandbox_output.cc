#include "cli/sandbox_output.h"

#include <errno.h>
#include <unistd.h>

namespace cela::cli {

void write_fd(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

SandboxOutput::SandboxOutput(int fd, bool raw) : fd_(fd) {
  if (!raw && ::isatty(fd)) escaper_.emplace();
}

void SandboxOutput::write(std::string_view bytes) {
  if (!escaper_) return write_fd(fd_, bytes);
  write_fd(fd_, escaper_->feed(bytes));
}

void SandboxOutput::finish() {
  if (escaper_) write_fd(fd_, escaper_->finish());
}

}  // namespace cela::cli
