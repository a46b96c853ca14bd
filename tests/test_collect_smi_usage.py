"""The nvidia-smi usage parsers (`migplan.smi.usage`) on public real output and on hostile text."""

from __future__ import annotations

import pytest

from migplan.smi import SmiParseError
from migplan.smi.usage import parse_accounted_apps, parse_pmon, parse_processes, pmon, query_accounted_apps

# nvidia-smi pmon of older drivers (public output, e.g. an NVIDIA forum/blog sample)
PMON_OLD = """# gpu        pid  type    sm   mem   enc   dec   command
# Idx          #   C/G     %     %     %     %   name
    0      22010     C    98    56     -     -   python3
    0      22010     C    98    55     -     -   python3
"""
# newer drivers (jpg/ofa columns), an idle GPU's dash row, and a process without a value
PMON_NEW = """# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command 
# Idx           #    C/G      %      %      %      %      %      %    name 
    0       3485     C      0      0      -      -      -      -    python         
    1          -     -      -      -      -      -      -      -    -              
    0       9999     C      -      -      -      -      -      -    some thing
"""  # noqa: W291 - nvidia-smi pads lines with spaces
PMON_FB = """# gpu         pid   type     sm    mem    enc    dec    jpg    ofa     fb   ccpm    command 
# Idx           #    C/G      %      %      %      %      %      %     MB     MB    name 
    0       1312     G     24      3      -      -      -      -     97      0    Hyprland       
    0       1941   C+G      -      -      -      -      -      -      5      0    voxtype-osd-gtk
"""  # noqa: W291

# plain nvidia-smi Processes tables (public output: a 79-column R470-era table and a 91-column R535+ one)
PROCS_79 = """+-----------------------------------------------------------------------------+
| Processes:                                                                  |
|  GPU   GI   CI        PID   Type   Process name                  GPU Memory |
|        ID   ID                                                   Usage      |
|=============================================================================|
|    0   N/A  N/A      2806      G   /usr/lib/xorg/Xorg                296MiB |
|    0   N/A  N/A     28690      C   ...abcdef/venv/bin/python3.7     3069MiB |
+-----------------------------------------------------------------------------+
"""
PROCS_91_MIG = """+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
|    0    1    0   1117974      C   llama-server                                10282MiB |
|    0   13    0      4242      C   python3 serve.py                               N/A |
+-----------------------------------------------------------------------------------------+
"""


def test_pmon_both_layouts() -> None:
    old = parse_pmon(PMON_OLD)
    assert [(r.gpu, r.pid, r.sm_pct, r.command) for r in old] == [(0, 22010, 98, "python3")] * 2
    new = parse_pmon(PMON_NEW)
    assert [(r.pid, r.sm_pct) for r in new] == [(3485, 0), (9999, None)]  # '-' is no value, not 0
    assert new[1].command == "some thing"
    fb = parse_pmon(PMON_FB)
    assert [(r.pid, r.kind, r.sm_pct) for r in fb] == [(1312, "G", 24), (1941, "C+G", None)]


def test_accounted_apps_noheader_nounits_and_with_units() -> None:
    rows = parse_accounted_apps("GPU-c4dd6ed1-a6a9-9421-b6b4-4cdf657c919e, 764032, 67, 328, 4115\n"
                                "GPU-c4dd6ed1-a6a9-9421-b6b4-4cdf657c919e, 898345, [N/A], [N/A], 0\n")
    assert (rows[0].pid, rows[0].gpu_util_pct, rows[0].max_memory_mib, rows[0].time_ms) == (764032, 67, 328, 4115)
    assert rows[1].gpu_util_pct is None and rows[1].max_memory_mib is None and rows[1].time_ms == 0
    units = parse_accounted_apps("GPU-c4dd6ed1-a6a9-9421-b6b4-4cdf657c919e, 764032, 67 %, 328 MiB, 4115 ms\n")
    assert units[0].max_memory_mib == 328
    assert query_accounted_apps() == ["nvidia-smi", "--query-accounted-apps=gpu_uuid,pid,gpu_utilization,"
                                      "max_memory_usage,time", "--format=csv,noheader,nounits"]


