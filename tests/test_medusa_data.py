"""Self-distillation data for Medusa heads: prompts from Python's own library, answers in chat form, none of
them from either half of the Spec-Bench split (tests/test_data_split.py). The wide prompts parse the standard
library once per process (~10 s): every test that builds them is here, in one test worker."""

from __future__ import annotations

import json

import pytest

from prompts.spec_bench import shipped_union
from tools.errors import ParameterError
from tools.medusa.data import build_prompts, write_distill_data


def test_prompts_are_deterministic_varied_and_not_from_spec_bench(spec_bench_path):
    prompts = build_prompts(60, seed=3)
    assert prompts == build_prompts(60, seed=3) and prompts != build_prompts(60, seed=4)
    assert len(prompts) == 60 == len(set(prompts))
    assert any(p.startswith(("Write a Python function", "Implement")) for p in prompts)
    assert any("Python" in p and p.startswith(("Explain", "What is")) for p in prompts)
    evaluation = {json.loads(line)["prompt"] for line in spec_bench_path.read_text().splitlines()}
    assert not evaluation & set(prompts)


def test_answers_are_written_in_the_chat_template(tmp_path):
    from conftest import make_tiny_model_folder

    from tools import models

    generator = models.load(str(make_tiny_model_folder(tmp_path / "model", eos=True)), dtype="float32")
    generator.tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    out = write_distill_data(generator, tmp_path / "data.txt", n_prompts=5, max_new_tokens=4, batch_size=2)
    text = out.read_text()
    assert text.count("<eos>") == 5
    assert all(p in text for p in build_prompts(5))


def test_wide_prompts_mix_languages_math_and_prose(spec_bench_path):
    prompts = build_prompts(120, seed=1, variety="wide")
    assert prompts == build_prompts(120, seed=1, variety="wide") and len(set(prompts)) == len(prompts) >= 110
    assert sum(any(lang in p for lang in ("C++", "JavaScript", "Java ", "Go ", "Rust")) for p in prompts) >= 5
    assert sum(p.startswith(("Solve", "Find", "A ", "An ", "The points", "If ", "What is the", "Two ")) for p in prompts) >= 25
    assert any(p.startswith("Summarize the following documentation") for p in prompts)
    assert not any("- -" in p or "+ -" in p for p in prompts)
    evaluation = {json.loads(line)["prompt"] for line in spec_bench_path.read_text().splitlines()}
    assert not evaluation & set(prompts)
    with pytest.raises(ParameterError, match="variety"):
        build_prompts(5, variety="huge")


def test_distillation_prompts_share_nothing_with_either_half():
    spec_bench = {r["prompt"] for r in shipped_union()}
    assert not spec_bench & set(build_prompts(60, seed=3))
    assert not spec_bench & set(build_prompts(60, seed=1, variety="wide"))


def test_mixed_prompts_hold_the_fit_half_and_never_the_eval_half():
    from prompts.spec_bench import half_path, read_jsonl

    fit = {r["prompt"] for r in read_jsonl(half_path("fit"))}
    held = {r["prompt"] for r in read_jsonl(half_path("eval"))}
    prompts = build_prompts(200, seed=5, variety="mixed")
    assert prompts == build_prompts(200, seed=5, variety="mixed") and len(prompts) == len(set(prompts)) == 200
    assert fit <= set(prompts) and not held & set(prompts)
    assert any(p.startswith("Pretend you are") for p in prompts) and any(p.startswith("Translate into") for p in prompts)
    assert any(p.startswith("Write a short poem") for p in prompts) and any("?" in p for p in prompts)


def test_chat_prompts_are_many_kinds_distinct_and_from_neither_half():
    from tools.medusa.chat_prompts import CODE_LANGUAGES, LANGUAGES

    spec_bench = {r["prompt"] for r in shipped_union()}
    prompts = build_prompts(3000, seed=2, variety="chat")
    assert prompts == build_prompts(3000, seed=2, variety="chat") != build_prompts(3000, seed=3, variety="chat")
    assert len(prompts) == len(set(prompts)) == 3000 and not spec_bench & set(prompts)
    assert all("{" not in p.split("\n\n")[0] for p in prompts)  # every placeholder filled (passages may hold braces)
    kinds = {
        "code": [p for p in prompts if any(f" {lang} " in p for lang in CODE_LANGUAGES) or "```python" in p],
        "math": [p for p in prompts if "$" in p or "How many" in p],
        "reading": [p for p in prompts if "\n\n" in p and "```" not in p],
        "translation": [p for p in prompts if any(lang in p for lang in LANGUAGES) and "\"" in p],
        "role play": [p for p in prompts if "Stay in character" in p or p.startswith(("Imagine you are", "Act as"))],
    }
    assert all(len(found) >= 90 for found in kinds.values()), {k: len(v) for k, v in kinds.items()}
    assert len(build_prompts(20000, seed=2, variety="chat")) == 20000


