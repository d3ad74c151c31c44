// The accounting of connection and request slots (api/connection_slots.h): fairness per
// peer and per key, the local-root reserve, release on every path, and the budget
// derived from the descriptor limit.
#include "api/connection_slots.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

using namespace cela::api;

namespace {

SlotPeer ip(const char* address) {
  return {address, false};
}

sockaddr_storage v4(const char* text, std::uint16_t port) {
  sockaddr_storage s{};
  auto* in = reinterpret_cast<sockaddr_in*>(&s);
  in->sin_family = AF_INET;
  in->sin_port = htons(port);
  inet_pton(AF_INET, text, &in->sin_addr);
  return s;
}

sockaddr_storage v6(const char* text) {
  sockaddr_storage s{};
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&s);
  in6->sin6_family = AF_INET6;
  inet_pton(AF_INET6, text, &in6->sin6_addr);
  return s;
}

}  // namespace

TEST(ConnectionSlots, OnePeerCannotTakeMoreThanItsShare) {
  ConnectionSlots slots({.total = 10, .root_reserve = 2, .per_peer = 3, .per_key = 5});
  std::vector<ConnectionSlots::Lease> held;
  for (int i = 0; i < 3; ++i) {
    auto lease = slots.open_connection(ip("10.0.0.1"));
    ASSERT_TRUE(lease);
    held.push_back(std::move(*lease));
  }
  auto over = slots.open_connection(ip("10.0.0.1"));
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error(), SlotRefusal::peer);
  EXPECT_EQ(slots.connections_of("10.0.0.1"), 3u);
  // Another peer is not affected.
  auto other = slots.open_connection(ip("10.0.0.2"));
  ASSERT_TRUE(other);
  EXPECT_EQ(slots.open_connections(), 4u);
  // A released slot is the peer's again.
  held.pop_back();
  EXPECT_EQ(slots.connections_of("10.0.0.1"), 2u);
  EXPECT_TRUE(slots.open_connection(ip("10.0.0.1")));
}

TEST(ConnectionSlots, TheRootReserveIsOnlyForLocalRoot) {
  ConnectionSlots slots({.total = 6, .root_reserve = 2, .per_peer = 6, .per_key = 6});
  std::vector<ConnectionSlots::Lease> held;
  for (int i = 0; i < 4; ++i) {
    auto lease = slots.open_connection(ip(("10.0.0." + std::to_string(i)).c_str()));
    ASSERT_TRUE(lease);
    held.push_back(std::move(*lease));
  }
  // Everyone but local root now sees the server as full, a unix peer that is not root too.
  auto tcp = slots.open_connection(ip("10.0.0.9"));
  ASSERT_FALSE(tcp);
  EXPECT_EQ(tcp.error(), SlotRefusal::total);
  EXPECT_FALSE(slots.open_connection(unix_slot_peer(1000)));
  // Root gets the reserve, then the total is the end for root too.
  for (int i = 0; i < 2; ++i) {
    auto lease = slots.open_connection(unix_slot_peer(0));
    ASSERT_TRUE(lease);
    held.push_back(std::move(*lease));
  }
  auto root_over = slots.open_connection(unix_slot_peer(0));
  ASSERT_FALSE(root_over);
  EXPECT_EQ(root_over.error(), SlotRefusal::total);
  EXPECT_EQ(slots.open_connections(), 6u);
}

TEST(ConnectionSlots, LocalRootIsNotLimitedPerPeer) {
  ConnectionSlots slots({.total = 10, .root_reserve = 1, .per_peer = 2, .per_key = 2});
  std::vector<ConnectionSlots::Lease> held;
  for (int i = 0; i < 5; ++i) {
    auto lease = slots.open_connection(unix_slot_peer(0));
    ASSERT_TRUE(lease) << i;
    held.push_back(std::move(*lease));
  }
  // A unix peer that is not root is limited like any other peer.
  auto a = slots.open_connection(unix_slot_peer(1000));
  auto b = slots.open_connection(unix_slot_peer(1000));
  auto c = slots.open_connection(unix_slot_peer(1000));
  EXPECT_TRUE(a && b);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error(), SlotRefusal::peer);
}

