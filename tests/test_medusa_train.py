"""Medusa head training on a tiny frozen target: approval, loss, labels, sampled softmax, checkpoints, resume."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from conftest import make_tiny_model
from tools.engine.medusa import MedusaParams, generate
from tools.engine.types import GenerationSettings
from tools.errors import ParameterError
from tools.medusa.checkpoint import load_checkpoint
from tools.medusa import train as medusa_train
from tools.medusa.config import default_training_files
from tools.medusa.train import (
    STATE_NAME,
    TrainConfig,
    TrainingDeclined,
    build_examples,
    head_losses,
    sample_candidates,
    train_heads,
)

ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n()=:.,+-*/[]_'\"#<>!?{}"[:64]


class CharTokenizer:
    """One token per character of a 64-character alphabet (the tiny models' vocabulary)."""

    def encode(self, text, add_special_tokens=False):
        return [ALPHABET.index(c) for c in text if c in ALPHABET]


TEXT = "\n".join(
    f"def f{i}(x, y):\n    return (x + {i}) * y - {i % 7}\n\nclass C{i}:\n    value = f{i}(1, 2)\n" for i in range(40)
)


@pytest.fixture()
def data_file(tmp_path):
    path = tmp_path / "code.txt"
    path.write_text(TEXT)
    return path


@pytest.fixture(scope="module")
def target():
    return make_tiny_model("qwen2", layers=2, seed=0)


def small_config(**kw):
    base = dict(num_heads=3, steps=60, batch_size=64, seq_len=128, checkpoint_every=20, warmup_steps=5,
                learning_rate=5e-3, eval_positions=64)
    return TrainConfig(**{**base, **kw})


def run(target, data_file, out, config, confirm=lambda plan: True, **kw):
    return train_heads(target, [data_file], out, config, confirm=confirm, tokenizer=CharTokenizer(),
                       cache_dir=out.parent / "cache", progress=False, **kw)


def mean(values):
    return sum(values) / len(values)


def test_declined_training_computes_and_writes_nothing(target, data_file, tmp_path):
    plans = []
    with pytest.raises(TrainingDeclined):
        run(target, data_file, tmp_path / "out", small_config(), confirm=lambda plan: plans.append(plan) or False)
    assert "3 Medusa heads" in plans[0] and "steps 0->60" in plans[0]
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_loss_decreases_and_heads_are_saved(target, data_file, tmp_path):
    before = [p.clone() for p in target.parameters()]
    report = run(target, data_file, tmp_path / "out", small_config(steps=150))
    losses = [loss for _, loss in report.loss_history]
    assert len(losses) == 150 and report.steps_done == 150 and report.resumed_from == 0
    assert mean(losses[-15:]) < mean(losses[:15]) - 0.3
    assert len(report.head_top1) == 3 and all(0 <= a <= b <= 1 for a, b in zip(report.head_top1, report.head_top5))
    assert all(torch.equal(a, b) for a, b in zip(before, target.parameters()))  # the target stays frozen
    ckpt = load_checkpoint(tmp_path / "out", target)
    assert ckpt.heads.num_heads == 3 and ckpt.heads.shared_projection
    assert ckpt.config["training"]["held_out"]["top1"] == report.head_top1
    r = generate(target, ckpt.heads, [1, 2, 3], GenerationSettings(max_new_tokens=10), MedusaParams(tree="chain3"))
    assert len(r.output_ids) == 10


def test_sampled_softmax_training_decreases_loss(target, data_file, tmp_path):
    report = run(target, data_file, tmp_path / "out", small_config(steps=120, candidate_tokens=24))
    losses = [loss for _, loss in report.loss_history]
    assert mean(losses[-15:]) < mean(losses[:15]) - 0.3


def interrupt_after(monkeypatch, steps):
    real = medusa_train.head_losses
    calls = {"n": 0}

    def losses(*args, **kw):
        calls["n"] += 1
        if calls["n"] > steps:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(medusa_train, "head_losses", losses)
    return real


def test_interrupted_run_resumes_to_the_same_weights(target, data_file, tmp_path, monkeypatch):
    straight = run(target, data_file, tmp_path / "a", small_config(steps=40))
    real = interrupt_after(monkeypatch, 25)
    with pytest.raises(KeyboardInterrupt):
        run(target, data_file, tmp_path / "b", small_config(steps=40))
    assert torch.load(tmp_path / "b" / STATE_NAME, weights_only=True)["step"] == 25  # saved on Ctrl-C
    monkeypatch.setattr(medusa_train, "head_losses", real)
    resumed = run(target, data_file, tmp_path / "b", small_config(steps=40))
    assert resumed.resumed_from == 25 and resumed.steps_done == 40
    a = torch.load(tmp_path / "a" / STATE_NAME, weights_only=True)["heads"]
    b = torch.load(tmp_path / "b" / STATE_NAME, weights_only=True)["heads"]
    for key in a:
        torch.testing.assert_close(a[key], b[key])
    assert resumed.loss_history == straight.loss_history


def test_more_steps_continue_from_the_checkpoint_without_recomputing_hidden_states(target, data_file, tmp_path):
    run(target, data_file, tmp_path / "out", small_config(steps=20))
    cache_file = next((tmp_path / "cache").glob("*/hidden.safetensors"))
    stamp = cache_file.stat().st_mtime_ns
    report = run(target, data_file, tmp_path / "out", small_config(steps=30))
    assert report.resumed_from == 20 and report.steps_done == 30 and len(report.loss_history) == 30
    assert cache_file.stat().st_mtime_ns == stamp
    again = run(target, data_file, tmp_path / "out", small_config(steps=30))  # nothing left to do
    assert again.resumed_from == 30 and again.steps_done == 30


def test_resume_refuses_another_head_shape(target, data_file, tmp_path):
    run(target, data_file, tmp_path / "out", small_config(steps=5))
    with pytest.raises(ParameterError, match="another head shape"):
        run(target, data_file, tmp_path / "out", small_config(steps=10, num_heads=2))
    report = run(target, data_file, tmp_path / "out", small_config(steps=5, num_heads=2), resume=False)
    assert report.resumed_from == 0


def test_labels_are_the_targets_greedy_tokens_at_offset_k_plus_1():
    data = {"tokens": torch.arange(10), "greedy": torch.arange(10) + 100, "starts": torch.tensor([0, 6, 10])}
    rows, labels = build_examples(data, num_heads=2, labels="self")
    # chunk [0, 6): t <= 6 - 2 - 2 = 2; chunk [6, 10): t <= 6
    assert rows.tolist() == [0, 1, 2, 6]
    assert labels.tolist() == [[101, 102], [102, 103], [103, 104], [107, 108]]
    rows, labels = build_examples(data, num_heads=2, labels="text")
    assert labels.tolist() == [[2, 3], [3, 4], [4, 5], [8, 9]]


def test_full_softmax_loss_is_plain_cross_entropy():
    torch.manual_seed(0)
    feats, weight = torch.randn(2, 5, 8), torch.randn(20, 8)
    labels = torch.randint(0, 20, (5, 2))
    losses, hits = head_losses(feats, labels, weight, None, candidate_tokens=20, generator=None)
    for h in range(2):
        want = F.cross_entropy(feats[h] @ weight.T, labels[:, h])
        torch.testing.assert_close(losses[h], want)


def test_sampled_softmax_scores_labels_plus_corrected_negatives():
    gen = torch.Generator().manual_seed(0)
    labels = torch.tensor([[3, 7], [7, 11]])
    ids, correction, positives = sample_candidates(labels, vocab=1000, candidate_tokens=50, generator=gen)
    assert positives == 3 and ids[:3].tolist() == [3, 7, 11]
    assert ids.numel() == 50 and ids.unique().numel() == 50
    assert (correction[:3] == 0).all()
    torch.testing.assert_close(correction[3:], torch.full((47,), math.log((1000 - 3) / 47)))
    # the loss uses exactly these candidates
    torch.manual_seed(1)
    feats, weight = torch.randn(2, 2, 8), torch.randn(1000, 8)
    losses, _ = head_losses(feats, labels, weight, None, 50, torch.Generator().manual_seed(0))
    logits = feats @ weight[ids].T + correction
    targets = torch.tensor([[0, 1], [1, 2]])  # positions of the labels in ids
    for h in range(2):
        torch.testing.assert_close(losses[h], F.cross_entropy(logits[h], targets[h]))


def test_config_forbids_unknown_settings_and_short_text(target, tmp_path):
    with pytest.raises(Exception):
        TrainConfig(stepz=3)
    (tmp_path / "tiny.txt").write_text("ab")
    with pytest.raises(ParameterError):
        run(target, tmp_path / "tiny.txt", tmp_path / "out", small_config())
    with pytest.raises(ParameterError, match="does not exist"):
        run(target, tmp_path / "missing.txt", tmp_path / "out", small_config())


def test_checkpoint_config_records_training(target, data_file, tmp_path):
    run(target, data_file, tmp_path / "out", small_config(steps=20))
    cfg = json.loads((tmp_path / "out" / "medusa_config.json").read_text())
    assert cfg["training"]["steps"] == 20 and cfg["training"]["config"]["num_heads"] == 3
    assert cfg["dtype"] == "bfloat16"


def test_files_take_turns_so_one_large_file_cannot_crowd_out_the_others(tmp_path):
    (tmp_path / "big.txt").write_text("a" * 1000)
    (tmp_path / "small.txt").write_text("b" * 30)
    chunks = medusa_train.tokenize_files(CharTokenizer(), [tmp_path / "big.txt", tmp_path / "small.txt"],
                                         seq_len=20, max_tokens=70, min_len=5)
    assert [len(c) for c in chunks] == [20, 20, 20, 10]
    assert chunks[1] == [ALPHABET.index("b")] * 20 and chunks[2] == [ALPHABET.index("a")] * 20
    assert chunks[3] == [ALPHABET.index("b")] * 10


def test_default_training_text_ships_with_python_and_is_recorded_without_machine_paths(target, tmp_path):
    files = default_training_files()
    assert len(files) >= 10 and all(f.is_file() for f in files)
    info = medusa_train.describe_data(files[:2])
    assert all(i["file"].startswith("stdlib/") and len(i["sha256"]) == 64 for i in info)
    (tmp_path / "t.txt").write_text(TEXT)
    run(target, tmp_path / "t.txt", tmp_path / "out", small_config(steps=2))
    cfg = json.loads((tmp_path / "out" / "medusa_config.json").read_text())
    assert cfg["training"]["data"][0]["file"] == "t.txt"


def test_progress_bar_shows_the_loss_on_stderr(target, data_file, tmp_path, capsys):
    train_heads(target, [data_file], tmp_path / "out", small_config(steps=3), confirm=lambda plan: True,
                tokenizer=CharTokenizer(), cache_dir=tmp_path / "cache", progress=True)
    captured = capsys.readouterr()
    assert "training Medusa heads" in captured.err and "loss" in captured.err
    assert captured.out == ""
