"""A replica's direct channel (harness.child.direct_channel) without Ray: a call's answer
or its backend's exception comes back, one call at a time, a stranger without the key is
refused while the workers go on, and a closed connection or a long call is told apart."""

from __future__ import annotations

import threading
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Listener

import numpy as np
import pytest

from harness.child import direct_channel
from harness.child.direct_channel import ChannelClient, ChannelLost, ChannelServer

KEY = b"k" * 32


def _server(serve) -> ChannelServer:
    return ChannelServer("127.0.0.1", KEY, serve, threading.Lock())


def test_a_call_returns_the_outputs_and_the_backends_exception_as_itself():
    def serve(indices):
        if indices == [13]:
            raise ValueError("bad sample 13")
        return [np.asarray(indices, dtype=np.float32) * 2]

    server = _server(serve)
    client = ChannelClient(server.address, KEY, alive=lambda: None)
    try:
        out = client.call([1, 2, 3])
        assert out[0].tolist() == [2.0, 4.0, 6.0]
        with pytest.raises(ValueError, match="bad sample 13"):
            client.call([13])
        assert client.call([5])[0].tolist() == [10.0]  # the connection serves on after a failed call
    finally:
        client.close()
        server.close()


def test_calls_on_one_replica_run_one_at_a_time_while_the_next_waits_there():
    inside, most = [0], [0]
    guard = threading.Lock()

    def serve(indices):
        with guard:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.02)
        with guard:
            inside[0] -= 1
        return indices

    server = _server(serve)
    clients = [ChannelClient(server.address, KEY, alive=lambda: None) for _ in range(3)]
    try:
        answers: list = []
        threads = [threading.Thread(target=lambda c=c, i=i: answers.append([c.call([i]) for _ in range(5)]))
                   for i, c in enumerate(clients)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert most[0] == 1  # the backend saw one call at a time
        assert time.perf_counter() - t0 >= 15 * 0.02  # 15 calls of 20 ms, in series
        assert sorted(a[0][0] for a in answers) == [0, 1, 2]
    finally:
        for c in clients:
            c.close()
        server.close()


def test_a_stranger_without_the_key_is_refused_and_the_workers_go_on():
    server = _server(lambda indices: indices)
    try:
        with pytest.raises(AuthenticationError):
            Client(server.address, family="AF_INET", authkey=b"wrong" * 8)
        client = ChannelClient(server.address, KEY, alive=lambda: None)
        assert client.call([7]) == [7]
        client.close()
    finally:
        server.close()


def test_an_answer_that_does_not_pickle_fails_that_call_only():
    server = _server(lambda indices: (lambda: None) if indices == [0] else indices)
    client = ChannelClient(server.address, KEY, alive=lambda: None)
    try:
        with pytest.raises(RuntimeError, match="sending the outputs back"):
            client.call([0])
        assert client.call([1]) == [1]
    finally:
        client.close()
        server.close()


def test_a_long_call_asks_whether_the_replica_lives(monkeypatch):
    monkeypatch.setattr(direct_channel, "LIVENESS_S", 0.05)
    asked = []

    def alive():
        asked.append(time.perf_counter())

    server = _server(lambda indices: time.sleep(0.3) or indices)
    client = ChannelClient(server.address, KEY, alive=alive)
    assert client.call([1]) == [1]
    assert len(asked) >= 3  # a 0.3 s call polled every 0.05 s: alive, so it waited on
    server.close()

    class Dead(Exception):
        pass

    def dead():
        raise Dead("Ray says the actor died")

    server = _server(lambda indices: time.sleep(5) or indices)
    client = ChannelClient(server.address, KEY, alive=dead)
    with pytest.raises(Dead, match="actor died"):
        client.call([2])  # the first liveness check ends the wait
    client.close()
    server.close()


def test_a_replica_whose_end_closes_mid_call_is_lost():
    # The replica's process killed: its kernel closes the socket under the waiting call.
    listener = Listener(("127.0.0.1", 0), family="AF_INET", authkey=KEY)

    def take_and_close():
        conn = listener.accept()
        conn.recv()
        conn.close()

    t = threading.Thread(target=take_and_close)
    t.start()
    client = ChannelClient(listener.address, KEY, alive=lambda: None)
    with pytest.raises(ChannelLost, match="connection closed"):
        client.call([3])
    t.join()
    client.close()
    listener.close()
