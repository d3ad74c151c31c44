// TerminalEscaper: sandbox output made inert for a terminal. Bytes a terminal would act
// on instead of showing are written as visible escapes, so that code in a sandbox cannot
// retitle the window, rewrite the screen, set the clipboard (OSC 52) or answer terminal
// queries into the user's input by printing:
//
//   ESC, the other C0 controls and DEL      -> \x1b, \x07, \x7f ...
//   C1 controls (U+0080-U+009F, as UTF-8)   -> \u009b ...
//   bytes that start no UTF-8 character     -> \xff ...  (8-bit terminals read 0x9b as CSI)
//
// Kept as they are: \n, \t, and \r (it only returns to the start of the current line:
// progress bars rely on it, and it reaches nothing a plain line of text could not), and
// every well-formed UTF-8 character that is not a C1 control. A backslash is not
// escaped: the escapes are for a human, the bytes stay exact with --raw or a pipe.
//
// Streaming: feed() may be called with any split of the stream; a character cut at the
// end of a chunk is held back until the next chunk (or finish()) completes or spoils it.
#pragma once

#include <string>
#include <string_view>

namespace cela {

class TerminalEscaper {
 public:
  // The escaped text of `bytes`, less the tail of a character still incomplete.
  std::string feed(std::string_view bytes);
  // The held-back tail, escaped (the stream ended inside a character).
  std::string finish();

 private:
  std::string pending_;
};

}  // namespace cela
