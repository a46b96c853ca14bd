"""Layout rules, enumeration counts (docs/mig-geometry.md §7), free capacity and the slot picture."""

from __future__ import annotations

import dataclasses

import pytest

from migplan.catalog import builtin_catalog
from migplan.catalog.layout import (
    Instance,
    Layout,
    check_layout,
    enumerate_layouts,
    free_placements,
    picture,
    validate_layout,
)
from migplan.errors import LayoutError

CAT = builtin_catalog()
A100 = CAT.get("A100-SXM4-40GB")
A30 = CAT.get("A30")
NO_1G10 = ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]


def L(*items: str) -> Layout:
    return Layout.parse(items)


def test_maximal_counts_from_the_reference() -> None:
    # docs/mig-geometry.md §7: 19 maximal layouts without 1g.10gb, 78 with it; A30: 5.
    assert len(enumerate_layouts(A100, profiles=NO_1G10, maximal=True)) == 19
    assert len(enumerate_layouts(A100, maximal=True)) == 78
    assert len(enumerate_layouts(A30, maximal=True)) == 5


def test_the_19_layouts_are_the_documented_ones() -> None:
    found = {str(x) for x in enumerate_layouts(A100, profiles=NO_1G10, maximal=True)}
    assert "4g.20gb@0 3g.20gb@4" in found
    assert "3g.20gb@0 2g.10gb@4 1g.5gb@6" in found
    assert "1g.5gb@0 1g.5gb@1 1g.5gb@2 1g.5gb@3 1g.5gb@4 1g.5gb@5 1g.5gb@6" in found
    assert "7g.40gb@0" in found
    assert len({tuple(sorted(x.profile_counts().items())) for x in
                enumerate_layouts(A100, profiles=NO_1G10, maximal=True)}) == 14  # distinct multisets


@pytest.mark.slow
@pytest.mark.parametrize("model", list(CAT), ids=lambda m: m.id)
def test_every_enumerated_layout_is_valid_and_maximal_means_nothing_fits(model) -> None:  # type: ignore[no-untyped-def]
    maximal = enumerate_layouts(model, maximal=True)
    assert maximal
    for lay in maximal:
        assert check_layout(model, lay) == []
        plain = [i for i in free_placements(model, lay) if model.profile(i.profile) in model.plain_profiles]
        assert plain == [], f"{lay} is not maximal on {model.id}: {plain}"
    assert len(enumerate_layouts(model)) > len(maximal)


@pytest.mark.parametrize(("layout", "rule"), [
    (L("3g.20gb@1"), "bad-start"),
    (L("4g.20gb@4"), "bad-start"),
    (L("3g.20gb@0", "2g.10gb@2"), "overlap"),
    (L("4g.20gb@0", "3g.20gb@4", "1g.10gb@6"), "overlap"),
    (L("1g.10gb@0", "1g.10gb@2", "1g.10gb@4", "1g.10gb@6", "1g.5gb@7"), "bad-start"),
    (L("1g.5gb+me@0", "1g.5gb+me@1"), "media-extensions"),
    (L("9g.80gb@0"), "unknown-profile"),
])
def test_each_rule(layout: Layout, rule: str) -> None:
    rules = {c.rule for c in check_layout(A100, layout)}
    assert rule in rules


def test_compute_rule() -> None:
    # Real placements never over-commit compute; a user catalog with fewer compute slices can.
    small = dataclasses.replace(A100, compute_slices=6)
    (c,) = check_layout(small, L("4g.20gb@0", "3g.20gb@4"))
    assert c.rule == "compute" and "7 compute slices" in c.message
    assert check_layout(A100, L("2g.10gb@0", "2g.10gb@2", "2g.10gb@4", "1g.10gb@6")) == []


def test_max_count_rule() -> None:
    # 2g.12gb+me may appear once on A30 (Instances Total 1).
    conflicts = check_layout(A30, L("2g.12gb+me@0", "2g.12gb+me@2"))
    assert {"max-count", "media-extensions"} <= {c.rule for c in conflicts}


def test_conflicts_name_the_instances() -> None:
    (c,) = [c for c in check_layout(A100, L("3g.20gb@0", "2g.10gb@2")) if c.rule == "overlap"]
    assert set(c.instances) == {Instance(0, "3g.20gb"), Instance(2, "2g.10gb")}
    assert "memory slice 2" in c.message


def test_validate_raises_with_every_conflict() -> None:
    with pytest.raises(LayoutError) as err:
        validate_layout(A100, L("3g.20gb@1", "4g.20gb@0"))
    assert "may start only at {0,4}" in str(err.value) and "both use memory slice" in str(err.value)
    validate_layout(A100, L("4g.20gb@0", "3g.20gb@4"))


def test_me_variant_is_one_plain_instance_of_the_same_size() -> None:
    assert check_layout(A100, L("1g.5gb+me@0", "1g.5gb@1", "1g.5gb@2", "1g.5gb@3", "1g.5gb@4",
                                 "1g.5gb@5", "1g.5gb@6")) == []


def test_free_placements() -> None:
    free = free_placements(A100, L("3g.20gb@0", "2g.10gb@4"))
    assert Instance(6, "1g.5gb") in free and Instance(6, "1g.10gb") in free
    assert Instance(6, "2g.10gb") not in free  # 2g starts only at 0, 2, 4
    assert all(i.start >= 4 for i in free)
    assert Instance(0, "7g.40gb") in free_placements(A100, Layout())


def test_picture() -> None:
    assert picture(A100, L("3g.20gb@0", "2g.10gb@4", "1g.5gb@6")) == "|3g.20gb    |2g.10|1g|  |"
    assert picture(A100, Layout()) == "|  |  |  |  |  |  |  |  |"
    assert picture(A100, L("7g.40gb@0")) == "|7g.40gb                |"
    assert picture(A30, L("2g.12gb@0", "1g.6gb@3")) == "|2g.12|  |1g|"
    assert "MIG disabled" in picture(A100, None)
    assert len(picture(A100, None)) == len(picture(A100, Layout()))


def test_instance_parse() -> None:
    assert Instance.parse(" 3g.20gb@4 ") == Instance(4, "3g.20gb")
    assert str(L("1g.5gb@6", "3g.20gb@0")) == "3g.20gb@0 1g.5gb@6"
    with pytest.raises(Exception, match="PROFILE@START"):
        Instance.parse("3g.20gb")
