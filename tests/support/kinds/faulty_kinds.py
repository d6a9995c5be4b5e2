"""Kinds from outside npmpi that fail in their own code, one way each
(tests/test_reliability_kinds_registry.py): registered as NPMPI_KINDS=NAME=faulty_kinds:ATTRIBUTE.
Each is the ring kind (ring_kind.py) but for the one method that fails."""

from __future__ import annotations

import sys

from ring_kind import RingKind

NUMBER = 3
NOTHING = None


def function():
    return RingKind()


CLASS = RingKind


class ParseRaises(RingKind):
    def parse(self, argv):
        raise RuntimeError("the parser broke")


class ParseExits(RingKind):
    def parse(self, argv):
        sys.exit(3)


class ParseRaisesSystemExit(RingKind):
    def parse(self, argv):
        raise SystemExit(7)


class BogusLevel(RingKind):
    def thread_level(self, opts):
        return "bogus"


class ZeroFactor(RingKind):
    def bytes_factor(self, members):
        return 0


class AttrsRaise(RingKind):
    def attrs(self, opts, layout):
        raise KeyError("coll_whatever")


PARSE_RAISES = ParseRaises()
PARSE_EXITS = ParseExits()
PARSE_SYSTEM_EXIT = ParseRaisesSystemExit()
BOGUS_LEVEL = BogusLevel()
ZERO_FACTOR = ZeroFactor()
ATTRS_RAISE = AttrsRaise()
