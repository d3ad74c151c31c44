// The template routes' docs (routes_templates.cc). The schemas follow
// render_template and the build/import answers there.
#include <boost/json.hpp>

#include "api/route_docs.h"

namespace cela::api::docs {
namespace json = boost::json;

namespace {

ParamDoc template_name() { return path_param("name", "template name"); }

json::value template_schema() {
  return object_schema(
      {{"name", string_schema()},
       {"version", string_schema()},
       {"template_ref", string_schema("name@version: what a create's `template` may name")},
       {"current", boolean_schema("the version a create of `name` alone gets")},
       {"shared", boolean_schema("a built-in template every tenant sees (read-only); else the caller's own")},
       {"digest", string_schema("sha256 of the stack (of the one layer's tree when there is one)")},
       {"built_at", string_schema("RFC 3339 UTC")},
       {"built_by", string_schema("the tenant id that built it, or `host` (the operator)")},
       {"source", string_schema("debootstrap, host, build, snapshot or oci")},
       {"parent", nullable(string_schema("name@version it was built on"))},
       {"size_bytes", integer_schema("regular-file bytes of all its layers")},
       {"layers", array_of(object_schema({{"digest", string_schema()},
                                          {"size_bytes", integer_schema()},
                                          {"created_by", string_schema("the step, snapshot or image layer")}},
                                         {}, "one read-only layer, bottom first", false))},
       {"user", object_schema({{"name", string_schema()},
                               {"uid", integer_schema()},
                               {"gid", integer_schema()},
                               {"home", string_schema()}},
                              {}, "the account execs run as by default", false)},
       {"env", array_of(string_schema("K=V"), "environment every exec starts with")},
       {"workdir", nullable(string_schema("default cwd of execs"))},
       {"allow_sudo", boolean_schema()},
       {"dev_only", boolean_schema()}},
      {"name", "version", "digest"}, "one template version", false);
}

}  // namespace

const RouteDoc list_templates{
    .operation_id = "listTemplates",
    .tag = "templates",
    .summary = "Templates the caller can use: the shared ones and its own (current versions)",
    .responses = {json_response(200, "templates by name",
                                object_schema({{"templates", array_of(template_schema())}}, {}, "", false))},
};

const RouteDoc get_template{
    .operation_id = "getTemplate",
    .tag = "templates",
    .summary = "One template with every version (digests, layers, who built it, when, size)",
    .description = "Another tenant's private template is not_found.",
    .params = {template_name()},
    .responses = {json_response(200, "the template",
                                object_schema({{"name", string_schema()},
                                               {"current", nullable(string_schema())},
                                               {"shared", boolean_schema()},
                                               {"versions", array_of(template_schema(), "oldest first")}},
                                              {}, "", false))},
    .errors = {"not_found"},
};

const RouteDoc delete_template_version{
    .operation_id = "deleteTemplateVersion",
    .tag = "templates",
    .summary = "Remove one version of a private template",
    .description = "conflict (409) while a live or starting session runs on it; forbidden for a shared "
                   "template. `current` moves to the newest remaining version; layers no version refers "
                   "to any more are deleted.",
    .params = {template_name(), path_param("version", "the version")},
    .responses = {json_response(200, "removed",
                                object_schema({{"name", string_schema()},
                                               {"version", string_schema()},
                                               {"deleted", boolean_schema()}},
                                              {}, "", false))},
    .errors = {"not_found", "forbidden", "conflict"},
};

const RouteDoc snapshot_session{
    .operation_id = "snapshotSession",
    .tag = "templates",
    .summary = "Capture a session's files as a new version of a private template",
    .description = "The session is frozen while its writable layer is copied, then thawed. Only the "
                   "filesystem is kept: processes are not checkpointed (`processes_kept` is false). The "
                   "version stacks the copy on the session's template; it is private to the caller's tenant.",
    .params = {path_param("id", "session id (s-...)")},
    .body = {json_body(object_schema({{"template", string_schema("name of the private template to add to")}},
                                     {"template"}),
                       true)},
    .responses = {json_response(201, "the new version", template_schema())},
    .errors = {"not_found", "gone", "forbidden", "conflict"},
};

const RouteDoc create_template{
    .operation_id = "createTemplate",
    .tag = "templates",
    .summary = "Build a private template from steps; answers at once with the build's id",
    .description =
        "steps: {\"run\": \"shell line\"}, {\"copy\": {\"archive_b64\": \"<tar>\", \"to\": \"/dir\"}}, "
        "{\"env\": {\"K\": \"V\"}}, {\"workdir\": \"/dir\"}, {\"user\": \"name\"}. Each run or copy step is "
        "a layer cached by the digest of its inputs and its parent: an identical step on the same stack "
        "is a cache hit. `run` steps execute in a sandbox like a session's (no network). Follow "
        "GET /v1/templates/builds/{id}?follow=1 for the log.",
    .body = {json_body(object_schema({{"name", string_schema()},
                                      {"from", string_schema("the template (name or name@version) to build on")},
                                      {"steps", array_of(object_schema({}, {}, "one step", false))}},
                                     {"name", "steps"}),
                       true)},
    .responses = {json_response(202, "the build started",
                                object_schema({{"build_id", string_schema()}, {"state", string_schema()}}, {}, "",
                                              false))},
    .errors = {"forbidden", "not_found"},
};

const RouteDoc get_template_build{
    .operation_id = "getTemplateBuild",
    .tag = "templates",
    .summary = "A build's state and log; with follow=1 an SSE stream of it",
    .description = "Events: `log` (a line of output or progress; id = line number), `step` (JSON: index, "
                   "count, step, cached), and at the end `done` (JSON: the build with its template) or "
                   "`failed` (JSON: the build with its error). Last-Event-ID resumes after that line.",
    .params = {path_param("id", "build id (b-...)"), query_flag("follow", "stream the log as server-sent events")},
    .responses = {json_response(200, "the build", object_schema({}, {}, "the build", false))},
    .errors = {"not_found"},
};

const RouteDoc import_template{
    .operation_id = "importTemplate",
    .tag = "templates",
    .summary = "Import an OCI image (an OCI layout tar or a `docker save` tar) as a private template",
    .description = "The image's layers are applied in order with their whiteouts into one layer; the "
                   "config's Env, WorkingDir and User become the template's. No registry is contacted.",
    .params = {query_param("name", string_schema(), "the template name", true)},
    .body = {raw_body("application/x-tar", "the image archive")},
    .responses = {json_response(201, "the new version", template_schema())},
    .errors = {"forbidden", "payload_too_large"},
};

}  // namespace cela::api::docs
