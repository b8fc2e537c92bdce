"""The run_method tool: run one decoding method on a prompt with a measured speedup against plain
generation (tools.bench.run does the work and stores the run), filling anything the caller did not
give from the parameters saved for that method: run-level fields here, the method's own by the run
itself, labelled "memory" (tools.bench.sizing), and sized to this machine where none is saved."""

from __future__ import annotations

from tools.agent_tools.lookup import statement
from tools.agent_tools.saved_params import split_saved_params
from tools.agent_tools.registry import ToolContext, tool
from tools.bench.inputs import CompareInput, RunInput

OUTPUT_SHOWN = 2000
HIDDEN_KEYS = ("prompt_ids", "output_ids")  # long token lists stay in the store


def with_saved_params(inp: RunInput, saved: dict | None) -> RunInput:
    """``inp`` with every run-level field the caller left unset (target, draft, generation settings)
    taken from ``saved`` (the caller's values win). The method's own saved parameters are validated
    here but not copied into ``params``: the run reads them from memory itself (tools.bench.sizing:
    given > memory > sized > default; the EAGLE head folder it loads too, tools.bench.context.chosen_params),
    so each is labelled "memory", not "given", in the run's
    ``params_source`` and ``sizing``, and the fields neither given nor saved are sized to this machine.
    ParameterError names a bad saved field."""
    if not saved:
        return inp
    top, _own = split_saved_params(inp.method, saved)
    given = inp.model_fields_set
    merged = inp.model_dump()
    merged.update({k: v for k, v in top.items() if k not in given})
    return RunInput.model_validate(inp.resolved_again(merged))


@tool("run_method", RunInput)
def run_method_tool(inp: RunInput, ctx: ToolContext) -> dict:
    """Run a decoding method (draft = draft-model speculative decoding, medusa, lookahead, eagle, ngram =
    prompt lookup, or baseline) on one prompt on this machine, together with plain generation, and
    return the measured figures: speedup, tokens/s of both, acceptance rate, whether the output matches
    the baseline, the hardware, and the stored run id. Parameters not given are taken from those
    saved for the method. Report the figures exactly as returned, with the run id."""
    full = with_saved_params(inp, ctx.store.get_params(inp.method))
    if full.method == "medusa" and not full.medusa_heads:
        trained = ctx.store.trained_heads_path(full.target)
        if trained:
            full = full.model_copy(update={"medusa_heads": trained})
    ctx.report(f"running {full.method} on {full.target}")
    # tools.bench.run loads torch: imported when a run starts, not when the tools are listed
    from tools.bench.run import run_method

    record = run_method(full, store=ctx.store, progress=ctx.progress, task_id=ctx.task_id)
    out = {k: v for k, v in record.items() if k not in HIDDEN_KEYS}
    text = str(out.get("output_text") or "")
    if len(text) > OUTPUT_SHOWN:
        out["output_text"] = text[:OUTPUT_SHOWN] + f"... ({len(text)} characters in the stored run)"
    stored = ctx.store.get_run(record["run_id"]) if record.get("run_id") else record
    out["statement"] = statement(stored)
    out["source"] = (f"measured now on this machine; stored as run {record['run_id']}" if record.get("run_id")
                     else f"measured now on this machine; not stored: {record.get('not_stored')}")
    return out


@tool("compare_methods", CompareInput)
def compare_methods(inp: CompareInput, ctx: ToolContext) -> dict:
    """Compare decoding methods on one prompt with identical settings on this machine: baseline, draft
    (draft-model speculative decoding), medusa, lookahead, eagle and ngram (prompt lookup), each timed beside
    the same plain-generation baseline and stored as a run of one task. Returns per method: speedup,
    tokens/s, acceptance rate, tokens per step, whether the output matched the baseline (or where it
    differs), the training and draft model it needs, and its run id; methods that cannot run here are
    listed with the reason. Parameters not given are those saved for each method. Report the figures
    exactly as returned, with run ids."""
    # tools.bench.compare loads torch: imported when a comparison starts, not when the tools are listed
    from tools.bench.compare import compare_tool

    return compare_tool(inp, ctx)
