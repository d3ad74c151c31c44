// envd's filesystem.Filesystem service over Connect (docs/e2b.md "Data plane: files"):
// Stat, ListDir, MakeDir, Move, Remove (unary) and WatchDir (server stream). Each acts
// as the chosen sandbox user through the session layer's SessionFs (the view the native
// /v1/sessions/{id}/fs routes use) and, for WatchDir, its DirWatch (inotify inside the
// session, session/watch.h).
//
// EntryInfo as envd fills it: a symlink is reported with the type and permission bits
// of what it resolves to (inside the sandbox), `symlinkTarget` the resolved path and
// `permissions` the link's own ("Lrwxrwxrwx", Go's notation); a dangling one has no
// type. `metadata` is the file's user.e2b.* attributes.
#include <sys/stat.h>

#include <boost/json.hpp>
#include <ctime>

#include "api/e2b/connect.h"
#include "api/e2b/e2b.h"
#include "api/e2b/envd_files.h"
#include "api/e2b/envd_fs.h"
#include "api/e2b/envd_user.h"
#include "api/e2b/sandbox_lookup.h"
#include "api/routes.h"

namespace cela::api::e2b {
namespace json = boost::json;

namespace {

std::string string_field(const json::object& msg, std::string_view key) {
  auto it = msg.find(key);
  if (it == msg.end() || !it->value().is_string()) return {};
  return std::string(it->value().as_string());
}

bool bool_field(const json::object& msg, std::string_view key) {
  auto it = msg.find(key);
  return it != msg.end() && it->value().is_bool() && it->value().as_bool();
}

int64_t int_field(const json::object& msg, std::string_view key) {
  auto it = msg.find(key);
  if (it == msg.end()) return 0;
  if (it->value().is_int64()) return it->value().as_int64();
  if (it->value().is_uint64()) return static_cast<int64_t>(it->value().as_uint64());
  if (it->value().is_string()) {
    try {
      return std::stoll(std::string(it->value().as_string()));
    } catch (...) {
      return -1;
    }
  }
  return -1;
}

// One unary RPC of the service: the message and the user are read on the io thread,
// `work` runs on the blocking pool with the session's view for that user.
using Work = std::function<ApiResult<json::value>(session::SessionFs& fs, const json::object& msg)>;

void add_unary(E2bContext& ctx, std::string_view method, Work work) {
  ctx.api.server.sandbox_router().add(
      http::verb::post, "/49983/filesystem.Filesystem/" + std::string(method), RouteDoc{},
      [&ctx, work](Request& req, Responder& res) {
        auto msg = connect::unary_request(req);
        if (!msg) return res.error(msg.error());
        auto as = envd_user_from_auth(req);
        if (!as) return res.error(as.error());
        ctx.api.server.post_blocking([&ctx, r = res.shared_from_this(), msg = std::move(*msg), as = *as, work] {
          auto fs = view_or_answer(ctx, *r, as);
          if (!fs) return;
          auto answer = work(*fs, msg);
          if (!answer) return r->error(answer.error());
          connect::reply(*r, *answer);
        });
      },
      connect::route_options());
}

ApiResult<std::string> path_of(const session::SessionFs& fs, const json::object& msg, std::string_view key = "path") {
  return envd_path(string_field(msg, key), fs.home());
}

ApiResult<json::value> stat_rpc(session::SessionFs& fs, const json::object& msg) {
  auto path = path_of(fs, msg);
  if (!path) return api_fail(path.error());
  auto info = fs.stat(*path);
  if (!info) return api_fail(from_error(info.error()));
  return json::object{{"entry", entry_json(fs, *info)}};
}

ApiResult<json::value> list_rpc(session::SessionFs& fs, const json::object& msg) {
  auto path = path_of(fs, msg);
  if (!path) return api_fail(path.error());
  int64_t depth = int_field(msg, "depth");
  if (depth == 0) depth = 1;
  if (depth < 1 || depth > 64) return api_fail(ApiError::invalid_request("depth must be 1 to 64"));
  auto entries = fs.list(*path, static_cast<int>(depth));
  if (!entries) return api_fail(from_error(entries.error()));
  json::array a;
  for (const auto& e : *entries) a.push_back(entry_json(fs, e));
  return json::object{{"entries", std::move(a)}};
}

ApiResult<json::value> mkdir_rpc(session::SessionFs& fs, const json::object& msg) {
  auto path = path_of(fs, msg);
  if (!path) return api_fail(path.error());
  if (auto existing = fs.real_path(*path); existing) {
    if (auto st = fs.stat(*existing); st) {
      if (st->type == "dir") {
        ApiError e = ApiError::conflict("directory already exists: " + *path);
        e.wire_code = "already_exists";
        return api_fail(e);
      }
      return api_fail(ApiError::invalid_request("path already exists but is not a directory: " + *path));
    }
  }
  if (auto made = fs.mkdir(*path, /*parents=*/true); !made) return api_fail(from_error(made.error()));
  auto info = fs.stat(*path);
  if (!info) return api_fail(from_error(info.error()));
  return json::object{{"entry", entry_json(fs, *info)}};
}

ApiResult<json::value> move_rpc(session::SessionFs& fs, const json::object& msg) {
  auto from = path_of(fs, msg, "source");
  if (!from) return api_fail(from.error());
  auto to = path_of(fs, msg, "destination");
  if (!to) return api_fail(to.error());
  if (auto moved = fs.move(*from, *to, /*overwrite=*/true); !moved) return api_fail(from_error(moved.error()));
  auto info = fs.stat(*to);
  if (!info) return api_fail(from_error(info.error()));
  return json::object{{"entry", entry_json(fs, *info)}};
}

ApiResult<json::value> remove_rpc(session::SessionFs& fs, const json::object& msg) {
  auto path = path_of(fs, msg);
  if (!path) return api_fail(path.error());
  // envd removes like os.RemoveAll: a whole tree, and a missing path is no error.
  if (auto gone = fs.remove(*path, /*recursive=*/true); !gone && gone.error().code != ErrorCode::not_found)
    return api_fail(from_error(gone.error()));
  return json::object{};
}

// ---- WatchDir

const char* event_type_name(uint32_t op) {
  switch (op) {
    case session::kWatchCreate:
      return "EVENT_TYPE_CREATE";
    case session::kWatchWrite:
      return "EVENT_TYPE_WRITE";
    case session::kWatchRemove:
      return "EVENT_TYPE_REMOVE";
    case session::kWatchRename:
      return "EVENT_TYPE_RENAME";
    default:
      return "EVENT_TYPE_CHMOD";
  }
}

// The stream of one WatchDir: the session's watch lines become Connect messages. The
// watch reads on only once the client has taken what was sent (on_drained), so the
// queue between the sandbox and the client stays bounded.
class WatchStream final : public session::WatchSink, public std::enable_shared_from_this<WatchStream> {
 public:
  WatchStream(E2bContext& ctx, std::shared_ptr<Responder> res, std::shared_ptr<session::SessionFs> fs,
              std::string path, bool include_entry, connect::CallOptions options)
      : ctx_(ctx),
        res_(std::move(res)),
        fs_(std::move(fs)),
        path_(std::move(path)),
        include_entry_(include_entry),
        options_(options) {}

