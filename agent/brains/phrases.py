"""What the rule planner reads in a message: the methods, prompt, target model, parameter values and
hardware it names, and which kind of request it is.

Requests are matched on the words that carry their meaning (a figure word, a verb of saving, a
hardware name), not on whole phrasings, so the same request in other words maps the same way.
Everything here is plain text processing: no tools, no memory.
"""

from __future__ import annotations

import difflib
import re

from agent.brains.background import sentences
from agent.brains.package_words import find_packages, is_package  # noqa: F401  (read from here too)
from tools.engine.params import ACCELERATED, METHOD_NAMES
from tools.models import BUILTIN_MODELS, DEFAULT_TARGET, SMALL_TARGET

I = re.IGNORECASE

# the words that name a method besides its own name; the methods are read from the method table, the
# accelerated ones first (so "draft versus the baseline" names draft)
METHOD_SYNONYMS = {
    "draft": r"draft(?:[- ]model)?(?![- ](?:heads?(?! to\b)|trees?|vocab\w*|depth|its|"
             r"their)\b)|speculative(?: decoding| sampling)?|"
             r"spec decoding|assisted|helper model|leviathan(?: et al\.?)?|"
             r"small(?:er)?[- ]model[- ]guess\w*|small(?:er)? (?:model|one) (?:that )?(?:guess|propos|suggest)\w*",
    "medusa": r"medusa|(?:extra|additional) (?:decoding )?heads|cai et al\.?(?:'s)?",
    "lookahead": r"look[- ]?ahead|jacobi",
    "eagle": r"eagle(?:-?[123])?|(?:one-layer|feature-level)\s+(?:draft\s+)?head|feature-level\s+draft\w*|"
             r"head reading (?:the )?(?:target'?s )?hidden",
    "ngram": r"n-?gram(?![- ](?:pool|cache|size|window))|prompt[- ]lookup|pld|"
             r"copy(?:ing)? (?:[\w-]+ ){0,2}(?:from|out of) the prompt",
    "baseline": r"baseline|plain(?: \w+)?(?: generation| decoding)|plain(?! (?:english|words|terms|language|text))|"
                r"vanilla|autoregressive|normal generation|"
                r"no speculation",
}
METHOD_WORDS = {m: METHOD_SYNONYMS.get(m, re.escape(m))
                for m in (*ACCELERATED, *(n for n in METHOD_NAMES if n not in ACCELERATED))}
TOPIC_WORDS = {
    "tradeoffs": r"trade-?offs?|differ\w*|compare|comparison|versus|\bvs\.?\b|which (?:method|one) (?:is|should)|"
                 r"pros ?(?:/|&) ?cons|the catch|downsides?|drawbacks?|"
                 r"pros and cons|(?:three|four|five|all the|the) methods|(?:one|a) (?:method|approach) over|"
                 r"when (?:would|should) (?:i|you|one|we) (?:use|pick|choose|prefer)",
    "eagle": r"eagle",
    "medusa": r"medusa|(?:extra|additional) (?:decoding )?heads|cai et al",
    "lookahead": r"look[- ]?ahead|jacobi",
    "draft": r"draft(?![- ](?:heads?(?! to\b)|trees?|vocab\w*))|speculative|assisted|helper model|leviathan|"
             r"small(?:er)? (?:model|one) (?:that )?(?:guess|propos|suggest)\w*",
}
# "speculative decoding methods" names all of them, not the draft-model method
GENERIC_METHODS = re.compile(r"\bspeculative[- ]decoding (?:methods|techniques|approaches|variants)\b", I)
# "nothing speculative", "without speculation": plain decoding
NOT_SPECULATIVE = re.compile(r"\b(?:no|nothing|without|not|non)[- ](?:\w+ )?speculat\w*", I)
LEADING_METHOD = re.compile(rf"[\s,]*({'|'.join(METHOD_WORDS)}|all)(?=[\s,:]|$)", I)
# a run id or its prefix: hex, with digits and letters (4 characters after the word "run")
RUN_ID = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{6,12}\b|(?<=\brun )(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])"
                    r"[0-9a-f]{4,5}\b|(?:(?<=starting with )|(?<=beginning with )|"
                    r"(?<=starts with ))(?=[0-9a-f]*\d)[0-9a-f]{4,5}\b")
# quoted text; single quotes hold 3+ characters, and an apostrophe is no quote ("i'm sure it couldn't" quotes
# nothing; 'don't stop' is quoted whole)
QUOTED = re.compile(r"\"([^\"]+)\"|“([^”]+)”|«\s*([^»]+?)\s*»|(?<!\w)'((?:[^']|'(?=\w)){3,}?)'(?!\w)|"
                    r"(?<!`)`([^`\n]+)`(?!`)")
# a URL, a path (not the "/medusa" of "draft/medusa"), or dir/file.ext
URL_OR_PATH = re.compile(r"(https?://\S+|\\\\\S+|(?<![\w/.~])(?:~|\.{1,2})?/\S+|(?<![\w/])[\w.-]+/[\w./-]*\.\w{1,5}\b)")

