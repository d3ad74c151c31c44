// EgressProxy (egress_proxy.h): doors, the HTTP/CONNECT/SOCKS5 front, policy,
// resolution on the host, dialling, relaying, pacing and records. Written as Asio
// coroutines on the proxy's one I/O thread.
#include "net/egress_proxy.h"

#include <ifaddrs.h>
#include <netinet/in.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "common/token_bucket.h"
#include "net/internal_service.h"
#include "net/tls_hello.h"

namespace cela::net {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using asio::awaitable;
using Clock = std::chrono::steady_clock;
using namespace asio::experimental::awaitable_operators;

namespace {

constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);
constexpr size_t kChunk = 16 * 1024;
constexpr size_t kHeaderLimit = 64 * 1024;
constexpr uint64_t kServiceBodyLimit = 64ull << 20;
constexpr auto kServiceTimeout = std::chrono::minutes(10);
constexpr auto kLimitEventEvery = std::chrono::seconds(10);
constexpr auto kSweepEvery = std::chrono::seconds(2);

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// host[:port] or [v6][:port]; `fallback` when no port is given.
std::optional<std::pair<std::string, uint16_t>> split_host_port(std::string_view text, uint16_t fallback) {
  std::string_view host = text, port;
  if (text.starts_with('[')) {
    auto close = text.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = text.substr(1, close - 1);
    auto rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return std::nullopt;
      port = rest.substr(1);
    }
  } else if (auto colon = text.rfind(':'); colon != std::string_view::npos) {
    if (text.find(':') != colon) return std::nullopt;  // a bare IPv6 literal needs brackets
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (host.empty()) return std::nullopt;
  uint16_t p = fallback;
  if (!port.empty()) {
    unsigned v = 0;
    auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
    if (ec != std::errc{} || ptr != port.data() + port.size() || v == 0 || v > 65535) return std::nullopt;
    p = static_cast<uint16_t>(v);
  }
  return std::make_pair(normalise_host(host), p);
}

struct Door;

// One client connection through a door, and its upstream once dialled.
struct Link {
  Link(tcp::socket c, Door& d) : client(std::move(c)), upstream(client.get_executor()), door(d) {}
  tcp::socket client;
  tcp::socket upstream;
  Door& door;  // the door outlives its links (it waits for them)
  Clock::time_point last_io = Clock::now();
  asio::steady_timer* waiting = nullptr;  // a service reply being waited for
  void touch() { last_io = Clock::now(); }
  void close() {
    boost::system::error_code ignore;
    client.close(ignore);
    upstream.close(ignore);
    if (waiting) waiting->cancel();
  }
};

struct Door {
  Door(asio::io_context& io, std::string s, std::string t, const EgressConfig& c)
      : session_id(std::move(s)), tenant_id(std::move(t)), acceptor(io), records(c.records_per_second, c.record_burst) {}
  std::string session_id, tenant_id;
  tcp::acceptor acceptor;
  std::shared_ptr<const EgressPolicy> policy;
  std::set<Link*> links;
  bool closed = false;
  // Pacing (egress.bandwidth_kbps): bytes are sent no earlier than `next_free`.
  Clock::time_point next_free{};
  Clock::time_point last_bandwidth_event{}, last_connection_event{};
  // Recording (EgressConfig::records_per_second): attempts past the bucket are counted
  // in `unrecorded` until they are summarised.
  TokenBucket records;
  UnrecordedAttempts unrecorded;
  Clock::time_point unrecorded_since{};
};

}  // namespace

struct EgressProxy::Impl {
  EgressConfig config;
  AddressPolicy addresses;
  EgressObserver* observer = nullptr;
  std::map<std::string, std::vector<IpAddress>> hosts;
  std::vector<std::shared_ptr<InternalService>> services;  // written before doors open

  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> io_work;
  std::thread io_thread;
  asio::io_context records;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> records_work;
  std::thread records_thread;
  std::map<std::string, std::shared_ptr<Door>> doors;  // I/O thread only
  std::unique_ptr<asio::steady_timer> sweep;
  bool stopped = false;       // I/O thread
  bool stopped_once = false;  // stop()'s caller

  double bytes_per_second() const { return static_cast<double>(config.bandwidth_kbps) * 1000.0 / 8.0; }

