// What the client subcommands (session, exec, logs, cp) share: the connection options,
// error reporting with the CLI's exit codes, and small JSON and path helpers.
#pragma once

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "client/client.h"
#include "common/error.h"

namespace cela::cli {

inline constexpr int kClientExitError = 1;  // the daemon refused, or it cannot be reached
inline constexpr int kClientExitUsage = 2;  // bad command line

struct Conn {
  std::string url, key;
};

// --url and --api-key on a client subcommand.
void add_conn(CLI::App* cmd, Conn& conn);

// "cela: <message>" on stderr; returns kClientExitError.
int report(const Error& e);

// "cela: <message> (see --help)" on stderr; returns kClientExitUsage.
int usage(const std::string& message);

// A field of a JSON object as text: strings as they are, other values serialised, ""
// when missing or null.
std::string str(const boost::json::object& o, std::string_view key);

// "K=V" pairs into an object; false (and the bad pair in `bad`) on a malformed one.
bool env_object(const std::vector<std::string>& pairs, boost::json::object& out, std::string& bad);

// "/v1/sessions/<id>" with the id encoded.
std::string session_path(const std::string& id);

// Writes and flushes (output is streamed as it arrives).
void write_all(FILE* f, std::string_view data);

}  // namespace cela::cli