# ---- kinds of request (each a few meaning-bearing words) -------------------------------------
COMPARE = re.compile(r"\b(?:compar\w*|versus|vs\b\.?|side[- ]by[- ]side|head[- ]to[- ]head|pit|stacks? up|"
                     r"against(?!\s+(?:the\s+|a\s+|my\s+)?(?:target|model|qwen|smol))|"
                     r"shoot-?out|race)\b", I)
# "does draft still beat medusa?": a comparison where two methods are named ("beat 2x" is a figure)
BEATS = re.compile(r"\b(?:beats?|outperforms?|better than|worse than)\b", I)
SUPERLATIVE = re.compile(r"\b(?:fastest|quickest|faster|quicker|best|winner|wins|more (?:quick|fast|rapid)\w*)\b", I)
# every method at once ("benchmark every technique on ...", "all the approaches")
EVERY_METHOD = re.compile(r"\b(?:every|each|all(?: (?:the|of the|your))?) (?:techniques?|methods?|approach(?:es)?|"
                          r"decoders?|variants?|strateg(?:y|ies)|one)\b|\ball of them\b", I)
WHICH = re.compile(r"\b(?:which|what) (?:one|method|of (?:them|these|the methods))\b|\ball (?:the )?methods\b", I)
# a question about differences rather than a request to measure them
TRADEOFF_QUESTION = re.compile(r"\b(?:trade-?offs?|differen\w*|pros and cons|pros ?(?:/|&) ?cons|the catch|downsides?|"
                               r"drawbacks?|how do .* compare|how does .* compare|"
                               r"when (?:would|should|do) (?:i|you|one|we) (?:use|pick|choose|prefer)|"
                               r"what(?:'s| is| are) the (?:difference|trade))", I)
# another request that mentions a comparison ("share the comparison", "write a report comparing ...")
OTHER_ACTIONS = re.compile(r"\b(?:install|share|upload|publish|train|(?:write|make|create) (?:a |the )?report)\b", I)
STORED = re.compile(r"\b(?:runs|results?|figures?|speedups?|measured|stored)\b", I)
PAST = re.compile(r"\b(?:was(?! wondering)|were(?! wondering)|did|had|have i|have we|last|previous|earlier|stored|"
                  r"so far|my \w+ runs?)\b", I)
FIGURES = re.compile(r"\b(?:speed-?ups?|(?:the|my|what|whats|what's) speed ups?|figures?|results?|"
                     r"(?<!typical )acceptance(?: rate)?|tokens?/s|tok/s|throughput|run ids?|"
                     r"tokens? (?:per|a) second|scored?|scores|"
                     r"how (?:much )?fast(?:er)?|how quick\w*|timings?|numbers|"
                     r"how (?:did|does|do) .{1,40} (?:do|perform|fare)|"
                     r"what (?:did|does) (?:[\w']+ ){1,4}(?:get|score|reach|manage|show))\b",
                     I)
RUNS_QUESTION = re.compile(r"\bruns\b|\b(?:my|the|that|last|previous|latest|newest|recent|any|every|each) "
                           r"(?:\w+ )?run\b|"
                           r"\brun ids?\b", I)
ASKING = re.compile(r"\b(?:what|whats|what's|which|show|how|tell|did|was|were|list|give|see|find|display|pull up|"
                    r"bring up|get|"
                    r"fetch|retrieve|look up|print)\b", I)
SPEED_QUESTION = re.compile(r"\b(?:how (?:much )?fast(?:er)?|speed-?ups?|how quick\w*|faster|slower|buys? (?:me|us))\b",
                            I)
RUN_ANYWHERE = re.compile(r"\b(?:run|try|benchmark|measure|time|test|execute|reproduce)\b", I)
RUN_LOOSE = re.compile(r"\b(?:run|try|benchmark|measure|speed up|accelerate|generate|test|time|reproduce)\b", I)
AGAIN = re.compile(r"\b(?:again|rerun|re-run|fresh|anew)\b", I)

