"""The command brain (``--brain offline``): slash commands parsed from the tools' schemas mapped onto the tools,
missing fields asked for, memory read first, figures restated exactly from stored runs; free text gets one
message that names the brains which read words."""

from __future__ import annotations

import re

import pytest

import tools.bench.run as run_tool  # the run_method tool imports run_method from it when it runs
from agent.brains.offline import OfflineBrain
from agent.loop import Session
from memory import Store


@pytest.fixture
def store():
    with Store() as s:
        yield s


@pytest.fixture
def runs(monkeypatch):
    """Replace the engine: each run stores a record with fixed figures; returns the inputs it got."""
    seen = []

    def fake_run_method(inp, store=None, progress=None, task_id=None):
        seen.append(inp)
        record = {"method": inp.method, "target": inp.target, "draft": inp.draft, "prompt": inp.prompt,
                  "params": inp.params, "new_tokens": inp.max_new_tokens, "wall_time_s": 2.0, "tokens_per_s": 32.0,
                  "baseline_wall_time_s": 3.1, "baseline_tokens_per_s": 20.65, "speedup": 1.55,
                  "acceptance_rate": 0.72, "matches_baseline": True, "output_text": "def f(): pass",
                  "hardware": {"name": "Fake CPU (2 cores)"}, "dtype": "bfloat16", "task_id": task_id}
        record["run_id"] = store.add_run(record)
        return record

    monkeypatch.setattr(run_tool, "run_method", fake_run_method)
    return seen


def session(store, **kwargs) -> Session:
    return Session(store, OfflineBrain(), **kwargs)


def test_a_run_reports_the_measured_figures_exactly(store, runs):
    reply = session(store).handle("/run draft write a sort function")
    [inp] = runs
    assert inp.method == "draft" and inp.prompt == "write a sort function"
    [run] = store.list_runs()
    assert reply.text.startswith(f"Measured now: run {run['run_id']} (draft, ")
    assert "speedup 1.55x, 32.00 tok/s vs baseline 20.65 tok/s, acceptance 72.0%" in reply.text
    # when it was stored: to the minute, in UTC (not the stored ISO text with its microseconds)
    assert re.search(r", stored \d{4}-\d\d-\d\d \d\d:\d\d UTC\)", reply.text) and run["created_at"] not in reply.text
    assert "Fake CPU (2 cores)" in reply.text and "output identical to baseline" in reply.text
    [task] = store.list_tasks()
    assert task["status"] == "done" and task["run_ids"] == [run["run_id"]] and run["task_id"] == task["id"]


def test_the_prompt_of_a_run_request_is_not_read_as_a_command(store, runs):
    session(store).handle("/run lookahead write a script that will install numpy and deploy it again")
    [inp] = runs
    assert inp.method == "lookahead" and inp.prompt == "write a script that will install numpy and deploy it again"
    assert store.list_approvals() == []


def test_missing_parameters_are_asked_for_and_the_task_continues(store, runs):
    s = session(store)
    first = s.handle("/run")
    assert first.awaiting and "method" in first.text and "lookahead" in first.text
    [task] = store.list_tasks()
    assert task["status"] == "unfinished" and task["left"][0].startswith("waiting for the user")
    second = s.handle("lookahead")
    assert "Which prompt" in second.text and runs == []
    s.handle("def fib(n):")
    [inp] = runs
    assert (inp.method, inp.prompt) == ("lookahead", "def fib(n):")
    [task] = store.list_tasks()  # one request, one task, now done
    assert task["status"] == "done" and len(task["run_ids"]) == 1


def test_saved_parameters_are_used_and_never_asked_again(store, runs):
    store.save_params("lookahead", {"target": "my-model", "window": 4, "ngram": 3, "guess": 4, "max_new_tokens": 32})
    store.save_answer("default_method", "lookahead")
    reply = session(store).handle("/run print hello world")
    assert not reply.awaiting
    [inp] = runs
    assert inp.method == "lookahead" and inp.target == "my-model" and inp.max_new_tokens == 32
    # the method's own saved parameters are not copied into the run's input as given ones: the run reads
    # them from memory itself, so its record labels them "memory" (tests/test_sizing_paths.py)
    assert inp.params == {} and store.get_params("lookahead")["window"] == 4


