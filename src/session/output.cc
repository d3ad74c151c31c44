#include "session/output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include "common/fs.h"

namespace cela::session {
namespace asio = boost::asio;

namespace {
constexpr size_t kReplayChunk = 64 * 1024;
// A replaying follower keeps at most this much waiting for its consumer: replaying
// a large output costs about this much memory per follower, whatever its size.
constexpr size_t kReplayQueue = 512 * 1024;

std::string stream_path(const std::string& dir, const std::string& exec_id, Stream s) {
  return dir + "/" + exec_id + "." + std::string(runtime::to_string(s));
}
}  // namespace

// One reader of an exec's output: replaying from files, then (for a live exec) live.
class OutputPipeline::Follower : public std::enable_shared_from_this<Follower> {
 public:
  // Where the bytes come from: the live pipeline, or stored files.
  struct Source {
    OutputPipeline* live = nullptr;
    UniqueFd fds[2];
    uint64_t sizes[2] = {0, 0};
  };

  Follower(asio::io_context& reactor, Source source, uint64_t out, uint64_t err, std::shared_ptr<OutputSink> sink,
           std::optional<store::ExecRecord> final_record)
      : reactor_(reactor), source_(std::move(source)), sink_(std::move(sink)), final_(std::move(final_record)) {
    pos_[0] = out;
    pos_[1] = err;
  }

  bool live() const { return live_; }
  bool done() const { return done_ || sink_->closed(); }

  // Replays what is available; switches to live (or ends) once caught up.
  void step() {
    if (done()) return;
    for (size_t i = 0; i < 2; ++i) {
      uint64_t avail = available(i);
      if (pos_[i] >= avail) continue;
      size_t n = static_cast<size_t>(std::min<uint64_t>(kReplayChunk, avail - pos_[i]));
      buf_.resize(n);
      int fd = source_.live ? source_.live->streams_[i].fd.get() : source_.fds[i].get();
      ssize_t got = fd >= 0 ? ::pread(fd, buf_.data(), n, static_cast<off_t>(pos_[i])) : -1;
      if (got <= 0) {
        // The file is shorter than its index says (disk full while writing): what
        // was kept is all there is.
        pos_[i] = avail;
        continue;
      }
      pos_[i] += static_cast<uint64_t>(got);
      sink_->on_output(i == 0 ? Stream::stdout_stream : Stream::stderr_stream, pos_[i],
                       std::string_view(buf_.data(), static_cast<size_t>(got)));
      // The pending resume keeps the follower alive; a consumer that goes away
      // drops it (and with it the follower).
      auto self = shared_from_this();
      asio::io_context& reactor = reactor_;
      sink_->when_drained(kReplayQueue, [self, &reactor] {
        asio::post(reactor, [self] { self->step(); });
      });
      return;
    }
    // Caught up with everything kept so far.
    if (source_.live && !source_.live->finished_) {
      live_ = true;
      return;
    }
    end(source_.live ? source_.live->final_ : *final_);
  }

  // A live chunk (already kept; `offset` is the kept offset after it).
  void push(size_t i, uint64_t offset, std::string_view data) {
    if (!live_ || done()) return;
    pos_[i] = offset;
    sink_->on_output(i == 0 ? Stream::stdout_stream : Stream::stderr_stream, offset, data);
  }

  // The live pipeline goes away (its session ended): go on from the files.
  void detach(const OutputPipeline& pipeline) {
    for (size_t i = 0; i < 2; ++i) {
      source_.sizes[i] = pipeline.streams_[i].kept;
      if (pipeline.streams_[i].fd) source_.fds[i].reset(::fcntl(pipeline.streams_[i].fd.get(), F_DUPFD_CLOEXEC, 3));
    }
    if (!final_) final_ = pipeline.final_;
    source_.live = nullptr;
  }

  void end(const store::ExecRecord& record) {
    if (done_) return;
    done_ = true;
    if (!sink_->closed()) sink_->on_exit(record);
  }

 private:
  uint64_t available(size_t i) const {
    return source_.live ? source_.live->streams_[i].kept : source_.sizes[i];
  }