  void attach(std::shared_ptr<session::DirWatch> watch) { watch_ = std::move(watch); }

  void on_lines(std::vector<session::WatchLine> lines, std::function<void()> more) override {
    std::vector<session::WatchLine> events;
    for (auto& line : lines) {
      switch (line.kind) {
        case session::WatchLine::Kind::ready:
          start();
          break;
        case session::WatchLine::Kind::failed:
          failure_ = from_error(line.error);
          break;
        case session::WatchLine::Kind::overflow:
          break;  // events were lost in the kernel's queue: nothing to send for them
        case session::WatchLine::Kind::event:
          events.push_back(std::move(line));
          break;
      }
    }
    if (events.empty() || !stream_) return more();
    if (!include_entry_) return send(events, {}, std::move(more));
    // Entries are read from the sandbox's filesystem: on the blocking pool, in order.
    ctx_.api.server.post_blocking([self = shared_from_this(), events = std::move(events), more = std::move(more)] {
      std::vector<std::optional<json::object>> entries;
      for (const auto& e : events) {
        std::string at = self->path_ == "/" ? "/" + e.name : self->path_ + "/" + e.name;
        auto info = self->fs_->stat(at);
        entries.push_back(info ? std::optional(entry_json(*self->fs_, *info)) : std::nullopt);
      }
      self->send(events, entries, more);
    });
  }

