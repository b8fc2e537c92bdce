"""Tools over the memory: look up stored runs (figures restated, never recomputed), recall what is
saved (parameters, onboarding answers, unfinished tasks), and save a method's parameters."""

from __future__ import annotations

from datetime import datetime, timezone

from pydantic import BaseModel, ConfigDict, Field

from tools.agent_tools.saved_params import validate_saved_params
from tools.engine.params import ACCELERATED, MethodName
from tools.errors import RunNotFoundError, SpecpilotError
from tools.agent_tools.registry import ToolContext, tool

FIGURES = ("speedup", "tokens_per_s", "baseline_tokens_per_s", "wall_time_s", "baseline_wall_time_s",
           "acceptance_rate", "mean_accepted_per_step", "new_tokens", "tokens_drafted", "tokens_accepted",
           "steps", "matches_baseline")
PROMPT_SHOWN = 200
SAVEABLE_METHODS = (*ACCELERATED, "baseline")
NO_RUNS = "No runs are stored yet."  # lookup_runs with no filters on a memory that holds no run
MEASURE_ONE = ('measure one, e.g. `/run ngram "YOUR PROMPT"` in the chat or '
               '`specpilot run --method ngram --prompt "..."` on the command line')
FILTERS = ("run_id", "method", "prompt_contains", "same_prompt_as_last_run", "target")  # not limit: it filters nothing


class LookupInput(BaseModel):
    """Which stored runs to restate."""

    model_config = ConfigDict(extra="forbid")

    run_id: str | None = Field(None, description="a run id (or a unique prefix of 4+ characters)")
    method: MethodName | None = Field(
        None, description="only runs of this method")
    prompt_contains: str | None = Field(None, description="only runs whose prompt contains this text")
    same_prompt_as_last_run: bool = Field(
        False, description="only runs on the prompt of the newest stored run ('that prompt')")
    target: str | None = Field(None, description="only runs on this target model")
    limit: int = Field(5, ge=1, le=50, description="newest runs to return at most")


def hardware_name(run: dict) -> str:
    """The hardware a run names (its ``name``, else whatever identifies it)."""
    hw = run.get("hardware") or {}
    if isinstance(hw, dict):
        return str(hw.get("name") or hw.get("gpu") or hw.get("cpu") or hw or "unknown hardware")
    return str(hw)