def test_processes_table_of_both_widths() -> None:
    rows = parse_processes(PROCS_79)
    assert [(r.gpu, r.gi_id, r.ci_id, r.pid, r.kind, r.used_mib) for r in rows] == [
        (0, None, None, 2806, "G", 296), (0, None, None, 28690, "C", 3069)]
    mig = parse_processes(PROCS_91_MIG)
    assert [(r.gi_id, r.ci_id, r.pid, r.used_mib) for r in mig] == [(1, 0, 1117974, 10282), (13, 0, 4242, None)]
    assert mig[1].name == "python3 serve.py"
    empty = PROCS_79.replace(PROCS_79.splitlines()[5] + "\n", "").replace(
        PROCS_79.splitlines()[6], "|  No running processes found                                                 |")
    assert parse_processes(empty) == []
    assert parse_processes("no table here\n") == []


@pytest.mark.parametrize("text", [
    "    0   x123     C    98    56     -     -   python3\n",  # a row before any header
    "# gpu pid type sm mem command\n    0   12   C   999   0   x\n",  # out of range
    "# gpu pid type sm mem command\n    0\n",
])
def test_bad_pmon_is_a_parse_error(text: str) -> None:
    with pytest.raises(SmiParseError):
        parse_pmon(text)


@pytest.mark.parametrize("text", ["GPU-abc, 1, 2, 3\n", "not-a-uuid, 1, 2, 3, 4\n",
                                  "GPU-c4dd6ed1-a6a9-9421-b6b4-4cdf657c919e, -5, 1, 1, 1\n"])
def test_bad_accounted_apps_is_a_parse_error(text: str) -> None:
    with pytest.raises(SmiParseError):
        parse_accounted_apps(text)


def test_bad_process_row_is_a_parse_error() -> None:
    with pytest.raises(SmiParseError):
        parse_processes(PROCS_79.replace("28690      C", "28690  $(rm)"))


def test_pmon_builder_is_bounded() -> None:
    assert pmon(5) == ["nvidia-smi", "pmon", "-c", "5"]
    for bad in (0, 61, True, "5"):
        with pytest.raises(ValueError):
            pmon(bad)  # type: ignore[arg-type]


# --- the simulator prints these texts as NVIDIA does (the public samples above, character for character) ------

def test_simulator_prints_nvidias_processes_row_and_accounting_lines(tmp_path) -> None:
    from tests.sim.fleet import Proc, call_sim, read_state, write_host, write_state

    path = write_host(tmp_path / "s.json", "A100-SXM4-40GB", 1, mig=False, busy={0: [Proc(1117974, "llama-server",
                                                                                          10282)]})
    _, out, _ = call_sim(["nvidia-smi"], path)
    assert "|    0   N/A  N/A   1117974      C   llama-server                                10282MiB |" in out
    assert "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |" in out
    assert parse_processes(out)[0].pid == 1117974
    st = read_state(path)
    st["gpus"][0]["accounting"] = True
    st["gpus"][0]["processes"] = []
    st["gpus"][0]["accounted"] = [{"pid": 764032, "gpu_util": 67, "mem_util": 33, "max_memory_mib": 328,
                                   "time_ms": 4115}]
    write_state(path, st)
    _, out, _ = call_sim(["nvidia-smi", "--query-accounted-apps=pid,gpu_utilization,mem_utilization,"
                          "max_memory_usage,time", "--format=csv"], path)
    assert out.splitlines() == ["pid, gpu_utilization [%], mem_utilization [%], max_memory_usage [MiB], time [ms]",
                                "764032, 67 %, 33 %, 328 MiB, 4115 ms"]  # nvidia-smi-mig.md §14, verbatim
    _, out, _ = call_sim(query_accounted_apps(), path)
    assert parse_accounted_apps(out)[0].max_memory_mib == 328


def test_simulator_pmon_reads_back() -> None:
    import tempfile
    from pathlib import Path

    from tests.sim.fleet import Proc, call_sim, read_state, write_host, write_state

    path = write_host(Path(tempfile.mkdtemp()) / "s.json", "A100-SXM4-40GB", 2, mig=False,
                      busy={0: [Proc(3485, "/usr/bin/python")]})
    st = read_state(path)
    st["gpus"][0]["processes"][0]["sm_util"] = 37
    write_state(path, st)
    _, out, _ = call_sim(pmon(3), path)
    assert out.splitlines()[0] == "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command "
    rows = parse_pmon(out)
    assert [(r.gpu, r.pid, r.sm_pct, r.command) for r in rows] == [(0, 3485, 37, "python")] * 3  # GPU 1: dashes
