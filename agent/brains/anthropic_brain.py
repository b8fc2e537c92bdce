"""The Claude brain: the official Anthropic SDK's Messages API with tool use, in a manual loop.

Each turn: send the conversation with the registry's tools; while the model stops for
``tool_use``, run every requested tool through the session (approval gate included) and send the
results back as ``tool_result`` blocks (``is_error`` on failure); stop at the model's answer or
after ``max_iterations`` rounds. When the session shows text as it arrives (the chat's
``stream_text``), Claude's text is streamed with the SDK's streaming API, also between tool calls.
An interrupt (Ctrl-C) or an error while tools run leaves no ``tool_use`` without its ``tool_result``:
the calls that did not finish get a result saying so, so the next turn is accepted by the API.
Model id from ``SPECPILOT_MODEL``; key and base URL from ``ANTHROPIC_API_KEY`` and
``ANTHROPIC_BASE_URL`` (read by the SDK; a missing key is reported up front).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from typing import Any

from agent.brains.base import ToolSession, Reply
from agent.replies import deployment_plan, deployment_status
from tools.agent_tools import registry
from tools.errors import DependencyError, ParameterError
from tools.agent_tools.explain import prompt_text

log = logging.getLogger(__name__)

MODEL_ENV = "SPECPILOT_MODEL"
DEFAULT_MODEL = "claude-sonnet-5-5"
MAX_ITERATIONS = 12
MAX_TOKENS = 4096
# the one tool this brain answers itself: a request to deploy, serve or integrate into production (outside specpilot)
# goes through the approval gate before any planning (agent.approval.request_deploy_planning)
DEPLOY_TOOL = {
    "name": "plan_deployment",
    "description": "Call this, and no other tool, when the user asks to deploy or serve a model for others or to "
                   "integrate it into production: specpilot only measures on this machine, and planning a deployment "
                   "in words needs the person's approval. The result says whether it was given and what to say. "
                   "Measuring a local vLLM server (measure_serving) is a measurement, not a deployment.",
    "input_schema": {"type": "object", "required": ["request"], "additionalProperties": False,
                     "properties": {"request": {"type": "string", "description": "what the user asked to deploy, "
                                                                                 "in their words"}}}}


def system_prompt(session: ToolSession) -> str:
    """prompts/system.md followed by what memory holds now (read before acting)."""
    memory = json.dumps(session.memory(), indent=1, ensure_ascii=False, default=str)
    return f"{prompt_text('system.md').strip()}\n\n## Memory now (read before acting)\n{memory}\n"


def _block_param(block: Any) -> dict:
    """A response content block as a request content block (only the fields the API accepts back)."""
    kind = getattr(block, "type", None)
    if kind == "text":
        return {"type": "text", "text": block.text}
    if kind == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if kind == "thinking":
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    return block.model_dump(mode="json", exclude_none=True)


class AnthropicBrain:
    """Claude with specpilot's tools. Keeps the conversation's messages across turns, always in a shape
    the API accepts: every ``tool_use`` is followed by its ``tool_result``, also after an interrupt."""

    name = "anthropic"

    def __init__(self, client: Any = None, model: str | None = None, max_iterations: int = MAX_ITERATIONS,
                 max_tokens: int = MAX_TOKENS, stream: bool = True):
        if client is None:
            client = default_client()
        self.client = client
        self.model = model or os.environ.get(MODEL_ENV) or DEFAULT_MODEL
        self.max_iterations = max_iterations
        self.max_tokens = max_tokens
        self.stream = stream  # stream the text when the session shows it as it arrives (the chat)
        self.messages: list[dict] = []
        self.deployment: dict | None = None  # the turn's deployment approval, where Claude asked for one

    def respond(self, session: ToolSession, text: str) -> Reply:
        """Run the tool-use loop for one user message; return Claude's answer."""
        import anthropic

        self.complete_tool_results("the conversation was cut off before this tool call finished")
        snapshot = list(self.messages)
        self._add_user_text(text)
        tools, system = [*registry.anthropic_tools(), DEPLOY_TOOL], system_prompt(session)
        streamed, tools_ran = False, False
        self.deployment = None
        for _ in range(self.max_iterations):
            try:
                response, shown = self._create(session, system, tools)
            except anthropic.APIError as exc:
                self.messages = snapshot  # forget the failed turn, so the next one starts clean
                log.warning("Anthropic API error: %s", exc)
                return Reply(f"The Claude API call failed ({type(exc).__name__}: {exc}). Nothing else was done; "
                             "try again, or use the offline brain (`specpilot chat --brain offline`).",
                             unfinished="the model service failed before answering")
            except KeyboardInterrupt:
                if not tools_ran:
                    self.messages = snapshot  # nothing happened yet: the turn is forgotten
                raise
            streamed = streamed or shown
            self.messages.append({"role": "assistant", "content": [_block_param(b) for b in response.content]})
            if response.stop_reason == "pause_turn":
                continue
            if response.stop_reason != "tool_use":
                reply = self._answer(response, streamed)
                return replace(reply, **deployment_status(self.deployment)) if self.deployment else reply
            if shown:
                session.stream_text("\n")
            tools_ran = True
            self._run_tools(session, response.content)
        return Reply(f"I stopped after {self.max_iterations} tool rounds without a final answer; what was done is "
                     "recorded in the task.", unfinished=f"stopped after {self.max_iterations} tool rounds",
                     streamed=streamed)

    def _create(self, session: ToolSession, system: str, tools: list[dict]) -> tuple[Any, bool]:
        """One Messages API call: streamed to ``session.stream_text`` when the session shows text as it
        arrives (returns the final message and whether any text was shown), else a plain call."""
        kwargs = {"model": self.model, "max_tokens": self.max_tokens, "system": system, "tools": tools,
                  "messages": self.messages}
        on_text = getattr(session, "stream_text", None)
        if not (self.stream and on_text):
            return self.client.messages.create(**kwargs), False
        shown = False
        with self.client.messages.stream(**kwargs) as stream:
            for piece in stream.text_stream:
                on_text(piece)
                shown = True
            return stream.get_final_message(), shown

    def _run_tools(self, session: ToolSession, content: list) -> None:
        """Run every tool_use block through the session and send the results back; on an interrupt or
        an error the calls without a result get one that says so before the exception goes on."""
        results = []
        try:
            for block in content:
                if getattr(block, "type", None) != "tool_use":
                    continue
                if block.name == DEPLOY_TOOL["name"]:
                    results.append({"type": "tool_result", "tool_use_id": block.id,
                                    "content": json.dumps(self._deployment(session, block.input))})
                    continue
                result = session.call_tool(block.name, block.input)
                results.append({"type": "tool_result", "tool_use_id": block.id, "content": result.as_json(),
                                "is_error": result.is_error})
        except KeyboardInterrupt:
            self.complete_tool_results("interrupted by the user before it finished", results)
            raise
        except Exception as exc:
            self.complete_tool_results(f"failed before it finished ({type(exc).__name__}: {exc})", results)
            raise
        self.messages.append({"role": "user", "content": results})

    def _deployment(self, session: ToolSession, tool_input: Any) -> dict:
        """The approval to plan the deployment Claude was asked for, and what to tell the user."""
        request = tool_input.get("request") if isinstance(tool_input, dict) else None
        self.deployment = approval = session.deployment_approval(str(request or "a deployment"))
        if approval["status"] == "pending":
            say = (f"Planning waits for the person's approval: they run `specpilot tool approve --id {approval['id']}` "
                   "in their terminal. Do not plan it now.")
        elif approval["status"] == "denied":
            say = "The person declined: do not plan it."
        else:
            say = ("Approved: plan it in words only, starting from this outline; no tool deploys or serves anything.\n"
                   + deployment_plan(session.store))
        return {"approval_id": approval["id"], "status": approval["status"], "say": say}

    def complete_tool_results(self, why: str, results: list[dict] | None = None) -> None:
        """When the last message is Claude's and asks for tools, add the ``tool_result`` of each call:
        those in ``results``, and for the others an error saying the call was ``why`` (nothing known)."""
        last = self.messages[-1] if self.messages else None
        if last is None or last["role"] != "assistant":
            return
        calls = [b for b in last["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
        if not calls:
            return
        results = list(results or [])
        answered = {r["tool_use_id"] for r in results}
        results += [{"type": "tool_result", "tool_use_id": b["id"], "is_error": True,
                     "content": json.dumps({"error": f"this {b['name']} call was {why}; its outcome is not known"})}
                    for b in calls if b["id"] not in answered]
        self.messages.append({"role": "user", "content": results})

    def _add_user_text(self, text: str) -> None:
        """Add the user's message; after a turn cut off at its tool results it joins that user message."""
        last = self.messages[-1] if self.messages else None
        if last is not None and last["role"] == "user" and isinstance(last["content"], list):
            self.messages[-1] = {"role": "user", "content": [*last["content"], {"type": "text", "text": text}]}
        else:
            self.messages.append({"role": "user", "content": text})

    @staticmethod
    def _answer(response: Any, streamed: bool) -> Reply:
        answer = "".join(b.text for b in response.content if getattr(b, "type", None) == "text").strip()
        if response.stop_reason == "max_tokens":
            answer += "\n(the answer was cut off at the output token limit)"
        return Reply(answer or "(no answer)", streamed=streamed)


def default_client() -> Any:
    """The SDK's client, reading ANTHROPIC_API_KEY (checked here, with a clear message) and
    ANTHROPIC_BASE_URL."""
    try:
        import anthropic
    except ImportError as exc:
        raise DependencyError("the anthropic package is not installed",
                              hint="pip install anthropic, or use the offline brain") from exc
    if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")):
        raise ParameterError("the anthropic brain needs an API key, and ANTHROPIC_API_KEY is not set",
                             hint="export ANTHROPIC_API_KEY=..., or use --brain local or --brain offline")
    return anthropic.Anthropic()
