"""One TCP flow's throughput, the bound a collective across hosts is held to.

  link_throughput.py serve ADDR PORT BYTES   # receives BYTES, prints MB/s
  link_throughput.py send ADDR PORT BYTES    # connects and sends BYTES

The receiver times from the connection's first byte to its last, so what is
measured is what one TCP flow gets through the link (headers, acknowledgements
and the shaper included): the protocol's own overhead is not counted against
the collectives compared with it (tools/dkbench/netns_bench.sh).
"""
import socket
import sys
import time


def serve(addr: str, port: int, total: int) -> None:
    with socket.create_server((addr, port)) as server:
        print("listening", flush=True)
        conn, _ = server.accept()
        with conn:
            buf = bytearray(1 << 20)
            view = memoryview(buf)
            got = conn.recv_into(view)
            start = time.perf_counter()
            while got < total:
                n = conn.recv_into(view)
                if n == 0:
                    break
                got += n
            elapsed = time.perf_counter() - start
    print(f"{got / elapsed / 1e6:.2f} MB/s ({got} bytes in {elapsed:.3f} s)", flush=True)


def send(addr: str, port: int, total: int) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            conn = socket.create_connection((addr, port))
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    chunk = b"\0" * (1 << 20)
    with conn:
        sent = 0
        while sent < total:
            conn.sendall(chunk[: min(len(chunk), total - sent)])
            sent += min(len(chunk), total - sent)


if __name__ == "__main__":
    mode, addr, port, total = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    (serve if mode == "serve" else send)(addr, port, total)
