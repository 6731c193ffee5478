"""Plugins held out from ladd's own code, installed as their authors would and driven through the ladd command: those
written from the docs for the newest parts of the contract (a block backbone, token decoders, commands, an importer
carrying a tokenizer) with deliberately broken variants, and earlier ones unchanged (a command of contract 3, a
sampler registered under a name ladd has since given its own). Each gets the promised result: it works, it works with
one deprecation line, or `ladd plugins check` fails it in one line naming the plugin, the component and the promise.
"""
from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support import FIXTURES, TINY, fake_distribution, install_plugin

import registry
from registry import contract
from registry.cli import main

pytestmark = pytest.mark.slow  # pip installs the plugins; tiny training runs through the ladd command

PLUGINS = ("decoders", "blocks", "runinfo", "words", "catalog")
KILL_SWITCH = Path(__file__).parents[1] / "kill_switch.py"
#: a sampler `confidence` of a plugin written before ladd shipped its own (contract 3's token decoder interface)
CLASH = """
    import torch

    from registry import ComponentSpec, hookimpl
    from registry.interfaces import Needs, TokenDecoder
    from registry.toolkit.sampling import decode_tokens, process_rules

    LADD_CONTRACT = 3


    class Plain(TokenDecoder):
        needs = Needs(latent=False, blocks=False)

        def sample(self, model, num_samples, steps, generator, fixed=None):
            return decode_tokens(self, model, num_samples, steps, generator, fixed)

        def rules(self, model, chain, steps):
            return process_rules(chain, steps, False)


    @hookimpl
    def ladd_components():
        return [ComponentSpec("sampler", "confidence", Plain, None, "the process's own steps, no fast path")]
"""
CATALOG_LINE = (
    "plugin 'catalog' adds its command with commands.add_parser(NAME) and parser.set_defaults(run=function), which "
    "plugin contract 4 deprecated and contract 5 refuses: add it with commands.add_command(NAME, function, help=...), "
    "whose function is called as function(args, ladd) and whose arguments may have any name (docs/contract.md, "
    "contract 4)"
)
SHORT = ["experiment=binsaw/mdlm_cpu", *TINY, "train.stages=[{steps:2}]"]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> str:
    first, *more = (FIXTURES / "plugins" / name for name in PLUGINS)
    return install_plugin(first, tmp_path_factory.mktemp("site"), *more)


@pytest.fixture(scope="module")
def clash(tmp_path_factory) -> str:
    return fake_distribution(tmp_path_factory.mktemp("clash"), "clash", CLASH)


@pytest.fixture
def installed(site):
    """The plugins importable by this process and found by its registry; the registry as before afterwards."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(site)
        yield site
    registry.load(reload=True)


def ladd(*args: object, **env: str) -> tuple[int, str, str]:
    """The exit status, output and errors of the ladd command run in this process, with ``env`` set."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        for key, value in env.items():
            patch.setenv(key, value)
        registry.load(reload=True)
        try:
            status = main([str(a) for a in args])
        except SystemExit as exit:  # argparse refusing an argument
            status = exit.code
    contract._TOLD.clear()  # each command tells its deprecations, as a new process would
    return status, out.getvalue(), err.getvalue()


BROKEN = {
    "decoders": [
        "sampler 'decoders:peeking': breaks TokenDecoder (its steps run by sampler 'builtin:joint' as its "
        "token_decoder): with process 'masked' and latent 'continuous' and process 'vp', sampling with sampler "
        "'joint' with it as token_decoder: IncompatibleComponentsError: a model with a latent channel was asked for "
        "token predictions without its latent (y_t None): the tokens are predicted given the latent the sampler holds",
        "sampler 'decoders:stretchy': breaks variable_length (sample(..., length=N) at twice the trained length): "
        "with process 'autoregressive', sampler 'stretchy' asked for 16 positions gives samples of torch.int64, "
        "shape (3, 8)",
    ],
    "blocks": [
        "backbone 'blocks:leaky': breaks block attention (attention = AttentionPattern(block=4, span=None)): changing "
        "the clean tokens (context) of positions 0:4 changes its output at position 0, which the pattern keeps from "
        "seeing them",
        "backbone 'blocks:stale': breaks CachingBackbone (its cached pass equal to its full pass): a pass over the "
        "window 2:4 of a cache of the same tokens gives other token logits than its full pass (by up to 0.196)",
    ],
    "runinfo": [
        "command 'tally' of plugin 'runinfo': breaks a command (it runs on a run folder: `ladd NAME` with its "
        "example arguments): `ladd tally {model}` fails: command 'tally' of plugin 'runinfo' failed: KeyError: 1",
    ],
    "words": [
        "importer 'words_sorted' of plugin 'words': breaks the tokenizer's vocabulary matching the network's token "
        "table: the model's tokenizer gives id 0 the token '<eos>', the checkpoint's vocabulary '[UNK]'",
        "importer 'words_swapped' of plugin 'words': breaks Importer.reference (the imported logits equal the "
        "checkpoint's own): the imported model's token logits differ from the checkpoint's own (reference()) by up "
        "to 3.14",
    ],
}


