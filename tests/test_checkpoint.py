"""The shipped checkpoint: package data, no network, small, and it reproduces its recorded accuracy."""

import socket

import pytest
import torch

from explainer.model import task
from explainer.model.cached_lm import CachedLM
from explainer.model.checkpoint import load_pretrained, load_state_dict, metadata, num_parameters
from explainer.model.diffusion_gemma import DiffusionGemmaModel
from explainer.model.stages import get_pp_indices


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the checkpoint must load without network access")
    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_loads_from_package_data_without_network(no_network):
    meta = metadata()
    model = load_pretrained()
    assert isinstance(model, DiffusionGemmaModel) and not model.training
    assert num_parameters(model) == meta["parameters"]
    assert meta["checkpoint_bytes"] < 2 * 1024 * 1024
    assert meta["config"]["vocab_size"] == task.VOCAB_SIZE
    assert meta["config"]["canvas_length"] == task.CANVAS_LENGTH
    for key in ("seed", "steps", "train_seconds"):
        assert key in meta["training"]
    assert meta["held_out"]["exact_match"] >= 0.9


def test_stage_slices_load_only_their_weights():
    meta = metadata()
    n = meta["config"]["num_hidden_layers"]
    state = load_state_dict()
    whole = load_pretrained()
    parts = [load_pretrained(*get_pp_indices(n, r, 2)) for r in range(2)]
    assert parts[0].is_first_rank and parts[1].is_last_rank
    assert torch.equal(parts[1].embed_tokens.weight, state["embed_tokens.weight"])   # the last rank's head copy
    owned = set(parts[0].state_dict()) | set(parts[1].state_dict())
    assert owned == set(whole.state_dict()) == set(state)


def test_reproduces_recorded_held_out_accuracy():
    from explainer.model.objective import held_out_exact_match

    rec = metadata()["held_out"]
    res = held_out_exact_match(load_pretrained(), seed=rec["seed"], batch_size=rec["batch_size"])
    assert res["n"] == rec["n"] == len(task.held_out_numbers())
    assert res["exact_match"] == rec["exact_match"]
    assert res["exact_match"] >= 0.9


def test_generation_is_seeded_and_block_autoregressive():
    from explainer.sampler import StepRecorder, generate

    cfg = metadata()["generation_config"]
    prompt = torch.tensor([task.encode("451")])
    outs = []
    for _ in range(2):
        rec = StepRecorder()
        outs.append(generate(CachedLM(load_pretrained()), prompt, generator=torch.Generator().manual_seed(0),
                             recorder=rec, **cfg))
    assert torch.equal(outs[0], outs[1])
    assert task.decode(outs[0][0, 3:]) == task.spell(451)
    assert len(rec.canvases) == 3                      # "four hundred fifty-one" + EOS spans 3 canvases
