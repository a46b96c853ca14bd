"""The Slurm path against Debian's real Slurm (slurm-wlm 22.05.8, munge 0.5.15): daemons started on 127.0.0.1 by
the test (tests/helpers/slurm_cluster.py), reading what `migplan export slurm` wrote; the hook scripts
(scripts/slurm/) run against them, on their own and from `migplan apply`.

What runs for real: munged, slurmctld and slurmd (one node) with the exported slurm.conf (migplan's rewrite of a
site file) and gres.conf; `scontrol show node` must give the planned Gres, the node must register without
INVALID_REG, and jobs asking for the planned MIG types must run. The GPUs are not real: the MIG changes are the
nvidia-smi simulator's (tests/sim), and slurmd sees character device nodes in a private /dev (the helper says why).

What is only parsed: `--gres-conf autodetect`. Debian's slurm-wlm ships no gpu/nvml plugin (its slurmd says "We
were configured with nvml functionality, but that lib wasn't found on the system"), so AutoDetect=nvml finds
nothing here: slurmctld reads the exported Gres and `slurmd -G` accepts the gres.conf, no more.

Slurm 22.05 facts these tests pin (docs/slurm.md): `scontrol reconfigure` does not change a node's GPU count
(slurmctld keeps the old Gres and marks the node INVALID_REG), `scontrol update NodeName=... Gres=` is refused for
File-backed GPUs, and a slurmctld restart with the new slurm.conf is what makes the new count take.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sim_runner
from helpers.samples import flat_workload, local_inventory, write_profiles
from helpers.slurm_cluster import SlurmCluster, unavailable, wait_for
from sim.fleet import host_state, write_state
from typer.testing import CliRunner

from migplan import slurm
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout
from migplan.cli.app import app
from migplan.commands import export as ex
from migplan.documents import load_plan, load_snapshot

WHY_NOT = unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")]

CAT = builtin_catalog()
A100 = CAT.get("A100-SXM4-40GB")
A100_80 = CAT.get("A100-SXM4-80GB")
ROOT = Path(__file__).resolve().parent.parent
PRE = ROOT / "scripts" / "slurm" / "pre-apply.sh"
POST = ROOT / "scripts" / "slurm" / "post-apply.sh"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SlurmCluster]:
    c = SlurmCluster(tmp_path / "slurm", node="h1")
    yield c
    c.stop()


def _files(c: SlurmCluster, gpus: list[slurm.GpuInput]) -> tuple[slurm.SlurmNode, str, str]:
    """The node's export (files mode) of `gpus`, the cluster's base slurm.conf rewritten with it, and gres.conf."""
    node = slurm.build_node("h1", gpus, mode="files")
    export = slurm.build([node], mode="files", style="nvidia")
    return node, slurm.rewrite_slurm_conf(c.base_conf, "slurm.conf", export), slurm.gres_conf(export)


def _live(layout: Layout, first_gi: int = 1) -> slurm.LiveGpu:
    inst = sorted(layout.instances)
    return slurm.LiveGpu(layout, {i: first_gi + k for k, i in enumerate(inst)}, {i: (0,) for i in inst})


def _script(c: SlurmCluster, script: Path, *args: str, **env: str) -> tuple[int, str]:
    r = c.run(["sh", str(script), *args], env=env, timeout=180)
    return r.returncode, r.stdout + r.stderr


def _idle(c: SlurmCluster) -> None:
    """Resumed and answering: right after a RESUME slurmctld pings the node and shows it IDLE+NOT_RESPONDING (idle*)
    for about a second."""
    wait_for(lambda: c.state() == "idle", 15, "the node to be idle", lambda: c.state() + "\n" + c.log("slurmctld.log"))


def _same_gres(a: str, b: str) -> bool:
    return sorted(a.split(",")) == sorted(b.split(","))


# --- the exported files, read by the real daemons ------------------------------------------------------

def test_files_export_registers_with_the_planned_gres_and_runs_jobs(cluster: SlurmCluster) -> None:
    g0 = Layout.parse(["3g.20gb@4", "2g.10gb@0", "1g.5gb@2", "1g.5gb@3"])
    g2 = Layout.parse(["1g.10gb+me@0", "3g.40gb@4"])
    node, conf, gres = _files(cluster, [slurm.GpuInput(0, A100, g0, _live(g0, 3)), slurm.GpuInput(1, A100, None),
                                        slurm.GpuInput(2, A100_80, g2, _live(g2, 2))])
    cluster.write(conf, gres)
    cluster.start()
    shown = cluster.show()
    assert _same_gres(shown["Gres"], node.gres), shown
    assert shown["State"] == "IDLE", shown
    # slurmd's own reading of the gres.conf: every device with its files
    got = cluster.run(["unshare", "-m", "--propagation", "private", "sh", str(cluster.root / "ns.sh"),
                       "slurmd", "-G", "-N", "h1"])
    assert got.returncode == 0, got.stderr
    for d in node.devices:
        assert f"Type={d.type} Count=1" in got.stderr and f"File={','.join(d.files)}" in got.stderr, got.stderr
    # a job asking for each planned type runs
    for kind, _ in node.counts:
        r = cluster.run(["sbatch", "--wait", "-o", "/dev/null", f"--gres=gpu:{kind}:1", "--wrap", "true"])
        assert r.returncode == 0, (kind, r.stdout, r.stderr)


def test_autodetect_export_is_read_by_slurmctld_and_parsed_by_slurmd(cluster: SlurmCluster) -> None:
    gpus = [slurm.GpuInput(0, A100, Layout.parse(["3g.20gb@0", "3g.20gb@4"])), slurm.GpuInput(1, A100, None)]
    node = slurm.build_node("h1", gpus, style="rounded")
    export = slurm.build([node], mode="autodetect", style="rounded")
    cluster.write(slurm.rewrite_slurm_conf(cluster.base_conf, "slurm.conf", export), slurm.gres_conf(export))
    cluster.start_munge()
    cluster.start_ctld()  # no slurmd: what slurmctld read from slurm.conf
    assert cluster.show()["Gres"] == node.gres == "gpu:3g.20gb:2,gpu:a100-sxm4-40gb:1"
    parsed = cluster.run(["slurmd", "-G", "-N", "h1"])
    assert parsed.returncode == 0 and "fatal" not in parsed.stderr
    assert "configured with nvml functionality, but that lib wasn't found" in parsed.stderr  # Debian's build


def test_slurm_2205_keeps_the_old_gpu_count_until_slurmctld_restarts(cluster: SlurmCluster) -> None:
    """Why the hooks' runbook for 22.05 restarts slurmctld: reconfigure and scontrol update do not change it."""
    g = Layout.parse(["3g.20gb@0", "3g.20gb@4"])
    _, conf, gres = _files(cluster, [slurm.GpuInput(0, A100, g, _live(g))])
    cluster.write(conf, gres)
    cluster.start()
    g2 = Layout.parse(["3g.20gb@0", "2g.10gb@4", "1g.5gb@6"])
    node2, conf2, gres2 = _files(cluster, [slurm.GpuInput(0, A100, g2, _live(g2, 1))])
    assert cluster.run(["scontrol", "update", "NodeName=h1", "State=DRAIN", "Reason=migplan: test"]).returncode == 0
    refused = cluster.run(["scontrol", "update", "NodeName=h1", f"Gres={node2.gres}"])
    assert refused.returncode != 0 and "Invalid generic resource" in refused.stderr
    cluster.write(conf2, gres2)
    code, out = _script(cluster, POST, "--node", "h1", "--reconfigure", "--expect-gres", node2.gres,
                        "--timeout", "4", "--interval", "1")
    assert code == 1 and "restart slurmctld" in out, out
    assert cluster.show()["Gres"] == "gpu:3g.20gb:2"  # slurmctld's count is the old one
    cluster.restart_ctld()
    # slurmd re-registers with the restarted slurmctld in seconds when idle; a loaded CI machine took over 30 s
    code, out = _script(cluster, POST, "--node", "h1", "--restart-slurmd", "--expect-gres", node2.gres,
                        "--timeout", "120", "--interval", "1")
    assert code == 0 and "resumed" in out, out
    assert _same_gres(cluster.show()["Gres"], node2.gres)
    _idle(cluster)


