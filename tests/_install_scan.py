"""Find instructions that pip-install this project by name from a package index.

The project's distribution is `jaxdp-synth` and is published nowhere yet; `jaxdp` on PyPI is an
unrelated project. So `pip install jaxdp`, `pip install "jaxdp[cuda12]"` or `pip install
jaxdp-synth` all fetch someone else's package (today or once the name is taken), while a local
path (`-e .`, `".[cuda12]"`, `./jaxdp_synth-0.1.0-py3-none-any.whl[pandas]`) installs this one.
"""

from __future__ import annotations

import re

DISTRIBUTION = "jaxdp-synth"
# Names that must never be requested from an index. Drop DISTRIBUTION from this set once the
# project publishes it on PyPI itself.
NOT_FROM_AN_INDEX = frozenset({"jaxdp", DISTRIBUTION})

_PIP_INSTALL = re.compile(r"\bpip3?\s+install\b")
_TOKEN = re.compile(r'"[^"]*"|\'[^\']*\'|\S+')
_STOP = {"&&", "||", ";", "|", "#"}
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
# what may follow a bare requirement name: extras, a version specifier, a marker, a URL, or nothing
_AFTER_NAME = re.compile(r"\s*(?:$|\[|[<>=!~]|;|@)")


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def index_requirement(token: str) -> str | None:
    """The distribution `token` asks an index for, if it is one of this project's names."""
    token = token.strip("\"'`,.)(")
    if not token or token.startswith("-") or "/" in token or "\\" in token:
        return None  # an option, or a path
    match = _NAME.match(token)
    if match is None or not _AFTER_NAME.match(token[match.end() :]):
        return None  # a path or file name (".[pgm]", "x.whl[...]", "{target}"), or not a requirement
    name = _normalise(match.group())
    return name if name in NOT_FROM_AN_INDEX else None


def index_installs(text: str) -> list[tuple[int, str]]:
    """(line number, line) of each `pip install` that requests this project by name."""
    lines = text.splitlines()
    found = []
    for number, line in enumerate(lines, start=1):
        for match in _PIP_INSTALL.finditer(line):
            tail = line[match.end() :].split("`", 1)[0]  # an inline-code command ends at its backtick
            continued = number
            while tail.rstrip().endswith("\\") and continued < len(lines):  # shell line continuation
                tail = tail.rstrip()[:-1] + " " + lines[continued]
                continued += 1
            for token in _TOKEN.findall(tail):
                if token in _STOP or token.startswith("#"):
                    break
                if index_requirement(token):
                    found.append((number, line.strip()))
                    break
    return found
