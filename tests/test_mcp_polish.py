"""MCP polish (issue 12, item 8): progress notifications while a long tool runs, input schemas that
describe every field (built-in model names as examples, dtype as an enum, each method's params), the
package version in serverInfo, and results without token lists unless the call asks for them.

The protocol check starts the real server (`python -m agent.mcp_server`) and speaks to it over stdio
with the official MCP client (initialize handshake), on a tiny model folder: a real measured run and
a compare, a few seconds; nothing is downloaded. The other checks load no model."""

from __future__ import annotations

import json
import os
import sys
from importlib import metadata
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters

from agent.mcp_server import (INCLUDE_TOKENS, TOKEN_KEYS, TOKEN_TOOLS, pop_include_tokens, shape_result,
                              tool_schema)
from memory import Store
from tools.agent_tools import registry
from tools.agent_tools.registry import PARAM_EXAMPLES, ToolResult
from tools.engine.params import METHODS, PARAM_MODELS, parse_params
from tools.errors import ParameterError
from tools.models import BUILTIN_MODELS, DTYPES, SELF_DRAFT

ROOT = Path(__file__).resolve().parents[1]
VERSION = metadata.version("specpilot")
TINY_PROMPT = "def return the a of to in"  # words of the tiny model's vocabulary (conftest)


def published() -> dict[str, dict]:
    return {name: tool_schema(t) for name, t in registry.load_tools().items()}


def undescribed(schema: dict, where: str) -> list[str]:
    """Every property (at any depth: params' fields, compare's per-method objects) with no description."""
    missing = []
    for name, prop in schema.get("properties", {}).items():
        if not prop.get("description"):
            missing.append(f"{where}.{name}")
        missing += undescribed(prop, f"{where}.{name}")
    return missing


def enum_of(prop: dict) -> list:
    return next((b["enum"] for b in [prop, *prop.get("anyOf", ())] if "enum" in b), [])


# ---- the published schemas ----------------------------------------------------------------------

def test_every_field_of_every_tool_is_described():
    missing = [m for name, schema in published().items() for m in undescribed(schema, name)]
    assert missing == []


def test_schemas_only_add_documentation_no_field_is_renamed_or_dropped():
    for name, tool_ in registry.load_tools().items():
        schema, raw = tool_schema(tool_), tool_.input_model.model_json_schema()
        assert set(raw["properties"]) <= set(schema["properties"]), name
        assert schema.get("required", []) == raw.get("required", []), name
        assert "$ref" not in json.dumps(schema), name  # every part inline: hosts need not resolve references
        for field, prop in raw["properties"].items():  # types, defaults and bounds are pydantic's own
            kept = {k: v for k, v in prop.items() if k not in ("description", "properties", "examples")}
            assert {k: schema["properties"][field][k] for k in kept} == kept, (name, field)


def test_model_fields_list_the_built_in_models_and_dtype_is_an_enum():
    seen = {"target": 0, "draft": 0, "dtype": 0}
    for name, schema in published().items():
        props = schema["properties"]
        for field in ("target", "draft"):
            if field in props:
                takes_self = SELF_DRAFT in props[field]["description"]  # the draft of run and compare
                assert props[field]["examples"] == [*BUILTIN_MODELS, *[SELF_DRAFT][:takes_self]], (name, field)
                seen[field] += 1
        if "dtype" in props:
            assert enum_of(props["dtype"]) == list(DTYPES), name
            seen["dtype"] += 1
    assert seen["target"] >= 5 and seen["draft"] >= 2 and seen["dtype"] >= 4  # run, compare, guidance, ...
    saved = published()["save_params"]["properties"]["params"]["properties"]  # run settings saved in params
    assert saved["target"]["examples"] == list(BUILTIN_MODELS) and saved["dtype"]["enum"] == list(DTYPES)