RECALL_STRONG = re.compile(
    r"\b(?:last time|last session|previous (?:session|time|conversation|chat)|(?:our|the|my) history|"
    r"history of|remind me|what do you (?:remember|know about me)|do you remember|what (?:is|'s) saved|"
    r"(?:saved|stored|current) (?:settings|param\w*|defaults?|values)|my (?:settings|param\w*|defaults)|"
    r"(?:did|have) (?:i|we) (?:al+re?a?dy )?(?:save|saved|set|configured)|unfinished|left (?:off|undone|open|to do)|"
    r"(?:stored|saved|kept|held|anything) in (?:your |the )?memory|what(?:'s| is) my saved \w+|"
    r"what(?:'s| is) (?:stored|saved|remembered)\b(?! (?:as|under))|"
    r"(?:answer\w*|said|told you|chose|picked) (?:in|during|at) (?:the |my )?onboarding|onboarding answers?|"
    r"where (?:were|did) we|(?:do|did) (?:i|we) have (?:\w+ )?(?:saved|stored)|have (?:i|we) (?:\w+ )?saved|"
    r"\b(?:left|leave|leaving) (?:\w+ ){0,3}half[- ](?:done|finished)|"
    r"(?:what does|what's in|what is in) (?:your |the |my )?memory|memory holds?\b|"
    r"(?:pending|open|my) tasks?|what(?:'s| is) (?:left|pending)|(?:we|i) (?:left|stopped)|recap|"
    r"what (?:were|was) (?:we|i) (?:doing|working)|know about (?:me|my)|my setup|"
    r"(?:param\w*|settings|defaults|values) (?:do |did |have )?(?:i|we) (?:\w+ )?(?:have )?(?:saved|stored|set)|"
    r"tasks? (?:are )?(?:still )?(?:pending|open|unfinished|left)|finished (?:ones|tasks)|"
    r"(?:still|yet) not (?:yet )?done|(?:is|are) (?:still )?not (?:yet )?(?:done|finished)|"
    r"tasks? (?:i|we) (?:finished|completed|did)|open ones|(?:in )?your memory|what do you have on me|"
    r"(?:did|have) (?:i|we) (?:already )?(?:tell|told|give|gave|mention\w*) you|repeat myself|"
    r"(?:anything|something|what(?:'s| is)?) (?:still )?(?:pending|outstanding|unfinished|open)|"
    r"(?:yesterday'?s?|earlier|previous|last) (?:session|chat|conversation)|"
    r"what(?:'s| is| are) my (?:current |saved )?(?:defaults?|settings?)|did (?:we|i) (?:ever )?finish|"
    r"everything in (?:your |the )?memory|"
    r"(?:same as|like) (?:yesterday|last time|before)|(?:have|got) (?:\w+ )?stored about (?:me|us))\b", I)
RECALL_WEAK = re.compile(r"\b(?:so far|before(?! (?:i|we|you|rollout|starting|anything|any|the|my|\w+ing)\b)|"
                         r"earlier (?:session|runs?|today|on)|what (?:did|have) (?:we|i|you) "
                         r"(?:do|done|did|run|measured?|tr(?:y|ied))|history|previously)\b", I)
SAVE_VERBS = re.compile(r"\b(?:save|remember|store|"
                        r"set(?! up| (?:it|that|this|them) (?:going|off|up|running))(?!\s*(?:to|=|at|of)\s*-?\d)|"
                        r"change|update|from now on|by default|default|"
                        r"always|pin|replace|keep (?:only|just)|(?:want|like|need)\b.{0,30}\b(?:settings?|"
                        r"param\w*|values?|"
                        r"config\w*)\b.{0,40}\b(?:stored|saved|remembered|"
                        r"persisted)|defaults?(?=\s*(?:→|->|=>))|"
                        r"keep using|switch|persist|stick with|(?:settings?|param\w*|values?) to keep|"
                        r"(?:for|in) (?:all )?future|going forward|go-?to|"
                        r"(?<![\w\s])\s*keep|^\W*(?:please\s+|pls\s+)?keep|"
                        r"from here on)\b", I)
DEFAULT_WORD = re.compile(r"\b(?:default|go-?to)\b", I)
# "as my default for draft", "the default of lookahead": the parameters' defaults, not the default method
PARAM_DEFAULT = re.compile(r"\bdefaults?\s+(?:for|of|in)\b", I)
GUIDE_WORDS = re.compile(r"^\W*size\b|\b(?:suggest\w*|recommend\w*|guidance|advice|advise|tips?|tune|tuning|"
                         r"starting (?:k|values?|point|settings?|window|tree|depth))\b", I)
PARAM_WORDS = re.compile(r"\b(?:param\w*|settings?|values?|config\w*|window|n-?gram size|guess|threshold|alpha|drafts|"
                         r"depth|topk|tree[_ ]nodes|"
                         r"how (?:big|long|large|many)|"
                         r"tree|k|w|n|g|knobs?|sizes?|draft model|heads)\b", I)
ADVICE_QUESTION = re.compile(r"\b(?:should|good|best|optimal|ideal|right|recommended|pick|choose|which|what|how)\b", I)
STRONG_ADVICE = re.compile(r"\b(?:should|good|best|optimal|ideal|recommended|pick|choose|tune|sensible|make sense|"
                           r"makes sense)\b", I)
EXPLAIN_VERB = re.compile(r"^\W*(?:please\s+)?(?:explain|describe|tell me about|teach me|introduce|eli5)\b", I)
HOW_SPEEDS = r"how (?:can|could|would|is|does) (?:it|this|that|\w+) (?:\w+ )?speed (?:\w+ )?up"  # how it works
EXPLAIN_WORDS = re.compile(r"\b(?:explain\w*|what is|what's|whats|what are|how does|how do|how is|tell me about|why|"
                           r"describe|teach|overview|intro\w*|differen\w*|trade-?offs?|work|eli5|idea|intuition|"
                           r"concept|principle|guarantee\w*|in (?:simple|plain) (?:terms|words|english)|lossless|exact|"
                           r"lossy|in what sense|what makes|manage to|walk (?:me|us) through|(?:don'?t|"
                           r"do not) (?:get|understand)|"
                           r"explanation|how (?:on earth|exactly|actually) (?:does|do|can)|"
                           rf"{HOW_SPEEDS}|"
                           r"what (?:actually|exactly|really) (?:is|are)|"
                           r"what (?:exactly )?(?:is|are|does) (?:it|they|\w+) (?:doing|do)\b|"
                           r"how (?:are|is) .{0,40}\b(?:checked|verified|accepted|chosen|built)|what does (?:it|"
                           r"\w+) (?:actually |really )?do|"
                           r"how can (?:a|an|the)|change (?:the|its) output|"
                           r"when (?:would|should|do)|looks? like)\b", I)
