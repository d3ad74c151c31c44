// Files (API.md "Files"): every path resolves inside the session root (SessionFs).
#include <fcntl.h>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/write.hpp>
#include <boost/json.hpp>
#include <charconv>

#include "api/json_body.h"
#include "api/render.h"
#include "api/responder.h"
#include "api/route_docs.h"
#include "api/routes.h"
#include "common/encoding.h"
#include "common/sha256.h"

namespace cela::api {
namespace json = boost::json;
namespace asio = boost::asio;
using http::verb;

namespace {

// A path given as `path` (text; percent-encoded bytes pass too) or as `path_b64` (the
// exact bytes in base64: the form for a name that is not UTF-8, as answers give it).
// Exactly one of them; nullopt when neither is there.
ApiResult<std::optional<std::string>> optional_path_param(const Request& req) {
  auto text = req.query_value("path");
  auto b64 = req.query_value("path_b64");
  if (text && b64) return api_fail(ApiError::invalid_request("give one of the queries `path` and `path_b64`"));
  if (text) return std::optional<std::string>(*text);
  if (!b64) return std::optional<std::string>();
  auto bytes = base64_decode(*b64);
  if (!bytes) return api_fail(ApiError::invalid_request("query `path_b64` must be padded base64"));
  return std::optional<std::string>(std::move(*bytes));
}

ApiResult<std::string> path_param(const Request& req) {
  auto p = optional_path_param(req);
  if (!p) return api_fail(p.error());
  if (!*p || (*p)->empty()) return api_fail(ApiError::invalid_request("query `path` (or `path_b64`) is required"));
  return std::move(**p);
}

// The same choice in a JSON body: `key` or `key_b64`, exactly one.
Result<std::string> body_path(const JsonFields& f, std::string_view key) {
  std::string b64_key = std::string(key) + "_b64";
  auto text = f.string(key);
  if (!text) return std::unexpected(text.error());
  auto b64 = f.string(b64_key);
  if (!b64) return std::unexpected(b64.error());
  if (bool(*text) == bool(*b64))
    return fail(ErrorCode::invalid_argument, "give exactly one of `" + std::string(key) + "` and `" + b64_key + "`");
  if (*text) return std::move(**text);
  auto bytes = base64_decode(**b64);
  if (!bytes) return std::unexpected(f.invalid(b64_key, "must be padded base64"));
  return std::move(*bytes);
}

json::object info_json(const session::FileInfo& i) {
  json::object o{{"type", i.type}, {"size", i.size}, {"mode", i.mode}, {"mtime", i.mtime_ms}};
  set_name_field(o, "name", i.name);
  set_name_field(o, "path", i.path);
  if (i.type == "symlink") set_name_field(o, "symlink_target", i.symlink_target);
  else o["symlink_target"] = nullptr;
  return o;
}

json::object path_json(std::string_view key, std::string_view path) {
  json::object o;
  set_name_field(o, key, path);
  return o;
}

// Runs `work` with the session's file view, on the blocking pool.
void with_fs(RouteContext& ctx, Responder& res, const Request& req,
             std::function<void(session::SessionFs&, Responder&)> work) {
  ctx.server.post_blocking([&ctx, responder = res.shared_from_this(), caller = caller_of(req),
                            id = std::string(req.param("id")), work = std::move(work)] {
    auto fs = ctx.sessions.files(caller, id);
    if (!fs) return responder->error(from_error(fs.error()).with_session(id));
    work(**fs, *responder);
  });
}

void fail_with(Responder& res, const Error& e, const std::string& session_id = {}) {
  ApiError a = from_error(e);
  res.error(session_id.empty() ? a : a.with_session(session_id));
}

// PUT …/files and …/archive: the body streams into a process in the session (a file
// writer or the archive import helper, session/upload.h), one chunk in flight, so the
// daemon never holds the body and never owns the pages it becomes. `Intake` is
// session::Upload or session::ArchiveImport; `render` turns its result into the answer.
template <class Intake, class Render>
class IntakeSink final : public BodySink, public std::enable_shared_from_this<IntakeSink<Intake, Render>> {
 public:
  IntakeSink(HttpServer& server, std::unique_ptr<Intake> intake, std::shared_ptr<Responder> out,
             std::string session_id, Render render)
      : server_(server),
        intake_(std::move(intake)),
        out_(std::move(out)),
        session_id_(std::move(session_id)),
        render_(std::move(render)) {}

