// The E2B data plane's file pieces that need no sandbox: the streaming multipart reader,
// envd's path and user rules, EntryInfo's Go-style permissions and timestamps, and the
// watch helper's line protocol.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "api/e2b/envd_fs.h"
#include "api/e2b/envd_user.h"
#include "api/multipart.h"
#include "common/encoding.h"
#include "session/watch.h"

using namespace cela;
using namespace cela::api;

namespace {

struct Collected {
  std::vector<MultipartPart> parts;
  std::vector<std::string> bodies;
  bool done = false;
};

// Feeds `body` in pieces of `step` bytes.
ApiResult<Collected> read_all(const std::string& boundary, const std::string& body, size_t step) {
  MultipartReader reader(boundary);
  Collected c;
  for (size_t pos = 0; pos < body.size(); pos += step) {
    std::vector<MultipartEvent> events;
    if (auto r = reader.feed(std::string_view(body).substr(pos, step), events); !r) return api_fail(r.error());
    for (auto& e : events) {
      if (e.kind == MultipartEvent::Kind::begin) {
        c.parts.push_back(e.part);
        c.bodies.emplace_back();
      } else if (e.kind == MultipartEvent::Kind::data) {
        c.bodies.back() += e.data;
      } else if (e.kind == MultipartEvent::Kind::done) {
        c.done = true;
      }
    }
  }
  if (auto r = reader.finish(); !r) return api_fail(r.error());
  return c;
}

}  // namespace

TEST(Multipart, SplitsPartsWhateverTheChunking) {
  std::string b = "----x7";
  std::string second(100000, 'q');
  second[5000] = '\r';
  second[5001] = '\n';
  std::string body = "preamble\r\n--" + b + "\r\n" +
                     "Content-Disposition: form-data; name=\"file\"; filename=\"/home/user/a%22b.txt\"\r\n"
                     "Content-Type: application/octet-stream\r\n\r\n" +
                     "hello\r\n--" + b.substr(0, 3) + " not it\r\n" + "\r\n--" + b + "\r\n" +
                     "Content-Disposition: form-data; name=\"file\"; filename=\"rel/dir/b\"\r\n\r\n" + second +
                     "\r\n--" + b + "\r\n" + "Content-Disposition: form-data; name=\"other\"\r\n\r\nv\r\n--" + b +
                     "--\r\nepilogue";
  for (size_t step : {1ul, 3ul, 7ul, 64ul, 4096ul, body.size()}) {
    auto c = read_all(b, body, step);
    ASSERT_TRUE(c) << c.error().message << " step " << step;
    ASSERT_EQ(c->parts.size(), 3u) << step;
    EXPECT_EQ(c->parts[0].name, "file");
    EXPECT_EQ(c->parts[0].filename.value_or(""), "/home/user/a\"b.txt");
    EXPECT_EQ(c->parts[0].content_type, "application/octet-stream");
    EXPECT_EQ(c->bodies[0], "hello\r\n--" + b.substr(0, 3) + " not it\r\n");
    EXPECT_EQ(c->parts[1].filename.value_or(""), "rel/dir/b");
    EXPECT_EQ(c->bodies[1], second);
    EXPECT_EQ(c->parts[2].name, "other");
    EXPECT_FALSE(c->parts[2].filename);
    EXPECT_TRUE(c->done);
  }
}

TEST(Multipart, RefusesMalformedBodies) {
  EXPECT_FALSE(read_all("b", "--b\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nno end", 5));
  EXPECT_FALSE(read_all("b", "--b\r\nNoColonHeader\r\n\r\nx\r\n--b--", 5));
  EXPECT_FALSE(read_all("b", "--bXX\r\n", 5));
  EXPECT_FALSE(read_all("b", "--b\r\n" + std::string(20000, 'h') + "\r\n\r\n--b--", 100));
  EXPECT_TRUE(MultipartReader::boundary_of("multipart/form-data; boundary=\"a b\""));
  EXPECT_EQ(MultipartReader::boundary_of("multipart/form-data; boundary=abc").value_or(""), "abc");
  EXPECT_FALSE(MultipartReader::boundary_of("multipart/form-data"));
  EXPECT_FALSE(MultipartReader::boundary_of("application/json; boundary=abc"));
}

