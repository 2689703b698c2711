#!/usr/bin/env python3
"""The status page `/ui` in a real browser (headless Chromium, driven over the DevTools protocol).

1. starts `pushgate mock` and `pushgate serve` (memory queue) with an admin key, an ingest key and
   a second app, chat, and sends deliveries in rounds over ~20 s to every provider (some to dead
   tokens),
2. opens /ui without a key: the page shows the key form and no figure,
3. types the admin key (as an operator would) and waits for the figures: every number on the page
   (totals, per app pending and per provider push_success / push_error, dead tokens) must equal
   `/api/stat/app` / `/api/stat/live` read with the same key,
4. checks the "Connection pools" table: every pool labelled (provider, environment, app, key), the
   pools sharing an origin told apart, as `/api/stat/live` has them,
5. looks up a notification whose notif_id is markup (`<img src=x onerror=…>`): shown as text, no
   element made from it, no script run,
6. saves a screenshot (docs/ui.png by default).

Needs the `chromium` command (Debian package chromium). Python 3 standard library only (the
DevTools websocket is spoken here).

    Tests/system/ui-test.py [--pushgate .build/debug/pushgate] [--screenshot docs/ui.png]
"""
import argparse
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import ROOT, Run, bench_token, find_pushgate, wait_for  # noqa: E402

ADMIN = "ui-admin-key-0123456789abcdef"
INGEST = "ui-ingest-key-0123456789abcdef"
CHAT = "ui-chat-key-0123456789abcdef"
DEAD = "dddddddd" + "0" * 55 + "1"
XSS_ID = '<img src=x onerror="window.__xss=1">"&\''


def call(method, url, key=None, body=None, timeout=30):
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


