"""mkdocs hooks: the site's home page is README.md and its changelog CHANGELOG.md, read from the
repository root (outside `docs/`), and links that leave `docs/` are rewritten for the site, so one
set of Markdown files reads right both on the repository's pages and on the built site."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent

# Files outside `docs/` that the site publishes, by their path in the repository: the page each
# becomes.
SITE_PAGES = {"README.md": "index.md", "CHANGELOG.md": "changelog.md", "bench/README.md": "bench/running.md"}

_LINK = re.compile(r"\[([^\]]+)\]\(([^)#\s]*)(#[^)\s]*)?\)")


def on_files(files: Files, config) -> Files:
    for source in SITE_PAGES:
        files.append(File.generated(config, SITE_PAGES[source], content=(ROOT / source).read_text()))
    return files


def _rewrite(match: re.Match, source: str, page_dir: str) -> str:
    """A link of the file at repository path `source` as the site's page in `page_dir` needs it."""
    text, target, anchor = match.group(1), match.group(2), match.group(3) or ""
    if not target or re.match(r"[a-z]+:", target):
        return match.group(0)
    path = posixpath.normpath(posixpath.join(posixpath.dirname(source), target))
    if path.startswith("docs/"):
        site = path.removeprefix("docs/")
    elif path in SITE_PAGES:
        site = SITE_PAGES[path]
    else:  # a file of the repository the site does not publish (a notebook, a folder, a script)
        return f"{text} (`{path}`)"
    return f"[{text}]({posixpath.relpath(site, page_dir or '.')}{anchor})"


def on_page_markdown(markdown: str, page, config, files) -> str:
    uri = page.file.src_uri
    source = next((s for s, page in SITE_PAGES.items() if page == uri), f"docs/{uri}")
    return _LINK.sub(lambda m: _rewrite(m, source, posixpath.dirname(uri)), markdown)