TEST(EnvdPaths, HomeRelativeAndClean) {
  using api::e2b::envd_path;
  EXPECT_EQ(envd_path("a/b", "/home/user").value_or(""), "/home/user/a/b");
  EXPECT_EQ(envd_path("~/x", "/home/user").value_or(""), "/home/user/x");
  EXPECT_EQ(envd_path("~", "/root").value_or(""), "/root");
  EXPECT_EQ(envd_path("", "/home/user").value_or(""), "/home/user");
  EXPECT_EQ(envd_path("../../../../etc/passwd", "/home/user").value_or(""), "/etc/passwd");
  // Absolute paths are the session layer's to resolve (inside the root).
  EXPECT_EQ(envd_path("/a/../../b", "/home/user").value_or(""), "/a/../../b");
  EXPECT_FALSE(envd_path("~other/x", "/home/user"));
  EXPECT_FALSE(envd_path(std::string("a\0b", 3), "/home/user"));
}

TEST(EnvdUsers, QueryAndBasicAuth) {
  using api::e2b::envd_user_from_auth;
  using api::e2b::envd_user_from_query;
  Request req;
  EXPECT_EQ(envd_user_from_query(req).value(), session::ExecUser::user);
  req.query.emplace("username", "root");
  EXPECT_EQ(envd_user_from_query(req).value(), session::ExecUser::root);
  Request other;
  other.query.emplace("username", "mallory");
  EXPECT_FALSE(envd_user_from_query(other));
  Request rpc;
  EXPECT_EQ(envd_user_from_auth(rpc).value(), session::ExecUser::user);
  rpc.headers.set("Authorization", "Basic " + base64_encode("root:"));
  EXPECT_EQ(envd_user_from_auth(rpc).value(), session::ExecUser::root);
  rpc.headers.set("Authorization", "Basic " + base64_encode("user:"));
  EXPECT_EQ(envd_user_from_auth(rpc).value(), session::ExecUser::user);
  rpc.headers.set("Authorization", "Bearer x");
  EXPECT_FALSE(envd_user_from_auth(rpc));
}

TEST(EnvdEntries, GoPermissionsAndTimestamps) {
  using api::e2b::go_permissions;
  EXPECT_EQ(go_permissions(S_IFREG, 0644), "-rw-r--r--");
  EXPECT_EQ(go_permissions(S_IFDIR, 0755), "drwxr-xr-x");
  EXPECT_EQ(go_permissions(S_IFLNK, 0777), "Lrwxrwxrwx");
  EXPECT_EQ(go_permissions(S_IFDIR, 01777), "dtrwxrwxrwx");
  EXPECT_EQ(go_permissions(S_IFREG, 04755), "urwxr-xr-x");
  EXPECT_EQ(go_permissions(S_IFCHR, 0666), "Dcrw-rw-rw-");
  EXPECT_EQ(api::e2b::rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(api::e2b::rfc3339_ms(1764624600123), "2025-12-01T21:30:00.123Z");
}

TEST(WatchLines, ParsesWhateverTheChunking) {
  std::string text = "R\nE 1 " + hex_encode("a\nb c") + "\nO\nE 6 " + hex_encode("d/e") + "\nX 1 2 " +
                     hex_encode("gone") + "\n";
  for (size_t step : {1ul, 2ul, 5ul, text.size()}) {
    session::WatchParser p;
    std::vector<session::WatchLine> lines;
    for (size_t pos = 0; pos < text.size(); pos += step) ASSERT_TRUE(p.feed(text.substr(pos, step), lines));
    ASSERT_EQ(lines.size(), 5u);
    EXPECT_EQ(lines[0].kind, session::WatchLine::Kind::ready);
    EXPECT_EQ(lines[1].name, "a\nb c");
    EXPECT_EQ(lines[1].ops, static_cast<uint32_t>(session::kWatchCreate));
    EXPECT_EQ(lines[2].kind, session::WatchLine::Kind::overflow);
    EXPECT_EQ(lines[3].ops, static_cast<uint32_t>(session::kWatchWrite | session::kWatchRemove));
    EXPECT_EQ(lines[4].kind, session::WatchLine::Kind::failed);
    EXPECT_EQ(lines[4].error.code, ErrorCode::not_found);
    EXPECT_EQ(lines[4].error.err, 2);
  }
  session::WatchParser bad;
  std::vector<session::WatchLine> lines;
  EXPECT_FALSE(bad.feed("E x zz\n", lines));
  EXPECT_FALSE(bad.feed(std::string(20000, 'a'), lines));
}
