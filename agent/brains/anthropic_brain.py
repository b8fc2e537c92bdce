"""The Claude brain: the official Anthropic SDK's Messages API with tool use, in a manual loop.

Each turn: send the conversation with the registry's tools; while the model stops for
``tool_use``, run every requested tool through the session (approval gate included) and send the
results back as ``tool_result`` blocks (``is_error`` on failure); stop at the model's answer or
after ``max_iterations`` rounds. Model id from ``SPECPILOT_MODEL``; key and base URL from
``ANTHROPIC_API_KEY`` and ``ANTHROPIC_BASE_URL`` (read by the SDK).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from agent.brains.base import Reply
from agent.loop import Session
from tools.agent_tools import registry
from tools.errors import DependencyError
from tools.agent_tools.explain import prompt_text

log = logging.getLogger(__name__)

MODEL_ENV = "SPECPILOT_MODEL"
DEFAULT_MODEL = "claude-sonnet-5-5"
MAX_ITERATIONS = 12
MAX_TOKENS = 4096


def system_prompt(session: Session) -> str:
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
    """Claude with specpilot's tools. Keeps the conversation's messages across turns."""

    name = "anthropic"

    def __init__(self, client: Any = None, model: str | None = None, max_iterations: int = MAX_ITERATIONS,
                 max_tokens: int = MAX_TOKENS):
        if client is None:
            try:
                import anthropic
            except ImportError as exc:
                raise DependencyError("the anthropic package is not installed",
                                      hint="pip install anthropic, or use the offline brain") from exc
            client = anthropic.Anthropic()
        self.client = client
        self.model = model or os.environ.get(MODEL_ENV) or DEFAULT_MODEL
        self.max_iterations = max_iterations
        self.max_tokens = max_tokens
        self.messages: list[dict] = []

    def respond(self, session: Session, text: str) -> Reply:
        """Run the tool-use loop for one user message; return Claude's answer."""
        import anthropic

        start = len(self.messages)
        self.messages.append({"role": "user", "content": text})
        tools = registry.anthropic_tools()
        system = system_prompt(session)
        for _ in range(self.max_iterations):
            try:
                response = self.client.messages.create(model=self.model, max_tokens=self.max_tokens, system=system,
                                                       tools=tools, messages=self.messages)
            except anthropic.APIError as exc:
                del self.messages[start:]  # forget the failed turn, so the next one starts clean
                log.warning("Anthropic API error: %s", exc)
                return Reply(f"The Claude API call failed ({type(exc).__name__}: {exc}). Nothing else was done; "
                             "try again, or use the offline brain (`specpilot chat --brain offline`).",
                             unfinished="the model service failed before answering")
            self.messages.append({"role": "assistant", "content": [_block_param(b) for b in response.content]})
            if response.stop_reason == "pause_turn":
                continue
            if response.stop_reason != "tool_use":
                answer = "".join(b.text for b in response.content if getattr(b, "type", None) == "text").strip()
                if response.stop_reason == "max_tokens":
                    answer += "\n(the answer was cut off at the output token limit)"
                return Reply(answer or "(no answer)")
            results = []
            for block in response.content:
                if getattr(block, "type", None) != "tool_use":
                    continue
                result = session.call_tool(block.name, block.input)
                results.append({"type": "tool_result", "tool_use_id": block.id, "content": result.as_json(),
                                "is_error": result.is_error})
            self.messages.append({"role": "user", "content": results})
        return Reply(f"I stopped after {self.max_iterations} tool rounds without a final answer; what was done is "
                     "recorded in the task.", unfinished=f"stopped after {self.max_iterations} tool rounds")