  // I/O thread. An attempt of a closed door (its links finishing) is recorded as is:
  // there are at most max_connections of those.
  void record(EgressAttempt a) {
    if (!observer) return;
    auto it = doors.find(a.session_id);
    if (it != doors.end()) {
      Door& door = *it->second;
      auto now = Clock::now();
      if (!door.records.take(now)) {
        count_unrecorded(door, a, now);
        return;
      }
      flush_unrecorded(door);
    }
    asio::post(records, [this, a = std::move(a)] { observer->on_attempt(a); });
  }
  void count_unrecorded(Door& door, const EgressAttempt& a, Clock::time_point now) {
    UnrecordedAttempts& u = door.unrecorded;
    if (u.total() == 0) {
      u.first_ms = a.at_ms;
      door.unrecorded_since = now;
    }
    ++(a.allowed ? u.allowed : u.denied);
    u.bytes_up += a.bytes_up;
    u.bytes_down += a.bytes_down;
    u.last_ms = a.at_ms;
    if (now - door.unrecorded_since >= kUnrecordedSummaryEvery) flush_unrecorded(door);
  }
  void flush_unrecorded(Door& door) {
    if (door.unrecorded.total() == 0) return;
    asio::post(records, [this, s = door.session_id, t = door.tenant_id, u = std::exchange(door.unrecorded, {})] {
      observer->on_unrecorded(s, t, u);
    });
  }
  void limit(Door& door, Clock::time_point& last, std::string kind, std::string detail) {
    auto now = Clock::now();
    if (last != Clock::time_point{} && now - last < kLimitEventEvery) return;
    last = now;
    if (!observer) return;
    asio::post(records, [this, s = door.session_id, kind = std::move(kind), detail = std::move(detail)] {
      observer->on_limit(s, kind, detail);
    });
  }

  std::shared_ptr<InternalService> service_for(const std::string& host) const {
    for (const auto& s : services)
      if (lower(s->host()) == host) return s;
    return nullptr;
  }

