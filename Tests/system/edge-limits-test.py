#!/usr/bin/env python3
"""Ingest edges under a hostile client: gRPC admission before buffering, per-address connection
limits, the TLS minimum. Real `pushgate mock` and `pushgate serve` processes on loopback.

Cases (each prints PASS/FAIL with what it measured; exit status 1 when any failed):

- grpc-flood: ingest keys configured; two raw HTTP/2 connections to the gRPC port, no key, each
  opening 100 streams that announce a 5 MB `proto.Gorush/Send` message and send it slowly (1 KiB
  per stream per round). The gateway's RSS must grow less than 100 MB, every such stream must be
  answered (refused) without its message, and a keyed `Send` on a third connection must be
  answered meanwhile.
- per-address-http / per-address-grpc: 4,500 idle TCP connections from 127.0.0.2 to the port;
  then `GET /healthz` and `GET /metrics` (HTTP) or `proto.Health/Check` (gRPC) from 127.0.0.1
  must answer within 1 s. The open-file limit of this script (and so of the gateway) is raised to
  fit.
- tls-minimum: with `core.ssl`, a client capped at TLS 1.1 (then 1.0) is refused on the HTTP and
  the gRPC port, and TLS 1.2 is served; with `core.tls_min_version: "1.3"` TLS 1.2 is refused on
  both. Skipped when this machine's OpenSSL cannot offer TLS 1.0/1.1 at all (checked against a
  local Python server).

HTTP/2 frames and HPACK (literals, no Huffman) are written by hand; answers are read as frames:
a gRPC reply is a DATA frame on the stream, a refusal a HEADERS frame with END_STREAM and no DATA.
Python 3 standard library only.

    Tests/system/edge-limits-test.py [--pushgate .build/debug/pushgate] [--only SUBSTRING] [--keep]
"""
import argparse
import os
import resource
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import warnings

# TLS 1.0 / 1.1 are deprecated in Python's ssl module: offering them is the point of the TLS case.
warnings.filterwarnings("ignore", category=DeprecationWarning)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Run, find_pushgate, free_port, http, rss_bytes  # noqa: E402

MB = 1024 * 1024
KEY = "edge-limits-key-0123456789"
ANDROID_TOKEN = "fcm-token-edge-limits"

# ---------------------------------------------------------------------------------------------
# HTTP/2 by hand (RFC 9113 frames, RFC 7541 literal header fields without indexing or Huffman).

DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7, 0x8
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream & 0x7FFFFFFF) + payload


def hpack_literal(name, value):
    def length(n):  # 7-bit prefix integer (RFC 7541 §5.1), H bit 0
        if n < 127:
            return bytes([n])
        out, n = [127], n - 127
        while n >= 128:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
        return bytes(out)
    name, value = name.encode(), value.encode()
    return b"\x00" + length(len(name)) + name + length(len(value)) + value


def request_headers(stream, path, key=None, end_stream=False, scheme="http"):
    fields = [(":method", "POST"), (":scheme", scheme), (":path", path), (":authority", "127.0.0.1"),
              ("content-type", "application/grpc"), ("te", "trailers")]
    if key:
        fields.append(("authorization", f"Bearer {key}"))
    block = b"".join(hpack_literal(n, v) for n, v in fields)
    return frame(HEADERS, END_HEADERS | (END_STREAM if end_stream else 0), stream, block)


def pb_string(field, s):
    b = s.encode()
    return pb_varint((field << 3) | 2) + pb_varint(len(b)) + b


def pb_varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def grpc_message(payload):
    return b"\x00" + struct.pack(">I", len(payload)) + payload


def send_request():
    """A gorush NotificationRequest: tokens [ANDROID_TOKEN], platform 2 (android), message "m"."""
    return pb_string(1, ANDROID_TOKEN) + pb_varint(2 << 3) + pb_varint(2) + pb_string(3, "edge limits")