class DevTools:
    """A client of one page's DevTools websocket (RFC 6455 text frames, masked as a client must)."""

    def __init__(self, ws_url, timeout=30):
        u = urllib.parse.urlparse(ws_url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise RuntimeError("DevTools closed the connection during the handshake")
            head += chunk
        head, self.buf = head.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise RuntimeError(f"DevTools handshake refused: {head[:200]!r}")
        self.next_id = 0

    def _exact(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buf)))
            if not chunk:
                raise RuntimeError("DevTools closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _send(self, payload, opcode=0x1):
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
        else:
            head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
        mask = os.urandom(4)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def _message(self):
        parts = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = int.from_bytes(self._exact(2), "big")
            elif n == 127:
                n = int.from_bytes(self._exact(8), "big")
            mask = self._exact(4) if b1 & 0x80 else None
            payload = self._exact(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            opcode = b0 & 0x0F
            if opcode == 0x9:
                self._send(payload, 0xA)
                continue
            if opcode == 0x8:
                raise RuntimeError("DevTools closed the websocket")
            parts += payload
            if b0 & 0x80:
                return json.loads(parts)

    def call(self, method, **params):
        self.next_id += 1
        self._send(json.dumps({"id": self.next_id, "method": method, "params": params}).encode())
        while True:
            msg = self._message()
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def eval(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"page script failed: {r['exceptionDetails']}")
        return r["result"].get("value")


def start_chromium(run, width=1280, height=1600):
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        run.fail("no chromium command (apt-get install chromium)")
    profile = tempfile.mkdtemp(prefix="pushgate-ui-chromium-")
    proc = subprocess.Popen(
        [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
         "--disable-extensions", "--disable-background-networking", "--disable-sync", "--hide-scrollbars",
         "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", f"--user-data-dir={profile}",
         f"--window-size={width},{height}", "about:blank"],
        stdout=open(os.path.join(run.work, "chromium.log"), "w"), stderr=subprocess.STDOUT)
    run.procs.append(proc)
    active = os.path.join(profile, "DevToolsActivePort")
    wait_for(lambda: os.path.exists(active) and len(open(active).read().split()) >= 2, 60, "Chromium's DevTools port",
             name=run.name)
    port = int(open(active).read().split()[0])
    targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
    page = next(t for t in targets if t.get("type") == "page")
    return proc, DevTools(page["webSocketDebuggerUrl"]), profile


def wait_page(run, tab, expression, what, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if tab.eval(expression):
            return
        time.sleep(0.2)
    state = tab.eval("document.getElementById('state').textContent")
    run.fail(f"the page did not show {what} within {timeout} s; state: {state!r}")


def send_rounds(run, url, rounds, per_round):
    """Deliveries to every provider, spread over `rounds` seconds-apart rounds; returns one notif_id."""
    seq = 0
    for r in range(rounds):
        ios = [bench_token(seq + i) for i in range(per_round)]
        seq += per_round
        notes = [
            {"tokens": ios, "platform": 1, "message": "ui", "topic": "com.example.app"},
            {"tokens": [f"fcm-token-{r}-{i}" for i in range(per_round // 2)], "platform": 2, "message": "ui"},
            {"tokens": [f"hms-token-{r}-{i}" for i in range(per_round // 4)], "platform": 3, "message": "ui"},
        ]
        if r % 2 == 0:
            notes.append({"tokens": [DEAD], "platform": 1, "message": "ui", "topic": "com.example.app"})
        for key, body in ((INGEST, {"notifications": notes}),
                          (CHAT, {"notifications": [{"tokens": [bench_token(100000 + seq + i) for i in range(per_round // 3)],
                                                     "platform": 1, "message": "ui"}]})):
            status, text, _ = call("POST", url + "/api/push", key, body)
            if status != 200:
                run.fail(f"/api/push answered {status}: {text}")
        time.sleep(2.5)
    # The notification looked up in the page: its id is markup, one live and one dead token.
    body = {"notifications": [{"notif_id": XSS_ID, "tokens": [bench_token(999999), DEAD], "platform": 1, "message": "ui",
                               "topic": "com.example.app"}]}
    status, text, _ = call("POST", url + "/api/push", INGEST, body)
    if status != 200:
        run.fail(f"/api/push answered {status}: {text}")


def check_pool_labels(run, tab, url):
    """The "Connection pools" table says what each pool is for: every row has a label, no two rows
    are alike (origin and label), and the pools that share an origin (APNs production and sandbox of
    the default app and of chat, all on the one mock) are told apart by environment, app and key,
    as /api/stat/live has them."""
    live = json.loads(call("GET", url + "/api/stat/live", ADMIN)[1])
    shown = tab.eval("[...document.querySelectorAll('#pools tbody tr')].map(r => [...r.cells].map(c => c.textContent))")
    heads = tab.eval("[...document.querySelectorAll('#pools thead th')].map(c => c.textContent)")
    if heads[:2] != ["origin", "pool"]:
        run.fail(f"pool table columns: {heads}")
    rows = [(r[0], r[1]) for r in shown]
    if any(not label for _, label in rows):
        run.fail(f"a pool row without a label: {shown}")
    if len(set(rows)) != len(rows):
        run.fail(f"two pool rows alike: {shown}")
    expected = sorted((p["origin"], p["label"]) for p in live["pools"])
    if sorted(rows) != expected:
        run.fail(f"pool rows {sorted(rows)} differ from /api/stat/live {expected}")
    apns = [p for p in live["pools"] if p["provider"] == "apns"]
    by_origin = {}
    for p in apns:
        by_origin.setdefault(p["origin"], []).append(p)
    shared = max(by_origin.values(), key=len, default=[])
    seen = {(p["environment"], p["app"], p["key_id"]) for p in shared}
    wanted = {("production", "default"), ("sandbox", "default"), ("production", "chat"), ("sandbox", "chat")}
    if len(shared) < 4 or not wanted <= {(e, a) for e, a, _ in seen} or len(seen) != len(shared):
        run.fail(f"the APNs pools of one origin are not told apart: {shared}")
    if not all(p["key_id"] for p in shared) or not any(p["key_id"] == "MOCKAPP001" for p in shared if p["app"] == "chat"):
        run.fail(f"APNs pools without their key id: {shared}")
    for p in shared:
        for part in (p["environment"], "app " + p["app"], "key " + p["key_id"]):
            if part not in p["label"]:
                run.fail(f"label {p['label']!r} lacks {part!r}")
    run.log(f"{len(rows)} pool rows, each labelled and distinct; {len(shared)} on {shared[0]['origin']}: "
            + "; ".join(sorted(p["label"] for p in shared)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushgate", default=None)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--per-round", type=int, default=120)
    ap.add_argument("--screenshot", default=os.path.join(ROOT, "docs", "ui.png"))
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    run = Run("ui-test", find_pushgate(args.pushgate, "ui-test"), keep=args.keep)
    profile = None
    try:
        run.start_mock("--apns-latency-ms", "3", "--fcm-latency-ms", "5")
        snippet = run.read_mock_apps()
        config = os.path.join(run.work, "ui.yml")
        open(config, "w").write(snippet + "\napps:\n" + run.app_yaml("chat", CHAT, 1))
        run.snippet = config
        gw = run.start_gateway("1", {
            "PUSHGATE_QUEUE_ENGINE": "memory",
            "PUSHGATE_CORE_API_KEYS": INGEST,
            "PUSHGATE_CORE_ADMIN_KEYS": ADMIN,
            "PUSHGATE_CORE_SHUTDOWN_TIMEOUT": 1,
        })
        proc, tab, profile = start_chromium(run)
        tab.call("Page.enable")
        tab.call("Runtime.enable")

        # Without a key: the key form, and not one figure.
        tab.call("Page.navigate", url=gw.url + "/ui")
        wait_page(run, tab, "!!document.getElementById('keyform') && !document.getElementById('keyform').classList.contains('hidden')",
                  "the key form")
        shown = tab.eval("[...document.querySelectorAll('[data-k]')].map(e => e.textContent).filter(t => t !== '–')")
        if shown or not tab.eval("document.getElementById('main').classList.contains('hidden')"):
            run.fail(f"figures shown without a key: {shown}")
        state = tab.eval("document.getElementById('state').textContent")
        run.log(f"without a key the page shows the key form only ({state!r})")

        send_rounds(run, gw.url, args.rounds, args.per_round)

        def settled():
            app = json.loads(call("GET", gw.url + "/api/stat/app", ADMIN)[1])
            return app["busy_workers"] == 0 and app["success_tasks"] + app["failure_tasks"] == app["submitted_tasks"]
        wait_for(settled, 120, "every delivery to end", interval=0.2, name=run.name)

        # The operator types the admin key; the script sends it as a Bearer header.
        tab.eval(f"document.getElementById('key').value = {json.dumps(ADMIN)}; document.getElementById('keyform').requestSubmit(); true")
        wait_page(run, tab, "!!document.body.dataset.loaded", "the figures")
        time.sleep(2.5)  # one more refresh after the deliveries ended
        values = tab.eval("Object.fromEntries([...document.querySelectorAll('[data-k]')].filter(e => e.dataset.k)"
                          ".map(e => [e.dataset.k, e.textContent]))")
        app = json.loads(call("GET", gw.url + "/api/stat/app", ADMIN)[1])
        live = json.loads(call("GET", gw.url + "/api/stat/live", ADMIN)[1])
        expected = {k: app[k] for k in ("total_count", "success_tasks", "failure_tasks", "busy_workers")}
        expected["dead_tokens.total"] = live["dead_tokens"]["total"]
        expected["queue.pending"] = live["queue"]["pending"]
        for app_id, a in app["apps"].items():
            expected[f"apps.{app_id}.pending"] = a["pending"]
            for p in live["providers"]:
                expected[f"apps.{app_id}.{p}.push_success"] = a[p]["push_success"]
                expected[f"apps.{app_id}.{p}.push_error"] = a[p]["push_error"]
        for p in live["providers"]:
            for c in ("delivered", "token_dead"):
                expected[f"answers.{p}.{c}"] = f"{live['answers'][p]['window'][c]} ({live['answers'][p]['total'][c]})"
        wrong = {k: (values.get(k), v) for k, v in expected.items() if values.get(k) != str(v)}
        if wrong:
            run.fail(f"the page differs from the JSON routes (shown, expected): {wrong}")
        if app["success_tasks"] < args.rounds * args.per_round or live["dead_tokens"]["total"] < 1:
            run.fail(f"too few deliveries to compare: {app}")
        run.log(f"{len(expected)} figures on the page equal /api/stat/app and /api/stat/live "
                f"(total_count {app['total_count']}, success_tasks {app['success_tasks']}, failure_tasks {app['failure_tasks']}, "
                f"dead tokens {live['dead_tokens']['total']}, apps {sorted(app['apps'])})")
        paths = tab.eval("document.querySelectorAll('#chart path').length")
        pools = tab.eval("document.querySelectorAll('#pools tbody tr').length")
        if paths < len(live["providers"]) or pools < 1:
            run.fail(f"chart lines {paths} (providers {live['providers']}), pool rows {pools}")
        check_pool_labels(run, tab, gw.url)

        # A notif_id made of markup is shown as text.
        tab.eval(f"document.getElementById('notif').value = {json.dumps(XSS_ID)}; "
                 "document.getElementById('lookup').requestSubmit(); true")
        wait_page(run, tab, "!document.getElementById('deliveries').classList.contains('hidden')", "the lookup's deliveries")
        rows = tab.eval("[...document.querySelectorAll('#deliveries tbody tr')].map(r => [...r.cells].map(c => c.textContent))")
        injected = tab.eval("document.querySelectorAll('main img, #deliveries img').length + (window.__xss ? 100 : 0)")
        states = sorted(r[3] for r in rows)
        if injected or states != ["delivered", "failed"]:
            run.fail(f"lookup: rows {rows}, injected elements/scripts {injected}")
        run.log(f"lookup of a notif_id made of markup: {len(rows)} deliveries shown as text ({states}), no element or script from it")

        csp = call("GET", gw.url + "/ui")[2].get("Content-Security-Policy", "")
        if "script-src 'self'" not in csp:
            run.fail(f"/ui CSP: {csp!r}")

        if args.screenshot:
            height = tab.eval("Math.ceil(document.documentElement.scrollHeight)")
            tab.call("Emulation.setDeviceMetricsOverride", width=1280, height=min(max(height, 800), 2400), deviceScaleFactor=1,
                     mobile=False)
            time.sleep(0.5)
            shot = tab.call("Page.captureScreenshot", format="png")
            os.makedirs(os.path.dirname(os.path.abspath(args.screenshot)), exist_ok=True)
            with open(args.screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
            run.log(f"screenshot: {args.screenshot}")
        run.log("PASSED")
    finally:
        run.close()
        if profile:
            shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    main()
