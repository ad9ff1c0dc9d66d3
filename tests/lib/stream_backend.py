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
import socket, struct, sys, threading

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


if mode == "dns":
    dns()
else:
    serve_tcp({"echo": echo, "banner": banner, "die": die}[mode])
