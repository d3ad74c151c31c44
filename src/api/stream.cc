#include "api/stream.h"

#include <string>

#include "api/stream_channel.h"

namespace cela::api {
namespace {

// Event names and ids are single-line fields.
std::string single_line(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c == '\r' || c == '\n') c = ' ';
  }
  return out;
}

// One "data: " line per line of `data` (CRLF, CR and LF all end a line, as the SSE
// parser on the other side reads them). A trailing newline gives a last empty line, so
// that the client's reassembled data equals `data`.
void append_data_lines(std::string& frame, std::string_view data) {
  std::size_t start = 0;
  while (true) {
    std::size_t end = data.find_first_of("\r\n", start);
    frame += "data: ";
    frame.append(data.substr(start, end == std::string_view::npos ? end : end - start));
    frame += '\n';
    if (end == std::string_view::npos) return;
    start = end + 1;
    if (data[end] == '\r' && start < data.size() && data[start] == '\n') ++start;
  }
}

}  // namespace

SseStream::SseStream(std::shared_ptr<detail::StreamChannel> channel)
    : channel_(std::move(channel)) {}

SseStream::~SseStream() {
  channel_->finish();
}

bool SseStream::send(std::string_view event, std::string_view id, std::string_view data) {
  std::string frame;
  frame.reserve(data.size() + event.size() + id.size() + 32);
  if (!event.empty()) frame += "event: " + single_line(event) + "\n";
  if (!id.empty()) frame += "id: " + single_line(id) + "\n";
  append_data_lines(frame, data);
  frame += '\n';
  return channel_->write(frame);
}

bool SseStream::comment(std::string_view text) {
  if (!text.empty() && text.front() == ':') text.remove_prefix(1);
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  return channel_->write(": " + single_line(text) + "\n\n");
}

void SseStream::close() {
  channel_->finish();
}

bool SseStream::closed() const {
  return channel_->closed();
}

void SseStream::on_close(std::function<void()> fn) {
  channel_->on_close(std::move(fn));
}

void SseStream::on_drained(std::size_t max_queued, std::function<void()> fn) {
  channel_->on_drained(max_queued, std::move(fn));
}

ChunkedWriter::ChunkedWriter(std::shared_ptr<detail::StreamChannel> channel)
    : channel_(std::move(channel)) {}

ChunkedWriter::~ChunkedWriter() {
  if (!finished_) channel_->abort();
}

bool ChunkedWriter::write(std::string_view chunk) {
  if (chunk.empty()) return !channel_->closed();  // an empty chunk would end the body
  return channel_->write_wait(chunk);
}

bool ChunkedWriter::try_write(std::string_view chunk) {
  if (chunk.empty()) return !channel_->closed();
  return channel_->write(chunk);
}

void ChunkedWriter::finish() {
  finished_ = true;
  channel_->finish();
}

void ChunkedWriter::abort() {
  finished_ = true;
  channel_->abort();
}

bool ChunkedWriter::closed() const {
  return channel_->closed();
}

void ChunkedWriter::on_close(std::function<void()> fn) {
  channel_->on_close(std::move(fn));
}

void ChunkedWriter::on_drained(std::size_t max_queued, std::function<void()> fn) {
  channel_->on_drained(max_queued, std::move(fn));
}

void ChunkedWriter::after(std::chrono::milliseconds delay, std::function<void()> fn) {
  channel_->after(delay, std::move(fn));
}

}  // namespace cela::api