  void on_end() override {
    auto watch = std::move(watch_);
    if (!stream_) {
      connect::fail_stream(*res_, failure_ ? *failure_ : ApiError::internal("the watch ended before it started"));
      return;
    }
    if (failure_) return stream_->fail(*failure_);
    // The helper went with its session (killed, ended): the stream drops, as envd's
    // does when its sandbox dies; a stream the client or the deadline closed is over.
    stream_->drop();
  }

 private:
  void start() {
    if (stream_) return;
    stream_ = connect::ServerStream::start(*res_, options_, json::object{{"keepalive", json::object{}}});
    stream_->on_close([weak = std::weak_ptr<WatchStream>(shared_from_this())] {
      if (auto self = weak.lock())
        if (auto w = self->watch_) w->stop();
    });
    stream_->send(json::object{{"start", json::object{}}});
  }

  void send(const std::vector<session::WatchLine>& events, const std::vector<std::optional<json::object>>& entries,
            std::function<void()> more) {
    for (size_t i = 0; i < events.size(); ++i) {
      // One message per operation, in envd's order.
      for (uint32_t op : {session::kWatchCreate, session::kWatchRename, session::kWatchChmod, session::kWatchWrite,
                          session::kWatchRemove}) {
        if (!(events[i].ops & op)) continue;
        json::object fe{{"name", events[i].name}, {"type", event_type_name(op)}};
        if (i < entries.size() && entries[i]) fe["entry"] = *entries[i];
        if (!stream_->send(json::object{{"filesystem", std::move(fe)}})) return;  // over: the watch stops on close
      }
    }
    stream_->on_drained(kWatchQueueBytes, std::move(more));
  }

  static constexpr size_t kWatchQueueBytes = 64 * 1024;

  E2bContext& ctx_;
  std::shared_ptr<Responder> res_;
  std::shared_ptr<session::SessionFs> fs_;
  std::string path_;
  bool include_entry_;
  connect::CallOptions options_;
  std::shared_ptr<connect::ServerStream> stream_;
  std::shared_ptr<session::DirWatch> watch_;
  std::optional<ApiError> failure_;
};

void watch_dir(E2bContext& ctx, Request& req, Responder& res) {
  auto options = connect::call_options(req);
  if (!options) return connect::fail_stream(res, options.error());
  auto msg = connect::stream_request(req);
  if (!msg) return connect::fail_stream(res, msg.error());
  auto as = envd_user_from_auth(req);
  if (!as) return connect::fail_stream(res, as.error());
  with_live_sandbox(ctx, res, [&ctx, r = res.shared_from_this(), msg = std::move(*msg), as = *as, options = *options] {
    ctx.api.server.post_blocking([&ctx, r, msg, as, options] {
      std::string id = sandbox_id(r->request());
      auto caller = caller_of(r->request());
      auto fs = ctx.api.sessions.files(caller, id, as);
      if (!fs) return connect::fail_stream(*r, from_error(fs.error()).with_session(id));
      auto path = path_of(**fs, msg);
      if (!path) return connect::fail_stream(*r, path.error());
      auto watch = ctx.api.sessions.open_watch(caller, id, *path, bool_field(msg, "recursive"), as);
      if (!watch) return connect::fail_stream(*r, from_error(watch.error()).with_session(id));
      auto stream =
          std::make_shared<WatchStream>(ctx, r, std::move(*fs), *path, bool_field(msg, "includeEntry"), options);
      stream->attach(*watch);
      (*watch)->start(std::move(stream));
    });
  });
}

}  // namespace

void add_envd_fs_routes(E2bContext& ctx) {
  add_unary(ctx, "Stat", stat_rpc);
  add_unary(ctx, "ListDir", list_rpc);
  add_unary(ctx, "MakeDir", mkdir_rpc);
  add_unary(ctx, "Move", move_rpc);
  add_unary(ctx, "Remove", remove_rpc);
  ctx.api.server.sandbox_router().add(http::verb::post, "/49983/filesystem.Filesystem/WatchDir", RouteDoc{},
                                      [&ctx](Request& req, Responder& res) { watch_dir(ctx, req, res); },
                                      connect::route_options());
}

}  // namespace cela::api::e2b