  void arm_sweep() {
    sweep->expires_after(kSweepEvery);
    sweep->async_wait([this](boost::system::error_code ec) {
      if (ec || stopped) return;
      auto idle = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config.idle_timeout_s));
      auto now = Clock::now();
      for (auto& [id, door] : doors)
        for (Link* l : door->links)
          if (now - l->last_io > idle && !l->waiting) l->close();
      arm_sweep();
    });
  }

  // Waits as long as the session's bandwidth cap asks before `n` more bytes go out.
  awaitable<void> pace(Door& door, size_t n) {
    double rate = bytes_per_second();
    if (rate <= 0 || n == 0) co_return;
    auto now = Clock::now();
    if (door.next_free < now) door.next_free = now;
    auto wait = door.next_free - now;
    door.next_free += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(n / rate));
    if (wait <= Clock::duration::zero()) co_return;
    if (wait > std::chrono::milliseconds(100))
      limit(door, door.last_bandwidth_event, "egress_bandwidth",
            "bandwidth cap of " + std::to_string(config.bandwidth_kbps) + " kbit/s reached; traffic paced");
    asio::steady_timer timer(io);
    timer.expires_after(wait);
    co_await timer.async_wait(nothrow);
  }
  size_t chunk_size() const {
    double rate = bytes_per_second();
    if (rate <= 0) return kChunk;
    return std::clamp<size_t>(static_cast<size_t>(rate / 10), 512, kChunk);
  }

  // ---- answers ----
  awaitable<void> answer(tcp::socket& s, http::status status, std::string line) {
    http::response<http::string_body> res{status, 11};
    res.set(http::field::server, "cela-egress");
    res.set(http::field::content_type, "text/plain; charset=utf-8");
    res.keep_alive(false);
    res.body() = std::move(line) + "\n";
    res.prepare_payload();
    co_await http::async_write(s, res, nothrow);
  }

  // ---- deciding and dialling ----
  struct Decision {
    Verdict verdict;
    std::vector<tcp::endpoint> endpoints;
    std::string ip;  // the refused address, when an address decided
    std::string failure;  // not a policy refusal: the name does not resolve
  };

  awaitable<Decision> decide(Door& door, const std::string& host, uint16_t port) {
    Decision d;
    auto policy = door.policy;
    d.verdict = decide_host(*policy, host, port);
    if (!d.verdict.allowed) co_return d;
    std::vector<IpAddress> found;
    if (auto literal = ip_literal(host)) {
      found.push_back(*literal);
    } else if (auto it = hosts.find(host); it != hosts.end()) {
      found = it->second;
    } else {
      tcp::resolver resolver(io);
      auto [ec, results] = co_await resolver.async_resolve(host, std::to_string(port), nothrow);
      if (ec) {
        d.failure = "cela: " + host + ":" + std::to_string(port) + " does not resolve (" + ec.message() + ")";
        co_return d;
      }
      for (const auto& r : results) found.push_back(r.endpoint().address());
    }
    if (found.empty()) {
      d.failure = "cela: " + host + ":" + std::to_string(port) + " does not resolve";
      co_return d;
    }
    // Every address must pass: a name that also points inside is refused whole (a
    // rebinding name gets no chance to be dialled at its inside address).
    Verdict passed = d.verdict;
    for (const auto& a : found) {
      Verdict v = decide_address(*policy, addresses, d.verdict, a, port);
      if (!v.allowed) {
        d.verdict = v;
        d.ip = a.to_string();
        co_return d;
      }
      passed = v;
      d.endpoints.emplace_back(a, port);
    }
    d.verdict = passed;
    co_return d;
  }

  // Connects to one of the checked endpoints; the address connected is checked again.
  awaitable<std::string> dial(Link& link, Decision& d) {
    boost::system::error_code last;
    for (const auto& ep : d.endpoints) {
      boost::system::error_code ignore;
      link.upstream.close(ignore);
      asio::steady_timer timer(io);
      timer.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config.connect_timeout_s)));
      auto result = co_await (link.upstream.async_connect(ep, nothrow) || timer.async_wait(nothrow));
      if (result.index() == 1) {
        last = asio::error::timed_out;
        continue;
      }
      auto [ec] = std::get<0>(result);
      if (ec) {
        last = ec;
        continue;
      }
      auto peer = link.upstream.remote_endpoint(ec);
      if (ec) {
        last = ec;
        continue;
      }
      Verdict v = decide_address(*link.door.policy, addresses, d.verdict, peer.address(), peer.port());
      if (!v.allowed || std::ranges::find(d.endpoints, peer) == d.endpoints.end()) {
        link.upstream.close(ignore);
        d.verdict = v;
        d.verdict.allowed = false;
        d.ip = peer.address().to_string();
        co_return "";
      }
      link.upstream.set_option(tcp::no_delay(true), ec);
      d.ip = peer.address().to_string();
      co_return "";
    }
    co_return "could not connect (" + (last ? last.message() : std::string("no address")) + ")";
  }

  // ---- relaying ----
  awaitable<void> pump(Link& link, tcp::socket& from, tcp::socket& to, uint64_t& count) {
    std::vector<char> data(chunk_size());
    for (;;) {
      auto [ec, n] = co_await from.async_read_some(asio::buffer(data), nothrow);
      if (ec) {
        boost::system::error_code ignore;
        to.shutdown(tcp::socket::shutdown_send, ignore);
        co_return;
      }
      link.touch();
      co_await pace(link.door, n);
      auto [wec, m] = co_await asio::async_write(to, asio::buffer(data.data(), n), nothrow);
      if (wec) {
        boost::system::error_code ignore;
        from.shutdown(tcp::socket::shutdown_receive, ignore);
        co_return;
      }
      count += m;
      link.touch();
    }
  }

  // Host names compare without case and without a final dot.
  static bool same_host(std::string_view x, std::string_view y) {
    if (x.ends_with('.')) x.remove_suffix(1);
    if (y.ends_with('.')) y.remove_suffix(1);
    return beast::iequals(x, y);
  }

  // A TLS client in a tunnel must ask for the host the tunnel was opened to: its
  // ClientHello's server name is read before any byte goes upstream. A mismatch (or a
  // hello that does not parse) is a refusal; another protocol, or TLS without a name
  // (an IP literal), passes. Reads into `buffered`; the idle timeout bounds the wait.
  awaitable<std::optional<Verdict>> check_server_name(Link& link, beast::flat_buffer& buffered, const EgressAttempt& a) {
    using State = ClientHelloScan::State;
    for (;;) {
      auto seen = buffered.cdata();
      auto scan = scan_client_hello(std::string_view(static_cast<const char*>(seen.data()), seen.size()));
      if (scan.state == State::not_tls) co_return std::nullopt;
      if (scan.state == State::malformed)
        co_return Verdict{false, "tls server name", "the TLS ClientHello does not parse"};
      if (scan.state == State::done) {
        if (!scan.server_name || same_host(*scan.server_name, a.host)) co_return std::nullopt;
        co_return Verdict{false, "tls server name",
                          "the TLS server name " + *scan.server_name + " is not the CONNECT host " + a.host};
      }
      auto [ec, n] = co_await link.client.async_read_some(buffered.prepare(4096), nothrow);
      if (ec) co_return Verdict{false, "tls server name", "the client left before its ClientHello was complete"};
      buffered.commit(n);
      link.touch();
    }
  }

  awaitable<void> tunnel(Link& link, beast::flat_buffer& buffered, EgressAttempt& a, Verdict& verdict) {
    if (auto refused = co_await check_server_name(link, buffered, a)) {
      verdict = std::move(*refused);
      co_return;
    }
    // What the client sent after its request (a TLS hello, often) goes first.
    if (buffered.size()) {
      auto [ec, n] = co_await asio::async_write(link.upstream, buffered.data(), nothrow);
      if (ec) co_return;
      a.bytes_up += n;
      buffered.consume(buffered.size());
    }
    co_await (pump(link, link.client, link.upstream, a.bytes_up) &&
              pump(link, link.upstream, link.client, a.bytes_down));
  }

  // One HTTP message from `from` to `to`, streamed (the Beast relay pattern).
  template <bool isRequest>
  awaitable<boost::system::error_code> relay(Link& link, tcp::socket& from, beast::flat_buffer& buf,
                                             http::parser<isRequest, http::buffer_body>& p, tcp::socket& to,
                                             uint64_t& count_in) {
    std::vector<char> data(chunk_size());
    auto& m = p.get();
    m.body().data = nullptr;
    m.body().size = 0;
    m.body().more = !p.is_done();
    http::serializer<isRequest, http::buffer_body> sr{m};
    {
      auto [ec, n] = co_await http::async_write_header(to, sr, nothrow);
      if (ec) co_return ec;
    }
    while (!p.is_done() || !sr.is_done()) {
      if (!p.is_done()) {
        m.body().data = data.data();
        m.body().size = data.size();
        auto [ec, n] = co_await http::async_read(from, buf, p, nothrow);
        if (ec == http::error::need_buffer) ec = {};
        if (ec) co_return ec;
        count_in += n;
        link.touch();
        m.body().size = data.size() - m.body().size;
        m.body().data = data.data();
        m.body().more = !p.is_done();
      } else {
        m.body().data = nullptr;
        m.body().size = 0;
        m.body().more = false;
      }
      co_await pace(link.door, m.body().size);
      auto [ec, n] = co_await http::async_write(to, sr, nothrow);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) co_return ec;
      link.touch();
      if (sr.is_done()) break;
    }
    co_return boost::system::error_code{};
  }

  // ---- the front ----
  EgressAttempt attempt(const Door& door, std::string kind, std::string host, uint16_t port) {
    EgressAttempt a;
    a.session_id = door.session_id;
    a.tenant_id = door.tenant_id;
    a.at_ms = now_ms();
    a.kind = std::move(kind);
    a.host = std::move(host);
    a.port = port;
    return a;
  }
  void finish(EgressAttempt& a, const Verdict& v, Clock::time_point began) {
    a.allowed = v.allowed;
    a.rule = v.rule;
    a.reason = v.reason;
    a.duration_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - began).count();
    record(a);
  }

  // Decides and dials for a CONNECT or SOCKS request; refusals are answered by `refuse`.
  awaitable<bool> open_upstream(Link& link, EgressAttempt& a, Decision& d) {
    d = co_await decide(link.door, a.host, a.port);
    a.ip = d.ip;
    if (!d.verdict.allowed || !d.failure.empty()) co_return false;
    if (std::string why = co_await dial(link, d); !why.empty())
      d.failure = "cela: " + a.host + ":" + std::to_string(a.port) + " " + why;
    a.ip = d.ip;
    co_return d.verdict.allowed && d.failure.empty();
  }

  awaitable<void> serve_connect(Link& link, beast::flat_buffer& buf, std::string_view target) {
    auto began = Clock::now();
    auto hp = split_host_port(target, 443);
    if (!hp) {
      co_await answer(link.client, http::status::bad_request, "cela: CONNECT needs host:port");
      co_return;
    }
    EgressAttempt a = attempt(link.door, "connect", hp->first, hp->second);
    if (service_for(hp->first)) {
      Verdict v{false, "internal service", "plain HTTP only (no CONNECT)"};
      co_await answer(link.client, http::status::bad_request, refusal_line(a.host, a.port, v));
      finish(a, v, began);
      co_return;
    }
    Decision d;
    if (!co_await open_upstream(link, a, d)) {
      if (!d.failure.empty()) {
        // Allowed by policy, but the upstream is not there: recorded as allowed, with why.
        co_await answer(link.client, http::status::bad_gateway, d.failure);
        d.verdict.reason = d.failure;
      } else {
        co_await answer(link.client, http::status::forbidden, refusal_line(a.host, a.port, d.verdict));
      }
      finish(a, d.verdict, began);
      co_return;
    }
    static constexpr std::string_view kEstablished = "HTTP/1.1 200 Connection established\r\n\r\n";
    auto [ec, n] = co_await asio::async_write(link.client, asio::buffer(kEstablished), nothrow);
    if (!ec) co_await tunnel(link, buf, a, d.verdict);
    finish(a, d.verdict, began);
  }

  awaitable<bool> serve_service(Link& link, beast::flat_buffer& buf, http::request_parser<http::empty_body>& hp,
                                const std::shared_ptr<InternalService>& service, std::string origin, uint16_t port) {
    auto began = Clock::now();
    EgressAttempt a = attempt(link.door, "service", lower(service->host()), port);
    http::request_parser<http::string_body> sp{std::move(hp)};
    sp.body_limit(kServiceBodyLimit);
    auto [ec, n] = co_await http::async_read(link.client, buf, sp, nothrow);
    if (ec) co_return false;
    a.bytes_up += n;
    HttpRequest request = sp.release();
    request.target(origin);
    bool keep_alive = request.keep_alive();
    struct Waiting {
      explicit Waiting(asio::io_context& io) : timer(io) {}
      asio::steady_timer timer;
      std::optional<http::message_generator> reply;
    };
    auto waiting = std::make_shared<Waiting>(io);
    waiting->timer.expires_after(kServiceTimeout);
    auto ex = io.get_executor();
    service->handle(DoorPeer{link.door.session_id, link.door.tenant_id}, std::move(request),
                    [waiting, ex](http::message_generator reply) {
                      auto held = std::make_shared<http::message_generator>(std::move(reply));
                      asio::post(ex, [waiting, held] {
                        if (waiting->reply) return;  // called twice: the first answer stands
                        waiting->reply.emplace(std::move(*held));
                        waiting->timer.cancel();
                      });
                    });
    link.waiting = &waiting->timer;
    co_await waiting->timer.async_wait(nothrow);
    link.waiting = nullptr;
    Verdict v{true, "internal service " + a.host, ""};
    if (!waiting->reply) {
      if (link.client.is_open())
        co_await answer(link.client, http::status::gateway_timeout, "cela: internal service " + a.host + " did not answer");
      v.reason = "no answer";
      finish(a, v, began);
      co_return false;
    }
    keep_alive = keep_alive && waiting->reply->keep_alive();
    auto [wec, wn] = co_await beast::async_write(link.client, std::move(*waiting->reply), nothrow);
    a.bytes_down += wn;
    link.touch();
    finish(a, v, began);
    co_return !wec && keep_alive;
  }

  // One plain-HTTP request; true when the connection may carry another.
  awaitable<bool> serve_http(Link& link, beast::flat_buffer& buf, http::request_parser<http::empty_body>& hp,
                             uint64_t header_bytes) {
    auto began = Clock::now();
    auto& req = hp.get();
    std::string_view target(req.target().data(), req.target().size());
    std::string authority, origin;
    if (lower(target.substr(0, 7)) == "http://") {
      auto rest = target.substr(7);
      auto slash = rest.find_first_of("/?");
      authority = std::string(rest.substr(0, slash));
      origin = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
      if (origin.front() == '?') origin = "/" + origin;
      if (auto at = authority.rfind('@'); at != std::string::npos) authority = authority.substr(at + 1);
    } else if (target.starts_with('/')) {
      authority = std::string(req[http::field::host]);
      origin = std::string(target);
    } else {
      std::string line = lower(target.substr(0, 8)) == "https://"
                             ? "cela: https:// through this proxy needs CONNECT (set HTTPS_PROXY)"
                             : "cela: the request target must be an absolute http:// URL";
      co_await answer(link.client, http::status::bad_request, line);
      co_return false;
    }
    auto hpair = split_host_port(authority, 80);
    if (!hpair) {
      co_await answer(link.client, http::status::bad_request, "cela: bad host in request target");
      co_return false;
    }
    auto [host, port] = *hpair;
    if (auto service = service_for(host)) co_return co_await serve_service(link, buf, hp, service, origin, port);

    EgressAttempt a = attempt(link.door, "http", host, port);
    Decision d;
    if (!co_await open_upstream(link, a, d)) {
      if (!d.failure.empty()) {
        co_await answer(link.client, http::status::bad_gateway, d.failure);
        d.verdict.reason = d.failure;
        finish(a, d.verdict, began);
      } else {
        co_await answer(link.client, http::status::forbidden, refusal_line(host, port, d.verdict));
        finish(a, d.verdict, began);
      }
      co_return false;
    }
    a.bytes_up += header_bytes;  // counted once forwarded, as the body is
    http::request_parser<http::buffer_body> bp{std::move(hp)};
    bp.body_limit(boost::none);
    auto& m = bp.get();
    bool client_keep_alive = m.keep_alive();
    bool head = m.method() == http::verb::head;
    bool expect_continue = beast::iequals(m[http::field::expect], "100-continue");
    m.target(origin);
    m.erase(http::field::proxy_authorization);
    m.erase("Proxy-Connection");
    m.erase(http::field::expect);
    m.keep_alive(false);  // one request per upstream connection
    if (expect_continue) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      co_await asio::async_write(link.client, asio::buffer(kContinue), nothrow);
    }
    bool again = false;
    if (auto ec = co_await relay<true>(link, link.client, buf, bp, link.upstream, a.bytes_up); !ec) {
      beast::flat_buffer ubuf;
      http::response_parser<http::buffer_body> rp;
      rp.body_limit(boost::none);
      rp.header_limit(kHeaderLimit);
      if (head) rp.skip(true);
      auto [rec, rn] = co_await http::async_read_header(link.upstream, ubuf, rp, nothrow);
      if (!rec) {
        a.bytes_down += rn;
        again = client_keep_alive && !rp.need_eof();
        rp.get().keep_alive(again);
        auto e = co_await relay<false>(link, link.upstream, ubuf, rp, link.client, a.bytes_down);
        again = again && !e;
      } else {
        co_await answer(link.client, http::status::bad_gateway, "cela: no HTTP answer from " + host);
      }
    }
    boost::system::error_code ignore;
    link.upstream.close(ignore);
    finish(a, d.verdict, began);
    co_return again;
  }

  // SOCKS5 (RFC 1928), no authentication, CONNECT only; names resolved here.
  awaitable<void> serve_socks(Link& link, beast::flat_buffer& buf) {
    auto began = Clock::now();
    auto need = [&](size_t n) -> awaitable<bool> {
      while (buf.size() < n) {
        auto [ec, got] = co_await link.client.async_read_some(buf.prepare(512), nothrow);
        if (ec) co_return false;
        buf.commit(got);
      }
      co_return true;
    };
    auto bytes = [&] { return static_cast<const uint8_t*>(buf.data().data()); };
    if (!co_await need(2)) co_return;
    size_t methods = bytes()[1];
    if (!co_await need(2 + methods)) co_return;
    bool no_auth = false;
    for (size_t i = 0; i < methods; ++i) no_auth |= bytes()[2 + i] == 0;
    buf.consume(2 + methods);
    uint8_t choice[2] = {5, static_cast<uint8_t>(no_auth ? 0 : 0xff)};
    if (auto [ec, n] = co_await asio::async_write(link.client, asio::buffer(choice), nothrow); ec || !no_auth) co_return;
    if (!co_await need(5)) co_return;
    uint8_t cmd = bytes()[1], atyp = bytes()[3];
    size_t addr_len = atyp == 1 ? 4 : atyp == 4 ? 16 : atyp == 3 ? 1 + bytes()[4] : 0;
    auto reply = [&](uint8_t code) -> awaitable<void> {
      uint8_t r[10] = {5, code, 0, 1, 0, 0, 0, 0, 0, 0};
      co_await asio::async_write(link.client, asio::buffer(r), nothrow);
    };
    if (addr_len == 0) co_return co_await reply(8);  // address type not supported
    if (!co_await need(4 + addr_len + 2)) co_return;
    const uint8_t* p = bytes() + 4;
    std::string host;
    if (atyp == 1) {
      host = asio::ip::address_v4({p[0], p[1], p[2], p[3]}).to_string();
    } else if (atyp == 4) {
      asio::ip::address_v6::bytes_type b;
      std::copy(p, p + 16, b.begin());
      host = asio::ip::address_v6(b).to_string();
    } else {
      host = normalise_host(std::string_view(reinterpret_cast<const char*>(p + 1), p[0]));
    }
    uint16_t port = static_cast<uint16_t>((p[addr_len] << 8) | p[addr_len + 1]);
    buf.consume(4 + addr_len + 2);
    if (cmd != 1) co_return co_await reply(7);  // command not supported (no BIND, no UDP)
    EgressAttempt a = attempt(link.door, "socks", host, port);
    Decision d;
    if (service_for(host)) {
      d.verdict = {false, "internal service", "plain HTTP only (no SOCKS)"};
    } else if (co_await open_upstream(link, a, d)) {
      co_await reply(0);
      co_await tunnel(link, buf, a, d.verdict);
      finish(a, d.verdict, began);
      co_return;
    }
    Verdict v = d.verdict;
    if (!d.failure.empty()) v.reason = d.failure;
    co_await reply(d.failure.empty() ? 2 : 4);  // not allowed by ruleset / host unreachable
    finish(a, v, began);
  }

  awaitable<void> serve(std::shared_ptr<Door> door, std::shared_ptr<Link> link) {
    door->links.insert(link.get());
    struct Leave {
      Door& d;
      Link* l;
      ~Leave() { d.links.erase(l); }
    } leave{*door, link.get()};
    beast::flat_buffer buf;
    auto [ec, n] = co_await link->client.async_read_some(buf.prepare(kChunk), nothrow);
    if (ec) co_return;
    buf.commit(n);
    link->touch();
    if (config.max_connections && door->links.size() > config.max_connections) {
      std::string detail = "connection cap of " + std::to_string(config.max_connections) + " per session reached";
      limit(*door, door->last_connection_event, "egress_connections", detail);
      EgressAttempt a = attempt(*door, "connect", "", 0);
      Verdict v{false, "connection cap", detail};
      co_await answer(link->client, http::status::too_many_requests, "cela: " + detail);
      finish(a, v, Clock::now());
      co_return;
    }
    if (static_cast<const uint8_t*>(buf.data().data())[0] == 5) co_return co_await serve_socks(*link, buf);
    for (;;) {
      http::request_parser<http::empty_body> hp;
      hp.header_limit(kHeaderLimit);
      hp.body_limit(boost::none);
      auto [hec, hn] = co_await http::async_read_header(link->client, buf, hp, nothrow);
      if (hec) {
        if (hec != http::error::end_of_stream && hec != asio::error::operation_aborted && link->client.is_open())
          co_await answer(link->client, http::status::bad_request, "cela: malformed request (" + hec.message() + ")");
        co_return;
      }
      link->touch();
      if (hp.get().method() == http::verb::connect) {
        auto t = hp.get().target();
        co_return co_await serve_connect(*link, buf, std::string_view(t.data(), t.size()));
      }
      if (!co_await serve_http(*link, buf, hp, hn)) co_return;
    }
  }

  awaitable<void> accept_loop(std::shared_ptr<Door> door) {
    for (;;) {
      auto [ec, sock] = co_await door->acceptor.async_accept(nothrow);
      if (door->closed || stopped) co_return;
      if (ec) {
        if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) co_return;
        // Out of descriptors and the like: back off instead of spinning.
        asio::steady_timer t(io);
        t.expires_after(std::chrono::milliseconds(100));
        co_await t.async_wait(nothrow);
        continue;
      }
      auto link = std::make_shared<Link>(std::move(sock), *door);
      asio::co_spawn(io, serve(door, std::move(link)), asio::detached);
    }
  }

  void close(Door& door) {
    door.closed = true;
    if (observer) flush_unrecorded(door);
    boost::system::error_code ignore;
    door.acceptor.close(ignore);
    for (Link* l : door.links) l->close();
  }
};

