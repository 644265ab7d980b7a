"""The README's summary of the findings says what docs/results.md says: each claim's verdict there is
the generated document's, so regenerating the document with another verdict fails here until the
README follows."""

from __future__ import annotations

import re

from launching import REPO

from analysis.results import summary

ROW = re.compile(r"^\| (\d\.\d+) [^|]*\| ([^|]+) \|")  # 3.10 and on: two digits


def test_the_readme_verdicts_are_the_documents():
    document = {
        title.split(" ", 1)[0]: verdict for title, verdict in summary(REPO / "docs" / "results.md").items()
    }
    readme = {
        m[1]: m[2].strip() for line in (REPO / "README.md").read_text().splitlines() if (m := ROW.match(line))
    }
    assert readme == document
