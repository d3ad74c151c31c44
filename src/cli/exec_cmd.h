// `cela exec` (a command in a running session: output streamed, stdin forwarded, Ctrl-C
// ends it, exit codes as `cela run`) and `cela logs` (an exec's output, or follow it).
// The pieces `cela shell` (cli/shell_cmd.h) shares with them are declared here too.
#pragma once

#include <sys/eventfd.h>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <string>

#include "client/client.h"
#include "common/error.h"
#include "common/fd.h"
#include "runtime/outcome.h"

namespace cela::cli {

void add_exec_commands(CLI::App& app, int& exit_code);

// "/v1/sessions/<sid>/execs/<eid>".
std::string exec_path(const std::string& sid, const std::string& eid);

// Streams an exec's output to our stdout/stderr until its `exit` event, reconnecting
// with Last-Event-ID when the stream drops (the server replays exactly what came after
// it). `raw`: control sequences reach a terminal unescaped. Returns the final record.
Result<boost::json::object> stream_exec(const client::Client& c, const std::string& sid, const std::string& eid,
                                        bool raw);

// A finished exec record as the runner's result (exit codes through runtime::exit_code_for).
runtime::RunResult run_result_of(const boost::json::object& rec);

// Copies our stdin to the exec's (POST `target`, one chunk per read, as it comes), then
// closes it (?close=1) at EOF. Returns early when `stop_fd` becomes readable or the
// exec no longer takes input.
void forward_stdin(const client::Client& c, const std::string& target, int stop_fd);

// A thread that signals an eventfd when its work is done, so that the main thread can
// wait for it and for signals in one poll.
struct Notifier {
  UniqueFd fd{::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
  void notify() const;
};

// "SIGTERM" for SIGTERM.
std::string signal_name(int sig);

}  // namespace cela::cli
