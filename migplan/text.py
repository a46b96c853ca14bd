"""Text from a file or a host, made safe to print: the one sanitiser (pure).

Anything migplan shows that it did not write itself (host output, names and messages read from a
snapshot, plan or catalog file) passes through `printable` first, so terminal escape sequences
(clear screen, window title, cursor moves) never reach a terminal or a log.
"""

from __future__ import annotations


def printable(text: str, limit: int = 300, *, multiline: bool = False) -> str:
    """`text` without control characters, at most `limit` characters (`...` marks a cut).

    One line by default: line breaks become ` | ` and runs of white space one space. With
    `multiline`, line breaks are kept (for an error's full output) and other controls become `?`.
    """
    if multiline:
        lines = ("".join(c if c.isprintable() or c == "\t" else "?" for c in ln).rstrip()
                 for ln in text.replace("\r\n", "\n").split("\n"))
        clean = "\n".join(lines).strip()
    else:
        clean = "".join(c if c.isprintable() else " " for c in text.replace("\r", " ").replace("\n", " | "))
        clean = " ".join(clean.split())
    return clean if len(clean) <= limit else clean[: max(0, limit - 3)] + "..."
