#include "cli/client_common.h"

#include <unistd.h>

#include "common/terminal_text.h"

namespace cela::cli {
namespace json = boost::json;

void add_conn(CLI::App* cmd, Conn& c) {
  cmd->add_option("--url", c.url,
                  "Daemon URL: unix:///path.sock or http://host:port (default: $CELA_URL, else "
                  "unix:///run/cela/cela.sock)");
  cmd->add_option("--api-key", c.key, "API key for TCP (default: $CELA_API_KEY)");
}

int report(const Error& e) {
  // The daemon's message may quote names chosen inside the sandbox (a file path).
  std::string message = e.message();
  if (::isatty(2)) {
    TerminalEscaper escaper;
    message = escaper.feed(message) + escaper.finish();
  }
  std::fprintf(stderr, "cela: %s\n", message.c_str());
  return kClientExitError;
}

int usage(const std::string& msg) {
  std::fprintf(stderr, "cela: %s (see --help)\n", msg.c_str());
  return kClientExitUsage;
}

std::string str(const json::object& o, std::string_view key) {
  auto* v = o.if_contains(key);
  if (!v || v->is_null()) return "";
  if (v->is_string()) return std::string(v->as_string());
  return json::serialize(*v);
}

bool env_object(const std::vector<std::string>& pairs, json::object& out, std::string& bad) {
  for (auto& p : pairs) {
    auto eq = p.find('=');
    if (eq == std::string::npos || eq == 0) {
      bad = p;
      return false;
    }
    out[p.substr(0, eq)] = p.substr(eq + 1);
  }
  return true;
}

std::string session_path(const std::string& id) {
  return "/v1/sessions/" + client::url_encode(id);
}

void write_all(FILE* f, std::string_view data) {
  std::fwrite(data.data(), 1, data.size(), f);
  std::fflush(f);
}

}  // namespace cela::cli
