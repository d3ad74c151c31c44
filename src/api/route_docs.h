// The documentation of cela's v1 routes (API.md), one RouteDoc per registered route,
// and the shared component schemas they refer to. The route files pass these to
// Router::add; openapi.cc turns the router's table into the OpenAPI document.
//
// Component schemas (route_docs_schemas.cc) follow the code that renders each answer:
// api/render.cc (Session, Exec, Tenant), routes_sessions.cc (SessionList,
// DeletedSession, ExecStarted, ExecResult), routes_*.cc (ExecOutput, FileInfo, ...),
// http_error.cc (Error). Change the renderer, change the schema.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/route_doc.h"

namespace cela::api {

// components.schemas of the document: name -> schema.
const boost::json::object& component_schemas();

namespace docs {

// ---- schema helpers (OpenAPI 3.0 flavour of JSON Schema) ----
boost::json::value ref(std::string_view component);  // {"$ref": "#/components/schemas/X"}
boost::json::value string_schema(std::string description = {});
boost::json::value integer_schema(std::string description = {});
boost::json::value number_schema(std::string description = {});
boost::json::value boolean_schema(std::string description = {});
boost::json::value enum_schema(std::initializer_list<std::string_view> values,
                               std::string description = {});
boost::json::value array_of(boost::json::value items, std::string description = {});
boost::json::value string_map(std::string description = {});  // {"K": "V"}
// A schema that may also be null (for a $ref: allOf + nullable).
boost::json::value nullable(boost::json::value schema);
// A closed object (additionalProperties false): what the strict JSON readers accept.
boost::json::value object_schema(
    std::initializer_list<std::pair<std::string_view, boost::json::value>> properties,
    std::initializer_list<std::string_view> required = {}, std::string description = {},
    bool closed = true);
// Minimum/maximum on a number or integer schema.
boost::json::value bounded(boost::json::value schema, double minimum, double maximum);

// ---- parameter, body and response helpers ----
ParamDoc path_param(std::string name, std::string description);
ParamDoc query_param(std::string name, boost::json::value schema, std::string description,
                     bool required = false);
// A query flag as Request::query_flag reads it: 1/0, true/false, yes/no; present
// without a value means true.
ParamDoc query_flag(std::string name, std::string description);
RequestBodyDoc json_body(boost::json::value schema, bool required = false,
                         std::string description = {});
RequestBodyDoc raw_body(std::string media_type, std::string description);
ResponseDoc json_response(int status, std::string description, boost::json::value schema);
ResponseDoc empty_response(int status, std::string description);

// ---- the routes (in routes_admin.cc, routes_sessions.cc, routes_files.cc) ----
extern const RouteDoc healthz;
// route_docs_observe.cc
extern const RouteDoc prometheus_metrics;
extern const RouteDoc session_metrics;
extern const RouteDoc session_events;
extern const RouteDoc list_audit;
extern const RouteDoc readyz;
extern const RouteDoc openapi;
extern const RouteDoc create_tenant;
extern const RouteDoc create_key;
extern const RouteDoc list_tenants;
extern const RouteDoc get_tenant;

extern const RouteDoc create_session;
extern const RouteDoc list_sessions;
extern const RouteDoc get_session;
extern const RouteDoc session_packages;
extern const RouteDoc patch_session;
extern const RouteDoc delete_session;
extern const RouteDoc pause_session;
extern const RouteDoc resume_session;
extern const RouteDoc list_pools;
extern const RouteDoc start_exec;
extern const RouteDoc run_exec;
extern const RouteDoc get_exec;
extern const RouteDoc exec_output;
extern const RouteDoc write_stdin;
extern const RouteDoc session_ws;  // routes_ws.cc
extern const RouteDoc kill_exec;
extern const RouteDoc resize_exec;
extern const RouteDoc session_egress;
extern const RouteDoc get_network_ceiling;
extern const RouteDoc set_network_ceiling;
extern const RouteDoc delete_network_ceiling;

// ---- templates (routes_templates.cc; docs in route_docs_templates.cc) ----
extern const RouteDoc list_templates;
extern const RouteDoc get_template;
extern const RouteDoc delete_template_version;
extern const RouteDoc snapshot_session;
extern const RouteDoc create_template;
extern const RouteDoc get_template_build;
extern const RouteDoc import_template;

extern const RouteDoc write_file;
extern const RouteDoc read_file;
extern const RouteDoc stat_file;
extern const RouteDoc delete_file;
extern const RouteDoc list_dir;
extern const RouteDoc make_dir;
extern const RouteDoc move_path;
extern const RouteDoc export_archive;
extern const RouteDoc import_archive;

// route_docs_processes.cc (routes_processes.cc)
extern const RouteDoc list_processes;
extern const RouteDoc signal_process;
RouteDoc port_proxy(std::string_view method);  // one per method: operation ids differ

// route_docs_secrets.cc
extern const RouteDoc put_secret;
extern const RouteDoc list_secrets;
extern const RouteDoc delete_secret;
// route_docs_storage.cc (routes_storage.cc)
extern const RouteDoc reset_session;
extern const RouteDoc create_volume;
extern const RouteDoc list_volumes;
extern const RouteDoc get_volume;
extern const RouteDoc delete_volume;

}  // namespace docs
}  // namespace cela::api
