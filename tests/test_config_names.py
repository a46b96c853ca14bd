"""Readable, stable mig-parted config names (issue 24): every layout of every catalog model, as a `devices: all`
config, gets a name that says what it creates, is a valid Kubernetes label value (RFC 1123-ish rules of label
values: at most 63 characters of [A-Za-z0-9-_.], starting and ending alphanumeric) and is unique among them."""

from __future__ import annotations

import re

from migplan import mig_parted
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import enumerate_layouts

LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)")
CAT = builtin_catalog()


def test_every_layout_of_every_model_has_a_unique_label_valid_name() -> None:
    # a config holds profiles and counts only (no device filter): one name never stands for two contents
    # (H100 SXM and PCIe share `h100-80gb` where their layouts are the same config)
    seen: dict[str, tuple[tuple[str, int], ...]] = {}
    for model in CAT.models:
        counts = {tuple(sorted(lay.profile_counts().items())) for lay in enumerate_layouts(model)}
        for c in counts:
            entry = mig_parted.Entry(None, True, c)
            name = mig_parted.config_name([entry], model.id)
            assert LABEL_VALUE.fullmatch(name), name
            assert name == mig_parted.config_name([entry], model.id)  # stable
            assert seen.setdefault(name, c) == c, f"{name}: two configs"


def test_a_name_says_what_it_creates() -> None:
    entry = mig_parted.gpu_entry(None, None)
    assert mig_parted.config_name([entry], "A30-24GB") == "migplan-a30-24gb-disabled"
    one = mig_parted.Entry(None, True, (("1g.10gb", 7),))
    assert mig_parted.config_name([one], "H100-SXM5-80GB") == "migplan-h100-80gb-7x1g.10gb"


def test_different_layouts_per_gpu_get_distinct_hashed_names() -> None:
    a = (mig_parted.Entry((0,), True, (("7g.40gb", 1),)), mig_parted.Entry((1,), False))
    b = (mig_parted.Entry((0,), False), mig_parted.Entry((1,), True, (("7g.40gb", 1),)))
    na, nb = mig_parted.config_name(a, "A100-SXM4-40GB"), mig_parted.config_name(b, "A100-SXM4-40GB")
    assert na != nb and na.startswith("migplan-a100-40gb-per-gpu-") and LABEL_VALUE.fullmatch(na)