# a question about how or why a method works, not about which values to give it
WHY_HOW = re.compile(r"\b(?:why|guarantee\w*|walk (?:me|us) through|(?:don'?t|do not) (?:get|understand)|"
                     r"explanation|how does|"
                     r"how do (?:they|these|it)|how (?:do|does|can) .{0,60}\b(?:manage|"
                     r"know|keep|stay|avoid|decide|produce|generate|propose|verify|make)|how can (?:a|an|the|it|"
                     r"they)|idea|"
                     r"intuition|eli5|principle|lossless|exact(?:ly)?|output distribution|"
                     r"looks? like|explain\w*|like i'?m)\b", I)
DEPS_WORDS = re.compile(r"\b(?:dependenc\w*|deps|requirements?|packages?[- ]wise|prerequisites?|libraries|"
                        r"packages? (?:are )?missing|"
                        r"on import|import ?error|modulenotfounderror|what'?s broken|fails? to import|no module named|"
                        r"what (?:it|they|this|that) needs?|"
                        r"what (?:does|do) (?:it|they|this|that|\w+)(?: method)? need\b|"
                        r"what (?:the |a )?\w+(?: method)? needs\b|"
                        r"(?:has|have|got) (?:all|everything) (?:it|they) needs?|"
                        r"(?:packages|dependencies|deps) are (?:all )?in place|needs? is (?:all )?in place|"
                        r"audit\w*|every package|installed packages|depends? on|(?:are|is) present|"
                        r"imports? (?:correctly|cleanly|fine|ok)|importable|"
                        r"(?:verify|check) (?:the )?(?:required )?(?:python )?packages|required (?:python )?packages|"
                        r"work with (?:what'?s|what is|whats) installed|"
                        r"everything (?:i|we) need|what (?:do )?(?:i|we) need|need to install|ready to (?:run|use)|"
                        r"set ?up (?:right|correctly)|missing|(?:all )?the packages|packages? (?:for|needed)|"
                        r"everything installed|packages? (?:are )?(?:ok|okay|fine|good|up to date|working)|"
                        r"set up\?|check (?:all )?(?:the |my )?packages|"
                        r"(?:env\w*|setup|installation) (?:is )?(?:ok|okay|fine|ready|good|working))\b|"
                        r"\b(?:is|are)\b.*\binstalled\b", I)
# "is gguf here?", "do we have llama-cpp-python installed?": asked of a package the message names
PACKAGE_PRESENCE = re.compile(r"(?:^|[:.!?]\s)\W*(?:is|are|do (?:i|we) have|have (?:i|we) got|got)\b.*\b(?:here|there|"
                              r"available|set up|importable|in this env\w*|"
                              r"present|installed|around|on this (?:machine|box|computer))\b", I)
# not "don't install"; "pip: gguf, accelerate"
INSTALL_WORDS = re.compile(r"(?<!n't )(?<!not )(?<!never )(?<!the )\binstall\b"
                           r"(?!\s+(?:commands?|lines?|instructions?|hints?))|"
                           r"\bget\b.+\binstalled\b|^\W*pip\s*:|"
                           r"\bgo ahead and (?:get|grab) \S+ (?:onto|on|into) (?:this|the|my)\b|"
                           r"\bgo ahead and (?:add|get|grab) (?:it|them)\b", I)
UPGRADE_WORDS = re.compile(r"\b(?:upgrade|update)\b|(?:^|\s)(?:-U|--upgrade)\b", I)
TRAIN_WORDS = re.compile(r"\b(?:train\w*|fine-?tun\w*|distil\w*|(?:need|want|make|create|build|fit) (?:\w+ )?"
                         r"(?:medusa )?heads|\d+ (?:training )?steps|(?:produce|generate|make|build) (?:a few|"
                         r"some|new ones)|steps?[ \t]*[:=][ \t]*\d+)\b",
                         I)  # "heads for X, 500 steps", "steps: 600"
REPLACE_REST = re.compile(r"\b(?:throw away|discard|drop|replace|reset|clear|wipe|erase|remove|delete)\b.*"
                          r"\b(?:else|rest|others?|old|just|only)\b|"
                          r"\b(?:only these|nothing else)\b|\breplac\w* (?:what|whatever|everything)\b|"
                          r"\boverwrit\w*", I)
GET_VERBS = re.compile(r"\b(?:grab|get|fetch|add|pull in|set up)\b", I)
SHARE_WORDS = re.compile(r"\b(?:share|upload|publish|send|ship|post(?= (?:it|them|the|my|these|those|results?|runs?|"
                         r"to|last|latest|all|every)\b)|"
                         r"webhook|e-?mail|(?:posted|uploaded|shared|sent) to)\b", I)  # not "my draft post"
