"""The manual builds: `mkdocs build --strict` on mkdocs.yml turns every warning into a failure (a link to a page or
an anchor that does not exist, a page left out of the nav, a missing include), so the site in docs/ has no broken
link. It builds offline in under a second. The README, outside the site, is checked here too: each of its relative
links names a file of the repository, and each `page.md#anchor` into docs/ an anchor of that page."""

from __future__ import annotations

import re
import subprocess
import sys

from markdown.extensions.toc import slugify

from tests.conftest import ROOT

LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_docs_site_builds_in_strict_mode_with_no_warning(tmp_path):
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml")]
        + ["--site-dir", str(tmp_path / "site")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = build.stdout + build.stderr
    assert build.returncode == 0, output
    assert "WARNING" not in output, output
    assert (tmp_path / "site" / "index.html").exists()


def page_anchors(page: str) -> set[str]:
    """A page's anchors as mkdocs and GitHub make them: its headings' slugs (Python-Markdown's toc; code blocks
    left out) and the `<a id="...">` set before a bold label."""
    text = re.sub(r"```.*?```", "", (ROOT / page).read_text(), flags=re.S)
    headings = {slugify(title.strip(), "-") for title in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}
    return headings | set(re.findall(r'<a id="([^"]+)"></a>', text))


def resolves(link: str) -> bool:
    """A relative link names a file of the repository and, with `#anchor`, an anchor of that page."""
    path, _, anchor = link.partition("#")
    return (ROOT / path).exists() and (not anchor or anchor in page_anchors(path))


def test_every_relative_link_of_the_readme_resolves():
    links = [link for link in LINK.findall((ROOT / "README.md").read_text()) if "://" not in link]
    assert links, "the README links to no page of the manual"
    broken = [link for link in links if not resolves(link)]
    assert not broken, f"README links to what does not exist: {broken}"
