#!/usr/bin/python3
"""An Initial flood for the tests: N QUIC v1 Initials from one UDP socket,
each for a new connection (its own DCID, first byte 0: worker 0), each
protected as RFC 9001 5 says (so the server takes it and waits for a
ClientHello that never comes: a half-open connection), carrying the first
bytes of a ClientHello and PADDING.

  quic_flood.py ADDR PORT N

Sends them one at a time, each once the previous one was answered (the
server acknowledges each, or sends a Retry), and prints one JSON line:
how many were answered with a Retry, and the index of the first that
was (null: none).
"""
import json
import os
import socket
import sys

from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

SALT = bytes.fromhex('38762cf7f55934b34d179ae6a4c80cadccbb7f0a')


def hkdf_extract(salt, ikm):
    h = hmac.HMAC(salt, hashes.SHA256())
    h.update(ikm)
    return h.finalize()


def hkdf_expand_label(secret, label, length):
    full = b'tls13 ' + label
    info = length.to_bytes(2, 'big') + bytes([len(full)]) + full + b'\0'
    out, t, i = b'', b'', 1
    while len(out) < length:
        h = hmac.HMAC(secret, hashes.SHA256())
        h.update(t + info + bytes([i]))
        t = h.finalize()
        out += t
        i += 1
    return out[:length]


def initial(dcid, scid):
    secret = hkdf_expand_label(hkdf_extract(SALT, dcid), b'client in', 32)
    key = hkdf_expand_label(secret, b'quic key', 16)
    iv = hkdf_expand_label(secret, b'quic iv', 12)
    hp = hkdf_expand_label(secret, b'quic hp', 16)
    pn = b'\0\0\0\0'
    plen = 1200 - (1 + 4 + 1 + len(dcid) + 1 + len(scid) + 1 + 2) - 4 - 16
    # CRYPTO: the start of a ClientHello of 1000 bytes, the rest never
    # sent; then PADDING
    crypto = b'\x06\x00\x04' + b'\x01\x00\x03\xe8'
    payload = crypto + b'\0' * (plen - len(crypto))
    header = (bytes([0xc3]) + (1).to_bytes(4, 'big') + bytes([len(dcid)]) +
              dcid + bytes([len(scid)]) + scid + b'\0' +
              (0x4000 | (4 + plen + 16)).to_bytes(2, 'big'))
    aad = header + pn
    ct = AESGCM(key).encrypt(iv, payload, aad)  # packet number 0
    sample = ct[0:16]  # 4 bytes after the packet number's start
    enc = Cipher(algorithms.AES(hp), modes.ECB()).encryptor()
    mask = enc.update(sample) + enc.finalize()
    first = bytes([header[0] ^ (mask[0] & 0x0f)])
    pn_prot = bytes(a ^ b for a, b in zip(pn, mask[1:5]))
    return first + header[1:] + pn_prot + ct


def main(addr, port, n):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((addr, int(port)))
    s.settimeout(10)
    retries, first = 0, None
    for i in range(int(n)):
        dcid, scid = b'\0' + os.urandom(15), os.urandom(8)
        s.send(initial(dcid, scid))
        # its first answer (an ACK, a Retry): the next is sent after it,
        # so none is lost to a full socket buffer
        while True:
            try:
                d = s.recv(65536)
            except socket.timeout:
                print(json.dumps({'error': 'no answer to Initial %d' % i}))
                return 1
            if d[0] & 0x80 and d[6:14] == scid:
                break
        if d[0] & 0xb0 == 0xb0:
            retries += 1
            if first is None:
                first = i
    print(json.dumps({'retries': retries, 'first': first}))
    return 0


if __name__ == '__main__':
    sys.exit(main(*sys.argv[1:]))
