// SandboxOutput: where `cela run`, `cela exec` and `cela logs` write a sandbox's stdout or
// stderr. To a pipe or a file the bytes go out exactly as they came; to a terminal
// (isatty) they are escaped by common/terminal_text.h, so that sandbox code cannot drive
// the user's terminal, unless the user asked for --raw.
#pragma once

#include <optional>
#include <string_view>

#include "common/terminal_text.h"

namespace cela::cli {

// Writes all of `data` to `fd`, retrying on EINTR; a destination that is gone (closed
// pipe) drops the bytes: the caller keeps running.
void write_fd(int fd, std::string_view data);

class SandboxOutput {
 public:
  // Escapes when `fd` is a terminal and `raw` is false.
  SandboxOutput(int fd, bool raw);
  void write(std::string_view bytes);
  // The end of the stream: a character cut at its end is written, escaped.
  void finish();
  bool escaping() const { return escaper_.has_value(); }

 private:
  int fd_;
  std::optional<TerminalEscaper> escaper_;
};

}  // namespace cela::cli
