"""Connections that hold the server without asking it anything: closed, so that idle sockets cannot take its file
descriptors from the clients it serves.

uvicorn closes a keep-alive connection that stays idle between requests, but waits for ever for a request head
that never ends or a body that never comes: under the common open-file limit of 1 024, 1 100 such sockets (no key
needed) made /health and /v1/audio/speech time out. Three guards, in the HTTP protocol uvicorn runs (`guarded`):

- a request head must be complete within `header_timeout` seconds of the connection (or of the previous
  response): a client sending one byte every few seconds is closed too;
- a request body that receives no byte for `body_timeout` seconds closes its connection (the app sees the client
  leave);
- above `max_connections` (max_connections(): the open-file limit less RESERVED_FDS), a new connection closes the
  one that has waited longest for a request head, else the one whose body stalled longest, else itself: the
  server keeps room for the clients that send requests.

raise_open_file_limit() lifts the soft open-file limit to the hard one first, as servers commonly do.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger("omnivoice.server")

__all__ = ["RESERVED_FDS", "guarded", "max_connections", "raise_open_file_limit"]

# File descriptors kept for everything but client sockets: the model's files, the voice library, the log, the
# listening socket, the event loop's and the threads' own.
RESERVED_FDS = 96
CHECK_S = 0.5  # how often a connection looks at its own deadlines


def raise_open_file_limit() -> int:
    """Lift the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("open-file limit raised from %d to %d", soft, target)
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def max_connections(open_files: int) -> int:
    """Client connections the server keeps under an open-file limit of `open_files`."""
    return max(8, open_files - RESERVED_FDS)


def guarded(header_timeout: float, body_timeout: float, limit: int):
    """uvicorn's HTTP protocol class (httptools' where installed, else h11's, as uvicorn's `auto` picks) with the
    three guards of this module; pass it as uvicorn.Config(http=...)."""
    try:
        import httptools  # noqa: F401

        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as Base
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol as Base

    class GuardedProtocol(Base):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            now = self.loop.time()
            self._head_cycle, self._waiting_since, self._last_data = None, now, now
            self._check_handle = self.loop.call_later(CHECK_S, self._check)
            if len(self.connections) > limit:
                _evict([c for c in self.connections if isinstance(c, GuardedProtocol)], self)

        def data_received(self, data: bytes) -> None:
            self._last_data = self.loop.time()
            super().data_received(data)

        def connection_lost(self, exc) -> None:
            if self._check_handle is not None:
                self._check_handle.cancel()
                self._check_handle = None
            super().connection_lost(exc)

        def _waiting_for_head(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _check(self) -> None:
            self._check_handle = None
            if self.transport.is_closing() or self.transport.get_protocol() is not self:
                return  # closed, or upgraded to a WebSocket (which keeps its own idle timeout)
            now = self.loop.time()
            if self._waiting_for_head():
                if self.cycle is not self._head_cycle:  # a response completed: a new wait for a head begins
                    self._head_cycle, self._waiting_since = self.cycle, now
                if now - self._waiting_since > header_timeout:
                    return self.transport.close()
            elif self.cycle.more_body and now - self._last_data > body_timeout:
                return self.transport.close()
            self._check_handle = self.loop.call_later(CHECK_S, self._check)

    return GuardedProtocol


def _evict(connections: list, newcomer) -> None:
    """Close one of the guarded HTTP `connections` to make room for `newcomer` (see the module docstring)."""
    others = [c for c in connections if c is not newcomer and not c.transport.is_closing()
              and c.transport.get_protocol() is c]
    idle = [c for c in others if c._waiting_for_head()]
    if idle:
        victim = min(idle, key=lambda c: c._waiting_since)
    else:
        stalled = [c for c in others if c.cycle is not None and c.cycle.more_body]
        victim = min(stalled, key=lambda c: c._last_data) if stalled else newcomer
    victim.transport.close()