EgressProxy::EgressProxy(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EgressProxy::~EgressProxy() { stop(); }

Result<std::pair<IpAddress, uint16_t>> parse_endpoint(std::string_view text) {
  auto hp = split_host_port(text, 0);
  if (!hp || hp->second == 0) return fail(ErrorCode::invalid_argument, "bad endpoint `" + std::string(text) + "`");
  auto a = ip_literal(hp->first);
  if (!a) return fail(ErrorCode::invalid_argument, "endpoint `" + std::string(text) + "` is not an address");
  return std::make_pair(*a, hp->second);
}

std::vector<IpAddress> host_addresses() {
  std::vector<IpAddress> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    if (i->ifa_addr->sa_family == AF_INET) {
      auto* sin = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
      out.push_back(asio::ip::address_v4(ntohl(sin->sin_addr.s_addr)));
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      auto* sin6 = reinterpret_cast<sockaddr_in6*>(i->ifa_addr);
      asio::ip::address_v6::bytes_type b;
      std::memcpy(b.data(), &sin6->sin6_addr, 16);
      out.push_back(asio::ip::address_v6(b));
    }
  }
  ::freeifaddrs(list);
  return out;
}

Result<std::unique_ptr<EgressProxy>> EgressProxy::start(const EgressConfig& config,
                                                        const std::vector<std::string>& own_endpoints,
                                                        EgressObserver* observer) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->observer = observer;
  for (const auto& c : config.allow_cidrs) {
    auto cidr = parse_cidr(c);
    if (!cidr) return fail(ErrorCode::invalid_argument, "egress.allow_cidrs: bad range `" + c + "`");
    impl->addresses.allowed.push_back(*cidr);
  }
  impl->addresses.own = host_addresses();
  for (const auto& e : own_endpoints) {
    auto ep = parse_endpoint(e);
    if (!ep) return std::unexpected(ep.error());
    impl->addresses.own_endpoints.push_back(*ep);
  }
  for (const auto& [name, list] : config.hosts) {
    std::vector<IpAddress> addrs;
    for (const auto& a : list) {
      auto ip = ip_literal(a);
      if (!ip) return fail(ErrorCode::invalid_argument, "egress.hosts." + name + ": `" + a + "` is not an address");
      addrs.push_back(*ip);
    }
    impl->hosts[normalise_host(name)] = std::move(addrs);
  }
  Impl* i = impl.get();
  i->sweep = std::make_unique<asio::steady_timer>(i->io);
  i->arm_sweep();
  i->io_work.emplace(asio::make_work_guard(i->io));
  i->io_thread = std::thread([i] { i->io.run(); });
  i->records_work.emplace(asio::make_work_guard(i->records));
  i->records_thread = std::thread([i] { i->records.run(); });
  return std::unique_ptr<EgressProxy>(new EgressProxy(std::move(impl)));
}

