"""A report as blocks -- ("h", level, text) / ("p", text) / ("table", head, rows) /
("img", relative_path, caption) / ("code", text) -- written as Markdown and as one self-contained
HTML page (images embedded as base64, shown at >= 900 px, click to enlarge). Used by the run
report (:mod:`identify.outputs.report`) and the sweep summary (:mod:`identify.app.sweep`)."""
from __future__ import annotations

import base64
import html
import re
from pathlib import Path

__all__ = ["render_markdown", "render_html"]


def render_markdown(blocks: list[tuple]) -> str:
    """The blocks as Markdown."""
    out = []
    for b in blocks:
        kind = b[0]
        if kind == "h":
            out.append("#" * b[1] + " " + b[2])
        elif kind == "p":
            out.append(b[1])
        elif kind == "table":
            head, rows = b[1], b[2]
            def cell(c):                  # a '|' inside a cell would split the column
                return str(c).replace("|", "\\|")
            out.append("| " + " | ".join(cell(h) for h in head) + " |")
            out.append("|" + "---|" * len(head))
            out += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
        elif kind == "img":
            out.append(f"![{Path(b[1]).stem}]({b[1]})\n\n*{b[2]}*")
        elif kind == "code":
            out.append("```\n" + b[1] + "\n```")
        out.append("")
    return "\n".join(out)


_CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:0.9em}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}
figure{margin:0 0 1.5em;overflow-x:auto}
figure img{width:100%;min-width:900px;border:1px solid #eee;margin:0.5em 0;cursor:zoom-in}
figure img.big{position:fixed;inset:0;width:100vw;height:100vh;min-width:0;object-fit:contain;
background:#fff;margin:0;z-index:10;cursor:zoom-out}
figcaption{font-size:0.85em;color:#555}pre{background:#f7f7f7;padding:0.6em;overflow:auto}"""


def _inline_md(text: str) -> str:
    t = html.escape(text)
    t = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", t)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", t)


def render_html(blocks: list[tuple], folder: Path, title: str) -> str:
    """The blocks as one HTML page titled `title` (images read from `folder`)."""
    out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
           f"<style>{_CSS}</style></head><body>"]
    for b in blocks:
        kind = b[0]
        if kind == "h":
            out.append(f"<h{b[1]}>{html.escape(b[2])}</h{b[1]}>")
        elif kind == "p":
            out.append(f"<p>{_inline_md(b[1])}</p>")
        elif kind == "table":
            out.append("<table><tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in b[1])
                       + "</tr>")
            for r in b[2]:
                out.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>")
            out.append("</table>")
        elif kind == "img":
            data = base64.b64encode((folder / b[1]).read_bytes()).decode()
            out.append(f"<figure><img alt='{html.escape(b[2])}' title='click to enlarge' "
                       f"onclick=\"this.classList.toggle('big')\" "
                       f"src='data:image/png;base64,{data}'>"
                       f"<figcaption>{html.escape(b[2])}</figcaption></figure>")
        elif kind == "code":
            out.append(f"<pre>{html.escape(b[1])}</pre>")
    out.append("</body></html>")
    return "\n".join(out)
