"""Fleet and per-GPU fingerprints, and `changes`: what apply checks before touching one GPU."""

from __future__ import annotations

import dataclasses

from migplan.catalog.layout import Instance, Layout
from migplan.model.state import FleetState, GpuState, changes

L = Layout.parse


def _gpu(**kw: object) -> GpuState:
    base: dict[str, object] = {"host": "h", "index": 0, "model": "A100-SXM4-40GB", "mig_enabled": True,
                               "layout": L(["3g.20gb@0", "2g.10gb@4"])}
    base.update(kw)
    return GpuState(**base)  # type: ignore[arg-type]


def test_unchanged_gpu_has_no_changes_and_same_fingerprint() -> None:
    a, b = _gpu(), _gpu()
    assert changes(a, b) == [] and a.fingerprint() == b.fingerprint()


def test_a_process_elsewhere_changes_the_fleet_fingerprint_but_not_this_gpus() -> None:
    here = _gpu()
    other = _gpu(index=1)
    busy_other = dataclasses.replace(other, busy=(Instance(0, "3g.20gb"),))
    before, after = FleetState((here, other)), FleetState((here, busy_other))
    assert before.fingerprint() != after.fingerprint()
    assert here.fingerprint() == after.gpu("h", 0).fingerprint()  # type: ignore[union-attr]
    assert changes(here, after.gpu("h", 0)) == []


def test_each_kind_of_change_is_named() -> None:
    a = _gpu(uuid="GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f")
    cases = {
        "layout is": dataclasses.replace(a, layout=L(["7g.40gb@0"])),
        "MIG is disabled": dataclasses.replace(a, mig_enabled=False, layout=None),
        "processes now run on 2g.10gb@4": dataclasses.replace(a, busy=(Instance(4, "2g.10gb"),)),
        "pending MIG mode change": dataclasses.replace(a, mig_pending=False),
        "a different GPU": dataclasses.replace(a, uuid="GPU-00000000-0000-0000-0000-000000000000"),
        "model is": dataclasses.replace(a, model="A100-SXM4-80GB"),
    }
    for words, live in cases.items():
        found = changes(a, live)
        assert any(words in c for c in found), (words, found)
        assert a.fingerprint() != live.fingerprint()
    assert changes(a, None) == ["GPU 0: not found on the host any more"]


def test_reserved_flag_is_not_part_of_what_apply_checks() -> None:
    """Reserved/excluded come from the inventory, not from the GPU: they never make a GPU 'changed'."""
    a = _gpu()
    assert changes(a, dataclasses.replace(a, reserved=True)) == []


def test_mig_disabled_gpu_current_is_none_even_if_a_layout_is_given() -> None:
    g = _gpu(mig_enabled=False)
    assert g.current is None and g.identity()["layout"] is None


def test_a_kept_fingerprint_is_never_a_changed_copys() -> None:
    """Fingerprints are made once per object (the objects are immutable); a replaced copy makes its own,
    and the kept value is no field: equality and the fields are untouched."""
    a = _gpu()
    first = a.fingerprint()
    b = dataclasses.replace(a, layout=L(["7g.40gb@0"]))
    assert b.fingerprint() != first and a.fingerprint() == first == _gpu().fingerprint()
    assert a == _gpu() and "_fingerprint" not in [f.name for f in dataclasses.fields(a)]
    fleet = FleetState((a,))
    kept = fleet.fingerprint()
    assert dataclasses.replace(fleet, gpus=(b,)).fingerprint() != kept == FleetState((_gpu(),)).fingerprint()


def test_fingerprints_are_the_sha256_of_the_canonical_json() -> None:
    """The definition, computed here independently: sha256 of json.dumps(identity, sorted keys, no spaces),
    for one GPU and for the fleet's list sorted by (host, index)."""
    import hashlib
    import json

    def sha(doc: object) -> str:
        return "sha256:" + hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    gpus = (_gpu(index=2, uuid="GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f"), _gpu(host="a", mig_enabled=False,
                                                                          layout=None, whole_gpu_busy=True),
            _gpu(busy=(Instance(0, "3g.20gb"),)))
    assert [g.fingerprint() for g in gpus] == [sha(g.identity()) for g in gpus]
    fleet = FleetState(gpus)
    assert fleet.fingerprint() == sha([g.identity() for g in sorted(gpus, key=lambda g: g.key)])


