"""What the scorer and the token count read out of native content: text, and short stand-ins.

Both native formats hold content as a string or a list of typed parts. The view
carries their text (what a scorer matches and the target counts); an image or
a binary file has no text, so it stands in the view as a short tag (the scorer
sees that something was there, and a user turn holding only an image is not
read as empty). Tool-call arguments are written as compact JSON, the form
Chat Completions clients send, so the same call counts the same in every format.
"""

from __future__ import annotations

from typing import Any, Mapping

import orjson

# Part types whose text sits under "text" (Anthropic text blocks; Responses text parts).
TEXT_TYPES = frozenset(("text", "input_text", "output_text"))


def compact_json(value: Any) -> str:
    """``value`` as compact JSON text (keys in their given order, non-ASCII kept)."""
    return orjson.dumps(value).decode()


def parts_text(content: Any) -> str:
    """The text of a content: a string as it is, the texts and stand-ins of a part list
    joined by newlines."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(t for t in (part_text(p) for p in content) if t)


def part_text(part: Any) -> str:
    """The text of one content part (block) of either format."""
    if isinstance(part, str):
        return part
    if not isinstance(part, Mapping):
        return ""
    kind = part.get("type")
    if kind in TEXT_TYPES:
        text = part.get("text")
        return text if isinstance(text, str) else ""
    if kind == "refusal":
        return str(part.get("refusal") or "")
    if kind in ("tool_result", "search_result"):
        return parts_text(part.get("content"))
    if kind == "document":
        return _document_text(part)
    if kind in ("image", "input_image"):
        return "[image]"
    if kind == "input_file":
        return f"[file {part.get('filename') or ''}]".replace(" ]", "]")
    return ""


def _document_text(block: Mapping[str, Any]) -> str:
    """A document's own text when it is plain text (source ``text`` or ``content``), else a tag."""
    source = block.get("source")
    title = block.get("title")
    head = f"[document {title}]" if isinstance(title, str) and title else "[document]"
    if isinstance(source, Mapping):
        if source.get("type") == "text" and isinstance(source.get("data"), str):
            return f"{head}\n{source['data']}"
        if source.get("type") == "content":
            return f"{head}\n{parts_text(source.get('content'))}"
    return head
