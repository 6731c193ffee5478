"""What ladd does around any importer (``registry.engine.importing``): a plugin's mistake is one line naming the plugin,
an importer of the previous contract is told what changed, and a kill while the folder is written leaves nothing that
stops the next import."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from mdlm_reference import write_checkpoint
from support import import_mdlm

import registry
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.engine.importing import import_checkpoint
from registry.errors import LaddError
from registry.host.component import Origin
from registry.host.model_folders import PluginImporter

FAULTY = '''
    from pathlib import Path

    from registry.interfaces import Importer


    class Base(Importer):
        def read(self, source):
            return Path(source)

        def overrides(self, checkpoint):
            return ["experiment=binsaw/mdlm_cpu", "backbone.hidden=16", "backbone.layers=1", "backbone.heads=2"]

        def fill(self, model, checkpoint):
            for parameter in model.parameters():
                parameter.zero_()

        def record(self, checkpoint):
            return {"folder": checkpoint.name}

        def files(self, checkpoint):
            return []


    class Raising(Base):
        def fill(self, model, checkpoint):
            model.backbone.no_such_layer.weight.zero_()


    class Partial(Base):
        def fill(self, model, checkpoint):
            model.backbone.embed.weight.zero_()


    class Misspelt(Base):
        def overrides(self, checkpoint):
            return [*super().overrides(checkpoint), "backbone.hiden=16", "backbone.layer=1"]


    class Carrying(Base):
        def carried(self, checkpoint):
            return {"notes/readme.txt": checkpoint / "readme.txt"}


    class Escaping(Base):
        def carried(self, checkpoint):
            return {"../readme.txt": checkpoint / "readme.txt"}


    class Clobbering(Base):
        def carried(self, checkpoint):
            return {"config.json": checkpoint / "readme.txt"}


    class Missing(Base):
        def carried(self, checkpoint):
            return {"readme.txt": checkpoint / "absent.txt"}


    def older(source, out_dir, overrides, registry, overwrite):
        raise AssertionError("never called")
'''


@pytest.fixture(scope="module")
def reg():
    return registry.load()


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    folder = tmp_path_factory.mktemp("faulty")
    (folder / "faulty_importers.py").write_text(textwrap.dedent(FAULTY))
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(folder))
        origin = Origin("faulty", "faulty-dist", "1.0")
        yield lambda name: PluginImporter(name.lower(), f"faulty_importers:{name}", origin)


def test_the_base_importer_imports(faulty, reg, tmp_path):
    out = import_checkpoint(faulty("Base"), str(tmp_path), tmp_path / "out", [], reg)
    source = json.loads((out / "config.json").read_text())["source"]
    assert source == {"importer": "faulty:base", "folder": tmp_path.name, "files": {}}


def test_the_files_an_importer_carries_are_copied_into_the_folder_and_listed(faulty, reg, tmp_path):
    (tmp_path / "readme.txt").write_text("carried")
    out = import_checkpoint(faulty("Carrying"), str(tmp_path), tmp_path / "out", [], reg)
    assert (out / "notes" / "readme.txt").read_text() == "carried"
    assert json.loads((out / "config.json").read_text())["carries"] == ["notes/readme.txt"]


@pytest.mark.parametrize("name, message", [
    ("Escaping", "importer 'escaping' of plugin 'faulty' (faulty-dist 1.0): carried() names '../readme.txt', which is "
     "no path inside a model folder beside its own files"),
    ("Clobbering", "importer 'clobbering' of plugin 'faulty' (faulty-dist 1.0): carried() names 'config.json', which "
     "is no path inside a model folder beside its own files"),
    ("Missing", "importer 'missing' of plugin 'faulty' (faulty-dist 1.0): carried() gives {source}/absent.txt for "
     "'readme.txt', which is not a file"),
])
def test_a_carried_file_outside_the_folder_over_its_own_files_or_missing_is_refused(name, message, faulty, reg,
                                                                                   tmp_path):
    (tmp_path / "readme.txt").write_text("carried")
    with pytest.raises(LaddError) as refused:
        import_checkpoint(faulty(name), str(tmp_path), tmp_path / "out", [], reg)
    assert str(refused.value) == message.format(source=tmp_path)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, message", [
    ("Raising", "importer 'raising' of plugin 'faulty' (faulty-dist 1.0) failed in fill(): AttributeError: "),
    ("Partial", "importer 'partial' of plugin 'faulty' (faulty-dist 1.0) left {left} parameter(s) unfilled or not "
     "finite after fill() (first: backbone.condition): fill() must write every parameter of the model its overrides "
     "build; fix or update plugin 'faulty'"),
    ("Misspelt", "importer 'misspelt' of plugin 'faulty' (faulty-dist 1.0) gives config overrides that ladd refuses: "
     "backbone.hiden=16 (backbone.hiden: backbone 'dit' has no option 'hiden'; did you mean 'hidden'?"),
    ("older", "importer 'older' of plugin 'faulty' (faulty-dist 1.0) declares no contract version (LADD_CONTRACT) and "
     "predates contract 3: its faulty_importers:older is a function that wrote the model folder itself; since "
     "contract 3 an importer is a registry.interfaces.Importer"),
])
def test_an_importers_mistake_is_one_line_naming_its_plugin_and_nothing_is_written(name, message, faulty, reg,
                                                                                  tmp_path):
    overrides = ["experiment=binsaw/mdlm_cpu", "backbone.hidden=16", "backbone.layers=1", "backbone.heads=2"]
    parameters = list(build_experiment(compose(overrides, reg), reg).model.named_parameters())
    with pytest.raises(LaddError) as refused:
        import_checkpoint(faulty(name), str(tmp_path), tmp_path / "out", [], reg)
    message = message.format(left=len([n for n, _ in parameters if n != "backbone.embed.weight"]))
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)
    assert not (tmp_path / "out").exists()
    if name == "Misspelt":
        assert "; backbone.layer=1 (backbone.layer: backbone 'dit' has no option 'layer'" in str(refused.value)


_KILLED_WHILE_WRITING = """
import os, signal, sys
import registry.storage.weights as weights

