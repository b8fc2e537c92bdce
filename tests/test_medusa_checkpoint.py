"""Medusa checkpoints: our safetensors format (compact and full) and upstream's medusa_lm_head.pt."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from torch import nn

from conftest import VOCAB
from tools.engine import autoregressive
from tools.engine.medusa import MedusaHeads, MedusaParams, generate
from tools.engine.types import GenerationSettings
from tools.errors import ModelIntegrityError, ModelNotFoundError
from tools.medusa.checkpoint import CONFIG_NAME, WEIGHTS_NAME, load_checkpoint, load_heads, save_heads

HIDDEN = 32


def random_heads(num_heads=3, layers=1, shared=True, seed=0):
    torch.manual_seed(seed)
    heads = MedusaHeads(HIDDEN, VOCAB, num_heads, layers, shared_projection=shared)
    with torch.no_grad():
        for p in heads.parameters():
            p.normal_(0.0, 0.3)
    return heads


# upstream's module layout (FasterDecoding/Medusa medusa/model/medusa_model.py), rebuilt here
class UpstreamResBlock(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        self.act = nn.SiLU()

    def forward(self, x):
        return x + self.act(self.linear(x))


def upstream_heads(num_heads, layers, vocab=VOCAB, seed=0):
    torch.manual_seed(seed)
    # upstream repeats one ResBlock object `layers` times ([ResBlock(h)] * n): keys exist per index
    heads = nn.ModuleList(
        nn.Sequential(*([UpstreamResBlock(HIDDEN)] * layers), nn.Linear(HIDDEN, vocab, bias=False))
        for _ in range(num_heads)
    )
    with torch.no_grad():
        for p in heads.parameters():
            p.normal_(0.0, 0.3)
    return heads


def write_upstream(folder, heads, config_heads, layers, base="lmsys/vicuna-7b-v1.3"):
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(heads.state_dict(), folder / "medusa_lm_head.pt")
    (folder / "config.json").write_text(json.dumps({
        "base_model_name_or_path": base, "medusa_num_heads": config_heads, "medusa_num_layers": layers,
        "transformers_version": "4.34.0",
    }))


def test_compact_checkpoint_round_trip(tmp_path, tiny_qwen):
    heads = random_heads()
    save_heads(heads, tmp_path / "h", base_model="tiny-qwen", training={"steps": 3})
    cfg = json.loads((tmp_path / "h" / CONFIG_NAME).read_text())
    assert cfg["format"] == "specpilot-medusa" and cfg["shared_projection"] is True
    assert (cfg["medusa_num_heads"], cfg["medusa_num_layers"], cfg["hidden_size"], cfg["vocab_size"]) == (3, 1, 32, 64)
    assert cfg["training"] == {"steps": 3}
    from safetensors.torch import load_file

    keys = set(load_file(str(tmp_path / "h" / WEIGHTS_NAME)))
    assert keys == {f"blocks.{h}.0.linear.{k}" for h in range(3) for k in ("weight", "bias")}  # no projection
    ckpt = load_checkpoint(tmp_path / "h", tiny_qwen)
    assert ckpt.format == "specpilot" and ckpt.base_model == "tiny-qwen"
    hidden = torch.randn(4, HIDDEN)
    torch.testing.assert_close(ckpt.heads(hidden), heads.attach(tiny_qwen)(hidden))


def test_full_checkpoint_keeps_own_projections_and_dtype(tmp_path):
    heads = random_heads(num_heads=2, layers=2, shared=False)
    save_heads(heads, tmp_path / "h", dtype="bfloat16")
    loaded = load_heads(tmp_path / "h")
    assert loaded.shared_projection is False and loaded.num_layers == 2
    assert loaded.projections[0].weight.dtype == torch.bfloat16
    hidden = torch.randn(3, HIDDEN)
    torch.testing.assert_close(loaded(hidden).float(), heads(hidden), rtol=0.05, atol=0.1)
    assert load_heads(tmp_path / "h", dtype=torch.float32).projections[0].weight.dtype == torch.float32


def test_loading_with_a_model_takes_its_dtype(tmp_path):
    from conftest import make_tiny_model

    model = make_tiny_model("llama", dtype=torch.bfloat16)
    save_heads(random_heads(), tmp_path / "h", dtype="float32")
    heads = load_heads(tmp_path / "h", model)
    assert heads.blocks[0][0].linear.weight.dtype == torch.bfloat16
    assert not heads.blocks[0][0].linear.weight.requires_grad


@pytest.mark.parametrize("layers", [1, 2])
def test_upstream_checkpoint_loads_with_its_key_layout(tmp_path, tiny_llama, layers):
    up = upstream_heads(num_heads=4, layers=layers)
    keys = set(up.state_dict())
    assert "0.0.linear.weight" in keys and "0.0.linear.bias" in keys and f"0.{layers}.weight" in keys
    write_upstream(tmp_path / "up", up, config_heads=4, layers=layers)
    ckpt = load_checkpoint(tmp_path / "up", tiny_llama)
    assert ckpt.format == "upstream" and ckpt.base_model == "lmsys/vicuna-7b-v1.3"
    heads = ckpt.heads
    assert (heads.num_heads, heads.num_layers, heads.shared_projection) == (4, layers, False)
    hidden = torch.randn(5, HIDDEN)
    with torch.no_grad():
        want = torch.stack([up[h](hidden) for h in range(4)])
    torch.testing.assert_close(heads(hidden), want)


def test_upstream_head_count_comes_from_the_weights(tmp_path, caplog):
    # upstream's v0.1 configs say 2 heads for weights that hold 5
    write_upstream(tmp_path / "up", upstream_heads(num_heads=5, layers=1), config_heads=2, layers=1)
    with caplog.at_level(logging.WARNING):
        heads = load_heads(tmp_path / "up")
    assert heads.num_heads == 5
    assert "weights hold 5" in caplog.text


def test_upstream_heads_decode_exactly(tmp_path, tiny_llama):
    write_upstream(tmp_path / "up", upstream_heads(num_heads=4, layers=1), config_heads=4, layers=1)
    heads = load_heads(tmp_path / "up", tiny_llama)
    settings = GenerationSettings(max_new_tokens=20)
    for prompt in ([1, 2, 3], [40, 41, 42, 43]):
        r = generate(tiny_llama, heads, prompt, settings, MedusaParams(tree="mc_sim_7b_63"))
        assert r.output_ids == autoregressive.generate(tiny_llama, prompt, settings).output_ids


def test_upstream_safetensors_variant(tmp_path):
    from safetensors.torch import save_file

    up = upstream_heads(num_heads=2, layers=1)
    folder = tmp_path / "up"
    write_upstream(folder, up, config_heads=2, layers=1)
    (folder / "medusa_lm_head.pt").unlink()
    save_file({k: v.contiguous() for k, v in up.state_dict().items()}, str(folder / "medusa_lm_head.safetensors"))
    assert load_heads(folder).num_heads == 2


def test_missing_and_broken_checkpoints_are_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        load_heads(tmp_path / "nothing-here")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="holds no Medusa heads"):
        load_heads(tmp_path / "empty")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match="HF_HUB_OFFLINE"):
        load_heads("FasterDecoding/medusa-vicuna-7b-v1.3")
    save_heads(random_heads(), tmp_path / "h")
    cfg = json.loads((tmp_path / "h" / CONFIG_NAME).read_text())
    cfg["hidden_size"] = 16
    (tmp_path / "h" / CONFIG_NAME).write_text(json.dumps(cfg))
    with pytest.raises(ModelIntegrityError, match="shape"):
        load_heads(tmp_path / "h")
    cfg["hidden_size"], cfg["medusa_num_heads"] = 32, 4
    (tmp_path / "h" / CONFIG_NAME).write_text(json.dumps(cfg))
    with pytest.raises(ModelIntegrityError, match="missing"):
        load_heads(tmp_path / "h")
    torch.save({"medusa.0.weight": torch.zeros(2, 2)}, tmp_path / "bad.pt")
    write_upstream(tmp_path / "up", upstream_heads(1, 1), 1, 1)
    (tmp_path / "bad.pt").replace(tmp_path / "up" / "medusa_lm_head.pt")
    with pytest.raises(ModelIntegrityError, match="unexpected key"):
        load_heads(tmp_path / "up")


def test_a_fitted_tree_brings_the_tokens_per_step_it_gave_on_the_fit_half(tmp_path, tiny_qwen):
    from tools.medusa.checkpoint import TREE_NAME

    save_heads(random_heads(), tmp_path / "h", base_model="tiny-qwen", training={"steps": 3})
    assert load_checkpoint(tmp_path / "h").heads.tree_tokens is None  # no tree fitted
    (tmp_path / "h" / TREE_NAME).write_text(json.dumps({"choices": [[0], [1], [0, 0]], "fit_mean_accepted": 0.48}))
    heads = load_checkpoint(tmp_path / "h").heads
    assert heads.tree_choices == [[0], [1], [0, 0]] and heads.tree_tokens == pytest.approx(1.48)
    (tmp_path / "h" / TREE_NAME).write_text(json.dumps({"choices": [[0]]}))  # a tree without the figure
    assert load_checkpoint(tmp_path / "h").heads.tree_tokens is None
