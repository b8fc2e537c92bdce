"""The "chat" variety of self-distillation prompts: requests of the kinds people bring to a chat assistant,
built from lists written here and from text that ships with Python, never from Spec-Bench.

The ``mixed`` variety draws on a few dozen templates and runs out of new prompts after some hundreds;
this one combines task, subject, audience, language and passage lists into tens of thousands of distinct
requests spread over what a chat assistant is asked: code in several languages (write, explain, fix,
test), multi-step word problems, explanations of science and history, essays, letters and stories,
role play, logic puzzles, reading of passages (summaries, extraction, questions answered from the text)
and translation.
"""

from __future__ import annotations

import ast
import random
import sysconfig
from functools import lru_cache
from pathlib import Path

CODE_TASKS = (
    "reverses the words in a sentence", "checks whether a string is a palindrome, ignoring case and spaces",
    "returns the n-th Fibonacci number", "merges two sorted lists into one sorted list",
    "counts how often each word appears in a text file", "finds the longest common prefix of a list of strings",
    "removes duplicates from a list while keeping the order", "converts a Roman numeral to an integer",
    "checks whether a number is prime", "returns all prime numbers below n with a sieve",
    "flattens a nested list", "groups a list of words into anagrams", "computes the median of a list of numbers",
    "validates an email address with a regular expression", "parses a CSV file and sums one column",
    "implements binary search on a sorted array", "rotates a matrix by 90 degrees", "implements a stack with a list",
    "implements a queue using two stacks", "finds the second largest number in an array",
    "checks whether parentheses in a string are balanced", "converts a decimal number to binary",
    "computes the greatest common divisor of two numbers", "returns the k most frequent elements of a list",
    "finds the first non-repeating character in a string", "implements an LRU cache",
    "reads a JSON file and prints its keys", "computes the factorial of n iteratively and recursively",
    "sorts a list of dictionaries by a given key", "finds the maximum subarray sum",
    "checks whether two strings are anagrams", "computes the edit distance between two strings",
    "implements merge sort", "implements quicksort", "finds all permutations of a string",
    "returns the intersection of two lists", "counts the vowels in a string",
    "capitalizes the first letter of each word",
    "checks whether a year is a leap year", "converts temperatures between Celsius and Fahrenheit",
    "finds the missing number in a list of 1 to n", "detects a cycle in a linked list",
    "reverses a linked list", "computes the depth of a binary tree", "traverses a binary tree in order",
    "finds the shortest path in a grid with breadth-first search", "implements a simple tokenizer for arithmetic",
    "evaluates an arithmetic expression in reverse Polish notation", "chunks a list into pieces of size n",
    "retries a function call with exponential backoff", "parses a URL into its scheme, host, path and query",
    "formats a number of seconds as hours, minutes and seconds", "computes a running average of a stream",
    "finds duplicate files in a folder by their hash", "generates a random password of a given length",
    "transposes a matrix", "checks whether a Sudoku row, column and box are valid", "implements a min-heap",
    "counts the islands in a grid of 0s and 1s", "computes the power set of a set",
)
CODE_LANGUAGES = ("Python", "Python", "Python", "JavaScript", "C++", "Java", "Go", "Rust", "TypeScript", "C#")
CODE_FRAMES = (
    "Write a {lang} function that {task}.",
    "Write a {lang} program that {task}. Explain how it works.",
    "How do I write a function in {lang} that {task}? Show the code.",
    "Implement a {lang} function that {task}, and give its time complexity.",
    "Write a {lang} function that {task}, with a few test cases.",
    "Can you show me {lang} code that {task}? Keep it simple.",
    "I need a {lang} helper that {task}. Please add comments.",
)
SOURCE_FRAMES = (
    "Explain what this Python function does, step by step:\n\n```python\n{src}\n```",
    "Write unit tests with pytest for this function:\n\n```python\n{src}\n```",
    "Review this code and suggest improvements:\n\n```python\n{src}\n```",
    "Add type hints and a docstring to this function:\n\n```python\n{src}\n```",
    "Rewrite this Python function in {lang}:\n\n```python\n{src}\n```",
)
NAMES = ("Maria", "James", "Aisha", "Tom", "Li Wei", "Sofia", "Omar", "Emma", "Raj", "Hannah", "Carlos", "Yuki",
         "Lena", "David", "Fatima", "Noah", "Grace", "Ivan", "Chloe", "Kofi")
