import os, socket, struct, sys, select
# tests/http3_forward_auth.t: a message of fastd's QUIC forwarding
# (core/event/fd_quic_fwd.c: its header, one fd_quic_fwd_rec_t, the
# datagram) written to worker 0's socket of each generation 0-7 from this
# process, claiming a client address of ours; prints "sent N, reply LEN"
# or "sent N, none" (nothing came back within 2 s).
# usage: quic_forge_fwd.py MASTER_PID PORT
mpid, port = int(sys.argv[1]), int(sys.argv[2])
rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
rx.bind(('127.0.0.1', 0))
rport = rx.getsockname()[1]
def sin(p):
    b = struct.pack('<H', socket.AF_INET) + struct.pack('>H', p) + socket.inet_aton('127.0.0.1')
    return b + b'\0' * (28 - len(b))
# a long header of a version QUIC does not have (RFC 9000 6: answered
# with Version Negotiation), padded to an Initial's 1200 bytes
pkt = (bytes([0xc0]) + struct.pack('>I', 0x1a2a3a4a) + bytes([8]) +
       os.urandom(8) + bytes([8]) + os.urandom(8))
pkt += b'\0' * (1200 - len(pkt))
rec = sin(port) + sin(port) + sin(rport) + struct.pack('<IBBBx', len(pkt), 16, 16, 16)
sent = 0
for gen in range(0, 8):
    msg = struct.pack('<IHHQ', 0x66517771, 1, 0, gen) + rec + pkt
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.sendto(msg, '\0fastd/%d/quic/%d/0' % (mpid, gen))
        sent += 1
    except OSError:
        pass
r, _, _ = select.select([rx], [], [], 2.0)
print('sent %d, %s' % (sent, ('reply %d' % len(rx.recv(2000))) if r else 'none'))
