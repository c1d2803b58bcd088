"""The report as one HTML page: Markdown rendered, a table of contents from its headings (each
with an anchor), images embedded, wide tables scrolling inside the column."""

from __future__ import annotations

import base64
import html as html_lib
import re
from pathlib import Path


def _slug(text: str, seen: dict[str, int]) -> str:
    """An anchor for a heading: its words in lower case joined by hyphens, numbered when the same
    words come again."""
    base = re.sub(r"[^a-z0-9]+", "-", re.sub(r"<[^>]+>", "", text).lower()).strip("-") or "section"
    seen[base] = seen.get(base, 0) + 1
    return base if seen[base] == 1 else f"{base}-{seen[base]}"


def with_contents(body: str) -> str:
    """Every h2 and h3 given an id, and a table of contents of them (h3 indented under its h2)
    put after the page's h1."""
    seen: dict[str, int] = {}
    entries: list[tuple[int, str, str]] = []

    def anchor(m: re.Match) -> str:
        level, inner = int(m.group(1)), m.group(2)
        slug = _slug(html_lib.unescape(inner), seen)
        entries.append((level, slug, inner))
        return f'<h{level} id="{slug}">{inner}</h{level}>'

    body = re.sub(r"<h([23])>(.*?)</h\1>", anchor, body)
    toc = ['<nav class="toc" aria-label="Contents"><p><strong>Contents</strong></p><ul>']
    toc += [f'<li class="l{level}"><a href="#{slug}">{inner}</a></li>'
            for level, slug, inner in entries]
    toc.append("</ul></nav>")
    m = re.search(r"</h1>", body)
    at = m.end() if m else 0
    return body[:at] + "".join(toc) + body[at:]


def to_html(markdown: str, base: Path | None = None) -> str:
    """The report as one HTML page. With `base` (the Markdown file's folder) every image is
    embedded as a data URI, so the page stands alone (Snakemake's report shows it as it is)."""
    from markdown_it import MarkdownIt

    body = with_contents(MarkdownIt("commonmark").enable("table").render(markdown))
    if base is not None:
        def embed(m):
            f = (base / m.group(1)).resolve()
            if not f.is_file():
                return m.group(0)
            return f'src="data:image/png;base64,{base64.b64encode(f.read_bytes()).decode()}"'
        body = re.sub(r'src="([^":]+\.png)"', embed, body)
    # wide tables scroll inside the page's column instead of running off its right edge
    style = ("body{font-family:sans-serif;max-width:1100px;margin:auto;font-size:14px} "
             "img{max-width:100%} table{border-collapse:collapse;font-size:12px;display:block;"
             "max-width:100%;overflow-x:auto} "
             "td,th{padding:2px 6px;border-bottom:1px solid #ddd} "
             "nav.toc{font-size:13px;border:1px solid #ddd;padding:4px 12px;margin:8px 0} "
             "nav.toc ul{margin:2px 0;list-style:none;padding-left:8px} nav.toc li.l3{padding-left:18px} "
             "h2{border-bottom:1px solid #ccc}")
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>specmoe "
            f"report</title><style>{style}</style></head><body>{body}</body></html>\n")
