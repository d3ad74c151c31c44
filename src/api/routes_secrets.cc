// Tenant secrets (API.md "Secrets"): values go in, names come out, never a value.
#include <openssl/crypto.h>

#include <boost/json.hpp>

#include "api/json_body.h"
#include "api/responder.h"
#include "api/route_docs.h"
#include "api/routes.h"
#include "session/secrets.h"

namespace cela::api {
namespace json = boost::json;
using http::verb;

namespace {

json::object secret_json(const session::SecretInfo& s) {
  json::object o{{"name", s.name}, {"set_by", s.set_by}, {"created_at", s.created_at}, {"ttl_s", s.ttl_s}};
  if (s.expires_at.empty()) o["expires_at"] = nullptr;
  else o["expires_at"] = s.expires_at;
  return o;
}

Result<session::PutSecretSpec> parse_put_secret(const json::object& body, std::string name) {
  JsonFields f(body);
  if (auto ok = f.only({"value", "ttl_s"}); !ok) return std::unexpected(ok.error());
  session::PutSecretSpec spec;
  spec.name = std::move(name);
  auto value = f.require_string("value");
  if (!value) return std::unexpected(value.error());
  spec.value = session::SecretBytes(std::move(*value));
  auto ttl = f.integer("ttl_s");
  if (!ttl) return std::unexpected(ttl.error());
  if (*ttl) {
    if (**ttl < 1 || **ttl > 10LL * 365 * 86400) return std::unexpected(f.invalid("ttl_s", "must be 1..315360000"));
    spec.ttl_s = static_cast<uint64_t>(**ttl);
  }
  return spec;
}

}  // namespace

void add_secret_routes(RouteContext& ctx) {
  Router& r = ctx.server.router();

  r.add(verb::put, "/v1/secrets/{name}", docs::put_secret, [&ctx](Request& req, Responder& res) {
    auto body = parse_json_object(req.body);
    session::wipe_string(req.body);  // the parsed copy is all that is left
    if (!body) return res.error(body.error());
    auto spec = parse_put_secret(*body, std::string(req.param("name")));
    // The JSON value held the plaintext too.
    if (auto* v = body->if_contains("value"); v && v->is_string()) {
      auto& str = v->get_string();
      if (!str.empty()) OPENSSL_cleanse(str.data(), str.size());
    }
    if (!spec) return res.error(from_error(spec.error()));
    std::string set_by = req.principal && !req.principal->key_id.empty() ? req.principal->key_id : "local-root";
    answer_blocking(ctx, res, 201,
                    [&ctx, caller = caller_of(req), set_by, spec = std::move(*spec)]() mutable -> ApiResult<json::value> {
                      auto info = ctx.sessions.secrets().put(caller, set_by, std::move(spec));
                      if (!info) return api_fail(from_error(info.error()));
                      return json::value(secret_json(*info));
                    });
  });

  r.add(verb::get, "/v1/secrets", docs::list_secrets, [&ctx](Request& req, Responder& res) {
    answer_blocking(ctx, res, 200, [&ctx, caller = caller_of(req)]() -> ApiResult<json::value> {
      auto list = ctx.sessions.secrets().list(caller);
      if (!list) return api_fail(from_error(list.error()));
      json::array a;
      for (const auto& s : *list) a.push_back(secret_json(s));
      return json::value(json::object{{"secrets", std::move(a)}});
    });
  });

  r.add(verb::delete_, "/v1/secrets/{name}", docs::delete_secret, [&ctx](Request& req, Responder& res) {
    ctx.server.post_blocking([&ctx, responder = res.shared_from_this(), caller = caller_of(req),
                              name = std::string(req.param("name"))] {
      if (auto r = ctx.sessions.secrets().remove(caller, name); !r) return responder->error(from_error(r.error()));
      responder->no_content();
    });
  });
}

}  // namespace cela::api
