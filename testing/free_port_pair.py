#!/usr/bin/env python3
"""Prints a port that is free together with the one after it (under torchrun,
distkit's store takes port + 1), below Linux's ephemeral range (32768 and
up): connecting sockets and Gloo's listeners draw from that range while a job
starts, and took ports the tests had picked there."""

import random
import socket

while True:
    port = random.randrange(20000, 32000)
    try:
        with socket.socket() as a, socket.socket() as b:
            a.bind(("127.0.0.1", port))
            b.bind(("127.0.0.1", port + 1))
    except OSError:
        continue
    print(port)
    break