REPORT_WORDS = re.compile(r"\b(?<!lab )(?<!book )(?<!school )(?<!expense )(?<!bug )(?<!news )(?<!term )"
                          r"(?:report(?!\s+(?:the|its|back)\b)|summary|write[- ]?up|"
                          r"(?:markdown|json) (?:table|file|document)|"
                          r"write (?:\w+ ){1,2}up\b|(?:json|markdown) dump|write (?:out )?(?:the |"
                          r"my )?(?:last \d+ |latest \d+ )?"
                          r"(?:runs|results) to)\b", I)  # "report the tokens/s": tell
NOT_DEFAULT = re.compile(r"\b(?:do ?n[o']?t|not|without|never) (?:make|making|set|setting|change|changing) "
                         r"(?:it |this |them |[\w-]+ )?"
                         r"(?:the |my |as (?:the |my )?)?default", I)
EXPLAIN_LEAD = re.compile(r"^\W*(?:what(?:'s| is| (?:actually|exactly|really) is)|whats|explain|describe|eli5)\b", I)
SAVE_ONLY = re.compile(r"^\W*(?:please\s+|pls\s+)?(?:save|store|remember|persist)\b", I)
DRAFT_SIZES = re.compile(r"\bdraft (?:sizes?|lengths?|tokens)\b|\bdrafts\b", I)
# "the runs whose prompt mentions quicksort": the words a stored prompt holds
PROMPT_MENTIONS = re.compile(r"\bprompts?\s+(?:that\s+)?(?:mention(?:s|ed|ing)?|contain(?:s|ed|ing)?|about|had|has)\s+"
                             r"(?:the\s+words?\s+)?['\"]?(\w[\w .+#-]{1,40}?)['\"]?(?=\s+(?:and|in|or)\b|[,.?!]|$)", I)
NOT_A_PROMPT = {"same", "last", "previous", "short", "this", "good", "best", "first", "latest", "newest", "other",
                "fast",
                "slow", "fastest", "slowest", "next"}
COPY_TO = re.compile(r"\b(?:copy|export|put)\b.*\bto\b", I)
# a report put into a folder the message named ("Put there the report", "outside of the specpilot directory")
PUT_THERE = re.compile(r"\b(?:put|copy|place|drop|save|write|store)\b.{0,30}\b(?:there|into it|in it|in that folder)\b|"
                       r"\boutside (?:of )?(?:the |my |our )?(?:specpilot|reports?)\b", I)
LOCAL_ONLY = re.compile(r"\bnothing (?:to |gets |is )?(?:send|sent|share|shared|upload\w*|post\w*)\b|"
                        r"\b(?:do ?n[o']?t|do not|no need to|not|never) (?:send|share|upload|post)\b|"
                        r"\bkeep (?:it|them|this|the report) (?:on this (?:machine|box|computer)|local\w*|here)\b", I)
COST_CURVE = re.compile(r"\b(?:cost[- ]curve|cost of (?:a |one |the )?(?:forward |"
                        r"target )?pass(?:es)? (?:grows?|scales?|"
                        r"changes?|increases?)|pass over \d+ tokens (?:\w+ ){0,2}cost|(?:batched |"
                        r"parallel )?verification cost|"
                        r"(?:checking|verifying|scoring) (?:many|several|more|\d+) tokens in one pass|"
                        r"how expensive (?:a |one |the )?(?:single )?(?:forward )?pass (?:gets|becomes)|"
                        r"(?:feed|put|push)\w* (?:it |through )?more tokens|\d+ (?:or|and|"
                        r"to) \d+ tokens .{0,50}\bcost|pass over \d+ (?:versus|vs\.?|or|and|against) \d+ tokens|"
                        r"how (?:expensive|costly) (?:the |this |my )?model is|"
                        r"how (?:expensive|costly|slow) is (?:a |one |the |each )?(?:forward )?pass|"
                        r"(?:forward )?pass(?:es)?(?: of (?:the |my |this |a )?(?:target|model))? scales?|"
                        r"verif\w* \d+ tokens in one pass|"
                        r"forward[- ]?pass(?:es)? cost|cost of (?:a |one )?forward|"
                        r"cost per forward|forward cost|how (?:much|long) (?:does )?(?:a |one )?forward|"
                        r"how (?:much )?(?:a |one |the )?(?:forward |target )?pass(?:es)? costs?|"
                        r"per[- ]pass cost|cost per pass|pass cost|how expensive is (?:it to )?(?:verif\w*|a pass|"
                        r"one pass|a forward)|verif\w* \d+ tokens (?:vs|versus|against|compared)|"
                        r"per[- ]pass (?:latency|time)|latency scales|scales? with (?:the )?(?:number of )?tokens|"
                        r"(?:verification|verify|pass|forward) (?:cost|latency)s? scales?|cost scales|"
                        r"how expensive (?:is |it is )?(?:it )?(?:to )?verif\w*|"
                        r"how expensive (?:a |one )?(?:forward )?pass(?:es)? (?:is|are)|\d+\s*\.\.\s*\d+ tokens|"
                        r"verif\w* \d+\s*(?:\.\.|-|to)\s*\d+ tokens|"
                        r"\d+\s*(?:\.\.|-|to)\s*\d+[ -]tokens? forward|\d+[ -]tokens? (?:forward )?pass(?:es)?)", I)
