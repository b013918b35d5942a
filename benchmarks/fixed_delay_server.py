"""A System One server that answers every request after a fixed delay and otherwise costs little.

    python benchmarks/fixed_delay_server.py --delay-s 0.02     # prints its endpoint, serves until killed

The HTTP client benchmark (``inference_throughput.py --server asyncio``) needs a server whose answer
time is the delay and nothing more. ``python -m jevkedro.testing`` (the tests' fault-injecting
server, an ``http.server.ThreadingHTTPServer``) spends about 0.4 ms of CPU per request in its
threads; with 32 requests arriving together (they all started 20 ms ago) the last of them waits
~13 ms for its turn on the server's core, so what the client sees is not a fixed 20 ms. This one
runs on one asyncio event loop: it reads each request (head and
``Content-Length`` body; keep-alive), sleeps the delay without holding anything up, and sends the
same body the tests' server sends (:func:`jevkedro.testing.system_one_answers`) with an
``x-typesafe-request-id`` header. It is a benchmark fixture, not a general HTTP server.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json

from jevkedro.testing import system_one_answers

_ids = itertools.count(1)


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            body = json.loads(await reader.readexactly(length)) if length else {}
            await asyncio.sleep(delay_s)
            payload = json.dumps({"model": "jev-1.13.0",
                                  "answers": system_one_answers(body.get("questions") or {})}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"x-typesafe-request-id: srv-%06d\r\nContent-Length: %d\r\n\r\n" % (next(_ids), len(payload))
                         + payload)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _main(delay_s: float) -> None:
    server = await asyncio.start_server(lambda r, w: _serve(r, w, delay_s), "127.0.0.1", 0)
    host, port = server.sockets[0].getsockname()[:2]
    print(f"http://{host}:{port}/v1", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delay-s", type=float, default=0.02)
    args = ap.parse_args()
    asyncio.run(_main(args.delay_s))


if __name__ == "__main__":
    main()
