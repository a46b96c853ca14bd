"""known_hosts parsing and matching (OpenSSH's rules), and the host-key policy, without an sshd.

The same rules are checked against the real `ssh` client in tests/fleet/test_known_hosts_ssh.py.
"""

from __future__ import annotations

import base64
import hashlib
import io
import logging
import os
import stat
from pathlib import Path

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from migplan.adapters import known_hosts as kh
from migplan.adapters.runner import HostKeyChangedError, HostKeyRevokedError, HostKeyUnknownError
from migplan.adapters.ssh import Endpoint, KnownHosts, _HostKeyPolicy, public_key
from migplan.errors import InputError


def _string(b: bytes) -> bytes:
    return len(b).to_bytes(4, "big") + b


def _mpint(n: int) -> bytes:
    raw = n.to_bytes((n.bit_length() + 8) // 8, "big")  # a leading zero byte keeps it positive
    return _string(raw)


def ed_key() -> tuple[ed25519.Ed25519PrivateKey, kh.PublicKey]:
    priv = ed25519.Ed25519PrivateKey.generate()
    raw = priv.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return priv, kh.PublicKey.from_blob(_string(b"ssh-ed25519") + _string(raw))


def rsa_key() -> kh.PublicKey:
    nums = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key().public_numbers()
    return kh.PublicKey.from_blob(_string(b"ssh-rsa") + _mpint(nums.e) + _mpint(nums.n))


def line(hosts: str, key: kh.PublicKey, marker: str = "") -> str:
    return f"{marker + ' ' if marker else ''}{hosts} {key.keytype} {key.base64}\n"


A = ed_key()[1]
B = ed_key()[1]
NAME = kh.host_name("LOCALHOST", 2222)


def verdict(text: str, name: str, key: kh.PublicKey) -> kh.Status:
    return kh.check(kh.parse(text, "kh"), name, key).status


# --- names and patterns ---------------------------------------------------------------------------

def test_host_name_is_lowercased_and_bracketed_off_port_22() -> None:
    assert kh.host_name("LOCALHOST") == "localhost"
    assert kh.host_name("Gpu01.Example.COM", 2222) == "[gpu01.example.com]:2222"
    assert kh.host_name("[fe80::1]", 2222) == "[fe80::1]:2222"
    assert Endpoint("LocalHost", 2222).known_hosts_name == "[localhost]:2222"
    assert Endpoint("LocalHost").known_hosts_name == "localhost"


@pytest.mark.parametrize(("patterns", "name", "expected"), [
    ("localhost", "localhost", True),
    ("LOCALHOST", "localhost", True),
    ("LocalHost", "LOCALHOST", True),
    ("gpu*", "gpu01", True),
    ("gpu?", "gpu01", False),
    ("gpu??", "gpu01", True),
    ("*", "[10.0.0.1]:2222", True),
    ("10.0.0.*", "[10.0.0.1]:2222", False),  # brackets are part of the name
    ("[10.0.0.*]:2222", "[10.0.0.1]:2222", True),
    ("[10.0.0.1]:*", "[10.0.0.1]:2222", True),
    ("a,b,gpu01", "gpu01", True),
    ("gpu*,!gpu01", "gpu01", False),  # a negated match wins over a positive one
    ("!gpu01,gpu*", "gpu01", False),
    ("gpu*,!gpu01", "gpu02", True),
    ("!gpu01", "gpu02", False),  # negation alone never matches
    ("gpu[0]1", "gpu01", False),  # no character classes in OpenSSH patterns
    ("gpu.1", "gpu01", False),  # '.' is literal
])
def test_patterns(patterns: str, name: str, expected: bool) -> None:
    assert kh.match_patterns(name, patterns) is expected


def test_hashed_entries_match_exactly_one_lowercased_name() -> None:
    salt = bytes(range(20))
    hashed = kh.hash_name("[localhost]:2222", salt)
    assert hashed.startswith("|1|")
    text = line(hashed, A)
    assert verdict(text, kh.host_name("LocalHost", 2222), A) is kh.Status.OK
    assert verdict(text, kh.host_name("localhost", 22), A) is kh.Status.UNKNOWN
    assert verdict(text, NAME, B) is kh.Status.CHANGED
    # the HMAC is what `ssh-keygen -H` writes (HMAC-SHA1 keyed with the salt over the name)
    import hmac

    digest = hmac.new(salt, b"[localhost]:2222", hashlib.sha1).digest()
    assert hashed.split("|")[3] == base64.b64encode(digest).decode()


# --- verdicts ---------------------------------------------------------------------------------------

def test_the_case_defect_a_changed_key_is_changed_not_unknown() -> None:
    text = line("[localhost]:2222", A)
    assert verdict(text, NAME, B) is kh.Status.CHANGED
    assert verdict(text, NAME, A) is kh.Status.OK
    assert verdict(line("[LocalHost]:2222", A), kh.host_name("localhost", 2222), A) is kh.Status.OK


def test_plain_host_is_port_22_and_the_retry_without_port() -> None:
    text = line("gpu01", A)
    assert verdict(text, kh.host_name("gpu01", 22), A) is kh.Status.OK
    assert verdict(line("[gpu01]:22", A), kh.host_name("gpu01", 22), A) is kh.Status.UNKNOWN
    assert verdict(line("gpu01:2222", A), kh.host_name("gpu01", 2222), A) is kh.Status.UNKNOWN
    # nothing under [gpu01]:2222: OpenSSH retries "gpu01" and accepts exactly the same key there
    assert verdict(text, kh.host_name("gpu01", 2222), A) is kh.Status.OK
    assert verdict(text, kh.host_name("gpu01", 2222), B) is kh.Status.UNKNOWN  # not "changed"
    assert verdict(line("[gpu01]:2222", B) + text, kh.host_name("gpu01", 2222), A) is kh.Status.CHANGED
    assert verdict(text + line("gpu01", A, "@revoked"), kh.host_name("gpu01", 2222), A) is kh.Status.REVOKED
    assert kh.without_port("[fe80::1]:2222") == "fe80::1" and kh.without_port("gpu01") is None


def test_any_recorded_key_that_differs_is_a_change_even_of_another_type() -> None:
    r = rsa_key()
    assert verdict(line("gpu01", r), "gpu01", A) is kh.Status.CHANGED
    assert verdict(line("gpu01", r) + line("gpu01", A), "gpu01", A) is kh.Status.OK
    assert verdict(line("gpu01", A) + line("gpu01", B), "gpu01", B) is kh.Status.OK
    v = kh.check(kh.parse(line("gpu01", r) + line("gpu*", B), "kh"), "gpu01", A)
    assert v.status is kh.Status.CHANGED
    assert [e.key for e in v.recorded] == [B, r]  # the same key type first


def test_revoked_is_refused_always_and_only_for_that_key() -> None:
    both = line("gpu01", A) + line("*", A, "@revoked")
    assert verdict(both, "gpu01", A) is kh.Status.REVOKED
    assert verdict(line("gpu01", A) + line("gpu01", B, "@revoked"), "gpu01", A) is kh.Status.OK
    assert verdict(line("gpu01", B, "@revoked"), "gpu01", A) is kh.Status.UNKNOWN
    assert verdict(line("other", A, "@revoked") + line("gpu01", A), "gpu01", A) is kh.Status.OK


def test_cert_authority_lines_never_trust_a_plain_key() -> None:
    v = kh.check(kh.parse(line("*", A, "@cert-authority"), "kh"), "gpu01", A)
    assert v.status is kh.Status.UNKNOWN and [e.line for e in v.authorities] == [1]
    v = kh.check(kh.parse(line("*", A, "@cert-authority") + line("gpu01", B), "kh"), "gpu01", A)
    assert v.status is kh.Status.CHANGED


def test_comments_blank_lines_whitespace_and_crlf() -> None:
    text = ("# a comment\n\n   \n\t# indented comment\n"
            f"  \tfoo,gpu01\t {A.keytype}   {A.base64}  a trailing comment\r\n")
    assert verdict(text, "gpu01", A) is kh.Status.OK


def test_unparseable_lines_are_skipped_with_a_warning_naming_file_and_line() -> None:
    good_b64 = A.base64
    text = "\n".join([
        "this is not a known_hosts line",  # 1: too few fields
        f"gpu01 ssh-ed25519 {good_b64[:-8]}",  # 2: truncated base64
        f"gpu01 ssh-rsa {good_b64}",  # 3: type says rsa, key is ed25519
        f"gpu01 ssh-foo {good_b64}",  # 4: unknown type
        f"@bogus gpu01 ssh-ed25519 {good_b64}",  # 5: unknown marker
        f"|1|c2FsdA==|AAAA ssh-ed25519 {good_b64}",  # 6: salt of the wrong length
        f"gpu01 ssh-ed25519 {base64.b64encode(_string(b'ssh-ed25519') + _string(b'short')).decode()}",  # 7
        "gpu01 ssh-ed25519",  # 8: no key
        f"@REVOKED gpu01 ssh-ed25519 {good_b64}",  # 9: markers are case-sensitive
        line("gpu01", B).strip(),  # 10: fine
    ]) + "\n"
    bad: list[kh.BadLine] = []
    entries = kh.parse(text, "/x/known_hosts", warn=bad.append)
    assert [e.line for e in entries] == [10]
    assert [b.line for b in bad] == list(range(1, 10))
    assert all(str(b).startswith(f"/x/known_hosts:{b.line}: ") for b in bad)
    assert kh.check(entries, "gpu01", A).status is kh.Status.CHANGED


def test_key_parsing_and_fingerprint() -> None:
    assert kh.PublicKey.from_text("ssh-ed25519", A.base64) == A
    with pytest.raises(ValueError, match="unknown key type"):
        kh.PublicKey.from_text("ED25519", A.base64)  # OpenSSH 9 refuses short names in known_hosts
    r = rsa_key()
    assert kh.PublicKey.from_text("rsa-sha2-512", r.base64) == r
    with pytest.raises(ValueError, match="too small"):
        kh.PublicKey.from_blob(_string(b"ssh-rsa") + _mpint(65537) + _mpint((1 << 767) + 1))
    ecpub = ec.generate_private_key(ec.SECP256R1()).public_key()
    point = ecpub.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    e = kh.PublicKey.from_blob(_string(b"ecdsa-sha2-nistp256") + _string(b"nistp256") + _string(point))
    assert e.keytype == "ecdsa-sha2-nistp256"
    with pytest.raises(ValueError):
        kh.PublicKey.from_blob(_string(b"ecdsa-sha2-nistp256") + _string(b"nistp384") + _string(point))
    digest = base64.b64encode(hashlib.sha256(A.blob).digest()).decode().rstrip("=")
    assert A.fingerprint == f"SHA256:{digest}"


# --- the file ---------------------------------------------------------------------------------------

def test_file_records_new_keys_with_the_lowercased_name(tmp_path: Path) -> None:
    path = tmp_path / "ssh" / "known_hosts"  # the directory is created, as ssh does
    f = kh.KnownHostsFile(str(path), writable=True)
    assert f.record(NAME, A).ok
    assert path.read_text() == f"[localhost]:2222 ssh-ed25519 {A.base64}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert f.record(NAME, A).ok and path.read_text().count("\n") == 1  # known now: not added twice
    assert f.record(NAME, B).status is kh.Status.CHANGED
    assert path.read_text().count("\n") == 1
    assert kh.KnownHostsFile(str(path)).check(kh.host_name("localhost", 2222), A).ok


def test_record_refuses_changed_revoked_and_ca_only_hosts(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    text = line("[localhost]:2222", A) + line("*", B, "@revoked") + line("ca-only", A, "@cert-authority")
    path.write_text(text)
    f = kh.KnownHostsFile(str(path), writable=True)
    assert f.record(NAME, B).status is kh.Status.REVOKED
    assert f.record(kh.host_name("LOCALHOST", 2223), B).status is kh.Status.REVOKED
    v = f.record("ca-only", ed_key()[1])
    assert v.status is kh.Status.UNKNOWN and v.authorities
    assert path.read_text() == text


def test_record_keeps_a_symlink_and_its_target_and_never_leaves_it_world_writable(tmp_path: Path) -> None:
    real = tmp_path / "shared" / "known_hosts"
    real.parent.mkdir()
    real.write_text(line("other", B).rstrip("\n"))  # no final newline
    real.chmod(0o666)
    link = tmp_path / "known_hosts"
    link.symlink_to(real)
    kh.KnownHostsFile(str(link), writable=True).record("gpu01", A)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == line("other", B) + line("gpu01", A)
    assert stat.S_IMODE(real.stat().st_mode) == 0o644


def test_devices_and_directories(tmp_path: Path) -> None:
    assert kh.KnownHostsFile(os.devnull).entries == []  # reading /dev/null: nothing is known
    with pytest.raises(InputError, match="cannot record new host keys in /dev/null.*character device"):
        kh.KnownHostsFile(os.devnull, writable=True)
    with pytest.raises(InputError, match="not a regular file"):
        kh.KnownHostsFile(str(tmp_path))
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_group_writable_file_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "known_hosts"
    path.write_text(line("gpu01", A) + "garbage\n")
    path.chmod(0o664)
    with caplog.at_level(logging.WARNING, logger="migplan"):
        kh.KnownHostsFile(str(path))
    text = caplog.text
    assert "writable by group or others" in text and f"{path}:2:" in text


# --- the policy (paramiko keys, no server) ----------------------------------------------------------

def paramiko_key() -> paramiko.PKey:
    priv = ed25519.Ed25519PrivateKey.generate()
    pem = priv.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                             serialization.NoEncryption()).decode()
    return paramiko.Ed25519Key.from_private_key(io.StringIO(pem))


def test_policy_refuses_a_changed_key_under_another_spelling_even_with_accept_new(tmp_path: Path) -> None:
    recorded, presented = paramiko_key(), paramiko_key()
    path = tmp_path / "known_hosts"
    path.write_text(line("[localhost]:2222", public_key(recorded)))
    name = Endpoint("LOCALHOST", 2222).known_hosts_name
    policy = _HostKeyPolicy(KnownHosts(str(path), writable=True), True, "gpu", name)
    with pytest.raises(HostKeyChangedError) as err:
        policy.missing_host_key(paramiko.SSHClient(), "[LOCALHOST]:2222", presented)
    msg = str(err.value)
    assert "HOST KEY CHANGED for [localhost]:2222" in msg
    assert recorded.fingerprint in msg and presented.fingerprint in msg
    assert path.read_text() == line("[localhost]:2222", public_key(recorded))
    _HostKeyPolicy(KnownHosts(str(path)), False, "gpu", name).missing_host_key(
        paramiko.SSHClient(), "[LOCALHOST]:2222", recorded)


def test_policy_revoked_ca_only_unknown_and_accept_new(tmp_path: Path) -> None:
    key = paramiko_key()
    pk = public_key(key)
    path = tmp_path / "known_hosts"
    path.write_text(line("revoked", pk) + line("*", pk, "@revoked").replace("*", "revoked")
                    + line("ca.example", pk, "@cert-authority"))
    known = KnownHosts(str(path), writable=True)

    def verify(name: str, accept: bool = True) -> None:
        _HostKeyPolicy(known, accept, "gpu", name).missing_host_key(paramiko.SSHClient(), name, key)

    with pytest.raises(HostKeyRevokedError) as rev:
        verify("revoked")
    assert rev.value.code == "host-key-revoked" and "@revoked" in str(rev.value)
    with pytest.raises(HostKeyUnknownError) as ca:
        verify("ca.example")
    assert "certificate" in str(ca.value) and "not recorded" in str(ca.value)
    with pytest.raises(HostKeyUnknownError) as unknown:
        verify("new.example", accept=False)
    assert pk.fingerprint in str(unknown.value) and "--accept-new-host-keys" in str(unknown.value)
    verify("NEW.example")
    assert path.read_text().endswith(f"new.example ssh-ed25519 {pk.base64}\n")
    verify("new.example", accept=False)  # now known
