"""`migplan export slurm`: Gres= and gres.conf from a plan, pure (migplan/slurm.py) and through the CLI.

Oracles independent of migplan.slurm: the capability minors are recomputed here from the table as NVIDIA's
kernel module builds it (kernel-open/nvidia/nv-caps.c: the tables numbered in order from 0); the rounded MIG type
names are checked against the names Slurm's docs and public job scripts use (gres.shtml `a100_3g.20gb`,
`nvidia_a100_80gb_pcie_3g.39gb`). What Slurm itself makes of the files is tests/test_slurm_real.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from migplan import slurm
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Instance, Layout
from migplan.catalog.whole_gpus import whole_gpu_model
from migplan.cli.app import app
from migplan.commands import export as ex
from migplan.documents import load_plan
from migplan.errors import InputError

CAT = builtin_catalog()
ROOT = Path(__file__).resolve().parent.parent
A100 = CAT.get("A100-SXM4-40GB")
A100_80 = CAT.get("A100-SXM4-80GB")
H100 = CAT.get("H100-SXM5-80GB")


def lay(*items: str) -> Layout:
    return Layout.parse(items)


def live(layout: Layout, ids: dict[str, tuple[int, int]]) -> slurm.LiveGpu:
    """What a snapshot after the apply says: each instance's GPU instance id and its one compute instance."""
    return slurm.LiveGpu(layout, {Instance.parse(k): gi for k, (gi, _) in ids.items()},
                         {Instance.parse(k): (ci,) for k, (_, ci) in ids.items()})


# --- NVIDIA's capability minors ------------------------------------------------------------------

def nv_caps_table() -> dict[str, int]:
    """/proc/driver/nvidia-caps/mig-minors as nv-caps.c makes it: g_nv_cap_nvlink_table (1 entry), then
    g_nv_cap_mig_table (config, monitor), then g_nv_cap_mig_gpu_table (gpu0..31, gi0..14, access then ci0..7),
    one static counter across them."""
    names = ["fabric-mgmt", "config", "monitor"]
    for gpu in range(32):
        for gi in range(15):
            names.append(f"gpu{gpu}/gi{gi}/access")
            names += [f"gpu{gpu}/gi{gi}/ci{ci}/access" for ci in range(8)]
    return {n: i for i, n in enumerate(names)}


def test_cap_minors_are_nvidias_table() -> None:
    table = nv_caps_table()
    assert table["config"] == 1 and table["monitor"] == 2 and table["gpu0/gi0/access"] == 3
    for gpu in range(32):
        for gi in range(15):
            for ci in range(8):
                assert slurm.cap_minors(gpu, gi, ci) == (table[f"gpu{gpu}/gi{gi}/access"],
                                                         table[f"gpu{gpu}/gi{gi}/ci{ci}/access"])


@pytest.mark.parametrize("gpu,gi,ci", [(32, 0, 0), (0, 15, 0), (0, 1, 8), (-1, 1, 0)])
def test_cap_minors_outside_the_table_are_refused(gpu: int, gi: int, ci: int) -> None:
    with pytest.raises(InputError, match="outside NVIDIA's capability table"):
        slurm.cap_minors(gpu, gi, ci)


# --- type names ------------------------------------------------------------------------------------

@pytest.mark.parametrize("model,profile,nvidia,rounded", [
    ("A100-SXM4-40GB", "3g.20gb", "3g.20gb", "3g.20gb"),  # 19,968 MiB = 19.5 GiB: roundl gives 20 (gres.shtml)
    ("A100-SXM4-40GB", "1g.5gb", "1g.5gb", "1g.5gb"),
    ("A100-SXM4-40GB", "7g.40gb", "7g.40gb", "7g.39gb"),  # 40,192 MiB = 39.25 GiB
    ("A100-SXM4-80GB", "3g.40gb", "3g.40gb", "3g.39gb"),  # as public job scripts request it
    ("A100-SXM4-80GB", "1g.10gb+me", "1g.10gb+me", "1g.10gb"),
    ("B200", "1g.23gb", "1g.23gb", "1g.21gb"),  # 20,992 MiB = 20.5 GiB: halves away from zero, as roundl
    ("A30", "4g.24gb", "4g.24gb", "4g.23gb"),
])
def test_mig_type_names(model: str, profile: str, nvidia: str, rounded: str) -> None:
    p = CAT.get(model).profile(profile)
    assert slurm.mig_type(p, "nvidia") == nvidia
    assert slurm.mig_type(p, "rounded") == rounded


