"""vGPU discovery (migplan.fleet.vgpu_discover) against a scripted hostile host: every answer replaced by garbage
gives the host's one clear error or a note, never another exception; what a host lists is bounded (issue 26)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from migplan.adapters.runner import BecomeError, Completed
from migplan.errors import MigplanError
from migplan.fleet.snapshot import DiscoveredGpu
from migplan.fleet.vgpu_discover import MAX_VFS, read_vgpu
from migplan.smi import SmiError

PF = "0000:c1:00.0"
SUMMARY = """+-----------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.16              Driver Version: 550.54.16                 |
|---------------------------------+------------------------------+------------+
| GPU  Name                       | Bus-Id                       | GPU-Util   |
|      vGPU ID     Name           | VM ID     VM Name            | vGPU-Util  |
|=================================+==============================+============|
|   0  NVIDIA L4                  | 00000000:C1:00.0             |   0%       |
+---------------------------------+------------------------------+------------+
"""
QUERY = "GPU 00000000:C1:00.0\n    Active vGPUs                          : 0\n"
TYPES = "GPU 00000000:C1:00.0\n    NVIDIA L4-4C\n    NVIDIA L4-8C\n"


def vf(k: int) -> str:
    return f"0000:c2:{k // 8:02x}.{k % 8}"


class Host:
    """Answers each argv from a function of it; `log` keeps what was run."""

    host = "hostile"

    def __init__(self, answer: Callable[[Sequence[str]], tuple[int, str, str]]) -> None:
        self.answer = answer
        self.log: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str], *, timeout: float = 60, stdin: bytes | None = None) -> Completed:
        self.log.append(tuple(argv))
        code, out, err = self.answer(argv)
        return Completed(tuple(argv), code, out, err)


def l4_host(vfs: int = 2) -> Callable[[Sequence[str]], tuple[int, str, str]]:
    def answer(argv: Sequence[str]) -> tuple[int, str, str]:
        a = list(argv)
        if a == ["nvidia-smi", "vgpu"]:
            return 0, SUMMARY, ""
        if a == ["nvidia-smi", "vgpu", "-q"]:
            return 0, QUERY, ""
        if a[:2] == ["nvidia-smi", "vgpu"]:
            return 0, TYPES, ""
        if a[0] == "ls" and a[-1].endswith(PF):
            return 0, "".join(f"virtfn{k}\n" for k in range(vfs)) + "sriov_totalvfs\nvendor\n", ""
        if a[0] == "ls":
            return 2, "", f"ls: cannot access '{a[-1]}': No such file or directory\n"
        if a[0] == "readlink":
            return 0, "".join(f"../{vf(k)}\n" for k in range(len(a) - 2)), ""
        if a[-1].endswith("sriov_totalvfs"):
            return 0, "32\n", ""
        if a[-1].endswith("current_vgpu_type"):
            return 0, "0\n", ""
        if a[-1].endswith("gpu_instance_id"):
            return 0, "", ""
        if a[-1].endswith("creatable_vgpu_types"):
            return 0, "ID    : vGPU Name\n1200  : NVIDIA L4-4C\n", ""
        return 127, "", f"sh: {a[0]}: not found\n"
    return answer


GPU = DiscoveredGpu(0, None, "NVIDIA L4", pci_bus_id="00000000:C1:00.0", mig_capable=False, memory_total_mib=23034)


def test_the_scripted_host_reads_as_a_vgpu_host() -> None:
    notes: list[str] = []
    (g,) = read_vgpu(Host(l4_host()), "hostile", [GPU], notes)
    assert g.vgpu is not None and g.vgpu.board == "L4" and g.vgpu.total_vfs == 32
    assert [d.address for d in g.vgpu.devices] == [vf(0), vf(1)] and not notes


def test_more_virtual_functions_than_any_board_has_are_bounded() -> None:
    notes: list[str] = []
    host = Host(l4_host(vfs=MAX_VFS + 44))
    (g,) = read_vgpu(host, "hostile", [GPU], notes)
    assert g.vgpu is not None and len(g.vgpu.devices) == MAX_VFS
    assert any(f"{MAX_VFS + 44} virtual functions listed; the first {MAX_VFS} are read" in n for n in notes)
    assert max(len(a) for a in host.log) <= MAX_VFS + 2


class SudoForNvidiaSmiOnly(Host):
    """A host whose sudoers rule lets the login user run nvidia-smi alone: `sudo -n ls` is refused."""

    def run(self, argv: Sequence[str], *, timeout: float = 60, stdin: bytes | None = None) -> Completed:
        if argv[0] != "nvidia-smi":
            self.log.append(tuple(argv))
            raise BecomeError(self.host, "'sudo -n' failed: sudo: a password is required")
        return super().run(argv, timeout=timeout, stdin=stdin)

    def run_batch(self, argvs: Sequence[Sequence[str]], *, timeout: float = 60) -> list[Completed]:
        return [self.run(a, timeout=timeout) for a in argvs]  # raises as a batch would, at the first refusal


def test_a_become_prefix_that_refuses_the_sysfs_reads_leaves_a_note() -> None:
    notes: list[str] = []
    host = SudoForNvidiaSmiOnly(l4_host())
    (g,) = read_vgpu(host, "hostile", [GPU], notes)
    assert g.vgpu is not None and g.vgpu.devices == () and g.vgpu.board == "L4"
    assert any("a password is required" in n and "not known" in n for n in notes), notes
    assert ("nvidia-smi", "vgpu", "-q") in host.log


GARBAGE = ["", "\x00\x01\x02", "\x1b[2J\x1b]0;owned\x07", "x" * 5_000_000, "GPU 00000000:C1:00.0\n" * 3,
           "0\n" * 70, "../../../../etc/passwd\n", "ID    : vGPU Name\n99999999 : x\n", "-1\n", "virtfn0\n" * 5000]


def _with(command: Callable[[Sequence[str]], bool], text: str, code: int) -> Callable[[Sequence[str]], tuple[int, str,
                                                                                                               str]]:
    base = l4_host()

    def answer(argv: Sequence[str]) -> tuple[int, str, str]:
        return (code, text, text) if command(argv) else base(argv)
    return answer


COMMANDS: dict[str, Callable[[Sequence[str]], bool]] = {
    "summary": lambda a: list(a) == ["nvidia-smi", "vgpu"],
    "-q": lambda a: list(a) == ["nvidia-smi", "vgpu", "-q"],
    "-c": lambda a: list(a) == ["nvidia-smi", "vgpu", "-c"],
    "ls": lambda a: a[0] == "ls",
    "readlink": lambda a: a[0] == "readlink",
    "cat": lambda a: a[0] == "cat",
}


@pytest.mark.parametrize("code", [0, 1, 255])
@pytest.mark.parametrize("text", GARBAGE, ids=range(len(GARBAGE)))
@pytest.mark.parametrize("which", list(COMMANDS))
def test_garbage_from_any_command_is_a_clear_error_or_a_note(which: str, text: str, code: int) -> None:
    notes: list[str] = []
    try:
        out = read_vgpu(Host(_with(COMMANDS[which], text, code)), "hostile", [GPU], notes)
    except SmiError as err:  # the host's failure: nvidia-smi's, naming the command
        assert which in ("-q", "-c") and "nvidia-smi vgpu" in str(err), err
        assert "\x1b" not in str(err) and len(str(err)) < 10_000
        return
    except MigplanError as err:  # pragma: no cover - any other typed error would be a finding
        pytest.fail(f"unexpected {type(err).__name__}: {err}")
    assert len(out) == 1
    assert all("\x1b" not in n and "\x00" not in n and len(n) < 2000 for n in notes), notes