GREETING = re.compile(r"^\W*(?:hi|hello|hey|hiya|howdy|greetings|yo|good (?:morning|afternoon|evening|day))\b", I)
THANKS = re.compile(r"\b(?:thanks|thank you|thx|cheers|bye|goodbye|see you|that's all|that is all|that's it|"
                    r"done for (?:today|now)|nothing else|all good)\b", I)
# a hardware other than this machine: named GPUs and accelerators, Apple chips, "my GPU", "another machine"
OTHER_HARDWARE = re.compile(
    r"\b(?:[hab]\d{2,3}s?|l4|l40s?|t4|v100|p100|rtx ?\d{4}(?: ?ti| ?super)?|gtx ?\d{3,4}|[34]0[5-9]0(?: ?ti)?|"
    r"mi\d{3}x?|tpu(?: ?v\d)?|gaudi\d?|m[1-4](?: (?:pro|max|ultra))?(?: mac\w*| chip)?|apple silicon|"
    r"mac ?book\w*|mac (?:mini|studio|pro)|an? mac|my mac|jetson|raspberry pi|"
    r"(?:my|a|an|the|their) (?:gpus?|graphics card|server|cluster|phone|cloud instance)|"
    r"(?:another|other|different|their|a bigger|a faster|a cloud|a remote) (?:gpus?|graphics card|machine|"
    r"computer|server|laptop|hardware|box|cluster|workstation|desktop|phone|instance)|in the cloud|"
    r"on (?:aws|gcp|azure))\b", I)
BACK_TO_IT = re.compile(r"\b(?:there|on it|(?:her|his|their|that|this|the same) (?:machine|box|laptop|gpu|card|"
                        r"computer|server|mac|one|setup))\b", I)
FOLLOW_UP = re.compile(r"^\W*(?:and |but )?(?:on|what about|how about|with|for)\b", I)
ESTIMATE = re.compile(r"\b(?:estimate\w*|predict\w*|expect\w*|would|will|could|might|guess|how (?:much )?fast\w*|"
                      r"speed-?ups?|faster|perform\w*|benefit|worth|tok(?:ens)?/s|run|measure|benchmark)\b", I)
IN_SCOPE = re.compile(r"\b(?:decod\w*|speculat\w*|draft|medusa|lookahead|ngram|eagle|jacobi|model\w*|tokens?|"
                      r"speed\w*|fast\w*|"
                      r"runs?|method\w*|measur\w*|benchmark\w*|prompt\w*|gpu|cpu|latency|inference|llm)\b", I)
# "a short prompt", "any prompt", "a prompt of your choice": the planner picks one
SOME_PROMPT = re.compile(r"\b(?:a|any|some|one)\s+(?:\w+\s+)?(?:prompt|example|text|input)\b(?! (?:like|such as))|"
                         r"\bprompt of your choice\b|\byou (?:pick|choose)\b", I)
ANY_PROMPT_ANSWER = re.compile(r"^\W*(?:any(?:thing| prompt| one)?|whatever|you (?:pick|choose)|default|"
                               r"a short one|short|pick one|your choice|doesn'?t matter|up to you)\W*$", I)
SHORT_PROMPT = "Write a Python function that reverses a string."
# built-in models by the words people use for them
TARGET_WORDS = {
    SMALL_TARGET: r"smol\w*|small(?:est)?(?: built-?in)? model|tiny model|little model|135m",
    "qwen2.5-coder-0.5b-instruct": r"qwen[\w.-]*0\.5b[\w.-]*|0\.5b(?: model)?",
    DEFAULT_TARGET: r"qwen[\w.-]*1\.5b[\w.-]*|1\.5b(?: model)?|default (?:target|model)|big(?:ger)? model",
}

TYPO_NAMES = ("medusa", "lookahead", "eagle", "baseline", "compare", "explain", "install", "benchmark", "speculative",
              "temperature")
NOT_TYPOS = {"eager", "media", "eagles", "baselines", "speculation", "speculate", "speculated", "speculating",
             "speculations"}


def fix_method_typos(text: str) -> str:
    """Misspelt method names put right ("medsua" -> medusa); only words close to one name, never in the prompt."""
    def fix(match: re.Match) -> str:
        word = match.group(0)
        if word.lower() in NOT_TYPOS or word.lower() in TYPO_NAMES:  # "Explain" keeps its capital
            return word
        close = difflib.get_close_matches(word.lower(), TYPO_NAMES, n=1, cutoff=0.8)
        inflected = close and re.fullmatch(rf"{close[0]}(?:e?s|ed|ing|ations?|ers?)", word.lower()) or \
            (close and close[0].endswith("e") and re.fullmatch(rf"{close[0][:-1]}(?:ing|ions?|ed)", word.lower()))
        # "installed", "compared", "comparing": not typos; "medusaa" is
        other = close and (word[0].lower() != close[0][0]  # a typo keeps the first letter ("plain" is no "explain")
                           or abs(len(word) - len(close[0])) > 1)  # and about its length ("looked" is no "lookahead")
        return close[0] if close and not inflected and not other else word
    return re.sub(r"\b[A-Za-z]{5,12}\b", fix, text)