# --- one node ------------------------------------------------------------------------------------

def test_mixed_node_gres_and_explicit_files() -> None:
    g0 = lay("3g.20gb@4", "2g.10gb@0", "1g.5gb@2", "1g.5gb@3")
    gpus = [slurm.GpuInput(0, A100, g0, live(g0, {"3g.20gb@4": (2, 0), "2g.10gb@0": (3, 0), "1g.5gb@2": (9, 0),
                                                   "1g.5gb@3": (10, 0)})),
            slurm.GpuInput(1, A100, None),  # MIG disabled: the whole GPU
            slurm.GpuInput(2, whole_gpu_model("T4", 15360), None)]  # no MIG at all
    node = slurm.build_node("gpu01", gpus, mode="files")
    assert node.gres == "gpu:3g.20gb:1,gpu:2g.10gb:1,gpu:1g.5gb:2,gpu:a100-sxm4-40gb:1,gpu:t4:1"
    text = slurm.gres_conf(slurm.build([node], mode="files", style="nvidia", plan_fingerprint="sha256:x"))
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert lines == [
        "NodeName=gpu01 AutoDetect=off Name=gpu Type=3g.20gb MultipleFiles=/dev/nvidia0,"
        "/dev/nvidia-caps/nvidia-cap21,/dev/nvidia-caps/nvidia-cap22",
        "NodeName=gpu01 Name=gpu Type=2g.10gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap30,"
        "/dev/nvidia-caps/nvidia-cap31",
        "NodeName=gpu01 Name=gpu Type=1g.5gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap84,"
        "/dev/nvidia-caps/nvidia-cap85",
        "NodeName=gpu01 Name=gpu Type=1g.5gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap93,"
        "/dev/nvidia-caps/nvidia-cap94",
        "NodeName=gpu01 Name=gpu Type=a100-sxm4-40gb File=/dev/nvidia1",
        "NodeName=gpu01 Name=gpu Type=t4 File=/dev/nvidia2"]
    assert "#   GPU 1: whole GPU (A100-SXM4-40GB, MIG disabled)" in text
    assert "#   GPU 2: whole GPU (T4)" in text


def test_second_gpu_caps_and_ordering_by_minor() -> None:
    g1 = lay("3g.20gb@0", "3g.20gb@4")
    node = slurm.build_node("n", [slurm.GpuInput(1, A100, g1, live(g1, {"3g.20gb@0": (2, 0), "3g.20gb@4": (1, 0)}))],
                            mode="files")
    t = nv_caps_table()
    assert [d.files for d in node.devices] == [
        ("/dev/nvidia1", f"/dev/nvidia-caps/nvidia-cap{t['gpu1/gi1/access']}",
         f"/dev/nvidia-caps/nvidia-cap{t['gpu1/gi1/ci0/access']}"),
        ("/dev/nvidia1", f"/dev/nvidia-caps/nvidia-cap{t['gpu1/gi2/access']}",
         f"/dev/nvidia-caps/nvidia-cap{t['gpu1/gi2/ci0/access']}")]


def test_autodetect_node_needs_no_ids_and_writes_autodetect_lines() -> None:
    gpus = [slurm.GpuInput(0, H100, lay("4g.40gb@0", "3g.40gb@4")), slurm.GpuInput(1, H100, None)]
    node = slurm.build_node("gpu-h100-01", gpus, gpu_types={"H100-SXM5-80GB": "h100_80gb_hbm3"})
    export = slurm.build([node], mode="autodetect", style="nvidia")
    assert node.gres == "gpu:4g.40gb:1,gpu:3g.40gb:1,gpu:h100_80gb_hbm3:1"
    assert [ln for ln in slurm.gres_conf(export).splitlines() if not ln.startswith("#")] == [
        "NodeName=gpu-h100-01 AutoDetect=nvml"]
    assert not export.notes  # h100_80gb_hbm3 is part of 'nvidia_h100_80gb_hbm3', the name slurmd detects


def test_autodetect_notes_a_whole_gpu_type_slurmd_would_not_match() -> None:
    node = slurm.build_node("n", [slurm.GpuInput(0, H100, None)])
    notes = slurm.build([node], mode="autodetect", style="nvidia").notes
    assert len(notes) == 1 and "h100-sxm5-80gb" in notes[0] and "nvidia_h100_80gb_hbm3" in notes[0]
    assert "--gpu-type H100-SXM5-80GB=TYPE" in notes[0]


