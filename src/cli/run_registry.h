// Which one-shot runs (`cela run`) are live on this host, so that a runner killed
// before it could clean up has its leftovers removed by the next runner.
//
// A runner's sandbox is named after the runner: run-<pid>-<start time>. Before it
// starts the sandbox, the runner records that name as an empty file in kRunRecordDir;
// it removes the record once its sandbox is gone. The next runner reads only that
// directory — as many entries as runners that are live or died uncleanly, not one per
// sandbox of every daemon on the host — and removes what each dead runner left.
#pragma once

#include <string>
#include <string_view>

#include "runtime/runtime.h"

namespace cela::cli {

inline constexpr const char* kRunRecordDir = "/run/cela/runs";

// This process's run name: run-<pid>-<start time of pid>.
std::string own_run_name();

// Whether the runner a run name names is still the process it was (a later process
// with the same pid has another start time). Names not made by own_run_name() count
// as alive: not ours to judge.
bool runner_alive(std::string_view name);

// The record of this runner's sandbox, from construction to destruction; keep() leaves
// it in place for the next runner (the sandbox could not be removed).
class RunRecord {
 public:
  explicit RunRecord(std::string name, std::string dir = kRunRecordDir);
  ~RunRecord();
  RunRecord(const RunRecord&) = delete;
  RunRecord& operator=(const RunRecord&) = delete;
  void keep() { keep_ = true; }

 private:
  std::string path_;
  bool keep_ = false;
};

// Removes the instances of every recorded runner that is gone (except `own`), and then
// their records. Problems are reported on stderr; none stops the caller's run.
void reclaim_stale_runs(runtime::Backend& backend, const std::string& own, const std::string& dir = kRunRecordDir);

}  // namespace cela::cli
