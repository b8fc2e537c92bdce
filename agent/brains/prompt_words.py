"""The prompt in a message and the instruction around it, read by the rule planner: a fenced block, quoted text, the
paragraph a cue announces, what follows "prompt:" or a colon, or an unquoted instruction after "on" ("SD vs PLD on
Translate to German: ..."); ``Message`` is one message read (its prompt, the rest, the methods and target it names).
Plain text processing, as in agent.brains.phrases.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from agent.brains.background import request_part
from agent.brains.number_words import digits
from agent.brains.param_words import DRAFT_PARAMETER, PEERS, assignments, find_params, without_values
from agent.brains.phrases import (COMPARE, EVERY_METHOD, FIGURES, GREETING, IN_SCOPE, METHOD_WORDS, NOT_ACTION,
                                  PARAM_WORDS, PAST, QUOTED, STRONG_ADVICE, asks_for_heads,
                                  RUN_ANYWHERE, RUN_LOOSE, SPEED_QUESTION, SUPERLATIVE, find_methods, find_target,
                                  fix_method_typos, named_methods, unquote)
from agent.brains.shorthand import expand_around, first_ask

I = re.IGNORECASE

FENCED = re.compile(r"```[\w+-]*\n(.*?)\n?```|<prompt>\s*(.*?)\s*</prompt>", re.DOTALL | I)  # a fence, <prompt> tags
# a cue in the paragraph before a blank line that the prompt follows ("... on this prompt?\n\n<prompt>")
PARAGRAPH_CUE = re.compile(r"\b(?:(?:this|the following|my|the) (?:prompt|text|input)|prompt below|below|following|"
                           r"next line)\b", I)
# a question put to the assistant after a colon ("before I try llama.cpp: is gguf installed here?"), no prompt
ASIDE = re.compile(r"\b(?:i|we|my|our|me|us|here|installed|should)\b", I)
QUESTION = re.compile(r"(?:why|how (?:does|do|is|can|come)|in what sense|what makes|when (?:would|should|do|does)|"
                      r"what (?:exactly )?(?:is|are|does) (?:it|they)|explain(?=\W*$)|"
                      r"which (?:one|method)|should (?:i|we))\b", I)  # "X: why is it exact?"
THANKS_AFTER = re.compile(r"(?<=[.?!])\s+(?:thanks?(?: you)?(?: so much| a lot| very much| in advance)?|thx|cheers|"
                          r"ty)[.!]*\s*$", I)
# a pasted traceback or log: not the prompt ("it died with this:\n  File ..., line 88\nOutOfMemoryError: ...")
LOG_LINE = re.compile(r"^\s*(?:Traceback \(most recent call last\):?|File \"[^\"]+\", line \d+.*|"
                      r"[\w.]*(?:Error|Exception)\b.*|\^+)\s*$")
# the cue a quoted prompt follows ("... is best for "our bot"? try it on 'How do I reset ...'")
QUOTE_CUE = re.compile(r"(?:\bon|\bfor|\bprompt|\btext|\bquestion|\bsentence|\bwith|\busing|:|>>>?)\s*$", I)
EXPLICIT_CUE = re.compile(r"(?i:\bprompt(?: is)?\s*(?:[:=]|>>>?|->|→))(?!//)|(?i:\bprompt is\s+)(?=[A-Z])|"
                          r"(?i:\b(?:with|using) (?:the )?prompt\s+)(?=[A-Z])|"
                          r"(?i:\b(?:using|with|on|for) the (?:text|input|following)\s*[:.]?\s+|"
                          r"\b(?:on|for) this(?: one| prompt)?\s*[?:.]\s+)"
                          r"(?=[A-Z\"'«“])(?!(?:I|We|You|From|That|Which|Before|Earlier|Again|Last|Above|Below)\b)")

NO_PROMPT_VERB = re.compile(r"\W*(?:please\s+)?(?:train|fit|install|upgrade|share|upload|save|store|persist|"
                            r"remember|check)\b(?!.*\b(?:on|prompt)\W*$)", I)
RUN_LEVEL = ("max_new_tokens", "temperature", "top_p", "top_k", "seed", "repeats", "warmup", "dtype", "threads")
# what follows a colon that asks the assistant, not the model ("tom's settings: please save eagle depth 6 ...")
ASKS_ASSISTANT = re.compile(r"^\W*(?:please|pls|kindly)\s+(?:save|store|remember|keep|set|compare|measure|time|"
                            r"benchmark|install|train|share|check|run|rerun|look up|recall)\b|"
                            r"^\W*(?:for \w+,? )?always (?:use|run|set|keep)\b", I)  # "...: for medusa always use ..."


def instruction_not_prompt(prompt: str) -> bool:
    """Whether the text read as a prompt is the instruction itself: a request to the assistant, or a method's
    parameter values ("medusa: posterior_threshold 0.05, posterior_alpha 0.2, and drop the rest")."""
    first = assignments(digits(re.sub(r"^\W*(?:a|an|the)\s+", "", prompt[:60], flags=I)))
    return bool(ASKS_ASSISTANT.match(prompt)) or bool(first and first[0][0].start() == 0 and
                                                       first[0][1] not in ("target", "draft", "dtype"))


# an unquoted prompt after "on" or "for" that starts as an instruction or a question does ("on Translate to ...")
ON_INSTRUCTION = re.compile(r"\s(?:on|for)\s+(?=(?:Write|Translate|Explain|Summari[sz]e|List|Tell|Describe|Give|"
                            r"Generate|Rewrite|Implement|Create|Compose|Convert|Solve|Compute|Calculate|Find|Name|"
                            r"Classify|Extract|Answer|Define|Outline|Draft|Suggest|What|How|Why|Who|When|Where|Which)"
                            r"\s+\S)")


def without_log(text: str) -> str:
    """``text`` without the lines of a pasted traceback (and the code line under each ``File ...`` line)."""
    lines, kept, after_file = text.split("\n"), [], False
    for line in lines:
        drop = bool(LOG_LINE.match(line)) or (after_file and line.startswith(" "))
        after_file = bool(re.match(r'\s*File "', line))
        kept.append("" if drop else line)
    return "\n".join(kept)


# a quoted error message is no prompt ("`medusa` fails with 'no heads found'")
ERROR_CUE = re.compile(r"\b(?:fails?|failed|failing|errors?(?: out)?|errored|crash\w*|dies|died|complains?|"
                       r"message|throws|raised?|says)\s+(?:with\s+)?(?:an? |the )?(?:error |message )?$", I)


def first_quote(text: str) -> re.Match | None:
    """The quoted prompt: the first quote after a cue ("on", "prompt", ":"), else the first quote."""
    quotes = [q for q in QUOTED.finditer(text) if not ERROR_CUE.search(text[max(0, q.start() - 30):q.start()])
              and not (len(q.group(0).split()) == 1 and find_methods(q.group(0)))]  # "`medusa` fails": a method
    cued = [q for q in quotes if QUOTE_CUE.search(text[max(0, q.start() - 12):q.start()])]
    return (cued or quotes or [None])[0]


def run_intent(text: str) -> bool:
    """Whether ``text`` asks for something to be run or compared (a method, a run verb, a comparison, a speed
    question): what a prompt in the message is for; "cat memory: saved params" or a quoted remark holds none."""
    return bool(find_methods(text) or RUN_LOOSE.search(text) or COMPARE.search(text) or EVERY_METHOD.search(text)
                or SPEED_QUESTION.search(text) or SUPERLATIVE.search(text) or re.search(r"\bprompt\b", text, I))


# the body under an issue's title starts as a person tells it ("I set k for draft last week. ...")
BODY_START = re.compile(r"(?:I|I'm|I've|I'd|We|We're|We've|My|Our|Just|Since|After|Upgraded|Read|Tried|Missed|"
                        r"Using|Running|On|Xeon|specpilot|torch|transformers|python|version|`)\b|v?\d+\.\d+", I)


def titled(first: str, rest: str) -> bool:
    """Whether a message is a title line over a body ("Saved draft params not picked up?\nI set k ..."): the rest is
    then no prompt but the body of the ask."""
    return first.rstrip().endswith("?") or (not RUN_LOOSE.search(first) and not COMPARE.search(first)
                                            and bool(BODY_START.match(rest.lstrip())))


def find_prompt(text: str) -> str | None:
    """The prompt inside a run request: a fenced code block, quoted text, the paragraph after a blank line that a cue
    announces, everything after "prompt:" or the first colon, or the lines after the first where the first line holds
    no colon ("run the baseline on this\\n<prompt>"); a last line that only sets run settings is not part of it."""
    text = without_log(text)
    first, _, rest = text.strip().partition("\n")
    if rest.strip() and GREETING.match(first) and len(first.split()) <= 5:  # "Hi there,\n\n<the message>"
        text = rest
    fenced = FENCED.search(text)
    if fenced and (fenced.group(1) or fenced.group(2) or "").strip():
        return (fenced.group(1) or fenced.group(2)).strip("\n")
    prompt = _prompt_in(text)
    if prompt and (thanked := THANKS_AFTER.search(prompt)) and thanked.start() > 0:  # "...: <prompt> Thank you!"
        prompt = prompt[:thanked.start()]
    lines = (prompt or "").rstrip().split("\n")
    # the lines from ``at`` on only set run settings ("prompt: ...\nmax 64 new tokens", "2. prompt: ...\n3. 3 repeats");
    # every line a setting ("target X\ndraft Y\nk 5"): no prompt
    for at in range(len(lines)):
        if all(not line.strip() or (len(line.split()) <= 8 and find_params(line)) for line in lines[at:]):
            return "\n".join(lines[:at]).strip() or None
    return without_settings_sentence(prompt)


# "...: Write a palindrome checker. Use 256 new tokens.": a last sentence that only sets the run
SETTINGS_SENTENCE = re.compile(r"(?<=[.!?])\s+((?:please\s+)?(?:use|with|at|set|generate|limit|cap|run|do|make it|"
                               r"and|max|keep)\b(?:[^.!?\n]|\.(?=\d)){0,200}[.!]?)\s*$", I)


def without_settings_sentence(prompt: str | None) -> str | None:
    """``prompt`` without a last sentence that only sets run settings ("Use 256 new tokens.")."""
    last = SETTINGS_SENTENCE.search(prompt or "")
    said = find_params(last.group(1)) if last else {}
    if said and (len(last.group(1).split()) <= 8 and set(said) <= set(RUN_LEVEL) or
                 len(last.group(1).split()) <= 30 and len(said) >= 2):  # "Please generate 256 new tokens, depth 6 ..."
        return prompt[:last.start()].strip()
    return prompt


def _prompt_in(text: str) -> str | None:
    """:func:`find_prompt`'s reading of a message without fences, tags or a greeting line."""
    quoted = first_quote(text)
    parts = re.split(r"\n\s*\n", text.strip(), maxsplit=1)
    if len(parts) == 2 and PARAGRAPH_CUE.search(parts[0]) and not (quoted and quoted.start() < len(parts[0])):
        announced = parts[1].strip().partition("\n")
        if announced[2].strip() and re.search(r":\s*$", announced[0]) and run_intent(announced[0]):
            return announced[2].strip()  # "title\n\nRun ngram on this, 5 repeats:\n<prompt>"
        return parts[1].strip()
    # "use this prompt: Rewrite 'the cat sat' ...": all of it
    colon = EXPLICIT_CUE.search(text)
    if colon and not quoted and text[colon.end():].strip():  # "Prompt = Write a limerick"
        return text[colon.end():].strip()
    if colon is None:  # "... on: Translate 'good morning' into French", not "head to head: a vs b, prompt is '...'"
        colon = re.search(r":(?!//)(?!\s*\d)", text)
        between = text[colon.end():quoted.start()] if colon and quoted else ""
        colon = colon if colon and quoted and not re.search(r"\bprompt\b", between, I) else None
    inside = colon and quoted and colon.end() <= quoted.start() and text[colon.end():quoted.start()].strip()
    instruction = inside and (re.search(rf"\b(?:{'|'.join(METHOD_WORDS.values())})\b", inside, I)  # "ok: run X on 'p'"
                              or FIGURES.search(inside) or SPEED_QUESTION.search(inside)  # "...: how fast on 'p'?"
                              or COMPARE.search(inside) or EVERY_METHOD.search(inside)  # "...: compare all on 'p'"
                              or (not EXPLICIT_CUE.search(text) and RUN_ANYWHERE.search(inside)))
    if inside and not instruction and unquote(text[colon.end():]) != quoted.group(0).strip("'\"“”`"):
        return text[colon.end():].strip()  # quotes inside the prompt, not around it
    if quoted:
        return next(g for g in quoted.groups() if g)
    first, _, rest = text.strip().partition("\n")
    # "..., prompt below\n<prompt>"
    cue = re.search(r"(?::|\b(?:below|following|follows|this|next line))\W*$", first, I)
    if rest.strip() and (cue or not re.search(r":(?!//)(?!\s*\d)", first)) and not NO_PROMPT_VERB.match(first) \
            and (cue or not titled(first, rest)):
        asked, _, after = rest.strip().partition("\n")
        if not cue and after.strip() and re.search(r":\s*$", asked) and run_intent(asked):
            return after.strip()  # "a title\nRun ngram on this, 5 repeats:\n<prompt>"
        return rest.strip()  # not "- train medusa heads\n- 3 heads\n- 500 steps": its settings
    if (on := ON_INSTRUCTION.search(text)) and run_intent(text[:on.start()]):  # "A vs B on Translate to German: ..."
        return text[on.end():].strip()
    colon = re.search(r":(?!//)(?!\s*\d)", text)  # not the colon of a URL, nor of "k: 6"
    if colon:
        head, tail = text[:colon.start()], text[colon.end():].strip()
        cued = re.search(r"\b(?:prompt|text|input)\b(?![- ]lookup)", head, I)
        asked = not cued and not (RUN_LOOSE.search(head) and find_methods(head))
        advice = PARAM_WORDS.search(text) and STRONG_ADVICE.search(tail)  # "lookahead here: which window is best?"
        aside = asked and tail.endswith("?") and (ASIDE.search(tail) or IN_SCOPE.search(tail) or QUESTION.match(tail)
                                                  or advice)
        other = re.match(r"\W*(?:please\s+)?(?:train|fit|install|share|upload|save|store|persist|remember|pin)\b", head,
                         I) or \
            re.match(r"\W*(?:please\s+)?(?:train|fit)\b", tail, I) or \
            asks_for_heads(head)  # "Train heads: files", "heads: train them"
        if tail and not head.lower().startswith(("http", "https")) and not aside and not other and \
                (cued or run_intent(head)):
            return tail
    return None