def test_autodetect_notes_a_type_inside_another() -> None:
    g = lay("1g.10gb+me@0", "1g.10gb@1")
    notes = slurm.build([slurm.build_node("n", [slurm.GpuInput(0, A100_80, g)])], mode="autodetect",
                        style="nvidia").notes
    assert any("1g.10gb is also part of 1g.10gb+me" in n for n in notes)


def test_rounded_style_merges_profiles_of_one_size() -> None:
    g = lay("1g.10gb+me@0", "1g.10gb@1", "3g.40gb@4")
    node = slurm.build_node("n", [slurm.GpuInput(0, A100_80, g)], style="rounded")
    assert node.gres == "gpu:3g.39gb:1,gpu:1g.10gb:2"


def test_mig_enabled_without_instances_gives_slurm_nothing() -> None:
    node = slurm.build_node("n", [slurm.GpuInput(0, A100, Layout())], mode="files")
    assert node.devices == () and node.gres == ""
    export = slurm.build([node], mode="files", style="nvidia")
    assert "# n: no GPU for Slurm" in slurm.slurm_conf_lines(export)
    assert "NodeName=n AutoDetect=off\n" in slurm.gres_conf(export)


@pytest.mark.parametrize("name", ["gpu01 Gres=gpu:9", "a,b", "n[1-2]", "x#y", "-a", "a-", "", "gpü", "a" * 129,
                                  "a=b", "a:b", "a\nNodeName=b", "a b"])
def test_hostile_host_names_are_refused(name: str) -> None:
    with pytest.raises(InputError, match="is not a Slurm node name"):
        slurm.build_node(name, [slurm.GpuInput(0, A100, None)])


@pytest.mark.parametrize("kind", ["a b", "a,b", "a:b", "a=b", "", "x#", "-x", "ü"])
def test_hostile_types_are_refused(kind: str) -> None:
    with pytest.raises(InputError, match="not a Slurm GRES type"):
        slurm.build_node("n", [slurm.GpuInput(0, A100, None)], gpu_types={"A100-SXM4-40GB": kind})


def test_files_mode_refuses_what_the_snapshot_does_not_prove() -> None:
    g = lay("3g.20gb@0", "3g.20gb@4")
    with pytest.raises(InputError, match="not in the snapshot"):
        slurm.build_node("n", [slurm.GpuInput(0, A100, g)], mode="files")
    other = lay("3g.20gb@0", "2g.10gb@4", "1g.5gb@6")
    with pytest.raises(InputError, match="shows 3g.20gb@0 2g.10gb@4 1g.5gb@6, the plan 3g.20gb@0 3g.20gb@4"):
        slurm.build_node("n", [slurm.GpuInput(0, A100, g, live(other, {}))], mode="files")
    with pytest.raises(InputError, match="the snapshot shows MIG disabled"):
        slurm.build_node("n", [slurm.GpuInput(0, A100, g, slurm.LiveGpu(None))], mode="files")
    two_cis = slurm.LiveGpu(g, {Instance.parse("3g.20gb@0"): 1, Instance.parse("3g.20gb@4"): 2},
                            {Instance.parse("3g.20gb@0"): (0, 1), Instance.parse("3g.20gb@4"): (0,)})
    with pytest.raises(InputError, match="3g.20gb@0 has 2 compute instances"):
        slurm.build_node("n", [slurm.GpuInput(0, A100, g, two_cis)], mode="files")
    with pytest.raises(InputError, match="outside NVIDIA's capability table"):
        slurm.build_node("n", [slurm.GpuInput(40, A100, g, live(g, {"3g.20gb@0": (1, 0), "3g.20gb@4": (2, 0)}))],
                         mode="files")


def test_two_hosts_that_would_be_one_node_are_refused() -> None:
    a = slurm.build_node("gpu01.a.example", [slurm.GpuInput(0, A100, None)], node="gpu01")
    b = slurm.build_node("gpu01.b.example", [slurm.GpuInput(0, A100, None)], node="gpu01")
    with pytest.raises(InputError, match="would both be Slurm node 'gpu01'"):
        slurm.build([a, b], mode="autodetect", style="nvidia")


def test_bad_mode_and_style() -> None:
    with pytest.raises(InputError, match="--gres-conf 'nvml'"):
        slurm.build_node("n", [], mode="nvml")
    with pytest.raises(InputError, match="--type-style 'x'"):
        slurm.build_node("n", [], style="x")


