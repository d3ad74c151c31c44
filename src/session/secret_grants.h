// A session's secret grants (API.md "Secrets"): the files on the sandbox's
// /run/secrets tmpfs, the env values for execs started while a grant lives, and the
// redaction of every granted value from what the session shows.
//
// /run/secrets is a tmpfs of its own that every sandbox's init mounts (agent/rootfs.cc),
// so a secret never lands on the writable layer (snapshots, templates) and its pages are
// freed with the mount. The daemon writes each file there (mode 0400, owner the
// sandbox user), and at the grant's TTL or the session's end overwrites it with zeros
// before unlinking it, so the tmpfs page it used is wiped, not only freed.
#pragma once

#include <sys/types.h>

#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "obs/redact.h"
#include "session/output.h"
#include "session/secrets.h"
#include "session/types.h"

namespace cela::session {

struct SecretGrant {
  SecretGrantSpec spec;
  SecretBytes value;  // wiped when the grant ends
  bool live = true;
  bool file_written = false;
  std::unique_ptr<boost::asio::steady_timer> timer;
};

// Writes `value` to `path` (directly in /run/secrets) inside the sandbox whose root is
// `root_fd`: created O_EXCL, 0400, owned by host uid:gid. Refuses a /run/secrets that is
// not a tmpfs mount of its own.
Result<void> install_secret_file(int root_fd, const std::string& path, std::string_view value, uid_t uid, gid_t gid);
// Overwrites the file with zeros and removes it. True when a file was there.
bool wipe_secret_file(int root_fd, const std::string& path);

// The redaction hook of an exec's output pipeline: one StreamRedactor per stream.
class RedactingFilter final : public OutputFilter {
 public:
  explicit RedactingFilter(std::shared_ptr<const obs::Redactions> r) : out_(r), err_(r) {}
  void filter(Stream stream, std::string_view in, std::string& out) override {
    (stream == Stream::stdout_stream ? out_ : err_).feed(in, out);
  }
  void flush(Stream stream, std::string& out) override {
    (stream == Stream::stdout_stream ? out_ : err_).flush(out);
  }

 private:
  obs::StreamRedactor out_, err_;
};

// Redacts an error's context (the message a client sees).
Error redact_error(const obs::Redactions* r, Error e);

}  // namespace cela::session