@dataclass
class Message:
    """One message, read: the prompt it carries, the rest (``head``), the methods and target it names."""

    text: str
    prompt: str | None
    head: str
    methods: list[str] = field(default_factory=list)
    target: str | None = None
    request: str = ""  # the sentences of ``head`` that ask, without those that only set the scene

    @classmethod
    def read(cls, text: str) -> Message:
        prompt = find_prompt(text)
        if prompt and not QUOTED.search(text) and instruction_not_prompt(prompt):
            prompt = None
        text = expand_around(text, prompt)
        if (second := first_ask(text, prompt)) is not None:  # "run it, then save those": the first ask
            prompt, text = (prompt if prompt and text.find(prompt) < second else None), text[:second]
        asked = prompt and find_methods(prompt) and PAST.search(prompt) and FIGURES.search(prompt)
        rest = fix_method_typos(text.replace(prompt, " ", 1)) if prompt else ""
        if (asked and not QUOTED.search(text)) or (prompt and not run_intent(rest)):
            prompt = None  # "the fibonacci one: what tok/s did medusa get?" asks about a run; it is no prompt
        head = text.replace(prompt, " ", 1) if prompt else text  # the prompt may say anything: read the rest
        head = NOT_ACTION.sub(" ", fix_method_typos(head))
        named = without_values(DRAFT_PARAMETER.sub(" ", PEERS.sub(" ", head)))  # "HF's assisted generation" is a peer
        return cls(text=text, prompt=prompt, head=head, methods=named_methods(named),
                   target=find_target(head), request=request_part(head))

    def has(self, pattern: re.Pattern) -> bool:
        """Whether the instruction part (not the prompt) matches ``pattern``."""
        return bool(pattern.search(self.head))

    @property
    def words(self) -> int:
        return len(self.head.split())
