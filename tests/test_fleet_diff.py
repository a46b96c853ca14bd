"""diff(current, target): only what changes, in a safe order."""

from __future__ import annotations

import pytest

from migplan.fleet.diff import Action, Op, diff
from migplan.layout import Layout

L = Layout.parse


@pytest.mark.parametrize(("current", "target", "expect"), [
    (L(["3g.20gb@0"]), L(["3g.20gb@0"]), []),
    (None, None, []),
    (None, L(["7g.40gb@0"]), ["enable-mig", "create-gi 7g.40gb@0", "create-ci 7g.40gb@0"]),
    (L(["7g.40gb@0"]), None, ["destroy-ci 7g.40gb@0", "destroy-gi 7g.40gb@0", "disable-mig"]),
    (L(["3g.20gb@0", "3g.20gb@4"]), L(["3g.20gb@0", "2g.10gb@4", "1g.5gb@6"]),
     ["destroy-ci 3g.20gb@4", "destroy-gi 3g.20gb@4", "create-gi 2g.10gb@4", "create-ci 2g.10gb@4",
      "create-gi 1g.5gb@6", "create-ci 1g.5gb@6"]),
    (L(["1g.5gb@0", "1g.5gb@1"]), L([]),
     ["destroy-ci 1g.5gb@1", "destroy-gi 1g.5gb@1", "destroy-ci 1g.5gb@0", "destroy-gi 1g.5gb@0"]),
])
def test_diff(current, target, expect) -> None:
    assert [str(a) for a in diff(current, target)] == expect


def test_action_str() -> None:
    assert str(Action(Op.ENABLE_MIG)) == "enable-mig"