TEST(ConnectionSlots, RequestsInFlightPerKey) {
  ConnectionSlots slots({.total = 8, .root_reserve = 1, .per_peer = 8, .per_key = 2});
  auto a = slots.begin_request("k-1");
  auto b = slots.begin_request("k-1");
  ASSERT_TRUE(a && b);
  auto c = slots.begin_request("k-1");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error(), SlotRefusal::key);
  EXPECT_TRUE(slots.begin_request("k-2"));  // another key has its own slots
  // No key (local root): never refused, never counted.
  std::vector<ConnectionSlots::Lease> keyless;
  for (int i = 0; i < 10; ++i) keyless.push_back(std::move(*slots.begin_request("")));
  EXPECT_EQ(slots.requests_of(""), 0u);
  a->reset();
  EXPECT_EQ(slots.requests_of("k-1"), 1u);
  EXPECT_TRUE(slots.begin_request("k-1"));
  // Request slots are not connection slots.
  EXPECT_EQ(slots.open_connections(), 0u);
}

TEST(ConnectionSlots, LeasesReleaseOnceWhateverTheirPath) {
  ConnectionSlots slots({.total = 4, .root_reserve = 1, .per_peer = 1, .per_key = 1});
  {
    auto lease = slots.open_connection(ip("10.0.0.1"));
    ASSERT_TRUE(lease);
    ConnectionSlots::Lease moved = std::move(*lease);
    EXPECT_FALSE(lease->held());
    ConnectionSlots::Lease assigned;
    assigned = std::move(moved);
    assigned.reset();
    assigned.reset();  // twice is once
    EXPECT_EQ(slots.open_connections(), 0u);
  }
  EXPECT_EQ(slots.open_connections(), 0u);
  EXPECT_EQ(slots.connections_of("10.0.0.1"), 0u);
  // Assigning over a held lease releases the old one.
  auto first = slots.open_connection(ip("10.0.0.1"));
  auto second = slots.open_connection(ip("10.0.0.2"));
  ASSERT_TRUE(first && second);
  *first = std::move(*second);
  EXPECT_EQ(slots.connections_of("10.0.0.1"), 0u);
  EXPECT_EQ(slots.connections_of("10.0.0.2"), 1u);
  EXPECT_EQ(slots.open_connections(), 1u);
}

