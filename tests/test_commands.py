"""Tool commands typed in the chat (agent.commands): parsed from the tools' schemas, validated by their models."""

from __future__ import annotations

import pytest

from agent.commands import parse_command, tool_command
from tools.agent_tools import registry
from tools.errors import ParameterError

TOOLS = registry.load_tools()


def parsed(text: str) -> tuple[str, dict]:
    name = tool_command(text, TOOLS)
    assert name is not None, text
    return name, parse_command(text, TOOLS[name])


def test_every_registry_tool_is_a_command_by_its_own_name_and_with_dashes():
    for name in TOOLS:
        assert tool_command(f"/{name}", TOOLS) == name
        assert tool_command(f"/{name.replace('_', '-')} x=1", TOOLS) == name
    assert tool_command("/tmp/report.md", TOOLS) is None
    assert tool_command("run draft please", TOOLS) is None


def test_key_value_flags_and_bare_values_follow_the_schema():
    name, args = parsed('/run_method draft prompt="Write a haiku" --max-new-tokens 64 --temperature=0.5')
    assert name == "run_method"
    assert args == {"method": "draft", "prompt": "Write a haiku", "max_new_tokens": 64, "temperature": 0.5}


def test_a_key_the_tool_lacks_goes_into_the_methods_params():
    _, args = parsed('/run_method lookahead prompt=hi window=8 params.guess=3')
    assert args["params"] == {"window": 8, "guess": 3}


def test_lists_booleans_and_enum_valued_bare_words():
    _, args = parsed('/compare_methods draft ngram --prompt "two words"')
    assert args == {"prompt": "two words", "methods": ["draft", "ngram"]}
    _, args = parsed("/compare_methods prompt=x methods=draft,lookahead")
    assert args["methods"] == ["draft", "lookahead"]
    _, args = parsed("/recall --include-done-tasks")
    assert args == {"include_done_tasks": True}
    _, args = parsed("/recall include_done_tasks=no")
    assert args == {"include_done_tasks": False}


@pytest.mark.parametrize("text, says", [
    ('/run_method draft "unclosed', "quotes"),
    ("/lookup_runs limit=many", "number"),
    ("/recall include_done_tasks=maybe", "true or false"),
    ("/run_method nonsense prompt=x", "method"),
    ("/explain medusa extra words", "does not know"),
    ("/run_method draft prompt=x --max-new-tokens", "needs a value"),
    ("/run_method warp prompt=hi", "'warp' is not a method: one of baseline, draft, medusa, lookahead, eagle, ngram"),
    ("/explain warp", "'warp' is not a topic: one of draft, medusa"),
    ("/save_params warp params.k=6", "'warp' is not a method: one of baseline, draft"),
    ("/lookup_runs warp", "'warp' is not a method: one of baseline, draft"),  # an optional field that lists values
    ("/check_deps warp", "'warp' is not a method: one of all, baseline"),
    ("/write_report foo", "'foo' is not a format: one of markdown, json"),
    ("/train_medusa foo", "'foo' is not a value /train_medusa takes: labels (self | text), dtype (auto"),
])
def test_what_does_not_parse_or_validate_says_what_to_change(text, says):
    name = tool_command(text, TOOLS)
    with pytest.raises(ParameterError) as err:
        parse_command(text, TOOLS[name])
    assert says in err.value.user_message() and "Input should be" not in err.value.user_message()


def test_the_chat_runs_a_tool_command_without_any_model():
    from agent.brains.offline import OfflineBrain
    from agent.loop import Session
    from memory import Store

    with Store() as store:
        _chat_commands(Session(store, OfflineBrain()))


def _chat_commands(session):
    reply = session.handle("/check-deps ngram")
    assert "ngram" in reply.text and reply.not_done is None
    bad = session.handle("/lookup_runs limit=many")
    assert "number" in bad.text and bad.not_done
    assert session.handle("/explain topic=medusa detail=full").text.startswith("# Medusa")


def test_chat_shortcuts_read_leading_options_and_keep_the_prompt_whole():
    from agent.commands import read_arguments
    from tools.agent_tools.registry import load_tools

    tools = load_tools()
    run, install = tools["run_method"], tools["install_packages"]
    assert read_arguments("draft k=4 Write a haiku about autumn's leaves", run, "prompt") == {
        "method": "draft", "params": {"k": 4}, "prompt": "Write a haiku about autumn's leaves"}
    assert read_arguments("draft 'Twas the night before", run, "prompt")["prompt"] == "'Twas the night before"
    assert read_arguments("draft --no-chat Write a haiku", run, "prompt") == {
        "method": "draft", "chat": False, "prompt": "Write a haiku"}
    assert read_arguments('draft "Write a haiku" k=4', run, "prompt") == {
        "method": "draft", "prompt": "Write a haiku", "params": {"k": 4}}
    assert read_arguments("draft 'autumn's leaves'", run, "prompt")["prompt"] == "autumn's leaves"
    assert read_arguments("numpy==1.26 lade", install) == {"packages": ["numpy==1.26", "lade"]}


def test_a_required_choice_takes_the_bare_word_its_schema_allows_and_words_left_over_are_named():
    assert parsed("/explain medusa")[1]["topic"] == "medusa"
    with pytest.raises(ParameterError) as err:
        parsed("/explain how medusa works")
    assert "'how works'" in err.value.user_message()
    assert "topic (draft | medusa" in err.value.user_message()  # the values it takes are listed


def test_a_field_that_lists_its_values_takes_its_word_whatever_the_order_of_the_required_fields():
    from agent.commands import _fill_required

    properties = {"name": {"type": "string"}, "topic": {"enum": ["draft", "medusa"], "type": "string"}}
    arguments: dict = {}
    _fill_required(arguments, properties, ["name", "topic"], ["medusa", "foo"], TOOLS["explain"])
    assert arguments == {"topic": "medusa", "name": "foo"}


def test_the_chat_commands_say_which_bare_word_is_not_a_value():
    from agent.ask import ask
    from memory import Store

    with Store() as store:
        for text, says in (("/runs warp", "'warp' is not a method: one of baseline, draft"),
                           ("/deps warp", "'warp' is not a method: one of all, baseline"),
                           ("/save warp k=6", "'warp' is not a method: one of baseline, draft"),
                           ("/explain warp", "'warp' is not a topic: one of draft, medusa")):
            reply = ask(store, text, brain="offline")["reply"]
            assert reply.startswith(says) and "what to do:" in reply, reply
        guide = ask(store, "/guide foo", brain="offline")["reply"]  # a kind of work the guide does not know: said
        assert guide.startswith("'foo' is not a method (draft, medusa, lookahead, eagle, ngram) nor a kind of work I "
                                "know (coding, ") and "over every kind of request: " in guide
        worded = ask(store, "/guide writing poems", brain="offline")["reply"]
        assert worded.startswith("For writing: ")
        assert ask(store, "/guide zzz qqq", brain="offline")["reply"].startswith("'zzz qqq' names no kind of work")
