"""``specpilot peers setup NAME`` and ``specpilot peers status``: the upstream reference packages
(medusa-llm, lade) in virtual environments of their own, and llama.cpp's own speculative modes
(llama-server built from the llama-cpp-python sdist), timed beside ours with ``--peers``.

Setting one up installs packages, so it goes through the same gate as the agent's install tool
(agent.approval): the exact commands are shown, the person approves them on the controlling terminal
by typing ``install NAME``; with no terminal the approval stays pending, to be given with
``specpilot tool approve ID`` and used with ``--approval-id ID``.
"""

from __future__ import annotations

import json
import shlex
import sys

from agent.approval import approve_command
from agent.render import err, out
from memory import Store
from tools.bench import llamacpp_server, upstream, vllm_server

INSTALL_ACTION = "install"
SETUP_COMMAND = "specpilot peers setup"


PEER_NAMES = [*llamacpp_server.PEER_NAMES, vllm_server.NAME]


def peer_status(name: str) -> dict:
    return vllm_server.status() if name == vllm_server.NAME else llamacpp_server.peer_status(name)


def setup_commands(name: str) -> list[list[str]]:
    if name == vllm_server.NAME:
        return vllm_server.setup_commands()
    return llamacpp_server.setup_commands() if name == llamacpp_server.NAME else upstream.setup_commands(name)


def cmd_peers_setup(args) -> int:
    own = (llamacpp_server.NAME, vllm_server.NAME)
    name = args.name if args.name in own else upstream.peer(args.name).name  # unknown: refused first
    commands = setup_commands(name)
    what = (f"{SETUP_COMMAND} {name}: creates {upstream.peers_dir() / name} and runs\n  "
            + "\n  ".join(shlex.join(c) for c in commands))
    with Store() as store:
        approval = approve_command(store, INSTALL_ACTION, {"tool": SETUP_COMMAND, "input": {"peer": name, "packages": [name]}}, what,
                                   approval_id=args.approval_id)
    print(f"(approved: approval {approval['id']}, by {approval['decided_by']})", file=sys.stderr)
    if name == vllm_server.NAME:
        result = vllm_server.setup(progress=lambda m: err.print(m))
    elif name == llamacpp_server.NAME:
        result = llamacpp_server.setup(progress=lambda m: err.print(m))
    else:
        result = upstream.setup(name, progress=lambda m: err.print(m))
    if args.json:
        print(json.dumps(result))
    elif name == vllm_server.NAME:
        out.print(f"vLLM is ready on {result['device']} ({', '.join(f'{k} {v}' for k, v in result['versions'].items())}). "
                  "`--backend vllm` now measures its speculative modes: e.g. `specpilot bench --backend vllm "
                  "--methods ngram --concurrency 1,4,16`.")
    elif name == llamacpp_server.NAME:
        out.print(f"llama-server is built ({', '.join(f'{k} {v}' for k, v in result['versions'].items())}). "
                  "`--peers --backend llamacpp` now times llama.cpp's plain, draft-simple and n-gram modes beside ours.")
    else:
        out.print(f"{name} is ready: {', '.join(f'{k} {v}' for k, v in result['versions'].items())}. "
                  f"`--peers` now times it beside specpilot's {result['for_method']} on Llama targets "
                  f"(e.g. --target smollm2-135m-instruct).")
    return 0


def cmd_peers_status(args) -> int:
    rows = [peer_status(name) for name in PEER_NAMES]
    if args.json:
        print(json.dumps(rows))
        return 0
    for row in rows:
        state = "ready (" + ", ".join(f"{k} {v}" for k, v in row["versions"].items()) + ")" if row["ready"] else row["reason"]
        out.print(f"{row['peer']}: {row['what']}; beside our {row['for_method']}: {state}")
    return 0


def add_peers_commands(sub) -> None:
    p = sub.add_parser("peers", help="the upstream reference packages (medusa-llm, lade), llama.cpp's own modes and vLLM")
    psub = p.add_subparsers(dest="peers_command", required=True)
    s = psub.add_parser("setup", help="create a peer's venv and install it (vllm: vLLM's own venv), or build "
                                            "llama-server (asks for approval)")
    s.add_argument("name", choices=PEER_NAMES)
    s.add_argument("--approval-id", default=None,
                   help="an approval a person gave with `specpilot tool approve ID` for exactly this setup")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_peers_setup)
    t = psub.add_parser("status", help="which upstream peers are set up, with their versions")
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=cmd_peers_status)
