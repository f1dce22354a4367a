"""The wire formats Sieve prunes, each read into one chat-shaped view and written back.

The pruning pipeline knows one shape: a Chat Completions ``messages`` list.
An adapter reads a body of its format into that view (every view message
remembers where it came from) and writes the pipeline's decision back into
the format's own shape: kept items byte for byte, masked tool output and
omission markers in the format's own content shape::

    adapter = adapter_for(WireFormat.MESSAGES)
    view = adapter.read(body, limits)              # or InvalidRequest naming the field
    result = prune(view.body, policy, ...)         # the one pipeline
    forwarded = adapter.write(body, view, result)  # an Anthropic body again
"""

from gateway.wire.formats.registry import FORMAT_HEADER, ChatView, FormatAdapter, WireFormat, adapter_for, parse_format

__all__ = ["FORMAT_HEADER", "ChatView", "FormatAdapter", "WireFormat", "adapter_for", "parse_format"]
