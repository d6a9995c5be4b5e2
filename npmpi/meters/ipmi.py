"""`ipmi`: whole-node power from the BMC, read with `ipmitool dcmi power reading`.

ipmitool prints, among other lines, `Instantaneous power reading:   220 Watts` and `Power reading
state is: activated`. Each read runs the command once (a BMC answers in tens to hundreds of
milliseconds and refreshes about once a second). The command needs the BMC: root, or read/write
access to /dev/ipmi0, or a remote BMC over the network (`cmd=ipmitool -I lanplus -H BMC -U USER -E`).

Spec: `ipmi[:cmd=ipmitool,timeout=5]`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import time

from npmpi.meters.base import Meter, MeterError, MeterFault, MeterSpec, Reading

DEFAULT_CMD = "ipmitool"
DEFAULT_TIMEOUT_S = 5.0
ARGS = ("dcmi", "power", "reading")
POWER_LINE = re.compile(r"^\s*Instantaneous power reading\s*:\s*(\d+(?:\.\d+)?)\s*Watts?\s*$", re.MULTILINE)
PASSWORD_OPTION = re.compile(r"(-P\s+)(\S+)")
STATE_LINE = re.compile(r"^\s*Power reading state is\s*:?\s*(\w+)", re.MULTILINE)

INSTALL_HINT = (
    "install it (Debian/Ubuntu: `apt-get install ipmitool`; RHEL: `dnf install ipmitool`) or give its "
    "path with cmd=/path/to/ipmitool"
)
ACCESS_HINT = (
    "ipmitool needs the BMC: load the drivers (`modprobe ipmi_devintf ipmi_si`), then run as root or "
    "give your group read/write access to /dev/ipmi0 (udev rule: "
    'KERNEL=="ipmi*", GROUP="ipmi", MODE="0660"); for a remote BMC use '
    "cmd=ipmitool -I lanplus -H BMC -U USER -E (password in IPMI_PASSWORD)"
)


class ReadingError(Exception):
    """The command ran but its output holds no usable power reading."""


def parse_power_reading(text: str) -> float:
    """Watts from `ipmitool dcmi power reading` output; ReadingError if absent or deactivated."""
    state = STATE_LINE.search(text)
    if state and state.group(1).lower() != "activated":
        raise ReadingError(f"the BMC's power reading state is {state.group(1)!r}, not 'activated'")
    match = POWER_LINE.search(text)
    if match is None:
        first = text.strip().splitlines()[0] if text.strip() else "nothing"
        raise ReadingError(f"no 'Instantaneous power reading' line in the output (it began with {first!r})")
    return float(match.group(1))


class IpmiMeter(Meter):
    """Node power from the BMC through ipmitool's DCMI power reading."""

    kind = "ipmi"
    parameters = ("cmd", "timeout")  # the key=value parameters its spec accepts
    natural_interval_s = 1.0
    quantities = ("power_w",)
    power_resolution_w = 1.0  # DCMI reports whole watts

    def __init__(self, spec: MeterSpec) -> None:
        super().__init__(spec)
        cmd = spec.params.get("cmd") or spec.target or DEFAULT_CMD
        try:
            self.argv = shlex.split(cmd)
        except ValueError as exc:
            raise MeterError.about(spec.text, f"cannot split cmd={cmd!r}: {exc}") from None
        if not self.argv:
            raise MeterError.about(spec.text, "cmd= is empty")
        self.timeout_s = spec.number("timeout", DEFAULT_TIMEOUT_S, hi=60.0)
        self.longest_call_s = self.timeout_s
        if self.timeout_s <= 0:
            raise MeterError.about(spec.text, "timeout must be positive (seconds)")
        self.executable: str | None = None

    def _command(self) -> list[str]:
        assert self.executable is not None
        return [self.executable, *self.argv[1:], *ARGS]

    def _run(self) -> subprocess.CompletedProcess[str]:
        """Run the command once; TimeoutExpired after killing it and anything it started."""
        # C locale: the output is parsed, and a translated message would not match
        env = {**os.environ, "LC_ALL": "C"}
        command = self._command()
        # its own session, so a timeout kills a wrapper (sudo, a script) and its children too:
        # a surviving child would hold the output pipe open and the read would not end
        with subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        ) as proc:
            try:
                out, err = proc.communicate(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                raise
        return subprocess.CompletedProcess(command, proc.returncode, out, err)

    def open(self) -> None:
        exe = shutil.which(self.argv[0])
        if exe is None:
            raise MeterError.about(self.spec.text, f"{self.argv[0]} not found: {INSTALL_HINT}. {ACCESS_HINT}")
        self.executable = exe
        try:
            result = self._run()
        except subprocess.TimeoutExpired:
            raise MeterError.about(
                self.spec.text,
                f"{self._shown_command()} gave no answer in {self.timeout_s:g} s "
                f"(BMC busy or unreachable; timeout= sets the limit). {ACCESS_HINT}",
            ) from None
        except OSError as exc:
            raise MeterError.about(self.spec.text, f"cannot run {exe}: {exc}") from None
        if result.returncode != 0:
            raise MeterError.about(
                self.spec.text, f"{self._shown_command()} failed ({stderr_text(result)}). " + ACCESS_HINT
            )
        try:
            parse_power_reading(result.stdout)
        except ReadingError as exc:
            raise MeterError.about(
                self.spec.text, f"{exc}; this BMC may not support DCMI power readings"
            ) from None

    def read(self, timeout_s: float) -> list[Reading]:
        if self.executable is None:
            raise MeterFault("the IPMI meter is not open")
        start = time.time()
        try:
            result = self._run()
        except subprocess.TimeoutExpired:
            raise MeterFault(f"ipmitool gave no power reading within {self.timeout_s:g} s") from None
        except OSError as exc:
            raise MeterFault(f"cannot run {self.executable}: {exc}") from None
        end = time.time()
        if result.returncode != 0:
            raise MeterFault(f"ipmitool failed with status {result.returncode}: {stderr_text(result)}")
        try:
            watts = parse_power_reading(result.stdout)
        except ReadingError as exc:
            raise MeterFault(str(exc)) from None
        # stamped at the middle of ipmitool's run (the BMC answered within it), both ends kept
        mid = 0.5 * (start + end)
        return [Reading(time_unix_s=mid, power_w=watts, request_start_unix_s=start, request_end_unix_s=end)]

    def close(self) -> None:
        self.executable = None

    def _shown_command(self) -> str:
        return _redact(" ".join([*self.argv, *ARGS]))

    def description(self) -> str:
        return f"BMC power through `{self._shown_command()}`"

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d.update(
            {
                "spec": _redact(self.spec.text),
                "command": self._shown_command(),
                "timeout_s": self.timeout_s,
                "extra_sample_fields": ["request_start_unix_s", "request_end_unix_s"],
                "time_stamps": "the middle of each ipmitool run",
            }
        )
        return d


def _redact(text: str) -> str:
    """The text with a password given to ipmitool's -P replaced: it must not reach the run file."""
    return PASSWORD_OPTION.sub(r"\1***", text)


# ipmitool's stderr kept in an error: all of it (its first line often says why, e.g. "Could not open
# device at /dev/ipmi0 ..."), joined with " | ", cut in the middle beyond this many characters
MAX_STDERR_CHARS = 1000


def stderr_text(result: subprocess.CompletedProcess[str]) -> str:
    """ipmitool's whole message (stderr, else stdout), one line, bounded."""
    lines = [ln.strip() for ln in (result.stderr or result.stdout or "").splitlines() if ln.strip()]
    if not lines:
        return f"exit status {result.returncode}, no message"
    text = _redact(" | ".join(lines))
    if len(text) > MAX_STDERR_CHARS:
        half = MAX_STDERR_CHARS // 2
        text = f"{text[:half]} [... {len(text) - 2 * half} characters ...] {text[-half:]}"
    return text
