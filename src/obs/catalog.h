// The catalog of cela's metric families (GET /metrics), one function per family so
// every module counts into the same name with the same labels. Labels are bounded:
// tenant ids (capped per family, then "_other"), fixed vocabularies (state, kind,
// code, verdict), route patterns — never a session id.
//
// Filled here: sessions, execs, HTTP, limit events, audit. Left for the modules that
// own them (they only call these): egress verdicts (net/ proxy), package installs
// (the package gateway), pool hits (session pools).
#pragma once

#include "obs/metrics.h"

namespace cela::obs::catalog {

// Seconds, for create and exec latency: 5 ms .. 5 min.
inline const std::vector<double>& latency_buckets() {
  static const std::vector<double> b{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};
  return b;
}

inline Family& sessions_created() {  // {tenant, result: ok|failed}
  return metrics().counter("cela_sessions_created_total", "Session creates answered, by tenant and result",
                           {"tenant", "result"});
}
inline Family& session_create_seconds() {  // {tenant}
  return metrics().histogram("cela_session_create_seconds", "Time from a create request to a ready session",
                             {"tenant"}, latency_buckets());
}
inline Family& sessions_ended() {  // {tenant, reason}
  return metrics().counter("cela_sessions_ended_total", "Sessions ended, by tenant and termination reason",
                           {"tenant", "reason"}, 256);
}
inline Family& execs() {  // {tenant, state}
  return metrics().counter("cela_execs_total", "Execs ended, by tenant and final state", {"tenant", "state"}, 256);
}
inline Family& exec_seconds() {  // {tenant}
  return metrics().histogram("cela_exec_seconds", "Exec wall time, start to end", {"tenant"}, latency_buckets());
}
inline Family& limit_events() {  // {tenant, kind: oom|pids|disk|cpu_throttle|timeout|ttl|egress_bandwidth|egress_connections}
  return metrics().counter("cela_limit_events_total", "Limits hit by sandboxes, by tenant and kind",
                           {"tenant", "kind"}, 256);
}
inline Family& http_requests() {  // {route, method, status}
  return metrics().counter("cela_http_requests_total", "HTTP answers by route pattern, method and status",
                           {"route", "method", "status"}, 512);
}
inline Family& http_seconds() {  // {route}
  return metrics().histogram("cela_http_request_seconds", "HTTP request duration by route pattern", {"route"},
                             latency_buckets(), 128);
}
inline Family& errors() {  // {code}: the API error code of every error answer
  return metrics().counter("cela_errors_total", "Error answers by API error code", {"code"});
}
inline Family& audit_records() {  // {kind}
  return metrics().counter("cela_audit_records_total", "Audit records written, by kind", {"kind"}, 128);
}
inline Family& audit_failures() {  // audit records the store refused
  return metrics().counter("cela_audit_write_failures_total", "Audit records that could not be written");
}
inline Family& processes_executed() {  // {tenant}: execve/execveat seen inside sandboxes
  return metrics().counter("cela_sandbox_processes_executed_total",
                           "Programs executed inside sandboxes (execve/execveat captured by the daemon)", {"tenant"});
}
inline Family& seccomp_violations() {  // {tenant, syscall}: the syscalls are the policy's denied ones
  return metrics().counter("cela_seccomp_violations_total",
                           "Denied syscalls attempted inside sandboxes (answered EPERM by the daemon)",
                           {"tenant", "syscall"});
}
inline Family& auth_failures() {  // {transport}
  return metrics().counter("cela_auth_failures_total", "Requests refused by authentication", {"transport"});
}

// ---- counted by the other modules (session/egress.cc, daemon.cc, session/pool.cc)
inline Family& egress_verdicts() {  // {tenant, verdict: allowed|denied}
  return metrics().counter("cela_egress_verdicts_total", "Egress proxy decisions, by tenant and verdict",
                           {"tenant", "verdict"});
}
inline Family& egress_bytes() {  // {tenant, direction: tx|rx}
  return metrics().counter("cela_egress_bytes_total", "Bytes relayed by the egress proxy", {"tenant", "direction"});
}
inline Family& package_installs() {  // {tenant, ecosystem, result: allowed|cache_hit|denied|failed}
  return metrics().counter("cela_package_installs_total", "Package gateway fetches, by tenant, ecosystem and result",
                           {"tenant", "ecosystem", "result"}, 128);
}
inline Family& pool_hits() {  // {template, result: hit|miss}
  return metrics().counter("cela_pool_requests_total", "Creates served from a warm pool (hit) or booted (miss)",
                           {"template", "result"});
}

// Registers every family above, so a scrape shows each one (with no samples yet)
// from the daemon's start, the hooks of modules that have not counted yet included.
inline void register_all() {
  for (auto* f : {sessions_created, session_create_seconds, sessions_ended, execs, exec_seconds, limit_events,
                  http_requests, http_seconds, errors, audit_records, audit_failures, processes_executed,
                  seccomp_violations, auth_failures, egress_verdicts, egress_bytes, package_installs, pool_hits})
    (void)f();
}

}  // namespace cela::obs::catalog
