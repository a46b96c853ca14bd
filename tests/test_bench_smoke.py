"""The benchmark's generator, baselines and report run on a tiny instance (no timing asserted)."""

from __future__ import annotations

from bench.baselines import BASELINES
from bench.generate import Spec, generate
from bench.run import render, run_one
from migplan.catalog import builtin_catalog
from migplan.planner import Policy, build_problem


def test_generator_is_seeded() -> None:
    a, b = generate(Spec(8, 20, "mixed", "bimodal", "random")), generate(Spec(8, 20, "mixed", "bimodal", "random"))
    assert a[0].fingerprint() == b[0].fingerprint() and a[1] == b[1]


def test_baselines_place_something() -> None:
    st, ps = generate(Spec(8, 20))
    prob = build_problem(st, ps, builtin_catalog(), Policy())
    for fn in BASELINES.values():
        assert fn(prob).used() >= 1


def test_run_one_and_render() -> None:
    row = run_one(Spec(8, 16, "single", "small", "previous"))
    assert row.mig["gpus"] and row.min_churn is not None
    assert "| instance |" in render([row], 1.0)


def test_uniform_baseline_has_every_mig_parted_config() -> None:
    """Each label of mig-parted's config-default.yaml that names a catalog model's profiles gets a role, and its
    instances are placed on that model exactly as many as the label asks for (all-4g and all-7g included)."""
    from bench.baselines import MIG_PARTED, _config_layout, _devices, role

    cat = builtin_catalog()
    a100 = cat.get("A100-SXM4-40GB")
    got = {role(a100, label): label for label in MIG_PARTED if _config_layout(a100, label) is not None}
    assert got == {"all-1g": "all-1g.5gb", "all-1g-2slice": "all-1g.10gb", "all-1g.me": "all-1g.5gb.me",
                   "all-2g": "all-2g.10gb", "all-3g": "all-3g.20gb", "all-4g": "all-4g.20gb",
                   "all-full": "all-7g.40gb", "all-balanced": "all-balanced"}
    for m in cat:
        for label in MIG_PARTED:
            devices = _devices(m, label)
            lay = _config_layout(m, label)
            if devices is None:
                assert lay is None
                continue
            assert lay is not None, (m.id, label)  # every shipped config that applies to a model fits on it
            assert sorted(q for q, _ in lay) == sorted(q for q, n in devices.items() for _ in range(n))
    balanced = _config_layout(a100, "all-balanced")
    assert balanced is not None and sorted(q for q, _ in balanced) == ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]


def test_best_uniform_names_its_role() -> None:
    from bench.baselines import best_uniform, uniform

    st, ps = generate(Spec(8, 30, "mixed", "large"))
    prob = build_problem(st, ps, builtin_catalog(), Policy())
    best = best_uniform(prob)
    assert best.name.startswith("uniform-all-")
    full = uniform(prob, "all-full")  # one whole-GPU instance per GPU: at most one workload per GPU
    assert len(full.placed) <= len(full.gpus) and best.value({i.name: i for i in prob.items}) >= full.value(
        {i.name: i for i in prob.items})


def test_large_inputs_writes_files_migplan_reads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The large-input generator writes a valid inventory and profiles (as a user has them), the same every time."""
    from bench.large_inputs import write_instance
    from migplan.inventory import load_inventory
    from migplan.profiles import load_profiles

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    inv, prof, n = write_instance(80, str(tmp_path / "a"))
    write_instance(80, str(tmp_path / "b"))
    assert n == 76
    assert len(list(load_inventory(inv, builtin_catalog()).gpus())) == 80
    assert len(load_profiles(prof)) == 76
    for f in (tmp_path / "a").rglob("*.yaml"):
        assert f.read_text() == (tmp_path / "b" / f.relative_to(tmp_path / "a")).read_text()


def test_startup_importtime_parser() -> None:
    import sys

    from bench.startup import importtime

    cumulative, per_package = importtime([sys.executable, "-c", "import json"], {})
    assert any(m == "json" for m, _ in cumulative) and any(p == "json" for p, _ in per_package)


def test_topic_sections_are_rebuilt_in_order_one_level_down_with_the_old_introduction(tmp_path) -> None:
    from bench import topics

    (tmp_path / "zeta.md").write_text("## Zeta\n\nz\n### Sub\n")
    (tmp_path / "apply.md").write_text("## Apply\n\na\n")
    previous = "# R\n\n## Topic benchmarks\n\nKept intro.\n\n<!-- from bench/results/old.md -->\n### Old\n"
    text = topics.section(previous, str(tmp_path))
    assert text.startswith("## Topic benchmarks\n\nKept intro.\n")
    assert text.index("### Apply") < text.index("### Zeta") < text.index("#### Sub")  # ORDER first, then by name
    assert "<!-- from bench/results/apply.md -->" in text and "Old" not in text
    assert topics.section("", str(tmp_path)).startswith(f"## Topic benchmarks\n\n{topics.INTRO}\n")
    assert topics.with_topics("# R\n\ntables\n", previous, str(tmp_path)) == "# R\n\ntables\n\n" + text
    assert topics.with_topics(previous, previous, str(tmp_path)) == "# R\n\n" + text  # the old section replaced