ITEMS = (("apples", 2), ("notebooks", 3), ("tickets", 12), ("cupcakes", 4), ("books", 15), ("shirts", 18),
         ("plants", 7), ("pens", 1), ("toy cars", 5), ("bags of rice", 9))
WORD_PROBLEMS = (
    "{n1} buys {a} {item} at ${p} each and pays with a ${bill} bill. How much change does {n1} get?",
    "{n1} has {a} {item}. {n2} has {b} more than {n1}, and {n3} has half as many as {n2}. How many {item} do "
    "they have together?",
    "A school has {a}0 students. {c}% of them walk to school, and a third of the rest take the bus. How many take "
    "the bus?",
    "{n1} saves ${a} a week. After {c} weeks {n1} spends ${b} on {item}. How much is left?",
    "A recipe needs {c} eggs for {d} people. How many eggs are needed for {e} people?",
    "{n1} reads {a} pages a day and {n2} reads {b} pages a day. A book has {a}{b} pages. How many days sooner does "
    "the faster reader finish?",
    "A store marks a ${a}0 jacket down by {c}0% and then adds {d}% sales tax. What is the final price?",
    "{n1} runs {c} km on Monday and {d} km more each day after that. How far does {n1} run in a week?",
    "A tank holds {a}0 liters. One pipe fills it in {c} hours and another empties it in {e} hours. With both open, "
    "how long until it is full?",
    "The ages of {n1} and {n2} add up to {a}{d}, and {n1} is {d} years older than {n2}. How old is each?",
    "A farmer has chickens and cows, {a} heads and {b}{c} legs in all. How many of each?",
    "{n1} earns ${a} an hour and works {c} hours on weekdays and {d} hours on Saturday. What does {n1} earn in "
    "{e} weeks?",
)
MATH_FRAMES = ("{q} Show your steps.", "{q} Think step by step.", "{q}", "{q} Explain your reasoning briefly.")
TOPICS = (
    "photosynthesis", "plate tectonics", "the French Revolution", "the theory of evolution", "supply and demand",
    "the water cycle", "the causes of World War I", "quantum entanglement", "how vaccines work", "the Renaissance",
    "the Industrial Revolution", "black holes", "DNA replication", "the greenhouse effect", "the Cold War",
    "opportunity cost", "Newton's laws of motion", "the immune system", "the fall of the Berlin Wall",
    "the printing press", "entropy", "the Pythagorean theorem", "monetary policy", "the scientific method",
    "the Silk Road", "ocean tides", "the human heart", "machine learning", "the ancient Greek city-states",
    "electric circuits", "volcanoes", "the Magna Carta", "the stock market", "antibiotic resistance",
    "the Apollo moon landings", "inflation", "utilitarianism", "Stoic philosophy", "the Big Bang",
    "the periodic table", "colonialism in Africa", "the Meiji Restoration", "impressionist painting",
    "the separation of powers", "climate change", "nuclear fission", "the placebo effect", "cognitive biases",
)
TOPIC_FRAMES = (
    "Explain {topic} to a high-school student.", "What is {topic}? Give a clear, short explanation.",
    "Describe the main ideas of {topic} and why they matter.", "Write a short essay on {topic}.",
    "What are common misconceptions about {topic}?", "Summarize {topic} in five bullet points.",
    "How would you teach {topic} to a ten-year-old?", "What is the history of {topic}, in brief?",
    "Give three examples that illustrate {topic}.",
)
GENRES = ("a formal email", "a cover letter", "a blog post", "a short speech", "a product description",
          "a thank-you note", "a travel itinerary", "a social media post", "a short story", "a limerick",
          "a persuasive essay", "a news article", "a complaint letter", "a wedding toast", "a haiku sequence")
