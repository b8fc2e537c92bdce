"""What the tools will not generate text for, whoever calls them (a brain, the JSON CLI, an MCP host): prompts
that ask for malware, weapons, stolen credentials or attacks on services. The tools' own content policy, checked
where their input is validated (tools.agent_tools.registry.parse_input), so no caller can time such a prompt."""

from __future__ import annotations

import re

from tools.errors import ParameterError

HARMFUL = re.compile(  # making malware or weapons, stealing credentials: a verb, at most three words, the thing
    r"\b(?:write|creat\w*|build\w*|mak\w*|code|develop\w*|generat\w*|design|program)(?:\s+[\w']+){0,3}?\s+"
    r"(?:key ?loggers?|"
    r"ransomware|malware|spyware|botnets?|trojans?|rootkits?|(?:computer )?virus(?:es)?|worms?|exploits?|phishing)"
    r"(?![\w-])|\b(?:mak\w*|build\w*|synthes\w*|produc\w*|assembl\w*|manufactur\w*|weaponi\w*)(?:\s+[\w']+){0,4}?\s+"
    r"(?:bombs?|explosives?|nerve agents?|"
    r"bioweapons?|chemical weapons?|methamphetamine|anthrax|ricin|sarin|botulinum|smallpox)(?![\w-])|"
    r"\btricks? (?:people|users|someone|them|victims) into (?:entering|giving|revealing|typing|sharing)\b|"
    r"\bsteal\w* (?:\w+ )?(?:passwords?|credentials|"
    r"credit cards?|cookies)\b|"
    r"\b(?:pull|extract|steal|exfiltrat\w*|rip|scrap\w*|lift)\w*\s+(?:the\s+)?(?:model'?s?\s+)?weights\s+(?:out\s+)?"
    r"(?:of|from)\s+(?:\w+'?s?\s+){0,2}(?:closed|proprietary|private|commercial|competitor'?s?|someone)|"
    r"\bphishing\b|\bpretend\w* to be (?:\w+'?s? ){0,2}(?:bank|paypal|tax office|irs|it department|support team)\b|"
    r"\b(?:grab|steal|take|copy|lift|exfiltrat\w*|harvest)\w* (?:\w+'?s? ){0,2}(?:api keys?|access tokens?|ssh keys?|"
    r"credentials|passwords?)\b|"
    r"\b(?:crypto ?-?miners?|coin ?miners?|cryptojack\w*|mine (?:crypto\w*|bitcoins?|monero))\b|"
    r"\b(?:flood\w*|ddos\w*|overload\w*|knock\w* (?:\w+ )?(?:over|offline)|take (?:\w+ )?down)\b.{0,60}"
    r"\b(?:api|server|endpoint|site|service)s?\b", re.IGNORECASE)
REFUSAL = "the tools will not generate text for that prompt, not even to time it"


def check_content(tool_name: str, field_name: str, text: object) -> None:
    """A ParameterError when prompt text asks for harm (HARMFUL); nothing otherwise."""
    if isinstance(text, str) and HARMFUL.search(text):
        raise ParameterError(f"the {field_name} of {tool_name}: {REFUSAL}", hint="give another prompt to measure")
