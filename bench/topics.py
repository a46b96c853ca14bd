"""The "Topic benchmarks" section of bench/RESULTS.md, rebuilt from bench/results/*.md.

Each topic script (bench/consolidate.py, large_inputs.py, apply_fleet.py, ...) writes its own file under
bench/results/; RESULTS.md carries them one heading level down, after the tables `python -m bench.run`
writes, with an introduction kept from the RESULTS.md it replaces (`INTRO` when there is none).
`bench.run` keeps the section when it rewrites RESULTS.md; `python -m bench.topics` rebuilds it alone.
"""

from __future__ import annotations

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
HEADING = "## Topic benchmarks"
ORDER = ("consolidation", "startup-large", "apply", "replan", "collect", "history", "k8s-export", "report-html")
INTRO = ("Each section below is written by its own script (named in it) into `bench/results/`; the tables "
         "above this section come from `python -m bench.run`.")
_MARK = re.compile(r"<!-- from bench/results/([^ ]+)\.md -->")


def _intro(previous: str) -> str:
    """The introduction of the section in `previous` (a RESULTS.md text), or INTRO."""
    at = previous.find(HEADING)
    if at < 0:
        return INTRO
    found = _MARK.search(previous, at)
    text = previous[at + len(HEADING):found.start() if found else len(previous)].strip()
    return text or INTRO


def section(previous: str = "", results: str = os.path.join(HERE, "results")) -> str:
    """The section's text: the introduction, then every results file (ORDER first, the rest by name)."""
    names = [n[:-3] for n in sorted(os.listdir(results)) if n.endswith(".md")]
    parts = [f"{HEADING}\n\n{_intro(previous)}\n"]
    for name in [*(n for n in ORDER if n in names), *(n for n in names if n not in ORDER)]:
        with open(os.path.join(results, name + ".md"), encoding="utf-8") as fh:
            text = re.sub(r"^(#+) ", r"#\1 ", fh.read().rstrip(), flags=re.M)  # one heading level down
        parts.append(f"\n<!-- from bench/results/{name}.md -->\n{text}\n")
    return "".join(parts)


def with_topics(head: str, previous: str, results: str = os.path.join(HERE, "results")) -> str:
    """`head` (a RESULTS.md text: what comes before its section, or all of it) and the rebuilt section."""
    at = head.find(HEADING)
    head = head[:at] if at >= 0 else head.rstrip() + "\n\n"
    return head + section(previous, results)


def main() -> int:
    path = os.path.join(HERE, "RESULTS.md")
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(with_topics(text, text))
    os.replace(tmp, path)
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
