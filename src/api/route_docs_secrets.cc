// OpenAPI documentation of the secret routes (routes_secrets.cc).
#include "api/route_docs.h"

namespace cela::api::docs {
namespace json = boost::json;

namespace {
json::value secret_info() {
  return object_schema({{"name", string_schema()},
                        {"set_by", string_schema("the key id that set it; local-root on the unix socket")},
                        {"created_at", string_schema("when this value was set (RFC 3339)")},
                        {"expires_at", nullable(string_schema("null: never"))},
                        {"ttl_s", integer_schema("0: no ttl")}},
                       {"name", "set_by", "created_at", "expires_at", "ttl_s"}, "a secret, never its value");
}
ParamDoc secret_name() {
  return path_param("name", "1-128 of [A-Za-z0-9_.-], starting with a letter or '_'");
}
}  // namespace

const RouteDoc put_secret{
    .operation_id = "putSecret",
    .tag = "secrets",
    .summary = "Set a tenant secret (sealed with AES-256-GCM at rest; the value is never answered)",
    .description = "Replaces a secret of the same name. Values are 4 bytes to 64 KiB. Sessions ask for it by "
                   "name in `secrets` at create; every form of it is redacted from what they show.",
    .params = {secret_name()},
    .body = {json_body(object_schema({{"value", string_schema("the plaintext")},
                                      {"ttl_s", bounded(integer_schema("expires after this; default never"), 1,
                                                        315360000)}},
                                     {"value"}),
                       true)},
    .responses = {json_response(201, "the secret's record, without its value", secret_info())},
    .errors = {"invalid_request"},
};

const RouteDoc list_secrets{
    .operation_id = "listSecrets",
    .tag = "secrets",
    .summary = "The tenant's secrets by name: who set them and when they expire, never values",
    .responses = {json_response(200, "the secrets",
                                object_schema({{"secrets", array_of(secret_info(), "by name")}}, {"secrets"}))},
};

const RouteDoc delete_secret{
    .operation_id = "deleteSecret",
    .tag = "secrets",
    .summary = "Delete a tenant secret (sessions that were granted it keep their grant until it ends)",
    .params = {secret_name()},
    .responses = {empty_response(204, "deleted")},
    .errors = {"not_found"},
};

}  // namespace cela::api::docs
