"""Direct channels to Ray actors: Ray places the actor, a TCP connection carries the timed calls.

Used by backend replicas (`ChannelServer` / `ChannelClient` below) and by client shards on
Ray (`listen` / `accept` / `connect`: shard_links.RayLink speaks the process shard's
messages over one).

Through Ray's core API a call costs ~1 ms here (a task submitted, scheduled, its result
fetched through the object store; benchmarks/bench_ray.py), and on a machine with as many
replicas as cores that CPU comes out of the replicas' own. A call over a connection costs
a pickled list of indices one way and the outputs the other (~0.1 ms). So with
`distribute.replica_calls: direct` the replica listens on an ephemeral port of its node's
address (as Ray's own workers do: a cluster's nodes must reach each other's ports) and
each of the driver's workers connects to it once, before the test. The handshake is multiprocessing's: an HMAC challenge on a
random key that only the driver and the replica know (it travels inside Ray's own call).

Calls on one replica still run one at a time (a lock around the backend, as a Ray actor
runs its tasks), so `in_flight: 2` queues the next call at the replica while one runs,
which hides the round trip. Ray keeps what it does well: placement, resources, the
actor's lifetime, and the cause of its death, which the driver asks for when the
connection closes.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

#: the driver asks Ray whether a replica is alive when a call has waited this long
LIVENESS_S = 5.0


def _no_delay(conn: Connection) -> Connection:
    """One write a message, answered at once: Nagle's wait only ever delays it."""
    s = socket.socket(fileno=conn.fileno())
    try:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    finally:
        s.detach()  # the connection keeps its descriptor
    return conn


def listen(host: str, key: bytes) -> Listener:
    """A listener on an ephemeral port of `host`; only a peer holding `key` gets through."""
    return Listener((host, 0), family="AF_INET", authkey=key)


def accept(listener: Listener) -> Connection:
    return _no_delay(listener.accept())


def connect(address: tuple[str, int], key: bytes) -> Connection:
    return _no_delay(Client(tuple(address), family="AF_INET", authkey=key))


class ChannelServer:
    """The replica's end: accepts the workers' connections and serves each on a thread."""

    def __init__(self, host: str, key: bytes, serve: Callable[[list[int]], Any], lock: threading.Lock) -> None:
        self._serve_one = serve
        self._lock = lock
        self._listener = listen(host, key)
        self.address: tuple[str, int] = self._listener.address
        self._closed = False
        threading.Thread(target=self._accept, name="replica channel", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn = accept(self._listener)
            except (AuthenticationError, EOFError, ConnectionError):
                continue  # a stranger without the key, or a peer gone mid-handshake
            except OSError:  # the listener closed (close()), or out of descriptors: do not spin
                time.sleep(0.05)
                continue
            threading.Thread(target=self._serve, args=(conn,), name="replica call", daemon=True).start()

    def _serve(self, conn: Connection) -> None:
        while True:
            try:
                indices = conn.recv()
            except (EOFError, OSError):
                return  # the worker is done (or the driver gone)
            try:
                with self._lock:
                    reply: tuple[bool, Any] = (True, self._serve_one(indices))
            except Exception as e:  # noqa: BLE001 - the backend's failure goes back as the call's answer
                reply = (False, e)
            try:
                conn.send(reply)
            except (EOFError, OSError):
                return
            except Exception as e:  # noqa: BLE001 - an answer that does not pickle fails this call only
                conn.send((False, RuntimeError(f"{type(e).__name__} sending the outputs back: {e}")))

    def close(self) -> None:
        self._closed = True
        self._listener.close()


class ChannelLost(Exception):
    """The connection to the replica closed or stopped answering."""


class ChannelClient:
    """A worker's end: one call at a time, on the worker's own connection."""

    def __init__(self, address: tuple[str, int], key: bytes, alive: Callable[[], None]) -> None:
        self._conn = connect(address, key)
        self._alive = alive  # raises when Ray says the replica is dead

    def call(self, indices: list[int]) -> Any:
        """The backend's outputs; its exception re-raised; ChannelLost when the connection ends."""
        conn = self._conn
        try:
            conn.send(indices)
            while not conn.poll(LIVENESS_S):  # a long call, or a node gone without closing the socket
                self._alive()
            ok, value = conn.recv()
        except (EOFError, OSError) as e:
            raise ChannelLost(f"its connection closed ({type(e).__name__})") from None
        if ok:
            return value
        raise value

    def close(self) -> None:
        self._conn.close()
