"""The agent's commands: ``chat``, ``tool`` (the JSON CLI), ``mcp`` and ``skill install``.

``specpilot tool list`` and ``specpilot tool NAME --input JSON`` print one JSON object on stdout and
nothing else (logs go to stderr). ``specpilot tool approve --id ID`` / ``deny --id ID`` are for the
person: approving insists on an interactive terminal. ``specpilot tool pending`` lists approvals
waiting for a decision.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys

from agent.approval import decide_at_terminal
from agent.skill_install import install_skill
from memory import Store
from tools.agent_tools.registry import describe_tools
from tools.errors import SpecpilotError

APPROVAL_COMMANDS = ("approve", "deny")
EXIT_OK, EXIT_TOOL_ERROR, EXIT_USAGE = 0, 1, 2


def print_json(value) -> None:
    """Write one JSON object to stdout (the only thing the JSON CLI prints there)."""
    sys.stdout.write(json.dumps(value, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def cmd_chat(args) -> int:
    """``specpilot chat``: the terminal conversation."""
    # the chat loads the tools, hence torch: imported when the command runs
    from agent.chat import run_chat

    return run_chat(brain=args.brain)


def cmd_tool(args) -> int:
    """``specpilot tool ...``: list tools, call one with JSON input, or decide an approval."""
    try:
        with contextlib.redirect_stdout(sys.stderr):  # stray prints from libraries must not corrupt the JSON
            if args.name == "list":
                value, code = {"tools": describe_tools()}, EXIT_OK
            elif args.name == "pending":
                with Store() as store:
                    value, code = {"approvals": store.list_approvals(status="pending")}, EXIT_OK
            elif args.name in APPROVAL_COMMANDS:
                value, code = _decide(args)
            else:
                value, code = _call(args)
    except SpecpilotError as exc:
        value, code = {"error": exc.user_message()}, EXIT_USAGE
    print_json(value)
    return code


def _decide(args) -> tuple[dict, int]:
    if not args.id:
        return {"error": f"give the approval id: specpilot tool {args.name} --id ID"}, EXIT_USAGE
    with Store() as store:
        row = decide_at_terminal(store, args.id, approve=args.name == "approve", stdin=sys.stdin,
                                 stdout=sys.__stderr__)
    return {"approval_id": row["id"], "status": row["status"], "action": row["action"],
            "decided_by": row["decided_by"], "decided_at": row["decided_at"]}, EXIT_OK


def _call(args) -> tuple[dict, int]:
    # the loop imports the tools, which load torch: imported when a tool is called
    from agent.loop import host_call

    raw = args.input if args.input is not None else "{}"
    with Store() as store:
        result = host_call(store, args.name, raw)
    return result.content, (EXIT_TOOL_ERROR if result.is_error else EXIT_OK)


def cmd_mcp(args) -> int:
    """``specpilot mcp``: serve the tools over MCP on stdio."""
    # the server imports the loop, hence torch: imported when the command runs
    from agent.mcp_server import serve

    serve()
    return EXIT_OK


def cmd_skill_install(args) -> int:
    """``specpilot skill install [--dir DIR]``: write the skill folder for an agent host."""
    folder = install_skill(args.dir)
    print(f"specpilot skill written to {folder}")
    return EXIT_OK


def add_agent_commands(subparsers) -> None:
    """Register chat, tool, mcp and skill on the ``specpilot`` command's subparsers."""
    p = subparsers.add_parser("chat", help="talk to specpilot in the terminal")
    p.add_argument("--brain", choices=["auto", "anthropic", "offline"], default="auto",
                   help="auto: Claude when ANTHROPIC_API_KEY is set, else the offline planner")
    p.set_defaults(func=cmd_chat)

    p = subparsers.add_parser("tool", help="call one tool with JSON input (prints JSON only)",
                              description="specpilot tool list | specpilot tool NAME --input JSON | "
                                          "specpilot tool pending | specpilot tool approve|deny --id ID")
    p.add_argument("name", help="a tool name, or list / pending / approve / deny")
    p.add_argument("--input", default=None, help="the tool's input as a JSON object")
    p.add_argument("--id", default=None, help="the approval id (approve / deny)")
    p.set_defaults(func=cmd_tool)

    p = subparsers.add_parser("mcp", help="serve specpilot's tools over MCP (stdio)")
    p.set_defaults(func=cmd_mcp)

    p = subparsers.add_parser("skill", help="agent-host skill files")
    ssub = p.add_subparsers(dest="skill_command", required=True)
    s = ssub.add_parser("install", help="write the skill folder (SKILL.md and its texts)")
    s.add_argument("--dir", default=None, help="skills folder to write into (default ~/.claude/skills)")
    s.set_defaults(func=cmd_skill_install)


def main(argv: list[str] | None = None) -> int:
    """Run the agent commands alone (``python -m agent.cli.commands ...``); ``specpilot`` includes them too."""
    parser = argparse.ArgumentParser(prog="specpilot")
    add_agent_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        return int(args.func(args) or 0)
    except SpecpilotError as exc:
        print(f"error: {exc.user_message()}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