def test_each_methods_params_are_documented_and_k_goes_inside_params():
    schemas = published()
    run_params = schemas["run_method"]["properties"]["params"]
    owner: dict[str, str] = {}
    for method, model in PARAM_MODELS.items():
        for field, prop in model.model_json_schema().get("properties", {}).items():
            documented = run_params["properties"][field]
            assert f"{method}: {prop['description']}" in documented["description"]
            if owner.setdefault(field, method) == method:  # the schema of the first method that has the field
                assert {k: v for k, v in documented.items() if k != "description"} == \
                    {k: v for k, v in prop.items() if k != "description"}
        assert f"{method}: " in run_params["description"]
    assert "k" in run_params["properties"] and "k" not in schemas["run_method"]["properties"]
    assert run_params["additionalProperties"] is True  # still an open object: every call accepted before is
    assert run_params["type"] == "object"  # accepted now (the method's own model checks the keys)
    per_method = schemas["compare_methods"]["properties"]["params"]["properties"]
    assert list(per_method) == list(METHODS)
    assert set(per_method["draft"]["properties"]) == set(PARAM_MODELS["draft"].model_fields)
    assert per_method["lookahead"]["properties"]["window"]["description"]


def test_the_params_examples_are_valid_parameters():
    for method, example in PARAM_EXAMPLES.items():
        parse_params(method, example)  # raises ParameterError when an example is wrong
    assert {"draft", "medusa", "lookahead", "ngram"} <= set(PARAM_EXAMPLES) <= set(METHODS)


def test_include_tokens_is_offered_only_where_results_name_stored_runs():
    for name, schema in published().items():
        prop = schema["properties"].get(INCLUDE_TOKENS)
        if name in TOKEN_TOOLS:
            assert prop["type"] == "boolean" and prop["default"] is False and prop["description"]
        else:
            assert prop is None, name
    # the registry's own schema (Anthropic brain, JSON CLI) does not offer it: only this server handles it
    assert INCLUDE_TOKENS not in registry.get_tool("run_method").input_schema()["properties"]


# ---- results without token lists -------------------------------------------------------------------

def stored_run() -> str:
    with Store() as store:
        return store.add_run({"method": "ngram", "target": "t", "prompt": "p", "speedup": 1.5,
                              "prompt_ids": [1, 2, 3], "output_ids": [4, 5], "baseline_output_ids": [4, 5],
                              "drafted_by_position": [2, 1], "accepted_by_position": [1, 0],
                              "hardware": {"name": "Test CPU"}})


def test_token_lists_are_left_out_at_any_depth_unless_asked(specpilot_home):
    run_id = stored_run()
    content = {"run_id": run_id, "output_ids": [4, 5], "run_ids": [run_id], "times": [0.1],
               "rows": [{"run_id": run_id, "baseline_output_ids": [4, 5], "speedup": 1.5}]}
    with Store() as store:
        slim = shape_result(store, ToolResult("run_method", content), include_tokens=False).content
        full = shape_result(store, ToolResult("run_method", content), include_tokens=True).content
        error = ToolResult.error("run_method", "x", output_ids=[1])
        assert shape_result(store, error, include_tokens=False) is error
    assert not set(TOKEN_KEYS) & (set(slim) | set(slim["rows"][0]))
    assert slim["run_ids"] == [run_id] and slim["times"] == [0.1] and slim["rows"][0]["speedup"] == 1.5
    assert "baseline_output_ids, output_ids" in slim["tokens_omitted"]
    for part in (full, full["rows"][0]):
        assert part["prompt_ids"] == [1, 2, 3] and part["output_ids"] == [4, 5]
        assert part["drafted_by_position"] == [2, 1] and part["accepted_by_position"] == [1, 0]
    assert "tokens_omitted" not in full


def test_include_tokens_must_be_a_boolean_and_is_taken_out_of_the_arguments():
    arguments = {"method": "draft", INCLUDE_TOKENS: True}
    assert pop_include_tokens("run_method", arguments) is True and arguments == {"method": "draft"}
    assert pop_include_tokens("run_method", {INCLUDE_TOKENS: None}) is False
    with pytest.raises(ParameterError, match="include_tokens must be true or false"):
        pop_include_tokens("lookup_runs", {INCLUDE_TOKENS: "yes"})
    other = {"topic": "draft", INCLUDE_TOKENS: True}  # a tool that takes no include_tokens keeps it (and refuses it)
    assert pop_include_tokens("explain", other) is False and INCLUDE_TOKENS in other


# ---- the real server, through the official client ---------------------------------------------------