# --- the hook scripts ------------------------------------------------------------------------------

def _running_job(c: SlurmCluster, seconds: int) -> str:
    r = c.run(["sbatch", "--parsable", "-o", "/dev/null", "--gres=gpu:3g.20gb:1", "--wrap", f"sleep {seconds}"])
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().split(";")[0]
    wait_for(lambda: c.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip() == "RUNNING", 30, "the job")
    return job


def test_pre_apply_waits_for_the_running_job_then_post_apply_resumes(cluster: SlurmCluster) -> None:
    g = Layout.parse(["3g.20gb@0", "3g.20gb@4"])
    node, conf, gres = _files(cluster, [slurm.GpuInput(0, A100, g, _live(g))])
    cluster.write(conf, gres)
    cluster.start()
    job = _running_job(cluster, 6)
    code, out = _script(cluster, PRE, "--timeout", "60", "--interval", "1", MIGPLAN_HOST="h1",
                        MIGPLAN_PLAN="sha256:0123456789abcdef0123")
    assert code == 0, out
    assert "waiting up to 60s" in out and "h1 is drained: no job runs there" in out
    assert cluster.run(["squeue", "-h", "-j", job]).stdout.strip() == ""  # it ended before the hook returned
    assert cluster.state() == "drained" and cluster.reason() == "migplan: MIG change (plan sha256:0123456789ab)"
    code, out = _script(cluster, POST, "--expect-gres", node.gres, "--timeout", "10", "--interval", "1",
                        MIGPLAN_HOST="h1", MIGPLAN_RESULT="ok")
    assert code == 0 and "h1: Gres=" in out and "resumed" in out, out
    _idle(cluster)


