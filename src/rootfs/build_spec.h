// What a template build is asked to do: the parent template and the steps, read from
// cela's own JSON format (the body of POST /v1/templates, and `cela template build -f`
// files) or from a Dockerfile subset. Plain logic: parsing, and the cache key of a step.
//
// cela's format (docs/templates.md):
//   {"name": "py", "from": "base", "steps": [
//     {"run": "pip install requests"},
//     {"copy": {"archive_b64": "<tar>", "to": "/app"}}   (or "src": "dir" in a file: a
//                                                          path below the build context)
//     {"env": {"K": "V"}}, {"workdir": "/app"}, {"user": "user"}],
//    "aliases": ["py-v1"], "start": {"cmd": "...", "user": "user", "ready_port": 8000}}
//
// Dockerfile subset: FROM <cela template> (exactly one, before other instructions but
// ARG), RUN (shell or JSON exec form), COPY <src>... <dest> (no --from/--chown), ENV
// (K=V ... or K V), WORKDIR, USER, ARG NAME[=default] ($NAME and ${NAME} expand in later
// instructions; build args override defaults); CMD, ENTRYPOINT, EXPOSE, LABEL,
// MAINTAINER, HEALTHCHECK, STOPSIGNAL and VOLUME are ignored (with a note); anything else
// is an error naming the line.
#pragma once

#include <boost/json/object.hpp>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "rootfs/template.h"

namespace cela::rootfs {

enum class StepKind { run, copy, env, workdir, user };
std::string_view to_string(StepKind kind);

struct BuildStep {
  StepKind kind = StepKind::run;
  std::string text;                                  // run: shell line; workdir: path; user: name
  std::vector<std::pair<std::string, std::string>> env;  // env
  std::string archive;                               // copy: the tar's bytes (decoded)
  std::vector<std::string> sources;                  // copy from a file: paths below the context
  std::string to;                                    // copy: destination directory or file
  int line = 0;                                      // Dockerfile line, for messages
};

struct BuildSpec {
  std::string name;
  std::string from = "base";
  std::vector<BuildStep> steps;
  std::vector<std::string> notes;  // ignored Dockerfile instructions
  // cela's format only: the new template's other names, and the process its sessions
  // start at boot (rootfs/template.h StartCommand; none given: the parent's).
  std::vector<std::string> aliases;
  std::optional<StartCommand> start;
};

// The API body / cela file. `allow_sources`: copy steps may name "src" (files), else
// only "archive_b64" (the API: the daemon reads no client paths).
Result<BuildSpec> parse_build_json(const boost::json::object& body, bool allow_sources);

// A Dockerfile. `args` are --build-arg values (over ARG defaults).
Result<BuildSpec> parse_dockerfile(std::string_view text, const std::map<std::string, std::string>& args);

// One line for logs and a layer's created_by: "RUN pip install x", "COPY -> /app".
std::string describe(const BuildStep& step);

// The cache key after `step` on a stack whose key is `parent_key`: sha256 hex over the
// parent key, the step's kind and content (a copy's archive by its sha256) and, for run
// steps, `context` (the identity, env and workdir the command runs with).
std::string step_key(const std::string& parent_key, const BuildStep& step, const std::string& context);

}  // namespace cela::rootfs
