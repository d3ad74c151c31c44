#include "daemon/audit_cmd.h"

#include <cstdio>

#include "common/json_text.h"
#include "common/time.h"
#include "session/audit_store.h"
#include "session/config.h"
#include "store/store.h"

namespace cela::daemon {
namespace {

Result<std::unique_ptr<store::Store>> open_store(const AuditCommandOptions& o) {
  std::string dir = o.state_dir;
  if (!o.config_file.empty()) {
    auto config = session::DaemonConfig::load(o.config_file);
    if (!config) return std::unexpected(config.error());
    if (o.state_dir == AuditCommandOptions{}.state_dir) dir = config->state_dir;
  }
  return store::Store::open(dir + "/cela.db");
}

}  // namespace

int verify_audit(const AuditCommandOptions& o) {
  auto store = open_store(o);
  if (!store) {
    std::fprintf(stderr, "cela: audit: %s\n", store.error().message().c_str());
    return 2;
  }
  auto result = session::verify_audit(**store);
  if (!result) {
    std::fprintf(stderr, "cela: audit: %s\n", result.error().message().c_str());
    return 2;
  }
  for (const auto& p : result->problems) std::printf("BROKEN: %s\n", p.c_str());
  if (!result->problems.empty()) {
    std::printf("audit chain broken: %zu problem(s) in %lld record(s)\n", result->problems.size(),
                static_cast<long long>(result->checked));
    return 1;
  }
  std::printf("audit chain ok: %lld record(s) after anchor %lld\n", static_cast<long long>(result->checked),
              static_cast<long long>(result->anchor_seq));
  return 0;
}

int export_audit(const AuditCommandOptions& o) {
  auto store = open_store(o);
  if (!store) {
    std::fprintf(stderr, "cela: audit: %s\n", store.error().message().c_str());
    return 2;
  }
  store::AuditFilter f;
  if (!o.session_id.empty()) f.session_id = o.session_id;
  if (!o.kind.empty()) f.kinds = {o.kind};
  if (!o.since.empty()) {
    auto ms = parse_rfc3339(o.since);
    if (!ms) {
      std::fprintf(stderr, "cela: audit: --since must be an RFC 3339 time\n");
      return 2;
    }
    f.since_ms = *ms;
  }
  f.limit = 5000;
  for (;;) {
    auto rows = (*store)->list_audit(f);
    if (!rows) {
      std::fprintf(stderr, "cela: audit: %s\n", rows.error().message().c_str());
      return 2;
    }
    for (auto& row : *rows) {
      f.after_seq = row.seq;
      std::string line = json_text(session::to_audit_record(std::move(row)).to_json());
      std::fwrite(line.data(), 1, line.size(), stdout);
      std::fputc('\n', stdout);
    }
    if (static_cast<int64_t>(rows->size()) < f.limit) break;
  }
  return 0;
}

}  // namespace cela::daemon
