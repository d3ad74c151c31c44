// UpstreamClient (gateway_upstream.h).
#include "net/gateway_upstream.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "common/encoding.h"
#include "common/fd.h"

namespace cela::net {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;

std::string Url::origin() const {
  bool default_port = (scheme == "https" && port == "443") || (scheme == "http" && port == "80");
  return scheme + "://" + host + (default_port ? "" : ":" + port);
}

Result<Url> parse_url(const std::string& text) {
  auto bad = [&] { return fail(ErrorCode::invalid_argument, "not an absolute http(s) URL: `" + text + "`"); };
  auto scheme_end = text.find("://");
  if (scheme_end == std::string::npos) return bad();
  Url u;
  u.scheme = text.substr(0, scheme_end);
  if (u.scheme != "https" && u.scheme != "http") return bad();
  size_t host_begin = scheme_end + 3;
  size_t path_begin = text.find_first_of("/?#", host_begin);
  std::string authority = text.substr(host_begin, path_begin == std::string::npos ? std::string::npos : path_begin - host_begin);
  if (authority.empty() || authority.find('@') != std::string::npos) return bad();
  if (authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string::npos) return bad();
    u.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return bad();
      u.port = authority.substr(close + 2);
    }
  } else {
    auto colon = authority.rfind(':');
    u.host = authority.substr(0, colon);
    if (colon != std::string::npos) u.port = authority.substr(colon + 1);
  }
  if (u.port.empty()) u.port = u.scheme == "https" ? "443" : "80";
  if (u.host.empty() || u.port.find_first_not_of("0123456789") != std::string::npos) return bad();
  u.target = path_begin == std::string::npos ? "/" : text.substr(path_begin);
  if (auto hash = u.target.find('#'); hash != std::string::npos) u.target.resize(hash);
  if (u.target.empty() || u.target[0] != '/') u.target = "/" + u.target;
  return u;
}

std::string resolve_url(const std::string& base, const std::string& ref) {
  if (ref.find("://") != std::string::npos) return ref;
  auto u = parse_url(base);
  if (!u) return ref;
  std::string origin = u->scheme + "://" + (u->host.find(':') != std::string::npos ? "[" + u->host + "]" : u->host) + ":" + u->port;
  if (ref.starts_with("//")) return u->scheme + ":" + ref;
  if (ref.starts_with("/")) return origin + ref;
  std::string dir = u->target.substr(0, u->target.find('?'));
  dir = dir.substr(0, dir.rfind('/') + 1);
  std::string path = dir + ref;
  // Collapse "./" and "../" segments.
  std::vector<std::string> parts;
  size_t i = 1;
  std::string query;
  if (auto q = path.find('?'); q != std::string::npos) {
    query = path.substr(q);
    path.resize(q);
  }
  while (i <= path.size()) {
    size_t slash = path.find('/', i);
    std::string seg = path.substr(i, slash == std::string::npos ? std::string::npos : slash - i);
    if (seg == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (seg != ".") {
      parts.push_back(seg);
    }
    if (slash == std::string::npos) break;
    i = slash + 1;
  }
  std::string out;
  for (const auto& p : parts) out += "/" + p;
  if (out.empty()) out = "/";
  return origin + out + query;
}

struct UpstreamClient::Tls {
  ssl::context ctx{ssl::context::tls_client};
};

UpstreamClient::UpstreamClient(std::unique_ptr<Tls> tls) : tls_(std::move(tls)) {}
UpstreamClient::~UpstreamClient() = default;

Result<std::unique_ptr<UpstreamClient>> UpstreamClient::open(const std::string& ca_file) {
  auto tls = std::make_unique<Tls>();
  boost::system::error_code ec;
  tls->ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  tls->ctx.set_default_verify_paths(ec);
  if (ec) return fail(ErrorCode::system, "packages: the system CA store: " + ec.message());
  if (!ca_file.empty()) {
    tls->ctx.load_verify_file(ca_file, ec);
    if (ec) return fail(ErrorCode::invalid_argument, "packages.ca_file " + ca_file + ": " + ec.message());
  }
  tls->ctx.set_verify_mode(ssl::verify_peer);
  return std::unique_ptr<UpstreamClient>(new UpstreamClient(std::move(tls)));
}

namespace {

struct Digests {
  std::string sha256, sha512_base64, sha1_hex;
  uint64_t size = 0;
};

Result<Digests> digest_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return sys_fail("open " + path);
  const EVP_MD* kinds[] = {EVP_sha256(), EVP_sha512(), EVP_sha1()};
  EVP_MD_CTX* ctx[3];
  for (int i = 0; i < 3; ++i) {
    ctx[i] = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx[i], kinds[i], nullptr);
  }
  Digests d;
  std::string buf(1 << 20, '\0');
  while (true) {
    ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0) {
      for (auto* c : ctx) EVP_MD_CTX_free(c);
      return sys_fail("read " + path);
    }
    if (n == 0) break;
    d.size += static_cast<uint64_t>(n);
    for (auto* c : ctx) EVP_DigestUpdate(c, buf.data(), static_cast<size_t>(n));
  }
  std::string out[3];
  for (int i = 0; i < 3; ++i) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_DigestFinal_ex(ctx[i], md, &len);
    EVP_MD_CTX_free(ctx[i]);
    out[i].assign(reinterpret_cast<char*>(md), len);
  }
  d.sha256 = hex_encode(out[0]);
  d.sha512_base64 = base64_encode(out[1]);
  d.sha1_hex = hex_encode(out[2]);
  return d;
}

}  // namespace

