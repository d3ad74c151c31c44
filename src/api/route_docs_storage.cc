// RouteDocs of the storage routes (routes_storage.cc): session reset and volumes.
#include <boost/json.hpp>

#include "api/route_docs.h"

namespace cela::api::docs {

const RouteDoc reset_session{
    .operation_id = "resetSession",
    .tag = "sessions",
    .summary = "Back to the template's state: a new writable layer and a new init, same id",
    .description =
        "Running execs end (killed, reason `the session ended (reset)`); every process, the cgroup and the "
        "writable layer go; a new sandbox is booted from the same template with the same limits, disk kind "
        "and volumes (volumes keep their files). The TTL keeps counting; the idle clock restarts. Other "
        "calls on the session answer conflict while the reset runs (a few milliseconds).",
    .params = {path_param("id", "session id (s-...)")},
    .responses = {json_response(200, "the session, ready again", ref("Session"))},
    .errors = {"not_found", "gone", "conflict"},
};

const RouteDoc create_volume{
    .operation_id = "createVolume",
    .tag = "volumes",
    .summary = "Create a volume: a persistent workspace of the tenant with a size cap",
    .description =
        "An ext4 image of size_mb (sparse on the host): writes past the cap fail inside with ENOSPC. Its root "
        "belongs to the default template's user. Mounted into sessions with the create body's `volumes`, "
        "idmapped through each session's user namespace: files keep their in-sandbox owner from one "
        "session to the next. It outlives sessions until DELETE.",
    .body = {json_body(ref("CreateVolume"), true)},
    .responses = {json_response(201, "the volume", ref("Volume"))},
    .errors = {"conflict", "quota_exceeded"},
};

const RouteDoc list_volumes{
    .operation_id = "listVolumes",
    .tag = "volumes",
    .summary = "The tenant's volumes, with who has each mounted",
    .responses = {json_response(200, "every volume of the tenant", ref("VolumeList"))},
};

const RouteDoc get_volume{
    .operation_id = "getVolume",
    .tag = "volumes",
    .summary = "One volume of the tenant",
    .params = {path_param("name", "volume name")},
    .responses = {json_response(200, "the volume", ref("Volume"))},
    .errors = {"not_found"},
};

const RouteDoc delete_volume{
    .operation_id = "deleteVolume",
    .tag = "volumes",
    .summary = "Delete a volume and its files; conflict while a live session has it mounted",
    .params = {path_param("name", "volume name")},
    .responses = {json_response(200, "the volume as it was", ref("Volume"))},
    .errors = {"not_found", "conflict"},
};

}  // namespace cela::api::docs
