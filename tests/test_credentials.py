"""Credentials for network meters: from a private file or the environment, never inline, never echoed."""

from __future__ import annotations

import os

import pytest

from npmpi.meters.base import INLINE_SECRET_KEYS, MeterError, MeterSpec, parse_meter_spec
from npmpi.meters.credentials import read_credentials, reject_inline_secrets

SECRET = "s3cr3t-Pa55w0rd!"
WANTED = {"username": "NPMPI_TEST_USER", "password": "NPMPI_TEST_PASSWORD"}
OTHER_UID = 1  # the 'daemon' user of every Debian system


def spec(**params: str) -> MeterSpec:
    text = "redfish:bmc1" + "".join(f",{k}={v}" for k, v in params.items())
    return MeterSpec(kind="redfish", target="bmc1", params=dict(params), text=text)


def credentials_file(tmp_path, mode: int = 0o600, text: str | None = None):
    path = tmp_path / "bmc.cred"
    path.write_text(text if text is not None else f"# BMC of node 1\n\nusername = admin\npassword={SECRET}\n")
    path.chmod(mode)
    return path


def refused(sp: MeterSpec, match: str) -> str:
    with pytest.raises(MeterError, match=match) as info:
        read_credentials(sp, WANTED, sp.text)
    message = str(info.value)
    assert SECRET not in message
    return message


def test_private_file_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("NPMPI_TEST_PASSWORD", "not-this-one")
    path = credentials_file(tmp_path)
    assert read_credentials(spec(credentials=str(path)), WANTED, "redfish") == {
        "username": "admin",
        "password": SECRET,
    }
    path.chmod(0o400)  # stricter is fine
    assert read_credentials(spec(credentials=str(path)), WANTED, "redfish")["password"] == SECRET


def test_readable_by_others_is_refused_with_the_remedy(tmp_path):
    path = credentials_file(tmp_path, 0o644)
    message = refused(spec(credentials=str(path)), "mode 0644")
    assert f"chmod 600 {path}" in message and str(path) in message
    credentials_file(tmp_path, 0o640)
    refused(spec(credentials=str(path)), "mode 0640")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_file_of_another_user_is_refused(tmp_path):
    path = credentials_file(tmp_path)
    os.chown(path, OTHER_UID, -1)
    message = refused(spec(credentials=str(path)), f"owned by uid {OTHER_UID}, not by you")
    assert f"chmod 600 {path}" in message


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_symlink_to_a_private_file_of_another_user_is_refused(tmp_path):
    target = credentials_file(tmp_path)
    os.chown(target, OTHER_UID, -1)
    link = tmp_path / "mine.cred"
    link.symlink_to(target)
    refused(spec(credentials=str(link)), "symbolic link")


def test_not_a_file_missing_or_malformed(tmp_path):
    refused(spec(credentials=str(tmp_path / "absent")), "no such file")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    refused(spec(credentials=str(fifo)), "not a regular file")
    path = credentials_file(tmp_path, text=f"username=admin\n{SECRET}\n")
    refused(spec(credentials=str(path)), r"line 2 is not `field=value`")
    path = credentials_file(tmp_path, text="username=admin\n")
    refused(spec(credentials=str(path)), "has no password= line")


@pytest.mark.parametrize("key", INLINE_SECRET_KEYS)
def test_inline_secret_is_a_usage_error_without_the_value(key):
    sp = spec(**{key: SECRET})
    with pytest.raises(MeterError) as info:
        reject_inline_secrets(sp)
    assert info.value.exit_code == 2
    message = str(info.value)
    assert SECRET not in message and f"{key}=" in message
    assert "environment variable" in message and "credentials=PATH" in message and "0600" in message


def test_the_spec_parser_refuses_an_inline_secret_before_echoing_the_spec():
    # the unknown-parameter and positional errors quote the whole spec: the secret check comes first
    for text in (f"ipmi:password={SECRET}", f"estimate:a,b,community={SECRET}", f"redfish:h,PASS={SECRET}"):
        with pytest.raises(MeterError, match="may not be given on the command line") as info:
            parse_meter_spec(text)
        assert SECRET not in str(info.value)


def test_environment_defaults_and_per_spec_override(monkeypatch):
    monkeypatch.setenv("NPMPI_TEST_USER", "admin")
    monkeypatch.setenv("NPMPI_TEST_PASSWORD", "default-one")
    monkeypatch.setenv("BMC1_PASS", SECRET)
    assert read_credentials(spec(), WANTED, "redfish") == {"username": "admin", "password": "default-one"}
    got = read_credentials(spec(password_env="BMC1_PASS"), WANTED, "redfish")
    assert got == {"username": "admin", "password": SECRET}


def test_missing_variable_is_named_with_the_file_option(monkeypatch):
    monkeypatch.setenv("NPMPI_TEST_USER", "admin")
    monkeypatch.delenv("NPMPI_TEST_PASSWORD", raising=False)
    message = refused(spec(), "environment variable NPMPI_TEST_PASSWORD is not set")
    assert "credentials=PATH" in message and "password_env=VARNAME" in message
    monkeypatch.setenv("NPMPI_TEST_PASSWORD", SECRET)
    monkeypatch.delenv("BMC9_PASS", raising=False)
    refused(spec(password_env="BMC9_PASS"), "environment variable BMC9_PASS is not set")