def find_method(text: str) -> str | None:
    """The decoding method a message names, or None."""
    text = NOT_SPECULATIVE.sub(" baseline ", text)
    for method, words in METHOD_WORDS.items():
        if re.search(rf"\b(?:{words})\b", text, I):
            return method
    return None


def find_methods(text: str) -> list[str]:
    """Every decoding method a message names (generic words such as "speculative decoding methods"
    name none), in the order of METHOD_WORDS."""
    text = NOT_SPECULATIVE.sub(" baseline ", GENERIC_METHODS.sub(" ", text))
    return [m for m, words in METHOD_WORDS.items() if re.search(rf"\b(?:{words})\b", text, I)]


# methods a message rules out ("don't bother with the draft model", "everything except medusa", "not lookahead")
ONE_METHOD = rf"(?:the\s+|any\s+)?(?:{'|'.join(METHOD_WORDS.values())})\b"
RULED_OUT = re.compile(r"\b(?:do ?n[o']?t (?:bother with|use|include|run|try|need|want)|except(?: for)?|other than|"
                       r"apart from|excluding|all but|everything but|but not|leave out|skip|minus|not)\s+"
                       rf"(?P<method>{ONE_METHOD}(?:\s*(?:,|and|or|nor|&)\s*{ONE_METHOD})*)", I)
ALL_BUT = re.compile(r"\b(?:everything|every method|all(?: the)?(?: methods)?)\s+(?:except|but|other than|apart from|"
                     r"excluding)\b", I)


# an action the message rules out ("Don't share anything. Just write ..."): not read as asked
NOT_ACTION = re.compile(r"\b(?:do ?n[o']?t|do not|never|no need to)\s+(?:share|upload|publish|send|post|train)\b"
                        r"[^.;,!?]*", I)


def named_methods(text: str) -> list[str]:
    """The methods a message names and does not rule out; "all but X" names every accelerated method but X."""
    out = {m for found in RULED_OUT.finditer(NOT_SPECULATIVE.sub(" baseline ", text)) for m in find_methods(found[0])}
    named = [m for m in find_methods(text) if m not in out]
    return [m for m in ACCELERATED if m not in out] if ALL_BUT.search(text) and out else named


def asks_for_heads(text: str) -> bool:
    """Whether ``text`` asks for heads to be trained ("train 5 heads", "need medusa heads, 500 steps")."""
    return bool(TRAIN_WORDS.search(text) and re.search(r"\bheads?\b", text, I))


def find_topic(text: str) -> str | None:
    """The concept a message asks to have explained, or None."""
    for topic, words in TOPIC_WORDS.items():
        if re.search(words, text, I):
            return topic
    return None


# a model named as the draft ("qwen2.5-coder-0.5b-instruct as the draft", "with a small model"), not the target
AS_DRAFT = re.compile(r"^\s*(?:as (?:the |my |a )?(?:draft(?:er)?|helper|assistant|guesser)\b|drafting\b)", I)
DRAFT_BEFORE = re.compile(r"\bdraft(?:[- ]?model)?\s*(?:=|:|is|of)?\s*$", I)
WITH_BEFORE = re.compile(r"\b(?:decoding|sampling|speculat\w*|draft)\s+(?:with|w/|using|via)\s+(?:a |an |the )?$", I)


def find_draft(text: str) -> str | None:
    """The built-in model a message names as the draft, by its name or a short one ("the 0.5b as draft"), or None."""
    for name in BUILTIN_MODELS:
        names = (re.escape(name), TARGET_WORDS.get(name, re.escape(name)))
        for found in re.finditer(rf"\b(?:{'|'.join(names)})(?![\w.])", text, I):
            if AS_DRAFT.match(text[found.end():]) or DRAFT_BEFORE.search(text[:found.start()]):
                return name
    return None


# a model named by its file or hub id ("on ./models/q4.gguf", "Qwen/Qwen2.5-7B-Instruct"), not a data file or URL
GGUF_FILE = re.compile(r"(?<![\w/.:])((?:~|\.{1,2})?/?[\w.-]*(?:/[\w.-]+)*\.gguf)\b", I)
HUB_ID = re.compile(r"(?<![\w/.:@-])([A-Za-z][\w.-]*/[A-Za-z][\w.-]*\d[\w.-]*)(?![\w/])")
MODEL_FOLDER = re.compile(r"\b(?:for|on|of|(?:sitting|living|lives|stored|located|saved) (?:in|at)|"
                          r"target(?: model)?(?: is)?(?: in| at)?|(?:model|checkpoint)(?: is)?(?: \w+)?(?: in| at)|"
                          r"model|"
                          r"with)\s+"
                          r"((?:~|\.{1,2})?(?:/[\w.-]*[\w-]){2,})\.?/?"
                          r"(?=[\s,;)?!]|$)", I)
FILE_IN = re.compile(r"\s+(?:(?:is |are )?(?:sitting|living|lives|stored|located|saved|kept|that'?s|which is) )?"
                     r"(?:in|at|under)\s+((?:~|\.{1,2})?(?:/[\w.-]+)+/?)", I)  # the folder a bare file name is in
