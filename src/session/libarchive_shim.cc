// libarchive, loaded on first use.
//
// Linking libarchive directly maps it and the ten libraries it depends on (libxml2,
// ICU, nettle, compressors) into every cela process at startup: each `cela run` and
// every session's init pays for formats cela never reads, in startup time and in
// resident memory. These definitions stand in for the libarchive functions cela
// calls; the first call dlopens the real library and every call forwards to it.
// Only the daemon's tar import/export ever triggers the load.
#include <archive.h>
#include <archive_entry.h>
#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace {

void* library() {
  static void* handle = [] {
    void* h = ::dlopen("libarchive.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      std::fprintf(stderr, "cela: cannot load libarchive: %s\n", ::dlerror());
      std::abort();
    }
    return h;
  }();
  return handle;
}

void* symbol(const char* name) {
  void* s = ::dlsym(library(), name);
  if (!s) {
    std::fprintf(stderr, "cela: libarchive lacks %s\n", name);
    std::abort();
  }
  return s;
}

}  // namespace

// Each forwarder resolves its target once (thread-safe static initialisation).
#define CELA_FORWARD(name, ...)                                                  \
  static const auto real = reinterpret_cast<decltype(&name)>(symbol(#name));     \
  return real(__VA_ARGS__)

extern "C" {

const char* archive_zlib_version(void) { CELA_FORWARD(archive_zlib_version); }
const char* archive_bzlib_version(void) { CELA_FORWARD(archive_bzlib_version); }
const char* archive_liblzma_version(void) { CELA_FORWARD(archive_liblzma_version); }
const char* archive_libzstd_version(void) { CELA_FORWARD(archive_libzstd_version); }
const char* archive_error_string(struct archive* a) { CELA_FORWARD(archive_error_string, a); }

void archive_set_error(struct archive* a, int err, const char* fmt, ...) {
  char text[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(text, sizeof text, fmt, args);
  va_end(args);
  static const auto real = reinterpret_cast<decltype(&archive_set_error)>(symbol("archive_set_error"));
  real(a, err, "%s", text);
}

struct archive* archive_read_new(void) { CELA_FORWARD(archive_read_new); }
int archive_read_free(struct archive* a) { CELA_FORWARD(archive_read_free, a); }
int archive_read_support_format_tar(struct archive* a) { CELA_FORWARD(archive_read_support_format_tar, a); }
int archive_read_support_format_empty(struct archive* a) { CELA_FORWARD(archive_read_support_format_empty, a); }
int archive_read_support_filter_gzip(struct archive* a) { CELA_FORWARD(archive_read_support_filter_gzip, a); }
int archive_read_support_filter_bzip2(struct archive* a) { CELA_FORWARD(archive_read_support_filter_bzip2, a); }
int archive_read_support_filter_xz(struct archive* a) { CELA_FORWARD(archive_read_support_filter_xz, a); }
int archive_read_support_filter_zstd(struct archive* a) { CELA_FORWARD(archive_read_support_filter_zstd, a); }
int archive_read_open(struct archive* a, void* data, archive_open_callback* open, archive_read_callback* read,
                      archive_close_callback* close) {
  CELA_FORWARD(archive_read_open, a, data, open, read, close);
}
int archive_read_next_header(struct archive* a, struct archive_entry** entry) {
  CELA_FORWARD(archive_read_next_header, a, entry);
}
la_ssize_t archive_read_data(struct archive* a, void* buf, size_t size) { CELA_FORWARD(archive_read_data, a, buf, size); }

struct archive* archive_write_new(void) { CELA_FORWARD(archive_write_new); }
int archive_write_free(struct archive* a) { CELA_FORWARD(archive_write_free, a); }
int archive_write_close(struct archive* a) { CELA_FORWARD(archive_write_close, a); }
int archive_write_set_format_pax_restricted(struct archive* a) {
  CELA_FORWARD(archive_write_set_format_pax_restricted, a);
}
int archive_write_set_options(struct archive* a, const char* opts) { CELA_FORWARD(archive_write_set_options, a, opts); }
int archive_write_open(struct archive* a, void* data, archive_open_callback* open, archive_write_callback* write,
                       archive_close_callback* close) {
  CELA_FORWARD(archive_write_open, a, data, open, write, close);
}
int archive_write_header(struct archive* a, struct archive_entry* e) { CELA_FORWARD(archive_write_header, a, e); }
la_ssize_t archive_write_data(struct archive* a, const void* buf, size_t size) {
  CELA_FORWARD(archive_write_data, a, buf, size);
}
int archive_write_finish_entry(struct archive* a) { CELA_FORWARD(archive_write_finish_entry, a); }

struct archive_entry* archive_entry_new(void) { CELA_FORWARD(archive_entry_new); }
void archive_entry_free(struct archive_entry* e) { CELA_FORWARD(archive_entry_free, e); }
struct archive_entry* archive_entry_clear(struct archive_entry* e) { CELA_FORWARD(archive_entry_clear, e); }
const char* archive_entry_pathname(struct archive_entry* e) { CELA_FORWARD(archive_entry_pathname, e); }
const char* archive_entry_pathname_utf8(struct archive_entry* e) { CELA_FORWARD(archive_entry_pathname_utf8, e); }
void archive_entry_copy_pathname(struct archive_entry* e, const char* p) {
  CELA_FORWARD(archive_entry_copy_pathname, e, p);
}
const char* archive_entry_symlink(struct archive_entry* e) { CELA_FORWARD(archive_entry_symlink, e); }
const char* archive_entry_symlink_utf8(struct archive_entry* e) { CELA_FORWARD(archive_entry_symlink_utf8, e); }
void archive_entry_copy_symlink(struct archive_entry* e, const char* p) { CELA_FORWARD(archive_entry_copy_symlink, e, p); }
const char* archive_entry_hardlink(struct archive_entry* e) { CELA_FORWARD(archive_entry_hardlink, e); }
__LA_MODE_T archive_entry_filetype(struct archive_entry* e) { CELA_FORWARD(archive_entry_filetype, e); }
void archive_entry_set_filetype(struct archive_entry* e, unsigned int t) { CELA_FORWARD(archive_entry_set_filetype, e, t); }
__LA_MODE_T archive_entry_perm(struct archive_entry* e) { CELA_FORWARD(archive_entry_perm, e); }
void archive_entry_set_perm(struct archive_entry* e, __LA_MODE_T m) { CELA_FORWARD(archive_entry_set_perm, e, m); }
la_int64_t archive_entry_size(struct archive_entry* e) { CELA_FORWARD(archive_entry_size, e); }
int archive_entry_size_is_set(struct archive_entry* e) { CELA_FORWARD(archive_entry_size_is_set, e); }
void archive_entry_set_size(struct archive_entry* e, la_int64_t s) { CELA_FORWARD(archive_entry_set_size, e, s); }
time_t archive_entry_mtime(struct archive_entry* e) { CELA_FORWARD(archive_entry_mtime, e); }
long archive_entry_mtime_nsec(struct archive_entry* e) { CELA_FORWARD(archive_entry_mtime_nsec, e); }
int archive_entry_mtime_is_set(struct archive_entry* e) { CELA_FORWARD(archive_entry_mtime_is_set, e); }
void archive_entry_set_mtime(struct archive_entry* e, time_t t, long ns) { CELA_FORWARD(archive_entry_set_mtime, e, t, ns); }
void archive_entry_set_uid(struct archive_entry* e, la_int64_t id) { CELA_FORWARD(archive_entry_set_uid, e, id); }
la_int64_t archive_entry_uid(struct archive_entry* e) { CELA_FORWARD(archive_entry_uid, e); }
la_int64_t archive_entry_gid(struct archive_entry* e) { CELA_FORWARD(archive_entry_gid, e); }
void archive_entry_set_gid(struct archive_entry* e, la_int64_t id) { CELA_FORWARD(archive_entry_set_gid, e, id); }

}  // extern "C"
