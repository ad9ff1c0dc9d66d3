#!/usr/bin/python3
# Backends of tests/stream*.t. stream_backend.py MODE [ARG]: binds a free
# loopback port, prints it on stdout (the test's readiness signal), then
# serves until killed.
#   echo          TCP: every byte back; the client's FIN is answered with
#                 one (shutdown(SHUT_WR)) once all is echoed
#   banner FILE   TCP: sends "banner\n", shuts its write half, then
#                 counts what the client still sends, into FILE at its FIN
#   die           TCP: reads a first piece, then resets the connection
#   dns           UDP: answers each query with its id and an A record
#                 127.0.0.1 for the name asked
#   tls CERT KEY NAME
#                 TCP + TLS (any ALPN of h2, http/1.1 chosen): answers
#                 "NAME sni=SNI alpn=PROTO" and closes
# and a client:
#   stream_backend.py hello PORT SNI|- ALPN,..|- [PIECE_BYTES]
#                 TLS without verification; prints the server's line.
#                 PIECE_BYTES: the ClientHello goes in pieces that size,
#                 50 ms apart (a slow client)
import socket, ssl, struct, sys, threading, time

mode = sys.argv[1]


def serve_tcp(handle):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    print(s.getsockname()[1], flush=True)
    while True:
        c, _ = s.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()


def echo(c):
    while True:
        d = c.recv(65536)
        if not d:
            break
        c.sendall(d)
    c.shutdown(socket.SHUT_WR)
    c.close()


def banner(c):
    c.sendall(b"banner\n")
    c.shutdown(socket.SHUT_WR)
    n = 0
    while True:
        d = c.recv(65536)
        if not d:
            break
        n += len(d)
    with open(sys.argv[2], "w") as f:
        f.write("%d\n" % n)
    c.close()


def die(c):
    c.recv(65536)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()


def dns():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1], flush=True)
    while True:
        q, a = s.recvfrom(4096)
        if len(q) < 12:
            continue
        qid = q[:2]
        i = 12
        while i < len(q) and q[i] != 0:
            i += 1 + q[i]
        question = q[12:i + 5]
        ans = (qid + b"\x81\x80" + struct.pack(">HHHH", 1, 1, 0, 0) +
               question + b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 60, 4) +
               socket.inet_aton("127.0.0.1"))
        s.sendto(ans, a)


def tls_server(cert, key, name):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    seen = {}

    def on_sni(sock, sni, c):
        seen[id(sock)] = sni or ""

    ctx.sni_callback = on_sni

    def handle(c):
        try:
            t = ctx.wrap_socket(c, server_side=True)
            t.sendall(("%s sni=%s alpn=%s\n" % (
                name, seen.get(id(t), seen.get(id(c), "")),
                t.selected_alpn_protocol() or "")).encode())
            t.close()
        except (OSError, ssl.SSLError):
            c.close()

    serve_tcp(handle)


def hello(port, sni, alpn, piece):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if alpn != "-":
        ctx.set_alpn_protocols(alpn.split(","))
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    o = ctx.wrap_bio(inc, out, server_hostname=None if sni == "-" else sni)
    first = True
    while True:
        try:
            o.do_handshake()
            break
        except ssl.SSLWantReadError:
            pass
        data = out.read()
        if first and piece:
            for i in range(0, len(data), piece):
                s.sendall(data[i:i + piece])
                time.sleep(0.05)
        elif data:
            s.sendall(data)
        first = False
        d = s.recv(65536)
        if not d:
            print("closed")
            return
        inc.write(d)
    s.sendall(out.read())
    line = b""
    while not line.endswith(b"\n"):
        try:
            line += o.read(1024)
        except ssl.SSLWantReadError:
            s.sendall(out.read())
            d = s.recv(65536)
            if not d:
                break
            inc.write(d)
        except ssl.SSLZeroReturnError:
            break
    print(line.decode().strip())


if mode == "dns":
    dns()
elif mode == "tls":
    tls_server(sys.argv[2], sys.argv[3], sys.argv[4])
elif mode == "hello":
    hello(int(sys.argv[2]), sys.argv[3], sys.argv[4],
          int(sys.argv[5]) if len(sys.argv) > 5 else 0)
else:
    serve_tcp({"echo": echo, "banner": banner, "die": die}[mode])
