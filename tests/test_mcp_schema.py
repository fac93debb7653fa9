"""The MCP tools follow from the operations' declarations: each tool's input schema is its
request model's JSON schema, so every filter of `POST /v1/search` is there; reads carry
`readOnlyHint`; descriptions read as written, without the docstrings' indentation; and what
the model refuses, the tool refuses in the API's words. Asked through a real MCP client."""

from __future__ import annotations

import os
from typing import Any

import pytest
from mcp import ClientSession

from tests.mcp_session import error_text, session
from vaultd.api.operations import (
    BacklinksRequest,
    MentionsRequest,
    NoteReadRequest,
    NoteRequest,
    OutlineRequest,
    RecentRequest,
    RelatedRequest,
    SearchRequest,
    TagsRequest,
)
from vaultd.query import MAX_K


def _without(schema: dict[str, Any], *fields: str) -> dict[str, Any]:
    out = {**schema, "properties": {k: v for k, v in schema["properties"].items()}}
    for name in fields:
        del out["properties"][name]
    return out


#: Each tool and the schema it must have: its request model's, less what the tool sets itself
#: (read_note always reads the text) or has no use for (links takes only the note).
EXPECTED = {
    "search": SearchRequest.model_json_schema(),
    "read_note": _without(NoteReadRequest.model_json_schema(), "text"),
    "links": _without(
        NoteReadRequest.model_json_schema(),
        *("text", "start_line", "end_line", "start_page", "end_page"),
    ),
    "related": RelatedRequest.model_json_schema(),
    "unlinked_mentions": MentionsRequest.model_json_schema(),
    "backlinks": BacklinksRequest.model_json_schema(),
    "outline": OutlineRequest.model_json_schema(),
    "tags": TagsRequest.model_json_schema(),
    "recent_notes": RecentRequest.model_json_schema(),
}


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, list[Any]]:
    home = tmp_path_factory.mktemp("home")  # no config: the bridge serves no vault

    async def steps(client: ClientSession, hello: Any) -> Any:
        tools = await client.list_tools()
        calls = [
            await client.call_tool("search", {"query": "canvas", "limit": 2}),
            await client.call_tool("search", {"query": "canvas", "k": 101}),
            await client.call_tool("recent_notes", {"since": "yesterdayish"}),
            await client.call_tool("links", {"path": "Canvas", "text": True}),
            # The old spelling, still taken this release: checked, then refused for its date.
            await client.call_tool("search", {"query": "canvas", "modified_since": "soonish"}),
        ]
        return tools, calls

    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    found: tuple[Any, list[Any]] = session(["mcp"], steps, env=env)
    return found


def test_each_tool_takes_its_request_model(listed: tuple[Any, list[Any]]) -> None:
    tools = {t.name: t for t in listed[0].tools}
    assert set(tools) == set(EXPECTED)
    for name, schema in EXPECTED.items():
        assert tools[name].input_schema == schema, name
    # Every filter of POST /v1/search, by its one name.
    search = tools["search"].input_schema["properties"]
    for field in ("where", "since", "tags", "tags_any", "path_prefix", "per_note", "merge"):
        assert field in search, field
    assert search["k"]["maximum"] == MAX_K
    assert tools["links"].input_schema["properties"].keys() == NoteRequest.model_fields.keys()


def test_reads_are_read_only_and_descriptions_are_dedented(listed: tuple[Any, list[Any]]) -> None:
    for tool in listed[0].tools:
        assert tool.annotations is not None and tool.annotations.read_only_hint is True, tool.name
        description = tool.description or ""
        assert description and description == description.strip(), tool.name
        assert not any(line.startswith(" ") for line in description.splitlines()), tool.name
    tools = {t.name: t for t in listed[0].tools}
    assert tools["backlinks"].description.startswith(BacklinksRequest.__doc__.split("\n")[0])


def test_what_the_model_refuses_the_tool_refuses_in_the_apis_words(
    listed: tuple[Any, list[Any]],
) -> None:
    unknown, too_many, bad_date, not_offered, old = (error_text(r) for r in listed[1])
    assert "unknown field 'limit'" in unknown and "no vault to serve" not in unknown
    assert "k must be 1 to 100" in too_many
    assert "'yesterdayish' is neither an ISO date nor epoch seconds" in bad_date
    assert "unknown field 'text'" in not_offered
    assert "'soonish' is neither an ISO date nor epoch seconds" in old and "unknown" not in old
