"""Each answer leaves in one write: uvicorn's HTTP protocol over a transport that joins the
writes one loop step makes.

uvicorn writes an answer's status line and headers, then its body, as two sends. On
loopback with Nagle off each send is a TCP segment whose receive path the sender runs, and
each wakes kube-scheduler's reader, which reads the headers, sleeps, and is woken again for
the body. On two busy cores the kernel often runs the woken reader at once, so Phalanx's
loop also waits out a switch per send. One send per answer halves both.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class OneWriteTransport(asyncio.Transport):
    """Holds a write until the next one or the loop's next turn, then sends what it holds as one.

    An answer's headers and body are written in the same step (uvicorn's `send` does not
    suspend between them), so they leave together. Anything written alone (a `100
    Continue`, a streamed chunk) leaves on the next turn: nothing waits on a later write.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._turn: asyncio.Handle | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._held is None:
            self._held = bytes(data)
            if self._turn is None:
                self._turn = self._loop.call_soon(self._on_turn)
            return
        held, self._held = self._held, None
        self._transport.write(held + data)

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def flush(self) -> None:
        """Send what is held now."""
        if self._held is not None:
            held, self._held = self._held, None
            self._transport.write(held)

    def _on_turn(self) -> None:
        self._turn = None
        if self._transport.is_closing():  # the peer went away since: nobody to send it to
            self._held = None
        self.flush()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def get_write_buffer_size(self) -> int:
        held = len(self._held) if self._held is not None else 0
        return self._transport.get_write_buffer_size() + held

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()


class OneWriteHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, answering through a `OneWriteTransport`.

    Flow control keeps the real transport: pausing and resuming reading, and the
    write-buffer callbacks, are the socket's.
    """

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self.transport = OneWriteTransport(self.transport, self.loop)
