// cela-init: the sandbox's pid 1 (agent/init.h), as its own small static executable.
// The host runs it only from the sealed image cela embeds (jail/init_process.h), with
// argv = {kInitArgv0}, an empty environment and the control socket on
// kReexecControlFd. Anything else (sandbox code running /proc/1/exe, say) is refused
// before a byte of the control protocol is read.
#include <cstdio>
#include <string_view>

#include "agent/init.h"

int main(int argc, char** argv) {
  if (argc == 1 && std::string_view(argv[0]) == cela::agent::kInitArgv0)
    cela::agent::run_init_reexec(cela::agent::kReexecControlFd);
  std::fputs("cela-init: runs only as a sandbox's init, started by cela\n", stderr);
  return 126;
}
