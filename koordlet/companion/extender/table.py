"""The gates of every node (:mod:`koordlet.companion.extender.gates`) in flat arrays, one slot per node.

A request over 5,000 node names is bound by memory, not arithmetic: reaching a node's gate through its view
tuple, the gate tuple and a boxed number per field is several cache misses per node, and a scheduler's request
comes after other work has evicted them.  Here a node's numbers sit unboxed in a few contiguous arrays, found
through one dict lookup of its name.  The store writes a node's slot whenever it rebuilds its view, under its
lock, and requests read the table under the same lock (:meth:`NodeStore.reading`).
"""

from __future__ import annotations

import math
from array import array
from typing import Final

from koordlet.companion.extender.args import LoadAwareArgs
from koordlet.companion.extender.gates import node_gates
from koordlet.companion.extender.views import NodeView

NEVER: Final = 2**63 - 1
"""A gate estimate no pod reaches (above :data:`~koordlet.companion.extender.gates.EST_MAX`): ``inf`` in a gate."""
_LOW: Final = -(2**63)
_COMPACT_EVERY: Final = 16
"""Compact the names once those added since exceed 1/16 of them: amortised, a copy or so per name added."""


class GateTable:
    """Slots per node name; a node without a slot (no gate, or numbers beyond 64 bits) is answered from its view."""

    def __init__(self, args: LoadAwareArgs) -> None:
        self._args = args
        self.slots: dict[str, int] = {}
        self._scattered = 0
        """Names added since the last :meth:`_compact`."""
        self._free: list[int] = []
        self.expires = array("d")
        """The filter's expiry (``inf``: never checked)."""
        self.cpu_from = array("q")
        self.mem_from = array("q")
        self.aggregated = array("b")
        self.prod_cpu_from = array("q")
        self.prod_mem_from = array("q")
        self.prod_aggregated = array("b")
        self.score_expires = array("d")
        self.cpu_free = array("q")
        self.cpu_alloc = array("q")
        self.mem_free = array("q")
        self.mem_alloc = array("q")
        self.prod_cpu_free = array("q")
        self.prod_mem_free = array("q")

    def put(self, view: NodeView) -> None:
        """Writes the slot of ``view``'s node, or drops it when the node has no gates or they do not fit."""
        plain, prod, score, prod_score = node_gates(self._args, view)
        if plain is None or prod is None:
            self.drop(view.name)
            return
        numbers = (_never(plain[1]), _never(plain[2]), _never(prod[1]), _never(prod[2]),
                   score[1], score[2], score[3], score[4], prod_score[1], prod_score[3])
        if not all(_LOW <= n <= NEVER for n in numbers):
            self.drop(view.name)
            return
        slot = self.slots.get(view.name)
        if slot is None:
            slot = self._allocate()
            self.slots[view.name] = slot
            self._scattered += 1
            if self._scattered * _COMPACT_EVERY > len(self.slots):
                self._compact()
        (self.cpu_from[slot], self.mem_from[slot], self.prod_cpu_from[slot], self.prod_mem_from[slot],
         self.cpu_free[slot], self.cpu_alloc[slot], self.mem_free[slot], self.mem_alloc[slot],
         self.prod_cpu_free[slot], self.prod_mem_free[slot]) = numbers
        self.expires[slot] = plain[0]
        self.aggregated[slot] = plain[3]
        self.prod_aggregated[slot] = prod[3]
        self.score_expires[slot] = score[0]

    def _compact(self) -> None:
        """Rebuilds :attr:`slots` with its names copied in one go.  A lookup compares the request's name with the
        stored one, so it reads the stored string: names created one by one among each node's other objects lie
        all over the heap (a cache miss per node per request), copies made together lie side by side."""
        self.slots = {_copy(name): slot for name, slot in self.slots.items()}
        self._scattered = 0

    def drop(self, name: str) -> None:
        slot = self.slots.pop(name, None)
        if slot is not None:
            self._free.append(slot)

    def _allocate(self) -> int:
        if self._free:
            return self._free.pop()
        for column in (self.expires, self.score_expires):
            column.append(0.0)
        for flags in (self.aggregated, self.prod_aggregated):
            flags.append(0)
        for numbers in (self.cpu_from, self.mem_from, self.prod_cpu_from, self.prod_mem_from, self.cpu_free,
                        self.cpu_alloc, self.mem_free, self.mem_alloc, self.prod_cpu_free, self.prod_mem_free):
            numbers.append(0)
        return len(self.expires) - 1


def _copy(name: str) -> str:
    """A new string equal to ``name`` (a lone surrogate from a ``\\ud800`` escape included)."""
    return str(name.encode("utf-8", "surrogatepass"), "utf-8", "surrogatepass")


def _never(value: int | float) -> int:
    """A gate's estimate as an array entry: ``inf`` (never) as :data:`NEVER`; the others are ints already."""
    return NEVER if value == math.inf else int(value)
