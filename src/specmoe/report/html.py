"""The report as one HTML page (Markdown rendered, images embedded, wide tables scrolling)."""

from __future__ import annotations

from pathlib import Path


def to_html(markdown: str, base: Path | None = None) -> str:
    """The report as one HTML page. With `base` (the Markdown file's folder) every image is
    embedded as a data URI, so the page stands alone (Snakemake's report shows it as it is)."""
    import base64
    import re

    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark").enable("table").render(markdown)
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
             "td,th{padding:2px 6px;border-bottom:1px solid #ddd}")
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>specmoe report</title>"
            f"<style>{style}</style></head><body>{body}</body></html>\n")
