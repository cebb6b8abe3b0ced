"""An nbclient ``NotebookClient`` that does not sleep through a reply it has been sent.

On a loaded machine a kernel's reply sometimes sits unread on the client's socket until the
wait for it times out: pyzmq's asyncio poll misses the socket's wake-up, and when its timeout
fires it polls once more, finds the reply and returns it as if it had just come. nbclient
waits for each cell's reply with the whole cell time limit, so the notebook stalls for that
limit and then goes on with no error (seen here: cell 9 of explore_timing.ipynb, an
ipywidgets ``interact``, replied 0.5 s after its request and the client read the reply 60 s
later, the limit; 3 of 28 runs of that notebook stalled so on this 2-core machine with one
or both cores busy beside it; nbclient issue #312 reports the same stall after widget cells).
Here every wait on the shell and IOPub channels is cut into slices of :data:`SLICE_S`: a
missed wake-up costs at most one slice (0 of 25 runs stalled, both cores busy). The
messages, their order and the limits are nbclient's own.
"""

from __future__ import annotations

import time
from queue import Empty
from typing import Any

import nbclient

SLICE_S = 0.5


def _sliced(get_msg: Any) -> Any:
    async def get_msg_in_slices(timeout: float | None = None) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = SLICE_S if deadline is None else deadline - time.monotonic()
            try:
                return await get_msg(timeout=max(0.0, min(SLICE_S, left)))
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    return get_msg_in_slices


class NotebookClient(nbclient.NotebookClient):
    async def async_start_new_kernel_client(self) -> Any:
        kc = await super().async_start_new_kernel_client()
        for channel in (kc.shell_channel, kc.iopub_channel):
            channel.get_msg = _sliced(channel.get_msg)
        return kc
