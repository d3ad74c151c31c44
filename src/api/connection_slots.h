// ConnectionSlots: who may hold how many of the server's connections and in-flight
// requests, so that one client cannot lock the others out (SECURITY.md "API":
// connection slots are fair per peer and per key; local root always has room).
//
//   - Every open connection holds one of `total` slots from accept to close. The last
//     `root_reserve` of them are only for local root (uid 0 on the unix socket).
//   - A peer holds at most `per_peer` connections: a TCP client is its remote address
//     (an IPv6 client its /64, the block one host usually gets), a unix-socket client its
//     uid (SO_PEERCRED). Local root is not limited per peer: it is the operator, bounded
//     by `total`, and its reserve must stay reachable however many connections it has.
//   - A key is known only once a request's header is authenticated, so the per-key
//     limit counts requests in flight, not connections: from authentication until the
//     answer is written, or for a stream (SSE, chunked download) until it ends; a
//     request waiting for sandbox code (/run, ?wait_s=) is in flight. An idle keep-alive
//     connection holds no key slot. Requests without a key (local root) are not counted.
//
// plan_connection_budget() derives the defaults from the process's file descriptor
// limit, keeping a reserve of descriptors for the daemon's own work (store, sessions'
// pipes and output files) that connections can never take.
//
// Thread-safe: every io thread admits and releases through one mutex.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <expected>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cela::api {

struct SlotLimits {
  std::size_t total = 1024;       // open connections, every transport
  std::size_t root_reserve = 16;  // of total: only local root on the unix socket
  std::size_t per_peer = 256;     // open connections per peer address or unix uid
  std::size_t per_key = 256;      // requests in flight per API key, streams included
};

// Over-limit connections answered and lingering at once (each holds its socket for up
// to two seconds); past this they are answered with a single non-blocking write and
// closed. Counted in the descriptor budget below.
inline constexpr std::size_t kMaxRejecting = 64;

// Who a connection comes from, as the per-peer limit counts it.
struct SlotPeer {
  std::string address;      // "127.0.0.1", "2001:db8:1:2::/64", "uid 1000"
  bool local_root = false;  // uid 0 on the unix socket
};
// The per-peer identity of a TCP peer: its IPv4 address (an IPv4-mapped IPv6 address
// counts as the IPv4 one), or the /64 of an IPv6 address.
SlotPeer tcp_slot_peer(const sockaddr_storage& address);
SlotPeer unix_slot_peer(uid_t uid);

enum class SlotRefusal {
  total,  // every slot open to this peer is taken: 503 capacity_exceeded
  peer,   // this peer holds per_peer connections: 429 rate_limited
  key,    // this key has per_key requests in flight: 429 rate_limited
};

class ConnectionSlots {
 public:
  // A held slot, given back on destruction (or reset()). Movable; must not outlive the
  // ConnectionSlots that granted it.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { reset(); }
    void reset();
    bool held() const { return owner_ != nullptr; }

   private:
    friend class ConnectionSlots;
    enum class Kind { connection, request };
    Lease(ConnectionSlots* owner, Kind kind, std::string key)
        : owner_(owner), kind_(kind), key_(std::move(key)) {}
    ConnectionSlots* owner_ = nullptr;
    Kind kind_ = Kind::connection;
    std::string key_;  // the peer address or the key id it counts against ("" = none)
  };

  explicit ConnectionSlots(SlotLimits limits) : limits_(limits) {}
  ConnectionSlots(const ConnectionSlots&) = delete;
  ConnectionSlots& operator=(const ConnectionSlots&) = delete;

  std::expected<Lease, SlotRefusal> open_connection(const SlotPeer& peer);
  // `key_id` "" (a caller without a key) is always granted and not counted.
  std::expected<Lease, SlotRefusal> begin_request(std::string_view key_id);

  const SlotLimits& limits() const { return limits_; }
  std::size_t open_connections() const;
  std::size_t connections_of(std::string_view peer_address) const;
  std::size_t requests_of(std::string_view key_id) const;

 private:
  void release(Lease& lease);

  const SlotLimits limits_;
  mutable std::mutex mu_;
  std::size_t open_ = 0;
  std::unordered_map<std::string, std::size_t> per_peer_;
  std::unordered_map<std::string, std::size_t> per_key_;
};

// ---- the descriptor budget

// What the operator configured; 0 = derive.
struct ConnectionBudgetRequest {
  std::size_t total = 0;
  std::size_t root_reserve = 0;
  std::size_t per_peer = 0;
  std::size_t per_key = 0;
  std::uint64_t reserve_fds = 0;
  std::uint64_t sessions = 0;  // the most sessions the daemon runs at once
};

struct ConnectionBudget {
  SlotLimits limits;
  std::uint64_t fd_limit = 0;     // the descriptors the process may hold
  std::uint64_t reserve_fds = 0;  // kept for the daemon's own work
  // One line each where a configured value did not fit and was lowered.
  std::vector<std::string> warnings;
};

// Descriptors the server itself holds besides connections: listeners, their spare
// descriptors, the io_context's epoll and eventfds, the log, the store's database.
inline constexpr std::uint64_t kServerBaseFds = 32;
// Each connection is counted as two descriptors: its socket and a file it may stream
// (a download, an exec's output followed over SSE).
inline constexpr std::uint64_t kFdsPerConnection = 2;
// What the daemon holds per session: its init's control socket, pidfd and cgroup
// descriptors (about 7 when idle), and per running exec its pipes and output files.
inline constexpr std::uint64_t kFdsPerSession = 32;

// Defaults, for a process that may hold `fd_limit` descriptors:
//   reserve_fds   max(256, fd_limit / 4, kFdsPerSession * sessions), at most fd_limit / 2
//   total         (fd_limit - reserve_fds - kServerBaseFds - kMaxRejecting) / 2, at most 16384
//   root_reserve  total / 32, within 4..64
//   per_peer      total / 8, at least 8
//   per_key       total / 8, at least 8
// A configured total that does not fit the descriptors left after reserve_fds is lowered
// to what fits (with a warning); root_reserve stays below total, per_peer and per_key at
// most total. total is at least 8 whatever the limit.
ConnectionBudget plan_connection_budget(std::uint64_t fd_limit,
                                        const ConnectionBudgetRequest& request);

}  // namespace cela::api
