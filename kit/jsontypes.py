"""Names for the mappings the kit passes on rather than reads as records.

Why names and not records: each of these is a JSON object or a parameter mapping whose shape another program or
spec defines, built and handed on at once (sent on the wire, written as a CLI's settings file, injected by
papermill, turned into a table row). A record would copy that outside definition field by field; the name says
whose definition it is, so a reader knows where to look.
"""

from typing import Any

JsonObject = dict[str, Any]
"""A JSON object in another program's format: an API's request or response body (OpenAI, Anthropic), an MCP message,
Claude Code's or Codex's settings, a provider-log line. Its contract is that program's documentation."""

ParamValues = dict[str, Any]
"""Parameter name -> value, as a notebook receives them from papermill; the names and their checks are
``kit.params``' specs (docs/design.md, parameters)."""

PackFacts = dict[str, Any]
"""What a task pack records about itself in the manifest's ``task`` (name, preset, true effect, fixture hash, …):
pack-specific facts, shown in the report as written."""

Row = dict[str, Any]
"""One table row before it becomes a DataFrame; its columns are the table's (``kit.schema``, docs/tables.md)."""
