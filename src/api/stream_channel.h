// StreamChannel (internal to api/): the bounded byte queue between a producer thread
// (SseStream, ChunkedWriter) and the connection that writes a streaming response.
//
// The producer appends; the connection takes everything queued as one batch, writes
// it, and comes back for more. `scheduled_` is true while the connection is sure to
// call next_batch() again on its own (a batch is being written, or a kick is posted);
// a producer that appends while it is false posts one kick. Bytes queued plus bytes in
// flight never exceed `limit_`: past it, write() closes the stream (a client that does
// not read is cut off, memory stays bounded) and write_wait() blocks for room.
//
// Lock order: the channel's mutex is a leaf; nothing calls into the connection or runs
// a callback while holding it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cela::api::detail {

class Connection;

class StreamChannel : public std::enable_shared_from_this<StreamChannel> {
 public:
  StreamChannel(std::weak_ptr<Connection> connection, std::size_t limit);

  // ---- producer side: any thread
  // Queues `bytes`. False when the stream is closed, or closes now because the queue
  // would pass the limit.
  bool write(std::string_view bytes);
  // Queues `bytes`, first waiting while the queue is full. False when closed.
  bool write_wait(std::string_view bytes);
  // No more writes; the connection ends the response once the queue is written.
  void finish();
  // No more writes; the queue is dropped and the connection closed (the client sees a
  // truncated response).
  void abort();
  bool closed() const;
  // Runs `fn` once at most `max_queued` bytes are queued or in flight (at once, on the
  // caller's thread, when that holds already; else on an io thread after a write
  // completes). Dropped, never run, when the stream closes first. `fn` must not block.
  void on_drained(std::size_t max_queued, std::function<void()> fn);
  // Runs `fn` once when the response has ended for any reason (client gone, limit,
  // finish, abort). Runs at once, on the caller's thread, when already ended;
  // otherwise on an io thread. It must not block.
  void on_close(std::function<void()> fn);
  // Runs `fn` on the connection's strand after `delay`, unless the response has ended
  // by then (ChunkedWriter::after).
  void after(std::chrono::milliseconds delay, std::function<void()> fn);
  bool ended() const;

  // ---- connection side: its strand
  struct Batch {
    std::string data;
    bool end = false;  // finish() was called and the queue is drained
  };
  // What to write next; nullopt when nothing is queued (the next write() kicks).
  std::optional<Batch> next_batch();
  // The batch returned last has been written.
  void batch_written();
  // The response is over (ended, failed, or the connection is gone). Returns the
  // on_close callbacks to run, once; later calls return none.
  std::vector<std::function<void()>> end();

 private:
  // Posts a kick or an abort to the connection, or ends the channel when the
  // connection no longer exists.
  void kick_connection();
  void abort_connection();
  static void run(std::vector<std::function<void()>> callbacks);

  const std::weak_ptr<Connection> connection_;
  const std::size_t limit_;

  mutable std::mutex mu_;
  std::condition_variable room_;
  std::string queued_;
  std::size_t in_flight_ = 0;
  bool closed_ = false;     // producer writes refused
  bool finishing_ = false;  // finish(): end after the queue
  bool ended_ = false;      // end() ran
  bool scheduled_ = true;   // the connection will call next_batch() (starts with the header write)
  std::vector<std::function<void()>> on_close_;
  std::vector<std::pair<std::size_t, std::function<void()>>> on_drained_;
};

}  // namespace cela::api::detail
