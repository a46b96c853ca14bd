"""A fake NVML with the real library's semantics, standing in for `pynvml` (nvidia-ml-py) in tests.

`FakeNvml(...)` is passed wherever migplan takes "the pynvml module": it has pynvml's function names,
constants, ctypes structs (same field names and types), and error classes made the way pynvml makes
them (`NVMLError(code)` returns the `NVMLError_<Name>` subclass). It imports nothing from migplan, so
a wrong assumption in migplan's adapter fails against it. Facts: /work/shared/reference/nvml-apis.md and
pynvml.py 13.615.71 (read in site-packages).
"""

from tests.fake_nvml.nvml import FakeGpu, FakeMig, FakeNvml, FakeProcess

__all__ = ["FakeGpu", "FakeMig", "FakeNvml", "FakeProcess"]