WRITING_SUBJECTS = ("a new coffee shop opening downtown", "a trip to Iceland", "learning to play the guitar",
                    "a lost dog found by neighbours", "a company's move to a four-day week", "a rainy day in Paris",
                    "the first day at a new job", "a community garden", "an electric bicycle", "a late delivery",
                    "a robot that learns to paint", "a school science fair", "a friendship across generations",
                    "a mountain village in winter", "saving energy at home", "a chess tournament")
AUDIENCES = ("for a general audience", "for teenagers", "for busy professionals", "for a local newspaper",
             "in a warm, friendly tone", "in a formal tone", "in under 200 words", "with a touch of humor")
ROLEPLAY = ("Imagine you are {role}. {situation}", "Act as {role}. {situation}",
            "You are {role}. Stay in character. {situation}")
ROLES = ("a pirate captain", "a Victorian butler", "a space station engineer", "a fitness coach", "a fortune teller",
         "a tour guide in Rome", "a medieval blacksmith", "a customer support agent", "a wise old wizard",
         "a news anchor", "a zookeeper", "a jazz musician", "a kindergarten teacher", "a barista", "a game show host")
SITUATIONS = ("A customer asks for your best recommendation.", "Describe your morning routine.",
              "Someone asks you for directions to the nearest library.", "Give a pep talk before a big event.",
              "Explain what you would do on your day off.", "A child asks you why the moon changes shape.",
              "Welcome a group of visitors.", "Someone complains that their order is wrong.")
PUZZLES = (
    "{n1}, {n2} and {n3} each own a different pet: a cat, a dog and a fish. {n1} does not own the dog. {n3} owns the "
    "fish. Who owns which pet? Explain.",
    "{n1} is taller than {n2}, and {n2} is taller than {n3}. Is {n3} taller than {n1}? Explain your reasoning.",
    "A bat and a ball cost ${a}.10 together. The bat costs ${a} more than the ball. How much is the ball?",
    "If it takes {c} machines {c} minutes to make {c} widgets, how long do {a} machines take to make {a} widgets?",
    "{n1} says: 'I always lie.' Can that statement be true? Discuss.",
    "There are {c} doors; behind one is a prize. You pick one, the host opens an empty one and offers a switch. "
    "Should you switch? Explain.",
    "A snail climbs {c} meters up a {a}-meter wall each day and slips back {d} meters each night. When does it "
    "reach the top? Reason step by step.",
)
PASSAGE_FRAMES = (
    "Summarize the following text in two sentences:\n\n{doc}", "Give a one-paragraph summary of this:\n\n{doc}",
    "Extract every technical term from this text and define each briefly:\n\n{doc}",
    "List the key points of this passage as JSON with a \"points\" array:\n\n{doc}",
    "Based only on the passage below, what problem does it solve and for whom?\n\n{doc}",
    "Write three quiz questions, with answers, about this passage:\n\n{doc}",
    "Rewrite this passage in plain English for a beginner:\n\n{doc}",
)
SENTENCES = ("Where is the nearest train station?", "I would like to book a table for two at eight o'clock.",
             "The weather will be sunny tomorrow, with a light breeze.", "Our flight was delayed by three hours.",
             "Please read the instructions carefully before you begin.", "She has been learning to paint since May.",
             "Can you recommend a good book about history?", "The museum is closed on Mondays.",
             "He forgot his umbrella on the bus this morning.", "We are looking forward to meeting you next week.",
             "The children played in the park until dinner time.", "This software update fixes several bugs.",
             "How much does a ticket to the city centre cost?", "I have lived in this town for ten years.")
TRANSLATE_FRAMES = ("Translate into {language}: \"{s}\"", "How do you say \"{s}\" in {language}?",
                    "Translate the following sentence to {language} and explain any tricky words: {s}")
