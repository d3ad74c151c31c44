#include "cli/raw_terminal.h"

#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>

namespace cela::cli {

RawTerminal::RawTerminal(int fd) : fd_(fd) {
  if (!::isatty(fd) || ::tcgetattr(fd, &saved_) != 0) return;
  termios raw = saved_;
  ::cfmakeraw(&raw);
  raw.c_cc[VMIN] = 1;
  raw.c_cc[VTIME] = 0;
  active_ = ::tcsetattr(fd, TCSADRAIN, &raw) == 0;
}

void RawTerminal::restore() {
  if (!active_) return;
  active_ = false;
  int rc;
  do rc = ::tcsetattr(fd_, TCSADRAIN, &saved_);
  while (rc != 0 && errno == EINTR);
}

std::optional<std::pair<uint16_t, uint16_t>> terminal_size(int fd) {
  winsize size{};
  if (::ioctl(fd, TIOCGWINSZ, &size) != 0 || size.ws_col == 0 || size.ws_row == 0) return std::nullopt;
  return std::pair<uint16_t, uint16_t>{size.ws_col, size.ws_row};
}

UniqueFd block_winch() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGWINCH);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return UniqueFd(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
}

}  // namespace cela::cli
