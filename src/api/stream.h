// Streaming responses: SseStream (text/event-stream) and ChunkedWriter (a large body of
// unknown length, e.g. a file or tar download). Both come from a Responder
// (start_sse / start_chunked) and are shared handles: a producer may keep one on any
// thread and write to it long after the handler returned.
//
// Memory is bounded per connection (ServerConfig::stream_buffer_limit, 8 MiB by
// default): bytes queued but not yet taken by the client never pass it. An SSE producer
// never waits: a client that falls that far behind is disconnected and send() returns
// false. A ChunkedWriter producer (on a blocking-pool thread) waits for room instead.
// A client that stops reading altogether is cut off by the write timeout.
//
// closed() turns true when the stream can take no more data: the client went away,
// the limit was hit, the server is stopping, or the producer closed it. on_close()
// callbacks run once when the response has ended, on an io thread (or at once, on the
// caller's thread, when it has already ended); they must not block.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string_view>

namespace cela::api {

namespace detail {
class StreamChannel;
}

class SseStream {
 public:
  explicit SseStream(std::shared_ptr<detail::StreamChannel> channel);
  // Dropping the last handle ends the stream cleanly, as close() does.
  ~SseStream();
  SseStream(const SseStream&) = delete;
  SseStream& operator=(const SseStream&) = delete;

  // One event: "event: <event>\nid: <id>\ndata: <line>\n...\n\n". An empty event or id
  // omits its line; data is split into one data line per line of text. CR/LF in event
  // and id are replaced by spaces. False when the stream is closed (or closes now).
  bool send(std::string_view event, std::string_view id, std::string_view data);
  // A comment line (": keepalive\n\n"); a leading ':' in `text` is optional. The
  // server also sends one by itself every ServerConfig::sse_keepalive.
  bool comment(std::string_view text);
  // Sends what is queued, then ends the response and the connection.
  void close();
  bool closed() const;
  void on_close(std::function<void()> fn);
  // For producers that pace themselves (a replay of stored output): runs `fn` once at
  // most `max_queued` bytes wait for the client; never when the stream closes first.
  void on_drained(std::size_t max_queued, std::function<void()> fn);

 private:
  std::shared_ptr<detail::StreamChannel> channel_;
};

class ChunkedWriter {
 public:
  explicit ChunkedWriter(std::shared_ptr<detail::StreamChannel> channel);
  // Dropping the last handle without finish() aborts: the client sees a truncated body
  // (no final chunk), never a short body that looks complete.
  ~ChunkedWriter();
  ChunkedWriter(const ChunkedWriter&) = delete;
  ChunkedWriter& operator=(const ChunkedWriter&) = delete;

  // Queues one chunk, waiting while the buffer is full: call it from a blocking-pool
  // thread, never from an io thread. False when the client is gone.
  bool write(std::string_view chunk);
  // Never waits: false (and the connection is closed) when the buffer would overflow.
  bool try_write(std::string_view chunk);
  // Sends what is queued and the final chunk; the connection then serves the next
  // request (keep-alive).
  void finish();
  // Ends the response now, truncated, and closes the connection.
  void abort();
  bool closed() const;
  void on_close(std::function<void()> fn);
  // As SseStream::on_drained: for producers that pace themselves with try_write.
  void on_drained(std::size_t max_queued, std::function<void()> fn);
  // Runs `fn` once, on an io thread, `delay` from now (a protocol's keepalive or
  // deadline). Never when the response has ended by then; `fn` must not block and
  // should hold the stream weakly (the timer outlives nothing but itself).
  void after(std::chrono::milliseconds delay, std::function<void()> fn);

 private:
  std::shared_ptr<detail::StreamChannel> channel_;
  bool finished_ = false;
};

}  // namespace cela::api
