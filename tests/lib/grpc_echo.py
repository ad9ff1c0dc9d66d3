#!/usr/bin/python3
"""A gRPC echo server and client for tests/grpc.t, on Debian's
python3-grpcio alone: generic handlers and raw bytes (no protoc, no
generated code).

  grpc_echo.py server PORT [CERT KEY]     prints "READY" once serving
  grpc_echo.py client TARGET KIND [--ca FILE] [--deadline S] [--n N]
                                          prints one JSON line

Methods of service echo.Echo:
  Unary          the request back, with trailer x-echo-trailer
  ServerStream   N replies "R<i>:<request>" (N: the request's leading digits)
  ClientStream   the requests joined with "+"
  Bidi           each request back as it comes, "B:<request>"
  Slow           sleeps the request's seconds, then answers
  Fail           aborts: status FAILED_PRECONDITION, message "no way"
  Die            two replies, then the server process exits at once

and grpc.health.v1.Health/Check (the gRPC health protocol, by hand:
HealthCheckRequest's service in, HealthCheckResponse's status out):
SERVING for "" and "echo.Echo", NOT_SERVING while the file named by
$GRPC_ECHO_SICK exists, NOT_FOUND for other services.
"""
import json
import os
import sys
import threading
import time
from concurrent import futures

import grpc

SERVICE = "echo.Echo"


def unary(req, ctx):
    ctx.set_trailing_metadata((("x-echo-trailer", "t-" + req.decode()),))
    return req


def server_stream(req, ctx):
    n = int(req.split(b":")[0] or b"3")
    for i in range(n):
        yield b"R%d:%s" % (i, req)


def client_stream(it, ctx):
    return b"+".join(list(it))


def bidi(it, ctx):
    for req in it:
        yield b"B:" + req


def slow(req, ctx):
    time.sleep(float(req.decode()))
    return b"late"


def fail(req, ctx):
    ctx.abort(grpc.StatusCode.FAILED_PRECONDITION, "no way")


def die(req, ctx):
    yield b"one"
    yield b"two"
    time.sleep(0.2)  # the two replies leave first
    os._exit(3)


def health_check(req, ctx):
    # field 1 (service), length-delimited: 0x0a LEN NAME
    svc = req[2:2 + req[1]].decode() if req[:1] == b"\x0a" else ""
    if svc not in ("", SERVICE):
        ctx.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
    sick = os.environ.get("GRPC_ECHO_SICK")
    return b"\x08\x02" if sick and os.path.exists(sick) else b"\x08\x01"


def serve(port, cert=None, key=None):
    h = grpc.method_handlers_generic_handler(SERVICE, {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream),
        "ClientStream": grpc.stream_unary_rpc_method_handler(client_stream),
        "Bidi": grpc.stream_stream_rpc_method_handler(bidi),
        "Slow": grpc.unary_unary_rpc_method_handler(slow),
        "Fail": grpc.unary_unary_rpc_method_handler(fail),
        "Die": grpc.unary_stream_rpc_method_handler(die),
    })
    hh = grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
        "Check": grpc.unary_unary_rpc_method_handler(health_check),
    })
    s = grpc.server(futures.ThreadPoolExecutor(max_workers=32),
                    handlers=(h, hh))
    addr = "127.0.0.1:%d" % port
    if cert:
        creds = grpc.ssl_server_credentials(
            ((open(key, "rb").read(), open(cert, "rb").read()),))
        s.add_secure_port(addr, creds)
    else:
        s.add_insecure_port(addr)
    s.start()
    print("READY", flush=True)
    s.wait_for_termination()


def client(target, kind, ca=None, deadline=None, n=3):
    if ca:
        creds = grpc.ssl_channel_credentials(open(ca, "rb").read())
        ch = grpc.secure_channel(target, creds, options=(
            ("grpc.ssl_target_name_override", "localhost"),))
    else:
        ch = grpc.insecure_channel(target)
    out = {"kind": kind}
    kw = {"timeout": deadline} if deadline else {}
    path = "/%s/%s" % (SERVICE, kind)
    try:
        if kind in ("Unary", "Slow", "Fail"):
            arg = {"Slow": b"2", "Unary": b"hello"}.get(kind, b"x")
            call = ch.unary_unary(path)
            resp, c = call.with_call(arg, **kw)
            out["replies"] = [resp.decode()]
            out["trailers"] = dict(c.trailing_metadata() or ())
        elif kind in ("ServerStream", "Die"):
            call = ch.unary_stream(path)
            it = call(b"%d:ping" % n, **kw)
            out["replies"] = []
            for r in it:
                out["replies"].append(r.decode())
        elif kind == "ClientStream":
            call = ch.stream_unary(path)
            reqs = (b"c%d" % i for i in range(n))
            resp = call(reqs, **kw)
            out["replies"] = [resp.decode()]
        elif kind == "Bidi":
            call = ch.stream_stream(path)
            reqs = (b"m%d" % i for i in range(n))
            out["replies"] = [r.decode() for r in call(reqs, **kw)]
        out["code"] = "OK"
    except grpc.RpcError as e:
        out["code"] = e.code().name
        out["details"] = e.details()
    print(json.dumps(out), flush=True)


def main():
    a = sys.argv[1:]
    if a[0] == "server":
        serve(int(a[1]), *(a[2:4] if len(a) >= 4 else ()))
        return
    opts = {"ca": None, "deadline": None, "n": 3}
    rest = a[3:]
    while rest:
        k, v = rest[0], rest[1]
        rest = rest[2:]
        if k == "--ca":
            opts["ca"] = v
        elif k == "--deadline":
            opts["deadline"] = float(v)
        elif k == "--n":
            opts["n"] = int(v)
    client(a[1], a[2], **opts)


if __name__ == "__main__":
    main()