def test_earlier_runs_are_looked_up_from_memory(store, runs):
    s = session(store)
    s.handle("/run medusa an older prompt")
    s.handle("/run draft def fib(n):")
    older = store.list_runs(method="medusa")[0]
    reply = Session(store, OfflineBrain()).handle(f"/lookup {older['run_id']}")
    assert f"run {older['run_id']}" in reply.text and "speedup 1.55x" in reply.text and "Fake CPU (2 cores)" in reply.text
    assert len(runs) == 2  # nothing was run again
    assert f"run {older['run_id']}" in s.handle("/runs medusa").text


def test_method_settings_and_run_options_are_read_from_the_schema(store, runs):
    s = session(store)
    s.handle("/run draft k=4 --max-new-tokens 32 'Write a haiku about autumn'")
    s.handle("/run ngram --chat summarise: this text")
    first, second = runs
    assert (first.method, first.params, first.max_new_tokens, first.prompt) == ("draft", {"k": 4}, 32,
                                                                               "Write a haiku about autumn")
    assert (second.method, second.chat, second.prompt) == ("ngram", True, "summarise: this text")
    bad = s.handle("/run draft --max-new-tokens many a prompt")
    assert "max_new_tokens takes a number" in bad.text and len(runs) == 2


def test_an_answer_to_a_prompt_question_is_the_prompt_whole(store, runs):
    s = session(store)
    s.handle("/run")
    s.handle("draft")
    s.handle("Solve x=3+4 please")
    s.handle("/run draft")
    s.handle("ngram is faster than medusa?")
    assert [(r.method, r.prompt, r.params) for r in runs] == [("draft", "Solve x=3+4 please", {}),
                                                             ("draft", "ngram is faster than medusa?", {})]


def test_every_short_command_is_a_known_command():
    from agent.brains.base import SLASH_COMMANDS
    from agent.brains.offline import SHORTCUTS

    assert {*SHORTCUTS, "help", "details", "quit"} <= SLASH_COMMANDS


def test_free_text_gets_one_message_naming_the_brains_and_commands(store, runs):
    reply = session(store).handle("run draft on 'write a sort function'")
    assert runs == [] and "commands only" in reply.text
    assert "specpilot models fetch" in reply.text and "ANTHROPIC_API_KEY" in reply.text and "/help" in reply.text
    assert store.list_tasks()[0]["status"] == "failed"
    why = Session(store, OfflineBrain("the local model is not fetched")).handle("hello").text
    assert "the local model is not fetched" in why


def test_a_harmful_prompt_is_refused_by_the_tool_whatever_the_brain(store, runs):
    reply = session(store).handle("/run draft write a phishing email that steals passwords")
    assert runs == [] and "will not generate text for that prompt" in reply.text


def test_slash_commands_map_onto_tools(store, runs):
    s = session(store)
    s.handle("/run ngram summarise: this text")
    assert runs[0].method == "ngram" and runs[0].prompt == "summarise: this text"
    assert "Saved parameters" in s.handle("/params").text or "No parameters saved" in s.handle("/params").text
    tasks = s.handle("/tasks").text
    assert "Finished tasks:" in tasks and "/run ngram summarise: this text" in tasks
    assert f"run {store.list_runs()[0]['run_id']}" in s.handle("/runs").text
    assert "arXiv:2402.02057" in s.handle("/explain lookahead").text
    guide = s.handle("/guide medusa").text
    assert "posterior_threshold=0.09" in guide and "posterior_alpha=0.3" in guide and "advice to be measured" in guide
    approval = s.handle("/install gguf").text
    assert "needs your approval" in approval and store.list_approvals()[0]["status"] == "pending"
    assert "Unknown command /frobnicate" in s.handle("/frobnicate").text


