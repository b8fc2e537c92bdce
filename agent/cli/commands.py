"""The agent's commands: ``chat``, ``tool`` (the JSON CLI), ``approvals``, ``mcp`` and ``skill install``.

``specpilot tool list`` and ``specpilot tool NAME --input JSON`` print one JSON object on stdout and
nothing else (logs go to stderr). ``specpilot tool approve ID`` / ``deny ID`` (or ``--id ID``) are
for the person: approving shows the exact command on the controlling terminal and needs the typed
confirmation naming it; ``deny ID`` also withdraws an approved one that has not run yet, as
``specpilot approvals revoke ID`` does (neither needs a terminal: they can only stop an action).
``specpilot tool pending`` lists approvals waiting for a decision; ``specpilot approvals list
[--json]`` is the audit trail of every approval.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys

from agent import ask, chat
from agent.approval import decide_at_terminal, withdraw
from agent.brains import BRAINS
from agent.loop import host_call
from agent.skill_install import install_skill
from memory import Store
from memory.approvals import APPROVAL_STATUSES
from tools.agent_tools.registry import describe_tools
from tools.errors import SpecpilotError

APPROVAL_COMMANDS = ("approve", "deny")
BRAIN_CHOICES = BRAINS
BRAIN_HELP = ("auto: Claude when ANTHROPIC_API_KEY is set, else the local model when it is fetched, else commands "
              "only (offline); local (= model): heads learned from labelled requests and the local model; offline: "
              "slash commands only, no model")
EXIT_OK, EXIT_TOOL_ERROR, EXIT_USAGE = 0, 1, 2


def print_json(value) -> None:
    """Write one JSON object to stdout (the only thing the JSON CLI prints there)."""
    sys.stdout.write(json.dumps(value, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def _conversation():
    """The conversation modules (agent.chat, agent.ask)."""
    return chat, ask


def cmd_chat(args) -> int:
    """``specpilot chat``: the terminal conversation."""
    chat, _ = _conversation()
    return chat.run_chat(brain=args.brain, skip_onboarding=getattr(args, "skip_onboarding", False))


def cmd_ask(args) -> int:
    """``specpilot ask TEXT``: one turn, non-interactive (agent.ask)."""
    _, ask = _conversation()
    return ask.run_ask(args.text, brain=args.brain, plan_only=args.plan_only, as_json=args.json)


def add_ask_arguments(p) -> None:
    """The arguments of ``specpilot ask`` (registered in agent.cli.main)."""
    p.add_argument("text", help="the message, e.g. \"what did we do last time?\"")
    p.add_argument("--brain", choices=BRAIN_CHOICES, default="auto", help=BRAIN_HELP)
    p.add_argument("--plan-only", action="store_true",
                   help="run only read-only tools; list the others (model loads, writes, gated) as not executed")
    p.add_argument("--json", action="store_true", help='one JSON object: {"reply", "tool_calls", "task"}')
    p.set_defaults(func=cmd_ask)


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
    approval_id = args.id or args.approval_id
    if not approval_id:
        return {"error": f"give the approval id: specpilot tool {args.name} ID (or --id ID)"}, EXIT_USAGE
    with Store() as store:
        row = decide_at_terminal(store, approval_id, approve=args.name == "approve")  # asks on /dev/tty
    return {"approval_id": row["id"], "status": row["status"], "action": row["action"],
            "decided_by": row["decided_by"], "decided_at": row["decided_at"]}, EXIT_OK


def _call(args) -> tuple[dict, int]:
    extra = args.approval_id
    if extra is not None:  # `specpilot tool NAME '{...}'`: the input given without --input
        if args.input is not None or not extra.lstrip().startswith("{"):
            return {"error": f"unexpected argument {extra!r} after the tool name: give the tool's input as "
                             f"`specpilot tool {args.name} --input JSON`"}, EXIT_USAGE
        args.input = extra
    raw = args.input if args.input is not None else "{}"
    with Store() as store:
        result = host_call(store, args.name, raw)
    return result.content, (EXIT_TOOL_ERROR if result.is_error else EXIT_OK)


APPROVAL_COLUMNS = ("id", "tool", "action", "input", "status", "decided_by", "decided_at", "created_at",
                    "consumed_at", "expires_at", "will_run")


def approval_entry(row: dict) -> dict:
    """One approval as the audit trail shows it: the tool, its exact input, status, who decided and when."""
    arguments = row.get("arguments") or {}
    tool_name = arguments.get("tool") if isinstance(arguments, dict) else None
    exact = arguments.get("input", arguments) if isinstance(arguments, dict) and tool_name else arguments
    entry = {**row, "tool": tool_name or row.get("action"), "input": exact, "will_run": row.get("reason")}
    return {key: entry.get(key) for key in APPROVAL_COLUMNS}


def cmd_approvals_list(args) -> int:
    """``specpilot approvals list [--json]``: every approval, newest first."""
    with Store() as store:
        rows = [approval_entry(r) for r in store.list_approvals(status=args.status)]
    if args.json:
        print_json({"approvals": rows})
        return EXIT_OK
    if not rows:
        print("no approvals recorded" + (f" with status {args.status}" if args.status else ""))
        return EXIT_OK
    from rich.console import Console
    from rich.table import Table

    table = Table(title="approvals (newest first)")
    for column in ("id", "tool", "input", "status", "decided_by", "decided_at", "created_at"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(*(_cell(r[c]) for c in ("id", "tool", "input", "status", "decided_by", "decided_at",
                                               "created_at")))
    Console(highlight=False, width=None if sys.stdout.isatty() else 240).print(table)
    return EXIT_OK


def _cell(value) -> str:
    if value is None:
        return "-"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def cmd_approvals_revoke(args) -> int:
    """``specpilot approvals revoke ID``: withdraw an approval that has not run (pending: denied; approved:
    revoked); prints the row as JSON."""
    with Store() as store:
        row = withdraw(store, args.id, sys.stderr)
    print_json({"approval_id": row["id"], "status": row["status"], "action": row["action"],
                "decided_by": row["decided_by"], "decided_at": row["decided_at"]})
    return EXIT_OK


def cmd_mcp(args) -> int:
    """``specpilot mcp``: serve the tools over MCP on stdio."""
    # the MCP SDK takes about a second to import: only `specpilot mcp` pays for it
    from agent.mcp_server import serve

    return serve()  # 0 when the client closed the connection, 128 + the signal's number when one stopped it


def cmd_skill_install(args) -> int:
    """``specpilot skill install [--dir DIR]``: write the skill folder for an agent host."""
    folder = install_skill(args.dir)
    print(f"specpilot skill written to {folder}")
    return EXIT_OK


def add_agent_commands(subparsers) -> None:
    """Register chat, tool, approvals, mcp and skill on the ``specpilot`` command's subparsers."""
    p = subparsers.add_parser("chat", help="talk to specpilot in the terminal")
    p.add_argument("--brain", choices=BRAIN_CHOICES, default="auto", help=BRAIN_HELP)
    p.add_argument("--skip-onboarding", action="store_true", help="do not ask the first-run questions this time")
    p.set_defaults(func=cmd_chat)

    p = subparsers.add_parser("tool", help="call one tool with JSON input (prints JSON only)",
                              description="specpilot tool list | specpilot tool NAME --input JSON | "
                                          "specpilot tool pending | specpilot tool approve|deny ID")
    p.add_argument("name", help="a tool name, or list / pending / approve / deny")
    p.add_argument("approval_id", nargs="?", default=None, metavar="ID", help="the approval id (approve / deny)")
    p.add_argument("--input", default=None, help="the tool's input as a JSON object")
    p.add_argument("--id", default=None, help="the approval id (approve / deny), as --id ID")
    p.set_defaults(func=cmd_tool)

    p = subparsers.add_parser("approvals", help="the audit trail: every approval, its status, who decided and when")
    asub = p.add_subparsers(dest="approvals_command", required=True)
    a = asub.add_parser("list", help="every approval: id, tool, exact input, status, decided_by, decided_at")
    a.add_argument("--status", default=None, choices=APPROVAL_STATUSES, help="only approvals with this status")
    a.add_argument("--json", action="store_true", help="one JSON object on stdout")
    a.set_defaults(func=cmd_approvals_list)
    a = asub.add_parser("revoke", help="withdraw an approval that has not run yet (approved or pending)")
    a.add_argument("id", help="the approval id")
    a.set_defaults(func=cmd_approvals_revoke)

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
