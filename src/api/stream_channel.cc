#include "api/stream_channel.h"

#include "api/connection.h"

namespace cela::api::detail {

StreamChannel::StreamChannel(std::weak_ptr<Connection> connection, std::size_t limit)
    : connection_(std::move(connection)), limit_(limit) {}

bool StreamChannel::write(std::string_view bytes) {
  bool kick = false;
  {
    std::lock_guard lock(mu_);
    if (closed_) return false;
    if (queued_.size() + in_flight_ + bytes.size() <= limit_) {
      queued_.append(bytes);
      kick = !std::exchange(scheduled_, true);
      if (!kick) return true;
    } else {
      closed_ = true;
      queued_.clear();
    }
  }
  if (kick) {
    kick_connection();
    return true;
  }
  // Over the limit: the client does not read as fast as the producer writes; cut it off.
  room_.notify_all();
  abort_connection();
  return false;
}

bool StreamChannel::write_wait(std::string_view bytes) {
  bool kick = false;
  {
    std::unique_lock lock(mu_);
    // A write larger than the whole limit goes out alone, once the queue is empty.
    room_.wait(lock, [&] {
      std::size_t used = queued_.size() + in_flight_;
      return closed_ || used == 0 || used + bytes.size() <= limit_;
    });
    if (closed_) return false;
    queued_.append(bytes);
    kick = !std::exchange(scheduled_, true);
  }
  if (kick) kick_connection();
  return true;
}

void StreamChannel::finish() {
  bool kick = false;
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    finishing_ = true;
    kick = !std::exchange(scheduled_, true);
  }
  if (kick) kick_connection();
}

void StreamChannel::abort() {
  {
    std::lock_guard lock(mu_);
    if (ended_) return;
    closed_ = true;
    finishing_ = false;
    queued_.clear();
  }
  room_.notify_all();
  abort_connection();
}

bool StreamChannel::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

void StreamChannel::on_close(std::function<void()> fn) {
  {
    std::lock_guard lock(mu_);
    if (!ended_) {
      on_close_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

void StreamChannel::after(std::chrono::milliseconds delay, std::function<void()> fn) {
  auto connection = connection_.lock();
  if (!connection) return;
  connection->schedule(delay, [weak = weak_from_this(), fn = std::move(fn)] {
    auto self = weak.lock();
    if (self && !self->ended()) fn();
  });
}

bool StreamChannel::ended() const {
  std::lock_guard lock(mu_);
  return ended_;
}

std::optional<StreamChannel::Batch> StreamChannel::next_batch() {
  std::lock_guard lock(mu_);
  if (ended_) return std::nullopt;
  if (!queued_.empty()) {
    Batch batch;
    batch.data = std::move(queued_);
    queued_.clear();
    in_flight_ = batch.data.size();
    return batch;
  }
  if (finishing_) return Batch{{}, true};
  scheduled_ = false;
  return std::nullopt;
}

void StreamChannel::on_drained(std::size_t max_queued, std::function<void()> fn) {
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    if (queued_.size() + in_flight_ > max_queued) {
      on_drained_.emplace_back(max_queued, std::move(fn));
      return;
    }
  }
  fn();
}

void StreamChannel::batch_written() {
  std::vector<std::function<void()>> ready;
  {
    std::lock_guard lock(mu_);
    in_flight_ = 0;
    std::size_t used = queued_.size();
    std::erase_if(on_drained_, [&](auto& w) {
      if (used > w.first) return false;
      ready.push_back(std::move(w.second));
      return true;
    });
  }
  room_.notify_all();
  run(std::move(ready));
}

std::vector<std::function<void()>> StreamChannel::end() {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard lock(mu_);
    if (ended_) return callbacks;
    ended_ = true;
    closed_ = true;
    queued_.clear();
    in_flight_ = 0;
    callbacks.swap(on_close_);
    on_drained_.clear();
  }
  room_.notify_all();
  return callbacks;
}

void StreamChannel::run(std::vector<std::function<void()>> callbacks) {
  for (auto& fn : callbacks) fn();
}

void StreamChannel::kick_connection() {
  if (auto connection = connection_.lock()) {
    connection->kick_stream();
  } else {
    run(end());
  }
}

void StreamChannel::abort_connection() {
  if (auto connection = connection_.lock()) {
    connection->abort_stream();
  } else {
    run(end());
  }
}

}  // namespace cela::api::detail
