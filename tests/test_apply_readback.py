"""The two texts apply reads besides discovery: the MIG devices table of plain `nvidia-smi` (the memory a
created MIG device really has, docs/nvidia-smi.md §12) and `nvidia-smi mig -h` (does -cgi take PROFILE:START,
§5). Parsed as untrusted text."""

from __future__ import annotations

import pytest

from migplan.smi import SmiError
from migplan.smi.mig_table import MigDeviceMemory, parse_mig_devices, takes_placement

# docs/nvidia-smi.md §12, verbatim (A30, driver 535), with the GPU rows above it
SAMPLE = """\
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.129.03             Driver Version: 535.129.03   CUDA Version: 12.2     |
+---------------------------------------------------------------------------------------+

+---------------------------------------------------------------------------------------+
| MIG devices:                                                                          |
+------------------+--------------------------------+-----------+-----------------------+
| GPU  GI  CI  MIG |                   Memory-Usage |        Vol|      Shared           |
|      ID  ID  Dev |                     BAR1-Usage | SM     Unc| CE ENC DEC OFA JPG    |
|                  |                                |        ECC|                       |
|==================+================================+===========+=======================|
|  0    2   0   0  |              25MiB / 11968MiB  | 28      0 |  2   0    2    0    0 |
|                  |               0MiB / 16383MiB  |           |                       |
+------------------+--------------------------------+-----------+-----------------------+

+---------------------------------------------------------------------------------------+
| Processes:                                                                            |
|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |
+---------------------------------------------------------------------------------------+
"""


def test_the_verbatim_mig_devices_table_parses() -> None:
    assert parse_mig_devices(SAMPLE) == [MigDeviceMemory(gpu=0, gi_id=2, ci_id=0, device=0, used_mib=25,
                                                         total_mib=11968)]


def test_no_mig_devices_section_is_no_rows() -> None:
    assert parse_mig_devices(SAMPLE.split("| MIG devices:")[0]) == []


@pytest.mark.parametrize("line", [
    "|  0    2   0   0  |              25MiB / 99999999999MiB  | 28      0 |  2   0    2    0    0 |",
    "|  0    2   0   0  |  rm -rf / 25MiB / 11968MiB  | 28      0 |  2   0    2    0    0 |",
    "|  x    2   0   0  |              25MiB / 11968MiB  | 28      0 |  2   0    2    0    0 |",
])
def test_a_hostile_row_is_refused_not_misread(line: str) -> None:
    bad = SAMPLE.replace("|  0    2   0   0  |              25MiB / 11968MiB  | 28      0 |  2   0    2    0    0 |",
                         line)
    with pytest.raises(SmiError):
        parse_mig_devices(bad)


def test_placement_support_is_read_from_the_help_text() -> None:
    new = ("[-cgi | --create-gpu-instance]: Create GPU instances for the given profiles. A profile tuple consists "
           "of a profile name or ID and an optional placement specifier, which consists of a colon and a\n"
           "      placement start index. Provide comma separated values for more than one profile tuple(e.g. 1:0,4:2).")
    old = "[-cgi | --create-gpu-instance]: Create GPU instances for the given profiles."
    assert takes_placement(new) and not takes_placement(old) and not takes_placement("")