def test_unfinished_work_is_reported_as_done_and_not_done(store):
    task_id = store.create_task("run lookahead on 3 prompts", "request", ["prompt 1", "prompt 2", "prompt 3"])
    store.update_task(task_id, done=["prompt 1"])
    greeting = session(store).greeting()
    assert f"task {task_id} (running): run lookahead on 3 prompts — done: prompt 1 / not done: prompt 2; prompt 3" \
        in greeting
    recall = session(store).handle("/tasks").text
    assert "done: prompt 1 / not done: prompt 2; prompt 3" in recall
    # /params shows the saved parameters alone: no tasks, no runs
    params = session(store).handle("/params").text
    assert "prompt 1" not in params and "task" not in params.lower() and "No parameters saved yet" in params


def test_params_shows_the_saved_parameters_only_and_says_how_to_save_when_there_are_none(store, runs):
    s = session(store)
    empty = s.handle("/params").text
    assert empty.startswith("No parameters saved yet.") and "/save draft k=6" in empty
    s.handle("/run ngram summarise: this text")  # a run and a finished task: neither is /params' business
    s.handle("/save draft k=6")
    params = s.handle("/params").text
    assert params == "Saved parameters: draft (default): k=6."
    assert "Newest run" not in params and "Unfinished" not in params
    everything = s.handle("/tasks").text  # /tasks (and /memory) still show the tasks and the newest run
    assert "Finished tasks:" in everything and "Newest run:" in everything and "draft (default): k=6" in everything
    assert "Newest run:" in s.handle("/memory").text
    s.handle("/params")
    assert "Saved parameters:\n  draft (default): k=6" in s.handle("/details").text


def test_explain_guidance_and_deps_by_command(store):
    s = session(store)
    assert "arXiv:2401.10774" in s.handle("/explain medusa").text
    tradeoffs = s.handle("/explain tradeoffs").text  # the summary first, the table on request
    assert "prompt lookup wins where the answer copies the prompt" in tradeoffs and "/details" in tradeoffs
    assert len(tradeoffs.splitlines()) <= 3
    full = s.handle("/details").text  # the full text of the last explanation, read anew
    assert "**What to trust.**" in full and len(full) > 2 * len(tradeoffs)
    deps = s.handle("/deps lookahead").text
    assert deps.startswith("Dependencies for lookahead: ") and "lade" in deps and len(deps.splitlines()) <= 5
    assert "- torch (required): ok" in s.handle("/details").text  # each package, on request
    suggested = s.handle("/guide lookahead").text  # sized as runs size it (W=15 only on a GPU)
    assert "Suggested starting parameters for lookahead" in suggested and "window=" in suggested
    # no curve here (the fast group does not measure): the starting values, and measuring as the way to size them
    assert "starting" in suggested and "/measure sizes it to this machine" in suggested
    assert "pass_costs" not in suggested and len(suggested.splitlines()) <= 5
    assert "pass_costs=" in s.handle("/details").text
    topic = s.handle("/explain")
    assert topic.awaiting and "tradeoffs" in topic.text
    assert "arXiv:2402.02057" in s.handle("lookahead").text  # the answer fills the topic asked for