def test_pre_apply_timeout_undoes_its_own_drain(cluster: SlurmCluster) -> None:
    g = Layout.parse(["3g.20gb@0", "3g.20gb@4"])
    _, conf, gres = _files(cluster, [slurm.GpuInput(0, A100, g, _live(g))])
    cluster.write(conf, gres)
    cluster.start()
    _running_job(cluster, 60)
    code, out = _script(cluster, PRE, "--node", "h1", "--timeout", "2", "--interval", "1")
    assert code == 1 and "jobs are running" in out and "drain undone" in out, out
    assert "drain" not in cluster.state() and cluster.reason() == "none"
    code, out = _script(cluster, PRE, "--node", "h1", "--timeout", "2", "--interval", "1", "--on-timeout", "keep")
    assert code == 1 and cluster.state() == "draining", out


def test_hooks_leave_a_drain_that_is_not_theirs(cluster: SlurmCluster) -> None:
    g = Layout.parse(["3g.20gb@0", "3g.20gb@4"])
    node, conf, gres = _files(cluster, [slurm.GpuInput(0, A100, g, _live(g))])
    cluster.write(conf, gres)
    cluster.start()
    cluster.run(["scontrol", "update", "NodeName=h1", "State=DRAIN", "Reason=disk replacement"])
    code, out = _script(cluster, PRE, "--node", "h1", "--timeout", "5", "--interval", "1")
    assert code == 0 and "already drained (disk replacement): left as it is" in out, out
    code, out = _script(cluster, POST, "--node", "h1", "--expect-gres", node.gres, "--timeout", "5")
    assert code == 0 and "left drained: its reason 'disk replacement' is not migplan's" in out, out
    assert cluster.state() == "drained" and cluster.reason() == "disk replacement"


# --- the whole path: plan, migplan apply with the hooks, export from the snapshot after it, resume -----------

