// The local terminal of an interactive command (`cela shell`, `cela run -it`): raw mode
// while the remote terminal is in charge, its size for the remote pty, and SIGWINCH.
#pragma once

#include <termios.h>

#include <cstdint>
#include <optional>
#include <utility>

#include "common/fd.h"

namespace cela::cli {

// Puts `fd` in raw mode (no echo, no line editing, no signals from keys: ^C, ^Z and ^\ (quit)
// reach the remote terminal as bytes) when it is a terminal; the old mode comes back
// on restore() or destruction, whichever is first. Not a terminal: does nothing.
class RawTerminal {
 public:
  explicit RawTerminal(int fd);
  ~RawTerminal() { restore(); }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;
  void restore();
  bool active() const { return active_; }

 private:
  int fd_;
  termios saved_{};
  bool active_ = false;
};

// The size (cols, rows) of the terminal on `fd`; nullopt when it is none or reports 0.
std::optional<std::pair<uint16_t, uint16_t>> terminal_size(int fd);

// SIGWINCH blocked and readable from the returned signalfd (call before threads exist).
UniqueFd block_winch();

}  // namespace cela::cli
