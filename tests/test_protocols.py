"""--protocol: the registry, its option checks (no MPI), and what a run file says about it."""

from __future__ import annotations

import ast
import json

import pytest
from conftest import REPO

from npmpi.core.config import Options
from npmpi.core.errors import KernelUnavailable, UsageError
from npmpi.core.protocol import Protocol, ProtocolOption, load
from npmpi.persize.kernels import KERNEL_NAMES, Kernel
from npmpi.persize.links import open_link, protocol_attrs
from npmpi.persize.messageloop import MessageLoop
from npmpi.protocols import PROTOCOL_TABLE, PROTOCOLS, protocol_problem
from npmpi.run.arguments import build_parser
from npmpi.run.kind import KIND
from npmpi.run.options import parse_options


def test_every_protocol_has_a_link_option_fields_and_known_kernels():
    assert PROTOCOLS[0] == "mpi" and "tcp" in PROTOCOLS
    fields = set(Options.__dataclass_fields__)
    for name, p in PROTOCOL_TABLE.items():
        assert p.name == name and callable(load(p.link)) and set(p.option_fields) <= fields
        assert set(p.kernels) <= set(KERNEL_NAMES) and p.modes
        # its loops in every kernel it names (None: each kernel's own MPI loops)
        assert p.loops is None or set(p.loops) == set(p.kernels)
        for pingpong, transfer in (p.loops or {}).values():
            assert callable(load(pingpong)) and callable(load(transfer))
        assert not p.before_mpi_setup or callable(load(p.before_mpi_setup))


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


def _names_a_protocol(node: ast.AST) -> bool:
    """A protocol's name, or a constant standing for one (PROTOCOL_*, DEFAULT_PROTOCOL)."""
    if isinstance(node, ast.Constant):
        return node.value in PROTOCOLS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_protocol(e) for e in node.elts)
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name.startswith("PROTOCOL_") or name == "DEFAULT_PROTOCOL"


def test_nothing_outside_the_protocols_branches_on_a_protocol_name():
    """A comparison with a protocol's name, or a table keyed by names, lives in npmpi/protocols/ only:
    everything else asks the protocol's value."""
    found = []
    for path in sorted((REPO / "npmpi").rglob("*.py")):
        if path.parent.name == "protocols":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            sides = [node.left, *node.comparators] if isinstance(node, ast.Compare) else []
            sides += [k for k in node.keys if k is not None] if isinstance(node, ast.Dict) else []
            if any(_names_a_protocol(side) for side in sides):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []


SEEN: list[tuple] = []


def _fake_opener(comm, opts, peer: int, transmitter: bool):
    SEEN.append(("link", opts.protocol, peer, transmitter))
    return "the fake link"


def _fake_setup() -> None:
    SEEN.append(("before MPI",))


def _fake_pingpong(*args) -> float:
    return 0.0


def _fake_transfer(*args) -> float:
    return 0.0


def _check_depth(ns) -> dict:
    if ns.fake_depth is not None and not ns.fake_depth.isdigit():
        raise UsageError(f"--fake-depth {ns.fake_depth!r}: expected a whole number")
    return {}


FAKE = Protocol(
    name="fake",
    help_note="a protocol written in the tests",
    modes=("pingpong",),
    kernels=("python",),
    paired=True,
    async_ok=False,
    options=(ProtocolOption("--fake-depth", "fake: how deep it goes", "N"),),
    check_options=_check_depth,
    link=f"{__name__}:_fake_opener",
    loops={"python": (f"{__name__}:_fake_pingpong", f"{__name__}:_fake_transfer")},
    before_mpi_setup=f"{__name__}:_fake_setup",
)


def test_a_protocol_is_one_value_and_one_registry_line(monkeypatch):
    """A protocol written outside npmpi: its value in the registry brings its option (declared and
    checked, refused under another protocol), its set-up before MPI, its link and its loops."""
    monkeypatch.setitem(PROTOCOL_TABLE, "fake", FAKE)
    SEEN.clear()
    text = " ".join(build_parser().format_help().split())
    assert (
        "'fake': a protocol written in the tests" in text and "--fake-depth N fake: how deep it goes" in text
    )
    opts = parse_options(["--protocol", "fake", "--fake-depth", "3", "-u", "4K"])
    assert opts.protocol == "fake"
    with pytest.raises(UsageError, match="--fake-depth 'x': expected a whole number"):
        parse_options(["--protocol", "fake", "--fake-depth", "x"])
    with pytest.raises(UsageError, match="--fake-depth only applies to --protocol fake"):
        parse_options(["--fake-depth", "3"])
    with pytest.raises(UsageError, match="--protocol fake cannot run --mode stream"):
        parse_options(["--protocol", "fake", "--mode", "stream"])
    KIND.before_mpi(opts)
    assert open_link("comm", opts, 1, True) == "the fake link"
    assert SEEN == [("before MPI",), ("link", "fake", 1, True)]
    loop = MessageLoop(opts, Kernel("python", None, None, None, 0), transmitter=True)
    assert (loop.pingpong, loop.transfer) == (_fake_pingpong, _fake_transfer)
    with pytest.raises(KernelUnavailable, match="--kernel c has no loop for --protocol fake"):
        FAKE.loops_in(Kernel("c", None, None, None, 0))


def test_the_run_sets_up_what_its_protocol_needs_before_mpi(monkeypatch):
    import npmpi.protocols.rma.link as rmalink

    calls = []
    monkeypatch.setattr(rmalink, "quiet_declining_osc_ucx", lambda: calls.append("rma"))
    KIND.before_mpi(parse_options([]))
    KIND.before_mpi(parse_options(["--protocol", "tcp"]))
    assert calls == []
    KIND.before_mpi(parse_options(["--protocol", "rma"]))
    assert calls == ["rma"]
