"""A benchmark kind defined outside npmpi, as a contributor would write one (tests/test_kinds.py):
every measuring rank passes a message to its right neighbour and takes one from its left
(MPI_Sendrecv on the group's own communicator), once per iteration. Registered by name through
NPMPI_KINDS=ring=ring_kind:KIND; nothing else in npmpi knows it."""

from __future__ import annotations

import time

import numpy as np

from npmpi.kinds.group import GroupStep
from npmpi.kinds.recording import GroupKind


class RingStep(GroupStep):
    def __init__(self, comm) -> None:
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.right, self.left = (self.rank + 1) % self.size, (self.rank - 1) % self.size

    def set_size(self, size: int) -> None:
        self.send = np.full(size, self.rank % 251, dtype=np.uint8)
        self.recv = np.zeros(size, dtype=np.uint8)

    def run(self, iterations: int) -> float:
        send, recv, comm, right, left = self.send, self.recv, self.comm, self.right, self.left
        start = time.perf_counter()
        for _ in range(iterations):
            comm.Sendrecv(send, right, 7, recv, left, 7)
        return time.perf_counter() - start

    def check(self) -> bool:
        return bool(np.all(self.recv == self.left % 251))


class RingKind(GroupKind):
    name = "ring"
    description = "Every measuring rank passes a message to its right neighbour, round the ring."
    one_way_divisor = 1  # one step: every rank's message has moved one hop

    def bytes_factor(self, members: int) -> int:
        return members  # every member's message moves once per iteration

    def step(self, opts, agreed) -> GroupStep:
        return RingStep(agreed.group_comm)


KIND = RingKind()
