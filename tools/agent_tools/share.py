"""Reports of stored runs: write one under the user's own specpilot folder (not sharing, no
approval), or share one outside the machine (gated: only after the user approves the destination).

A report file is always a new file: created exclusively (``O_CREAT|O_EXCL|O_NOFOLLOW``) under a name
with a random part, so it never replaces a file, never writes through a symlink planted at its name,
and two reports written in the same second are two files. A share is approved for what it resolves
to when it is asked for: the folder as an absolute path (or the URL, normalised: http or https only),
and the ids of the runs it sends; it sends exactly those, even if newer runs were stored meanwhile.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from memory.migrations import utc_now
from memory.store import home_dir
from tools.errors import ParameterError, SpecpilotError
from tools.agent_tools.lookup import summarise_run
from tools.agent_tools.registry import ToolContext, tool

URL = re.compile(r"https?://[^\s]+")
SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")  # a URL's scheme (file:, ftp:, https:, ...)
URL_SCHEMES = ("http", "https")
SHARE_TIMEOUT_S = 30
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
NAME_TRIES = 20


class ReportInput(BaseModel):
    """Which stored runs go into the report."""

    model_config = ConfigDict(extra="forbid")

    run_ids: list[str] = Field(default_factory=list, max_length=100,
                               description="run ids to include (default: the newest runs)")
    task_id: int | None = Field(None, ge=1, description="include the runs of this task")
    limit: int = Field(10, ge=1, le=100, description="newest runs to include when no ids are given")
    format: Literal["markdown", "json"] = "markdown"


def collect_runs(store, inp: ReportInput) -> list[dict]:
    """The stored runs a report covers (by id, by task, or the newest), as stored."""
    if inp.run_ids:
        return [store.get_run(r) for r in inp.run_ids]
    if inp.task_id is not None:
        return store.list_runs(limit=inp.limit, task_id=inp.task_id)
    return store.list_runs(limit=inp.limit)


def render_report(runs: list[dict], fmt: str) -> str:
    """The report text: figures copied from the stored runs, each with its run id and hardware."""
    rows = [summarise_run(r) for r in runs]
    if fmt == "json":
        return json.dumps({"generated_at": utc_now(), "runs": rows}, indent=2, ensure_ascii=False, default=str)
    lines = ["# specpilot report", "", f"Generated {utc_now()}. Every figure is copied from a stored run.", "",
             "| run | method | target | hardware | speedup | tok/s | baseline tok/s | acceptance | same as baseline |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r["run_id"], r.get("method"), r.get("target"), r.get("hardware"), r.get("speedup", ""),
                 r.get("tokens_per_s", ""), r.get("baseline_tokens_per_s", ""), r.get("acceptance_rate", ""),
                 r.get("matches_baseline", "")]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines += ["", "## Prompts", ""] + [f"- {r['run_id']}: {r['prompt']!r}" for r in rows]
    return "\n".join(lines) + "\n"


def reports_dir() -> Path:
    """The user's own report folder inside the specpilot folder."""
    folder = home_dir() / "reports"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def report_name(runs: list[dict], fmt: str) -> str:
    """A new report file name: the time, the first run's id and a random part (``report-20261205T101500-
    ab12cd34-3f9a1c.md``)."""
    stamp = utc_now()[:19].replace(":", "").replace("-", "")
    return f"report-{stamp}-{runs[0]['run_id']}-{secrets.token_hex(3)}.{'json' if fmt == 'json' else 'md'}"


def create_new_file(folder: Path, runs: list[dict], fmt: str, text: str) -> Path:
    """Write ``text`` to a new file in ``folder`` and return its path. The file is created exclusively,
    relative to the folder opened without following a symlink: an existing file (or a symlink planted at
    the name) is never written through or replaced; a name taken is tried again with another random part."""
    try:
        folder_fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise ParameterError(f"cannot write into {folder}: {exc.strerror or exc}",
                             hint="give an existing folder you can write to (not a symlink to one)") from None
    try:
        for _ in range(NAME_TRIES):
            name = report_name(runs, fmt)
            try:
                fd = os.open(name, NEW_FILE_FLAGS, 0o644, dir_fd=folder_fd)
            except FileExistsError:
                continue
            except OSError as exc:
                raise ParameterError(f"cannot create a report file in {folder}: {exc.strerror or exc}",
                                     hint="give a folder you can write to") from None
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            return folder / name
    finally:
        os.close(folder_fd)
    raise ParameterError(f"could not find a free report file name in {folder}", hint="try again")


@tool("write_report", ReportInput)
def write_report(inp: ReportInput, ctx: ToolContext) -> dict:
    """Write a report of stored runs (Markdown or JSON) into the user's own specpilot reports folder.
    This is not sharing: nothing leaves the machine, so no approval is needed. Each report is a new file."""
    runs = collect_runs(ctx.store, inp)
    if not runs:
        raise ParameterError("there are no stored runs to report", hint="run a method first")
    path = create_new_file(reports_dir(), runs, inp.format, render_report(runs, inp.format))
    return {"status": "written", "path": str(path), "run_ids": [r["run_id"] for r in runs]}


