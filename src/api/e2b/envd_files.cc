// envd's plain-HTTP file routes (docs/e2b.md "Data plane: files"):
//   GET  /files?path=P[&username=U]  the file's bytes, streamed from the session
//   POST /files?path=P[&username=U]  multipart/form-data (one or more parts named
//        `file`; without `path` each part's file name is its path) or
//        application/octet-stream (optionally Content-Encoding: gzip) -> 200
//        [{"path", "name", "type": "file"}]
// Both act as the chosen sandbox user through the session layer, exactly as the native
// file routes do: downloads are SessionFs::export_file (export policy, secret scan, the
// export record), uploads SessionManager::open_upload (a writer process in the session's
// cgroups, the session's upload cap and free room, an atomic rename at the end). The
// body is never held whole: each decoded piece (gzip inflates at most 256 KiB per step)
// is written to the writer before the next is read.
#include <fcntl.h>
#include <zlib.h>

#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/write.hpp>
#include <boost/json.hpp>
#include <cctype>
#include <deque>
#include <set>

#include "api/e2b/e2b.h"
#include "api/e2b/envd_files.h"
#include "api/e2b/envd_user.h"
#include "api/e2b/sandbox_lookup.h"
#include "api/multipart.h"
#include "api/responder.h"
#include "api/routes.h"
#include "common/json_text.h"

namespace cela::api::e2b {
namespace json = boost::json;
namespace asio = boost::asio;

std::vector<std::pair<std::string, std::string>> metadata_xattrs(const Request& req) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : req.headers) {
    std::string name(f.name_string());
    if (name.size() <= kMetadataHeader.size()) continue;
    std::string head = name.substr(0, kMetadataHeader.size());
    bool match = true;
    for (size_t i = 0; i < head.size(); ++i)
      match = match && std::tolower(static_cast<unsigned char>(head[i])) ==
                           std::tolower(static_cast<unsigned char>(kMetadataHeader[i]));
    if (!match) continue;
    std::string key = name.substr(kMetadataHeader.size());
    for (auto& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.emplace_back(std::string(kMetadataXattr) + key, std::string(f.value()));
  }
  return out;
}

std::shared_ptr<session::SessionFs> view_or_answer(E2bContext& ctx, Responder& r, session::ExecUser as) {
  std::string id = sandbox_id(r.request());
  auto fs = ctx.api.sessions.files(caller_of(r.request()), id, as);
  if (fs) return *fs;
  if (fs.error().code == ErrorCode::not_found || fs.error().code == ErrorCode::gone)
    answer_sandbox_not_found(r, id);
  else
    r.error(from_error(fs.error()).with_session(id));
  return nullptr;
}