LANGUAGES = ("French", "German", "Spanish", "Italian", "Portuguese", "Chinese", "Japanese", "Russian")


def _stdlib_files() -> list[Path]:
    return sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:200]


@lru_cache(maxsize=1)
def _short_functions() -> tuple[str, ...]:
    """Sources of short (4-20 line) top-level functions from the standard library's pure-Python modules."""
    out = []
    for path in _stdlib_files():
        try:
            text = path.read_text(errors="replace")
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        lines = text.splitlines()
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and 4 <= node.end_lineno - node.lineno + 1 <= 20:
                out.append("\n".join(lines[node.lineno - 1: node.end_lineno]))
    return tuple(out)


def _prose(text: str) -> bool:
    return 200 <= len(text) <= 900 and text.count("\n") < 12 and not text.startswith(" ") and ">>>" not in text \
        and "::=" not in text


@lru_cache(maxsize=1)
def _passages() -> tuple[str, ...]:
    """Prose paragraphs (200-900 characters) of the language reference (pydoc's topics) and of standard-library
    docstrings: the passages the reading requests are about."""
    try:
        from pydoc_data.topics import topics
    except ImportError:
        topics = {}
    out = [p.strip() for text in topics.values() for p in text.split("\n\n") if _prose(p.strip())]
    for path in _stdlib_files():
        try:
            tree = ast.parse(path.read_text(errors="replace"))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)):
                doc = (ast.get_docstring(node) or "").strip()
                out += [p.strip() for p in doc.split("\n\n") if _prose(p.strip())]
    return tuple(dict.fromkeys(out))


def _numbers(rng: random.Random) -> dict:
    n1, n2, n3 = rng.sample(NAMES, 3)
    item, price = rng.choice(ITEMS)
    a = rng.randint(3, 40)
    bill = next(b for b in (20, 50, 100, 200, 500, 1000) if b > a * price)
    return dict(n1=n1, n2=n2, n3=n3, item=item, p=price, a=a, b=rng.randint(2, 25), c=rng.randint(2, 9),
                d=rng.randint(2, 9), e=rng.randint(3, 20), bill=bill)


def _code(rng: random.Random) -> str:
    srcs = _short_functions()
    if srcs and rng.random() < 0.3:
        return rng.choice(SOURCE_FRAMES).format(src=rng.choice(srcs), lang=rng.choice(CODE_LANGUAGES[3:]))
    return rng.choice(CODE_FRAMES).format(lang=rng.choice(CODE_LANGUAGES), task=rng.choice(CODE_TASKS))


def _math(rng: random.Random) -> str:
    return rng.choice(MATH_FRAMES).format(q=rng.choice(WORD_PROBLEMS).format(**_numbers(rng)))


def _passage(rng: random.Random) -> str:
    docs = _passages()
    return rng.choice(PASSAGE_FRAMES).format(doc=rng.choice(docs) if docs else "Python is a programming language.")


KINDS = (  # (weight, maker): code and reading of text weigh most, as in what people ask chat assistants
    (30, _code), (14, _math), (14, lambda r: r.choice(TOPIC_FRAMES).format(topic=r.choice(TOPICS))),
    (12, lambda r: f"Write {r.choice(GENRES)} about {r.choice(WRITING_SUBJECTS)}, {r.choice(AUDIENCES)}."),
    (6, lambda r: r.choice(ROLEPLAY).format(role=r.choice(ROLES), situation=r.choice(SITUATIONS))),
    (6, lambda r: r.choice(PUZZLES).format(**_numbers(r))), (12, _passage),
    (6, lambda r: r.choice(TRANSLATE_FRAMES).format(language=r.choice(LANGUAGES), s=r.choice(SENTENCES))),
)


def chat_prompt(rng: random.Random) -> str:
    """One request, its kind drawn by the weights of ``KINDS``."""
    weights, makers = zip(*KINDS)
    return rng.choices(makers, weights=weights)[0](rng)
