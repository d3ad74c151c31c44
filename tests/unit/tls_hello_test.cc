// The ClientHello scan against hellos made by OpenSSL itself (a client SSL writing into
// a memory BIO), split in every way a client or the network could split them.
#include "net/tls_hello.h"

#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>

#include <string>

namespace cela::net {
namespace {

using State = ClientHelloScan::State;

// The first flight of a TLS client for `server_name` (none when empty).
std::string openssl_hello(const std::string& server_name, size_t max_fragment = 0) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, in, out);
  if (!server_name.empty()) SSL_set_tlsext_host_name(ssl, server_name.c_str());
  if (max_fragment) SSL_set_max_send_fragment(ssl, max_fragment);
  SSL_set_connect_state(ssl);
  (void)SSL_do_handshake(ssl);  // wants to read: the hello is in `out`
  char* data = nullptr;
  long n = BIO_get_mem_data(out, &data);
  std::string hello(data, static_cast<size_t>(n));
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return hello;
}

TEST(TlsHello, ReadsTheServerNameOfARealHello) {
  std::string hello = openssl_hello("allowed.test");
  ASSERT_GT(hello.size(), 100u);
  auto scan = scan_client_hello(hello);
  ASSERT_EQ(scan.state, State::done);
  ASSERT_TRUE(scan.server_name);
  EXPECT_EQ(*scan.server_name, "allowed.test");
  // Bytes after the hello change nothing.
  EXPECT_EQ(*scan_client_hello(hello + "trailing").server_name, "allowed.test");
}

TEST(TlsHello, AHelloWithoutANameIsDoneWithout) {
  auto scan = scan_client_hello(openssl_hello(""));
  EXPECT_EQ(scan.state, State::done);
  EXPECT_FALSE(scan.server_name);
}

TEST(TlsHello, EveryPrefixAsksForMore) {
  std::string hello = openssl_hello("allowed.test");
  for (size_t n = 0; n < hello.size(); ++n)
    ASSERT_EQ(scan_client_hello(hello.substr(0, n)).state, State::need_more) << n;
}

TEST(TlsHello, AHelloSplitOverRecordsIsPutBackTogether) {
  // A client that sends the hello in small records (as one trying to hide the name would).
  std::string hello = openssl_hello("split.example.org", 512);
  std::string whole = openssl_hello("split.example.org");
  // Record-split by hand too: every record carries at most 7 bytes of the handshake.
  std::string body = whole.substr(5);
  std::string split;
  for (size_t i = 0; i < body.size(); i += 7) {
    std::string part = body.substr(i, 7);
    split += std::string("\x16\x03\x01", 3);
    split += static_cast<char>(part.size() >> 8);
    split += static_cast<char>(part.size() & 0xff);
    split += part;
  }
  for (const std::string& h : {hello, split}) {
    auto scan = scan_client_hello(h);
    ASSERT_EQ(scan.state, State::done);
    ASSERT_TRUE(scan.server_name);
    EXPECT_EQ(*scan.server_name, "split.example.org");
  }
}

TEST(TlsHello, OtherProtocolsAreNotTls) {
  EXPECT_EQ(scan_client_hello("SSH-2.0-OpenSSH_9.2\r\n").state, State::not_tls);
  EXPECT_EQ(scan_client_hello("GET / HTTP/1.1\r\n").state, State::not_tls);
}

TEST(TlsHello, BrokenHellosAreMalformed) {
  std::string hello = openssl_hello("allowed.test");
  // A handshake record that is not a ClientHello (a ServerHello, type 2).
  std::string server = hello;
  server[5] = 2;
  EXPECT_EQ(scan_client_hello(server).state, State::malformed);
  // Its length claims more than the bound.
  std::string huge = hello;
  huge[6] = '\x7f';
  EXPECT_EQ(scan_client_hello(huge).state, State::malformed);
  // A zero-length record, and a non-handshake record in the middle of the hello.
  EXPECT_EQ(scan_client_hello(std::string("\x16\x03\x01\x00\x00", 5)).state, State::malformed);
  std::string cut = hello.substr(0, 5) + hello.substr(5, 10);
  cut[3] = 0;
  cut[4] = 10;
  EXPECT_EQ(scan_client_hello(cut + std::string("\x17\x03\x03\x00\x01x", 6)).state, State::malformed);
  // The extensions' length runs past the hello's end.
  std::string bad_ext = hello;
  size_t sid = 5 + 4 + 2 + 32;
  size_t pos = sid + 1 + static_cast<uint8_t>(bad_ext[sid]);
  pos += 2 + ((static_cast<uint8_t>(bad_ext[pos]) << 8) | static_cast<uint8_t>(bad_ext[pos + 1]));
  pos += 1 + static_cast<uint8_t>(bad_ext[pos]);
  bad_ext[pos] = '\xff';
  EXPECT_EQ(scan_client_hello(bad_ext).state, State::malformed);
}

}  // namespace
}  // namespace cela::net
