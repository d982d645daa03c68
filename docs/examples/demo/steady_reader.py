#!/usr/bin/env python3
"""steady_reader: download one file from the demo server at a steady rate.

    steady_reader.py PORT PATH BYTES_PER_SECOND OUT

A client that reads slowly but never stops: its socket's receive buffer
is kept small (64 KiB) so the kernel cannot read ahead for it, and it
reads at most 16 KiB at a time, never ahead of BYTES_PER_SECOND since
its start. (curl --limit-rate instead reads as fast as it can at first,
then sleeps for seconds to bring its average down: a client that stops.)
Writes the body to OUT, prints the bytes of body received, and exits 0
when that is the whole Content-Length, 1 otherwise. Loopback only.
"""
import socket
import sys
import time


def main():
    port, path, rate, out = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.connect(("127.0.0.1", port))
    s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: t\r\n\r\n")
    buf = b""
    got, length = 0, None
    try:
        while b"\r\n\r\n" not in buf:
            d = s.recv(4096)
            if not d:
                break
            buf += d
        head, _, body = buf.partition(b"\r\n\r\n")
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        start = time.monotonic()
        with open(out, "wb") as f:
            f.write(body)
            got = len(body)
            while length is not None and got < length:
                ahead = got / rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
                d = s.recv(min(16384, length - got))
                if not d:
                    break
                f.write(d)
                got += len(d)
    except OSError as e:
        print(f"steady_reader: {e}", file=sys.stderr)
    print(got)
    return 0 if length is not None and got == length else 1


if __name__ == "__main__":
    sys.exit(main())
