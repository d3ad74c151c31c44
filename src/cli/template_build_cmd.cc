// `cela template build NAME -f FILE [--context DIR]` and `cela template import NAME
// PATH`: through the daemon when one is given (--url or $CELA_URL; the template is the
// caller's tenant's), else locally as host root into the shared store.
#include "cli/template_build_cmd.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include "cli/client_common.h"
#include "cli/local_tar.h"
#include "common/encoding.h"
#include "common/fs.h"
#include "common/json_fields.h"
#include "rootfs/build_spec.h"
#include "runtime/jail.h"
#include "session/admission.h"
#include "session/oci_import.h"
#include "session/template_build.h"

namespace cela::cli {
namespace {
namespace json = boost::json;
namespace fs = std::filesystem;

struct BuildOpts {
  Conn conn;
  rootfs::TemplateStore* store = nullptr;
  std::string name, file, context, path;
  std::vector<std::string> build_args;
  std::string ledger_dir;
};

bool daemon_given(const Conn& c) {
  const char* env = std::getenv("CELA_URL");
  return !c.url.empty() || (env != nullptr && *env != '\0');
}

// A copy step's sources (paths below the context) become tars the build extracts.
Result<std::vector<rootfs::BuildStep>> pack_copy(const rootfs::BuildStep& step, const std::string& context) {
  std::vector<rootfs::BuildStep> out;
  if (step.sources.empty()) return std::vector<rootfs::BuildStep>{step};
  const fs::path root = fs::weakly_canonical(fs::absolute(context));
  for (const auto& src : step.sources) {
    fs::path p = fs::weakly_canonical(root / src);
    auto rel = p.lexically_relative(root).string();
    if (fs::path(src).is_absolute() || rel.starts_with(".."))
      return fail(ErrorCode::invalid_argument, "COPY source `" + src + "` is outside the context " + root.string());
    std::error_code ec;
    rootfs::BuildStep s = step;
    s.sources = {src};
    if (fs::is_directory(p, ec)) {
      auto tar = pack_directory(p.string());
      if (!tar) return std::unexpected(tar.error());
      s.archive = std::move(*tar);
      if (s.to.size() > 1 && s.to.ends_with("/")) s.to.pop_back();
    } else if (fs::is_regular_file(p, ec)) {
      // One file: a tar of a directory holding it under its destination name.
      bool into_dir = step.to.ends_with("/") || step.sources.size() > 1;
      std::string dest_name = into_dir ? p.filename().string() : fs::path(step.to).filename().string();
      char tmp[] = "/tmp/cela-copy-XXXXXX";
      if (::mkdtemp(tmp) == nullptr) return sys_fail("mkdtemp");
      fs::copy_file(p, fs::path(tmp) / dest_name, ec);
      // The tar must be the same for the same file (it is part of the cache key).
      if (!ec) fs::last_write_time(fs::path(tmp) / dest_name, fs::last_write_time(p, ec), ec);
      auto tar = ec ? Result<std::string>(fail(ErrorCode::system, "copy " + p.string(), ec.value()))
                    : pack_directory(tmp);
      fs::remove_all(tmp, ec);
      if (!tar) return std::unexpected(tar.error());
      s.archive = std::move(*tar);
      if (!into_dir) s.to = fs::path(step.to).parent_path().string();
      if (s.to.empty()) s.to = "/";
      if (s.to.size() > 1 && s.to.ends_with("/")) s.to.pop_back();
    } else {
      return fail(ErrorCode::not_found, "COPY source `" + src + "` not found in " + root.string());
    }
    out.push_back(std::move(s));
  }
  return out;
}

Result<rootfs::BuildSpec> read_spec(const BuildOpts& o) {
  auto text = read_file(o.file);
  if (!text) return std::unexpected(text.error());
  std::map<std::string, std::string> args;
  for (const auto& a : o.build_args) {
    auto eq = a.find('=');
    if (eq == std::string::npos) return fail(ErrorCode::invalid_argument, "bad --build-arg `" + a + "` (want K=V)");
    args[a.substr(0, eq)] = a.substr(eq + 1);
  }
  size_t first = text->find_first_not_of(" \t\r\n");
  Result<rootfs::BuildSpec> spec;
  if (first != std::string::npos && (*text)[first] == '{') {
    auto body = parse_json_object(*text, o.file);
    if (!body) return std::unexpected(body.error());
    spec = rootfs::parse_build_json(*body, true);
  } else {
    spec = rootfs::parse_dockerfile(*text, args);
  }
  if (!spec) return spec;
  for (const auto& note : spec->notes) std::fprintf(stderr, "note: %s\n", note.c_str());
  spec->notes.clear();
  if (spec->name.empty() || !o.name.empty()) spec->name = o.name;
  std::string context = o.context.empty() ? fs::path(o.file).parent_path().string() : o.context;
  if (context.empty()) context = ".";
  std::vector<rootfs::BuildStep> steps;
  for (const auto& step : spec->steps) {
    if (step.kind != rootfs::StepKind::copy) {
      steps.push_back(step);
      continue;
    }
    auto packed = pack_copy(step, context);
    if (!packed) return std::unexpected(packed.error());
    for (auto& s : *packed) steps.push_back(std::move(s));
  }
  spec->steps = std::move(steps);
  return spec;
}

json::object to_json(const rootfs::BuildSpec& spec) {
  json::array steps;
  for (const auto& s : spec.steps) {
    switch (s.kind) {
      case rootfs::StepKind::run: steps.push_back(json::object{{"run", s.text}}); break;
      case rootfs::StepKind::workdir: steps.push_back(json::object{{"workdir", s.text}}); break;
      case rootfs::StepKind::user: steps.push_back(json::object{{"user", s.text}}); break;
      case rootfs::StepKind::env: {
        json::object env;
        for (const auto& [k, v] : s.env) env[k] = v;
        steps.push_back(json::object{{"env", env}});
        break;
      }
      case rootfs::StepKind::copy:
        steps.push_back(json::object{{"copy", json::object{{"archive_b64", base64_encode(s.archive)}, {"to", s.to}}}});
        break;
    }
  }
  return json::object{{"name", spec.name}, {"from", spec.from}, {"steps", steps}};
}

void print_step(size_t index, size_t count, const std::string& what, bool cached) {
  std::fprintf(stderr, "[%zu/%zu] %s%s\n", index, count, what.c_str(), cached ? " (cached)" : "");
}

class PrintListener final : public session::BuildListener {
 public:
  void log(const std::string& line) override { std::fprintf(stderr, "%s\n", line.c_str()); }
  void step(size_t index, size_t count, const std::string& what, bool cached) override {
    print_step(index + 1, count, what, cached);
  }
};

int build_remote(const BuildOpts& o, const rootfs::BuildSpec& spec) {
  auto c = client::Client::make(o.conn.url, o.conn.key);
  if (!c) return report(c.error());
  auto started = c->json("POST", "/v1/templates", to_json(spec));
  if (!started) return report(started.error());
  std::string id = str(*started, "build_id");
  std::string last;
  int rc = 1;
  auto followed = c->follow("/v1/templates/builds/" + client::url_encode(id) + "?follow=1", last,
                            [&](const client::SseEvent& e) {
                              if (e.event == "log") {
                                std::fprintf(stderr, "%s\n", e.data.c_str());
                              } else if (e.event == "step") {
                                auto o2 = parse_json_object(e.data, "step event");
                                if (o2)
                                  print_step(static_cast<size_t>(o2->at("index").to_number<int64_t>()),
                                             static_cast<size_t>(o2->at("count").to_number<int64_t>()),
                                             str(*o2, "step"), o2->at("cached").as_bool());
                              } else if (e.event == "done" || e.event == "failed") {
                                auto o2 = parse_json_object(e.data, "build");
                                if (e.event == "done" && o2) {
                                  std::printf("%s\n", str(*o2, "template").c_str());
                                  rc = 0;
                                } else {
                                  std::fprintf(stderr, "cela: build failed: %s\n", o2 ? str(*o2, "error").c_str() : "");
                                }
                                return false;
                              }
                              return true;
                            });
  if (!followed) return report(followed.error());
  return rc;
}

int build_local(const BuildOpts& o, const rootfs::BuildSpec& spec) {
  if (::geteuid() != 0) return report(Error{ErrorCode::permission_denied, 0, "a local build needs root"});
  // Run steps write to a disk-backed layer (BuildLimits::disk_mb), as in the daemon:
  // its images live beside the download cache, none kept ready.
  runtime::JailOptions options;
  options.disks.dir = o.store->cache + "/build-disks";
  options.disks.ready = 0;
  if (auto made = make_dirs(options.disks.dir, 0700); !made) return report(made.error());
  auto backend = runtime::open_jail_backend(options);
  if (!backend) return report(backend.error());
  session::TemplateCatalog catalog(*o.store);
  session::BuildRequest request{spec, "", true};
  PrintListener listener;
  std::atomic<bool> cancel{false};
  // Run steps install packages through a gateway of this process, fetching from the
  // upstreams the machine's own apt, pip and npm use; the cache is the build cache's.
  auto packages = session::LocalBuildPackages::open(o.store->cache + "/packages",
                                                    [&listener](const std::string& line) { listener.log(line); });
  if (!packages) return report(packages.error());
  // Each run step's jail takes its grant from the host-wide ledger, as in a daemon.
  std::optional<session::LocalAdmission> admission;
  session::BuildAdmission build_admission;
  if (!o.ledger_dir.empty()) {
    auto local = session::LocalAdmission::open(o.ledger_dir);
    if (!local) return report(local.error());
    admission = std::move(*local);
    build_admission = {admission->ledger.get(), admission->limit};
  }
  auto t = session::run_build(**backend, catalog, request, session::BuildLimits{}, listener, cancel,
                              &(*packages)->packages(), build_admission);
  if (!t) return report(t.error());
  std::printf("%s@%s\n", t->name.c_str(), t->version.c_str());
  return 0;
}

int import_image(const BuildOpts& o) {
  auto data = read_file(o.path);
  if (!data) return report(data.error());
  if (daemon_given(o.conn)) {
    auto c = client::Client::make(o.conn.url, o.conn.key);
    if (!c) return report(c.error());
    auto r = c->request("POST", "/v1/templates/import?name=" + client::url_encode(o.name), *data,
                        {{"Content-Type", "application/x-tar"}});
    if (!r) return report(r.error());
    auto body = parse_json_object(r->body, "answer");
    if (!body) return report(body.error());
    std::printf("%s\n", str(*body, "template").c_str());
    return 0;
  }
  if (::geteuid() != 0) return report(Error{ErrorCode::permission_denied, 0, "a local import needs root"});
  if (!rootfs::valid_template_name(o.name) || o.name == "base" || o.name == "host")
    return usage("bad template name '" + o.name + "'");
  auto t = session::import_oci_image(*o.store, o.name, *data, "host");
  if (!t) return report(t.error());
  std::printf("%s@%s\n", t->name.c_str(), t->version.c_str());
  return 0;
}

}  // namespace

int build_from_file(const rootfs::TemplateStore& store, const std::string& name, const TemplateFileBuild& b) {
  BuildOpts o;
  o.conn = b.conn;
  o.store = const_cast<rootfs::TemplateStore*>(&store);
  o.name = name;
  o.file = b.file;
  o.context = b.context;
  o.build_args = b.build_args;
  o.ledger_dir = b.ledger_dir;
  auto spec = read_spec(o);
  if (!spec) return report(spec.error());
  return daemon_given(o.conn) ? build_remote(o, *spec) : build_local(o, *spec);
}

int import_template(const rootfs::TemplateStore& store, const std::string& name, const std::string& path,
                    const Conn& conn) {
  BuildOpts o;
  o.conn = conn;
  o.store = const_cast<rootfs::TemplateStore*>(&store);
  o.name = name;
  o.path = path;
  return import_image(o);
}

}  // namespace cela::cli