  asio::io_context& reactor_;
  Source source_;
  std::shared_ptr<OutputSink> sink_;
  std::optional<store::ExecRecord> final_;
  uint64_t pos_[2] = {0, 0};
  bool live_ = false, done_ = false;
  std::string buf_;
};

OutputPipeline::OutputPipeline(asio::io_context& reactor, std::string dir, std::string exec_id, uint64_t cap,
                               std::shared_ptr<OutputFilter> filter)
    : reactor_(reactor), dir_(std::move(dir)), exec_id_(std::move(exec_id)), cap_(cap), filter_(std::move(filter)) {}

OutputPipeline::~OutputPipeline() {
  for (auto& f : followers_)
    if (!f->done()) f->detach(*this);
}

std::optional<std::pair<std::string, std::string>> OutputPipeline::small_output() const {
  for (const auto& st : streams_)
    if (st.kept > kHeadBytes) return std::nullopt;
  return std::pair{streams_[0].head, streams_[1].head};
}

std::string OutputPipeline::path(Stream s) const {
  return streams_[index(s)].kept > 0 ? stream_path(dir_, exec_id_, s) : "";
}

void OutputPipeline::capture(Stream stream, std::string_view data) {
  if (filter_) {
    scratch_.clear();
    filter_->filter(stream, data, scratch_);
    keep(stream, scratch_);
  } else {
    keep(stream, data);
  }
}

void OutputPipeline::flush_filter() {
  if (!filter_) return;
  for (auto stream : {Stream::stdout_stream, Stream::stderr_stream}) {
    scratch_.clear();
    filter_->flush(stream, scratch_);
    if (!scratch_.empty()) keep(stream, scratch_);
  }
}

void OutputPipeline::keep(Stream stream, std::string_view data) {
  StreamState& st = streams_[index(stream)];
  st.total += data.size();
  uint64_t room = st.kept < cap_ ? cap_ - st.kept : 0;
  size_t take = static_cast<size_t>(std::min<uint64_t>(room, data.size()));
  if (take < data.size()) truncated_ = true;
  if (take == 0) return;
  if (!st.fd && !write_error_) {
    std::string p = stream_path(dir_, exec_id_, stream);
    st.fd.reset(::open(p.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!st.fd) write_error_ = Error{ErrorCode::system, errno, "open " + p};
  }
  size_t written = 0;
  while (st.fd && written < take) {
    ssize_t n = ::write(st.fd.get(), data.data() + written, take - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (!write_error_) write_error_ = Error{ErrorCode::system, errno, "write output of " + exec_id_};
      break;
    }
    written += static_cast<size_t>(n);
  }
  // What could not be written is not kept: offsets always name bytes on disk.
  if (written < take) truncated_ = true;
  if (st.head.size() < kHeadBytes)
    st.head.append(data.data(), std::min<size_t>(written, kHeadBytes - st.head.size()));
  st.kept += written;
  if (written == 0) return;
  size_t i = index(stream);
  std::erase_if(followers_, [](const auto& f) { return f->done(); });
  for (auto& f : followers_) f->push(i, st.kept, data.substr(0, written));
}

void OutputPipeline::finish(const store::ExecRecord& record) {
  if (finished_) return;
  finished_ = true;
  final_ = record;
  auto followers = std::move(followers_);
  followers_.clear();
  for (auto& f : followers) {
    if (f->live()) f->end(record);
    else {
      // Still replaying: it ends by itself once caught up; keep it reachable.
      followers_.push_back(f);
    }
  }
}

void OutputPipeline::follow(uint64_t out_from, uint64_t err_from, std::shared_ptr<OutputSink> sink) {
  Follower::Source source;
  source.live = this;
  auto f = std::make_shared<Follower>(reactor_, std::move(source), out_from, err_from, std::move(sink), std::nullopt);
  followers_.push_back(f);
  f->step();
}

void replay_stored(asio::io_context& reactor, const std::vector<store::OutputRecord>& files, uint64_t out_from,
                   uint64_t err_from, const store::ExecRecord& record, std::shared_ptr<OutputSink> sink) {
  OutputPipeline::Follower::Source source;
  for (const auto& f : files) {
    size_t i = f.stream == "stdout" ? 0 : 1;
    UniqueFd fd(::open(f.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) continue;
    struct stat st{};
    if (::fstat(fd.get(), &st) != 0) continue;
    source.sizes[i] = std::min<uint64_t>(static_cast<uint64_t>(st.st_size), static_cast<uint64_t>(f.bytes));
    source.fds[i] = std::move(fd);
  }
  auto follower = std::make_shared<OutputPipeline::Follower>(reactor, std::move(source), out_from, err_from,
                                                             std::move(sink), record);
  follower->step();
}

Result<std::string> read_stored(const std::vector<store::OutputRecord>& files, Stream stream) {
  for (const auto& f : files)
    if (f.stream == runtime::to_string(stream)) return read_file(f.path);
  return std::string();
}

}  // namespace cela::session
