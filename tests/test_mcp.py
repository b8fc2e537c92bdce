"""The MCP server over stdio, exercised by a real MCP client session (official SDK, major version 2)."""

from __future__ import annotations

import os
import sys
from importlib import metadata
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters

from agent.mcp_server import tool_schema
from memory import Store
from tools.agent_tools import registry

ROOT = Path(__file__).resolve().parents[1]


def test_mcp_sdk_major_version_is_the_one_the_server_is_written_for():
    assert metadata.version("mcp").split(".")[0] == "2"


def server_params(home: Path, args: list[str]) -> StdioServerParameters:
    env = {"SPECPILOT_HOME": str(home), "PATH": os.environ.get("PATH", ""), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(ROOT)}
    return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(ROOT))


@pytest.fixture
def server(specpilot_home) -> StdioServerParameters:
    return server_params(specpilot_home, ["-m", "agent.mcp_server"])


@pytest.fixture
def one_run(specpilot_home) -> str:
    with Store() as store:
        return store.add_run({"method": "draft", "target": "t", "prompt": "p", "speedup": 1.42,
                              "hardware": {"name": "Test CPU"}})


class Person:
    """An MCP client's elicitation handler: records each question and answers approve yes/no in turn."""

    def __init__(self, answers: list[bool]):
        self.answers = list(answers)
        self.messages: list[str] = []

    async def __call__(self, context, params):
        self.messages.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": self.answers.pop(0)})


def run(coro_fn):
    return anyio.run(coro_fn)


@pytest.mark.parametrize("entry", [["-m", "agent.mcp_server"], ["-m", "agent.cli.main", "mcp"]])  # `specpilot mcp`
def test_tools_are_listed_with_the_registry_schemas_and_errors_are_results(specpilot_home, one_run, entry):
    server = server_params(specpilot_home, entry)

    async def session():
        async with Client(server) as client:
            listed = (await client.list_tools()).tools
            assert [t.name for t in listed] == list(registry.load_tools())
            by_name = {t.name: t for t in listed}
            # the registry's schema, plus the server's own include_tokens (tests/test_mcp_polish.py)
            assert by_name["run_method"].input_schema == tool_schema(registry.get_tool("run_method"))
            assert by_name["install_packages"].description == registry.get_tool("install_packages").description

            found = await client.call_tool("lookup_runs", {"run_id": one_run})
            assert not found.is_error and found.structured_content["runs"][0]["speedup"] == 1.42
            assert "Test CPU" in found.content[0].text
            missing = await client.call_tool("lookup_runs", {"run_id": "00000000"})
            assert missing.is_error and "no stored run has the id" in missing.structured_content["error"]
            bad = await client.call_tool("explain", {"topic": "astrology"})
            assert bad.is_error and "topic" in bad.structured_content["error"]
            unknown = await client.call_tool("deploy", {})
            assert unknown.is_error and "there is no tool named 'deploy'" in unknown.structured_content["error"]

    run(session)


def test_without_elicitation_a_gated_call_waits_for_the_person_and_then_runs_once(server, one_run, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()

    async def session():
        async with Client(server) as client:
            asked = await client.call_tool("share_results", {"destination": str(outside)})
            assert not asked.is_error and asked.structured_content["status"] == "approval_required"
            approval_id = asked.structured_content["approval_id"]
            assert list(outside.iterdir()) == []
            with Store() as store:  # the person approves at their terminal (`specpilot tool approve`)
                store.decide_approval(approval_id, True, by="test person")
            done = await client.call_tool("share_results", {"destination": str(outside), "approval_id": approval_id})
            assert not done.is_error and done.structured_content["status"] == "shared"
            again = await client.call_tool("share_results", {"destination": str(outside), "approval_id": approval_id})
            assert again.is_error and "already used" in again.structured_content["error"]

    run(session)
    assert len(list(outside.iterdir())) == 1


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # 2026-07-28 InputRequiredResult, and elicitation/create
def test_clients_with_elicitation_are_asked_directly(server, one_run, tmp_path, mode):
    """The person refuses the first call and approves the second, both asked on one connection (each
    call is its own elicitation; a second server start would only add seconds of importing torch)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    person = Person(answers=[False, True])

    async def session():
        async with Client(server, elicitation_callback=person, mode=mode) as client:
            refused = await client.call_tool("share_results", {"destination": str(outside)})
            assert refused.is_error is True, refused.structured_content
            assert "did not approve" in refused.structured_content["error"] and list(outside.iterdir()) == []
            approved = await client.call_tool("share_results", {"destination": str(outside)})
            assert approved.is_error is False, approved.structured_content

    run(session)
    assert len(list(outside.iterdir())) == 1
    assert len(person.messages) == 2 and all(f"copy into {outside}" in m for m in person.messages)
    with Store() as store:
        statuses = sorted((a["status"], a["decided_by"]) for a in store.list_approvals())
    assert statuses == [("consumed", "user via MCP client elicitation"), ("denied", "user via MCP client elicitation")]