Result<Fetched> UpstreamClient::get(const std::string& start_url, const std::string& accept, const std::string& path,
                                    uint64_t max_bytes) {
  std::string url = start_url;
  for (int hop = 0; hop < 6; ++hop) {
    auto u = parse_url(url);
    if (!u) return std::unexpected(u.error());
    if (u->scheme != "https") return fail(ErrorCode::policy_denied, "upstream " + url + " is not https");
    std::string where = "upstream " + u->origin();
    asio::io_context ioc;
    asio::ip::tcp::resolver resolver(ioc);
    beast::ssl_stream<beast::tcp_stream> stream(ioc, tls_->ctx);
    boost::system::error_code ec;
    (void)asio::ip::make_address(u->host, ec);
    bool literal = !ec;
    SSL* handle = stream.native_handle();
    if (literal) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(handle), u->host.c_str());
    } else {
      SSL_set_tlsext_host_name(handle, u->host.c_str());
      X509_VERIFY_PARAM_set1_host(SSL_get0_param(handle), u->host.c_str(), 0);
    }
    beast::get_lowest_layer(stream).expires_after(timeout);
    auto results = resolver.resolve(u->host, u->port, ec);
    if (ec) return fail(ErrorCode::system, where + ": resolve: " + ec.message());
    beast::get_lowest_layer(stream).connect(results, ec);
    if (ec) return fail(ErrorCode::system, where + ": connect: " + ec.message());
    stream.handshake(ssl::stream_base::client, ec);
    if (ec) return fail(ErrorCode::system, where + ": TLS: " + ec.message());
    http::request<http::empty_body> req{http::verb::get, u->target, 11};
    req.set(http::field::host, u->port == "443" ? u->host : u->host + ":" + u->port);
    req.set(http::field::user_agent, "cela-package-gateway");
    if (!accept.empty()) req.set(http::field::accept, accept);
    http::write(stream, req, ec);
    if (ec) return fail(ErrorCode::system, where + ": write: " + ec.message());
    beast::flat_buffer buffer;
    http::response_parser<http::file_body> parser;
    if (max_bytes) parser.body_limit(max_bytes);
    else parser.body_limit(boost::none);
    parser.get().body().open(path.c_str(), beast::file_mode::write, ec);
    if (ec) return fail(ErrorCode::system, "open " + path + ": " + ec.message());
    http::read_header(stream, buffer, parser, ec);
    if (ec) return fail(ErrorCode::system, where + ": read: " + ec.message());
    unsigned status = parser.get().result_int();
    if (status >= 300 && status < 400 && parser.get().count(http::field::location)) {
      url = resolve_url(url, std::string(parser.get()[http::field::location]));
      continue;
    }
    Fetched f;
    f.status = status;
    f.final_url = url;
    f.content_type = std::string(parser.get()[http::field::content_type]);
    if (status != 200) return f;
    http::read(stream, buffer, parser, ec);
    if (ec == http::error::body_limit)
      return fail(ErrorCode::limit, where + ": the file is larger than " + std::to_string(max_bytes) + " bytes");
    if (ec) return fail(ErrorCode::system, where + ": read: " + ec.message());
    parser.get().body().close();
    stream.shutdown(ec);  // a TLS close_notify; errors here change nothing
    auto d = digest_file(path);
    if (!d) return std::unexpected(d.error());
    f.size = d->size;
    f.sha256 = d->sha256;
    f.sha512_base64 = d->sha512_base64;
    f.sha1_hex = d->sha1_hex;
    return f;
  }
  return fail(ErrorCode::system, "upstream " + start_url + ": too many redirects");
}

}  // namespace cela::net
