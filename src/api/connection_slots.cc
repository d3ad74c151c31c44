#include "api/connection_slots.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace cela::api {

SlotPeer tcp_slot_peer(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    return {text, false};
  }
  if (address.ss_family == AF_INET6) {
    in6_addr a = reinterpret_cast<const sockaddr_in6*>(&address)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
      inet_ntop(AF_INET, &a.s6_addr[12], text, sizeof text);
      return {text, false};
    }
    std::memset(&a.s6_addr[8], 0, 8);  // the /64
    inet_ntop(AF_INET6, &a, text, sizeof text);
    return {std::string(text) + "/64", false};
  }
  return {"?", false};
}

SlotPeer unix_slot_peer(uid_t uid) {
  return {"uid " + std::to_string(uid), uid == 0};
}

// ---- leases

ConnectionSlots::Lease::Lease(Lease&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      kind_(other.kind_),
      key_(std::move(other.key_)) {}

ConnectionSlots::Lease& ConnectionSlots::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = std::exchange(other.owner_, nullptr);
    kind_ = other.kind_;
    key_ = std::move(other.key_);
  }
  return *this;
}

void ConnectionSlots::Lease::reset() {
  if (owner_) owner_->release(*this);
  owner_ = nullptr;
}

namespace {

void count_down(std::unordered_map<std::string, std::size_t>& counts, const std::string& key) {
  auto it = counts.find(key);
  if (it == counts.end()) return;
  if (--it->second == 0) counts.erase(it);
}

std::size_t count_of(const std::unordered_map<std::string, std::size_t>& counts,
                     std::string_view key) {
  auto it = counts.find(std::string(key));
  return it == counts.end() ? 0 : it->second;
}

}  // namespace

std::expected<ConnectionSlots::Lease, SlotRefusal> ConnectionSlots::open_connection(
    const SlotPeer& peer) {
  std::lock_guard lock(mu_);
  std::size_t open_to_peer = peer.local_root
                                 ? limits_.total
                                 : limits_.total - std::min(limits_.root_reserve, limits_.total);
  if (open_ >= open_to_peer) return std::unexpected(SlotRefusal::total);
  if (peer.local_root) {
    ++open_;
    return Lease(this, Lease::Kind::connection, "");
  }
  std::size_t& held = per_peer_[peer.address];
  if (held >= limits_.per_peer) {
    if (held == 0) per_peer_.erase(peer.address);
    return std::unexpected(SlotRefusal::peer);
  }
  ++held;
  ++open_;
  return Lease(this, Lease::Kind::connection, peer.address);
}

std::expected<ConnectionSlots::Lease, SlotRefusal> ConnectionSlots::begin_request(
    std::string_view key_id) {
  if (key_id.empty()) return Lease(this, Lease::Kind::request, "");
  std::lock_guard lock(mu_);
  std::size_t& held = per_key_[std::string(key_id)];
  if (held >= limits_.per_key) {
    if (held == 0) per_key_.erase(std::string(key_id));
    return std::unexpected(SlotRefusal::key);
  }
  ++held;
  return Lease(this, Lease::Kind::request, std::string(key_id));
}

void ConnectionSlots::release(Lease& lease) {
  std::lock_guard lock(mu_);
  if (lease.kind_ == Lease::Kind::connection) {
    --open_;
    if (!lease.key_.empty()) count_down(per_peer_, lease.key_);
  } else if (!lease.key_.empty()) {
    count_down(per_key_, lease.key_);
  }
}

std::size_t ConnectionSlots::open_connections() const {
  std::lock_guard lock(mu_);
  return open_;
}

std::size_t ConnectionSlots::connections_of(std::string_view peer_address) const {
  std::lock_guard lock(mu_);
  return count_of(per_peer_, peer_address);
}

std::size_t ConnectionSlots::requests_of(std::string_view key_id) const {
  std::lock_guard lock(mu_);
  return count_of(per_key_, key_id);
}

// ---- the descriptor budget

ConnectionBudget plan_connection_budget(std::uint64_t fd_limit,
                                        const ConnectionBudgetRequest& request) {
  constexpr std::size_t kMinTotal = 8;
  constexpr std::size_t kMaxDefaultTotal = 16384;
  ConnectionBudget b;
  b.fd_limit = fd_limit;
  b.reserve_fds = request.reserve_fds ? request.reserve_fds
                                      : std::min(std::max({std::uint64_t{256}, fd_limit / 4,
                                                           kFdsPerSession * request.sessions}),
                                                 fd_limit / 2);

  std::uint64_t overhead = b.reserve_fds + kServerBaseFds + kMaxRejecting;
  std::uint64_t fitting = fd_limit > overhead ? (fd_limit - overhead) / kFdsPerConnection : 0;
  fitting = std::max<std::uint64_t>(fitting, kMinTotal);
  SlotLimits& l = b.limits;
  if (request.total == 0) {
    l.total = static_cast<std::size_t>(std::min<std::uint64_t>(fitting, kMaxDefaultTotal));
  } else if (request.total > fitting) {
    l.total = static_cast<std::size_t>(fitting);
    b.warnings.push_back("connections.max_total " + std::to_string(request.total) +
                         " does not fit RLIMIT_NOFILE " + std::to_string(fd_limit) + " with " +
                         std::to_string(b.reserve_fds) + " descriptors reserved; using " +
                         std::to_string(l.total));
  } else {
    l.total = std::max(request.total, kMinTotal);
  }

  l.root_reserve =
      request.root_reserve ? request.root_reserve : std::clamp<std::size_t>(l.total / 32, 4, 64);
  if (l.root_reserve >= l.total) {
    std::size_t lowered = l.total / 2;
    b.warnings.push_back("connections.root_reserve " + std::to_string(l.root_reserve) +
                         " is not below max_total " + std::to_string(l.total) + "; using " +
                         std::to_string(lowered));
    l.root_reserve = lowered;
  }
  auto share = [&](std::size_t requested) {
    std::size_t v = requested ? requested : std::max<std::size_t>(l.total / 8, 8);
    return std::min(v, l.total);
  };
  l.per_peer = share(request.per_peer);
  l.per_key = share(request.per_key);
  return b;
}

}  // namespace cela::api
