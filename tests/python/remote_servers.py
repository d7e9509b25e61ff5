"""Servers on loopback for the remote-source tests and benchmarks (docs/remote.md).

- RangeServer: a folder over http://, GET with Range (bytes=A-B, A-), ETag and
  If-Match, keep-alive; Python's http.server with ranges added.
- FaultProxy: an HTTP proxy in front of either server (or of moto's S3) that
  fails a share of the requests on a schedule that depends only on the request
  count (never on time): 503 with S3's SlowDown body, a body cut short, a reset
  connection, or a stall; and, for benchmarks, a latency added to every request.
- moto_s3(): moto's S3 in server mode (ThreadedMotoServer) on a free port, with
  the environment the AWS tools read pointed at it.

Every server runs in daemon threads of the calling process, on 127.0.0.1 with
a port the kernel chose; stop() joins them.
"""
import http.client
import http.server
import os
import random
import re
import socket
import socketserver
import struct
import threading
import time

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        path = self.translate_path(self.path.split("?", 1)[0])
        self.server.requests += 1
        if not os.path.isfile(path):
            body = b"not found"
            self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        st = os.stat(path)
        size, etag = st.st_size, '"%x-%x"' % (st.st_mtime_ns, st.st_size)
        if self.headers.get("If-Match") not in (None, etag):
            self.send_response(412)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        first, last, status = 0, size - 1, 200
        m = _RANGE.match(self.headers.get("Range", "") or "")
        if m:
            first = int(m.group(1))
            last = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
            if first >= size:
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % size)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        n = max(0, last - first + 1)
        self.send_response(status)
        self.send_header("Content-Length", str(n))
        self.send_header("ETag", etag)
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (first, last, size))
        self.end_headers()
        with open(path, "rb") as f:
            f.seek(first)
            while n > 0:
                chunk = f.read(min(n, 1 << 20))
                if not chunk:
                    break
                self.wfile.write(chunk)
                n -= len(chunk)


class _Threading(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        pass  # a client that hangs up mid-body (an abandoned read, a hedge's loser) is no error here


class RangeServer:
    """root over http://127.0.0.1:PORT/ (url(rel) names a file under it)."""

    def __init__(self, root):
        root = os.path.abspath(root)

        def handler(*a, **k):
            return _RangeHandler(*a, directory=root, **k)

        self.httpd = _Threading(("127.0.0.1", 0), handler)
        self.httpd.requests = 0
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, rel=""):
        return "http://127.0.0.1:%d/%s" % (self.port, rel.lstrip("/"))

    @property
    def requests(self):
        return self.httpd.requests

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


_SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
             b"<Message>Please reduce your request rate.</Message></Error>")


class FaultProxy:
    """An HTTP/1.1 proxy to upstream_port on loopback.

    every: the k-th request (from 1) with k % every == 0 gets a fault, the kinds
    taken in turn from `kinds` ("503", "cut", "reset", "stall"); 0: none.
    latency: (lo, hi) seconds added before each request is forwarded, drawn by a
    generator seeded with `seed` (for benchmarks; tests leave it at 0).
    A stalled request is held until stop() or release().
    """

    def __init__(self, upstream_port, every=0, kinds=("503", "cut", "reset"), latency=(0.0, 0.0), seed=0):
        self.upstream = upstream_port
        self.every, self.kinds, self.latency = every, tuple(kinds), latency
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.count = 0
        self.faults = {k: 0 for k in ("503", "cut", "reset", "stall")}
        self.released = threading.Event()
        self.stopping = False
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.conns = set()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def url(self, rel=""):
        return "http://127.0.0.1:%d/%s" % (self.port, rel.lstrip("/"))

    def release(self):
        self.released.set()

    def stop(self):
        self.stopping = True
        self.released.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.thread.join()

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.conns.add(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _next(self):
        with self.lock:
            self.count += 1
            k = self.count
            lat = self.rng.uniform(*self.latency) if self.latency[1] > 0 else 0.0
            kind = None
            if self.every and k % self.every == 0:
                kind = self.kinds[(k // self.every - 1) % len(self.kinds)]
                self.faults[kind] += 1
            return kind, lat

    @staticmethod
    def _read_head(f):
        lines = []
        while True:
            line = f.readline(65537)
            if not line:
                return None
            if line in (b"\r\n", b"\n"):
                return lines
            lines.append(line)

    def _serve(self, c):
        f = c.makefile("rb")
        up = None
        try:
            while not self.stopping:
                head = self._read_head(f)
                if not head:
                    return
                method, target, _ = head[0].decode("latin-1").split(" ", 2)
                headers = []
                length = 0
                for line in head[1:]:
                    k, v = line.decode("latin-1").split(":", 1)
                    headers.append((k.strip(), v.strip()))
                    if k.strip().lower() == "content-length":
                        length = int(v)
                body = f.read(length) if length else b""
                kind, lat = self._next()
                if lat:
                    time.sleep(lat)
                if kind == "stall":
                    self.released.wait()
                    if self.stopping:
                        return
                    kind = None
                if kind == "reset":
                    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                if kind == "503":
                    c.sendall(b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: %d\r\n\r\n"
                              % len(_SLOWDOWN) + _SLOWDOWN)
                    continue
                if up is None:
                    up = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=300)
                up.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
                for k, v in headers:
                    up.putheader(k, v)
                up.endheaders(body or None)
                r = up.getresponse()
                data = r.read()
                out = ["HTTP/1.1 %d %s\r\n" % (r.status, r.reason)]
                for k, v in r.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        out.append("%s: %s\r\n" % (k, v))
                out.append("Content-Length: %d\r\n\r\n" % len(data))
                c.sendall("".join(out).encode("latin-1"))
                if kind == "cut" and len(data) > 1:
                    c.sendall(data[: len(data) // 2])
                    return
                c.sendall(data)
        except (OSError, ValueError, http.client.HTTPException):
            return
        finally:
            with self.lock:
                self.conns.discard(c)
            try:
                c.close()
            except OSError:
                pass
            if up is not None:
                up.close()


def moto_s3(monkeypatch=None):
    """moto's S3 on loopback: (server, endpoint URL). With monkeypatch, the AWS
    environment (keys, region, AWS_ENDPOINT_URL) points at it and the user's
    ~/.aws files are out of the way."""
    from moto.server import ThreadedMotoServer
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = "http://127.0.0.1:%d" % port
    if monkeypatch is not None:
        for k, v in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                     ("AWS_REGION", "us-east-1"), ("AWS_ENDPOINT_URL", endpoint),
                     ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials"),
                     ("AWS_CONFIG_FILE", "/nonexistent/config")):
            monkeypatch.setenv(k, v)
        for k in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL_S3"):
            monkeypatch.delenv(k, raising=False)
    return server, endpoint


def s3_client(endpoint):
    import boto3
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                        aws_secret_access_key="testing")
