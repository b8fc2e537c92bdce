"""Reports of stored runs: write one under the user's own specpilot folder (not sharing, no
approval), or share one outside the machine (gated: only after the user approves the destination)."""

from __future__ import annotations

import json
import re
import shutil
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
SHARE_TIMEOUT_S = 30


class ReportInput(BaseModel):
    """Which stored runs go into the report."""

    model_config = ConfigDict(extra="forbid")

    run_ids: list[str] = Field(default_factory=list, description="run ids to include (default: the newest runs)")
    task_id: int | None = Field(None, description="include the runs of this task")
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


@tool("write_report", ReportInput)
def write_report(inp: ReportInput, ctx: ToolContext) -> dict:
    """Write a report of stored runs (Markdown or JSON) into the user's own specpilot reports folder.
    This is not sharing: nothing leaves the machine, so no approval is needed."""
    runs = collect_runs(ctx.store, inp)
    if not runs:
        raise ParameterError("there are no stored runs to report", hint="run a method first")
    suffix = "json" if inp.format == "json" else "md"
    path = reports_dir() / f"report-{utc_now()[:19].replace(':', '')}-{runs[0]['run_id']}.{suffix}"
    path.write_text(render_report(runs, inp.format), encoding="utf-8")
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


@tool("share_results", ShareInput, gate="share", describe=describe_share)
def share_results(inp: ShareInput, ctx: ToolContext) -> dict:
    """Share a report of stored runs outside this machine (POST to a URL or copy to an outside folder).
    Needs the user's approval: the first call returns approval_required (or asks in the terminal); only
    the exact approved share happens, once. To keep a report locally use write_report instead."""
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
    folder = Path(inp.destination).expanduser()
    if not folder.is_dir():
        raise ParameterError(f"{folder} is not an existing folder", hint="give an existing folder or an http(s) URL")
    local = write_report(ReportInput(**inp.model_dump(include=set(ReportInput.model_fields))), ctx)["path"]
    target = folder / Path(local).name
    shutil.copyfile(local, target)
    return {"status": "shared", "destination": str(target), "run_ids": run_ids}
