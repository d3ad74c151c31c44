// BodySink: where a streamed request body goes (RouteOptions::streamed_body), so a large
// upload is never held whole in the daemon.
//
// A streamed route's handler runs once the header passed routing, authentication and
// the route's size limit, before any of the body is read (Request::body stays empty).
// It either answers (an error: the body is never read and the connection closes after
// the answer) or hands a sink to Responder::accept_body(), from any thread, later if it
// must look something up first. Only then does the connection send `100 Continue` to a
// client that asked for it, and read the body: in chunks of at most kBodyChunkBytes,
// each handed to write(), the next read starting only once the sink called `next`. A
// slow sink therefore slows the client down (TCP backpressure), and the daemon holds one
// chunk per upload at most.
//
// Every method runs on the connection's strand and must not block; `next` may be called
// from any thread. The sink answers through the responder it kept: after finish(), or
// when it gives up early (next(false) after answering), or with `why` from abort().
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cstddef>
#include <functional>
#include <string_view>

#include "api/http_error.h"

namespace cela::api {

inline constexpr std::size_t kBodyChunkBytes = 256 * 1024;

class BodySink {
 public:
  virtual ~BodySink() = default;
  // Before the first chunk: the executor (the connection's strand) the sink's own
  // asynchronous work should run on.
  virtual void begin(const boost::asio::any_io_executor& executor) = 0;
  // The next chunk, valid until `next` is called. next(true): read on; next(false): the
  // sink has answered (or will) and wants no more of the body.
  virtual void write(std::string_view chunk, std::function<void(bool more)> next) = 0;
  // The whole body was written.
  virtual void finish() = 0;
  // The body will not arrive whole: malformed (400), too slow (408), over the limit
  // (413), or the client went away (the answer then reaches no one). The sink drops
  // what it has and answers `why`.
  virtual void abort(const ApiError& why) = 0;
};

}  // namespace cela::api