@pytest.mark.parametrize("plugin", sorted(BROKEN))
def test_plugins_check_passes_what_keeps_its_promises_and_names_each_broken_one_in_one_line(installed, plugin):
    status, _, err = ladd("plugins", "check", plugin)
    lines = [line for line in err.strip().splitlines() if not line.startswith("ladd: deprecated: plugin 'catalog'")]
    assert status == 2
    assert lines[-len(BROKEN[plugin]) - 1 :] == [
        f"ladd: error: plugin {plugin!r} has {len(BROKEN[plugin])} problem(s):", *(f"  {b}" for b in BROKEN[plugin])
    ], "the components written from the docs (blockattn, leftmost, runinfo, words) are not named"


def test_a_command_loads_a_run_through_the_contract_and_an_argument_named_run_is_its_own(installed, tmp_path):
    run = tmp_path / "run"
    status, _, err = ladd("train", *SHORT, f"run_dir={run}")
    assert status == 0, err
    status, out, err = ladd("runinfo", run, "--run", "mine")
    assert status == 0, err
    assert out.splitlines() == [
        "mine: backbone builtin:dit", "mine: dataset builtin:binsaw", "mine: metric builtin:swd",
        "mine: process builtin:masked", "mine: sampler builtin:ancestral", "mine: schedule builtin:linear",
        "mine: a sample of 16 tokens",
    ]


def test_an_earlier_command_works_with_a_deprecation_line_and_from_contract_5_is_left_out_naming_the_migration(
    installed, monkeypatch, tmp_path
):
    status, out, err = ladd("catalog", "--kind", "metric")
    assert status == 0 and "| metric | swd | builtin |" in out
    assert err.splitlines()[0] == f"ladd: deprecated: {CATALOG_LINE}"
    runner = fake_distribution(tmp_path / "runner", "runner", """
        from registry import hookimpl

        @hookimpl
        def ladd_commands(commands):
            parser = commands.add_parser("go")
            parser.add_argument("--run", help="a value that would take the handler's place")
            parser.set_defaults(run=print)
    """)
    monkeypatch.syspath_prepend(runner)
    status, _, err = ladd("go")
    assert status == 2 and (
        "ladd: warning: plugin 'runner': ladd_commands() command 'go' has an argument '--run' whose value would take "
        "the place of its handler (set_defaults(run=...)): add the command with commands.add_command(NAME, "
        "function), whose arguments may have any name; its commands are left out"
    ) in err.splitlines(), "refused in one line instead of a traceback when it runs"
    monkeypatch.setattr(contract, "CONTRACT_VERSION", 5)
    status, _, err = ladd("catalog")
    assert status == 2 and "invalid choice: 'catalog'" in err
    assert (
        "ladd: warning: plugin 'catalog': ladd_commands() " + CATALOG_LINE.removeprefix("plugin 'catalog' ").replace(
            "which plugin contract 4 deprecated and contract 5 refuses",
            "which plugin contract 5 refuses (this ladd implements contract 5)",
        ) + "; its commands are left out"
    ) in err.splitlines()


def _samples(path: Path) -> str:
    return path.read_text()


def test_a_bare_name_two_plugins_register_is_refused_and_runs_keep_the_plugins_they_recorded(
    installed, clash, monkeypatch, tmp_path
):
    sampled = ["--steps", "4", "--num", "4", "--seed", "3"]
    before = tmp_path / "before"
    status, _, err = ladd("train", *SHORT, "sampler=confidence", f"run_dir={before}")
    assert status == 0, err
    status, _, err = ladd("sample", before, *sampled, "--out", tmp_path / "alone.txt")
    assert status == 0, err
    monkeypatch.syspath_prepend(clash)
    refusal = (
        "ladd: error: sampler 'confidence' is registered by several plugins: 'builtin' (ladd 0.1.0), 'clash' (clash "
        "0.0.1); name the one you mean: builtin:confidence or clash:confidence"
    )
    status, _, err = ladd("train", *SHORT, "sampler=confidence", f"run_dir={tmp_path / 'new'}")
    assert (status, err.strip().splitlines()[-1]) == (2, refusal) and not (tmp_path / "new").exists()
    status, _, err = ladd("sample", before, *sampled, "--sampler", "confidence", "--out", tmp_path / "x.txt")
    assert (status, err.strip().splitlines()[-1]) == (2, refusal)

    status, _, err = ladd("sample", before, *sampled, "--out", tmp_path / "beside.txt")
    assert status == 0, err
    assert _samples(tmp_path / "beside.txt") == _samples(tmp_path / "alone.txt"), "the run keeps ladd's confidence"
    status, _, err = ladd("sample", before, *sampled, "--sampler", "clash:confidence", "--out", tmp_path / "c.txt")
    assert status == 0, err

    theirs = tmp_path / "theirs"
    status, _, err = ladd("train", *SHORT, "sampler=clash:confidence", f"run_dir={theirs}")
    assert status == 0, err
    recorded = json.loads((theirs / "components.json").read_text())["sampler"]
    assert (recorded["qualified"], recorded["distribution"]) == ("clash:confidence", "clash")
    status, _, err = ladd("sample", theirs, *sampled, "--out", tmp_path / "t.txt", LADD_PLUGINS_BLOCK="clash")
    assert (status, err.strip().splitlines()[-1]) == (
        2,
        f"ladd: error: run {theirs}'s sampler is sampler 'confidence' from plugin 'clash' (distribution clash 0.0.1), "
        "which is not available: plugin 'clash' is not loaded (blocked by LADD_PLUGINS_BLOCK)",
    )


