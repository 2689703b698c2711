#!/usr/bin/env python3
"""Pushgate as a homeserver's push gateway, checked by a real Synapse.

1. makes (or reuses) a venv with matrix-synapse (`python3 -m venv`, `pip install matrix-synapse`),
2. starts `pushgate mock --record` and `pushgate serve` with the Matrix Push Gateway API enabled on
   two addresses, 127.0.0.1 and ::1 (matrix.apps: com.example.ios -> APNs, com.example.android -> FCM),
3. generates a Synapse config (SQLite, loopback, ip_range_whitelist 127.0.0.0/8 so it may push to
   the gateway on loopback) and starts Synapse,
4. registers alice and bob with the shared secret; bob sets three http pushers at
   http://127.0.0.1:<port>/_matrix/push/v1/notify: an iOS one (pushkey: base64 of the token
   bytes), an iOS one whose token the mock APNs answers 410 Unregistered, and an Android one with
   `format: event_id_only`,
5. alice invites bob to a room, bob joins, alice sends a message, and then:
   - the mock APNs got the push at hex(base64-decoded pushkey) with Sygnal's alert
     (loc-key MSG_FROM_USER_WITH_CONTENT, loc-args [alice, the text]) and a badge,
   - the mock FCM got a data message with the event's `event_id`, `room_id` and `unread` count,
   - the dead token's pusher disappears from bob's `GET /_matrix/client/v3/pushers`,
6. `send_badge_counts: false` (Sygnal 0.17) is written for both apps and the gateway gets SIGHUP:
   `/api/config` shows it applied, and alice's next message reaches the mock APNs with its alert and
   no badge, and the mock FCM with `event_id` and `room_id` and no `unread`.

Exit status 0 when all holds.

    Tests/system/matrix-synapse-test.py [--pushgate .build/debug/pushgate] [--venv .build/synapse-venv]
"""
import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import ROOT, Run, find_pushgate, free_port, http, wait_for  # noqa: E402

NAME = "matrix-synapse-test"
LIVE_TOKEN = "abcdef01" + "0" * 40 + "0123456789abcdef"
DEAD_TOKEN = "dddddddd" + "0" * 40 + format(7, "016x")  # `pushgate mock` answers 410 Unregistered for it


def api(method, url, body=None, token=None, timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read().decode() or "{}")
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, {"raw": text}


def ensure_venv(path, run):
    python = os.path.join(path, "bin", "python")
    if os.path.exists(os.path.join(path, "bin", "register_new_matrix_user")):
        return python
    run.log(f"making a venv with matrix-synapse at {path} (pip install matrix-synapse)")
    subprocess.check_call([sys.executable, "-m", "venv", path])
    subprocess.check_call([python, "-m", "pip", "install", "-q", "matrix-synapse"])
    return python


def synapse_config(python, work, port):
    """Generates homeserver.yaml, then sets loopback, SQLite, the push allowlist and relaxed rate limits."""
    config = os.path.join(work, "homeserver.yaml")
    subprocess.check_call([python, "-m", "synapse.app.homeserver", "--server-name", "localhost", "--config-path", config,
                           "--data-directory", work, "--generate-config", "--report-stats=no"],
                          cwd=work, stdout=subprocess.DEVNULL)
    edit = f"""
import yaml
p = {config!r}
c = yaml.safe_load(open(p))
c["listeners"] = [{{"port": {port}, "bind_addresses": ["127.0.0.1"], "type": "http", "tls": False,
                   "x_forwarded": False, "resources": [{{"names": ["client"], "compress": False}}]}}]
c["database"] = {{"name": "sqlite3", "args": {{"database": {os.path.join(work, "homeserver.db")!r}}}}}
# Pushers may reach the gateway on loopback (blocked by default).
c["ip_range_whitelist"] = ["127.0.0.0/8"]
c["ip_range_allowlist"] = ["127.0.0.0/8"]
for k in ("rc_message", "rc_registration", "rc_login", "rc_joins", "rc_invites"):
    c[k] = {{"per_second": 1000, "burst_count": 1000}}
c["rc_login"] = {{"address": {{"per_second": 1000, "burst_count": 1000}}, "account": {{"per_second": 1000, "burst_count": 1000}},
                 "failed_attempts": {{"per_second": 1000, "burst_count": 1000}}}}
c["rc_invites"] = {{"per_room": {{"per_second": 1000, "burst_count": 1000}}, "per_user": {{"per_second": 1000, "burst_count": 1000}}}}
c["rc_joins"] = {{"local": {{"per_second": 1000, "burst_count": 1000}}, "remote": {{"per_second": 1000, "burst_count": 1000}}}}
c["suppress_key_server_warning"] = True
c["trusted_key_servers"] = []
c["report_stats"] = False
yaml.safe_dump(c, open(p, "w"))
"""
    subprocess.check_call([python, "-c", edit])
    return config