# --- rewriting a slurm.conf ----------------------------------------------------------------------

def _export(**nodes: str) -> slurm.SlurmExport:
    """An export whose nodes get these layouts on one A100 each (`-` for a whole GPU)."""
    out = [slurm.build_node(n, [slurm.GpuInput(0, A100, None if spec == "-" else lay(*spec.split()))])
           for n, spec in nodes.items()]
    return slurm.build(out, mode="autodetect", style="nvidia")


CONF = textwrap.dedent("""\
    # site slurm.conf
    ClusterName=c1
    GresTypes=mps  # keep this comment
    NodeName=DEFAULT CPUs=64 RealMemory=500000
    NodeName=gpu01 CPUs=64 gres=gpu:a100:1 State=UNKNOWN # rack 1
    NodeName=gpu02   CPUs=64
    NodeName=cpu[01-10] CPUs=128
    PartitionName=gpu Nodes=gpu0[1-2] Default=YES
    """)


def test_rewrite_sets_gres_on_each_line_and_keeps_the_rest() -> None:
    out = slurm.rewrite_slurm_conf(CONF, "slurm.conf", _export(gpu01="3g.20gb@0 3g.20gb@4", gpu02="-"))
    want = CONF.replace("gres=gpu:a100:1", "gres=gpu:3g.20gb:2").replace(
        "NodeName=gpu02   CPUs=64", "NodeName=gpu02   CPUs=64 Gres=gpu:a100-sxm4-40gb:1").replace(
        "GresTypes=mps  #", "GresTypes=mps,gpu  #")
    assert out == want


def test_rewrite_a_range_line_when_all_its_nodes_get_the_same_gres() -> None:
    conf = "GresTypes=gpu\nNodeName=gpu[01-02] CPUs=8\n"
    out = slurm.rewrite_slurm_conf(conf, "s", _export(gpu01="-", gpu02="-"))
    assert out == "GresTypes=gpu\nNodeName=gpu[01-02] CPUs=8 Gres=gpu:a100-sxm4-40gb:1\n"


def test_rewrite_adds_grestypes_before_the_first_node_line() -> None:
    out = slurm.rewrite_slurm_conf("ClusterName=c\nNodeName=n1 CPUs=1\n", "s", _export(n1="-"))
    assert out == ("ClusterName=c\nGresTypes=gpu  # added by migplan export slurm\n"
                   "NodeName=n1 CPUs=1 Gres=gpu:a100-sxm4-40gb:1\n")


@pytest.mark.parametrize("conf,match", [
    ("NodeName=gpu[01-02] CPUs=8\n", "names nodes the plan gives different Gres"),
    ("NodeName=gpu[01-03] CPUs=8\nNodeName=gpu02\n", "also names gpu03, which the export does not cover"),
    ("NodeName=gpu01 CPUs=8\nNodeName=gpu01,gpu02 CPUs=8\n", "node gpu01 is on two NodeName lines"),
    ("NodeName=gpu01 CPUs=8\n", "no NodeName line names gpu02"),
    ("Include /etc/slurm/nodes.conf\nNodeName=gpu01\n", "this file includes others"),
    ("NodeName=gpu01 \\\n  CPUs=8\nNodeName=gpu02\n", "continued on the next line"),
    ("NodeName=gpu01 Gres=a Gres=b\nNodeName=gpu02\n", "has Gres= twice"),
    ("NodeName=gpu[01-\n", "'\\[' without '\\]'"),
])
def test_rewrite_refuses_lines_it_cannot_rewrite_safely(conf: str, match: str) -> None:
    with pytest.raises(InputError, match=match) as err:
        slurm.rewrite_slurm_conf(conf, "site.conf", _export(gpu01="3g.20gb@0", gpu02="-"))
    assert err.value.source == "site.conf"