def test_a_resumed_run_keeps_the_component_it_recorded_when_a_plugin_registering_its_name_arrives(
    installed, clash, monkeypatch, tmp_path
):
    run = tmp_path / "run"
    arguments = ["train", "experiment=binsaw/mdlm_cpu", *TINY, "train.stages=[{steps:4}]", "train.checkpoint_every=1",
                 "sampler=confidence", f"run_dir={run}"]
    killed = subprocess.run([sys.executable, str(KILL_SWITCH), "SIGKILL:after:2:stage1/last.ckpt", *arguments],
                            capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr
    monkeypatch.syspath_prepend(clash)
    status, _, err = ladd(*arguments)
    assert status == 0, err
    assert json.loads((run / "components.json").read_text())["sampler"]["qualified"] == "builtin:confidence"


def test_a_nested_token_decoder_is_resolved_as_a_slot_is_and_recorded_in_the_run_and_its_evaluation(
    installed, clash, monkeypatch, tmp_path
):
    monkeypatch.syspath_prepend(clash)
    ladd_seq = ["experiment=binsaw/coladd_seq_cpu", *TINY, "train.stages=[{steps:2}]", "sampler.latent_steps=2"]
    status, _, err = ladd("train", *ladd_seq, "sampler.token_decoder=confidence", f"run_dir={tmp_path / 'x'}")
    last = err.strip().splitlines()[-1]
    assert status == 2 and "name the one you mean: builtin:confidence or clash:confidence" in last
    status, _, err = ladd("train", *ladd_seq, "sampler.token_decoder_options.remasking=x", f"run_dir={tmp_path / 'y'}")
    assert status == 2 and err.strip().splitlines()[-1].startswith(
        "ladd: error: token_decoder_options: sampler 'ancestral' has no option 'remasking'"
    ), "the decoder's options are checked against its own config when the config is composed"
    run = tmp_path / "run"
    status, _, err = ladd("train", *ladd_seq, "sampler.token_decoder=clash:confidence", f"run_dir={run}")
    assert status == 0, err
    nested = json.loads((run / "components.json").read_text())["sampler"]["nested"]["token_decoder"]
    assert (nested["qualified"], nested["distribution"]) == ("clash:confidence", "clash")
    quick = ["--budgets", "2", "--num-samples", "8", "--batch-size", "8", "--repeats", "1", "--floor-draws", "1",
             "--bound-draws", "0"]
    status, _, err = ladd("eval", run, *quick)
    assert status == 0, err
    result = json.loads(next(run.glob("eval_*.json")).read_text())["components"]
    assert (result["sampler"]["qualified"], result["sampler"]["nested"]["token_decoder"]["qualified"]) == (
        "builtin:sequential", "clash:confidence",
    )
    assert result["metric"]["plugin"] == "builtin"
    status, _, err = ladd("eval", run, *quick, "--sampler", "joint", "--sampler-option", "token_decoder=confidence",
                          "--out", tmp_path / "j.json")
    assert status == 2 and "name the one you mean" in err


def test_the_imported_example_of_a_word_table_loads_samples_and_decodes_with_its_tokenizer(installed, tmp_path):
    from ladd_words_plugin.importer import WordsImporter

    source = WordsImporter().example(tmp_path / "table")
    status, _, err = ladd("import", "words", source, tmp_path / "model")
    assert status == 0, err
    experiment = registry.load_trained(tmp_path / "model")
    tokens = experiment.sampler.sample(experiment.model, 2, 4, torch.Generator().manual_seed(0)).tokens
    words = experiment.dataset.tokenizer.batch_decode(tokens.tolist())
    assert all(set(text.split()) <= {"[UNK]", "<eos>", "to", "be", "or", "not", "that", "is"} for text in words)