def test_migplan_apply_with_the_hooks_then_export_and_resume(cluster: SlurmCluster, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Slurm 22.05's runbook (docs/slurm.md): pre_apply drains and waits, apply changes the GPUs, post_apply
    --no-resume keeps the node drained; then the export from a snapshot taken after the apply, slurmctld restarted
    with the new slurm.conf, and post-apply.sh installs gres.conf, restarts slurmd and resumes the node."""
    state = tmp_path / "h1.json"
    st = host_state("A100-SXM4-40GB", 3, hostname="h1",
                    layouts=[Layout.parse(["3g.20gb@0", "1g.5gb@4"]), None, None])
    for i in (1, 2):
        st["gpus"][i].update(mig_current=False, mig_pending=False, gpu_instances=[])
    write_state(state, st)
    for k in ("SLURM_CONF", "ROOT", "NODE", "GRES_CONF", "PATH"):  # the hooks' environment: this Slurm
        monkeypatch.setenv(k, cluster.env[k])
    sim_runner.serve(monkeypatch, state)  # and the simulator's nvidia-smi first on the PATH
    inv = local_inventory(tmp_path, "h1", reserved_gpus=[2], hooks={
        "pre_apply": [f"sh {PRE} --timeout 60 --interval 1"], "post_apply": [f"sh {POST} --no-resume"]})
    prof = write_profiles(tmp_path / "p.yaml", [flat_workload(n, m) for n, m in
                                               [("a", 15000), ("b", 9000), ("c", 4000), ("d", 15000), ("e", 9000),
                                                ("f", 9000)]])
    cli = CliRunner()
    kh = ["--known-hosts", str(tmp_path / "kh")]
    snap0, plan_file, snap1 = tmp_path / "before.json", tmp_path / "plan.json", tmp_path / "after.json"
    assert cli.invoke(app, ["discover", "-i", str(inv), "--out", str(snap0), *kh]).exit_code == 0
    r = cli.invoke(app, ["propose", "--snapshot", str(snap0), "-p", str(prof), "--out", str(plan_file), "-q"])
    assert r.exit_code == 0, r.output
    plan = load_plan(plan_file, CAT)
    assert any(g.actions for g in plan.gpus), "the plan must change the host for its hooks to run"

    # Slurm as it is before: the layouts the first snapshot read, with their ids
    before = ex._live_gpus(load_snapshot(snap0, CAT))
    gpus0 = [slurm.GpuInput(g.index, A100, before[("h1", g.index)].layout, before[("h1", g.index)])
             for g in plan.gpus]
    node0, conf0, gres0 = _files(cluster, gpus0)
    cluster.write(conf0, gres0)
    cluster.start()
    assert _same_gres(cluster.show()["Gres"], node0.gres) and cluster.state() == "idle"
    job = _running_job(cluster, 5)

    journal = tmp_path / "journal.jsonl"
    r = cli.invoke(app, ["apply", str(plan_file), "-i", str(inv), "--yes", "--timeout", "120",
                         "--journal", str(journal), *kh])
    assert r.exit_code == 0, r.output
    hooks = [json.loads(ln) for ln in journal.read_text().splitlines() if '"hook"' in ln]
    pre = next(h for h in hooks if h["stage"] == "pre_apply")
    assert pre["exit_code"] == 0 and "drained: no job runs there" in pre["stderr"], pre
    assert next(h for h in hooks if h["stage"] == "post_apply")["exit_code"] == 0
    assert cluster.run(["squeue", "-h", "-j", job]).stdout.strip() == ""
    assert cluster.state() == "drained"
    assert cluster.reason().startswith(f"migplan: MIG change (plan {plan.fingerprint[:19]}")

    # after the apply: the ids from a snapshot, the export, the controller, the node
    assert cli.invoke(app, ["discover", "-i", str(inv), "--out", str(snap1), *kh]).exit_code == 0
    new_conf, new_gres = tmp_path / "slurm.conf.new", tmp_path / "gres.conf.new"
    base = ["export", "slurm", str(plan_file), "--gres-conf", "files", "--snapshot", str(snap1)]
    r = cli.invoke(app, [*base, "--slurm-conf", str(cluster.conf_dir / "slurm.conf"), "-o", "slurm.conf",
                         "--out", str(new_conf)])
    assert r.exit_code == 0, r.output
    assert cli.invoke(app, [*base, "-o", "gres.conf", "--out", str(new_gres)]).exit_code == 0
    export = json.loads(cli.invoke(app, [*base, "-o", "json"]).stdout)
    want = export["nodes"][0]["gres"]
    assert want != node0.gres
    # the operator's step on 22.05: slurm.conf in place, slurmctld restarted
    (cluster.conf_dir / "slurm.conf").write_text(new_conf.read_text())
    cluster.restart_ctld()
    code, out = _script(cluster, POST, "--node", "h1", "--gres-conf", str(new_gres), "--restart-slurmd",
                        "--expect-from", str(cluster.conf_dir / "slurm.conf"), "--timeout", "120", "--interval", "1")
    assert code == 0 and "installed" in out and "resumed" in out, out
    _idle(cluster)
    shown = cluster.show()
    assert _same_gres(shown["Gres"], want) and shown["State"] == "IDLE", shown
    assert (cluster.conf_dir / "gres.conf").read_text() == new_gres.read_text()
    reserved = next(g for g in plan.gpus if g.index == 2)
    assert reserved.target is None and "gpu:a100-sxm4-40gb:1" in shown["Gres"]  # the reserved GPU, whole
    for kind in export["nodes"][0]["counts"]:
        r2 = cluster.run(["sbatch", "--wait", "-o", "/dev/null", f"--gres=gpu:{kind}:1", "--wrap", "true"])
        assert r2.returncode == 0, (kind, r2.stderr)
