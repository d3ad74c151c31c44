// OCI image import: an OCI image layout packed as a tar (oci-layout, index.json,
// blobs/sha256/...) or a `docker save` tar (manifest.json with Config and Layers),
// read from memory. The image's layers are applied in order into one new layer:
// regular files, directories, symlinks, hard links and fifos with their modes, owners
// and times; `.wh.NAME` deletes NAME and `.wh..wh..opq` empties its directory of what
// earlier layers put there (OCI image spec, "Whiteouts"). Every path is resolved
// beneath the new layer (RESOLVE_IN_ROOT): a symlink of the image cannot send a later
// entry outside it. Devices are skipped. OCI blobs are checked against their digests.
//
// The config's Env, WorkingDir and User become the template's env, workdir and user
// (a non-root User is looked up in the image's /etc/passwd; else the image's uid 1000
// account if there is one; else uid 1000 with home /).
#pragma once

#include <string>
#include <string_view>

#include "common/error.h"
#include "rootfs/template.h"

namespace cela::session {

// Imports into `store` as a new version of `name` built by `built_by`.
Result<rootfs::Template> import_oci_image(const rootfs::TemplateStore& store, const std::string& name,
                                          std::string_view archive, const std::string& built_by);

}  // namespace cela::session