def test_distill_data_is_appended_batch_by_batch_and_resumed(tmp_path):
    from conftest import make_tiny_model_folder

    from tools import models

    generator = models.load(str(make_tiny_model_folder(tmp_path / "model", eos=True)), dtype="float32")
    generator.tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    seen = []
    real_generate = generator.model.generate

    def interrupted(**kwargs):  # the second batch never finishes
        seen.append(kwargs["input_ids"].shape[0])
        if len(seen) == 2:
            raise KeyboardInterrupt
        return real_generate(**kwargs)

    generator.model.generate = interrupted
    out = tmp_path / "data.txt"
    try:
        write_distill_data(generator, out, n_prompts=5, max_new_tokens=4, batch_size=2, variety="chat")
    except KeyboardInterrupt:
        pass
    prompts = build_prompts(5, variety="chat")
    assert out.read_text().count("<eos>") == 2 and all(p in out.read_text() for p in prompts[:2])
    generator.model.generate = real_generate
    write_distill_data(generator, out, n_prompts=5, max_new_tokens=4, batch_size=2, variety="chat")
    text = out.read_text()
    assert text.count("<eos>") == 5 and all(text.count(p) == 1 for p in prompts)
    write_distill_data(generator, out, n_prompts=3, max_new_tokens=4, batch_size=2, variety="chat", restart=True)
    assert out.read_text().count("<eos>") == 3
    # a second file continues the first's list: --prompts 5 --skip 3 answers prompts 4 and 5 only
    more = tmp_path / "more.txt"
    write_distill_data(generator, more, n_prompts=5, max_new_tokens=4, batch_size=2, variety="chat", skip=3)
    text = more.read_text()
    assert text.count("<eos>") == 2 and all(p in text for p in prompts[3:]) and not any(p in text for p in prompts[:3])
    with pytest.raises(ParameterError, match="--skip"):
        write_distill_data(generator, more, n_prompts=5, max_new_tokens=4, variety="chat", skip=5)


def test_an_interrupted_make_data_says_what_is_kept(tiny_model_dir, tmp_path, monkeypatch, capsys):
    import tools.medusa.data as data
    from agent.cli.main import main

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(data, "write_distill_data", stopped)
    code = main(["medusa", "make-data", "--generator", str(tiny_model_dir), "--out", str(tmp_path / "d.txt"),
                 "--dtype", "float32"])
    err = capsys.readouterr().err
    assert code == 130 and "kept in --out" in err and "bench" not in err


def test_resuming_answers_a_prompt_that_only_appears_inside_an_answer(tmp_path):
    from conftest import make_tiny_model_folder

    from tools import models

    generator = models.load(str(make_tiny_model_folder(tmp_path / "model", eos=True)), dtype="float32")
    generator.tokenizer.chat_template = "{% for m in messages %}[user] {{ m['content'] }} [answer] {% endfor %}"
    prompts = build_prompts(2, variety="chat")
    out = tmp_path / "data.txt"
    out.write_text(f"[user] something else [answer] as the request said: {prompts[1]}<eos>\n")
    write_distill_data(generator, out, n_prompts=2, max_new_tokens=4, batch_size=2, variety="chat")
    text = out.read_text()
    assert text.count("<eos>") == 3
    assert f"[user] {prompts[0]} [answer]" in text and f"[user] {prompts[1]} [answer]" in text


def test_make_data_refuses_a_bad_skip_before_loading_the_generator(tmp_path, capsys):
    from agent.cli.main import main

    code = main(["medusa", "make-data", "--generator", str(tmp_path / "no-such-model"), "--out", str(tmp_path / "d.txt"),
                 "--prompts", "4", "--skip", "4"])
    err = capsys.readouterr().err
    assert code != 0 and "--skip 4" in err and "no-such-model" not in err
