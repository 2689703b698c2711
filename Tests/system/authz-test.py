#!/usr/bin/env python3
"""Who may reach what, with a real `pushgate serve` and raw sockets (exact request lines).

Starts `pushgate mock` and one gateway on a SQLite queue with an admin key, `core.metrics_admin_only`,
and two apps, chat and wallet, each with its own key and APNs key. Then:

1. every admin route (`/api/config`, `/api/stat/app`, `/api/stat/go`, `/sys/stats`, `/metrics`,
   `POST /api/reload`) under every spelling a router might fold (`//`, trailing `/`, `.`, `..`,
   `%2F`, case, query string): chat's key gets 401/403/404 only, never the handler; no key gets 401;
   the admin key gets 200 on the route;
2. `POST /api/reload/` with chat's key after the config file changed: 403 and no reload (the app the
   file adds is unknown until the admin key reloads);
3. a notification of chat's read with wallet's key answers byte for byte as an unknown id (404);
4. chat's key cannot manage APNs broadcast channels of another bundle id (`topic`): 403.

Exit status 0 when all holds. Python 3 standard library only, loopback only.

    Tests/system/authz-test.py [--pushgate .build/debug/pushgate]
"""
import argparse
import json
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Run, bench_token, find_pushgate, wait_for  # noqa: E402

ADMIN = "authz-admin-key-0123456789"
CHAT = "authz-chat-key-0123456789"
WALLET = "authz-wallet-key-0123456789"


def request(port, method, target, key=None, body=None, timeout=20):
    """One HTTP/1.1 request with `target` written as given; (status, body text)."""
    data = json.dumps(body).encode() if body is not None else b""
    head = f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {len(data)}\r\n"
    if body is not None:
        head += "Content-Type: application/json\r\n"
    if key:
        head += f"Authorization: Bearer {key}\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head.encode() + b"\r\n" + data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    headers, _, rest = out.partition(b"\r\n\r\n")
    status = int(headers.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" in headers.lower():
        body_out, b = b"", rest
        while b:
            size, _, b = b.partition(b"\r\n")
            n = int(size, 16)
            if n == 0:
                break
            body_out, b = body_out + b[:n], b[n + 2:]
        rest = body_out
    return status, rest.decode("utf-8", "replace")


def spellings(route):
    segs = route.strip("/").split("/")
    tail = "/".join(segs[1:])
    out = [route, route + "/", route + "//", "/" + route, route + "?x=1", route + "/?x=1", route + "/.",
           "/." + route, route.upper(), f"/{segs[0]}/../{route.lstrip('/')}", "/" + segs[0].replace("a", "%61", 1) + (f"/{tail}" if tail else "")]
    if tail:
        out += [f"/{segs[0]}//{tail}", f"/{segs[0]}/./{tail}", f"/{segs[0]}%2F{tail}", f"/{segs[0]}%2f{tail}"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushgate", default=None)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    run = Run("authz-test", find_pushgate(args.pushgate, "authz-test"), keep=args.keep)
    failures = []

    def check(ok, what):
        print(f"{'PASS' if ok else 'FAIL'} {what}", flush=True)
        if not ok:
            failures.append(what)

    try:
        run.start_mock()
        snippet = run.read_mock_apps()
        config = os.path.join(run.work, "authz.yml")
        base = snippet + "\napps:\n" + run.app_yaml("chat", CHAT, 1) + run.app_yaml("wallet", WALLET, 2)
        open(config, "w").write(base)
        run.snippet = config
        gw = run.start_gateway("1", {
            "PUSHGATE_QUEUE_ENGINE": "sqlite",
            "PUSHGATE_QUEUE_SQLITE_PATH": os.path.join(run.work, "store", "pushgate.sqlite"),
            "PUSHGATE_CORE_ADMIN_KEYS": ADMIN,
            "PUSHGATE_CORE_METRICS_ADMIN_ONLY": "true",
        })
        port = int(gw.url.rsplit(":", 1)[1])

        # 1. Admin routes under every spelling.
        routes = [("GET", "/api/config"), ("GET", "/api/stat/app"), ("GET", "/api/stat/go"), ("GET", "/sys/stats"),
                  ("GET", "/metrics"), ("POST", "/api/reload")]
        for method, route in routes:
            for target in spellings(route):
                status, text = request(port, method, target, key=CHAT)
                check(status in (401, 403, 404) and f'"code":{status}' in text, f"{method} {target} with chat's key: {status}")
                status, _ = request(port, method, target)
                check(status == 401, f"{method} {target} without a key: {status}")
            if method == "GET":
                status, _ = request(port, method, route, key=ADMIN)
                check(status == 200, f"{method} {route} with the admin key: {status}")

        # 2. A reload asked for with chat's key does not run: the app added to the file stays unknown.
        open(config, "w").write(base + run.app_yaml("later", "authz-later-key-0123456789", 1))
        for target in ("/api/reload/", "//api/reload", "/api//reload"):
            status, _ = request(port, "POST", target, key=CHAT)
            check(status == 403, f"POST {target} with chat's key: {status}")
        status, _ = request(port, "POST", "/api/push", key="authz-later-key-0123456789",
                            body={"notifications": [{"tokens": [bench_token(1)], "platform": 1, "message": "m"}]})
        check(status == 401, f"the app the file adds is not loaded by chat's reloads: {status}")
        status, text = request(port, "POST", "/api/reload", key=ADMIN)
        check(status == 200 and "later" in text, f"POST /api/reload with the admin key: {status} {text[:120]}")

        # 3. Another app's notification id is answered as an unknown one.
        status, _ = request(port, "POST", "/api/push", key=CHAT, body={
            "notifications": [{"notif_id": "chat-secret-1", "tokens": [bench_token(2)], "platform": 1, "message": "m"}]})
        check(status == 200, f"chat's push: {status}")
        wait_for(lambda: request(port, "GET", "/api/push/chat-secret-1", key=CHAT)[0] == 200, 30, "chat's status", name=run.name)
        other = request(port, "GET", "/api/push/chat-secret-1", key=WALLET)
        unknown = request(port, "GET", "/api/push/chat-secret-2", key=WALLET)
        check(other[0] == 404 and other[1].replace("chat-secret-1", "chat-secret-2") == unknown[1],
              f"wallet's key on chat's notification answers as on an unknown one: {other[0]} {other[1][:120]}")

        # 4. Channels of another bundle id.
        for method, target, body in [
            ("POST", "/api/apns/channels", {"message_storage_policy": 0, "topic": "com.example.wallet"}),
            ("GET", "/api/apns/channels?topic=com.example.wallet", None),
            ("DELETE", "/api/apns/channels/dGVzdA%3D%3D?topic=com.example.wallet", None),
        ]:
            status, text = request(port, method, target, key=CHAT, body=body)
            check(status == 403 and "topic" in text, f"{method} {target} with chat's key: {status}")

        if gw.poll() is not None:
            check(False, "the gateway is still running")
    finally:
        run.close()
    if failures:
        print(f"authz-test: FAILED: {len(failures)} checks", flush=True)
        sys.exit(1)
    print("authz-test: PASSED", flush=True)


if __name__ == "__main__":
    main()