TEST(ConnectionSlots, ConcurrentAdmissionsNeverPassTheLimits) {
  ConnectionSlots slots({.total = 100, .root_reserve = 10, .per_peer = 30, .per_key = 5});
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  std::vector<std::vector<ConnectionSlots::Lease>> kept(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        auto lease = slots.open_connection(ip(t % 2 ? "10.0.0.1" : "10.0.0.2"));
        if (!lease) continue;
        ++granted;
        if (i % 3) kept[t].push_back(std::move(*lease));  // the others release at once
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(slots.connections_of("10.0.0.1"), 30u);
  EXPECT_LE(slots.connections_of("10.0.0.2"), 30u);
  EXPECT_EQ(slots.open_connections(),
            slots.connections_of("10.0.0.1") + slots.connections_of("10.0.0.2"));
  EXPECT_EQ(slots.open_connections(), 60u);  // both peers filled their share
  kept.clear();
  EXPECT_EQ(slots.open_connections(), 0u);
}

TEST(SlotPeer, TcpPeersCountByAddressAndIpv6ByItsSlash64) {
  EXPECT_EQ(tcp_slot_peer(v4("127.0.0.2", 4000)).address, "127.0.0.2");
  EXPECT_EQ(tcp_slot_peer(v4("127.0.0.2", 4001)).address, "127.0.0.2");  // the port is not the peer
  EXPECT_FALSE(tcp_slot_peer(v4("127.0.0.1", 1)).local_root);
  EXPECT_EQ(tcp_slot_peer(v6("2001:db8:1:2:aaaa::1")).address, "2001:db8:1:2::/64");
  EXPECT_EQ(tcp_slot_peer(v6("2001:db8:1:2:bbbb::7")).address, "2001:db8:1:2::/64");
  EXPECT_NE(tcp_slot_peer(v6("2001:db8:1:3::1")).address, "2001:db8:1:2::/64");
  EXPECT_EQ(tcp_slot_peer(v6("::ffff:10.1.2.3")).address, "10.1.2.3");
  EXPECT_EQ(unix_slot_peer(1000).address, "uid 1000");
  EXPECT_TRUE(unix_slot_peer(0).local_root);
  EXPECT_FALSE(unix_slot_peer(1000).local_root);
}

TEST(ConnectionBudget, DefaultsLeaveTheReserveToTheDaemon) {
  for (std::uint64_t limit : {1024ull, 4096ull, 20000ull, 65536ull, 1048576ull}) {
    ConnectionBudget b = plan_connection_budget(limit, {});
    const SlotLimits& l = b.limits;
    SCOPED_TRACE(limit);
    EXPECT_GE(b.reserve_fds, 256u);
    EXPECT_LE(b.reserve_fds, limit / 2);
    // Every connection at two descriptors, the lingering rejections and the server's
    // own descriptors fit beside the reserve.
    EXPECT_LE(l.total * kFdsPerConnection + kMaxRejecting + kServerBaseFds + b.reserve_fds, limit);
    EXPECT_LE(l.total, 16384u);
    EXPECT_GE(l.root_reserve, 4u);
    EXPECT_LT(l.root_reserve, l.total);
    EXPECT_LT(l.per_peer, l.total);  // one peer can never fill the server
    EXPECT_LE(l.per_key, l.total);
    EXPECT_TRUE(b.warnings.empty());
  }
  ConnectionBudget b = plan_connection_budget(1024, {});
  EXPECT_EQ(b.reserve_fds, 256u);
  // Room for the sessions the daemon may run, as far as half the descriptors go.
  EXPECT_EQ(plan_connection_budget(20000, {.sessions = 100}).reserve_fds, 5000u);
  EXPECT_EQ(plan_connection_budget(65536, {.sessions = 1000}).reserve_fds, 32000u);
  EXPECT_EQ(plan_connection_budget(4096, {.sessions = 1000}).reserve_fds, 2048u);
  EXPECT_EQ(b.limits.total, (1024u - 256 - kServerBaseFds - kMaxRejecting) / 2);
  EXPECT_EQ(b.limits.per_peer, b.limits.total / 8);
}

TEST(ConnectionBudget, ConfiguredValuesAreKeptWhenTheyFit) {
  ConnectionBudget b = plan_connection_budget(
      20000,
      {.total = 500, .root_reserve = 20, .per_peer = 50, .per_key = 40, .reserve_fds = 1000});
  EXPECT_EQ(b.reserve_fds, 1000u);
  EXPECT_EQ(b.limits.total, 500u);
  EXPECT_EQ(b.limits.root_reserve, 20u);
  EXPECT_EQ(b.limits.per_peer, 50u);
  EXPECT_EQ(b.limits.per_key, 40u);
  EXPECT_TRUE(b.warnings.empty());
}

TEST(ConnectionBudget, ATotalThatDoesNotFitTheDescriptorsIsLoweredWithAWarning) {
  ConnectionBudget b = plan_connection_budget(2048, {.total = 100000, .per_peer = 200000});
  EXPECT_LE(b.limits.total * kFdsPerConnection + kMaxRejecting + kServerBaseFds + b.reserve_fds,
            2048u);
  EXPECT_EQ(b.limits.per_peer, b.limits.total);  // never above the total
  ASSERT_EQ(b.warnings.size(), 1u);
  EXPECT_NE(b.warnings[0].find("max_total 100000"), std::string::npos);

  ConnectionBudget r = plan_connection_budget(20000, {.total = 50, .root_reserve = 50});
  EXPECT_LT(r.limits.root_reserve, r.limits.total);
  ASSERT_EQ(r.warnings.size(), 1u);

  // A tiny limit still serves a few connections.
  ConnectionBudget tiny = plan_connection_budget(64, {});
  EXPECT_GE(tiny.limits.total, 8u);
  EXPECT_LT(tiny.limits.root_reserve, tiny.limits.total);
}