def server_params(home: Path) -> StdioServerParameters:
    env = {"SPECPILOT_HOME": str(home), "PATH": os.environ.get("PATH", ""), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(ROOT)}
    return StdioServerParameters(command=sys.executable, args=["-m", "agent.mcp_server"], env=env, cwd=str(ROOT))


def test_a_client_session_gets_version_schemas_progress_and_tokens_on_request(specpilot_home, tiny_model_dir):
    """One session on a tiny model folder: serverInfo's version, the published schemas, progress
    notifications during a real run and a compare (none for a call without a progressToken), token
    lists only with include_tokens."""
    run = {"method": "ngram", "prompt": TINY_PROMPT, "target": str(tiny_model_dir), "max_new_tokens": 6,
           "repeats": 1, "warmup": 0}
    seen: dict = {}

    async def on_message(message):  # every notification the session receives (progress ones too)
        if isinstance(message, types.ProgressNotification):
            seen.setdefault("notified", []).append(message.params)

    async def session():
        async with Client(server_params(specpilot_home), mode="legacy", message_handler=on_message) as client:
            seen["version"] = client.server_info.version  # from the initialize result
            listed = (await client.list_tools()).tools
            seen["schemas"] = {t.name: t.input_schema for t in listed}
            progress: list = []

            async def on_progress(value, total, message):
                progress.append((value, total, message))

            seen["run"] = (await client.call_tool("run_method", run, progress_callback=on_progress)).structured_content
            seen["progress"] = list(progress)
            run_id = seen["run"]["run_id"]
            seen["lookup"] = (await client.call_tool("lookup_runs", {"run_id": run_id, INCLUDE_TOKENS: True}))
            seen["bad"] = await client.call_tool("lookup_runs", {"run_id": run_id, INCLUDE_TOKENS: "yes"})
            seen["quiet"] = await client.call_tool("run_method", {**run, "method": "baseline"})  # no token
            seen["elsewhere"] = await client.call_tool("explain", {"topic": "draft", INCLUDE_TOKENS: True})
            progress.clear()
            seen["compare"] = await client.call_tool(
                "compare_methods", {**{k: v for k, v in run.items() if k != "method"}, "methods": ["ngram"],
                                    INCLUDE_TOKENS: True}, progress_callback=on_progress)
            seen["compare_progress"] = list(progress)

    anyio.run(session)
    assert seen["version"] == VERSION
    assert seen["schemas"] == published()
    values = [p[0] for p in seen["progress"]]
    assert values == sorted(set(values)) and len(values) >= 4  # increasing, one per line the tool reported
    messages = " | ".join(p[2] for p in seen["progress"])
    assert "running run_method" in messages and f"loading target {tiny_model_dir}" in messages
    assert "baseline: repeat 1/1" in messages and "ngram: repeat 1/1" in messages
    result = seen["run"]
    assert result["speedup"] > 0 and result["matches_baseline"] is True
    assert not set(TOKEN_KEYS) & set(result) and "tokens_omitted" in result  # figures kept, token lists not
    [found] = seen["lookup"].structured_content["runs"]
    with Store() as store:
        stored = store.get_run(result["run_id"])
    assert found["output_ids"] == stored["output_ids"] and len(found["output_ids"]) == result["new_tokens"] > 0
    assert found["prompt_ids"] == stored["prompt_ids"] and found["speedup"] == result["speedup"]
    assert seen["bad"].is_error and "include_tokens must be true or false" in seen["bad"].structured_content["error"]
    assert seen["elsewhere"].is_error and "include_tokens" in seen["elsewhere"].structured_content["error"]
    compare = seen["compare"].structured_content
    assert not seen["compare"].is_error, compare
    [row] = compare["rows"]
    assert row["method"] == "ngram" and row["output_ids"] == found["output_ids"] and row["prompt_ids"]
    assert any("stored as run" in p[2] for p in seen["compare_progress"])
    # the notifications the session saw are those of the calls with a progressToken, none of the call without
    assert not seen["quiet"].is_error and "tokens_omitted" in seen["quiet"].structured_content
    notified = [p.message for p in seen["notified"]]
    assert "loading target" in " ".join(notified) and not [m for m in notified if "running baseline" in m]