class H2:
    """One client connection: frames out (DATA within the server's connection window), frames in
    (type, flags, stream, payload)."""

    def __init__(self, port, source="127.0.0.1", tls_context=None):
        raw = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
        self.sock = tls_context.wrap_socket(raw) if tls_context else raw
        self.buf = b""
        self.inbox = []
        self.window = 65535  # what the server lets this connection send (RFC 9113 §6.9)
        self.stream_windows = {}  # the same per stream (65535 until the server's updates)
        self.closed = False
        self.send(PREFACE + frame(SETTINGS, 0, 0))
        # A large receive window: the server's answers never wait for this client.
        self.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1 << 30)))

    def send(self, data):
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            self.closed = True
            return False

    def send_data(self, stream, payload, flags=0, timeout=10):
        """A DATA frame once the connection's and the stream's windows have room for it (reading the
        server's updates); False when they do not within `timeout`."""
        deadline = time.time() + timeout

        def room():
            return min(self.window, self.stream_windows.get(stream, 65535)) >= len(payload)

        while not room() and not self.closed and time.time() < deadline:
            self.poll(0.05)
        if not room():
            return False
        self.window -= len(payload)
        self.stream_windows[stream] = self.stream_windows.get(stream, 65535) - len(payload)
        return self.send(frame(DATA, flags, stream, payload))

    def poll(self, within):
        """Reads into the inbox (answering SETTINGS and PING) until frames arrive or `within` seconds pass."""
        deadline = time.time() + within
        before = len(self.inbox)
        while time.time() < deadline and not self.closed and len(self.inbox) == before:
            self.sock.settimeout(max(0.01, deadline - time.time()))
            try:
                chunk = self.sock.recv(65536)
            except (socket.timeout, ssl.SSLWantReadError):
                break
            except OSError:
                self.closed = True
                break
            if not chunk:
                self.closed = True
                break
            self.buf += chunk
            while len(self.buf) >= 9:
                n = int.from_bytes(self.buf[0:3], "big")
                if len(self.buf) < 9 + n:
                    break
                f = (self.buf[3], self.buf[4], int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF, self.buf[9:9 + n])
                self.buf = self.buf[9 + n:]
                if f[0] == SETTINGS and not f[1] & ACK:
                    self.send(frame(SETTINGS, ACK, 0))
                if f[0] == PING and not f[1] & ACK:
                    self.send(frame(PING, ACK, 0, f[3]))
                if f[0] == WINDOW_UPDATE and len(f[3]) == 4:
                    increment = int.from_bytes(f[3], "big") & 0x7FFFFFFF
                    if f[2] == 0:
                        self.window += increment
                    else:
                        self.stream_windows[f[2]] = self.stream_windows.get(f[2], 65535) + increment
                self.inbox.append(f)

    def frames(self, within):
        """The frames received so far, or (when none) those that arrive first within `within` seconds."""
        self.poll(within)
        out, self.inbox = self.inbox, []
        return out

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def grpc_answer(conn, stream, within):
    """'reply' (a DATA frame came on the stream), 'refused' (HEADERS with END_STREAM, no DATA),
    'reset' (RST_STREAM only) or None (nothing within the time)."""
    deadline = time.time() + within
    seen_headers_end = False
    while time.time() < deadline and not conn.closed:
        for t, flags, s, _ in conn.frames(0.2):
            if s != stream:
                continue
            if t == DATA:
                return "reply"
            if t == HEADERS and flags & END_STREAM:
                seen_headers_end = True
            if t == RST_STREAM and not seen_headers_end:
                return "reset"
        if seen_headers_end:
            return "refused"
    return "refused" if seen_headers_end else None


def keyed_send(port, source="127.0.0.1", within=10):
    """A whole `Send` with the key on a fresh connection: seconds until its reply, or None."""
    started = time.time()
    c = H2(port, source)
    try:
        c.send(request_headers(1, "/proto.Gorush/Send", key=KEY) + frame(DATA, END_STREAM, 1, grpc_message(send_request())))
        return time.time() - started if grpc_answer(c, 1, within) == "reply" else None
    finally:
        c.close()