  void begin(const asio::any_io_executor& executor) override {
    input_.emplace(executor, intake_->take_input().release());
    exited_.emplace(executor, ::fcntl(intake_->done_fd(), F_DUPFD_CLOEXEC, 3));
  }

  void write(std::string_view chunk, std::function<void(bool)> next) override {
    if (auto r = intake_->passed(chunk); !r) {
      fail_with(*out_, r.error(), session_id_);
      drop();
      return next(false);
    }
    asio::async_write(*input_, asio::buffer(chunk),
                      [self = this->shared_from_this(), next = std::move(next)](boost::system::error_code ec, size_t) {
                        if (!self->intake_) return next(false);  // dropped meanwhile
                        if (!ec) return next(true);
                        // The process is gone (disk or memory full, a refused entry): its
                        // exit says why.
                        self->complete();
                        next(false);
                      });
  }

  void finish() override { complete(); }

  void abort(const ApiError& why) override {
    out_->error(why.with_session(session_id_));
    drop();
  }

 private:
  // End of input: once the process has exited, its result (a rename for a file) is
  // taken on the blocking pool.
  void complete() {
    if (!intake_ || !exited_) return;
    input_.reset();
    exited_->async_wait(asio::posix::stream_descriptor::wait_read,
                        [self = this->shared_from_this()](boost::system::error_code) {
                          self->server_.post_blocking([self] {
                            auto r = self->intake_->finish();
                            if (!r) {
                              fail_with(*self->out_, r.error(), self->session_id_);
                            } else {
                              auto [status, body] = self->render_(*r);
                              self->out_->json(status, body);
                            }
                            self->intake_.reset();  // reaps the process, after the answer
                          });
                        });
  }

  // Kills the process (and removes an upload's temp file), off the strand.
  void drop() {
    input_.reset();
    exited_.reset();
    server_.post_blocking([intake = std::shared_ptr<Intake>(std::move(intake_))] {});
  }