namespace {

std::string base_name(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

json::object written_json(const std::string& path, const std::vector<std::pair<std::string, std::string>>& xattrs) {
  json::object o{{"path", path}, {"name", base_name(path)}, {"type", "file"}};
  if (!xattrs.empty()) {
    json::object m;
    for (const auto& [k, v] : xattrs) m[k.substr(kMetadataXattr.size())] = v;
    o["metadata"] = std::move(m);
  }
  return o;
}

// A gzip body decoded piece by piece: each call inflates at most `max` bytes of output
// from the input it was given, so a small body that expands hugely is never expanded
// whole.
class Gunzip {
 public:
  Gunzip() { ok_ = inflateInit2(&z_, 16 + MAX_WBITS) == Z_OK; }
  ~Gunzip() { inflateEnd(&z_); }
  Gunzip(const Gunzip&) = delete;
  Gunzip& operator=(const Gunzip&) = delete;

  void input(std::string_view in) {
    z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z_.avail_in = static_cast<uInt>(in.size());
  }
  // More to inflate: input left, or output the last step had no room for.
  bool has_work() const { return z_.avail_in > 0 || pending_; }
  bool ended() const { return ended_; }
  ApiResult<std::string> output(size_t max) {
    if (!ok_) return api_fail(ApiError::internal("inflateInit2 failed"));
    std::string out(max, '\0');
    z_.next_out = reinterpret_cast<Bytef*>(out.data());
    z_.avail_out = static_cast<uInt>(max);
    if (ended_) {
      if (z_.avail_in > 0) return api_fail(ApiError::invalid_request("data after the end of the gzip body"));
      return std::string();
    }
    int rc = inflate(&z_, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      ended_ = true;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      return api_fail(ApiError::invalid_request("the body is not valid gzip"));
    }
    pending_ = !ended_ && z_.avail_out == 0;
    out.resize(max - z_.avail_out);
    return out;
  }

 private:
  z_stream z_{};
  bool ok_ = false;
  bool ended_ = false;
  bool pending_ = false;
};

constexpr size_t kInflateStep = 256 * 1024;

// POST /files: the body, decoded (gzip) and split (multipart), into one session upload
// after another. Every method runs on the connection's strand or is posted back to it.
class FilesUpload final : public BodySink, public std::enable_shared_from_this<FilesUpload> {
 public:
  struct Setup {
    E2bContext* ctx = nullptr;
    std::shared_ptr<Responder> out;
    session::Caller caller;
    std::string id;
    session::ExecUser as = session::ExecUser::user;
    std::string home;
    std::optional<std::string> path;  // the query's, resolved
    std::vector<std::pair<std::string, std::string>> xattrs;
    bool gzip = false;
    std::optional<std::string> boundary;  // multipart
  };
  explicit FilesUpload(Setup s) : s_(std::move(s)) {
    if (s_.gzip) gunzip_.emplace();
    if (s_.boundary) {
      reader_.emplace(*s_.boundary);
    } else {
      // octet-stream: one file, the whole body.
      queue_.push_back({.kind = MultipartEvent::Kind::begin, .part = {.name = "file", .filename = {}, .content_type = {}},
                        .data = {}});
    }
  }

  void begin(const asio::any_io_executor& executor) override { executor_ = executor; }

  void write(std::string_view chunk, std::function<void(bool)> next) override {
    if (failed_) return next(false);
    next_ = std::move(next);
    if (gunzip_) {
      gunzip_->input(chunk);
    } else if (auto r = decoded(std::string(chunk)); !r) {
      return fail(r.error());
    }
    pump();
  }

  void finish() override {
    if (failed_) return;
    body_done_ = true;
    if (gunzip_ && !gunzip_->ended()) return fail(ApiError::invalid_request("the gzip body ended early"));
    if (reader_) {
      if (auto r = reader_->finish(); !r) return fail(r.error());
    } else {
      queue_.push_back({.kind = MultipartEvent::Kind::end, .part = {}, .data = {}});
    }
    pump();
  }

  void abort(const ApiError& why) override { fail(why); }

 private:
  // Decoded body bytes: split into parts, or (octet-stream) all one file's data.
  ApiResult<void> decoded(std::string bytes) {
    if (bytes.empty()) return {};
    if (!reader_) {
      queue_.push_back({.kind = MultipartEvent::Kind::data, .part = {}, .data = std::move(bytes)});
      return {};
    }
    std::vector<MultipartEvent> events;
    if (auto r = reader_->feed(bytes, events); !r) return r;
    for (auto& e : events) queue_.push_back(std::move(e));
    return {};
  }

  // Works off the queue, one step at a time (each may wait: the upload's open, its
  // writer, its end); with the queue empty, more of the body is decoded or asked for.
  void pump() {
    while (!failed_ && !busy_) {
      if (!queue_.empty()) {
        MultipartEvent e = std::move(queue_.front());
        queue_.pop_front();
        step(std::move(e));
        continue;
      }
      if (gunzip_ && gunzip_->has_work()) {
        auto piece = gunzip_->output(kInflateStep);
        if (!piece) return fail(piece.error());
        if (auto r = decoded(std::move(*piece)); !r) return fail(r.error());
        continue;
      }
      if (next_) {
        auto next = std::move(next_);
        next_ = nullptr;
        return next(true);
      }
      if (body_done_) return answer();
      return;
    }
  }

  void step(MultipartEvent e) {
    switch (e.kind) {
      case MultipartEvent::Kind::begin:
        return open(std::move(e.part));
      case MultipartEvent::Kind::data:
        return data(std::move(e.data));
      case MultipartEvent::Kind::end:
        return close_part();
      case MultipartEvent::Kind::done:
        return;
    }
  }

  void open(MultipartPart part) {
    skipping_ = part.name != "file";
    if (skipping_) return;
    std::string target;
    if (s_.path) {
      target = *s_.path;
    } else if (part.filename && !part.filename->empty()) {
      auto p = envd_path(*part.filename, s_.home);
      if (!p) return fail(p.error());
      target = std::move(*p);
    } else {
      return fail(ApiError::invalid_request("a file part needs a file name, or the query `path`"));
    }
    if (!paths_.insert(target).second)
      return fail(ApiError::invalid_request("you cannot upload several files to the same path '" + target +
                                            "' in one request"));
    busy_ = true;
    session::WriteOptions options;
    options.make_parents = true;
    options.xattrs = s_.xattrs;
    s_.ctx->api.server.post_blocking([self = shared_from_this(), target, options] {
      auto up = self->s_.ctx->api.sessions.open_upload(self->s_.caller, self->s_.id, target, options, std::nullopt,
                                                       self->s_.as);
      asio::post(self->executor_, [self, target, up = std::move(up)]() mutable {
        self->busy_ = false;
        if (!up) return self->fail(from_error(up.error()));
        self->upload_ = std::move(*up);
        self->target_ = target;
        self->input_.emplace(self->executor_, self->upload_->take_input().release());
        self->exited_.emplace(self->executor_, ::fcntl(self->upload_->done_fd(), F_DUPFD_CLOEXEC, 3));
        self->pump();
      });
    });
  }

  void data(std::string bytes) {
    if (skipping_ || !upload_) return;
    if (auto r = upload_->passed(bytes); !r) return fail(from_error(r.error()));
    busy_ = true;
    auto held = std::make_shared<std::string>(std::move(bytes));
    asio::async_write(*input_, asio::buffer(*held), [self = shared_from_this(), held](boost::system::error_code ec, size_t) {
      self->busy_ = false;
      if (self->failed_) return;
      if (ec) return self->close_part();  // the writer is gone (disk or memory full): its end says why
      self->pump();
    });
  }

  void close_part() {
    if (skipping_ || !upload_) {
      skipping_ = false;
      return;
    }
    busy_ = true;
    input_.reset();
    exited_->async_wait(asio::posix::stream_descriptor::wait_read, [self = shared_from_this()](boost::system::error_code) {
      self->s_.ctx->api.server.post_blocking([self] {
        auto r = self->upload_->finish();
        asio::post(self->executor_, [self, r = std::move(r)]() mutable {
          self->busy_ = false;
          self->exited_.reset();
          self->drop_upload();
          if (!r) return self->fail(from_error(r.error()));
          self->written_.push_back(written_json(self->target_, self->s_.xattrs));
          self->pump();
        });
      });
    });
  }

  void answer() {
    if (answered_) return;
    answered_ = true;
    if (written_.empty()) return s_.out->error(ApiError::invalid_request("no part named `file` in the body"));
    s_.out->json(200, written_);
  }

  void fail(const ApiError& why) {
    if (failed_) return;
    failed_ = true;
    input_.reset();
    exited_.reset();
    drop_upload();
    if (!answered_) {
      answered_ = true;
      s_.out->error(why.with_session(s_.id));
    }
    if (next_) {
      auto next = std::move(next_);
      next_ = nullptr;
      next(false);
    }
  }

  // Kills an unfinished writer and removes its temp file, off the strand.
  void drop_upload() {
    if (upload_) s_.ctx->api.server.post_blocking([u = std::shared_ptr<session::Upload>(std::move(upload_))] {});
  }

  Setup s_;
  asio::any_io_executor executor_;
  std::optional<Gunzip> gunzip_;
  std::optional<MultipartReader> reader_;
  std::deque<MultipartEvent> queue_;
  std::function<void(bool)> next_;
  std::unique_ptr<session::Upload> upload_;
  std::string target_;
  std::optional<asio::posix::stream_descriptor> input_, exited_;
  std::set<std::string> paths_;
  json::array written_;
  bool busy_ = false, skipping_ = false, body_done_ = false, failed_ = false, answered_ = false;
};

void get_file(E2bContext& ctx, Request& req, Responder& res) {
  auto as = envd_user_from_query(req);
  if (!as) return res.error(as.error());
  std::string asked(req.query_value("path").value_or(""));
  ctx.api.server.post_blocking([&ctx, r = res.shared_from_this(), as = *as, asked] {
    auto fs = view_or_answer(ctx, *r, as);
    if (!fs) return;
    auto caller = caller_of(r->request());
    std::string id = sandbox_id(r->request());
    auto path = envd_path(asked, fs->home());
    if (!path) return r->error(path.error());
    std::shared_ptr<ChunkedWriter> writer;
    auto sent = fs->export_file(*path, [&](std::string_view chunk) -> Result<void> {
      if (!writer) writer = r->start_chunked(200, "application/octet-stream", {{"Vary", "Accept-Encoding"}});
      if (!writer->write(chunk)) return cela::fail(ErrorCode::system, "client went away");
      return {};
    });
    if (!sent) {
      if (writer) return writer->abort();  // a truncated file must not look complete
      return r->error(from_error(sent.error()).with_session(id));
    }
    // Recorded before the last chunk: a client that has the whole file finds the record.
    ctx.api.sessions.record_export(caller, id, "file", *path, sent->size, sent->sha256);
    if (writer) return writer->finish();
    r->raw(200, "application/octet-stream", "");
  });
}

void post_files(E2bContext& ctx, Request& req, Responder& res) {
  auto as = envd_user_from_query(req);
  if (!as) return res.error(as.error());
  FilesUpload::Setup setup;
  setup.ctx = &ctx;
  setup.as = *as;
  setup.xattrs = metadata_xattrs(req);
  std::string type(req.header("Content-Type").value_or(""));
  std::string media = type.substr(0, type.find(';'));
  while (!media.empty() && media.back() == ' ') media.pop_back();
  for (auto& c : media) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (media == "multipart/form-data") {
    auto b = MultipartReader::boundary_of(type);
    if (!b) return res.error(b.error());
    setup.boundary = std::move(*b);
  } else if (media != "application/octet-stream") {
    return res.error(ApiError::invalid_request("unsupported content type `" + type +
                                               "`: expected multipart/form-data or application/octet-stream"));
  }
  if (auto enc = req.header("Content-Encoding"); enc && !enc->empty() && *enc != "identity") {
    if (*enc != "gzip") return res.error(ApiError::unsupported_media_type("Content-Encoding must be gzip or absent"));
    setup.gzip = true;
  }
  std::optional<std::string> asked;
  if (auto p = req.query_value("path"); p && !p->empty()) asked = std::string(*p);
  if (!setup.boundary && !asked)
    return res.error(ApiError::invalid_request("the query `path` is required for an application/octet-stream upload"));
  ctx.api.server.post_blocking([&ctx, r = res.shared_from_this(), setup = std::move(setup), asked]() mutable {
    // The user's home, for relative paths: the session's view for that user.
    auto fs = view_or_answer(ctx, *r, setup.as);
    if (!fs) return;
    setup.caller = caller_of(r->request());
    setup.id = sandbox_id(r->request());
    setup.out = r;
    setup.home = fs->home();
    if (asked) {
      auto p = envd_path(*asked, setup.home);
      if (!p) return r->error(p.error());
      setup.path = std::move(*p);
    }
    r->accept_body(std::make_shared<FilesUpload>(std::move(setup)));
  });
}

}  // namespace

void add_envd_files_routes(E2bContext& ctx) {
  Router& r = ctx.api.server.sandbox_router();
  RouteOptions e2b_style = RouteOptions().with_error_style(ErrorStyle::e2b);
  r.add(http::verb::get, "/49983/files", RouteDoc{}, [&ctx](Request& req, Responder& res) { get_file(ctx, req, res); },
        e2b_style);
  r.add(http::verb::post, "/49983/files", RouteDoc{},
        [&ctx](Request& req, Responder& res) { post_files(ctx, req, res); },
        RouteOptions(upload_options(ctx.api)).stream_body().with_error_style(ErrorStyle::e2b));
}

}  // namespace cela::api::e2b
