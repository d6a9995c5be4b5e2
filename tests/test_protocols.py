"""--protocol: the registry, its option checks (no MPI), and what a run file says about it."""

from __future__ import annotations

import json

import pytest

from npmpi.core.errors import UsageError
from npmpi.core.protocols import PROTOCOL_TABLE, PROTOCOLS, protocol_problem
from npmpi.run.arguments import build_parser
from npmpi.run.options import parse_options
from npmpi.sweep.kernels import KERNEL_NAMES
from npmpi.sweep.links import LINK_OPENERS, PROTOCOL_OPTION_FIELDS, protocol_attrs


def test_every_protocol_has_a_link_option_fields_and_known_kernels():
    assert PROTOCOLS[0] == "mpi" and "tcp" in PROTOCOLS
    for name, p in PROTOCOL_TABLE.items():
        assert name in LINK_OPENERS and name in PROTOCOL_OPTION_FIELDS
        assert set(p.kernels) <= set(KERNEL_NAMES) and p.modes


def test_help_lists_every_protocol_from_the_registry():
    text = " ".join(build_parser().format_help().split())
    for p in PROTOCOL_TABLE.values():
        assert f"'{p.name}': {' '.join(p.help_note.split())}" in text


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--protocol", "udp"], "unknown protocol; choose one of: mpi, tcp"),
        (["--protocol", "tcp", "--async"], "--async (pre-posted MPI receives) has no meaning"),
        (["--socket-buffer", "64K"], "--socket-buffer only applies to --protocol tcp"),
        (["--tcp-reconnect"], "--tcp-reconnect only applies to --protocol tcp"),
        (["--protocol", "tcp", "--socket-buffer", "12"], "out of range; give 1024 B to 1G"),
        (["--protocol", "tcp", "--socket-buffer", "2G"], "out of range"),
        (["--protocol", "tcp", "--socket-buffer", "-5"], "invalid size"),
        (["--protocol", "tcp", "--socket-buffer", "1e6"], "invalid size"),
        (["--protocol", "tcp", "--tcp-port", "70000"], "--tcp-port 70000: out of range"),
        (["--protocol", "tcp", "--tcp-port", "８０"], "expected a port number"),
        (["--protocol", "tcp", "--tcp-address", "node1"], "not an IPv4 or IPv6 address"),
        (["--protocol", "tcp", "--tcp-connect-timeout", "0"], "more than 0"),
        (["--protocol", "tcp", "--tcp-connect-timeout", "nan"], "more than 0"),
    ],
)
def test_bad_protocol_options_are_one_line(argv, fragment):
    with pytest.raises(UsageError) as info:
        parse_options(argv)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_a_protocol_without_a_mode_or_kernel_is_refused():
    base = PROTOCOL_TABLE["tcp"]
    limited = type(base)("x", "test", ("pingpong",), ("python",), True, False)
    assert "cannot run --mode stream" in limited.problem("stream", "python", False, False)
    assert "no loop in --kernel c" in limited.problem("pingpong", "c", False, False)
    assert protocol_problem("tcp", "pingpong", "c", False, False) is None


def test_tcp_options_reach_options_and_the_settings_record():
    opts = parse_options(
        ["--protocol", "tcp", "--socket-buffer", "64K", "--tcp-port", "5002", "--tcp-reconnect"]
    )
    assert (opts.protocol, opts.socket_buffer_bytes, opts.tcp_port, opts.tcp_reconnect) == (
        "tcp",
        65536,
        5002,
        True,
    )
    attrs = protocol_attrs(opts, [{"granted_sndbuf_bytes": 131072}, {}], [(0, 1)])
    settings = json.loads(attrs["protocol_settings"])
    assert attrs["protocol"] == "tcp" and settings["requested"]["socket_buffer_bytes"] == 65536
    assert settings["pairs"] == [
        {"ranks": [0, 1], "transmitter": {"granted_sndbuf_bytes": 131072}, "reflector": {}}
    ]
    mpi = json.loads(protocol_attrs(parse_options([]), None, [(0, 1)])["protocol_settings"])
    assert mpi["protocol"] == "mpi" and mpi["requested"] == {}