  HttpServer& server_;
  std::unique_ptr<Intake> intake_;
  std::shared_ptr<Responder> out_;
  std::string session_id_;
  Render render_;
  std::optional<asio::posix::stream_descriptor> input_, exited_;
};

template <class Intake, class Render>
void accept_into(HttpServer& server, Responder& out, std::unique_ptr<Intake> intake, std::string session_id,
                 Render render) {
  auto responder = out.shared_from_this();
  responder->accept_body(std::make_shared<IntakeSink<Intake, Render>>(server, std::move(intake), responder,
                                                                      std::move(session_id), std::move(render)));
}

std::optional<uint64_t> content_length(const Request& req) {
  auto v = req.header("Content-Length");
  if (!v) return std::nullopt;
  uint64_t n = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
  if (ec != std::errc() || p != v->data() + v->size()) return std::nullopt;
  return n;
}

}  // namespace

void add_file_routes(RouteContext& ctx) {
  Router& r = ctx.server.router();
  RouteOptions upload = upload_options(ctx);

  r.add(verb::put, "/v1/sessions/{id}/files", docs::write_file, [&ctx](Request& req, Responder& res) {
    auto path = path_param(req);
    if (!path) return res.error(path.error());
    session::WriteOptions options;
    if (auto m = req.query_value("mode")) {
      unsigned mode = 0;
      auto [p, ec] = std::from_chars(m->data(), m->data() + m->size(), mode, 8);
      if (ec != std::errc() || p != m->data() + m->size() || mode > 07777)
        return res.error(ApiError::invalid_request("query `mode` must be octal, e.g. 0644"));
      options.mode = mode;
    }
    auto parents = req.query_flag("parents");
    if (!parents) return res.error(parents.error());
    options.make_parents = *parents;
    // Opening the upload waits for the reactor, so it runs on the blocking pool; the
    // body is read only once the session said the declared size fits.
    ctx.server.post_blocking([&ctx, responder = res.shared_from_this(), caller = caller_of(req),
                              id = std::string(req.param("id")), path = *path, options,
                              declared = content_length(req)] {
      auto up = ctx.sessions.open_upload(caller, id, path, options, declared);
      if (!up) return fail_with(*responder, up.error(), id);
      accept_into(ctx.server, *responder, std::move(*up), id, [](const session::WriteResult& w) {
        json::object o = path_json("path", w.path);
        o["size"] = w.size;
        o["sha256"] = w.sha256;
        return std::pair(201, json::value(std::move(o)));
      });
    });
  }, RouteOptions(upload).stream_body());

  r.add(verb::get, "/v1/sessions/{id}/files", docs::read_file, [&ctx](Request& req, Responder& res) {
    auto path = path_param(req);
    if (!path) return res.error(path.error());
    with_fs(ctx, res, req, [&ctx, caller = caller_of(req), id = std::string(req.param("id")),
                            path = *path](session::SessionFs& fs, Responder& out) {
      auto data = fs.read_file(path);
      if (!data) return fail_with(out, data.error());
      ctx.sessions.record_export(caller, id, "file", path, data->size(), sha256_hex(*data));
      out.raw(200, "application/octet-stream", std::move(*data));
    });
  });

  r.add(verb::head, "/v1/sessions/{id}/files", docs::stat_file, [&ctx](Request& req, Responder& res) {
    auto path = path_param(req);
    if (!path) return res.error(path.error());
    with_fs(ctx, res, req, [path = *path](session::SessionFs& fs, Responder& out) {
      auto st = fs.stat(path);
      if (!st) return fail_with(out, st.error());
      out.raw(200, "application/octet-stream", "",
              {{"X-Cela-Size", std::to_string(st->size)}, {"X-Cela-Mtime-Ms", std::to_string(st->mtime_ms)},
               {"X-Cela-Type", st->type}});
    });
  });

  r.add(verb::delete_, "/v1/sessions/{id}/files", docs::delete_file, [&ctx](Request& req, Responder& res) {
    auto path = path_param(req);
    if (!path) return res.error(path.error());
    auto recursive = req.query_flag("recursive");
    if (!recursive) return res.error(recursive.error());
    with_fs(ctx, res, req, [path = *path, recursive = *recursive](session::SessionFs& fs, Responder& out) {
      if (auto r = fs.remove(path, recursive); !r) return fail_with(out, r.error());
      out.no_content();
    });
  });

  r.add(verb::get, "/v1/sessions/{id}/fs", docs::list_dir, [&ctx](Request& req, Responder& res) {
    auto given = optional_path_param(req);
    if (!given) return res.error(given.error());
    std::string path = given->value_or("/");
    int depth = 1;
    if (auto d = req.query_value("depth")) {
      auto [p, ec] = std::from_chars(d->data(), d->data() + d->size(), depth);
      if (ec != std::errc() || p != d->data() + d->size() || depth < 1 || depth > 64)
        return res.error(ApiError::invalid_request("query `depth` must be 1..64"));
    }
    with_fs(ctx, res, req, [path, depth](session::SessionFs& fs, Responder& out) {
      auto entries = fs.list(path, depth);
      if (!entries) return fail_with(out, entries.error());
      json::array a;
      for (auto& e : *entries) a.push_back(info_json(e));
      json::object o = path_json("path", path);
      o["entries"] = std::move(a);
      out.json(200, std::move(o));
    });
  });

  r.add(verb::post, "/v1/sessions/{id}/fs/mkdir", docs::make_dir, [&ctx](Request& req, Responder& res) {
    auto body = parse_json_object(req.body);
    if (!body) return res.error(body.error());
    JsonFields f(*body);
    if (auto ok = f.only({"path", "path_b64", "parents"}); !ok) return res.error(ok.error());
    auto path = body_path(f, "path");
    if (!path) return res.error(path.error());
    auto parents = f.boolean("parents");
    if (!parents) return res.error(parents.error());
    with_fs(ctx, res, req, [path = *path, parents = parents->value_or(false)](session::SessionFs& fs, Responder& out) {
      if (auto r = fs.mkdir(path, parents); !r) return fail_with(out, r.error());
      out.json(201, path_json("path", path));
    });
  });

  r.add(verb::post, "/v1/sessions/{id}/fs/move", docs::move_path, [&ctx](Request& req, Responder& res) {
    auto body = parse_json_object(req.body);
    if (!body) return res.error(body.error());
    JsonFields f(*body);
    if (auto ok = f.only({"from", "from_b64", "to", "to_b64", "overwrite"}); !ok) return res.error(ok.error());
    auto from = body_path(f, "from");
    if (!from) return res.error(from.error());
    auto to = body_path(f, "to");
    if (!to) return res.error(to.error());
    auto overwrite = f.boolean("overwrite");
    if (!overwrite) return res.error(overwrite.error());
    with_fs(ctx, res, req, [from = *from, to = *to, ow = overwrite->value_or(false)](session::SessionFs& fs,
                                                                                    Responder& out) {
      if (auto r = fs.move(from, to, ow); !r) return fail_with(out, r.error());
      json::object o = path_json("from", from);
      set_name_field(o, "to", to);
      out.json(200, std::move(o));
    });
  });

  r.add(verb::get, "/v1/sessions/{id}/archive", docs::export_archive, [&ctx](Request& req, Responder& res) {
    auto path = path_param(req);
    if (!path) return res.error(path.error());
    with_fs(ctx, res, req, [&ctx, caller = caller_of(req), id = std::string(req.param("id")),
                            path = *path](session::SessionFs& fs, Responder& out) {
      // Fail before the first byte when the directory is missing.
      auto st = fs.stat(path);
      if (!st) return fail_with(out, st.error());
      if (st->type != "dir") return out.error(ApiError::invalid_request("`path` must be a directory"));
      // Policy answers (outside the exportable paths, too large, a secret inside) come
      // before the first byte: a dry run first when the session has secrets to scan for.
      if (fs.has_export_filter()) {
        auto dry = fs.export_tar(path, [](std::string_view) -> Result<void> { return {}; });
        if (!dry) return fail_with(out, dry.error());
      } else if (auto top = fs.export_tar(path, nullptr); !top && top.error().code == ErrorCode::policy_denied) {
        return fail_with(out, top.error());
      }
      auto writer = out.start_chunked(200, "application/x-tar");
      if (!writer) return;
      Sha256 hash;
      uint64_t size = 0;
      auto r = fs.export_tar(path, [&](std::string_view chunk) -> Result<void> {
        hash.update(chunk);
        size += chunk.size();
        if (!writer->write(chunk)) return fail(ErrorCode::system, "client went away");
        return {};
      });
      if (r) {
        // Recorded before the last chunk: a client that has the whole tar finds the record.
        ctx.sessions.record_export(caller, id, "archive", path, size, hash.hex_final());
        writer->finish();
      } else {
        writer->abort();  // a truncated tar must not look complete
      }
    });
  });

  r.add(verb::put, "/v1/sessions/{id}/archive", docs::import_archive, [&ctx](Request& req, Responder& res) {
    auto path = path_param(req);
    if (!path) return res.error(path.error());
    ctx.server.post_blocking([&ctx, responder = res.shared_from_this(), caller = caller_of(req),
                              id = std::string(req.param("id")), path = *path, declared = content_length(req)] {
      auto import = ctx.sessions.open_import(caller, id, path, declared);
      if (!import) return fail_with(*responder, import.error(), id);
      accept_into(ctx.server, *responder, std::move(*import), id, [path](uint64_t entries) {
        json::object o = path_json("path", path);
        o["entries"] = entries;
        return std::pair(200, json::value(std::move(o)));
      });
    });
  }, RouteOptions(upload).stream_body());
}

}  // namespace cela::api
