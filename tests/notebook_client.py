"""An nbclient ``NotebookClient`` that does not sleep through a reply it has been sent.

On a loaded machine a kernel's reply sometimes sits unread on the client's socket until the
wait for it times out: pyzmq's asyncio poll misses the socket's wake-up, and when its timeout
fires it polls once more, finds the reply and returns it as if it had just come. nbclient
waits for each cell's reply with the whole cell time limit, so the notebook stalls for that
limit and then goes on with no error (seen here: cell 9 of explore_timing.ipynb, an
ipywidgets ``interact``, replied 0.5 s after its request and the client read the reply 60 s
later, the limit; nbclient issue #312 reports the same stall after widget cells). Here
every wait on the shell and IOPub channels is cut into slices of :data:`SLICE_S`: a missed
wake-up costs at most one slice. The messages, their order and the limits are nbclient's
own. Measured with ``scripts/notebook_stalls.py``, both cores of this machine busy beside it
(data/bench/waits/notebook-stalls-2026-12-03.csv): nbclient's client stalled in 5 of 15 runs,
each reply read 59.0-59.5 s after it was sent; this one in none of 15, and in 6 of them a
reply was read 0.10-0.45 s late, the wake-ups that the slices caught.
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
