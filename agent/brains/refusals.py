"""Requests specpilot declines whatever brain reads them: prompts asking for harm, deleting what it stores,
fine-tuning the model itself. Plain text patterns (agent.loop and the rule planner use them)."""

from __future__ import annotations

import re

I = re.IGNORECASE

# a prompt specpilot will not generate text for, even to time it
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
    r"\b(?:api|server|endpoint|site|service)s?\b", I)
# deleting stored runs or memory: specpilot has no tool for it
DELETE_WORDS = re.compile(r"\b(?:delete|wipe|erase|purge|clear|forget|remove|rm)\b.*\b(?:runs?|memory|history|data|"
                          r"results|everything|settings|tasks?|database)\b", I)
# changing or publishing the model itself: quantizing it, pushing it to a hub
MODEL_CHANGES = re.compile(r"\bquanti[sz]\w*\b|\bpush\w* (?:it |them |the model |my model )?to (?:the |a )?hub\b", I)
MODEL_TUNING = re.compile(r"\b(?:lora|qlora|adapters?|peft|full fine-?tun\w*)\b|"
                          r"\bfine-?tun\w* (?:the |my |a |our )?(?:[\w.]+ )?(?:model|target|"
                          r"qwen|llama|smollm|mistral)", I)
# writing someone's own text (a section of their report, an essay, a cover letter): no tool writes that
CONTENT_WRITING = re.compile(r"\bwrite (?:[\w'-]+ ){0,3}(?:section|chapter|essay|cover letter|abstract|homework|"
                             r"thesis|conclusion|introduction)s?\b(?! (?:of|for|about|on) (?:the |my |our |these "
                             r")?(?:runs|results|measurements|figures|speedups))", I)