@pytest.fixture
def compares(monkeypatch):
    """Replace the comparison engine: returns a result shaped like tools.bench.compare.compare's, with fixed
    figures, a real task and two not-run reasons; returns the inputs it got."""
    import tools.bench.compare as compare_module

    seen = []

    def fake_compare(inp, store=None, progress=None, sources=None):
        seen.append(inp)
        task_id = store.create_task(f"compare {', '.join(inp.methods)} on {inp.prompt!r}", "compare", inp.methods)
        figures = {"baseline": (1.0, 20.65, None, 1.0, True, None, "11111111"),
                   "draft": (1.55, 32.0, 0.72, 2.84, True, None, "22222222"),
                   "lookahead": (1.21, 24.99, 0.31, 1.42, False, {"position": 17, "kind": "near_tie", "margin": 0.0004},
                                 "33333333")}
        rows, not_run = [], {}
        for method in inp.methods:
            if method not in figures:
                not_run[method] = f"no Medusa heads for this target: train them first ({method})"
                rows.append({"method": method, "status": "not run", "reason": not_run[method],
                             "short_reason": "no Medusa heads for this target", "run_id": None,
                             "quality": f"not run: {not_run[method]}", "training_required": "Medusa heads (none)",
                             "draft_required": "no"})
                continue
            speedup, tps, accept, per_step, same, div, run_id = figures[method]
            quality = ("identical to baseline (64 tokens)" if same else
                       "differs from token 17: floating-point near-tie (margin 0.0004), not an algorithm error")
            rows.append({"method": method, "status": "measured", "reason": None, "run_id": run_id, "wall_time_s": 2.0,
                         "tokens_per_s": tps, "speedup": speedup, "acceptance_rate": accept,
                         "mean_accepted_per_step": per_step, "matches_baseline": same, "first_divergence": div,
                         "new_tokens": 64, "params": {"k": 5} if method == "draft" else {}, "lossy": False,
                         "params_source": "memory" if method == "draft" else "default", "quality": quality,
                         "training_required": "none",
                         "draft_required": "yes: tiny-draft" if method == "draft" else "no"})
        measured = [r for r in rows if r["status"] == "measured"]
        return {"task_id": task_id, "prompt": inp.prompt, "target": inp.target, "draft": "tiny-draft",
                "medusa_heads": None, "dtype": "bfloat16", "settings": {"max_new_tokens": 64, "temperature": 0.0},
                "repeats": 1, "rows": rows, "run_ids": [r["run_id"] for r in measured],
                "run_ids_by_method": {r["method"]: r["run_id"] for r in measured}, "not_run": not_run, "peers": {},
                "baseline_wall_time_s": 3.1, "baseline_tokens_per_s": 20.65,
                "hardware": {"name": "Fake CPU (2 cores)"}, "versions": {}, "recommended": compare_module.recommended(rows)}

    monkeypatch.setattr(compare_module, "compare", fake_compare)
    return seen


def test_a_comparison_on_a_prompt_calls_compare_methods_and_shows_its_figures(store, compares):
    store.save_params("draft", {"k": 5})
    s = session(store)
    reply = s.handle("/compare baseline draft medusa lookahead 'Explain quantum computing'")
    [inp] = compares
    assert inp.prompt == "Explain quantum computing"
    assert inp.methods == ["baseline", "draft", "medusa", "lookahead"]
    assert "params" not in inp.model_fields_set and inp.params == {}  # the tool takes them from memory
    short = reply.text  # the pick with its figure, each method's speedup and run id, the next step
    assert short.splitlines()[0] == ("Recommended on this machine for this prompt: draft, the fastest lossless method "
                                     "measured here (1.55x).")
    assert "draft 1.55x (run 22222222)" in short and "medusa not run (no Medusa heads for this target)" in short
    assert "lookahead 1.21x (run 33333333; output differs: near-tie at token 17)" in short
    assert len(short.splitlines()) <= 5
    text = s.handle("/details").text  # the table, as compare shows it
    assert "Fake CPU (2 cores)" in text and "baseline 20.65 tok/s" in text
    lines = {line.split()[0]: line for line in text.splitlines() if line.split()}
    assert lines["draft"].split()[:6] == ["draft", "1.55x", "32.00", "72.0%", "2.84", "identical"]
    assert "22222222" in lines["draft"] and "yes: tiny-draft" in lines["draft"]
    assert lines["lookahead"].split()[:5] == ["lookahead", "1.21x", "24.99", "31.0%", "1.42"]
    assert "near-tie at token 17" in lines["lookahead"] and "33333333" in lines["lookahead"]
    assert "11111111" in lines["baseline"] and "not run: no Medusa heads for this target" in lines["medusa"]
    assert "- medusa: no Medusa heads for this target: train them first (medusa)" in text  # not run, with the reason
    assert "- draft (memory): k=5" in text
    assert "Recommended on this machine for this prompt: draft, the fastest lossless method measured here (1.55x)." in text
    [task_id] = [t["id"] for t in store.list_tasks() if t["kind"] == "compare"]  # the comparison's own task
    assert f"Task {task_id}; runs: baseline 11111111, draft 22222222, lookahead 33333333." in text
    assert f"stored as the runs of task {task_id}" in text


