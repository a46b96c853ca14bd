"""argv builders: exact command lines (docs/nvidia-smi.md) and refusal of anything unsafe."""

from __future__ import annotations

import pytest

from migplan import smi
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Instance
from migplan.errors import CatalogError, InputError
from migplan.smi.errors import SmiCommandError

A100 = builtin_catalog().get("A100-SXM4-40GB")


@pytest.mark.parametrize(("argv", "expected"), [
    (smi.list_gpus(), "nvidia-smi -L"),
    (smi.query_gpus(), "nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,mig.mode.current,"
                       "mig.mode.pending,pci.device_id --format=csv,noheader,nounits"),
    (smi.query_gpus(3), "nvidia-smi -i 3 --query-gpu=index,uuid,name,pci.bus_id,memory.total,mig.mode.current,"
                        "mig.mode.pending,pci.device_id --format=csv,noheader,nounits"),
    (smi.query_compute_apps(1), "nvidia-smi -i 1 --query-compute-apps=pid,gpu_uuid,used_memory,process_name "
                                "--format=csv,noheader,nounits"),
    (smi.list_gi_profiles(0), "nvidia-smi mig -i 0 -lgip"),
    (smi.list_gi_placements(2), "nvidia-smi mig -i 2 -lgipp"),
    (smi.list_gpu_instances(7), "nvidia-smi mig -i 7 -lgi"),
    (smi.list_compute_instances(0), "nvidia-smi mig -i 0 -lci"),
    (smi.list_compute_instances(0, 2), "nvidia-smi mig -i 0 -lci -gi 2"),
    (smi.create_gpu_instances(0, [(9, 4), (19, 0), (19, 1)]), "nvidia-smi mig -i 0 -cgi 9:4,19:0,19:1"),
    (smi.create_gpu_instances(1, [(0, 0)], default_ci=True), "nvidia-smi mig -i 1 -cgi 0:0 -C"),
    (smi.create_compute_instances(0, 2), "nvidia-smi mig -i 0 -cci -gi 2"),
    (smi.create_compute_instances(0, 2, [0, 0, 0]), "nvidia-smi mig -i 0 -cci 0,0,0 -gi 2"),
    (smi.destroy_compute_instances(0), "nvidia-smi mig -i 0 -dci"),
    (smi.destroy_compute_instances(0, gi=[1], ci=[0, 1, 2]), "nvidia-smi mig -i 0 -dci -gi 1 -ci 0,1,2"),
    (smi.destroy_gpu_instances(0), "nvidia-smi mig -i 0 -dgi"),
    (smi.destroy_gpu_instances(0, [1, 2]), "nvidia-smi mig -i 0 -dgi -gi 1,2"),
    (smi.set_mig_mode(0, True), "nvidia-smi -i 0 -mig 1"),
    (smi.set_mig_mode(4, False), "nvidia-smi -i 4 -mig 0"),
    (smi.reset_gpu(5), "nvidia-smi -r -i 5"),
])
def test_exact_argv(argv: list[str], expected: str) -> None:
    assert argv == expected.split(" ")
    assert all(isinstance(t, str) for t in argv)


def test_create_instances_for_uses_catalog_ids_and_starts() -> None:
    argv = smi.create_instances_for(A100, 0, [Instance(4, "3g.20gb"), Instance(0, "MIG 2g.10gb"), Instance(2, "19")])
    assert argv == ["nvidia-smi", "mig", "-i", "0", "-cgi", "9:4,14:0,19:2", "-C"]
    assert smi.create_instances_for(A100, 0, [Instance(0, "7g.40gb")], default_ci=False)[-1] == "0:0"


def test_create_instances_for_refuses_bad_start_and_unknown_profile() -> None:
    with pytest.raises(SmiCommandError, match="cannot start at 2"):
        smi.create_instances_for(A100, 0, [Instance(2, "3g.20gb")])
    with pytest.raises(CatalogError):
        smi.create_instances_for(A100, 0, [Instance(0, "3g.40gb")])


BAD_INTS = [-1, 256, 10**12, True, False, "0", "0; rm -rf /", 1.0]


@pytest.mark.parametrize("bad", BAD_INTS)
def test_gpu_index_validated(bad: object) -> None:
    for build in (smi.list_gi_profiles, smi.list_gpu_instances, smi.reset_gpu, smi.destroy_gpu_instances):
        with pytest.raises(SmiCommandError):
            build(bad)  # type: ignore[arg-type]
    with pytest.raises(SmiCommandError):
        smi.query_gpus(bad)  # type: ignore[arg-type]
    with pytest.raises(SmiCommandError):
        smi.set_mig_mode(bad, True)  # type: ignore[arg-type]


@pytest.mark.parametrize("pair", [(-1, 0), (256, 0), (9, -1), (9, 32), (True, 0), ("9", 0), (9, "4")])
def test_placements_validated(pair: tuple[object, object]) -> None:
    with pytest.raises(SmiCommandError):
        smi.create_gpu_instances(0, [pair])  # type: ignore[list-item]


def test_other_inputs_validated() -> None:
    with pytest.raises(SmiCommandError):
        smi.list_gpu_instances(None)  # type: ignore[arg-type]
    with pytest.raises(SmiCommandError):
        smi.create_gpu_instances(0, [])
    with pytest.raises(SmiCommandError):
        smi.create_compute_instances(0, 128)
    with pytest.raises(SmiCommandError):
        smi.create_compute_instances(0, 1, [-1])
    with pytest.raises(SmiCommandError):
        smi.destroy_compute_instances(0, gi=[1], ci=[1000])
    with pytest.raises(SmiCommandError):
        smi.list_compute_instances(0, -2)
    with pytest.raises(SmiCommandError):
        smi.set_mig_mode(0, 1)  # type: ignore[arg-type]
    assert issubclass(SmiCommandError, InputError)


def test_no_token_can_carry_shell_syntax() -> None:
    argvs = [smi.create_gpu_instances(255, [(255, 31)] * 3, default_ci=True), smi.query_compute_apps(255),
             smi.destroy_compute_instances(255, [127], [127]), smi.reset_gpu(255)]
    for argv in argvs:
        for tok in argv:
            assert not set(tok) & set(" ;&|$`'\"\\<>(){}*?!#~\n"), tok
