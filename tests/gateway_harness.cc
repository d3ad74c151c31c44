// A loopback HTTP server around one PackageGateway, for the integration tests while the
// sessions' egress door is not there yet: it stands in for the proxy, handing each
// request to PackageGateway::handle() as coming from the session whose port it reached
// (one loopback port per session). Not part of cela.
//   gateway_harness CONFIG.json   CONFIG: {"packages": <daemon config section>,
//                                          "state_dir": DIR,
//                                          "sessions": {"s-1": <create body packages>}}
// Prints "port SESSION N" per session, then "ready"; writes every install record as a JSON line to
// DIR/installs.jsonl.
#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <boost/json.hpp>
#include <cstdio>
#include <fstream>
#include <future>
#include <iostream>
#include <mutex>
#include <thread>

#include "common/fs.h"
#include "common/json_fields.h"
#include "net/package_config.h"
#include "net/package_gateway.h"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using namespace cela;

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  auto text = read_file(argv[1]);
  if (!text) return 2;
  auto doc = parse_json_object(*text, "harness config");
  if (!doc) {
    std::cerr << doc.error().message() << "\n";
    return 2;
  }
  JsonFields top(*doc);
  std::string state = std::string(top.require_string("state_dir").value());
  auto section = top.object("packages").value();
  auto config = net::parse_packages_config(section ? &*section : nullptr, state);
  if (!config) {
    std::cerr << config.error().message() << "\n";
    return 2;
  }
  std::mutex log_mu;
  std::ofstream log(state + "/installs.jsonl", std::ios::app);
  auto gateway = net::PackageGateway::open(config->gateway, [&](const net::InstallEvent& e) {
    boost::json::object o{{"session", e.session_id}, {"manager", e.manager}, {"name", e.name},
                          {"version", e.version},    {"registry", e.registry}, {"sha256", e.sha256},
                          {"size", e.size},          {"verdict", e.verdict},   {"rule", e.rule},
                          {"reason", e.reason},      {"cache", e.cache_hit ? "hit" : "miss"}};
    std::lock_guard lock(log_mu);
    log << boost::json::serialize(o) << "\n" << std::flush;
  });
  if (!gateway) {
    std::cerr << gateway.error().message() << "\n";
    return 2;
  }
  if (auto sessions = top.object("sessions").value()) {
    for (const auto& kv : sessions->raw()) {
      JsonFields f(kv.value().as_object(), std::string(kv.key()));
      auto asked = net::parse_package_request(f);
      if (!asked) {
        std::cerr << asked.error().message() << "\n";
        return 2;
      }
      auto policy = net::narrow_policy(config->ceiling, *asked);
      if (!policy) {
        std::cerr << policy.error().message() << "\n";
        return 2;
      }
      (*gateway)->add_session(std::string(kv.key()), "t-harness", *policy);
    }
  }
  // One port per session: the port stands for the door the request came through.
  asio::io_context ioc;
  std::vector<std::thread> acceptors;
  auto sessions = top.object("sessions").value();
  for (const auto& kv : sessions->raw()) {
    auto acceptor = std::make_shared<asio::ip::tcp::acceptor>(ioc, asio::ip::tcp::endpoint{asio::ip::make_address("127.0.0.1"), 0});
    std::printf("port %s %u\n", std::string(kv.key()).c_str(), acceptor->local_endpoint().port());
    std::fflush(stdout);
    acceptors.emplace_back([&ioc, &gw = **gateway, acceptor, session = std::string(kv.key())] {
      while (true) {
        asio::ip::tcp::socket socket(ioc);
        acceptor->accept(socket);
        std::thread([&gw, session, socket = std::move(socket)]() mutable {
          beast::flat_buffer buffer;
          boost::system::error_code ec;
          while (true) {
            net::HttpRequest req;
            http::read(socket, buffer, req, ec);
            if (ec) return;
            net::DoorPeer peer{session, "t-harness"};
            std::promise<http::message_generator> answer;
            auto done = answer.get_future();
            gw.handle(peer, std::move(req), [&](http::message_generator m) { answer.set_value(std::move(m)); });
            auto message = done.get();
            beast::write(socket, std::move(message), ec);
            if (ec) return;
          }
        }).detach();
      }
    });
  }
  std::printf("ready\n");
  std::fflush(stdout);
  for (auto& t : acceptors) t.join();
}