def health_check(port, source="127.0.0.1", within=5, tls_context=None):
    started = time.time()
    c = H2(port, source, tls_context)
    try:
        c.send(request_headers(1, "/proto.Health/Check") + frame(DATA, END_STREAM, 1, grpc_message(b"")))
        return time.time() - started if grpc_answer(c, 1, within) == "reply" else None
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------

class Sampler(threading.Thread):
    """The peak RSS of one process, sampled every 20 ms."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.running = pid, rss_bytes(pid), True

    def run(self):
        while self.running:
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
            except OSError:
                return
            time.sleep(0.02)


class Cases:
    def __init__(self, run, only):
        self.run, self.only, self.passed, self.failed = run, only, 0, 0

    def case(self, name, fn):
        if self.only and self.only not in name:
            return
        started = time.time()
        try:
            ok, note = fn()
        except Exception as e:  # a case that raises fails, the others still run
            ok, note = False, f"raised {type(e).__name__}: {e}"
        line = f"{'PASS' if ok else 'FAIL'} {name} ({time.time() - started:.1f} s): {note}"
        print(line, flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1


def grpc_flood(run, gw, grpc_port, open_gateway=False):
    """2 connections x 100 streams announcing a large Send, each then sent 16,000 bytes a round (as
    fast as HTTP/2 flow control lets it, round after round) until 1 MB of it was sent or the stream
    was answered: up to 200 MB, which a gateway buffering the messages would hold. With keys (the
    default): 5 MB announced, no key, every stream must be refused on its HEADERS. Without keys
    (`open_gateway`, as gorush runs): 1,000,000 bytes announced (under grpc.max_message_bytes), the
    streams are admitted and grpc.max_pending_bytes_per_connection (4 MiB) must refuse the ones past it."""
    base = rss_bytes(gw.pid)
    sampler = Sampler(gw.pid)
    sampler.start()
    conns = [H2(grpc_port) for _ in range(2)]
    streams = list(range(1, 201, 2))  # 100 streams per connection
    announced = b"\x00" + struct.pack(">I", 1_000_000 if open_gateway else 5_000_000)
    chunk = b"\x0a" * 16000  # with the prefix, under the 16 KiB frame size
    target = 1_000_000  # bytes sent on a stream not answered
    answers = {}

    def collect(i, c, within):
        """Records the answers that arrive until none has for `within` seconds."""
        while True:
            got = c.frames(within)
            if not got:
                return
            for ftype, flags, s, _ in got:
                if ftype == DATA:
                    answers[(i, s)] = "reply"
                elif ftype == HEADERS and flags & END_STREAM:
                    answers.setdefault((i, s), "refused")  # a status: the trailers-only refusal
                elif ftype == RST_STREAM:
                    answers.setdefault((i, s), "reset")  # no status: e.g. cut by core.read_timeout

    for i, c in enumerate(conns):
        for s in streams:
            c.send(request_headers(s, "/proto.Gorush/Send"))
            c.send_data(s, announced + chunk)
            collect(i, c, 0)
    keyed = [None]

    def keyed_meanwhile():
        time.sleep(1)
        keyed[0] = keyed_send(grpc_port)

    t = threading.Thread(target=keyed_meanwhile)
    t.start()
    sent = {(i, s): len(chunk) for i in range(len(conns)) for s in streams}
    deadline = time.time() + 120
    while time.time() < deadline:
        pending = [k for k, n in sent.items() if k not in answers and n < target and not conns[k[0]].closed]
        if not pending:
            break
        for i, s in pending:
            if conns[i].send_data(s, chunk, timeout=0):  # only where the windows have room now
                sent[(i, s)] += len(chunk)
        for i, c in enumerate(conns):
            collect(i, c, 0.002)
    for i, c in enumerate(conns):
        collect(i, c, 1.0)
    t.join()
    sampler.running = False
    sampler.join()
    closed = sum(1 for c in conns if c.closed)
    for c in conns:
        c.close()
    growth = (sampler.peak - base) / MB
    refused = sum(1 for v in answers.values() if v == "refused")
    replied = sum(1 for v in answers.values() if v == "reply")
    reset = sum(1 for v in answers.values() if v == "reset")
    note = (f"{sum(sent.values()) / MB:.0f} MB sent; RSS {base / MB:.0f} -> peak {sampler.peak / MB:.0f} MB (+{growth:.0f} MB); {refused} of 200 "
            f"{'admitted' if open_gateway else 'unauthenticated'} streams refused, {reset} reset without a status, "
            f"{replied} answered with a message, "
            f"{closed} connections closed; {'a' if open_gateway else 'keyed'} Send "
            f"{'answered in %.2f s' % keyed[0] if keyed[0] is not None else 'NOT answered'}")
    if open_gateway:
        return growth < 100 and 0 < refused < 200 and replied == 0 and keyed[0] is not None, note
    return growth < 100 and refused == 200 and replied == 0 and keyed[0] is not None, note


def raise_nofile(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, n)) if hard != resource.RLIM_INFINITY else max(soft, n)
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return want


def flood(port, count, source="127.0.0.2"):
    """`count` idle TCP connections from `source`, opened one after the other, as a connection flood
    from one address does (each connect completes in the kernel; the gateway may close it right after)."""
    socks = []
    for _ in range(count):
        s = socket.socket()
        s.bind((source, 0))
        s.settimeout(5)
        if s.connect_ex(("127.0.0.1", port)) == 0:
            s.setblocking(False)
            socks.append(s)
        else:
            s.close()
    return socks


def still_open(socks):
    """How many of `socks` the server has not closed (a closed one reads EOF or a reset)."""
    n = 0
    for s in socks:
        try:
            data = s.recv(1, socket.MSG_PEEK)
            if data:
                n += 1
        except BlockingIOError:
            n += 1
        except OSError:
            pass
    return n


def timed(fn, times=5):
    """`fn` (seconds or None) run `times` times, 0.2 s apart: the slowest, None if any failed."""
    worst = 0.0
    for _ in range(times):
        took = fn()
        if took is None:
            return None
        worst = max(worst, took)
        time.sleep(0.2)
    return worst


def timed_get(url):
    started = time.time()
    try:
        status, _, _ = http("GET", url, timeout=5)
    except OSError:
        return None
    return time.time() - started if status == 200 else None


def ms(took):
    return "%.0f ms" % (took * 1000) if took is not None else "NO ANSWER within 5 s"


def per_address_http(run, gw):
    port = int(gw.url.rsplit(":", 1)[1])
    started = time.time()
    socks = flood(port, 4500)
    opened = time.time() - started
    try:
        time.sleep(1)
        health = timed(lambda: timed_get(gw.url + "/healthz"))
        metrics = timed(lambda: timed_get(gw.url + "/metrics"))
        held = still_open(socks)
    finally:
        for s in socks:
            s.close()
    note = (f"4500 connections from 127.0.0.2 opened in {opened:.1f} s, {held} still open after; from 127.0.0.1 "
            f"the slowest of 5 /healthz {ms(health)}, of 5 /metrics {ms(metrics)}")
    return health is not None and health < 1 and metrics is not None and metrics < 1 and held <= 256, note


def per_address_grpc(run, grpc_port):
    started = time.time()
    socks = flood(grpc_port, 4500)
    opened = time.time() - started
    try:
        time.sleep(1)
        took = timed(lambda: health_check(grpc_port, within=5))
        held = still_open(socks)
    finally:
        for s in socks:
            s.close()
    note = (f"4500 connections from 127.0.0.2 opened in {opened:.1f} s, {held} still open after; "
            f"the slowest of 5 Health/Check from 127.0.0.1 {ms(took)}")
    return took is not None and took < 1 and held <= 256, note


def tls_client(max_version, min_version=ssl.TLSVersion.MINIMUM_SUPPORTED, alpn=None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = min_version
    ctx.maximum_version = max_version
    if max_version in (ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1):
        ctx.set_ciphers("ALL:@SECLEVEL=0")
    if alpn:
        ctx.set_alpn_protocols(alpn)
    return ctx


HTTP_PROBE = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
GRPC_PROBE = PREFACE + frame(SETTINGS, 0, 0)


def handshake(port, ctx, probe):
    """The negotiated version, or None when the handshake failed or the server answered `probe` by
    closing (gRPC with tls_min_version 1.3 closes right after a TLS 1.2 handshake)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with ctx.wrap_socket(raw) as s:
                version = s.version()
                s.sendall(probe)
                s.settimeout(3)
                got = s.recv(9)
                return version if got else None
    except (ssl.SSLError, OSError):
        return None