def _fmt(value, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def stored_time(value) -> str:
    """When a run was stored, to the minute in UTC ("2026-12-07 18:11 UTC"); text that is no ISO time as it is."""
    if not value:
        return "time not recorded"
    try:
        when = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M UTC")


def percent(rate) -> str:
    """A rate from 0 to 1 as a percent with one decimal ("72.0%"), as the tables show it."""
    return f"{rate * 100:.1f}%" if isinstance(rate, (int, float)) and not isinstance(rate, bool) else str(rate)


SAME_SPEED = 0.05  # a speedup within this of 1.0 reads "about as fast as plain generation"


def verdict(run: dict) -> str | None:
    """What a run's stored figures say when it did not beat plain generation, and why (its tokens per step
    and acceptance, as stored); None where it was faster or has no speedup."""
    speedup = run.get("speedup")
    if not isinstance(speedup, (int, float)) or speedup > 1 + SAME_SPEED:
        return None
    if speedup >= 1 - SAME_SPEED:
        return "about as fast as plain generation"
    per_step = run.get("mean_accepted_per_step")
    if not isinstance(per_step, (int, float)):
        return "slower than plain generation"
    accepted = run.get("acceptance_rate")
    share = f", {percent(accepted)} of the proposed tokens accepted" if accepted is not None else ""
    return (f"slower than plain generation: {per_step:.1f} tokens per step{share}, too few to pay for proposing "
            "and verifying them")


def fastest(runs: list[dict]) -> dict | None:
    """The run with the highest stored speedup among ``runs`` (two or more with one), else None."""
    timed = [r for r in runs if isinstance(r.get("speedup"), (int, float))]
    if len(timed) < 2:
        return None
    best = max(timed, key=lambda r: r["speedup"])
    return {"run_id": best["run_id"], "method": best.get("method"), "speedup": best["speedup"]}


def statement(run: dict) -> str:
    """One sentence restating a stored run's figures with its id, model, prompt and hardware."""
    prompt = str(run.get("prompt") or "")
    shown = prompt if len(prompt) <= 80 else prompt[:77] + "..."
    model = run.get("target") or "unknown model"
    if run.get("draft"):
        model += f" with draft {run['draft']}"
    parts = [f"run {run['run_id']} ({run.get('method')}, {model}, prompt {shown!r}, {hardware_name(run)}, "
             f"{run.get('dtype') or 'dtype not recorded'}, stored {stored_time(run.get('created_at'))})"]
    if run.get("speedup") is not None:
        parts.append(f"speedup {_fmt(run['speedup'])}x")
    if run.get("tokens_per_s") is not None:
        base = run.get("baseline_tokens_per_s")
        parts.append(f"{_fmt(run['tokens_per_s'])} tok/s" + (f" vs baseline {_fmt(base)} tok/s" if base else ""))
    if run.get("acceptance_rate") is not None:
        parts.append(f"acceptance {percent(run['acceptance_rate'])}")
    if run.get("new_tokens") is not None:
        parts.append(f"{run['new_tokens']} new tokens")
    if run.get("matches_baseline") is not None:
        parts.append("output identical to baseline" if run["matches_baseline"] else "output differs from baseline")
    said = parts[0] + ": " + ", ".join(parts[1:])
    return said + (f"; {why}" if (why := verdict(run)) else "")


def summarise_run(run: dict) -> dict:
    """The stored figures of a run (copied, not recomputed), with its source and a sentence."""
    prompt = str(run.get("prompt") or "")
    out = {"run_id": run["run_id"], "method": run.get("method"), "target": run.get("target"),
           "draft": run.get("draft"), "params": run.get("params"),
           "prompt": prompt if len(prompt) <= PROMPT_SHOWN else prompt[:PROMPT_SHOWN] + "...",
           "hardware": hardware_name(run), "dtype": run.get("dtype"), "created_at": run.get("created_at")}
    out.update({k: run.get(k) for k in FIGURES if run.get(k) is not None})
    if run.get("first_divergence"):
        out["first_divergence"] = run["first_divergence"]
    out["statement"] = statement(run)
    return out


@tool("lookup_runs", LookupInput, read_only=True)
def lookup_runs(inp: LookupInput, ctx: ToolContext) -> dict:
    """Look up stored runs and restate their measured figures (speedup, tokens/s, acceptance) with run
    id, model, prompt and hardware, exactly as stored. Use it to answer questions such as "what was
    the speedup for the Medusa run on that prompt?" — never recompute or estimate a figure. Where no stored
    prompt contains ``prompt_contains`` but runs match the other filters, those runs are returned and
    ``unmatched`` says that the text matched none."""
    store = ctx.store
    unmatched = None
    if inp.run_id:
        runs = [store.get_run(inp.run_id)]
    else:
        filters = {k: v for k, v in (("method", inp.method), ("target", inp.target)) if v is not None}
        prompt = None
        if inp.same_prompt_as_last_run:
            last = store.last_run()
            if last is None:
                raise RunNotFoundError("there are no stored runs yet, so there is no 'that prompt'",
                                       hint="run a method first (run_method)")
            prompt = last.get("prompt")
        runs = store.find_runs(**filters)
        if prompt is not None:
            runs = [r for r in runs if r.get("prompt") == prompt]
        if inp.prompt_contains:
            needle = inp.prompt_contains.lower()
            found = [r for r in runs if needle in str(r.get("prompt") or "").lower()]
            if runs and not found:  # the words are no stored prompt's: the runs the other filters give, said so
                unmatched = (f"no stored run's prompt contains {inp.prompt_contains!r}; the newest runs matching "
                             "the other filters follow")
            else:
                runs = found
        runs = runs[: inp.limit]
    if not runs:
        given = {k: v for k, v in inp.model_dump(exclude_defaults=True).items() if k in FILTERS}
        if not given and store.last_run() is None:  # nothing filtered: the memory holds no run at all
            raise RunNotFoundError(NO_RUNS, hint=MEASURE_ONE)
        asked = ", ".join(f"{k}={v!r}" for k, v in given.items()) or "any run"
        raise RunNotFoundError(f"no stored run matches {asked}",
                               hint="list runs with lookup_runs and no filters, or run the method first")
    out = {"source": "stored runs (memory); figures copied as measured, not recomputed",
           "runs": [summarise_run(r) for r in runs]}
    if best := fastest(runs):
        out["fastest"] = best
    return out | ({"unmatched": unmatched} if unmatched else {})


class RecallInput(BaseModel):
    """What to read back from memory."""

    model_config = ConfigDict(extra="forbid")

    include_done_tasks: bool = Field(False, description="also list finished tasks and those not done, with why "
                                                        "(newest 10 of each)")


REQUEST_CHARS = 100  # a task's request as a line of a list: a pasted prompt is not repeated whole


def one_line(text, width: int, ellipsis: str = "…") -> str:
    """``text`` on one line, at most ``width`` characters (``ellipsis`` where it was cut)."""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - len(ellipsis)].rstrip() + ellipsis