void EgressProxy::add_service(std::shared_ptr<InternalService> service) {
  std::promise<void> done;
  auto f = done.get_future();
  asio::post(impl_->io, [this, service = std::move(service), &done] {
    impl_->services.push_back(service);
    done.set_value();
  });
  f.wait();
}

Result<void> EgressProxy::open_door(const std::string& session_id, const std::string& tenant_id, UniqueFd listener,
                                    EgressPolicy policy) {
  if (!listener) return fail(ErrorCode::internal, "no egress door listener for " + session_id);
  auto door = std::make_shared<Door>(impl_->io, session_id, tenant_id, impl_->config);
  boost::system::error_code ec;
  door->acceptor.assign(tcp::v4(), listener.get(), ec);
  if (ec) return fail(ErrorCode::system, "egress door of " + session_id + ": " + ec.message());
  (void)listener.release();
  door->policy = std::make_shared<const EgressPolicy>(std::move(policy));
  asio::post(impl_->io, [i = impl_.get(), door] {
    if (i->stopped) return i->close(*door);
    if (auto old = i->doors.find(door->session_id); old != i->doors.end()) i->close(*old->second);
    i->doors[door->session_id] = door;
    asio::co_spawn(i->io, i->accept_loop(door), asio::detached);
  });
  return {};
}