class ShareInput(ReportInput):
    """A report and where to send it outside this machine."""

    destination: str = Field(..., description="an http(s) URL to POST the report to, or a folder outside the "
                                              "specpilot folder (e.g. a network share) to copy it into")
    approval_id: str | None = Field(None, description="the id of an approval the user gave for exactly this share")


def describe_share(inp: ShareInput) -> str:
    """What sharing will send and where (shown to the user before approval)."""
    what = (f"runs {', '.join(inp.run_ids)}" if inp.run_ids else
            f"the runs of task {inp.task_id}" if inp.task_id is not None else f"the newest {inp.limit} runs")
    how = "POST over the network to" if URL.fullmatch(inp.destination) else "copy into"
    return (f"send a {inp.format} report of {what} (prompts, figures, hardware and model names) — {how} "
            f"{inp.destination}")


def resolve_destination(destination: str) -> str:
    """Where a share goes, made concrete: an http(s) URL normalised (scheme and host in lower case), or a
    local folder as an absolute path with symlinks resolved, which must exist and lie outside the specpilot
    folder. ParameterError for anything else (empty, file:, ftp:, a missing folder, the local reports folder)."""
    text = destination.strip()
    if not text:  # Path("") is the current folder: never a destination nobody named
        raise ParameterError("the destination is empty",
                             hint="give an existing folder outside the specpilot folder, or an http(s) URL")
    if SCHEME.match(text) and "://" in text:
        parts = urllib.parse.urlsplit(text)
        if parts.scheme.lower() not in URL_SCHEMES:
            raise ParameterError(f"cannot share to a {parts.scheme}: address ({destination!r})",
                                 hint="give an http(s) URL, or a local folder as a path")
        if not parts.hostname or any(c.isspace() or not c.isprintable() for c in text):
            raise ParameterError(f"{destination!r} is not a usable http(s) URL", hint="e.g. https://example.com/hook")
        netloc = parts.netloc.rsplit("@", 1)
        netloc[-1] = netloc[-1].lower()
        return urllib.parse.urlunsplit((parts.scheme.lower(), "@".join(netloc), parts.path or "/", parts.query, ""))
    folder = Path(text).expanduser()
    try:
        folder = folder.resolve(strict=True)
    except (OSError, RuntimeError):
        raise ParameterError(f"{destination!r} is not an existing folder",
                             hint="give an existing folder (it is shown as an absolute path when you approve) or "
                                  "an http(s) URL") from None
    if not folder.is_dir():
        raise ParameterError(f"{folder} is not a folder", hint="give a folder to put the report in, or an http(s) URL")
    home = home_dir().resolve()
    if folder == home or home in folder.parents:
        raise ParameterError(f"{folder} is inside the specpilot folder {home}: that is not sharing",
                             hint="use write_report to keep a report on this machine, or give a folder outside it")
    return str(folder)


def resolve_share(inp: ShareInput, store) -> ShareInput:
    """The share as the person approves it: the destination resolved (:func:`resolve_destination`) and the
    exact run ids it sends (those "the newest runs" or a task's runs stand for now)."""
    destination = resolve_destination(inp.destination)
    runs = collect_runs(store, inp)
    if not runs:
        raise ParameterError("there are no stored runs to share", hint="run a method first")
    return inp.model_copy(update={"destination": destination, "run_ids": [r["run_id"] for r in runs],
                                  "task_id": None, "limit": ReportInput.model_fields["limit"].default})


@tool("share_results", ShareInput, gate="share", describe=describe_share, resolve=resolve_share)
def share_results(inp: ShareInput, ctx: ToolContext) -> dict:
    """Share a report of stored runs outside this machine (POST to a URL or copy to an outside folder).
    Needs the user's approval: the first call returns approval_required (or asks in the terminal) naming
    the absolute folder or URL and the run ids; only that share happens, once. To keep a report locally
    use write_report instead."""
    runs = collect_runs(ctx.store, inp)
    if not runs:
        raise ParameterError("there are no stored runs to share", hint="run a method first")
    text = render_report(runs, inp.format)
    run_ids = [r["run_id"] for r in runs]
    if URL.fullmatch(inp.destination):
        kind = "application/json" if inp.format == "json" else "text/markdown"
        request = urllib.request.Request(inp.destination, data=text.encode("utf-8"), method="POST",
                                         headers={"Content-Type": f"{kind}; charset=utf-8"})
        try:
            with urllib.request.urlopen(request, timeout=SHARE_TIMEOUT_S) as response:
                status = response.status
        except OSError as exc:
            raise SpecpilotError(f"could not send the report to {inp.destination}: {exc}",
                                 hint="check the address and the network; nothing else was changed") from None
        return {"status": "shared", "destination": inp.destination, "http_status": status, "run_ids": run_ids}
    folder = Path(resolve_destination(inp.destination))
    if str(folder) != inp.destination:  # the approved folder was moved or replaced by a link meanwhile
        raise ParameterError(f"the approved folder {inp.destination} now resolves to {folder}; nothing was written",
                             hint="ask for the share again to approve the folder it goes to now")
    target = create_new_file(folder, runs, inp.format, text)
    return {"status": "shared", "destination": str(target), "run_ids": run_ids}
