"""A gorush gRPC client made by another implementation: Python stubs generated at run time by
grpcio-tools from the committed gorush.proto, driving Pushgate's gRPC listener.

    python gorush_grpc_client.py --proto Sources/GorushRPC/Proto/gorush.proto --port 9000 \
        --ios-token <hex> --android-token <fcm token> [--key <api key>] [--ca <CA PEM for TLS>]

Prints one JSON object: what each call answered (status names, reply fields, error codes and details).
"""
import argparse
import importlib
import json
import os
import sys
import tempfile


def generate_stubs(proto: str, out: str) -> None:
    import grpc_tools
    from grpc_tools import protoc

    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{os.path.dirname(os.path.abspath(proto))}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        os.path.abspath(proto),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--proto", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ios-token", required=True)
    ap.add_argument("--android-token", required=True)
    ap.add_argument("--key", default="")
    ap.add_argument("--ca", default="", help="PEM trust root: connect over TLS (core.ssl) instead of plaintext")
    a = ap.parse_args()

    out = tempfile.mkdtemp(prefix="gorush-grpc-stubs-")
    generate_stubs(a.proto, out)
    sys.path.insert(0, out)
    import grpc
    from google.protobuf import struct_pb2

    pb = importlib.import_module("gorush_pb2")
    rpc = importlib.import_module("gorush_pb2_grpc")

    metadata = [("authorization", f"Bearer {a.key}")] if a.key else []
    result = {}
    target = f"127.0.0.1:{a.port}"
    if a.ca:
        with open(a.ca, "rb") as f:
            credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
        channel = grpc.secure_channel(target, credentials, options=[("grpc.ssl_target_name_override", "localhost")])
    else:
        channel = grpc.insecure_channel(target)
    with channel:
        grpc.channel_ready_future(channel).result(timeout=10)
        health = rpc.HealthStub(channel)
        reply = health.Check(pb.HealthCheckRequest(), timeout=10)
        result["health"] = pb.HealthCheckResponse.ServingStatus.Name(reply.status)

        gorush = rpc.GorushStub(channel)
        data = struct_pb2.Struct()
        data.update({"chatId": "42", "count": 7, "flags": {"urgent": True}, "tags": ["a", "b"]})
        ios = pb.NotificationRequest(
            tokens=[a.ios_token],
            platform=1,
            message="Hello from grpcio",
            topic="com.example.app",
            badge=2,
            sound="default",
            alert=pb.Alert(title="Interop", body="Hello from grpcio", subtitle="py"),
            data=data,
            ID="interop-ios-1",
        )
        r = gorush.Send(ios, metadata=metadata, timeout=10)
        result["ios"] = {"success": r.success, "counts": r.counts}

        android = pb.NotificationRequest(
            tokens=[a.android_token],
            platform=2,
            title="Interop",
            message="Hello Android from grpcio",
            data=data,
            priority=pb.NotificationRequest.HIGH,
        )
        r = gorush.Send(android, metadata=metadata, timeout=10)
        result["android"] = {"success": r.success, "counts": r.counts}

        errors = {}
        for name, bad in [
            ("bad_platform", pb.NotificationRequest(tokens=[a.ios_token], platform=42, message="x")),
            ("no_tokens", pb.NotificationRequest(platform=1, message="x")),
        ]:
            try:
                gorush.Send(bad, metadata=metadata, timeout=10)
                errors[name] = {"code": "OK"}
            except grpc.RpcError as e:
                errors[name] = {"code": e.code().name, "details": e.details()}
        if a.key:
            # No key: refused on the stream's HEADERS (a trailers-only status, then the stream reset).
            try:
                gorush.Send(android, timeout=10)
                errors["no_key"] = {"code": "OK"}
            except grpc.RpcError as e:
                errors["no_key"] = {"code": e.code().name, "details": e.details()}
            # Health needs no key even then.
            result["health_without_key"] = pb.HealthCheckResponse.ServingStatus.Name(health.Check(pb.HealthCheckRequest(), timeout=10).status)
        result["errors"] = errors
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