void EgressProxy::set_policy(const std::string& session_id, EgressPolicy policy) {
  auto p = std::make_shared<const EgressPolicy>(std::move(policy));
  asio::post(impl_->io, [i = impl_.get(), session_id, p] {
    if (auto it = i->doors.find(session_id); it != i->doors.end()) it->second->policy = p;
  });
}

void EgressProxy::close_door(const std::string& session_id) {
  asio::post(impl_->io, [i = impl_.get(), session_id] {
    auto it = i->doors.find(session_id);
    if (it == i->doors.end()) return;
    i->close(*it->second);
    i->doors.erase(it);
  });
}

void EgressProxy::stop() {
  if (!impl_ || impl_->stopped_once) return;
  impl_->stopped_once = true;
  asio::post(impl_->io, [i = impl_.get()] {
    i->stopped = true;
    for (auto& [id, d] : i->doors) i->close(*d);
    i->doors.clear();
    i->sweep->cancel();
  });
  impl_->io_work.reset();
  // Coroutines end once their sockets are closed; a bounded wait, then the loop stops.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  impl_->io.stop();
  if (impl_->io_thread.joinable()) impl_->io_thread.join();
  impl_->records_work.reset();
  if (impl_->records_thread.joinable()) impl_->records_thread.join();
}

const AddressPolicy& EgressProxy::addresses() const { return impl_->addresses; }

}  // namespace cela::net
