"""Writes frontend/src/generated/page-data.ts from the TypedDicts in webapp/page_data.py.

Run after changing a page's data: .venv/bin/python scripts/page_types.py
With --check it writes nothing and exits 1 when the file is out of date.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from webapp.page_data import PAGES  # noqa: E402
from webapp.typescript import typescript_module  # noqa: E402

TARGET = ROOT / "frontend" / "src" / "generated" / "page-data.ts"


def main(argv: list[str]) -> int:
    text = typescript_module(PAGES)
    if "--check" in argv:
        if not TARGET.exists() or TARGET.read_text() != text:
            print(f"{TARGET.relative_to(ROOT)} is out of date: run .venv/bin/python scripts/page_types.py")
            return 1
        return 0
    TARGET.write_text(text)
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