@pytest.mark.parametrize("expr,names", [
    ("gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),
    ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
    ("x,y[9-10]", ["x", "y9", "y10"]),
    ("plain", ["plain"]),
])
def test_expand_hostlist(expr: str, names: list[str]) -> None:
    assert slurm.expand_hostlist(expr) == names


@pytest.mark.parametrize("expr", ["a[1-", "a]", "a[[1]]", "a[x]", "a[3-1]", "a,,b", "a[0-99999999]", "a[²]",
                                  "a[0-999]b[0-999]"])
def test_expand_hostlist_refuses(expr: str) -> None:
    with pytest.raises(ValueError):
        slurm.expand_hostlist(expr)


# --- from a plan, through the CLI --------------------------------------------------------------------

@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    r = CliRunner().invoke(app, ["propose", "-i", str(ROOT / "inventory" / "example.yaml"),
                                 "-p", str(ROOT / "profiles" / "example"), "--out", str(out), "-q"])
    assert r.exit_code == 0, r.output
    return out


def test_plan_export_every_host_and_excluded_gpus_noted(plan_file: Path) -> None:
    plan = load_plan(plan_file, CAT)
    export = ex.build_slurm(plan, CAT)
    assert [n.name for n in export.nodes] == sorted({g.host for g in plan.gpus})
    for n in export.nodes:
        gpus = [g for g in plan.gpus if g.host == n.host and g.hold != "excluded"]
        assert len(n.devices) == sum(len(g.target.instances) if g.target is not None else 1 for g in gpus)
    assert any("gpu-h100-01 GPU 6 is excluded" in note for note in export.notes)
    assert [n.host for n in ex.build_slurm(plan, CAT, host="gpu-a100-02").nodes] == ["gpu-a100-02"]
    with pytest.raises(InputError, match="the plan has no host 'nope'"):
        ex.build_slurm(plan, CAT, host="nope")


def test_cli_outputs_and_atomic_out(plan_file: Path, tmp_path: Path) -> None:
    cli = CliRunner()
    r = cli.invoke(app, ["export", "slurm", str(plan_file), "--host", "gpu-a100-80-01"])
    assert r.exit_code == 0, r.output
    assert "GresTypes=gpu\nNodeName=gpu-a100-80-01 Gres=gpu:" in r.stdout
    assert "NodeName=gpu-a100-80-01 AutoDetect=nvml" in r.stdout
    r = cli.invoke(app, ["export", "slurm", str(plan_file), "-o", "json"])
    doc = json.loads(r.stdout)
    assert doc["kind"] == "migplan/export-slurm" and doc["gres_conf"] == "autodetect"
    assert {n["node"] for n in doc["nodes"]} >= {"gpu-a100-01", "gpu-h100-01"}
    out = tmp_path / "gres.conf"
    r = cli.invoke(app, ["export", "slurm", str(plan_file), "-o", "gres.conf", "--out", str(out)])
    assert r.exit_code == 0 and out.read_text().startswith("# gres.conf written by migplan export slurm")
    again = cli.invoke(app, ["export", "slurm", str(plan_file), "-o", "gres.conf"])
    assert again.stdout == out.read_text()  # stable: the same plan gives the same bytes
    r = cli.invoke(app, ["export", "slurm", str(plan_file), "--out", str(plan_file)])
    assert r.exit_code == 2 and "refusing to write" in r.output


def test_cli_files_mode_without_snapshot_is_a_clear_error(plan_file: Path) -> None:
    r = CliRunner().invoke(app, ["export", "slurm", str(plan_file), "--gres-conf", "files"])
    assert r.exit_code == 2
    assert "--gres-conf files needs --snapshot" in r.output and "Traceback" not in r.output


def test_cli_rewrites_a_slurm_conf(plan_file: Path, tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=c\nNodeName=gpu-a100-02 CPUs=8 # two A100s\n")
    r = CliRunner().invoke(app, ["export", "slurm", str(plan_file), "--host", "gpu-a100-02", "--slurm-conf",
                                 str(conf), "-o", "slurm.conf"])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("ClusterName=c\nGresTypes=gpu  # added by migplan export slurm\n"
                               "NodeName=gpu-a100-02 CPUs=8 Gres=gpu:")
    assert r.stdout.endswith(" # two A100s\n")
    r = CliRunner().invoke(app, ["export", "slurm", str(plan_file), "--slurm-conf", str(conf)])
    assert r.exit_code == 2 and "no NodeName line names gpu-a100-01" in r.output


@pytest.mark.parametrize("item,match", [("A100-SXM4-40GB", "expected MODEL=TYPE"), ("=x", "expected MODEL=TYPE"),
                                        ("NOPE=x", "unknown GPU model 'NOPE'"), ("A100-SXM4-40GB=a b", "not a Slurm")])
def test_gpu_type_option_is_checked(item: str, match: str) -> None:
    with pytest.raises(InputError, match=match):
        ex.gpu_type_overrides([item], CAT)



def test_gpus_without_mig_from_a_kubernetes_inventory_are_whole_typed_gpus(tmp_path: Path) -> None:
    """T4 and L4 nodes (models the plan carries, not in the catalog): whole GPUs, typed, File=/dev/nvidiaN; the
    A30 node with MIG disabled likewise. In files mode such a node needs no instance ids (no snapshot entry)."""
    prof = tmp_path / "p.yaml"
    prof.write_text("version: 1\nworkloads:\n- name: small\n  memory_mib: {p50: 2000, p95: 2500, p99: 2800, max: "
                    "3000}\n  compute: {p50: 0.01, p95: 0.02, max: 0.03}\n")
    plan_path = tmp_path / "plan.json"
    r = CliRunner().invoke(app, ["propose", "-i", str(ROOT / "tests" / "data" / "k8s" / "mixed-nodes.json"),
                                 "-p", str(prof), "--out", str(plan_path), "-q"])
    assert r.exit_code == 0, r.output
    plan = load_plan(plan_path, CAT)
    export = ex.build_slurm(plan, CAT)
    t4, l4, a30 = export.node("t4-node"), export.node("l4-node"), export.node("a30-disabled")
    assert t4 is not None and l4 is not None and a30 is not None
    assert t4.gres == "gpu:t4:1" and l4.gres == "gpu:l4:2" and a30.gres == "gpu:a30:2"
    files = ex.build_slurm(plan, CAT, host="l4-node", mode="files", live={})
    assert [ln for ln in slurm.gres_conf(files).splitlines() if not ln.startswith("#")] == [
        "NodeName=l4-node AutoDetect=off Name=gpu Type=l4 File=/dev/nvidia0",
        "NodeName=l4-node Name=gpu Type=l4 File=/dev/nvidia1"]


# --- the hook scripts' own checks (no Slurm needed: they stop before calling it) ---------------------------

PRE = ROOT / "scripts" / "slurm" / "pre-apply.sh"
POST = ROOT / "scripts" / "slurm" / "post-apply.sh"


def _hook(script: Path, *args: str, **env: str) -> tuple[int, str]:
    r = subprocess.run(["sh", str(script), *args], env={**os.environ, "MIGPLAN_HOST": "", **env},
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


@pytest.mark.parametrize("args,message", [
    (["--node", "h1;reboot"], "is not a Slurm node name"),
    (["--node", "-x"], "is not a Slurm node name"),
    (["--node", "a b"], "is not a Slurm node name"),
    ([], "is not a Slurm node name"),
    (["--node", "h1", "--timeout", "1h"], "needs a whole number of seconds"),
    (["--node", "h1", "--on-timeout", "later"], "--on-timeout is resume or keep"),
    (["--node", "h1", "--bogus"], "unknown argument"),
])
def test_pre_apply_refuses_bad_arguments(args: list[str], message: str) -> None:
    code, out = _hook(PRE, *args)
    assert code == 2 and message in out, out


@pytest.mark.parametrize("args,env,message", [
    (["--node", "a b"], {}, "is not a Slurm node name"),
    ([], {"MIGPLAN_HOST": "a b"}, "is not a Slurm node name"),
    ([], {}, "no node"),
    (["--node", "h1", "--gres-conf", "relative.conf"], {}, "needs an absolute path"),
    (["--node", "h1", "--expect-gres", "gpu:x:1 State=RESUME"], {}, "is not a Gres value"),
    (["--node", "h1", "--expect-gres", "gpu:1", "--expect-from", "/x"], {}, "not both"),
    (["--node", "h1", "--interval", "-1"], {}, "needs a whole number of seconds"),
])
def test_post_apply_refuses_bad_arguments(args: list[str], env: dict[str, str], message: str) -> None:
    code, out = _hook(POST, *args, **env)
    assert code == 2 and message in out, out


def test_post_apply_after_a_partial_apply_installs_nothing(tmp_path: Path) -> None:
    new = tmp_path / "gres.conf.new"
    new.write_text("# other\n")
    code, out = _hook(POST, "--node", "h1", "--gres-conf", str(new), "--conf-dir", str(tmp_path),
                      MIGPLAN_RESULT="partial")
    assert code == 1 and "not complete" in out, out
    assert not (tmp_path / "gres.conf").exists()


def test_hook_help_lists_the_options() -> None:
    for script, option in ((PRE, "--on-timeout"), (POST, "--expect-from")):
        code, out = _hook(script, "--help")
        assert code == 0 and option in out and "set -eu" not in out
