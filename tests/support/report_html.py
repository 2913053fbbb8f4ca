"""Reading the report's HTML: its sections and marks."""

from __future__ import annotations

import re


def marks(dom: str, mark: str, **attributes: str) -> list[str]:
    found = re.findall(rf'<[a-z]+ [^>]*data-mark="{mark}"[^>]*>', dom)
    return [tag for tag in found if all(f'data-{k}="{v}"' in tag for k, v in attributes.items())]


def section(dom: str, request_id: str) -> str:
    start = dom.index(f'data-request-id="{request_id}"')
    end = dom.find('<section class="request"', start)
    return dom[start : end if end != -1 else len(dom)]
