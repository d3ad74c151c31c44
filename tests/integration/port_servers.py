"""Servers the port-proxy tests and bench/ports.py run INSIDE a sandbox (python3
standard library only): an echo server for any method, and a minimal RFC 6455
WebSocket echo on /ws. Usage inside: python3 port_servers.py PORT."""
import base64
import hashlib
import json
import struct
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Header and body in one write (each request ends with a flush): unbuffered, the
    # header goes alone and a keep-alive client waits out a delayed ACK per request.
    wbufsize = 1 << 16

    def log_message(self, *args):
        pass

    def _echo(self):
        length = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        else:
            body = self.rfile.read(length)
        answer = json.dumps({
            "method": self.command,
            "path": self.path,
            "headers": [[k, v] for k, v in self.headers.items()],
            "body_len": len(body),
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "body": body.decode("latin-1") if len(body) < 4096 else "",
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.send_header("X-Echo", "yes")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer)

    def do_GET(self):
        if self.path.startswith("/ws") and self.headers.get("Upgrade", "").lower() == "websocket":
            return self._websocket()
        if self.path.startswith("/stream"):
            # A close-delimited body of N bytes written in pieces (no Content-Length).
            n = int(self.path.split("=")[1])
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            chunk = b"z" * 65536
            while n > 0:
                self.wfile.write(chunk[: min(n, len(chunk))])
                n -= len(chunk)
            self.close_connection = True
            return
        return self._echo()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _echo

    def _websocket(self):
        key = self.headers["Sec-WebSocket-Key"]
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        r, w = self.rfile, self.wfile
        while True:
            head = r.read(2)
            if len(head) < 2:
                return
            opcode = head[0] & 0x0F
            length = head[1] & 0x7F
            if length == 126:
                length = struct.unpack(">H", r.read(2))[0]
            elif length == 127:
                length = struct.unpack(">Q", r.read(8))[0]
            mask = r.read(4) if head[1] & 0x80 else b"\0\0\0\0"
            data = bytearray(r.read(length))
            for i in range(len(data)):
                data[i] ^= mask[i % 4]
            if opcode == 8:
                w.write(bytes([0x88, len(data)]) + bytes(data[:125]))
                w.flush()
                return
            if opcode == 9:  # ping -> pong
                opcode = 10
            out = bytes([0x80 | opcode])
            if len(data) < 126:
                out += bytes([len(data)])
            elif len(data) < 65536:
                out += bytes([126]) + struct.pack(">H", len(data))
            else:
                out += bytes([127]) + struct.pack(">Q", len(data))
            w.write(out + bytes(data))
            w.flush()


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
