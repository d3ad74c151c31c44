// An exec's output pipeline: capture -> filter (the redaction hook) -> kept bytes on
// disk -> subscribers. Reactor-only: every method runs on the session reactor.
//
// Kept output goes straight to one file per stream under the output dir
// (<dir>/<exec id>.stdout|.stderr), appended as it arrives; nothing is held whole in
// memory. Past the per-stream cap bytes are counted and dropped (the pipe keeps
// draining, so the process never blocks on a full pipe). Offsets are positions in the
// kept bytes, so a follower's "<stdout>,<stderr>" position names exactly what it has.
//
// A follower first replays what is kept past its position, read from the files in
// chunks paced by the sink (OutputSink::when_drained), then receives live chunks; the
// switch happens on the reactor, so no byte is lost or repeated.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "runtime/runtime.h"
#include "store/records.h"

namespace cela::session {

using runtime::Stream;

// Where an exec's output goes (an SSE response, a WebSocket later). Called on the
// reactor: must not block.
class OutputSink {
 public:
  virtual ~OutputSink() = default;
  // `offset` is the stream's kept-byte offset after this chunk.
  virtual void on_output(Stream stream, uint64_t offset, std::string_view data) = 0;
  virtual void on_exit(const store::ExecRecord& record) = 0;
  // True once the consumer is gone; the sink is then dropped.
  virtual bool closed() const = 0;
  // Runs `resume` (on any thread) once at most `max_queued` bytes wait for the
  // consumer; at once when that holds already. Never, when the consumer goes away.
  virtual void when_drained(size_t max_queued, std::function<void()> resume) = 0;
};

// The redaction hook: sees every chunk before it is kept or sent. The default keeps
// bytes as they are.
class OutputFilter {
 public:
  virtual ~OutputFilter() = default;
  virtual void filter(Stream stream, std::string_view in, std::string& out) = 0;
  // The stream ended: what the filter still holds (a redactor's carry-over).
  virtual void flush(Stream, std::string&) {}
};

class OutputPipeline {
 public:
  // `cap` bytes kept per stream.
  OutputPipeline(boost::asio::io_context& reactor, std::string dir, std::string exec_id, uint64_t cap,
                 std::shared_ptr<OutputFilter> filter = nullptr);
  ~OutputPipeline();

  // A chunk read from the exec.
  void capture(Stream stream, std::string_view data);
  // The streams have ended: the filter releases what it held (call before finish()
  // and before reading the byte counts).
  void flush_filter();
  // The exec has ended: followers get `record` once they have replayed everything.
  void finish(const store::ExecRecord& record);

  // Replays from (out_from, err_from), then follows live until finish().
  void follow(uint64_t out_from, uint64_t err_from, std::shared_ptr<OutputSink> sink);

  uint64_t kept(Stream s) const { return streams_[index(s)].kept; }
  // The first kHeadBytes kept of each stream stay in memory too, so a small exec's
  // output is answered without touching the files.
  static constexpr uint64_t kHeadBytes = 64 * 1024;
  // Both streams whole, when each kept at most kHeadBytes.
  std::optional<std::pair<std::string, std::string>> small_output() const;
  uint64_t total(Stream s) const { return streams_[index(s)].total; }
  bool truncated() const { return truncated_; }
  // Path of a stream's file; "" when it kept nothing.
  std::string path(Stream s) const;
  // First error writing the files (disk full), if any: the output is then short.
  const std::optional<Error>& write_error() const { return write_error_; }

 private:
  static size_t index(Stream s) { return s == Stream::stdout_stream ? 0 : 1; }
  struct StreamState {
    UniqueFd fd;
    uint64_t kept = 0, total = 0;
    std::string head;  // the first kHeadBytes kept
  };
  class Follower;
  friend void replay_stored(boost::asio::io_context&, const std::vector<store::OutputRecord>&, uint64_t, uint64_t,
                            const store::ExecRecord&, std::shared_ptr<OutputSink>);

  void keep(Stream stream, std::string_view data);

  boost::asio::io_context& reactor_;
  std::string dir_, exec_id_;
  uint64_t cap_;
  std::shared_ptr<OutputFilter> filter_;
  StreamState streams_[2];
  bool truncated_ = false;
  bool finished_ = false;
  store::ExecRecord final_;
  std::optional<Error> write_error_;
  std::vector<std::shared_ptr<Follower>> followers_;
  std::string scratch_;
};

// Replays a finished exec's stored output (files named by the store's output index)
// from (out_from, err_from) to `sink`, then its record. Reactor-only; paced by the sink.
void replay_stored(boost::asio::io_context& reactor, const std::vector<store::OutputRecord>& files,
                   uint64_t out_from, uint64_t err_from, const store::ExecRecord& record,
                   std::shared_ptr<OutputSink> sink);

// Reads a whole stored stream (GET …/output); "" when absent.
Result<std::string> read_stored(const std::vector<store::OutputRecord>& files, Stream stream);

}  // namespace cela::session