DATA_FILE = re.compile(r"\.(?:txt|jsonl?|md|csv|tsv|py|bin|safetensors|pt|ya?ml|html?)$", I)


def named_model(text: str) -> str | None:
    """A GGUF file or a hub id a message names as a model, or None."""
    found = GGUF_FILE.search(text) or MODEL_FOLDER.search(text)
    if found and not DATA_FILE.search(found.group(1)):
        where = FILE_IN.match(text[found.end():]) if "/" not in found.group(1) else None
        return f"{where.group(1).rstrip('/')}/{found.group(1)}" if where else found.group(1)  # "X.gguf sitting in /m"
    return next((m.group(1).rstrip(".") for m in HUB_ID.finditer(text) if not DATA_FILE.search(m.group(1))), None)


GUESSES = re.compile(r"\s+(?:that\s+|which\s+)?(?:guess|propos|suggest|draft)\w*", I)


def find_target(text: str) -> str | None:
    """The built-in target model a message names ("the small model" -> smollm2-135m-instruct), or None; a model
    named as the draft, or a small model speculative decoding is done with ("decoding with a small model"), is not
    the target."""
    draft = find_draft(text)
    named = named_model(text)
    if named and not AS_DRAFT.match(text[text.find(named) + len(named):]):
        return named
    for name in BUILTIN_MODELS:
        if name in text.lower() and name != draft:
            return name
    for name, words in TARGET_WORDS.items():
        found = re.search(rf"\b(?:{words})(?![\w.])", text, I)
        guessing = found and GUESSES.match(text[found.end():])  # "the one where a small model guesses": draft's
        if found and name != draft and not WITH_BEFORE.search(text[:found.start()]) and not guessing:
            return name
    return None


def find_hardware(text: str) -> str | None:
    """Hardware other than this machine that a message asks about ("an H100", "my GPU"), or None."""
    match = OTHER_HARDWARE.search(text)
    if match is None:
        return None
    placed = re.search(r"\b(?:on|with|using|for|to|about)\s+(?:an?\s+|the\s+)?$", text[:match.start()], I)
    follow_up = bool(placed) and (len(text.split()) <= 6 or FOLLOW_UP.match(text))  # "on an H100?"
    # the sentence naming it asks for figures there ("On our V100 bf16 is slow, so I want float16. Run ...": not)
    parts = sentences(text)
    at = next((i for i, part in enumerate(parts) if match.group(0) in part), None)
    said = text if at is None else " ".join(parts[at: at + 1 + (at + 1 < len(parts) and bool(BACK_TO_IT.search(
        parts[at + 1])))])  # "My colleague has an M2 Ultra. What would Medusa get on her machine?": the next one too
    return match.group(0) if follow_up or ESTIMATE.search(said) else None


def first_named(text: str, methods: list[str]) -> str | None:
    """Of ``methods`` (named in ``text``), the one ``text`` names first ("save these medusa settings, most of my runs
    use draft": medusa)."""
    valued = r"(?!\s*[:=]?\s*(?:\d|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)\b)"  # "ngram four"
    where = {m: min((f.start() for f in re.finditer(rf"\b(?:{METHOD_WORDS[m]})\b{valued}", text, I)),
                    default=len(text)) for m in methods}
    return min(methods, key=lambda m: where[m]) if methods else None


def compare_list(named: list[str]) -> list[str]:
    """The methods to compare: the baseline first, then those named (all of them when none is)."""
    named = [m for m in named if m != "baseline"]
    return [m for m in METHOD_NAMES if m == "baseline" or not named or m in named]


def leading_methods(text: str) -> tuple[list[str], str]:
    """Method names (or "all") at the start of ``text``, separated by spaces or commas, and the rest."""
    named = []
    while match := LEADING_METHOD.match(text):
        named.append(match.group(1).lower())
        text = text[match.end():]
    return [m for m in named if m != "all"], text.lstrip(" ,:")


def unquote(text: str) -> str:
    """``text`` without one pair of quotes around all of it."""
    text = text.strip()
    for left, right in (('"', '"'), ("'", "'"), ("“", "”")):
        if len(text) > 2 and text.startswith(left) and text.endswith(right):
            return text[1:-1].strip()
    return text


# the baseline asked for alone ("I just want plain baseline tok/s here"), and no draft model as a method
BASELINE_ONLY = re.compile(r"\b(?:just|only)\b(?:\s+(?!vs\b|and\b|or\b)\w+){0,3}\s+baseline\b"
                           r"(?!\s+(?:vs|and|or|against)\b)|\bbaseline (?:alone|only)\b", I)
WITHOUT_DRAFT = re.compile(r"\b(?:without|no need for|no) (?:a |an |the |any )?(?:separate |extra |second |small )?"
                           r"(?:draft(?:er)?|helper)(?:[- ]model)?\b", I)
# runs picked by their stored prompt ("every run whose prompt has 'merge two sorted' in it")
STORED_PROMPT = re.compile(r"\b(?:runs?|ones?)\s+(?:whose|where (?:the|its|their)) prompts?\b", I)