def client_can_offer(version, cert, key):
    """Whether this Python's OpenSSL can negotiate `version` at all (a local server that allows it)."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    server_ctx.maximum_version = version
    try:
        server_ctx.set_ciphers("ALL:@SECLEVEL=0")
        server_ctx.load_cert_chain(cert, key)
    except ssl.SSLError:
        return False
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    result = [None]

    def serve():
        try:
            conn, _ = listener.accept()
            with server_ctx.wrap_socket(conn, server_side=True) as s:
                result[0] = s.version()
                s.sendall(b"x" * 9)
        except (ssl.SSLError, OSError):
            pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        with socket.create_connection(listener.getsockname(), timeout=5) as raw:
            with tls_client(version).wrap_socket(raw) as s:
                s.recv(9)
    except (ssl.SSLError, OSError):
        pass
    t.join(5)
    listener.close()
    return result[0] is not None


def start_tls_gateway(run, label, env_overrides):
    """`run.start_gateway` for a gateway serving TLS (the harness probes plain HTTP): ready once a
    TLS 1.2 handshake on its HTTP port succeeds."""
    port = free_port()
    env = dict(os.environ)
    env.update({"PUSHGATE_CORE_ADDRESS": "127.0.0.1", "PUSHGATE_CORE_PORT": str(port), "PUSHGATE_LOG_ACCESS_LEVEL": "warning"})
    env.update({k: str(v) for k, v in env_overrides.items()})
    p = subprocess.Popen([run.exe, "serve", "-c", run.snippet], env=env, cwd=run.work,
                         stdout=open(os.path.join(run.work, f"gateway-{label}.log"), "w"), stderr=subprocess.STDOUT)
    run.procs.append(p)
    ctx = tls_client(ssl.TLSVersion.MAXIMUM_SUPPORTED, min_version=ssl.TLSVersion.TLSv1_2)
    deadline = time.time() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as raw:
                with ctx.wrap_socket(raw):
                    break
        except (ssl.SSLError, OSError):
            if time.time() > deadline or p.poll() is not None:
                run.dump_log(f"gateway-{label}.log")
                run.fail(f"gateway {label} did not serve TLS")
            time.sleep(0.2)
    p.port = port
    return p


def tls_cases(run, cases, args):
    """tls-minimum-1.2 and tls-minimum-1.3 (see the module's docstring)."""
    cert = os.path.join(run.work, "mock", "mock-server-cert.pem")
    key = os.path.join(run.work, "mock", "mock-server-key.pem")
    old = [v for v in (ssl.TLSVersion.TLSv1_1, ssl.TLSVersion.TLSv1) if client_can_offer(v, cert, key)]
    if not old:
        print("SKIP tls-minimum: this Python's OpenSSL negotiates neither TLS 1.0 nor 1.1")
    for min_version, refused in (("1.2", old), ("1.3", [ssl.TLSVersion.TLSv1_2])):
        if not refused:
            continue
        tls_grpc = free_port()
        tgw = start_tls_gateway(run, f"tls-{min_version}", {
            "PUSHGATE_QUEUE_ENGINE": "memory", "PUSHGATE_CORE_SSL": "true", "PUSHGATE_CORE_CERT_PATH": cert,
            "PUSHGATE_CORE_KEY_PATH": key, "PUSHGATE_CORE_TLS_MIN_VERSION": min_version,
            "PUSHGATE_GRPC_ENABLED": "true", "PUSHGATE_GRPC_PORT": tls_grpc,
        })
        tport = tgw.port

        def tls_case(tport=tport, tls_grpc=tls_grpc, refused=refused, min_version=min_version):
            notes, ok = [], True
            for v in refused:
                for name, port, alpn, probe in (("HTTP", tport, None, HTTP_PROBE), ("gRPC", tls_grpc, ["h2"], GRPC_PROBE)):
                    got = handshake(port, tls_client(v, alpn=alpn), probe)
                    ok = ok and got is None
                    notes.append(f"{name} {v.name}: {'refused' if got is None else 'ACCEPTED ' + got}")
            allowed = ssl.TLSVersion.TLSv1_3 if min_version == "1.3" else ssl.TLSVersion.TLSv1_2
            for name, port, alpn, probe in (("HTTP", tport, None, HTTP_PROBE), ("gRPC", tls_grpc, ["h2"], GRPC_PROBE)):
                got = handshake(port, tls_client(allowed, min_version=allowed, alpn=alpn), probe)
                ok = ok and got is not None
                notes.append(f"{name} {allowed.name}: {got or 'REFUSED'}")
            return ok, "; ".join(notes)

        cases.case(f"tls-minimum-{min_version}", tls_case)
        tgw.terminate()


def wait_grpc(run, port):
    deadline = time.time() + 30
    while health_check(port, within=1) is None:
        if time.time() > deadline:
            run.fail(f"the gRPC port {port} did not answer Health/Check")
        time.sleep(0.2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushgate")
    ap.add_argument("--only")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    exe = find_pushgate(args.pushgate, "edge-limits-test")
    nofile = raise_nofile(20000)
    run = Run("edge-limits-test", exe, keep=args.keep)
    cases = Cases(run, args.only)
    try:
        run.start_mock()
        grpc_port = free_port()
        gw = run.start_gateway("plain", {
            "PUSHGATE_QUEUE_ENGINE": "memory", "PUSHGATE_CORE_API_KEYS": KEY,
            "PUSHGATE_GRPC_ENABLED": "true", "PUSHGATE_GRPC_PORT": grpc_port,
        })
        wait_grpc(run, grpc_port)
        cases.case("grpc-flood", lambda: grpc_flood(run, gw, grpc_port))
        if not args.only or "grpc-flood-open" in args.only:
            open_grpc = free_port()
            ogw = run.start_gateway("open", {
                "PUSHGATE_QUEUE_ENGINE": "memory", "PUSHGATE_GRPC_ENABLED": "true", "PUSHGATE_GRPC_PORT": open_grpc,
            })
            wait_grpc(run, open_grpc)
            cases.case("grpc-flood-open", lambda: grpc_flood(run, ogw, open_grpc, open_gateway=True))
            ogw.terminate()
        if nofile < 9500:
            print(f"SKIP per-address cases: open-file limit {nofile} (< 9500)")
        else:
            cases.case("per-address-http", lambda: per_address_http(run, gw))
            cases.case("per-address-grpc", lambda: per_address_grpc(run, grpc_port))

        if not args.only or "tls" in args.only:
            tls_cases(run, cases, args)
    finally:
        run.close()
    print(f"{cases.passed} passed, {cases.failed} failed", flush=True)
    sys.exit(1 if cases.failed else 0)


if __name__ == "__main__":
    main()
