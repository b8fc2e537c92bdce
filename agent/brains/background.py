"""The sentences of a message that ask for something, without the ones that only set the scene.

Engineers often write two or three sentences of background before the request: their GPU, what a
colleague measured, what they use in production ("We have one RTX 4090 in the lab and last week the
baseline gave 95 tok/s. Please run medusa on ..."). Read whole, such a message names other hardware,
production and figures that are no part of what is asked. :func:`request_part` keeps the sentences
that ask (a question, an imperative, "please", "can you", "I want ...") and drops the statements
around them, where a message has both.
"""

from __future__ import annotations

import re

I = re.IGNORECASE

# a sentence ends at . ! ? ; followed by a space and a capital, a quote or a digit (not "e.g. the", "1.5B")
SENTENCE_END = re.compile(r"(?<=[.!?;])\s+(?=[A-Z\"'(`0-9])")
REQUEST_MARK = re.compile(  # not "greedy numbers don't tell me much"
    r"\b(?<!n't )(?<!not )(?:please|pls|plz|kindly|can (?:you|we|i)|could (?:you|we|i)|would you|will you|"
    r"i(?:'d| would) (?:like|love)|"
    r"(?:i|we) (?:want|need|wish)|we(?:'d| would) like|let'?s|show me|tell me|give me|help me|remind me|"
    r"go ahead|i ask|i'?m asking|(?:i|we) (?:are|am) asking)\b", I)
LEAD = r"^\W*(?:(?:so|ok(?:ay)?|now|then|also|and|but|first|just|btw|next|finally|therefore|hence)\W+)*"
IMPERATIVE = re.compile(
    LEAD + r"(?:run|rerun|re-run|compare|measure|time|benchmark|bench|test|try|explain|describe|save|remember|store|"
    r"keep|set|use|install|upgrade|train|share|send|post|upload|copy|put|write|make|generate|create|list|show|give|"
    r"tell|check|look|find|pull|fetch|recommend|suggest|advise|throw|forget|start|go|do|don'?t|what|which|how|"
    r"why|where|when|who|is|are|does|did|should|shall|would|could|can|may|might|will|lay|walk|print|report|"
    r"restate|redo|repeat|include|add|skip|leave|sweep|pin|force|switch|change|update|reset|stop)\b", I)


def sentences(text: str) -> list[str]:
    return [part for part in SENTENCE_END.split(text.strip()) if part.strip()]


def asks(sentence: str) -> bool:
    """Whether a sentence asks for something (a question, an imperative, a request phrase)."""
    return sentence.rstrip().endswith("?") or bool(IMPERATIVE.match(sentence)) or bool(REQUEST_MARK.search(sentence))


def request_part(text: str) -> str:
    """``text`` without its background sentences where it has sentences that ask and others that do not;
    ``text`` itself otherwise (one sentence, or no sentence that asks)."""
    parts = sentences(text)
    if len(parts) < 2:
        return text
    asking = [part for part in parts if asks(part)]
    if not asking or len(asking) == len(parts):
        return text
    return " ".join(asking)


QUOTED_LINE = re.compile(r"^\s*>(?!>)")  # "> what even is medusa": a line quoted from a thread (">>>" is a cue)
MENTION = re.compile(r"^(\s*)@[\w.-]+[,:]?\s+(?=\S)", re.MULTILINE)  # "@specpilot can you ...", "@sam let's check"


def without_thread(text: str) -> str:
    """``text`` without the lines it quotes from a thread before the request ("> medusa says no heads found\\nright,
    train medusa heads ...") and without the @mentions that start its lines; ``text`` itself where nothing but
    quoted lines is left."""
    lines = text.split("\n")
    lead = 0
    while lead < len(lines) and (QUOTED_LINE.match(lines[lead]) or not lines[lead].strip()):
        lead += 1
    rest = "\n".join(lines[lead:]) if 0 < lead < len(lines) else text
    return MENTION.sub(r"\1", rest).strip() or text
