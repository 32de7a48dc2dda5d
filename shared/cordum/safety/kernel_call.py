"""How the kernel's clients (safety checks, output checks) make one call.

Lambda freezes the process between invocations and gRPC keepalives do not run
meanwhile, so a thawed container may hold a dead socket. After a transport error
the channel is dropped (the caller rebuilds it on the next call); after UNAVAILABLE
the call is tried once more on a new channel when the deadline leaves room.
"""

from __future__ import annotations

import asyncio
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (("grpc.use_local_subchannel_pool", 1),)
"""Options of every channel to the kernel (a ``channel_factory`` should pass them too):
a rebuilt channel must not share the old one's connection, and its reconnect backoff,
through gRPC's process-wide subchannel pool."""
MIN_RETRY_S = 0.05
"""A retry after UNAVAILABLE needs at least this much of the deadline left."""


@cache
def transport_codes() -> frozenset[Any]:
    """Status codes after which the channel is rebuilt: the connection itself may be dead."""
    import grpc

    return frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                      grpc.StatusCode.INTERNAL, grpc.StatusCode.CANCELLED})


async def call_with_one_retry(method: Callable[[], Any], request: Any, deadline: float, *,
                              drop_channel: Callable[[], None],
                              error: Callable[[str], Exception]) -> Any:
    """``method()(request, timeout=...)`` within ``deadline`` (the loop's clock);
    ``method`` is asked again for the retry, so it sees the new channel. A failure
    raises ``error(message)``, the message being the status code and its details."""
    import grpc

    loop = asyncio.get_running_loop()
    retried = False
    while True:
        call = method()
        try:
            return await call(request, timeout=max(deadline - loop.time(), 0.001))
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            if code in transport_codes():
                drop_channel()
            if (retried or code != grpc.StatusCode.UNAVAILABLE
                    or deadline - loop.time() < MIN_RETRY_S):
                detail = exc.details() or ""
                raise error(f"{code.name}: {detail}" if detail else code.name) from exc
            retried = True
        # Channel or loop trouble below the RPC status layer, or an answer that does
        # not decode.
        except Exception as exc:
            drop_channel()
            raise error(str(exc) or type(exc).__name__) from exc
