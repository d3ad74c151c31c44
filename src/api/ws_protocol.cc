#include "api/ws_protocol.h"

#include <boost/json.hpp>
#include <charconv>

#include "api/json_body.h"
#include "api/render.h"
#include "api/session_specs.h"
#include "common/encoding.h"
#include "common/json_text.h"

namespace cela::api::ws {
namespace json = boost::json;

namespace {

// The body of the REST call the message stands for: the message less `drop`.
json::object body_without(const json::object& message, std::initializer_list<std::string_view> drop) {
  json::object out;
  for (const auto& kv : message) {
    bool skip = false;
    for (auto d : drop) skip = skip || kv.key() == d;
    if (!skip) out[kv.key()] = kv.value();
  }
  return out;
}

std::string type_list() { return "exec, stdin, close_stdin, kill, resize, attach"; }

}  // namespace

ApiResult<std::pair<std::uint64_t, std::uint64_t>> parse_position(std::string_view id, std::string_view what) {
  auto bad = [&] {
    return std::unexpected(
        ApiError::invalid_request(std::string(what) + " must be \"<stdout offset>,<stderr offset>\" (two whole numbers)"));
  };
  auto comma = id.find(',');
  if (comma == std::string_view::npos) return bad();
  std::uint64_t out = 0, err = 0;
  std::string_view a = id.substr(0, comma), b = id.substr(comma + 1);
  auto ra = std::from_chars(a.data(), a.data() + a.size(), out);
  auto rb = std::from_chars(b.data(), b.data() + b.size(), err);
  if (a.empty() || b.empty() || ra.ec != std::errc() || ra.ptr != a.data() + a.size() || rb.ec != std::errc() ||
      rb.ptr != b.data() + b.size())
    return bad();
  return std::pair{out, err};
}

std::string position(std::uint64_t out, std::uint64_t err) { return std::to_string(out) + "," + std::to_string(err); }

std::expected<ClientMessage, Refusal> parse_client_message(std::string_view text, const session::DaemonConfig& config) {
  Refusal refusal{{}, {}, ApiError::invalid_request("")};
  auto refuse = [&](ApiError e) {
    refusal.error = std::move(e);
    return std::unexpected(refusal);
  };
  auto object = parse_json_object(text);
  if (!object) return refuse(from_error(object.error()));
  JsonFields f(*object);
  // The ids first, so that any later refusal names them.
  auto ref = f.string("ref");
  if (ref && *ref) refusal.ref = **ref;
  auto exec = f.string("exec");
  if (exec && *exec) refusal.exec = **exec;
  if (!ref) return refuse(from_error(ref.error()));
  if (!exec) return refuse(from_error(exec.error()));
  auto type = f.require_string("type");
  if (!type) return refuse(from_error(type.error()));

  if (*type == "exec") {
    if (exec && *exec) return refuse(ApiError::invalid_request("field `exec` is not allowed in an exec message (use `ref`)"));
    auto spec = parse_exec(body_without(*object, {"type", "ref"}), config);
    if (!spec) return refuse(from_error(spec.error()));
    return Exec{refusal.ref, std::move(*spec)};
  }
  if (ref && *ref) return refuse(ApiError::invalid_request("field `ref` is only for exec messages"));
  if (refusal.exec.empty()) return refuse(ApiError::invalid_request("field `exec` is required"));
  const std::string& id = refusal.exec;

  if (*type == "stdin") {
    if (auto ok = f.only({"type", "exec", "data"}); !ok) return refuse(from_error(ok.error()));
    auto data = f.require_string("data");
    if (!data) return refuse(from_error(data.error()));
    auto bytes = base64_decode(*data);
    if (!bytes) return refuse(ApiError::invalid_request("field `data` must be base64"));
    return Stdin{id, std::move(*bytes)};
  }
  if (*type == "close_stdin") {
    if (auto ok = f.only({"type", "exec"}); !ok) return refuse(from_error(ok.error()));
    return CloseStdin{id};
  }
  if (*type == "kill") {
    auto spec = parse_kill(body_without(*object, {"type", "exec"}));
    if (!spec) return refuse(from_error(spec.error()));
    return Kill{id, *spec};
  }
  if (*type == "resize") {
    // The same rules as POST …/resize (api/session_specs.h).
    auto parsed = parse_resize(body_without(*object, {"type", "exec"}));
    if (!parsed) return refuse(from_error(parsed.error()));
    Resize r{id};
    r.cols = parsed->first;
    r.rows = parsed->second;
    return r;
  }
  if (*type == "attach") {
    if (auto ok = f.only({"type", "exec", "offset"}); !ok) return refuse(from_error(ok.error()));
    auto offset = f.string("offset");
    if (!offset) return refuse(from_error(offset.error()));
    Attach a{id};
    if (*offset) {
      auto pos = parse_position(**offset, "field `offset`");
      if (!pos) return refuse(pos.error());
      a.stdout_from = pos->first;
      a.stderr_from = pos->second;
    }
    return a;
  }
  return refuse(ApiError::invalid_request("unknown message type `" + *type + "` (one of " + type_list() + ")"));
}

std::string started_message(std::string_view ref, const session::ExecRecord& record) {
  json::object o{{"type", "started"}, {"exec", record.id}, {"pid", record.pid}};
  o["ref"] = ref.empty() ? json::value(nullptr) : json::value(ref);
  return json_text(o);
}

std::string output_message(session::Stream stream, std::string_view exec, std::string_view data,
                           std::string_view offset) {
  return json_text(json::object{{"type", runtime::to_string(stream)},
                                {"exec", exec},
                                {"data", base64_encode(data)},
                                {"offset", offset}});
}

std::string exit_message(const session::ExecRecord& record) {
  return json_text(json::object{{"type", "exit"}, {"exec", record.id}, {"record", render(record)}});
}

std::string error_message(std::string_view ref, std::string_view exec, const ApiError& error,
                          std::string_view request_id) {
  json::object o{{"type", "error"}, {"error", error_body(error, request_id).at("error")}};
  if (!ref.empty()) o["ref"] = ref;
  if (!exec.empty()) o["exec"] = exec;
  return json_text(o);
}

}  // namespace cela::api::ws
