"""The manual builds: `mkdocs build --strict` on mkdocs.yml turns every warning into a failure (a link to a page or
an anchor that does not exist, a page left out of the nav, a missing include), so the site in docs/ has no broken
link. It builds offline in under a second."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


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
