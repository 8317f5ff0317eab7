"""MCP tools as the policy sees them: schema checks, and results as observation text.

The chat renderer writes every tool's schema into the system prompt as JSON, and the env
validates each call against it. A listing that cannot serve both (no name, a schema that
is not a JSON-Schema object, a ``$ref`` that resolves nowhere, NaN, a schema too long for
a prompt) is refused at ``reset`` with ``MCPSchemaError`` naming the server and the tool:
it would otherwise fail on every episode, or mid-episode on the first call.
"""

from __future__ import annotations

import json
import re

import jsonschema
import mcp_types as types


class MCPSchemaError(ValueError):
    """A tool listing the policy's chat template cannot render or the env cannot validate."""


_NAME = re.compile(r"^[^\s\x00-\x1f\x7f]{1,128}$")


def _pointer(schema: dict, ref: str):
    """The sub-schema at a local ``$ref`` ("#/$defs/x"), or raise KeyError."""
    node = schema
    for part in ref[1:].split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def _refs(node):
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def schema_problem(tool: types.Tool, max_chars: int) -> str | None:
    """What makes ``tool`` unusable, or None."""
    if not isinstance(tool.name, str) or not _NAME.match(tool.name):
        return "its name must be 1 to 128 characters without spaces or control characters"
    if tool.description is not None and not isinstance(tool.description, str):
        return "its description must be a string"
    schema = tool.input_schema
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return 'inputSchema must be a JSON-Schema object ({"type": "object", "properties": {...}})'
    props = schema.get("properties", {})
    if not isinstance(props, dict) or not all(isinstance(v, (dict, bool)) for v in props.values()):
        return "inputSchema 'properties' must map each argument name to a schema"
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return "inputSchema 'required' must be a list of argument names"
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as e:
        return f"inputSchema is not a valid JSON Schema: {e.message}"
    for ref in _refs(schema):
        if not ref.startswith("#"):
            return f"inputSchema refers to {ref!r} outside itself; inline it or put it under $defs"
        try:
            _pointer(schema, ref)
        except (KeyError, IndexError, ValueError, TypeError):
            return f"inputSchema's $ref {ref!r} resolves to nothing"
    try:
        text = json.dumps({"name": tool.name, "description": tool.description or "", "parameters": schema},
                          ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        return f"its schema is not plain JSON ({e})"
    if len(text) > max_chars:
        return f"its schema is {len(text)} characters, over max_schema_chars={max_chars}"
    return None


def checked_tools(tools: list[types.Tool], server: str, allow: list[str] | None, max_chars: int) -> list[types.Tool]:
    """The tools to offer (``allow`` picks some by name), each one checked."""
    names = [t.name for t in tools]
    if allow is not None:
        missing = [n for n in allow if n not in names]
        if missing:
            raise MCPSchemaError(f"MCP server {server} has no tools {missing}; it lists {names}. "
                                 "Fix env_config['tools'].")
        tools = [t for t in tools if t.name in allow]
    if not tools:
        raise MCPSchemaError(f"MCP server {server} lists no tools; an MCP env needs at least one")
    seen = set()
    for tool in tools:
        if tool.name in seen:
            raise MCPSchemaError(f"MCP server {server} lists the tool {tool.name!r} twice")
        seen.add(tool.name)
        problem = schema_problem(tool, max_chars)
        if problem:
            raise MCPSchemaError(f"MCP server {server}: tool {tool.name!r} cannot be shown to the policy: {problem}. "
                                 "Fix the tool on the server, or leave it out with env_config['tools'] (the names "
                                 "of the tools to use).")
    return tools


def result_text(result: types.CallToolResult) -> str:
    """A ``tools/call`` result as observation text: the text blocks in order, a short note
    for media and binary resources (their bytes mean nothing to a text policy), and the
    structured content as JSON when there is no text."""
    parts = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, (types.ImageContent, types.AudioContent)):
            parts.append(f"[{block.type} ({block.mime_type}, {len(block.data)} base64 characters) not shown]")
        elif isinstance(block, types.EmbeddedResource):
            res = block.resource
            parts.append(res.text if isinstance(res, types.TextResourceContents)
                         else f"[binary resource {res.uri} ({res.mime_type or 'unknown type'}) not shown]")
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource link: {block.name} {block.uri}]")
        else:
            parts.append(f"[{getattr(block, 'type', type(block).__name__)} content not shown]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(parts)
