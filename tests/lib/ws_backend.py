# A WebSocket server (python3-websockets) behind fastd for tests/h2_websocket.t:
#   .../echo      every message back (subprotocol "chat" when offered)
#   .../headers   first the handshake's fields (JSON), then an echo
#   .../track     an echo that writes DIR/track.closed when it ends
#   .../bye       "bye", then a normal close
#   .../drop      the TCP connection closed after the first message, with
#                 no close frame
#   .../flood?N   N bytes in 64 KiB binary messages (byte i % 256 in the
#                 i-th), DIR/flood.sent counting what send() let go
#   .../deny      403 (no handshake)
# No pings of its own (a test reads every frame). DIR/ws.ready once listening.  usage: ws_backend.py PORT DIR
import asyncio
import http
import json
import os
import sys

import websockets

PORT, DIR = int(sys.argv[1]), sys.argv[2]


def note(name, text):
    tmp = os.path.join(DIR, name + '.tmp')
    with open(tmp, 'w') as f:
        f.write(text)
    os.rename(tmp, os.path.join(DIR, name))


async def handler(ws, path=None):
    path = ws.path
    try:
        if path.endswith('/headers'):
            await ws.send(json.dumps(list(ws.request_headers.raw_items())))
        elif path.endswith('/bye'):
            await ws.send('bye')
            await ws.close()
            return
        elif path.endswith('/drop'):
            await ws.recv()
            ws.transport.close()
            return
        elif '/flood' in path:
            total = int(path.split('?', 1)[1])
            sent, i = 0, 0
            while sent < total:
                await ws.send(bytes([i % 256]) * 65536)
                sent += 65536
                i += 1
                note('flood.sent', str(sent))
            await ws.wait_closed()
            return
        async for m in ws:
            await ws.send(m)
    except websockets.ConnectionClosed:
        pass
    finally:
        if path.endswith('/track'):
            note('track.closed', 'closed')


async def process_request(path, headers):
    if path.endswith('/deny'):
        return http.HTTPStatus.FORBIDDEN, [], b'denied\n'
    return None


async def main():
    async with websockets.serve(handler, '127.0.0.1', PORT,
                                subprotocols=['chat'], max_size=None,
                                ping_interval=None,
                                process_request=process_request):
        note('ws.ready', 'ready')
        await asyncio.Future()

asyncio.run(main())