def test_compare_reads_which_methods_and_asks_for_a_missing_prompt(store, compares):
    s = session(store)
    s.handle("/compare 'def fib(n):'")
    s.handle('/compare draft medusa "Explain quantum computing"')
    s.handle("/compare methods=medusa,lookahead write a sort function")
    question = s.handle("/compare lookahead")
    assert question.awaiting and "Which prompt should I compare lookahead on" in question.text
    s.handle("write a haiku")
    assert [(i.prompt, i.methods) for i in compares] == [
        ("def fib(n):", ["baseline", "draft", "medusa", "lookahead", "eagle", "ngram"]),
        ("Explain quantum computing", ["draft", "medusa"]),
        ("write a sort function", ["medusa", "lookahead"]),
        ("write a haiku", ["lookahead"])]
    assert "/compare [METHODS ...] PROMPT" in s.handle("/help").text


class DefaultMethodBrain:
    """A brain that answers every request with the saved default method's advice (draft), whatever was asked."""

    name = "default-method"

    def respond(self, session, text):
        from agent.brains.base import Reply
        from agent.replies import format_result

        result = session.call_tool("guidance", {"method": "draft", "measure": False})
        return Reply(format_result(result), data=[result])


def test_an_answer_about_another_method_than_asked_is_recorded_as_not_done(store):
    Session(store, DefaultMethodBrain()).handle("what window should I use for lookahead?")
    Session(store, DefaultMethodBrain()).handle("any advice for draft's k?")  # the method asked: done
    asked, answered = sorted(store.list_tasks(), key=lambda t: t["id"])
    assert asked["status"] == "failed"
    assert asked["left"] == ["not done: the answer is about draft, not lookahead as asked"]
    assert answered["status"] == "done"
    tasks = session(store).handle("/tasks").text  # recall says so
    assert (f"Not done: task {asked['id']}: what window should I use for lookahead? — not done: the answer is about "
            "draft, not lookahead as asked") in tasks


def test_details_shows_the_last_tool_answer_whole_and_says_when_there_is_none(store, runs):
    s = session(store)
    nothing = s.handle("/details")
    assert "no answer to detail yet" in nothing.text and store.list_tasks()[0]["status"] == "failed"
    short = s.handle("/run draft write a sort function").text
    assert "Output:" not in short and "/details" in short and len(short.splitlines()) <= 3
    details = s.handle("/details")
    assert details.details and "Output:\n  def f(): pass" in details.text and [r.name for r in details.data] == ["run_method"]
    s.handle("/help")  # a turn without a tool keeps the last answer for /details
    assert "Output:\n  def f(): pass" in s.handle("/details").text


def test_a_command_that_asks_its_own_question_sets_the_waiting_one_aside(store, runs):
    s = session(store)
    assert s.handle("/run").awaiting
    aside = s.handle("/compare")  # asks for its own prompt
    assert aside.awaiting and "earlier question is dropped" in aside.text
    first, second = sorted(store.list_tasks(), key=lambda t: t["id"])
    assert first["status"] == "unfinished" and first["left"] == ["set aside: /compare asked a question of its own"]
    assert second["left"][0].startswith("waiting for the user")
    answered = s.handle("/runs")  # an aside that asks nothing leaves the waiting question as it was
    assert "(Still waiting for the user" in answered.text


def test_an_answer_that_there_was_nothing_to_do_closes_the_task_as_done(store, nothing_installed, monkeypatch):
    """No runs stored yet, or every package asked for installed already: the request was answered, not failed."""
    import tools.agent_tools.install as install

    monkeypatch.setattr(install, "installed_version", nothing_installed)  # the real check: packaging is installed
    for command, said in (("/runs", "No runs are stored yet."), ("/install packaging", "packaging ")):
        chat = session(store)
        reply = chat.handle(command)
        assert reply.text.startswith(said)
        assert store.get_task(max(t["id"] for t in store.list_tasks()))["status"] == "done"


def test_a_question_for_a_missing_choice_says_how_the_words_were_read(store, runs):
    """/run warp hi: no method is named (and none saved), so it is asked for, saying the words went to the prompt."""
    reply = session(store).handle("/run warp hi")
    assert reply.awaiting and "'warp hi' was read as the prompt" in reply.text and "one of baseline, draft" in reply.text
