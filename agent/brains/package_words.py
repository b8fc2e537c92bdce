"""Package names in an install request, as pip writes them: "install gguf with version at least 0.10 and
llama-cpp-python" is gguf>=0.10 and llama-cpp-python; filler words and options are no packages.
"""

from __future__ import annotations

import re

from tools.agent_tools.install import check_package
from tools.errors import ParameterError

I = re.IGNORECASE

INSTALL_FILLER = {"now", "also", "both", "all", "those", "these", "upstream", "latest", "newest", "it", "them",
                  "the", "package", "packages", "please", "for", "me", "and", "then", "a",
                  "approved", "ok", "okay", "yes", "pip", "install", "with", "using", "to", "this", "that",
                  # words that name no package ("install something so it goes faster": ask which)
                  "something", "anything", "everything", "stuff", "whatever", "so", "go", "goes", "faster", "quicker",
                  "needed", "necessary", "missing", "required", "what", "is", "are", "i", "we", "need", "make", "run",
                  "all", "can", "you", "could", "would", "should", "will", "just", "some", "any", "of", "on", "in",
                  "ones", "one", "deps", "dependencies", "dependency", "requirements", "libraries", "libs", "things"}
VAGUE_PACKAGES = re.compile(r"\binstall\b.*\b(?:something|anything|whatever|stuff|what(?:'s| is)? needed|"
                            r"what (?:i|we) need|everything)\b", I | re.DOTALL)


# "gguf version 0.10 or newer", "transformers version 4.46": a version in words, written as pip writes it
VERSION_WORDS = re.compile(r"\b([A-Za-z][\w.-]*)\s+(?:with\s+)?(?:(?:version|v)\s*(?:(at least|of at least|>=|"
                           r"min(?:imum)?)\s*)?|(at least)\s+)(\d+(?:\.\d+)*)(\s+(?:or|and)\s+(?:newer|later|"
                           r"above|up|higher))?", I)  # "gguf with version at least 0.10": gguf>=0.10


def pinned(match: re.Match) -> str:
    return f"{match.group(1)}{'>=' if match.group(2) or match.group(3) or match.group(5) else '=='}{match.group(4)}"


def find_packages(text: str) -> list[str]:
    """Package names after the word 'install' (plain names only; filler words skipped); none where the
    message leaves them open ("install something so it goes faster": the planner asks which)."""
    if VAGUE_PACKAGES.search(text):
        return []
    found = [text[m.end():] for m in re.finditer(r"\binstall\b", text, I)  # each "install" verb, the first
             if not re.search(r"\b(?:the|an|this|that|my|your|its)\s+$", text[:m.start()], I)]
    match = re.search(r"\bget\b(.+)\binstalled\b", text, I) or \
        re.search(r"\bgo ahead and (?:get|grab)\b(.+?)\b(?:onto|on|into)\b", text, I) or \
        re.search(r"^\W*pip\s*:(.*)", text, I | re.DOTALL)
    for tail in found + ([match.group(1)] if match else []):  # naming packages ("approved the install already ...
        named = _packages_in(tail)  # install lade==0.4.1": the second), or "pip: gguf>=0.10, llama-cpp-python"
        if named:
            return named
    return []


def _packages_in(tail: str) -> list[str]:
    asked = re.split(r"[.;!?](?:\s|$)|\b(?:so|because|since|as|which|that|from|within|into|inside|in|via|we|i|"
                     r"approval|approved)\b",
                     tail, maxsplit=1)[0]
    words = re.split(r"[\s,;]+", VERSION_WORDS.sub(pinned, asked))
    return [w for w in (w.strip(".!?'\"") for w in words) if w and w.lower() not in INSTALL_FILLER and is_package(w)]


def is_package(word: str) -> bool:
    """Whether a word is a package name specpilot would install (no option, path, URL or archive)."""
    try:
        check_package(word)
    except ParameterError:
        return False
    return True