def sygnal_yaml(run):
    """`pushgate serve --config sygnal.yaml` on Sygnal 0.17.0's sygnal.yaml.sample, only its paths (and port) changed:
    as it is (no apps), then with its example APNs and FCM apps uncommented (their files the mock's, the FCM
    app's `send_badge_counts: false` too); `/api/config` shows the matrix section, the credentials redacted."""
    sample = open(os.path.join(ROOT, "Tests", "system", "fixtures", "sygnal.yaml.sample")).read()
    mockdir = os.path.join(run.work, "mock")
    for label, uncomment in (("sygnal-sample", False), ("sygnal-apps", True)):
        port = free_port()
        text = sample.replace("port: 5000", f"port: {port}").replace('"./sygnal.log"', f'"{run.work}/sygnal.log"')
        if uncomment:
            for old, new in (("  #com.example.myapp.ios:", "  com.example.myapp.ios:"), ("  #  type: apns", "    type: apns"),
                             ("  #  keyfile: my_key.p8", f"    keyfile: {mockdir}/mock-apns.p8"),
                             ("  #  key_id: MY_KEY_ID", "    key_id: MY_KEY_ID"), ("  #  team_id: MY_TEAM_ID", "    team_id: MY_TEAM_ID"),
                             ("  #  topic: MY_TOPIC", "    topic: MY_TOPIC"), ("  #im.vector.app:", "  im.vector.app:"),
                             ("  #  type: gcm", "    type: gcm"), ("  #  api_version: v1", "    api_version: v1"),
                             ("  #  project_id: project-id", "    project_id: project-id"),
                             ("  #  service_account_file: /path/to/service_account.json",
                              f"    service_account_file: {mockdir}/mock-fcm.json"),
                             ("  #  #send_badge_counts: false", "    send_badge_counts: false")):
                if old not in text:
                    run.fail(f"sygnal.yaml.sample has no line {old!r}")
                text = text.replace(old, new, 1)
        path = os.path.join(run.work, f"{label}.yaml")
        with open(path, "w") as f:
            f.write(text)
        run.snippet = path
        gw = run.start_gateway(label, {})
        wait_for(lambda: http("GET", f"http://127.0.0.1:{port}/health")[0] == 200, 30, f"{label}: the Matrix listener", name=NAME)
        status, body, _ = http("POST", f"http://127.0.0.1:{port}/_matrix/push/v1/notify",
                               {"notification": {"devices": [{"app_id": "org.unknown", "pushkey": "k"}]}})
        if status != 200 or json.loads(body) != {"rejected": ["k"]}:
            run.fail(f"{label}: unknown app_id: {status} {body}")
        # /api/config shows the matrix section (the sample's send_badge_counts: false uncommented),
        # the apps' credentials redacted.
        config = http("GET", gw.url + "/api/config")[1]
        if "matrix:" not in config or (uncomment and "send_badge_counts: false" not in config):
            run.fail(f"{label}: /api/config lacks the matrix section: {config}")
        if uncomment and (mockdir in config or "MY_KEY_ID" in config):
            run.fail(f"{label}: /api/config shows credentials: {config}")
        run.stop_gracefully(gw, label)
        run.log(f"pushgate serve --config {label}.yaml: started, /health 200, unknown app_id rejected, /api/config with its matrix section"
                + (" (send_badge_counts: false), credentials redacted" if uncomment else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pushgate", default=None)
    ap.add_argument("--venv", default=os.path.join(ROOT, ".build", "synapse-venv"))
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    run = Run(NAME, find_pushgate(args.pushgate, NAME), keep=args.keep)
    try:
        python = ensure_venv(os.path.abspath(args.venv), run)
        run.start_mock("--record")
        snippet = run.read_mock_apps()
        sygnal_yaml(run)
        matrix_port = free_port()
        config = os.path.join(run.work, "pushgate.yml")
        with open(config, "w") as f:
            f.write(snippet)
            f.write(f"""
queue:
  engine: sqlite
  sqlite:
    path: "{run.work}/queue.sqlite"
matrix:
  enabled: true
  address: [127.0.0.1, "::1"]
  port: {matrix_port}
  sync_timeout: 5
  apps:
    com.example.ios: {{ platform: ios }}
    com.example.android: {{ platform: android }}
""")
        run.snippet = config
        gw = run.start_gateway("matrix", {})
        notify_url = f"http://127.0.0.1:{matrix_port}/_matrix/push/v1/notify"
        for host in ("127.0.0.1", "[::1]"):
            wait_for(lambda: http("GET", f"http://{host}:{matrix_port}/health")[0] == 200, 30, f"the Matrix listener on {host}", name=NAME)
        status, text, _ = http("POST", f"http://[::1]:{matrix_port}/_matrix/push/v1/notify",
                               {"notification": {"devices": [{"app_id": "org.unknown", "pushkey": "k6"}]}})
        if status != 200 or json.loads(text) != {"rejected": ["k6"]}:
            run.fail(f"the listener on ::1: {status} {text}")
        run.log("Matrix listeners on 127.0.0.1 and ::1 (every matrix.address) answer")
        status, text, _ = http("POST", notify_url, {"notification": {"devices": [{"app_id": "org.unknown", "pushkey": "k"}]}})
        if status != 200 or json.loads(text) != {"rejected": ["k"]}:
            run.fail(f"unknown app_id: {status} {text}")
        status, text, _ = http("POST", notify_url, {"notification": "nope"})
        if status != 400 or json.loads(text).get("errcode") != "M_BAD_JSON":
            run.fail(f"malformed body: {status} {text}")
        run.log("gateway up: unknown app_id rejected (200), malformed body 400")

        hs_port = free_port()
        hs_config = synapse_config(python, run.work, hs_port)
        hs = f"http://127.0.0.1:{hs_port}"
        synapse = subprocess.Popen([python, "-m", "synapse.app.homeserver", "-c", hs_config], cwd=run.work,
                                   stdout=open(os.path.join(run.work, "synapse.log"), "w"), stderr=subprocess.STDOUT)
        run.procs.append(synapse)
        try:
            wait_for(lambda: api("GET", hs + "/_matrix/client/versions")[0] == 200, 120, "Synapse", name=NAME)
        except SystemExit:
            run.dump_log("synapse.log")
            raise
        run.log(f"Synapse up on {hs}")

        tokens = {}
        for user in ("alice", "bob"):
            subprocess.check_call([os.path.join(os.path.dirname(python), "register_new_matrix_user"), "-c", hs_config,
                                   "-u", user, "-p", f"{user}-password-1", "--no-admin", hs], stdout=subprocess.DEVNULL)
            status, body = api("POST", hs + "/_matrix/client/v3/login",
                               {"type": "m.login.password", "identifier": {"type": "m.id.user", "user": user},
                                "password": f"{user}-password-1"})
            if status != 200:
                run.fail(f"login {user}: {status} {body}")
            tokens[user] = body["access_token"]
        bob = tokens["bob"]

        live_key = base64.b64encode(bytes.fromhex(LIVE_TOKEN)).decode()
        dead_key = base64.b64encode(bytes.fromhex(DEAD_TOKEN)).decode()
        pushers = [("com.example.ios", live_key, {}), ("com.example.ios", dead_key, {}),
                   ("com.example.android", "fcm-token-1", {"format": "event_id_only"})]
        for app_id, key, extra in pushers:
            status, body = api("POST", hs + "/_matrix/client/v3/pushers/set",
                               {"kind": "http", "app_id": app_id, "pushkey": key, "app_display_name": "Test",
                                "device_display_name": "phone", "lang": "en", "append": True,
                                "data": dict({"url": notify_url}, **extra)}, token=bob)
            if status != 200:
                run.fail(f"pushers/set {app_id}: {status} {body}")
        status, body = api("GET", hs + "/_matrix/client/v3/pushers", token=bob)
        if len(body.get("pushers", [])) != 3:
            run.fail(f"bob's pushers: {body}")

        status, body = api("POST", hs + "/_matrix/client/v3/createRoom", {"preset": "private_chat", "is_direct": True},
                           token=tokens["alice"])
        room = body.get("room_id") or run.fail(f"createRoom: {status} {body}")
        api("POST", hs + f"/_matrix/client/v3/rooms/{room}/invite", {"user_id": "@bob:localhost"}, token=tokens["alice"])
        status, body = api("POST", hs + f"/_matrix/client/v3/join/{room}", {}, token=bob)
        if status != 200:
            run.fail(f"bob join: {status} {body}")
        text = "hello bob, from alice"
        status, body = api("PUT", hs + f"/_matrix/client/v3/rooms/{room}/send/m.room.message/txn1",
                           {"msgtype": "m.text", "body": text}, token=tokens["alice"])
        event_id = body.get("event_id") or run.fail(f"send: {status} {body}")
        run.log(f"alice sent {event_id} in {room}")

        def apns_push():
            for r in json.loads(http("GET", run.control + "/__mock/apns-requests")[1]):
                if r["token"] != LIVE_TOKEN or r["status"] != 200:
                    continue
                payload = json.loads(r["payload"])
                if payload.get("event_id") == event_id:
                    return payload
            return None
        wait_for(lambda: apns_push() is not None, 60, "the APNs push of the message", name=NAME)
        payload = apns_push()
        alert = payload["aps"].get("alert", {})
        if alert.get("loc-key") != "MSG_FROM_USER_WITH_CONTENT" or alert.get("loc-args") != ["alice", text]:
            run.fail(f"APNs alert is not Sygnal's: {payload}")
        if not isinstance(payload["aps"].get("badge"), int) or payload["aps"]["badge"] < 1:
            run.fail(f"APNs badge missing: {payload}")
        if payload.get("room_id") != room:
            run.fail(f"APNs room_id: {payload}")
        run.log(f"mock APNs got {json.dumps(payload)} at {LIVE_TOKEN[:12]}…")

        def fcm_message():
            for m in json.loads(http("GET", run.control + "/__mock/fcm-messages")[1]):
                data = m["message"].get("data", {})
                if m["target"] == "fcm-token-1" and data.get("event_id") == event_id:
                    return m["message"]
            return None
        wait_for(lambda: fcm_message() is not None, 60, "the FCM data message of the message", name=NAME)
        message = fcm_message()
        if message["data"].get("room_id") != room or "notification" in message:
            run.fail(f"FCM message is not an event_id_only data message: {message}")
        if not message["data"].get("unread", "").isdigit() or int(message["data"]["unread"]) < 1:
            run.fail(f"FCM data without the unread count (send_badge_counts defaults to true): {message}")
        run.log(f"mock FCM got data {json.dumps(message['data'])}")

        def keys():
            return sorted(p["pushkey"] for p in api("GET", hs + "/_matrix/client/v3/pushers", token=bob)[1].get("pushers", []))
        wait_for(lambda: dead_key not in keys(), 60, "the dead token's pusher to be deleted", name=NAME)
        if live_key not in keys() or "fcm-token-1" not in keys():
            run.fail(f"a live pusher was deleted: {keys()}")
        run.log(f"dead token's pusher deleted by Synapse; left: {keys()}")

        # Sygnal 0.17's send_badge_counts, applied by a reload (SIGHUP): no badge, no counts.
        with open(config) as f:
            text_config = f.read()
        for app_id, platform in (("com.example.ios", "ios"), ("com.example.android", "android")):
            old = f"    {app_id}: {{ platform: {platform} }}"
            if old not in text_config:
                run.fail(f"no line {old!r} in the gateway's config")
            text_config = text_config.replace(old, f"    {app_id}: {{ platform: {platform}, send_badge_counts: false }}")
        with open(config, "w") as f:
            f.write(text_config)
        os.kill(gw.pid, signal.SIGHUP)
        wait_for(lambda: http("GET", gw.url + "/api/config")[1].count("send_badge_counts: false") == 2, 30,
                 "send_badge_counts: false applied by SIGHUP", name=NAME)
        text2 = "second message, no badge"
        status, body = api("PUT", hs + f"/_matrix/client/v3/rooms/{room}/send/m.room.message/txn2",
                           {"msgtype": "m.text", "body": text2}, token=tokens["alice"])
        event2 = body.get("event_id") or run.fail(f"send: {status} {body}")

        def apns_push2():
            for r in json.loads(http("GET", run.control + "/__mock/apns-requests")[1]):
                if r["token"] == LIVE_TOKEN and r["status"] == 200 and json.loads(r["payload"]).get("event_id") == event2:
                    return json.loads(r["payload"])
            return None
        wait_for(lambda: apns_push2() is not None, 60, "the APNs push of the second message", name=NAME)
        payload2 = apns_push2()
        if "badge" in payload2["aps"] or payload2["aps"].get("alert", {}).get("loc-args") != ["alice", text2]:
            run.fail(f"APNs push with send_badge_counts: false: {payload2}")

        def fcm_message2():
            for m in json.loads(http("GET", run.control + "/__mock/fcm-messages")[1]):
                if m["target"] == "fcm-token-1" and m["message"].get("data", {}).get("event_id") == event2:
                    return m["message"]
            return None
        wait_for(lambda: fcm_message2() is not None, 60, "the FCM data message of the second message", name=NAME)
        data2 = fcm_message2()["data"]
        if "unread" in data2 or "missed_calls" in data2 or data2.get("room_id") != room:
            run.fail(f"FCM data with send_badge_counts: false: {data2}")
        run.log(f"after SIGHUP with send_badge_counts: false: APNs aps {json.dumps(payload2['aps'])}, FCM data {json.dumps(data2)}")
        run.log("PASSED")
    except SystemExit:
        run.dump_log("gateway-matrix.log")
        run.dump_log("synapse.log")
        raise
    finally:
        run.close()


if __name__ == "__main__":
    main()