def request_text(task: dict) -> str:
    """The task's request on one line, cut to REQUEST_CHARS."""
    return one_line(task.get("request") or "", REQUEST_CHARS)


def task_line(task: dict) -> str:
    """A task as 'request — done: … / not done: …'."""
    done = "; ".join(task.get("done") or []) or "nothing yet"
    left = "; ".join(task.get("left") or []) or "nothing"
    return f"task {task['id']} ({task['status']}): {request_text(task)} — done: {done} / not done: {left}"


def not_done_line(task: dict) -> str:
    """A task that was not done as 'task N: request — not done: why'."""
    why = "; ".join(step.removeprefix("not done: ") for step in task.get("left") or []) or "no reason recorded"
    return f"task {task['id']}: {request_text(task)} — not done: {why}"


# the chat commands that ask for the saved parameters alone (/params; /memory and /tasks show everything)
PARAMS_ONLY_COMMANDS = ("command:params", "command:saved")


def asked_for_params_only(ctx: ToolContext) -> bool:
    """Whether this recall answers the chat's /params: the chat's commands /params, /memory and /tasks all call
    recall (agent.brains.offline), and the task the conversation recorded for the message says which was typed
    (its kind, "command:params"). A call with no task (a host, a read-only memory) gets everything."""
    if ctx.task_id is None:
        return False
    try:
        return ctx.store.get_task(ctx.task_id).get("kind") in PARAMS_ONLY_COMMANDS
    except SpecpilotError:
        return False


@tool("recall", RecallInput, read_only=True)
def recall(inp: RecallInput, ctx: ToolContext) -> dict:
    """Read what memory holds before acting: saved parameters per method, onboarding answers,
    unfinished tasks (as "done: … / not done: …") and the newest runs (with include_done_tasks, also the
    finished tasks and those not done, with the reason). Never ask the user again for anything listed here."""
    store = ctx.store
    if not inp.include_done_tasks and asked_for_params_only(ctx):
        return {"saved_params": store.all_params(), "answers": store.all_answers(), "only_saved_params": True}
    unfinished = store.unfinished_tasks()
    if ctx.task_id is not None:  # the request being handled now is not unfinished work
        unfinished = [t for t in unfinished if t["id"] != ctx.task_id]
    out = {"saved_params": store.all_params(), "answers": store.all_answers(),
           "unfinished_tasks": [task_line(t) for t in unfinished[:10]],
           "recent_runs": [statement(r) for r in store.list_runs(limit=5)],
           "trained_heads": store.all_trained_heads(),
           "cost_curves": [{k: c[k] for k in ("target", "hardware", "dtype", "measured_at")}
                           for c in store.cost_curves()]}
    if inp.include_done_tasks:
        out["done_tasks"] = [task_line(t) for t in store.list_tasks(status="done")[:10]]
        out["not_done_tasks"] = [not_done_line(t) for t in store.list_tasks(status="failed")[:10]]
    return out


class SaveParamsInput(BaseModel):
    """A method's parameters to remember."""

    model_config = ConfigDict(extra="forbid")

    method: MethodName
    params: dict = Field(..., description="e.g. {'target': ..., 'draft': ..., 'k': 4} or "
                                          "{'window': 15, 'ngram': 5, 'guess': 5}; generation settings may "
                                          "be included (max_new_tokens, temperature)")
    make_default: bool = Field(True, description="also make this the method used when none is named")
    replace: bool = Field(False, description="replace every saved parameter of the method (default: update "
                                             "the given ones and keep the others)")


@tool("save_params", SaveParamsInput)
def save_params(inp: SaveParamsInput, ctx: ToolContext) -> dict:
    """Save a method's parameters (and optionally make it the default method) so they are not asked
    for again. The method's own parameters and the run-level ones (target, max_new_tokens, ...) are
    validated before saving. The given parameters update those saved (``replace`` drops the others)."""
    # read, merge, validate and write in one transaction: concurrent saves of other keys are all kept
    params = ctx.store.update_params(inp.method, dict(inp.params), replace=inp.replace,
                                     check=lambda merged: validate_saved_params(inp.method, merged))
    if inp.make_default:
        ctx.store.save_answer("default_method", inp.method)
    return {"saved": {"method": inp.method, "params": params}, "changed": inp.params,
            "default_method": ctx.store.get_answer("default_method")}
