"""mkdocs hook: show options without a default sensibly in the generated command reference.

click >= 8.3 marks "no default" with a sentinel object, which mkdocs-click 0.9 prints
verbatim (`Sentinel.UNSET`). Flags (type boolean) then default to False; other options
have no value unless given, which mkdocs-click itself writes as "None".
"""

from __future__ import annotations

import re
from typing import Any

UNSET = "<code>Sentinel.UNSET</code>"
_ROW = re.compile(r"<tr>.*?</tr>", re.S)


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    if UNSET not in html:
        return html
    return _ROW.sub(_fix_row, html)


def _fix_row(match: re.Match[str]) -> str:
    row = match.group(0)
    return row.replace(UNSET, "<code>False</code>" if "<td>boolean</td>" in row else "None")