def killed(model, path, metadata=None):  # as safetensors does: a temporary file beside the target, then the kill
    with open(os.path.join(os.path.dirname(path), ".tmpAbC123"), "wb") as handle:
        handle.write(b"partial")
    os.kill(os.getpid(), signal.SIGKILL)

weights.save_model = killed
from registry.cli import main
main(["import", "mdlm", *sys.argv[1:]])
"""


@pytest.mark.slow  # two killed processes
def test_a_kill_while_the_folder_is_written_leaves_nothing_that_stops_a_second_import(reg, tmp_path):
    source, out = tmp_path / "mdlm", tmp_path / "out"
    write_checkpoint(source, hidden=16, blocks=1, heads=2, cond=8, time_conditioning=False, length=16)
    killed = subprocess.run([sys.executable, "-c", _KILLED_WHILE_WRITING, str(source), str(out)], timeout=300)
    assert killed.returncode == -9
    assert all(".ladd-" in path.name for path in out.iterdir()), sorted(p.name for p in out.iterdir())
    import_mdlm(str(source), out, [], reg)
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    subprocess.run([sys.executable, "-c", _KILLED_WHILE_WRITING, str(source), str(out), "--overwrite"], timeout=300)
    import_mdlm(str(source), out, [], reg, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors"]


def test_a_scratch_folder_is_ladds_temporary_removed_with_what_it_holds_once_its_writer_is_gone(tmp_path):
    import os

    from registry.storage.files import is_abandoned, remove_partials, scratch_folder

    with scratch_folder(tmp_path / "model.safetensors") as running:
        (running / ".tmpXyZ").write_bytes(b"safetensors' own temporary")
        assert not is_abandoned(running)
        remove_partials(tmp_path)
        assert running.is_dir(), "a running writer's folder stays"
        gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        abandoned = tmp_path / running.name.replace(f"-{os.getpid()}-", f"-{gone.stdout.strip()}-")
        running.rename(abandoned)
        remove_partials(tmp_path)
        assert not abandoned.exists()
        running.mkdir()  # so that leaving the block has its folder to remove
    assert list(tmp_path.iterdir()) == []
